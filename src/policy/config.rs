//! Configuration errors: what every builder reports, and how it finds the first.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

/// A retry policy setting that was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidConfig {
    setting: &'static str,
    problem: String,
}

impl InvalidConfig {
    pub(crate) fn new(setting: &'static str, problem: String) -> Self {
        InvalidConfig { setting, problem }
    }

    /// The name of the setting.
    pub fn setting(&self) -> &'static str {
        self.setting
    }
}

impl fmt::Display for InvalidConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid {}: {}", self.setting, self.problem)
    }
}

impl StdError for InvalidConfig {}

/// A builder's validation: `build` checks each setting in one fixed order (never
/// the order of the setters), the first problem wins, and `build` reports it.
#[derive(Clone, Debug, Default)]
pub(crate) struct FirstError(Option<InvalidConfig>);

impl FirstError {
    /// Records a problem unless an earlier setting already failed.
    pub(crate) fn fail(&mut self, setting: &'static str, problem: String) {
        if self.0.is_none() {
            self.0 = Some(InvalidConfig::new(setting, problem));
        }
    }

    /// The first problem recorded, if any.
    pub(crate) fn check(self) -> Result<(), InvalidConfig> {
        self.0.map_or(Ok(()), Err)
    }

    /// A count of at least 1 and at most `max`.
    pub(crate) fn count(&mut self, setting: &'static str, n: u32, max: u32) {
        if !(1..=max).contains(&n) {
            self.fail(setting, format!("must be between 1 and {max}, got {n}"));
        }
    }

    /// A time window of 10ms to 1h, the range the budget's and the breaker's
    /// sliding windows share.
    pub(crate) fn window(&mut self, window: Duration) {
        const WINDOW: std::ops::RangeInclusive<Duration> =
            Duration::from_millis(10)..=Duration::from_secs(3600);
        if !WINDOW.contains(&window) {
            self.fail("window", format!("must be from 10ms to 1h, got {window:?}"));
        }
    }
}

/// A builder's order test, written once for the unit tests and the integration
/// tests (`tests/support/orders.rs`).
#[cfg(test)]
#[allow(unreachable_pub, dead_code)]
#[path = "../../tests/support/orders.rs"]
mod orders;
#[cfg(test)]
pub(crate) use orders::same_in_every_order;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_problem_wins_and_the_shared_checks_name_their_setting() {
        let mut errors = FirstError::default();
        errors.count("max_extra", 1, 8);
        errors.count("max_extra", 8, 8);
        errors.window(Duration::from_millis(10));
        errors.window(Duration::from_secs(3600));
        assert_eq!(errors.clone().check(), Ok(()));
        errors.count("max_extra", 0, 8);
        errors.window(Duration::from_secs(3601));
        errors.fail("other", "later".to_owned());
        let err = errors.check().unwrap_err();
        assert_eq!(err.setting(), "max_extra");
        assert_eq!(
            err.to_string(),
            "invalid max_extra: must be between 1 and 8, got 0"
        );
        let mut errors = FirstError::default();
        errors.window(Duration::from_millis(9));
        assert_eq!(
            errors.check().unwrap_err().to_string(),
            "invalid window: must be from 10ms to 1h, got 9ms"
        );
    }
}
