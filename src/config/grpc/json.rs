//! A walk over a parsed JSON document that knows where it is: every value
//! carries its path (`methodConfig[0].retryPolicy`), so an error or a field left
//! unmapped names it, and keys are found as gRPC reads them.

use std::time::Duration;

use serde_json::{Map, Value};

use crate::config::{parse_duration, ConfigError, Unmapped};
use crate::grpc::Code;
use crate::policy::same_name;

/// A value of the document and where it is.
#[derive(Clone, Debug)]
pub(super) struct Field<'a> {
    /// The dotted path with indices (`methodConfig[0].retryPolicy`); empty for the
    /// document itself.
    pub(super) path: String,
    pub(super) value: &'a Value,
}

/// `parent.key`, the key as the file writes it but cut short and with anything
/// but printable ASCII shown as `?`: a path names a field, in one line, without
/// repeating a long text.
pub(super) fn join(parent: &str, key: &str) -> String {
    let mut out = String::with_capacity(parent.len() + 1 + key.len().min(64));
    out.push_str(parent);
    if !out.is_empty() {
        out.push('.');
    }
    out.extend(
        key.chars()
            .take(64)
            .map(|c| if c.is_ascii_graphic() { c } else { '?' }),
    );
    out
}

/// An error at `path`.
pub(super) fn error(path: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::new(path, message)
}

/// What a JSON value is, for an error that says what was expected.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

impl<'a> Field<'a> {
    fn wrong(&self, want: &str) -> ConfigError {
        error(
            &self.path,
            format!("must be {want}, found {}", kind(self.value)),
        )
    }

    /// The fields of an object.
    pub(super) fn object(&self) -> Result<Object<'a>, ConfigError> {
        match self.value {
            Value::Object(map) => Ok(Object {
                path: self.path.clone(),
                map,
                taken: vec![false; map.len()],
            }),
            _ => Err(self.wrong("an object")),
        }
    }

    /// The items of a list, each with its path.
    pub(super) fn list(&self) -> Result<Vec<Field<'a>>, ConfigError> {
        match self.value {
            Value::Array(items) => Ok(items
                .iter()
                .enumerate()
                .map(|(i, value)| Field {
                    path: format!("{}[{i}]", self.path),
                    value,
                })
                .collect()),
            _ => Err(self.wrong("a list")),
        }
    }

    /// A string; `null` reads as empty, as proto JSON reads it.
    pub(super) fn string(&self) -> Result<&'a str, ConfigError> {
        match self.value {
            Value::String(s) => Ok(s),
            Value::Null => Ok(""),
            _ => Err(self.wrong("a string")),
        }
    }

    /// A number.
    pub(super) fn number(&self) -> Result<f64, ConfigError> {
        match self.value.as_f64() {
            Some(n) if self.value.is_number() && n.is_finite() => Ok(n),
            _ => Err(self.wrong("a number")),
        }
    }

    /// A whole number of at least `min` (a larger one reads as `u64::MAX`).
    pub(super) fn count(&self, min: u64) -> Result<u64, ConfigError> {
        let n = self.number()?;
        if n.fract() != 0.0 || n < min as f64 {
            return Err(error(
                &self.path,
                format!("must be a whole number of at least {min}"),
            ));
        }
        Ok(self.value.as_u64().unwrap_or(u64::MAX))
    }

    /// A proto-JSON duration: seconds with up to nine decimals and an `s`
    /// (`"0.1s"`, `"1.000340012s"`, `".01s"`).
    pub(super) fn duration(&self) -> Result<Duration, ConfigError> {
        let text = match self.value {
            Value::String(s) => s.trim(),
            _ => return Err(self.wrong("a duration (a string such as \"0.1s\")")),
        };
        let number = text.strip_suffix('s').unwrap_or("");
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if number.is_empty()
            || number == "."
            || !digits(whole)
            || !digits(fraction)
            || fraction.len() > 9
        {
            return Err(error(
                &self.path,
                "must be a duration in seconds, such as \"0.1s\" or \"2s\" \
                 (not negative, at most nine decimals)",
            ));
        }
        parse_duration(text).map_err(|message| error(&self.path, message))
    }

    /// A gRPC status code, by name (`"UNAVAILABLE"`) or number (`14`).
    pub(super) fn code(&self) -> Result<Code, ConfigError> {
        let unknown = || error(&self.path, "not a gRPC status code");
        match self.value {
            Value::String(s) => s.parse().map_err(|_| unknown()),
            Value::Number(n) => match n.as_u64() {
                Some(n @ 0..=16) => Ok(Code::from_u32(n as u32)),
                _ => Err(unknown()),
            },
            _ => Err(self.wrong("a gRPC status code (a name or a number)")),
        }
    }
}

/// An object's fields, found by name as gRPC reads them: without regard to case,
/// `_` or `-` (`retryPolicy`, `RetryPolicy`, `retry_policy`). The fields not taken
/// are reported as unmapped.
pub(super) struct Object<'a> {
    path: String,
    map: &'a Map<String, Value>,
    taken: Vec<bool>,
}

impl<'a> Object<'a> {
    /// The field called `name` (in camelCase), if the object has it; `null` is
    /// absent, as proto JSON reads it.
    ///
    /// # Errors
    ///
    /// The field given twice under two spellings.
    pub(super) fn take(&mut self, name: &str) -> Result<Option<Field<'a>>, ConfigError> {
        let mut found = None;
        for (i, (key, value)) in self.map.iter().enumerate() {
            if !self.taken[i] && same_name(name, key) {
                if found.is_some() {
                    return Err(error(
                        &self.path,
                        format!(
                            "`{name}` is given twice (keys are read without regard to \
                             case or `_`)"
                        ),
                    ));
                }
                self.taken[i] = true;
                found = Some(Field {
                    path: join(&self.path, key),
                    value,
                });
            }
        }
        Ok(found.filter(|field| !field.value.is_null()))
    }

    /// Every field not taken, as unmapped: with the reason `known` gives for its
    /// name, or as an unknown field.
    /// They come in alphabetical order, whether or not serde_json keeps the
    /// file's (its `preserve_order` feature).
    pub(super) fn rest(self, known: &[(&str, &str)], unmapped: &mut Vec<Unmapped>) {
        let mut rest: Vec<&String> = (self.map.keys().enumerate())
            .filter(|(i, _)| !self.taken[*i])
            .map(|(_, key)| key)
            .collect();
        rest.sort();
        for key in rest {
            let reason = known
                .iter()
                .find(|(name, _)| same_name(name, key))
                .map_or("unknown field", |(_, reason)| reason);
            unmapped.push(Unmapped::new(join(&self.path, key), reason));
        }
    }

    /// Where the object is.
    pub(super) fn path(&self) -> &str {
        &self.path
    }
}
