//! The retry policy's validating builder.

use std::time::Duration;

use http::header::HeaderName;
use http::Method;

use super::{RetryPolicy, MAX_ATTEMPTS_LIMIT, MAX_SETTING};
use crate::policy::{Backoff, ErrorKind, FirstError, InvalidConfig, Jitter, Rules, RulesBuilder};

/// Builds a [`RetryPolicy`], checking every number.
///
/// Setters never fail, and each sets its own setting only;
/// [`build`](RetryPolicyBuilder::build) checks them in one fixed order and reports
/// the first invalid one, so the result does not depend on the order of the calls.
/// The rules are [`rules`](RetryPolicyBuilder::rules)' (or the default ones) with
/// the builder's own rule settings (`retry_on`, `retryable_statuses`,
/// `retryable_errors`, `idempotent_methods`, `idempotency_header`) applied on top,
/// whichever came first. A setter called twice keeps its last value (each
/// `retry_on` adds one status).
#[derive(Clone, Debug)]
pub struct RetryPolicyBuilder {
    /// The limits and timing as given: `build` checks them.
    policy: RetryPolicy,
    /// `rules`: the rules the rule settings apply to.
    base_rules: Option<Rules>,
    /// The rule settings given one by one.
    rules: RulesBuilder,
}

impl RetryPolicyBuilder {
    /// A builder starting from the defaults: [`RetryPolicy::builder`].
    pub(super) fn new() -> Self {
        RetryPolicyBuilder {
            policy: RetryPolicy::default(),
            base_rules: None,
            rules: Rules::builder(),
        }
    }

    /// Attempts per call, the first included: 1 to 100.
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.policy.max_attempts = n;
        self
    }

    /// The backoff's bounds: `base` for the first retry, growing up to `max`
    /// (`base <= max`, at most one day). Unless [`jitter`](RetryPolicyBuilder::jitter)
    /// or [`backoff_multiplier`](RetryPolicyBuilder::backoff_multiplier) say
    /// otherwise, the backoff doubles and draws each wait with full jitter.
    pub fn backoff(mut self, base: Duration, max: Duration) -> Self {
        let b = self.policy.backoff;
        self.policy.backoff = Backoff::new(base, max)
            .with_jitter(b.jitter())
            .with_multiplier(b.multiplier());
        self
    }

    /// How each backoff wait is drawn (default [`Jitter::Full`]; from 0 to 1 for
    /// [`Jitter::Proportional`]); the table of shapes is at [`Jitter`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use backstop::policy::Jitter;
    /// use backstop::RetryPolicy;
    ///
    /// // 0.1 s doubling up to 10 s, each wait within ±20 %.
    /// let policy = RetryPolicy::builder()
    ///     .backoff(Duration::from_millis(100), Duration::from_secs(10))
    ///     .jitter(Jitter::Proportional(0.2))
    ///     .build()?;
    /// assert_eq!(policy.backoff().jitter(), Jitter::Proportional(0.2));
    /// assert!(RetryPolicy::builder().jitter(Jitter::Proportional(2.0)).build().is_err());
    /// # Ok::<(), backstop::policy::InvalidConfig>(())
    /// ```
    pub fn jitter(mut self, jitter: Jitter) -> Self {
        self.policy.backoff = self.policy.backoff.with_jitter(jitter);
        self
    }

    /// How much the backoff grows each retry: finite, from 1 to 10 (default 2).
    /// Decorrelated jitter grows from the previous wait instead, and refuses any
    /// multiplier but 2.
    ///
    /// ```
    /// use std::time::Duration;
    /// use backstop::RetryPolicy;
    ///
    /// let policy = RetryPolicy::builder()
    ///     .backoff(Duration::from_millis(100), Duration::from_secs(10))
    ///     .backoff_multiplier(1.5)
    ///     .build()?;
    /// assert_eq!(policy.backoff().ceiling(3), Duration::from_millis(225));
    /// assert!(RetryPolicy::builder().backoff_multiplier(0.5).build().is_err());
    /// # Ok::<(), backstop::policy::InvalidConfig>(())
    /// ```
    pub fn backoff_multiplier(mut self, multiplier: f64) -> Self {
        self.policy.backoff = self.policy.backoff.with_multiplier(multiplier);
        self
    }

    /// The rules the policy decides by (default [`Rules::default()`]).
    ///
    /// The builder's own rule settings apply on top of them, whether they come
    /// before or after this call: `.rules(r).retry_on(418)` and
    /// `.retry_on(418).rules(r)` both retry `r`'s statuses and 418;
    /// [`retryable_statuses`](RetryPolicyBuilder::retryable_statuses),
    /// [`retryable_errors`](RetryPolicyBuilder::retryable_errors),
    /// [`idempotent_methods`](RetryPolicyBuilder::idempotent_methods) and
    /// [`idempotency_header`](RetryPolicyBuilder::idempotency_header) replace
    /// `r`'s. `r`'s classifier and attempt header are kept.
    pub fn rules(mut self, rules: Rules) -> Self {
        self.base_rules = Some(rules);
        self
    }

    /// Also retry responses with this status (400 to 599), added to the
    /// [rules](RetryPolicyBuilder::rules)' statuses or to
    /// [`retryable_statuses`](RetryPolicyBuilder::retryable_statuses), before or
    /// after them; see [`RulesBuilder::retry_on`].
    pub fn retry_on(mut self, status: u16) -> Self {
        self.rules = self.rules.retry_on(status);
        self
    }

    /// Replaces the retryable statuses (each 400 to 599) of the
    /// [rules](RetryPolicyBuilder::rules), whether they come before or after this
    /// call. 425 Too Early is retried whatever this says, and each
    /// [`retry_on`](RetryPolicyBuilder::retry_on) adds its status.
    pub fn retryable_statuses(mut self, statuses: impl IntoIterator<Item = u16>) -> Self {
        self.rules = self.rules.retryable_statuses(statuses);
        self
    }

    /// Replaces the retryable error kinds of the [rules](RetryPolicyBuilder::rules),
    /// whether they come before or after this call; see
    /// [`RulesBuilder::retryable_errors`].
    pub fn retryable_errors(mut self, kinds: impl IntoIterator<Item = ErrorKind>) -> Self {
        self.rules = self.rules.retryable_errors(kinds);
        self
    }

    /// The longest `Retry-After` to wait (at most one day); a longer hint ends the
    /// call with the response, and the hint is reported to the caller.
    pub fn max_retry_after(mut self, max: Duration) -> Self {
        self.policy.max_retry_after = max;
        self
    }

    /// The timeout of each attempt (more than zero); cut to the time left before the
    /// deadline.
    pub fn attempt_timeout(mut self, timeout: Duration) -> Self {
        self.policy.attempt_timeout = Some(timeout);
        self
    }

    /// The total time of a call, every attempt and wait included (more than zero).
    ///
    /// It counts from the call's date: when the retry layer gets the call, or an
    /// earlier date a budget layer above set (the [`Backstop`](crate::Backstop)
    /// stack's, or a separate [`BudgetLayer`](crate::BudgetLayer)'s). The wait for
    /// a paused origin counts in it, in every shape: the retry layer holds the call
    /// (a budget layer above hands the hold down to it), and refuses at once a
    /// call whose timeout ends inside the pause.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.policy.timeout = Some(timeout);
        self
    }

    /// No attempt or wait starts with less time than this left before the deadline.
    pub fn min_attempt_time(mut self, min: Duration) -> Self {
        self.policy.min_attempt_time = min;
        self
    }

    /// The request-body bytes kept for a re-send (at most 64 MiB), with the one
    /// chunk that crosses them.
    ///
    /// Whether a body is sent again depends on how far the failed attempt read
    /// it, not on its size: a body no attempt read is sent whole; one read no
    /// further than the cap is sent from the bytes kept, then from the rest of
    /// the original stream; one read past the cap is not sent again
    /// ([`NotReplayable::CapExceeded`](crate::policy::NotReplayable::CapExceeded)).
    ///
    /// A chunk read while the kept bytes are under the cap is kept whole, even one
    /// that takes them past the cap (it is already in memory: no copy), so at most
    /// the cap plus the one chunk that crosses it is kept, and a body read to the
    /// end of that chunk is still sent again; reading the next chunk after it is
    /// reading past the cap. A cap of 0 keeps nothing.
    ///
    /// ```
    /// let policy = backstop::RetryPolicy::builder().replay_cap(1 << 20).build()?;
    /// assert_eq!(policy.replay_cap(), 1 << 20); // 1 MiB of each body kept
    /// # Ok::<(), backstop::policy::InvalidConfig>(())
    /// ```
    pub fn replay_cap(mut self, bytes: usize) -> Self {
        self.policy.replay_cap = bytes;
        self
    }

    /// How much of a failed response's body is read (and dropped) before a retry, so
    /// its HTTP/1.1 connection can be reused: at most `bytes` (up to 1 MiB) within
    /// `timeout` (up to 10 s).
    pub fn drain(mut self, bytes: usize, timeout: Duration) -> Self {
        self.policy.drain_limit = bytes;
        self.policy.drain_timeout = timeout;
        self
    }

    /// The header whose presence marks a request as keyed (default
    /// `idempotency-key`), replacing the [rules](RetryPolicyBuilder::rules)' whether
    /// they come before or after this call.
    pub fn idempotency_header(mut self, name: HeaderName) -> Self {
        self.rules = self.rules.idempotency_header(name);
        self
    }

    /// Replaces the methods treated as idempotent (RFC 9110's by default), and the
    /// [rules](RetryPolicyBuilder::rules)' whether they come before or after this
    /// call. Adding POST or PATCH here means the server deduplicates every such
    /// request.
    pub fn idempotent_methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.rules = self.rules.idempotent_methods(methods);
        self
    }

    /// The policy, or the first invalid setting.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] names the setting and what is wrong with it. The settings
    /// are checked in one fixed order (limits and timing, then the rules, then a
    /// `min_attempt_time` longer than the `timeout`), whatever the order of the
    /// calls.
    pub fn build(self) -> Result<RetryPolicy, InvalidConfig> {
        let mut policy = self.policy;
        check_numbers(&policy)?;
        policy.rules = self.rules.build_on(self.base_rules.unwrap_or_default())?;
        if let Some(total) = policy.timeout {
            if policy.min_attempt_time > total {
                return Err(InvalidConfig::new(
                    "min_attempt_time",
                    format!(
                        "{:?} is longer than the total timeout {total:?}",
                        policy.min_attempt_time
                    ),
                ));
            }
        }
        Ok(policy)
    }
}

/// The limits and timing a builder was given, each checked on its own, in the
/// order of the fields.
fn check_numbers(p: &RetryPolicy) -> Result<(), InvalidConfig> {
    let mut error = FirstError::default();
    error.count("max_attempts", p.max_attempts, MAX_ATTEMPTS_LIMIT);
    p.backoff.check(&mut error, MAX_SETTING);
    if p.max_retry_after > MAX_SETTING {
        error.fail(
            "max_retry_after",
            format!("must be at most one day, got {:?}", p.max_retry_after),
        );
    }
    for (setting, timeout) in [
        ("attempt_timeout", p.attempt_timeout),
        ("timeout", p.timeout),
    ] {
        match timeout {
            Some(t) if t.is_zero() || t > MAX_SETTING => error.fail(
                setting,
                format!("must be more than zero and at most one day, got {t:?}"),
            ),
            _ => {}
        }
    }
    if p.min_attempt_time > MAX_SETTING {
        error.fail(
            "min_attempt_time",
            format!("must be at most one day, got {:?}", p.min_attempt_time),
        );
    }
    if p.replay_cap > 64 * 1024 * 1024 {
        error.fail(
            "replay_cap",
            format!("must be at most 64 MiB, got {}", p.replay_cap),
        );
    }
    if p.drain_limit > 1024 * 1024 {
        error.fail(
            "drain",
            format!("must read at most 1 MiB, got {}", p.drain_limit),
        );
    }
    if p.drain_timeout > Duration::from_secs(10) {
        error.fail(
            "drain",
            format!("must take at most 10 s, got {:?}", p.drain_timeout),
        );
    }
    error.check()
}
