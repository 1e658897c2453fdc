//! Reading and writing a stack's file: TOML, JSON or YAML, each error one line
//! that names the path of the setting at fault.

use super::routes::StackSpec;
use super::{ConfigError, Registry, StackConfig};

/// The largest file read: a configuration is kilobytes; more is refused unread.
pub const MAX_FILE: usize = 1024 * 1024;

/// Reads a stack's settings from TOML (feature `toml`).
///
/// Every field is optional and defaults to the builders' defaults; a route's
/// `retry` and `hedge` settings override only what they name, over the top-level
/// `retry` and `hedge`.
///
/// # Errors
///
/// A [`ConfigError`] naming the path of the first field at fault: a syntax error,
/// an unknown field (`routes[2].retry.max_atempts`), a wrong type, or a value its
/// builder refuses (with the rule it breaks).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// let config = backstop::config::from_toml(r#"
///     [retry]
///     max_attempts = 3
///     backoff = { base = "100ms", max = "2s" }
///     rules = { retryable_statuses = [429, "502-504"] }
///
///     [[routes]]
///     name = "payments"
///     path_prefix = "/payments"
///     methods = ["POST", "PUT"]
///     retry = { max_attempts = 1 }
///
///     [circuit_breaker]
///     cooldown = "5s"
/// "#)?;
/// let req = http::Request::post("http://api.test/payments/7").body(()).unwrap();
/// assert_eq!(config.routes.policy_for(&req).max_attempts(), 1);
/// // The route inherits what it does not name.
/// assert_eq!(config.routes.policy_for(&req).backoff().max(), Duration::from_secs(2));
///
/// let typo = backstop::config::from_toml("[[routes]]\nretry = { max_atempts = 2 }");
/// assert!(typo.unwrap_err().to_string().starts_with("routes[0].retry.max_atempts"));
/// # Ok::<(), backstop::config::ConfigError>(())
/// ```
#[cfg(feature = "toml")]
pub fn from_toml(text: &str) -> Result<StackConfig, ConfigError> {
    Registry::new().from_toml(text)
}

/// Reads a stack's settings from JSON (feature `json`), as [`from_toml`] does.
///
/// # Errors
///
/// As [`from_toml`].
///
/// # Examples
///
/// ```
/// let config = backstop::config::from_json(r#"{"retry": {"max_attempts": 2}, "budget": false}"#)?;
/// assert!(config.budget.is_none());
/// assert!(backstop::config::from_json(r#"{"retry": {"max_attempts": 0}}"#).is_err());
/// # Ok::<(), backstop::config::ConfigError>(())
/// ```
#[cfg(feature = "json")]
pub fn from_json(text: &str) -> Result<StackConfig, ConfigError> {
    Registry::new().from_json(text)
}

/// Reads a stack's settings from YAML (feature `yaml`), as [`from_toml`] does.
///
/// # Errors
///
/// As [`from_toml`].
///
/// # Examples
///
/// ```
/// let config = backstop::config::from_yaml("retry:\n  max_attempts: 4\n")?;
/// let req = http::Request::get("http://api.test/").body(()).unwrap();
/// assert_eq!(config.routes.policy_for(&req).max_attempts(), 4);
/// # Ok::<(), backstop::config::ConfigError>(())
/// ```
#[cfg(feature = "yaml")]
pub fn from_yaml(text: &str) -> Result<StackConfig, ConfigError> {
    Registry::new().from_yaml(text)
}

/// Writes a stack's settings as TOML (feature `toml`): every setting, each
/// route's in full, read back by [`from_toml`] to the same settings.
///
/// # Errors
///
/// A [`ConfigError`] when a setting is code that no file can hold (a classifier
/// of rules that are not [named](crate::policy::Rules::named), a breaker's own
/// failure rule, a key generator, a partition by key).
#[cfg(feature = "toml")]
pub fn to_toml(config: &StackConfig) -> Result<String, ConfigError> {
    toml::to_string(config).map_err(|e| ConfigError::new("", one_line(&e.to_string())))
}

impl Registry {
    /// [`from_toml`], with the rules registered here.
    ///
    /// # Errors
    ///
    /// As [`from_toml`], and a name of rules that are not registered here.
    #[cfg(feature = "toml")]
    pub fn from_toml(&self, text: &str) -> Result<StackConfig, ConfigError> {
        self.read(text, |text| {
            let de = toml::Deserializer::parse(text)
                .map_err(|e| ConfigError::new("", one_line(e.message())))?;
            tracked(de, |e: toml::de::Error| e.message().to_owned())
        })
    }

    /// [`from_json`], with the rules registered here.
    ///
    /// # Errors
    ///
    /// As [`from_json`], and a name of rules that are not registered here.
    #[cfg(feature = "json")]
    pub fn from_json(&self, text: &str) -> Result<StackConfig, ConfigError> {
        self.read(text, |text| {
            let mut de = serde_json::Deserializer::from_str(text);
            let spec = tracked(&mut de, |e: serde_json::Error| e.to_string())?;
            de.end()
                .map_err(|e| ConfigError::new("", one_line(&e.to_string())))?;
            Ok(spec)
        })
    }

    /// [`from_yaml`], with the rules registered here.
    ///
    /// # Errors
    ///
    /// As [`from_yaml`], and a name of rules that are not registered here.
    #[cfg(feature = "yaml")]
    pub fn from_yaml(&self, text: &str) -> Result<StackConfig, ConfigError> {
        self.read(text, |text| {
            let mut path_error = None;
            let spec = serde_saphyr::with_deserializer_from_str(text, |de| {
                serde_path_to_error::deserialize(de).map_err(|e| {
                    path_error = Some(e.path().to_string());
                    e.into_inner()
                })
            });
            spec.map_err(|e| {
                let path = path_error.unwrap_or_default();
                ConfigError::new(clean(&path), one_line(&yaml_message(&e)))
            })
        })
    }

    /// Reads `text` with `parse` (into the file's spec) inside this registry's
    /// scope, then builds the stack's settings from it.
    fn read(
        &self,
        text: &str,
        parse: impl FnOnce(&str) -> Result<StackSpec, ConfigError>,
    ) -> Result<StackConfig, ConfigError> {
        refuse_large(text)?;
        self.scope(|| parse(text)?.build())
    }
}

/// Refuses a file over [`MAX_FILE`], before anything parses it.
pub(super) fn refuse_large(text: &str) -> Result<(), ConfigError> {
    if text.len() > MAX_FILE {
        return Err(ConfigError::new(
            "",
            format!("the file is over {MAX_FILE} bytes; a configuration is far smaller"),
        ));
    }
    Ok(())
}

/// Deserializes the file's spec, tracking the path of the field at fault.
#[cfg(any(feature = "json", feature = "toml"))]
fn tracked<'de, D>(de: D, message: impl Fn(D::Error) -> String) -> Result<StackSpec, ConfigError>
where
    D: serde::Deserializer<'de>,
{
    serde_path_to_error::deserialize::<_, StackSpec>(de).map_err(|e| {
        let path = clean(&e.path().to_string());
        ConfigError::new(path, one_line(&message(e.into_inner())))
    })
}

/// serde_path_to_error writes the root as `.`; a file's root is the empty path.
fn clean(path: &str) -> String {
    if path == "." {
        String::new()
    } else {
        path.to_owned()
    }
}

/// The first line of a parser's message, without the position details some add.
fn one_line(message: &str) -> String {
    let line = message.lines().next().unwrap_or("").trim();
    let line = line.strip_suffix('.').unwrap_or(line);
    if line.is_empty() {
        "invalid file".to_owned()
    } else {
        line.to_owned()
    }
}

/// A YAML error's message, without the snippet of the file it may render.
#[cfg(feature = "yaml")]
fn yaml_message(e: &serde_saphyr::Error) -> String {
    e.to_string()
}
