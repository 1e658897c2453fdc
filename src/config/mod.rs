//! Configuration as data: the whole stack's settings in one value
//! ([`StackConfig`]), the errors that name where a setting went wrong
//! ([`ConfigError`]), and what an importer of another format could not map
//! ([`Imported`], [`Unmapped`]).
//!
//! A [`StackConfig`] holds backstop's own policies, built and checked by their
//! builders: whatever reads a file (backstop's own format, or an importer of a
//! format other tools write) ends in one, and a stack is built from it with
//! [`StackConfig::builder`].
//!
//! Importers: `config::grpc` reads gRPC's service config (with both features
//! `json` and `grpc`).
//!
//! # Examples
//!
//! ```
//! use backstop::config::StackConfig;
//! use backstop::retry::{Route, Routes};
//! use backstop::RetryPolicy;
//!
//! let mut config = StackConfig::default();
//! config.routes = Routes::new(RetryPolicy::default())
//!     .route(Route::path_prefix("/payments"), RetryPolicy::none());
//! let layer = config.builder().build()?;
//! # let _ = layer;
//! # Ok::<(), backstop::policy::InvalidConfig>(())
//! ```

use std::error::Error as StdError;
use std::fmt;

mod duration;
#[cfg(any(feature = "json", feature = "toml", feature = "yaml"))]
mod load;
#[cfg(feature = "serde")]
#[macro_use]
mod spec;
#[cfg(feature = "serde")]
mod policies;
#[cfg(feature = "serde")]
mod registry;
#[cfg(feature = "serde")]
mod reload;
#[cfg(feature = "serde")]
mod routes;
#[cfg(feature = "serde")]
mod throttle;
#[cfg(feature = "serde")]
mod values;

pub use duration::{format_duration, parse_duration};
#[cfg(feature = "json")]
pub use load::from_json;
#[cfg(feature = "yaml")]
pub use load::from_yaml;
#[cfg(any(feature = "json", feature = "toml", feature = "yaml"))]
pub use load::MAX_FILE;
#[cfg(feature = "toml")]
pub use load::{from_toml, to_toml};
#[cfg(feature = "serde")]
pub use registry::Registry;
#[cfg(feature = "serde")]
pub use reload::{Change, Reloader};

#[cfg(feature = "yaml")]
#[cfg_attr(docsrs, doc(cfg(feature = "yaml")))]
pub mod gateway;

#[cfg(all(feature = "json", feature = "grpc"))]
#[cfg_attr(docsrs, doc(cfg(all(feature = "json", feature = "grpc"))))]
pub mod grpc;

use crate::admit::breaker::CircuitBreakerPolicy;
use crate::admit::budget::BudgetPolicy;
use crate::admit::throttle::ThrottlePolicy;
use crate::hedge::HedgePolicy;
use crate::idempotency_key::IdempotencyKeyLayer;
use crate::policy::Rules;
use crate::retry::{RetryPolicy, Routes};
use crate::stack::{Backstop, BackstopBuilder};

/// The whole stack's settings, as one value: the routes (with the default retry
/// policy), the hedge policy, the budget, the breaker, the adaptive throttle and
/// the idempotency key.
///
/// The default is the default stack: [`RetryPolicy::default()`] for every call,
/// no hedging, the default budget, no breaker, no throttle, no key.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct StackConfig {
    /// The retry policy and hedging of each route, and the default's.
    pub routes: Routes,
    /// The stack's hedge policy; `None` for a stack that does not hedge.
    pub hedge: Option<HedgePolicy>,
    /// The retry budget; `None` for no budget.
    pub budget: Option<BudgetPolicy>,
    /// The circuit breaker; `None` for no breaker.
    pub circuit_breaker: Option<CircuitBreakerPolicy>,
    /// The adaptive throttle; `None` for no throttle.
    pub throttle: Option<ThrottlePolicy>,
    /// The idempotency key; `None` for no key.
    pub idempotency_key: Option<IdempotencyKeyLayer>,
    /// Rules for every policy of the stack ([`BackstopBuilder::rules`]); `None`
    /// for each policy's own.
    pub rules: Option<Rules>,
}

impl Default for StackConfig {
    fn default() -> Self {
        StackConfig {
            routes: Routes::new(RetryPolicy::default()),
            hedge: None,
            budget: Some(BudgetPolicy::default()),
            circuit_breaker: None,
            throttle: None,
            idempotency_key: None,
            rules: None,
        }
    }
}

impl StackConfig {
    /// A stack builder with these settings, but the hedge policy: a stack whose
    /// type hedges is built with [`BackstopBuilder::hedge`], given
    /// [`hedge`](StackConfig::hedge) when it is set (a route that hedges in a
    /// stack that does not is refused by [`build`](BackstopBuilder::build)).
    pub fn builder(self) -> BackstopBuilder {
        let mut builder = Backstop::builder().routes(self.routes);
        builder = match self.budget {
            Some(budget) => builder.budget(budget),
            None => builder.no_budget(),
        };
        if let Some(breaker) = self.circuit_breaker {
            builder = builder.circuit_breaker(breaker);
        }
        if let Some(throttle) = self.throttle {
            builder = builder.throttle(throttle);
        }
        if let Some(key) = self.idempotency_key {
            builder = builder.idempotency_key(key);
        }
        if let Some(rules) = self.rules {
            builder = builder.rules(rules);
        }
        builder
    }
}

/// A setting that was refused, and where: the path of the field in the file
/// (`routes[2].retry.max_attempts`) and the rule it broke. It shows no value from
/// the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    path: String,
    message: String,
}

impl ConfigError {
    /// An error at `path` (empty for the whole file).
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            path: path.into(),
            message: message.into(),
        }
    }

    #[cfg(feature = "serde")]
    /// The same error, inside the table at `prefix` (a path of its own).
    pub(crate) fn under(mut self, prefix: &str) -> Self {
        self.path = match (prefix.is_empty(), self.path.is_empty()) {
            (true, _) => self.path,
            (false, true) => prefix.to_owned(),
            (false, false) => format!("{prefix}.{}", self.path),
        };
        self
    }

    /// Where in the file: a dotted path with indices (`routes[2].retry`); empty
    /// for the file as a whole.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// What is wrong there.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

impl StdError for ConfigError {}

/// A field of an imported file that has no meaning in backstop's configuration
/// (gRPC's `waitForReady`, a header match of an `HTTPRoute`): where it is and why
/// it was not mapped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unmapped {
    path: String,
    reason: String,
}

impl Unmapped {
    /// The field at `path`, not mapped for `reason`.
    pub fn new(path: impl Into<String>, reason: impl Into<String>) -> Self {
        Unmapped {
            path: path.into(),
            reason: reason.into(),
        }
    }

    /// Where the field is, as [`ConfigError::path`] writes it.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Why it was not mapped.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl fmt::Display for Unmapped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: not mapped: {}", self.path, self.reason)
    }
}

/// What an importer made of a file: the configuration, and every field it could
/// not map. Nothing is dropped silently: take the fields with
/// [`unmapped`](Imported::unmapped), or refuse a file that has any with
/// [`strict`](Imported::strict).
#[derive(Clone, Debug)]
#[must_use]
pub struct Imported<T> {
    config: T,
    unmapped: Vec<Unmapped>,
}

impl<T> Imported<T> {
    /// `config`, with the fields that were not mapped.
    pub fn new(config: T, unmapped: Vec<Unmapped>) -> Self {
        Imported { config, unmapped }
    }

    /// The fields that were not mapped.
    pub fn unmapped(&self) -> &[Unmapped] {
        &self.unmapped
    }

    /// The configuration and the fields that were not mapped.
    pub fn into_parts(self) -> (T, Vec<Unmapped>) {
        (self.config, self.unmapped)
    }

    /// The configuration, when every field was mapped.
    ///
    /// # Errors
    ///
    /// The first field that was not mapped, as a [`ConfigError`] at its path.
    pub fn strict(self) -> Result<T, ConfigError> {
        match self.unmapped.into_iter().next() {
            None => Ok(self.config),
            Some(field) => Err(ConfigError::new(
                field.path,
                format!("not mapped: {}", field.reason),
            )),
        }
    }

    /// The configuration, whatever was not mapped (see
    /// [`unmapped`](Imported::unmapped) before calling this).
    pub fn lenient(self) -> T {
        self.config
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_refuses_the_first_unmapped_field_by_its_path() {
        let imported = Imported::new(
            1,
            vec![
                Unmapped::new("methodConfig[0].waitForReady", "no such setting"),
                Unmapped::new("methodConfig[1].x", "other"),
            ],
        );
        assert_eq!(imported.unmapped().len(), 2);
        let err = imported.clone().strict().unwrap_err();
        assert_eq!(err.path(), "methodConfig[0].waitForReady");
        assert_eq!(
            err.to_string(),
            "methodConfig[0].waitForReady: not mapped: no such setting"
        );
        assert_eq!(imported.lenient(), 1);
        assert_eq!(Imported::new(2, vec![]).strict(), Ok(2));
    }

    #[test]
    fn the_default_config_builds_the_default_stack() {
        let config = StackConfig::default();
        assert!(config.budget.is_some());
        assert!(config.builder().build().is_ok());
    }
}
