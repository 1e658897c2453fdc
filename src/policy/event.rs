//! What an observer is told, one event per decision, each naming its call; and the
//! observer itself. The call's context carries the observer, so they are part of
//! the shared vocabulary; [`observe`](crate::observe) is their public home.

use std::time::Duration;

use tokio::time::Instant;

use super::circuit::State;
use super::{AttemptOutcome, History, Progress, RetryReason, StopReason};

#[cfg(feature = "metrics")]
pub(crate) use super::call_info::CallLabels;
pub use super::call_info::{CallInfo, Origin};

/// Sees what the layers of a stack decide. See the [module docs](crate::observe).
///
/// It runs on the request path, inside the layers' futures: it must be cheap and
/// must not block. A closure `Fn(&Event<'_>)` is an observer too.
pub trait Observer: Send + Sync + 'static {
    /// Tells the observer of one event.
    fn on_event(&self, event: &Event<'_>);
}

impl<F> Observer for F
where
    F: Fn(&Event<'_>) + Send + Sync + 'static,
{
    fn on_event(&self, event: &Event<'_>) {
        self(event)
    }
}

/// Why a call was refused before any attempt was sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// The origin's circuit breaker refuses calls; `next_probe_at` is when it lets
    /// the next probe through (`None` while half-open with its probes in flight).
    CircuitOpen {
        /// When the cooldown ends.
        next_probe_at: Option<Instant>,
    },
    /// A retry budget refused the call (for a layer of yours that refuses first
    /// attempts on a spent budget; backstop's budget layer counts first attempts
    /// and never refuses one).
    Budget,
    /// The call's deadline left less than the policy's minimum attempt time.
    Deadline,
    /// The call's origin is paused (a server asked it to come back later) and the
    /// call may not wait: the budget fails fast, or its deadline ends inside the
    /// pause (told by the budget layer).
    Paused {
        /// When the pause ends.
        until: Instant,
    },
    /// The adaptive throttle shed the call: its origin has been rejecting calls
    /// for overload ([`ThrottlePolicy`](crate::throttle::ThrottlePolicy)). The
    /// window's counts before the call, from which the probability of shedding it
    /// was computed.
    Throttled {
        /// Requests in the origin's window.
        requests: u64,
        /// Accepts in the origin's window.
        accepts: u64,
    },
}

impl Refusal {
    /// A short `snake_case` name, for metric labels.
    pub fn as_str(&self) -> &'static str {
        match self {
            Refusal::CircuitOpen { .. } => "circuit_open",
            Refusal::Budget => "budget",
            Refusal::Deadline => "deadline",
            Refusal::Paused { .. } => "paused",
            Refusal::Throttled { .. } => "throttled",
        }
    }
}

/// One logical call ended (told by the retry layer, once per call it ran).
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct CallFinished<'a> {
    /// The call.
    pub call: &'a CallInfo,
    /// What it ended with: the last status or error kind.
    pub outcome: AttemptOutcome,
    /// Requests sent, hedges included (`0` when refused before any).
    pub attempts: u32,
    /// From the call's start to its end.
    pub elapsed: Duration,
    /// Why no further attempt was made.
    pub stop: StopReason,
    /// Whole retries left in the call's budget account at the end, when the call
    /// has one that can tell. A call of one attempt keeps nothing for retries, its
    /// account included, so this is `None` for it.
    pub budget_available: Option<u64>,
    /// The call's history, when it has one: more than one attempt, a gate that
    /// stopped a retry, or a hold (a first answer has none).
    pub history: Option<&'a History>,
}

/// One request sent for a call ended: an attempt, or, when a hedge layer beneath
/// sent copies of it, each of its sends (told by the retry layer, once per request
/// sent: the original and each copy, losers included).
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct AttemptFinished<'a> {
    /// The call.
    pub call: &'a CallInfo,
    /// The attempt's number, from 1 (the same for every send of a hedged attempt).
    pub attempt: u32,
    /// Which send of the attempt: 0 for the original, from 1 for a hedged copy.
    pub copy: u32,
    /// Its status or error kind ([`Canceled`](AttemptOutcome::Canceled) for a send
    /// that lost a hedge race).
    pub outcome: AttemptOutcome,
    /// How far the request got onto the wire, when the attempt was tracked (a
    /// keyless non-idempotent request).
    pub progress: Option<Progress>,
    /// From the send to its outcome.
    pub elapsed: Duration,
}

/// A retryable outcome passed the gates: another attempt follows the wait.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct RetryScheduled<'a> {
    /// The call.
    pub call: &'a CallInfo,
    /// The attempt that failed.
    pub attempt: u32,
    /// Why the outcome may be sent again.
    pub reason: RetryReason,
    /// The backoff, or the server's `Retry-After`.
    pub wait: Duration,
}

/// A retryable outcome was not retried: a gate refused, or the request may have
/// been processed.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct RetrySkipped<'a> {
    /// The call.
    pub call: &'a CallInfo,
    /// The attempt whose retry was skipped.
    pub attempt: u32,
    /// The gate that refused (attempts, body, deadline, `Retry-After`, budget,
    /// breaker, pause), or
    /// [`NotRetryable(MaybeProcessed)`](super::NoRetry::MaybeProcessed): an outcome
    /// retried for an idempotent or keyed request (a 503, a timeout), which the
    /// decision ladder does not send again because this keyless non-idempotent one
    /// may have been processed; or
    /// [`NotRetryable(ServerDeclined)`](super::NoRetry::ServerDeclined): a
    /// retryable outcome the server said not to send again (`x-should-retry:
    /// false`, a negative gRPC pushback).
    pub gate: StopReason,
}

/// A call was refused without sending anything.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct CallRefused<'a> {
    /// The call.
    pub call: &'a CallInfo,
    /// Why.
    pub refusal: Refusal,
}

/// The hedge layer sent a copy of a slow request.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct HedgeSent<'a> {
    /// The call.
    pub call: &'a CallInfo,
    /// The copy's number, from 1 (the original is 0).
    pub copy: u32,
    /// How long after the original it was sent.
    pub after: Duration,
}

/// A hedged copy's answer won the race.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct HedgeWon<'a> {
    /// The call.
    pub call: &'a CallInfo,
    /// The winning copy's number, from 1.
    pub copy: u32,
    /// From the original's start to the winning answer.
    pub elapsed: Duration,
}

/// A send that lost a hedge race was cancelled (its future dropped: hyper resets
/// an HTTP/2 stream and closes an HTTP/1.1 connection).
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct LoserCancelled<'a> {
    /// The call.
    pub call: &'a CallInfo,
    /// The loser's number: 0 for the original, from 1 for a copy.
    pub copy: u32,
}

/// A circuit breaker changed state.
///
/// Breakers are per origin by default, and `call` is the call whose admission or
/// outcome moved it; with [`Partition::global`](crate::Partition::global) one
/// breaker serves every origin and `call.origin()` is only that call's.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct BreakerStateChanged<'a> {
    /// The call that moved the breaker.
    pub call: &'a CallInfo,
    /// The state before.
    pub from: State,
    /// The state now.
    pub to: State,
    /// When an open breaker lets its next probe through.
    pub next_probe_at: Option<Instant>,
}

/// A retry budget account ran dry: this call's retry or hedge took its last whole
/// retry, and the next is refused until first attempts refill it.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct BudgetRanDry<'a> {
    /// The call that spent the last retry.
    pub call: &'a CallInfo,
}

/// A call's origin was paused: its answer (a 429 or 503 with a wait hint, or a
/// gRPC pushback) asks every call to the origin to come back later.
///
/// Pauses are kept per budget account (per origin by default), and `call` is the
/// call whose answer paused it.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct OriginPaused<'a> {
    /// The call whose answer paused the origin.
    pub call: &'a CallInfo,
    /// From now to the pause's end (the hint, capped by the budget's `max_pause`).
    pub pause: Duration,
}

/// An ongoing pause of a call's origin was moved out by a later hint.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct OriginPauseExtended<'a> {
    /// The call whose answer extended the pause.
    pub call: &'a CallInfo,
    /// How much later the pause ends.
    pub by: Duration,
}

/// A call's origin is no longer paused: the call is the first to find the pause
/// over (told once per pause).
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct OriginResumed<'a> {
    /// The call that found the pause over.
    pub call: &'a CallInfo,
}

/// A call met its origin's pause and waits for it before an attempt: its first
/// (told by the budget layer) or a retry (told by the retry layer). A call told
/// again waits again: a later hint moved the pause's end.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct CallWaited<'a> {
    /// The call.
    pub call: &'a CallInfo,
    /// From now to the attempt: the pause's end plus the call's share of the
    /// release spread (for a retry, its own backoff included).
    pub wait: Duration,
}

/// What an [`Observer`] is told.
///
/// Every event names its [call](CallInfo); none holds a URL path, query, header
/// value or body.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum Event<'a> {
    /// A call ended.
    CallFinished(CallFinished<'a>),
    /// An attempt ended.
    AttemptFinished(AttemptFinished<'a>),
    /// A retry follows a wait.
    RetryScheduled(RetryScheduled<'a>),
    /// A gate refused a retry.
    RetrySkipped(RetrySkipped<'a>),
    /// A call was refused before any attempt.
    CallRefused(CallRefused<'a>),
    /// A hedge was sent.
    HedgeSent(HedgeSent<'a>),
    /// A hedge won.
    HedgeWon(HedgeWon<'a>),
    /// A loser of a hedge race was cancelled.
    LoserCancelled(LoserCancelled<'a>),
    /// A circuit breaker changed state.
    BreakerStateChanged(BreakerStateChanged<'a>),
    /// A retry budget ran dry.
    BudgetRanDry(BudgetRanDry<'a>),
    /// An origin was paused.
    OriginPaused(OriginPaused<'a>),
    /// An origin's pause was extended.
    OriginPauseExtended(OriginPauseExtended<'a>),
    /// An origin's pause ended.
    OriginResumed(OriginResumed<'a>),
    /// A call waits for its origin's pause.
    CallWaited(CallWaited<'a>),
}

impl Event<'_> {
    /// The call the event is about.
    pub fn call(&self) -> &CallInfo {
        match self {
            Event::CallFinished(e) => e.call,
            Event::AttemptFinished(e) => e.call,
            Event::RetryScheduled(e) => e.call,
            Event::RetrySkipped(e) => e.call,
            Event::CallRefused(e) => e.call,
            Event::HedgeSent(e) => e.call,
            Event::HedgeWon(e) => e.call,
            Event::LoserCancelled(e) => e.call,
            Event::BreakerStateChanged(e) => e.call,
            Event::BudgetRanDry(e) => e.call,
            Event::OriginPaused(e) => e.call,
            Event::OriginPauseExtended(e) => e.call,
            Event::OriginResumed(e) => e.call,
            Event::CallWaited(e) => e.call,
        }
    }
}

/// A short `snake_case` name of a retry reason, for metric labels.
pub fn reason_label(reason: RetryReason) -> &'static str {
    match reason {
        RetryReason::ServerAsked => "server_asked",
        RetryReason::NotProcessed => "not_processed",
        RetryReason::Idempotent => "idempotent",
        RetryReason::Keyed => "keyed",
        RetryReason::NothingWritten => "nothing_written",
    }
}

/// A short `snake_case` name of an outcome's kind, for metric labels: the status
/// code, or the error kind.
pub fn outcome_label(outcome: AttemptOutcome) -> std::borrow::Cow<'static, str> {
    match outcome {
        AttemptOutcome::Status(s) => std::borrow::Cow::Owned(s.as_u16().to_string()),
        AttemptOutcome::Error(kind) => std::borrow::Cow::Borrowed(kind.as_str()),
        AttemptOutcome::Canceled => std::borrow::Cow::Borrowed("canceled"),
    }
}
