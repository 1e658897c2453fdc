//! The retry policy: limits and timing, the [`Rules`] it decides by, with a
//! validating builder.

use std::time::Duration;

use http::header::HeaderName;
use http::{Method, StatusCode};

use crate::hedge::HedgePolicyBuilder;
use crate::policy::{
    carries_key, Backoff, ErrorKind, FirstError, InvalidConfig, Rules, RulesBuilder,
    MIN_ATTEMPT_TIME,
};
/// How the retry layer paces re-sends, and the [`Rules`] it decides them by.
///
/// The rules (statuses, error kinds, idempotent methods, a classifier of your own)
/// are the decision ladder's inputs, kept apart so that the hedge layer and the
/// circuit breaker can take the same rules ([`RetryPolicyBuilder::rules`]); the
/// policy adds the limits and timing. The builder's `retry_on`,
/// `retryable_statuses`, `retryable_errors`, `idempotent_methods` and
/// `idempotency_header` set the rules, on top of the ones
/// [`rules`](RetryPolicyBuilder::rules) gives.
///
/// `RetryPolicy::default()` works as it is:
///
/// | setting | default | why |
/// |---|---|---|
/// | `max_attempts` | 3 (two retries) | the Google SRE book's limit: more attempts multiply load across layers |
/// | backoff | full jitter, 100 ms doubling to 5 s | spreads clients that failed together |
/// | retryable statuses | 408, 429, 502, 503, 504 | transient by definition; 500 is opt-in ([`RetryPolicyBuilder::retry_on`]); 425 is always retried |
/// | `max_retry_after` | 10 s | a longer `Retry-After` ends the call and is reported to the caller instead |
/// | `attempt_timeout`, `timeout` | none | as hyper; set them for a deadline |
/// | `min_attempt_time` | 10 ms | no attempt or wait starts with less time left than this |
/// | `replay_cap` | 64 KiB | bytes of a request body kept for a re-send, as linkerd |
/// | drain | 64 KiB within 100 ms | a failed response's body is read this far so its HTTP/1.1 connection is reused |
/// | idempotency-key header | `idempotency-key` | the IETF httpapi draft's name |
/// | rules | [`Rules::default()`] | the statuses above, every transient error kind, no classifier |
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use backstop::RetryPolicy;
///
/// let policy = RetryPolicy::builder()
///     .max_attempts(4)
///     .backoff(Duration::from_millis(50), Duration::from_secs(2))
///     .retry_on(500)
///     .attempt_timeout(Duration::from_secs(2))
///     .timeout(Duration::from_secs(10))
///     .build()?;
/// assert_eq!(policy.max_attempts(), 4);
///
/// // Bad numbers are refused, never a panic.
/// assert!(RetryPolicy::builder().max_attempts(0).build().is_err());
/// # Ok::<(), backstop::policy::InvalidConfig>(())
/// ```
#[derive(Clone, Debug)]
pub struct RetryPolicy {
    max_attempts: u32,
    backoff: Backoff,
    rules: Rules,
    max_retry_after: Duration,
    attempt_timeout: Option<Duration>,
    timeout: Option<Duration>,
    min_attempt_time: Duration,
    replay_cap: usize,
    drain_limit: usize,
    drain_timeout: Duration,
}

/// The longest duration any setting may take: more is a configuration mistake.
const MAX_SETTING: Duration = Duration::from_secs(86_400);

/// The most attempts a policy may allow; more is a configuration mistake.
const MAX_ATTEMPTS_LIMIT: u32 = 100;

impl RetryPolicy {
    /// This policy deciding by `rules` instead of its own: a stack's rules, given
    /// once for every policy in it.
    pub(crate) fn with_rules(mut self, rules: Rules) -> Self {
        self.rules = rules;
        self
    }
}

impl AsRef<Rules> for RetryPolicy {
    /// The rules the policy decides by, for the [ladder](crate::policy::classify).
    fn as_ref(&self) -> &Rules {
        &self.rules
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 3,
            backoff: Backoff::default(),
            rules: Rules::default(),
            max_retry_after: Duration::from_secs(10),
            attempt_timeout: None,
            timeout: None,
            min_attempt_time: MIN_ATTEMPT_TIME,
            replay_cap: 64 * 1024,
            drain_limit: 64 * 1024,
            drain_timeout: Duration::from_millis(100),
        }
    }
}

impl RetryPolicy {
    /// A builder starting from the defaults.
    pub fn builder() -> RetryPolicyBuilder {
        RetryPolicyBuilder {
            policy: RetryPolicy::default(),
            base_rules: None,
            rules: Rules::builder(),
        }
    }

    /// One attempt, never a retry: for a call or route that must not be repeated.
    pub fn none() -> Self {
        RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        }
    }

    /// Attempts allowed per call, the first included.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The same policy keeping up to `cap` body bytes: for a body already held in
    /// memory whole (a reqwest buffered body), which costs nothing more to keep.
    #[cfg(feature = "reqwest-middleware")]
    pub(crate) fn with_replay_cap(&self, cap: usize) -> Self {
        RetryPolicy {
            replay_cap: cap,
            ..self.clone()
        }
    }

    /// The backoff between attempts.
    pub fn backoff(&self) -> Backoff {
        self.backoff
    }

    /// The longest `Retry-After` the layer waits; a longer one ends the call.
    pub fn max_retry_after(&self) -> Duration {
        self.max_retry_after
    }

    /// The timeout of each attempt.
    pub fn attempt_timeout(&self) -> Option<Duration> {
        self.attempt_timeout
    }

    /// The total time of a call, every attempt and wait included.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// The least time worth starting an attempt (or a wait) with.
    pub fn min_attempt_time(&self) -> Duration {
        self.min_attempt_time
    }

    /// The most request-body bytes kept for a re-send.
    pub fn replay_cap(&self) -> usize {
        self.replay_cap
    }

    /// The most bytes of a failed response's body read before a retry.
    pub fn drain_limit(&self) -> usize {
        self.drain_limit
    }

    /// The longest time spent reading a failed response's body before a retry.
    pub fn drain_timeout(&self) -> Duration {
        self.drain_timeout
    }

    /// The rules the policy decides by.
    pub fn rules(&self) -> &Rules {
        &self.rules
    }

    /// The header whose presence marks a request as keyed.
    pub fn idempotency_header(&self) -> &HeaderName {
        self.rules.idempotency_header()
    }

    /// Whether a response with `status` is worth a retry (before the ladder's other
    /// rungs).
    pub fn is_retryable_status(&self, status: StatusCode) -> bool {
        self.rules.is_retryable_status(status)
    }

    /// Whether a failure of `kind` may be sent again under the policy's rules.
    pub fn is_retryable_error(&self, kind: ErrorKind) -> bool {
        self.rules.is_retryable_error(kind)
    }

    /// Whether a request counts as keyed: its method is not idempotent under this
    /// policy, and it carries the [`Keyed`](crate::policy::Keyed) marker
    /// or the policy's idempotency-key header. (For an idempotent method the key
    /// changes nothing, so it is not looked for.)
    pub fn is_keyed(
        &self,
        method: &Method,
        headers: &http::HeaderMap,
        extensions: &http::Extensions,
    ) -> bool {
        !self.is_idempotent_method(method) && self.carries_key(headers, extensions)
    }

    /// Whether a request carries the [`Keyed`](crate::policy::Keyed) marker
    /// or the policy's idempotency-key header, whatever its method.
    #[inline]
    pub(crate) fn carries_key(
        &self,
        headers: &http::HeaderMap,
        extensions: &http::Extensions,
    ) -> bool {
        carries_key(&self.rules, headers, extensions)
    }

    /// Whether the policy treats `method` as idempotent.
    #[inline]
    pub fn is_idempotent_method(&self, method: &Method) -> bool {
        self.rules.is_idempotent_method(method)
    }
}

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
    /// Attempts per call, the first included: 1 to 100.
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.policy.max_attempts = n;
        self
    }

    /// Full-jitter backoff: `base` for the first retry, doubling up to `max`
    /// (`base <= max`).
    pub fn backoff(mut self, base: Duration, max: Duration) -> Self {
        self.policy.backoff = Backoff::new(base, max);
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
    /// It counts from when the retry layer gets the call. In the
    /// [`Backstop`](crate::Backstop) stack it counts from the call's date instead
    /// (its own, or an earlier one a layer above set), so the wait for a paused
    /// origin counts in it: the stack refuses at once a call whose timeout ends
    /// inside the pause. A separate [`BudgetLayer`](crate::BudgetLayer) above a
    /// retry layer does not know the retry policy: the time it holds a call for its
    /// origin's pause comes before this timeout starts, and only a
    /// [`Deadline`](crate::policy::Deadline) in the request bounds both.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.policy.timeout = Some(timeout);
        self
    }

    /// No attempt or wait starts with less time than this left before the deadline.
    pub fn min_attempt_time(mut self, min: Duration) -> Self {
        self.policy.min_attempt_time = min;
        self
    }

    /// The most request-body bytes kept for a re-send (at most 64 MiB).
    ///
    /// Whether a body is sent again depends on how far the failed attempt read
    /// it, not on its size: a body no attempt read is sent whole; one read no
    /// further than the cap is sent from the bytes kept, then from the rest of
    /// the original stream; one read past the cap is not sent again
    /// ([`NotReplayable::CapExceeded`](crate::policy::NotReplayable::CapExceeded)).
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
    let (base, max) = (p.backoff.base(), p.backoff.max());
    if max > MAX_SETTING {
        error.fail(
            "backoff",
            format!("max must be at most one day, got {max:?}"),
        );
    }
    if base > max {
        error.fail(
            "backoff",
            format!("base {base:?} is larger than max {max:?}"),
        );
    }
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

/// The bridge from a retry policy to a hedge policy, written with the retry policy:
/// the hedge layer names no type of the retry layer (whose routes name the hedge
/// policy).
impl HedgePolicyBuilder {
    /// Takes a retry policy's [rules](RetryPolicy::rules) and
    /// [minimum attempt time](RetryPolicy::min_attempt_time); its attempts, backoff
    /// and timeouts are not used here.
    ///
    /// It sets the same things as [`rules`](HedgePolicyBuilder::rules) and
    /// [`min_attempt_time`](HedgePolicyBuilder::min_attempt_time): giving it with
    /// either is refused by [`build`](HedgePolicyBuilder::build), whatever the
    /// order. ([`methods`](HedgePolicyBuilder::methods) goes with it: the methods
    /// are checked against the policy's rules.)
    pub fn policy(self, policy: RetryPolicy) -> Self {
        self.retry_policy_parts(policy.rules().clone(), policy.min_attempt_time())
    }
}

#[cfg(test)]
mod tests;
