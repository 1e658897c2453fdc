//! The state of one call between its attempts. How it starts and sends each attempt
//! is in `start.rs`, what an attempt's outcome means in `outcome.rs`, the history
//! and every way the call ends in `end.rs`, the gates and the origin's pause in
//! `gates.rs`, what the observer is told in `tell.rs`; the state machine that drives
//! them is in `../future.rs`.

use std::mem;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Buf;
use http::{Request, Response};
use http_body::Body;
use tokio::time::Instant;
use tracing::Span;

mod end;
mod gates;
mod outcome;
mod start;
mod tell;

use super::future::{ResponseFuture, State};
use super::head::Head;
use super::spans::Spans;
use crate::admit::{Admitted, Pass};
use crate::body::{ReplayBody, ReplaySource};
use crate::observe::{self, pause_told, paused_told, Event, Observed};
use crate::policy::error::{BoxError, Error, TimedOut};
#[cfg(feature = "grpc")]
use crate::policy::grpc_status::Code as GrpcCode;
/// Without feature `grpc` no answer is read as gRPC's.
#[cfg(not(feature = "grpc"))]
type GrpcCode = std::convert::Infallible;

/// The code of a trailers-only gRPC answer, read from its head for its history line.
fn grpc_code(headers: &http::HeaderMap) -> Option<GrpcCode> {
    #[cfg(feature = "grpc")]
    return headers
        .get(&crate::policy::grpc_status::GRPC_STATUS)
        .map(GrpcCode::from_header);
    #[cfg(not(feature = "grpc"))]
    {
        let _ = headers;
        None
    }
}
use crate::policy::{
    call_deadline, classify_error, is_answer_under, ladder, later, meet, pause_until, AttemptLog,
    AttemptOutcome, AttemptRecord, BudgetAccount, BudgetHandle, CallContext, Classification,
    ErrorKind, Hedged, History, NoRetry, Outcome, Progress, RetryReason, StopReason,
};
use crate::retry::RetryPolicy;

/// Everything a call keeps between attempts.
pub(super) struct Call<S, B> {
    /// What later attempts and admission need, on the heap; `None` when the policy
    /// allows one attempt and the call holds nothing of admission.
    carry: Option<Box<Carry<S>>>,
    pub(super) policy: Arc<RetryPolicy>,
    /// The policy treats the method as idempotent.
    idempotent: bool,
    /// The request carries an idempotency key (and its method is not idempotent).
    keyed: bool,
    /// A handle on the shared replay state; `None` when the policy allows one attempt.
    body: Option<ReplaySource<B>>,
    /// The current attempt's record, kept when its write safety depends on it.
    log: Option<AttemptLog>,
    pub(super) attempt: u32,
    /// The name of the route the call matched, for its history.
    route: Option<Arc<str>>,
    /// When the call started; `None` until something needs it (see `start`).
    pub(super) started: Option<Instant>,
    /// What only a call that is timed, fails or is hedged needs: allocated then,
    /// so the success path moves a smaller future and initialises less.
    ledger: Lazy<Ledger>,
    /// The call's observer, when one was set; taken when the call ends.
    observed: Option<Arc<Observed>>,
}

/// A call dropped while it waits for a retry it has paid the budget for (its future
/// dropped by a caller's timeout or a `select!`, say) gives the retry back: it was
/// never sent. The success path has no slow part, so it checks one word here.
impl<S, B> Drop for Call<S, B> {
    #[inline]
    fn drop(&mut self) {
        if self
            .ledger
            .as_ref()
            .is_some_and(|ledger| ledger.withdrawn.is_some())
        {
            self.refund();
        }
    }
}

/// `$value` on the heap, made into a block allocated first (`Box::write`), instead
/// of made on the stack and copied: a [`Carry`] is several hundred bytes. A macro, as
/// the value must be made after the block is (a function would take it made).
macro_rules! in_place {
    ($value:expr) => {
        Box::write(Box::new_uninit(), $value)
    };
}
use in_place;

/// What a call keeps for its later attempts and what admission left it, in one allocation: the
/// service that sends later attempts, the request's head, and a call admitted by a stack's
/// breaker permit and budget account. A transport's client is a few hundred bytes
/// (hyper-util's is 304), and the future that every layer above moves would carry
/// it; on the heap, beside the head's extensions, it costs no allocation of its own.
pub(super) struct Carry<S> {
    /// `None` when the policy allows one attempt.
    resend: Option<Resend<S>>,
    /// `None` for a call of a retry layer without admission, and for a call of
    /// one attempt that admission left nothing: one word to test where the call's
    /// answer is recorded and where it drops.
    pass: Option<Pass>,
}

impl<S> Carry<S> {
    /// What a call that sends one attempt keeps: what admission left it, if anything.
    fn passed(pass: Pass) -> Option<Box<Self>> {
        let pass = Carry::<S>::held(pass)?;
        Some(in_place!(Carry {
            resend: None,
            pass: Some(pass)
        }))
    }

    /// The pass, unless it holds nothing. An empty pass is forgotten, not
    /// dropped: it has nothing to drop, and its drop would test each part.
    #[inline(always)]
    fn held(pass: Pass) -> Option<Pass> {
        if pass.is_empty() {
            std::mem::forget(pass);
            return None;
        }
        Some(pass)
    }
}

/// What later attempts need: the service that sends them and the request's head.
struct Resend<S> {
    service: S,
    head: Head,
}

/// A box filled only when the call needs what it holds (its ledger, its span). Its emptiness is checked where it is
/// dropped, and only a full one calls out to drop its contents, so the success
/// path does not call the contents' drop glue to learn there is nothing to drop.
pub(super) struct Lazy<T>(Option<Box<T>>);

impl<T> Lazy<T> {
    #[inline]
    pub(super) fn new(value: Option<Box<T>>) -> Self {
        Lazy(value)
    }
}

impl<T> std::ops::Deref for Lazy<T> {
    type Target = Option<Box<T>>;

    #[inline]
    fn deref(&self) -> &Option<Box<T>> {
        &self.0
    }
}

impl<T> std::ops::DerefMut for Lazy<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut Option<Box<T>> {
        &mut self.0
    }
}

impl<T> Drop for Lazy<T> {
    #[inline(always)]
    fn drop(&mut self) {
        if let Some(full) = self.0.take() {
            drop_full(full);
        }
    }
}

#[cold]
#[inline(never)]
fn drop_full<T>(full: Box<T>) {
    drop(full);
}

/// The call's ledger: its deadline, when its attempts started and may resume, what
/// it paid the budget, its history, its last error and the pause that stopped it.
/// A call answered at once has none.
struct Ledger {
    deadline: Option<Instant>,
    /// Whether the current attempt's timeout is the call's deadline.
    timeout_is_deadline: bool,
    /// When the current attempt was sent; `None` for the first (the call's start).
    attempt_started: Option<Instant>,
    /// When the next attempt may start: the end of the wait.
    resume_at: Option<Instant>,
    /// When the budget was paid for the retry being waited for, not yet sent.
    withdrawn: Option<Instant>,
    history: History,
    /// The last error, kept while waiting for a retry.
    last_error: Option<(ErrorKind, BoxError)>,
    /// The end of the origin's pause that stopped the call, when one did.
    paused: Option<Instant>,
    /// The last wait the backoff drew, which decorrelated jitter draws the next from.
    last_backoff: Option<Duration>,
}

impl Ledger {
    fn new(max_attempts: u32, deadline: Option<Instant>) -> Box<Self> {
        Box::new(Ledger {
            deadline,
            timeout_is_deadline: false,
            attempt_started: None,
            resume_at: None,
            withdrawn: None,
            history: History::new(max_attempts),
            last_error: None,
            paused: None,
            last_backoff: None,
        })
    }
}

/// What a call ends with.
pub(super) type CallResult<RB> = Result<Response<RB>, Error>;

/// What to do after an attempt's outcome.
pub(super) enum Next<RB> {
    /// The call ends.
    Return(CallResult<RB>),
    /// Another attempt, after `wait`; a failed response's body is drained first.
    Wait {
        wait: Duration,
        response: Option<Response<RB>>,
    },
}

impl<S, B> Call<S, B> {
    /// The request head kept for later attempts; `None` when the policy allows one.
    #[inline]
    pub(super) fn head(&self) -> Option<&Head> {
        Some(&self.carry.as_deref()?.resend.as_ref()?.head)
    }

    /// The service that sends later attempts; `None` when the policy allows one.
    #[inline]
    pub(super) fn service(&mut self) -> Option<&mut S> {
        Some(&mut self.carry.as_deref_mut()?.resend.as_mut()?.service)
    }

    /// What admission left the call, when it left anything.
    #[inline]
    pub(super) fn pass(&self) -> Option<&Pass> {
        self.carry.as_deref()?.pass.as_ref()
    }

    /// The same, mutably.
    #[inline]
    pub(super) fn pass_mut(&mut self) -> Option<&mut Pass> {
        self.carry.as_deref_mut()?.pass.as_mut()
    }
}

impl<S, B> Call<S, B> {
    /// When the attempt starting at `now` must end: the policy's attempt timeout,
    /// cut to the deadline. `Err` when less than the minimum attempt time is left.
    pub(super) fn attempt_timeout(&mut self, now: Instant) -> Result<Option<Instant>, ()> {
        start::first_timeout(&self.policy, self.ledger.as_deref_mut(), now)
    }

    /// The error of an attempt whose timer fired: its own timeout, or the deadline.
    pub(super) fn timed_out(&self) -> BoxError {
        Box::new(TimedOut {
            deadline: self.ledger.as_ref().is_some_and(|r| r.timeout_is_deadline),
        })
    }

    /// The slow part of the state, allocated on first use.
    fn ledger(&mut self) -> &mut Ledger {
        let max_attempts = self.policy.max_attempts();
        self.ledger
            .get_or_insert_with(|| Ledger::new(max_attempts, None))
    }

    fn deadline(&self) -> Option<Instant> {
        self.ledger.as_ref()?.deadline
    }

    /// Notes when the call started, at the first attempt's first wait, if no clock
    /// was read for it yet.
    #[inline]
    pub(super) fn note_start(&mut self) {
        if self.started.is_none() {
            self.started = Some(Instant::now());
        }
    }

    /// When the next attempt may start: the end of the wait that begins at `now`.
    pub(super) fn resume_at(&mut self, now: Instant, wait: Duration) -> Instant {
        let at = later(now, wait);
        self.ledger().resume_at = Some(at);
        at
    }

    /// What is left of the wait, after a drain.
    pub(super) fn rest_of_wait(&self, now: Instant) -> Option<Instant> {
        self.ledger.as_ref()?.resume_at.filter(|&t| t > now)
    }

    /// Until when a failed response's body may be drained, from `now`.
    pub(super) fn drain_until(&self, now: Instant) -> Instant {
        let mut until = later(now, self.policy.drain_timeout());
        if let Some(latest) = self.deadline_for_readiness() {
            until = until.min(latest.max(now));
        }
        until
    }

    /// The last moment worth starting an attempt: the deadline less the minimum
    /// attempt time.
    pub(super) fn deadline_for_readiness(&self) -> Option<Instant> {
        self.deadline()
            .map(|d| d.checked_sub(self.policy.min_attempt_time()).unwrap_or(d))
    }
}
