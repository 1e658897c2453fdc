//! Attempt history and the reasons a call stopped.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;

use super::{ErrorKind, Progress, RetryReason};

/// Why a request body cannot be sent again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NotReplayable {
    /// The caller marked the body one-shot ([`OneShot`](crate::OneShot)).
    OneShot,
    /// Never reported any more: a size hint over the replay cap does not stop a
    /// re-send. A body no attempt has read is sent again whole, one read no
    /// further than the cap from its kept prefix and the rest of the original;
    /// only [`CapExceeded`](NotReplayable::CapExceeded) stops it.
    #[deprecated(
        note = "never reported: whether a body can be sent again depends on how far an attempt read it (`CapExceeded`), not on its size hint"
    )]
    SizeHintOverCap,
    /// An attempt read the body past the replay cap (a chunk after the one that
    /// crossed it): what it sent is no longer all kept, so no later attempt could
    /// send the whole body.
    CapExceeded,
    /// The body itself failed while it was being read.
    BodyError,
}

impl fmt::Display for NotReplayable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NotReplayable::OneShot => "body is one-shot",
            #[allow(deprecated)]
            NotReplayable::SizeHintOverCap => "body size over the replay cap",
            NotReplayable::CapExceeded => "body read past the replay cap",
            NotReplayable::BodyError => "body failed while being read",
        })
    }
}

/// Why a failed outcome may not be sent again however the gates stand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NoRetry {
    /// The same request would fail the same way (an invalid request or
    /// configuration, a certificate, or a response head the server would send
    /// again: too large or malformed), or a classifier said it cannot be cured.
    Permanent,
    /// The server said not to (`x-should-retry: false`, a negative gRPC pushback).
    ServerDeclined,
    /// A non-idempotent request without an idempotency key may have been processed.
    MaybeProcessed,
    /// The request body failed; sending it again would fail again.
    BodyFailed,
    /// The error's kind is left out of the rules' retryable error kinds
    /// ([`RulesBuilder::retryable_errors`](super::RulesBuilder::retryable_errors)).
    KindExcluded,
}

impl fmt::Display for NoRetry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NoRetry::Permanent => "failure is permanent",
            NoRetry::ServerDeclined => "server declined a retry",
            NoRetry::MaybeProcessed => "request may have been processed",
            NoRetry::BodyFailed => "request body failed",
            NoRetry::KindExcluded => "error kind not retryable under the rules",
        })
    }
}

/// Why the attempt sequence of a call stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StopReason {
    /// The last outcome was an answer to return as it is (a success, or a status
    /// that is not retryable).
    Answered,
    /// The last outcome failed and may not be sent again.
    NotRetryable(NoRetry),
    /// The policy's attempts were all used.
    AttemptsExhausted,
    /// The request body cannot be sent again.
    BodyNotReplayable(NotReplayable),
    /// The deadline leaves no time for a wait plus a useful attempt.
    Deadline,
    /// The server asked for a wait longer than the policy allows.
    RetryAfterTooLong,
    /// The retry budget is spent.
    Budget,
    /// The origin's circuit breaker refuses calls.
    CircuitOpen,
    /// The origin is paused (a server asked the client to come back later), and
    /// the call may not wait for the pause to end: the deadline ends inside it, or
    /// the budget fails fast.
    Paused,
    /// The adaptive throttle shed the call before its first attempt: its origin
    /// has been rejecting calls for overload
    /// ([`ThrottlePolicy`](crate::throttle::ThrottlePolicy)).
    Throttled,
}

impl StopReason {
    /// A short `snake_case` name, for metrics labels.
    pub fn as_str(&self) -> &'static str {
        match self {
            StopReason::Answered => "answered",
            StopReason::NotRetryable(_) => "not_retryable",
            StopReason::AttemptsExhausted => "attempts_exhausted",
            StopReason::BodyNotReplayable(_) => "body_not_replayable",
            StopReason::Deadline => "deadline",
            StopReason::RetryAfterTooLong => "retry_after_too_long",
            StopReason::Budget => "budget",
            StopReason::CircuitOpen => "circuit_open",
            StopReason::Paused => "paused",
            StopReason::Throttled => "throttled",
        }
    }

    /// Whether a gate (attempts, body, deadline, Retry-After, budget, breaker,
    /// pause) stopped a sequence whose last outcome was retryable.
    pub fn is_gate(&self) -> bool {
        !matches!(self, StopReason::Answered | StopReason::NotRetryable(_))
    }
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StopReason::Answered => f.write_str("answered"),
            StopReason::NotRetryable(why) => write!(f, "not retryable: {why}"),
            StopReason::AttemptsExhausted => f.write_str("attempts exhausted"),
            StopReason::BodyNotReplayable(why) => write!(f, "not replayable: {why}"),
            StopReason::Deadline => f.write_str("deadline"),
            StopReason::RetryAfterTooLong => f.write_str("retry-after over the allowed maximum"),
            StopReason::Budget => f.write_str("retry budget spent"),
            StopReason::CircuitOpen => f.write_str("circuit open"),
            StopReason::Paused => f.write_str("origin paused"),
            StopReason::Throttled => f.write_str("throttled by the client"),
        }
    }
}

/// What one attempt ended with: a status or an error kind, never a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AttemptOutcome {
    /// A response head with this status.
    Status(StatusCode),
    /// An error of this kind.
    Error(ErrorKind),
    /// The attempt was abandoned (a hedge that lost, or a call dropped).
    Canceled,
}

impl fmt::Display for AttemptOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttemptOutcome::Status(s) => match s.canonical_reason() {
                Some(r) => write!(f, "{} {}", s.as_u16(), r),
                None => write!(f, "{}", s.as_u16()),
            },
            AttemptOutcome::Error(kind) => fmt::Display::fmt(kind, f),
            AttemptOutcome::Canceled => f.write_str("canceled"),
        }
    }
}

/// One attempt of a call.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AttemptRecord {
    /// 1 for the first attempt.
    pub number: u32,
    /// What the attempt ended with.
    pub outcome: AttemptOutcome,
    /// The server's Retry-After hint on this attempt, if any was valid (for a
    /// gRPC answer, its `grpc-retry-pushback-ms`).
    pub retry_after: Option<Duration>,
    /// The gRPC status of a trailers-only answer (HTTP 200 whose `grpc-status` is
    /// in its head), when the attempt ended with one.
    #[cfg(feature = "grpc")]
    #[cfg_attr(docsrs, doc(cfg(feature = "grpc")))]
    pub grpc_status: Option<super::grpc_status::Code>,
    /// The wait before the next attempt, if one was scheduled.
    pub wait: Option<Duration>,
    /// Why the next attempt was sent, if one was scheduled: the ladder's reason
    /// for the retry.
    pub retry_reason: Option<RetryReason>,
    /// How far the request got onto the wire, when that was recorded.
    pub progress: Option<Progress>,
    /// The attempt was a hedge sent beside another.
    pub hedge: bool,
    /// Time from the start of the call to the end of this attempt.
    pub elapsed: Duration,
}

/// The attempts of one call, in order, and why the sequence stopped.
///
/// It rides inside [`Error`](crate::Error), and on the final response's extensions
/// when there is something to tell: more than one attempt, or a gate that stopped a
/// retry. A response answered at the first attempt carries none, so the success
/// path allocates nothing for it.
/// Its text names statuses and error kinds only: never a URL, a header value or a
/// body, so it is safe to log.
///
/// ```text
/// attempt 1/3: 503 Service Unavailable (Retry-After 2.0s) after 0.41s, waited 2.0s
/// attempt 2/3: 200 OK after 2.43s
/// stopped: answered
/// ```
///
/// A call that matched a [named route](crate::retry::Route::named) names it first,
/// quoted and escaped:
///
/// ```text
/// route: "catalog"
/// attempt 1/3: 503 Service Unavailable after 0.02s, waited 0.01s
/// ...
/// ```
///
/// A call held while its origin was paused says so before its attempts:
///
/// ```text
/// held 1.50s: origin paused
/// attempt 1/3: 200 OK after 1.52s
/// stopped: answered
/// ```
///
/// A gRPC answer names its code and its exact pushback (feature `grpc`):
///
/// ```text
/// attempt 1/3: 200 OK, grpc-status 14 UNAVAILABLE (pushback 150ms) after 0.01s, waited 0.15s
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct History {
    attempts: Vec<AttemptRecord>,
    max_attempts: u32,
    stop: Option<StopReason>,
    route: Option<Arc<str>>,
    held: Option<Duration>,
}

impl History {
    pub(crate) fn new(max_attempts: u32) -> Self {
        History {
            attempts: Vec::new(),
            max_attempts,
            stop: None,
            route: None,
            held: None,
        }
    }

    pub(crate) fn set_held(&mut self, held: Duration) {
        self.held = Some(held);
    }

    /// How long the call was held before its first attempt, while its origin was
    /// paused (a server's `Retry-After` or pushback on another call), when a
    /// [`Backstop`](crate::Backstop) stack or a [`BudgetLayer`](crate::BudgetLayer)
    /// held it. A held call's response carries its history even when its first
    /// attempt answered.
    pub fn held(&self) -> Option<Duration> {
        self.held
    }

    pub(crate) fn set_route(&mut self, route: Option<Arc<str>>) {
        self.route = route;
    }

    /// The name of the route the call matched, when the route was named.
    pub fn route(&self) -> Option<&str> {
        self.route.as_deref()
    }

    pub(crate) fn push(&mut self, record: AttemptRecord) {
        self.attempts.push(record);
    }

    pub(crate) fn last_mut(&mut self) -> Option<&mut AttemptRecord> {
        self.attempts.last_mut()
    }

    pub(crate) fn stop(&mut self, reason: StopReason) {
        self.stop = Some(reason);
    }

    /// The attempts, first to last.
    pub fn attempts(&self) -> &[AttemptRecord] {
        &self.attempts
    }

    /// How many sends were made: attempts, and the hedges a hedge layer beneath
    /// sent beside them.
    pub fn len(&self) -> usize {
        self.attempts.len()
    }

    /// Whether no attempt was made.
    pub fn is_empty(&self) -> bool {
        self.attempts.is_empty()
    }

    /// How many retries were made after the first attempt (hedges not counted).
    pub fn retries(&self) -> usize {
        self.attempts
            .iter()
            .filter(|a| !a.hedge)
            .count()
            .saturating_sub(1)
    }

    /// How many hedges (extra copies of an attempt) were sent.
    pub fn hedges(&self) -> usize {
        self.attempts.iter().filter(|a| a.hedge).count()
    }

    /// Why the sequence stopped.
    pub fn stop_reason(&self) -> Option<StopReason> {
        self.stop
    }

    /// Whether the policy judged the last outcome worth sending again, so that a
    /// gate (attempts, body, deadline, Retry-After, budget, breaker) stopped the
    /// sequence: the verdict on a returned response, as
    /// [`Error::is_retryable`](crate::Error::is_retryable) is on an error.
    /// [`Report`](super::Report) reads it from either.
    pub fn is_retryable(&self) -> bool {
        !self.attempts.is_empty() && self.stop.is_some_and(|s| s.is_gate())
    }

    /// Retries sent because the server did not process the attempt before them,
    /// or nothing of it was written: what gRPC calls *transparent* retries
    /// ([`RetryReason::NotProcessed`], [`RetryReason::NothingWritten`]).
    pub fn transparent_retries(&self) -> usize {
        self.attempts
            .iter()
            .filter(|a| {
                matches!(
                    a.retry_reason,
                    Some(RetryReason::NotProcessed | RetryReason::NothingWritten)
                )
            })
            .count()
    }

    /// The time the call spent with no attempt in flight: its [hold](History::held)
    /// and the waits before its retries.
    pub fn waited(&self) -> Duration {
        self.attempts
            .iter()
            .filter_map(|a| a.wait)
            .fold(self.held.unwrap_or_default(), Duration::saturating_add)
    }

    /// The last Retry-After hint the server gave, including one that was longer than
    /// the policy allowed (so the caller can reschedule the call).
    pub fn retry_after(&self) -> Option<Duration> {
        self.attempts.iter().rev().find_map(|a| a.retry_after)
    }

    /// The attempts' limit of the policy that ran the call.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }
}

impl fmt::Display for History {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(route) = &self.route {
            // Quoted and escaped: a name cannot forge a line of its own.
            writeln!(f, "route: {route:?}")?;
        }
        if let Some(held) = self.held {
            writeln!(f, "held {:.2}s: origin paused", held.as_secs_f64())?;
        }
        for a in &self.attempts {
            write!(
                f,
                "attempt {}/{}: {}",
                a.number, self.max_attempts, a.outcome
            )?;
            #[cfg(feature = "grpc")]
            if let Some(code) = a.grpc_status {
                write!(f, ", grpc-status {} {code}", code as u32)?;
            }
            if a.hedge {
                f.write_str(" (hedge)")?;
            }
            match a.retry_after {
                // A pushback is exact to the millisecond: written as it came.
                #[cfg(feature = "grpc")]
                Some(pushback) if a.grpc_status.is_some() => write!(f, " (pushback {pushback:?})")?,
                Some(ra) => write!(f, " (Retry-After {:.1}s)", ra.as_secs_f64())?,
                None => {}
            }
            write!(f, " after {:.2}s", a.elapsed.as_secs_f64())?;
            if let Some(w) = a.wait {
                write!(f, ", waited {:.2}s", w.as_secs_f64())?;
            }
            f.write_str("\n")?;
        }
        match self.stop {
            Some(stop) => write!(f, "stopped: {stop}"),
            None => f.write_str("in progress"),
        }
    }
}
