//! The decision ladder: may this outcome be sent again?

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use http::{HeaderMap, HeaderName, Method, StatusCode};

use super::{ErrorKind, NoRetry, Observed, Progress, Rules, Verdict};

/// The header a server uses to say whether a request should be retried.
pub(crate) const X_SHOULD_RETRY: HeaderName = HeaderName::from_static("x-should-retry");

/// Why a failed outcome may be sent again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RetryReason {
    /// The server said `x-should-retry: true`.
    ServerAsked,
    /// The server did not process the request (425 Too Early, `REFUSED_STREAM`, a
    /// stream refused by `GOAWAY`, a request canceled or a connection refused
    /// before it started).
    NotProcessed,
    /// The method is idempotent.
    Idempotent,
    /// The request carries an idempotency key.
    Keyed,
    /// Nothing of the request was written.
    NothingWritten,
}

impl fmt::Display for RetryReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RetryReason::ServerAsked => "server asked for a retry",
            RetryReason::NotProcessed => "not processed",
            RetryReason::Idempotent => "idempotent method",
            RetryReason::Keyed => "idempotency key",
            RetryReason::NothingWritten => "nothing written",
        })
    }
}

/// The verdict of the decision ladder on one outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Classification {
    /// An answer to return as it is.
    Answer,
    /// A failure that may be sent again, if the gates allow.
    Retryable(RetryReason),
    /// A failure that must not be sent again.
    NotRetryable(NoRetry),
}

impl Classification {
    /// Whether the verdict allows another attempt.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Classification::Retryable(_))
    }
}

/// The outcome of one attempt, as the ladder reads it.
#[derive(Clone, Copy, Debug)]
pub enum Outcome<'a> {
    /// A response head arrived.
    Response {
        /// Its status.
        status: StatusCode,
        /// Its headers (for `x-should-retry`).
        headers: &'a HeaderMap,
    },
    /// The attempt failed with an error of this kind.
    Error(ErrorKind),
}

/// What the ladder needs to know about the request.
#[derive(Clone, Copy, Debug)]
pub struct RequestFacts<'a> {
    /// The request method.
    pub method: &'a Method,
    /// The request carries an idempotency key.
    pub keyed: bool,
}

/// Runs the decision ladder on one attempt's outcome, by the rules of `policy` (a
/// [`RetryPolicy`](crate::RetryPolicy), or the [`Rules`] themselves); the first
/// rung that matches decides:
///
/// 0. the rules' [`Classifier`](super::Classifier), when there is one and it has an
///    opinion, decides in the ladder's own words ([`Verdict`]); a verdict that a
///    failure is retryable when idempotent still falls to rung 6 for a POST or
///    PATCH without a key;
/// 1. a `2xx` is always an answer; a response whose status is not retryable (and
///    without `x-should-retry: true`) is an answer, returned as it is;
/// 2. a failure that re-sending cannot cure (an invalid request or configuration,
///    a certificate, or a failed request body) is never sent again, and neither is
///    an error of a kind the rules leave out
///    ([`RulesBuilder::retryable_errors`](super::RulesBuilder::retryable_errors));
/// 3. `x-should-retry: true|false` on a response that is not a `2xx` decides when
///    present;
/// 4. a request the server did not process (425, `REFUSED_STREAM`, a stream refused
///    by `GOAWAY`, canceled before it started, a connection that could not be
///    made, a name that did not resolve, a TLS handshake cut off) may be sent
///    again whatever its method;
/// 5. an idempotent method, or a request with an idempotency key, may be sent
///    again;
/// 6. anything else (a POST or PATCH without a key) only when nothing of it was
///    written: a recorded fact when a progress-tracking transport kept `progress`,
///    and otherwise only for the connect-phase errors of rung 4.
///
/// Gates (attempts, body, deadline, Retry-After, budget, breaker) are checked after
/// this, by the layer.
///
/// # Examples
///
/// ```
/// use backstop::policy::{classify, Classification, Outcome, RequestFacts, RetryReason};
/// use backstop::RetryPolicy;
/// use http::{HeaderMap, HeaderName, Method, StatusCode};
///
/// let policy = RetryPolicy::default();
/// let headers = HeaderMap::new();
/// let get = RequestFacts { method: &Method::GET, keyed: false };
/// let unavailable = Outcome::Response { status: StatusCode::SERVICE_UNAVAILABLE, headers: &headers };
/// assert_eq!(classify(&policy, get, unavailable, None), Classification::Retryable(RetryReason::Idempotent));
///
/// let post = RequestFacts { method: &Method::POST, keyed: false };
/// assert!(!classify(&policy, post, unavailable, None).is_retryable());
/// ```
pub fn classify(
    policy: &(impl AsRef<Rules> + ?Sized),
    request: RequestFacts<'_>,
    outcome: Outcome<'_>,
    progress: Option<Progress>,
) -> Classification {
    let rules = policy.as_ref();
    let idempotent = rules.is_idempotent_method(request.method);
    ladder(rules, idempotent, request.keyed, outcome, None, progress).0
}

/// The ladder itself, for a request already known to be idempotent or keyed (the
/// retry layer works that out once per call); `error` is the failed attempt's
/// error, for the classifier. With the verdict comes the classifier's wait hint,
/// when the outcome is retryable and it gave one.
pub(crate) fn ladder(
    rules: &Rules,
    idempotent: bool,
    keyed: bool,
    outcome: Outcome<'_>,
    error: Option<&(dyn StdError + 'static)>,
    progress: Option<Progress>,
) -> (Classification, Option<Duration>) {
    let Some(classifier) = rules.classifier() else {
        return (built_in(rules, idempotent, keyed, outcome, progress), None);
    };
    let observed = match outcome {
        Outcome::Response { status, headers } => Observed::Response { status, headers },
        Outcome::Error(kind) => Observed::Error { kind, error },
    };
    let decision = classifier.classify(observed);
    let class = match decision.verdict {
        Verdict::Answer => Classification::Answer,
        Verdict::NeverCurable => Classification::NotRetryable(NoRetry::Permanent),
        Verdict::Declined => Classification::NotRetryable(NoRetry::ServerDeclined),
        Verdict::NotProcessed => Classification::Retryable(RetryReason::NotProcessed),
        Verdict::IfIdempotent => if_idempotent(idempotent, keyed, outcome, progress),
        Verdict::IfNothingWritten => if_nothing_written(outcome, progress),
        // `NoOpinion`, and any verdict added later.
        _ => built_in(rules, idempotent, keyed, outcome, progress),
    };
    let wait = if class.is_retryable() {
        decision.wait
    } else {
        None
    };
    (class, wait)
}

/// Rungs 1 to 6: the built-in rules.
fn built_in(
    rules: &Rules,
    idempotent: bool,
    keyed: bool,
    outcome: Outcome<'_>,
    progress: Option<Progress>,
) -> Classification {
    // Rungs 1 and 3 read the response; rung 2 reads the error.
    let not_processed;
    match outcome {
        Outcome::Response { status, headers } => {
            if status.is_success() {
                return Classification::Answer;
            }
            let should_retry = should_retry(headers);
            if is_answer(rules, status, should_retry) {
                return Classification::Answer;
            }
            match should_retry {
                Some(true) => return Classification::Retryable(RetryReason::ServerAsked),
                Some(false) => return Classification::NotRetryable(NoRetry::ServerDeclined),
                None => {}
            }
            not_processed = status == StatusCode::TOO_EARLY;
        }
        Outcome::Error(kind) => match kind {
            ErrorKind::Config => return Classification::NotRetryable(NoRetry::Permanent),
            ErrorKind::BodyWrite => return Classification::NotRetryable(NoRetry::BodyFailed),
            // The same server would send the same head again.
            ErrorKind::InvalidResponse => return Classification::NotRetryable(NoRetry::Permanent),
            _ if !rules.is_retryable_error(kind) => {
                return Classification::NotRetryable(NoRetry::KindExcluded)
            }
            _ => not_processed = kind.is_not_processed(),
        },
    }
    // Rung 4.
    if not_processed {
        return Classification::Retryable(RetryReason::NotProcessed);
    }
    if_idempotent(idempotent, keyed, outcome, progress)
}

/// Rungs 5 and 6.
fn if_idempotent(
    idempotent: bool,
    keyed: bool,
    outcome: Outcome<'_>,
    progress: Option<Progress>,
) -> Classification {
    if idempotent {
        return Classification::Retryable(RetryReason::Idempotent);
    }
    if keyed {
        return Classification::Retryable(RetryReason::Keyed);
    }
    if_nothing_written(outcome, progress)
}

/// Rung 6: a response proves the request was written; an error needs a record.
fn if_nothing_written(outcome: Outcome<'_>, progress: Option<Progress>) -> Classification {
    match (outcome, progress) {
        (Outcome::Error(_), Some(p)) if p.proves_nothing_written() => {
            Classification::Retryable(RetryReason::NothingWritten)
        }
        _ => Classification::NotRetryable(NoRetry::MaybeProcessed),
    }
}

/// Rung 1: whether a response is an answer to return as it is, whatever the
/// request. This is the whole ladder for a response that is not a retryable status,
/// which lets the retry layer's success path skip the rest. A `2xx` is always an
/// answer: `x-should-retry` is read only on other statuses (as the SDKs that
/// introduced the header do).
#[inline]
pub(crate) fn is_answer(rules: &Rules, status: StatusCode, should_retry: Option<bool>) -> bool {
    status.is_success()
        || (should_retry != Some(true)
            && status != StatusCode::TOO_EARLY
            && !rules.is_retryable_status(status))
}

/// Whether a response ends the call as an answer under `rules`, their classifier
/// first: the whole ladder for a response on the success path.
#[inline(always)]
pub(crate) fn is_answer_under(rules: &Rules, status: StatusCode, headers: &HeaderMap) -> bool {
    // A 2xx with no classifier to ask is settled where the answer arrives.
    if rules.classifier().is_none() && status.is_success() {
        return true;
    }
    is_answer_asked(rules, status, headers)
}

/// [`is_answer_under`] for an answer the classifier is asked about, or one that is
/// not a 2xx.
fn is_answer_asked(rules: &Rules, status: StatusCode, headers: &HeaderMap) -> bool {
    if let Some(c) = rules.classifier() {
        match c.classify(Observed::Response { status, headers }).verdict {
            Verdict::NoOpinion => {}
            Verdict::Answer => return true,
            _ => return false,
        }
    }
    // A 2xx is an answer whatever its headers say, so they are not read for one.
    status.is_success() || is_answer(rules, status, should_retry(headers))
}

/// `x-should-retry: true|false`, when present and valid.
#[inline]
pub(crate) fn should_retry(headers: &HeaderMap) -> Option<bool> {
    if headers.is_empty() {
        return None;
    }
    let value = headers.get(&X_SHOULD_RETRY)?.as_bytes();
    if value.eq_ignore_ascii_case(b"true") {
        Some(true)
    } else if value.eq_ignore_ascii_case(b"false") {
        Some(false)
    } else {
        None
    }
}

#[cfg(test)]
mod tests;
