//! The retry policy: limits and timing, the [`Rules`] it decides by, with a
//! validating builder.

use std::time::Duration;

use http::header::HeaderName;
use http::{Method, StatusCode};

use crate::hedge::HedgePolicyBuilder;
use crate::policy::{carries_key, Backoff, ErrorKind, Rules, MIN_ATTEMPT_TIME};

mod builder;

pub use builder::RetryPolicyBuilder;

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
/// | backoff | full jitter, 100 ms doubling to 5 s ([`jitter`](RetryPolicyBuilder::jitter) and [`backoff_multiplier`](RetryPolicyBuilder::backoff_multiplier) change the shape) | spreads clients that failed together |
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
        RetryPolicyBuilder::new()
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

    /// The request-body bytes kept for a re-send, with the one chunk that crosses
    /// them ([`RetryPolicyBuilder::replay_cap`]).
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
