//! Reloading a running stack from a file: its routes and their policies are
//! swapped at once; anything else in the file must stay as it was.

use std::fmt;
use std::sync::{Mutex, PoisonError};

use super::routes::StackSpec;
use super::{ConfigError, StackConfig};
use crate::stack::{HedgeMode, ReloadHandle, ReloadableLayer};

/// Reloads a running stack from new settings (read from a file): its routes, each
/// route's retry policy and hedging, and the default's are swapped at once, in
/// every service the layer made; the calls in flight keep the policies they
/// started with. Settings that are not reloaded (the stack's hedge policy, the
/// budget, the breaker, the throttle, the key, the stack's rules) must be
/// unchanged: a file that changes them is refused, and so is one that fails
/// validation; either way the settings in place stay, so there is never a moment
/// with none.
///
/// # Examples
///
/// ```
/// use backstop::config::{self, Reloader};
///
/// let config = config::from_toml("[retry]\nmax_attempts = 3")?;
/// let layer = config.clone().builder().build().expect("valid").reloadable();
/// let reloader = Reloader::new(&layer, &config)?;
///
/// let changes = reloader.reload(config::from_toml("[retry]\nmax_attempts = 2")?)?;
/// assert_eq!(changes[0].to_string(), "retry: changed");
///
/// // A file that changes what is not reloaded is refused; the routes stay.
/// let refused = reloader.reload(config::from_toml("budget = false\n[retry]\nmax_attempts = 5")?);
/// assert_eq!(refused.unwrap_err().path(), "budget");
/// let req = http::Request::get("http://api.test/").body(()).unwrap();
/// assert_eq!(layer.reload_handle().routes().policy_for(&req).max_attempts(), 2);
/// # Ok::<(), backstop::config::ConfigError>(())
/// ```
pub struct Reloader {
    handle: ReloadHandle,
    current: Mutex<StackSpec>,
}

/// One thing a reload changed: the default policy, or a route (by index and name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    what: String,
    how: &'static str,
}

impl Change {
    /// What changed: `retry` (the default policy), `hedging` (the default's
    /// hedging), or `routes[1] "catalog"`.
    pub fn what(&self) -> &str {
        &self.what
    }

    /// How: `changed`, `added` or `removed`.
    pub fn how(&self) -> &'static str {
        self.how
    }
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.what, self.how)
    }
}

/// The settings as a file writes them, for comparing.
fn spec_of(config: &StackConfig) -> Result<StackSpec, ConfigError> {
    StackSpec::of(config).map_err(|m| ConfigError::new("", m))
}

impl Reloader {
    /// A reloader of `layer` (see
    /// [`BackstopLayer::reloadable`](crate::BackstopLayer::reloadable)), which
    /// runs `config` now.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] when `config` holds code no file can hold (so a reload
    /// could not be compared with it).
    pub fn new<H: HedgeMode>(
        layer: &ReloadableLayer<H>,
        config: &StackConfig,
    ) -> Result<Self, ConfigError> {
        Ok(Reloader {
            handle: layer.reload_handle(),
            current: Mutex::new(spec_of(config)?),
        })
    }

    /// Puts `next`'s routes in place, and says what changed (nothing, when the
    /// file is the same).
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] at the path of a setting that is not reloaded and
    /// changed, or when a route hedges and the stack has no hedge layer; the
    /// settings in place stay.
    pub fn reload(&self, next: StackConfig) -> Result<Vec<Change>, ConfigError> {
        let spec = spec_of(&next)?;
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        let fixed = [
            ("hedge", spec.hedge != current.hedge),
            ("budget", spec.budget != current.budget),
            (
                "circuit_breaker",
                spec.circuit_breaker != current.circuit_breaker,
            ),
            ("throttle", spec.throttle != current.throttle),
            (
                "idempotency_key",
                spec.idempotency_key != current.idempotency_key,
            ),
            ("rules", spec.rules != current.rules),
        ];
        if let Some((field, _)) = fixed.into_iter().find(|(_, changed)| *changed) {
            return Err(ConfigError::new(
                field,
                "changes only with a restart: a reload changes the routes and their retry \
                 and hedge policies",
            ));
        }
        let changes = changes(&current, &spec);
        self.handle
            .swap(next.routes)
            .map_err(|e| ConfigError::new("routes", e.to_string()))?;
        *current = spec;
        Ok(changes)
    }
}

/// What differs between two files' routes.
fn changes(old: &StackSpec, new: &StackSpec) -> Vec<Change> {
    let mut changes = Vec::new();
    let mut note = |what: String, how| changes.push(Change { what, how });
    if old.retry != new.retry {
        note("retry".into(), "changed");
    }
    if old.hedging != new.hedging {
        note("hedging".into(), "changed");
    }
    let (a, b) = (
        old.routes.as_deref().unwrap_or_default(),
        new.routes.as_deref().unwrap_or_default(),
    );
    for i in 0..a.len().max(b.len()) {
        let name = |r: &super::routes::RouteSpec| {
            r.name
                .as_deref()
                .map_or_else(|| format!("routes[{i}]"), |n| format!("routes[{i}] {n:?}"))
        };
        match (a.get(i), b.get(i)) {
            (Some(x), Some(y)) if x != y => note(name(y), "changed"),
            (None, Some(y)) => note(name(y), "added"),
            (Some(x), None) => note(name(x), "removed"),
            _ => {}
        }
    }
    changes
}

impl fmt::Debug for Reloader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reloader")
            .field("handle", &self.handle)
            .finish_non_exhaustive()
    }
}
