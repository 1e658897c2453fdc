//! The ladder's inputs: which statuses, methods and error kinds are worth a retry,
//! and an optional classifier of your own that is consulted first.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};

mod classifier;

use super::{
    is_idempotent, ErrorKind, FirstError, InvalidConfig, MethodSet, IDEMPOTENCY_KEY_HEADER,
};
pub use classifier::{classify_fn, Classifier, ClassifyFn, Decision, Observed, Verdict};

/// The error kinds the retryable-errors setting covers: the transient ones.
/// (`Config`, `BodyWrite` and `InvalidResponse` are never curable; `Canceled`,
/// `RefusedStream` and `GoAway` are not processed and always re-sendable.)
const SETTABLE_KINDS: [ErrorKind; 6] = [
    ErrorKind::Connect,
    ErrorKind::ConnectTimeout,
    ErrorKind::Dns,
    ErrorKind::Timeout,
    ErrorKind::Closed,
    ErrorKind::Other,
];

/// A set of the settable error kinds, as a bitmap.
#[derive(Clone, Copy, PartialEq, Eq)]
struct KindSet(u8);

impl KindSet {
    const ALL: KindSet = KindSet((1 << SETTABLE_KINDS.len()) - 1);

    fn bit(kind: ErrorKind) -> Option<u8> {
        SETTABLE_KINDS
            .iter()
            .position(|k| *k == kind)
            .map(|i| 1 << i)
    }

    /// Whether `kind` may be sent again: a kind outside the settable ones is left to
    /// the ladder. A breaker's refusal (from a stack or layer beneath) follows
    /// [`Other`](ErrorKind::Other), what it was before it had a kind of its own.
    fn allows(self, kind: ErrorKind) -> bool {
        let kind = match kind {
            ErrorKind::CircuitOpen => ErrorKind::Other,
            kind => kind,
        };
        KindSet::bit(kind).is_none_or(|b| self.0 & b != 0)
    }
}

impl fmt::Debug for KindSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set()
            .entries(
                SETTABLE_KINDS
                    .iter()
                    .filter(|k| self.allows(**k))
                    .map(ErrorKind::as_str),
            )
            .finish()
    }
}

/// A set of 4xx and 5xx statuses, as a bitmap.
#[derive(Clone, Copy, PartialEq, Eq)]
struct StatusSet([u64; 4]);

impl StatusSet {
    const EMPTY: StatusSet = StatusSet([0; 4]);
    const DEFAULT: StatusSet = StatusSet::EMPTY
        .with(408)
        .with(429)
        .with(502)
        .with(503)
        .with(504);

    const fn with(mut self, code: u16) -> Self {
        let i = (code - 400) as usize;
        self.0[i / 64] |= 1 << (i % 64);
        self
    }

    fn contains(&self, status: StatusCode) -> bool {
        let code = status.as_u16();
        if !(400..=599).contains(&code) {
            return false;
        }
        let i = (code - 400) as usize;
        self.0[i / 64] & (1 << (i % 64)) != 0
    }
}

impl fmt::Debug for StatusSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set()
            .entries((400u16..=599).filter(|c| self.contains(StatusCode::from_u16(*c).unwrap())))
            .finish()
    }
}

/// What the decision ladder reads besides the outcome: the retryable statuses and
/// error kinds, the idempotent methods, the idempotency-key header, and an optional
/// [`Classifier`] consulted before all of them.
///
/// Limits and timing (attempts, backoff, timeouts) are the
/// [`RetryPolicy`](crate::RetryPolicy)'s; the rules are apart so that the hedge
/// layer and the circuit breaker take the same rules without a retry policy
/// ([`HedgePolicyBuilder::rules`](crate::hedge::HedgePolicyBuilder::rules),
/// [`CircuitBreakerPolicyBuilder::rules`](crate::circuit_breaker::CircuitBreakerPolicyBuilder::rules)).
/// Clones share the classifier.
///
/// | setting | default |
/// |---|---|
/// | retryable statuses | 408, 429, 502, 503, 504 (425 always) |
/// | retryable error kinds | connect, connect timeout, DNS, timeout, closed, other |
/// | idempotent methods | RFC 9110's: GET, HEAD, OPTIONS, TRACE, PUT, DELETE |
/// | idempotency-key header | `idempotency-key` |
/// | classifier | none |
/// | attempt header | none |
///
/// # Examples
///
/// ```
/// use backstop::policy::{classify_fn, ErrorKind, Observed, Rules, Verdict};
/// use backstop::{HedgePolicy, RetryPolicy};
///
/// // Written once...
/// let rules = Rules::builder()
///     .retry_on(500)
///     .retryable_errors([ErrorKind::Connect, ErrorKind::ConnectTimeout, ErrorKind::Dns])
///     .classifier(classify_fn(|outcome: Observed<'_>| match outcome {
///         Observed::Response { headers, .. } if headers.contains_key("x-overloaded") => {
///             Verdict::IfIdempotent
///         }
///         _ => Verdict::NoOpinion,
///     }))
///     .build()?;
/// // ...and used by every layer.
/// let retry = RetryPolicy::builder().rules(rules.clone()).build()?;
/// let hedge = HedgePolicy::builder().rules(rules.clone()).build()?;
/// # Ok::<(), backstop::policy::InvalidConfig>(())
/// ```
#[derive(Clone)]
pub struct Rules {
    statuses: StatusSet,
    errors: KindSet,
    idempotent_methods: Option<MethodSet>,
    idempotency_header: HeaderName,
    classifier: Option<Arc<dyn Classifier>>,
    attempt_header: Option<HeaderName>,
    /// A protocol's own per-attempt headers, stamped by the function its rules
    /// installed (gRPC's `grpc-timeout` and `grpc-previous-rpc-attempts`).
    stamp_with: Option<Stamp>,
    /// The name a configuration file gives these rules by ([`Rules::named`]).
    name: Option<Arc<str>>,
}

/// Stamps a protocol's own headers on one attempt: the headers, the attempt's
/// number (from 1) and the time it has. A protocol's rules install one
/// ([`RulesBuilder::stamp_with`]), so the ladder names no protocol.
pub(crate) type Stamp = fn(&mut HeaderMap, u32, Option<Duration>);

impl Default for Rules {
    fn default() -> Self {
        Rules {
            statuses: StatusSet::DEFAULT,
            errors: KindSet::ALL,
            idempotent_methods: None,
            idempotency_header: IDEMPOTENCY_KEY_HEADER,
            classifier: None,
            attempt_header: None,
            stamp_with: None,
            name: None,
        }
    }
}

impl Rules {
    /// A builder starting from the defaults.
    pub fn builder() -> RulesBuilder {
        RulesBuilder::default()
    }

    /// Whether a response with `status` is worth a retry (before the ladder's other
    /// rungs).
    pub fn is_retryable_status(&self, status: StatusCode) -> bool {
        self.statuses.contains(status)
    }

    /// Whether a failure of `kind` may be sent again under these rules (the ladder's
    /// other rungs still apply).
    pub fn is_retryable_error(&self, kind: ErrorKind) -> bool {
        !matches!(
            kind,
            ErrorKind::Config | ErrorKind::BodyWrite | ErrorKind::InvalidResponse
        ) && self.errors.allows(kind)
    }

    /// Whether the rules treat `method` as idempotent.
    #[inline]
    pub fn is_idempotent_method(&self, method: &Method) -> bool {
        match &self.idempotent_methods {
            None => is_idempotent(method),
            Some(list) => list.contains(method),
        }
    }

    /// Whether a request is idempotent: the classifier's word when it has one (a
    /// gRPC method path), else its method's.
    #[inline]
    pub fn is_idempotent(&self, method: &Method, uri: &Uri) -> bool {
        if let Some(c) = &self.classifier {
            if let Some(idempotent) = c.is_idempotent(method, uri) {
                return idempotent;
            }
        }
        self.is_idempotent_method(method)
    }

    /// The header whose presence marks a request as keyed.
    pub fn idempotency_header(&self) -> &HeaderName {
        &self.idempotency_header
    }

    /// Whether the rules have a classifier of your own.
    pub fn has_classifier(&self) -> bool {
        self.classifier.is_some()
    }

    /// The classifier's decision on `outcome`; no opinion when there is none.
    #[inline]
    pub fn decide(&self, outcome: Observed<'_>) -> Decision {
        match &self.classifier {
            Some(c) => c.classify(outcome),
            None => Decision::NO_OPINION,
        }
    }

    /// The header that tells the server which attempt it sees, when set.
    pub fn attempt_header(&self) -> Option<&HeaderName> {
        self.attempt_header.as_ref()
    }

    pub(crate) fn classifier(&self) -> Option<&dyn Classifier> {
        self.classifier.as_deref()
    }

    /// Whether each attempt's headers are stamped (an attempt header, a protocol's).
    #[inline]
    pub(crate) fn stamps(&self) -> bool {
        self.attempt_header.is_some() || self.stamp_with.is_some()
    }

    /// Stamps an attempt's headers: the attempt header, and the protocol's own
    /// (gRPC's `grpc-previous-rpc-attempts` and `grpc-timeout`, cut to `time_left`).
    pub(crate) fn stamp(&self, headers: &mut HeaderMap, attempt: u32, time_left: Option<Duration>) {
        if let Some(name) = &self.attempt_header {
            headers.insert(name.clone(), HeaderValue::from(attempt));
        }
        if let Some(stamp) = self.stamp_with {
            stamp(headers, attempt, time_left);
        }
    }
}

impl AsRef<Rules> for Rules {
    fn as_ref(&self) -> &Rules {
        self
    }
}

impl fmt::Debug for Rules {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rules")
            .field("statuses", &self.statuses)
            .field("errors", &self.errors)
            .field("idempotent_methods", &self.idempotent_methods)
            .field("idempotency_header", &self.idempotency_header)
            .field("classifier", &self.classifier.is_some())
            .field("attempt_header", &self.attempt_header)
            .field("stamp_with", &self.stamp_with.is_some())
            .field("name", &self.name)
            .finish()
    }
}

/// Builds [`Rules`], checking every setting.
///
/// Setters never fail, and each sets its own setting only: [`build`](RulesBuilder::build)
/// checks them and puts them together in one fixed order, so the result does not
/// depend on the order of the calls. [`retry_on`](RulesBuilder::retry_on) adds its
/// status to the statuses [`retryable_statuses`](RulesBuilder::retryable_statuses)
/// gives (or to the default ones), whichever came first. A setter called twice
/// keeps its last value (each `retry_on` adds one status). Giving both
/// [`classifier`](RulesBuilder::classifier) and
/// [`shared_classifier`](RulesBuilder::shared_classifier), which set the same
/// classifier, is refused.
#[derive(Clone, Default)]
pub struct RulesBuilder {
    /// `retryable_statuses`: the statuses that replace the base's.
    statuses: Option<Vec<u16>>,
    /// `retry_on`: statuses added to them.
    added: Vec<u16>,
    errors: Option<Vec<ErrorKind>>,
    idempotent_methods: Option<MethodSet>,
    idempotency_header: Option<HeaderName>,
    classifier: Option<Arc<dyn Classifier>>,
    shared_classifier: Option<Arc<dyn Classifier>>,
    attempt_header: Option<HeaderName>,
    stamp_with: Option<Stamp>,
}

impl fmt::Debug for RulesBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RulesBuilder")
            .field("statuses", &self.statuses)
            .field("added", &self.added)
            .field("errors", &self.errors)
            .field("idempotent_methods", &self.idempotent_methods)
            .field("idempotency_header", &self.idempotency_header)
            .field("classifier", &self.classifier.is_some())
            .field("shared_classifier", &self.shared_classifier.is_some())
            .field("attempt_header", &self.attempt_header)
            .field("stamp_with", &self.stamp_with.is_some())
            .finish()
    }
}

impl RulesBuilder {
    /// Also retry responses with this status (400 to 599): added to the
    /// [`retryable_statuses`](RulesBuilder::retryable_statuses) (or the default
    /// ones), whether it comes before or after them.
    pub fn retry_on(mut self, status: u16) -> Self {
        self.added.push(status);
        self
    }

    /// Replaces the retryable statuses (each 400 to 599). 425 Too Early is retried
    /// whatever this says, and each [`retry_on`](RulesBuilder::retry_on), before or
    /// after this call, adds its status.
    pub fn retryable_statuses(mut self, statuses: impl IntoIterator<Item = u16>) -> Self {
        self.statuses = Some(statuses.into_iter().collect());
        self
    }

    /// Replaces the retryable error kinds, among the transient ones:
    /// [`Connect`](ErrorKind::Connect), [`ConnectTimeout`](ErrorKind::ConnectTimeout),
    /// [`Dns`](ErrorKind::Dns), [`Timeout`](ErrorKind::Timeout) (a read or attempt
    /// timeout, a pool wait included), [`Closed`](ErrorKind::Closed) (disconnected)
    /// and [`Other`](ErrorKind::Other); all by default. A failure of a kind left out
    /// is not sent again ([`NoRetry::KindExcluded`](super::NoRetry::KindExcluded)).
    ///
    /// The other kinds are not settings: an invalid request or configuration and a
    /// failed request body are never curable, and a request canceled before it
    /// started, `REFUSED_STREAM` and `GOAWAY` were not processed and are always
    /// re-sendable, and a circuit breaker's refusal
    /// ([`CircuitOpen`](ErrorKind::CircuitOpen), from a layer beneath) follows
    /// [`Other`](ErrorKind::Other). Naming one of them is refused.
    pub fn retryable_errors(mut self, kinds: impl IntoIterator<Item = ErrorKind>) -> Self {
        self.errors = Some(kinds.into_iter().collect());
        self
    }

    /// Replaces the methods treated as idempotent (RFC 9110's by default). Adding
    /// POST or PATCH here means the server deduplicates every such request.
    pub fn idempotent_methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.idempotent_methods = Some(methods.into_iter().collect());
        self
    }

    /// The header whose presence marks a request as keyed (default
    /// `idempotency-key`).
    pub fn idempotency_header(mut self, name: HeaderName) -> Self {
        self.idempotency_header = Some(name);
        self
    }

    /// A classifier of your own, consulted before the built-in rules. Giving
    /// [`shared_classifier`](RulesBuilder::shared_classifier) too is refused.
    pub fn classifier(mut self, classifier: impl Classifier) -> Self {
        self.classifier = Some(Arc::new(classifier));
        self
    }

    /// A classifier already shared. Giving [`classifier`](RulesBuilder::classifier)
    /// too is refused.
    pub fn shared_classifier(mut self, classifier: Arc<dyn Classifier>) -> Self {
        self.shared_classifier = Some(classifier);
        self
    }

    /// Sends `name: N` on every attempt, N counting from 1, so the server knows
    /// which attempt it sees (off by default; Envoy's `x-envoy-attempt-count` is the
    /// precedent).
    pub fn attempt_header(mut self, name: HeaderName) -> Self {
        self.attempt_header = Some(name);
        self
    }

    /// Stamps each attempt's headers with `stamp` too: a protocol's rules (gRPC's)
    /// install their per-attempt headers here.
    #[cfg(feature = "grpc")]
    pub(crate) fn stamp_with(mut self, stamp: Stamp) -> Self {
        self.stamp_with = Some(stamp);
        self
    }

    /// The rules, or the first invalid setting.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] names the setting and what is wrong with it: a status
    /// outside 400 to 599 (the smallest such, as `retry_on`), an error kind that is
    /// not a setting, or both a `classifier` and a `shared_classifier`.
    pub fn build(self) -> Result<Rules, InvalidConfig> {
        self.build_on(Rules::default())
    }

    /// `base` with the settings given here on top of it: each replaces the base's
    /// (the statuses `retry_on` adds to them), whatever the order of the calls.
    pub(crate) fn build_on(self, base: Rules) -> Result<Rules, InvalidConfig> {
        let mut error = FirstError::default();
        let codes = self.statuses.iter().flatten().chain(&self.added);
        if let Some(bad) = codes.copied().filter(|c| !(400..=599).contains(c)).min() {
            error.fail("retry_on", format!("status must be 400 to 599, got {bad}"));
        }
        let mut kinds = KindSet(0);
        for kind in self.errors.iter().flatten() {
            match KindSet::bit(*kind) {
                Some(b) => kinds.0 |= b,
                None => error.fail(
                    "retryable_errors",
                    format!(
                        "{} is not a setting: it is always or never retried",
                        kind.as_str()
                    ),
                ),
            }
        }
        if self.classifier.is_some() && self.shared_classifier.is_some() {
            error.fail(
                "classifier",
                "`classifier` and `shared_classifier` both set the classifier; give one".to_owned(),
            );
        }
        error.check()?;
        let mut rules = base;
        if let Some(statuses) = self.statuses {
            rules.statuses = statuses.into_iter().fold(StatusSet::EMPTY, StatusSet::with);
        }
        rules.statuses = self.added.into_iter().fold(rules.statuses, StatusSet::with);
        if self.errors.is_some() {
            rules.errors = kinds;
        }
        if let Some(methods) = self.idempotent_methods {
            rules.idempotent_methods = Some(methods);
        }
        if let Some(name) = self.idempotency_header {
            rules.idempotency_header = name;
        }
        if let Some(classifier) = self.classifier.or(self.shared_classifier) {
            rules.classifier = Some(classifier);
        }
        if let Some(name) = self.attempt_header {
            rules.attempt_header = Some(name);
        }
        if let Some(stamp) = self.stamp_with {
            rules.stamp_with = Some(stamp);
        }
        Ok(rules)
    }
}

mod file;

#[cfg(test)]
mod tests;
