//! The decisions of one call: how it starts and what an attempt's outcome means.
//! The history and every way the call ends are in `end.rs`, the gates and the
//! origin's pause in `gates.rs`, what the observer is told in `tell.rs`; the state
//! machine that drives them is in `../future.rs`.

use std::mem;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Buf;
use http::{Request, Response};
use http_body::Body;
use tokio::time::Instant;

mod end;
mod gates;
mod tell;

use super::future::{ResponseFuture, State};
use super::guard::{Admitted, Guarded};
use super::head::{Extras, Head};
use crate::body::{ReplayBody, ReplaySource};
use crate::error::{BoxError, Error, TimedOut};
use crate::observe::{self, Event, Observed};
use crate::policy::{
    classify_error, is_answer_under, ladder, later, meet, pause_until, AttemptLog, AttemptOutcome,
    AttemptRecord, BudgetHandle, CallContext, Classification, ErrorKind, Hedged, History, NoRetry,
    Outcome, Progress, RetryPolicy, RetryReason, StopReason,
};

/// Everything a call keeps between attempts.
pub(super) struct Call<S, B> {
    /// What later attempts and the guard need, on the heap; `None` when the policy
    /// allows one attempt and the call is not guarded.
    kept: Option<Box<Kept<S>>>,
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
    slow: Option<Box<SlowPath>>,
    /// The call's observer, when one was set; taken when the call ends.
    observed: Option<Box<Observed>>,
}

/// What a call keeps for its later attempts and its guard, in one allocation: the
/// service that sends later attempts, the request's head, and a guarded call's
/// breaker permit and budget account. A transport's client is a few hundred bytes
/// (hyper-util's is 304), and the future that every layer above moves would carry
/// it; on the heap, beside the head's extensions, it costs no allocation of its own.
pub(super) struct Kept<S> {
    /// `None` when the policy allows one attempt.
    later: Option<Later<S>>,
    guarded: Guarded,
}

impl<S> Kept<S> {
    /// What a call that sends one attempt keeps: its guard's, if it has any.
    fn guarded(guarded: Guarded) -> Option<Box<Self>> {
        (!guarded.is_empty()).then(|| {
            Box::new(Kept {
                later: None,
                guarded,
            })
        })
    }
}

/// What later attempts need: the service that sends them and the request's head.
struct Later<S> {
    service: S,
    head: Head,
}

/// The part of a call's state that the success path does without.
struct SlowPath {
    deadline: Option<Instant>,
    /// Whether the current attempt's timeout is the call's deadline.
    timeout_is_deadline: bool,
    /// When the current attempt was sent; `None` for the first (the call's start).
    attempt_started: Option<Instant>,
    /// When the next attempt may start: the end of the wait.
    resume_at: Option<Instant>,
    /// The budget paid for the retry being waited for, not yet sent.
    withdrawn: bool,
    history: History,
    /// The last error, kept while waiting for a retry.
    last_error: Option<(ErrorKind, BoxError)>,
    /// The end of the origin's pause that stopped the call, when one did.
    paused: Option<Instant>,
}

impl SlowPath {
    fn new(max_attempts: u32, deadline: Option<Instant>) -> Box<Self> {
        Box::new(SlowPath {
            deadline,
            timeout_is_deadline: false,
            attempt_started: None,
            resume_at: None,
            withdrawn: false,
            history: History::new(max_attempts),
            last_error: None,
            paused: None,
        })
    }
}

/// What a call ends with.
pub(super) type CallResult<RB> = Result<Response<RB>, Error>;

/// What to do after an attempt's outcome.
pub(super) enum Step<RB> {
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
        Some(&self.kept.as_deref()?.later.as_ref()?.head)
    }

    /// The service that sends later attempts; `None` when the policy allows one.
    #[inline]
    pub(super) fn service(&mut self) -> Option<&mut S> {
        Some(&mut self.kept.as_deref_mut()?.later.as_mut()?.service)
    }

    /// What the call's guard left it, when it is guarded.
    #[inline]
    pub(super) fn guarded(&self) -> Option<&Guarded> {
        self.kept.as_deref().map(|kept| &kept.guarded)
    }

    /// The same, mutably.
    #[inline]
    pub(super) fn guarded_mut(&mut self) -> Option<&mut Guarded> {
        self.kept.as_deref_mut().map(|kept| &mut kept.guarded)
    }
}

/// A fresh record for an attempt whose write safety depends on one (no key, and a
/// method that is not idempotent), given to the request's context and body.
#[inline]
fn track<B>(
    keyed: bool,
    idempotent: bool,
    extensions: &mut http::Extensions,
    body: &mut ReplayBody<B>,
) -> Option<AttemptLog>
where
    B: Body,
    B::Data: Buf,
    B::Error: Into<BoxError>,
{
    if keyed || idempotent {
        return None;
    }
    let log = AttemptLog::new();
    CallContext::of_mut(extensions).set_attempt(Some(log.clone()));
    body.set_progress(Some(log.clone()));
    Some(log)
}

/// Stamps an attempt's headers as the rules ask.
fn stamp(
    policy: &RetryPolicy,
    headers: &mut http::HeaderMap,
    attempt: u32,
    timeout: Option<Instant>,
    now: Instant,
) {
    let rules = policy.rules();
    if rules.stamps() {
        let left = timeout.map(|t| t.saturating_duration_since(now));
        rules.stamp(headers, attempt, left);
    }
}

/// The first attempt's timeout (see [`Call::attempt_timeout`]).
fn first_timeout(
    policy: &RetryPolicy,
    slow: Option<&mut SlowPath>,
    now: Instant,
) -> Result<Option<Instant>, ()> {
    let own = policy.attempt_timeout().map(|t| later(now, t));
    let Some(slow) = slow else {
        return Ok(own);
    };
    slow.timeout_is_deadline = false;
    let Some(deadline) = slow.deadline else {
        return Ok(own);
    };
    if deadline.saturating_duration_since(now) < policy.min_attempt_time() {
        return Err(());
    }
    match own {
        Some(own) if own <= deadline => Ok(Some(own)),
        _ => {
            slow.timeout_is_deadline = true;
            Ok(Some(deadline))
        }
    }
}

impl<S, B> Call<S, B>
where
    B: Body,
    B::Data: Buf,
    B::Error: Into<BoxError>,
{
    /// Reads what the call needs from its request, sends the first attempt and
    /// builds the call's future. Everything is computed on locals first and the
    /// future is built in one expression at the end, so the call's state is written
    /// once, in place, instead of being moved through intermediate values.
    #[inline(always)]
    pub(super) fn start<RB>(
        service: &mut S,
        policy: Arc<RetryPolicy>,
        req: Request<B>,
        span: Option<Box<tracing::Span>>,
        admitted: Admitted,
    ) -> ResponseFuture<S, B, RB>
    where
        S: tower_service::Service<Request<ReplayBody<B>>, Response = Response<RB>> + Clone,
    {
        let Admitted { guarded, keyed, at } = admitted;
        let keyed_by_guard = keyed;
        let ext = req.extensions();
        let given = crate::policy::Given::new(ext);
        // The clock is read at once only when something must be timed; otherwise the
        // call's start is taken when its first attempt first waits (a transport
        // always does), so an answer that is ready at once reads no clock at all.
        let given_deadline = given.deadline();
        let route = given.route().cloned();
        let observed = given
            .observer()
            .map(|o| Box::new(Observed::new(o.clone(), &req)));
        let timed = given_deadline.is_some()
            || policy.timeout().is_some()
            || policy.attempt_timeout().is_some();
        // An observer is told the call's time, so its start is read at once too. A
        // layer above that dated the call (the budget's window) saves the read.
        let started = (timed || observed.is_some())
            .then(Instant::now)
            .or(at)
            .or_else(|| given.entered());
        let deadline = match (given_deadline, policy.timeout(), started) {
            (Some(d), Some(t), Some(started)) => Some(d.min(later(started, t))),
            (Some(d), _, _) => Some(d),
            (None, Some(t), Some(started)) => Some(later(started, t)),
            _ => None,
        };
        // For an idempotent request a key changes nothing, so it is not looked for.
        let idempotent = policy.rules().is_idempotent(req.method(), req.uri());
        let keyed = !idempotent && (keyed_by_guard || policy.carries_key(req.headers(), ext));
        let one_shot = given.get::<crate::body::OneShot>().is_some();
        let retries = policy.max_attempts() > 1;
        let mut extras = retries.then(|| Extras::of(&given));

        // A policy of one attempt keeps nothing (an empty body stays free of any
        // allocation); a one-shot body is never sent twice, hedges included. The
        // head is worked on as parts and put together with the replay body only in
        // the call to the service, so the request is not moved in between.
        let (mut parts, body) = req.into_parts();
        let mut body = if one_shot {
            ReplayBody::one_shot(body)
        } else {
            ReplayBody::new(body, if retries { policy.replay_cap() } else { 0 })
        };
        // Layers beneath (a hedge layer) see the call's deadline, whichever set it.
        if let Some(deadline) = deadline.map(crate::policy::Deadline::at) {
            CallContext::of_mut(&mut parts.extensions).set_deadline(deadline);
            if let Some(extras) = &mut extras {
                extras.set_deadline(deadline);
            }
        }
        // What later attempts need, allocated once and filled in place: the head's
        // bytes are written where they stay. The service was driven to readiness for
        // the first attempt; the clone drives its own.
        let kept = match extras {
            Some(extras) => {
                let mut kept = Box::new(Kept {
                    later: Some(Later {
                        service: service.clone(),
                        head: Head::empty(extras),
                    }),
                    guarded,
                });
                if let Some(later) = &mut kept.later {
                    later.head.fill(&parts);
                }
                Some(kept)
            }
            None => Kept::guarded(guarded),
        };
        let source = retries.then(|| body.source());
        let log = track(keyed, idempotent, &mut parts.extensions, &mut body);
        let mut slow = timed.then(|| SlowPath::new(policy.max_attempts(), deadline));
        // The first attempt's timeout, and when it starts if its headers are stamped.
        let timeout = match (timed, started) {
            (true, Some(now)) => {
                first_timeout(&policy, slow.as_deref_mut(), now).map(|t| (t, Some(now)))
            }
            _ => Ok((
                None,
                policy
                    .rules()
                    .stamps()
                    .then(|| started.unwrap_or_else(Instant::now)),
            )),
        };
        // The call's state, written once where the future is built.
        macro_rules! call {
            () => {
                Call {
                    idempotent,
                    slow,
                    kept,
                    keyed,
                    body: source,
                    log,
                    attempt: 1,
                    route,
                    started,
                    policy,
                    observed,
                }
            };
        }
        let (timeout, now) = match timeout {
            Ok(timeout) => timeout,
            // The readied service is not called: what it reserved for a call stays
            // with the retry service, ready for its next one.
            Err(()) => return ResponseFuture::refused_by_deadline(call!(), span),
        };
        if let Some(now) = now {
            stamp(&policy, &mut parts.headers, 1, timeout, now);
        }
        // Built in one expression, the inner future written straight into ours.
        ResponseFuture {
            state: State::Attempt {
                future: {
                    let _entered = span.as_deref().map(tracing::Span::enter);
                    service.call(Request::from_parts(parts, body))
                },
                timeout: super::future::timer(timeout),
            },
            call: call!(),
            span,
        }
    }

    /// A call that sends nothing (yet): refused by its guard, or held by it.
    pub(super) fn idle(policy: Arc<RetryPolicy>, guarded: Guarded) -> Self {
        Call {
            kept: Kept::guarded(guarded),
            policy,
            idempotent: false,
            keyed: false,
            body: None,
            log: None,
            attempt: 0,
            route: None,
            started: None,
            slow: None,
            observed: None,
        }
    }

    /// Stamps an attempt's headers as the rules ask (an attempt header, gRPC's
    /// `grpc-timeout` cut to the time the attempt has, `grpc-previous-rpc-attempts`).
    #[inline]
    fn stamp(&self, req: &mut Request<ReplayBody<B>>, timeout: Option<Instant>, now: Instant) {
        stamp(&self.policy, req.headers_mut(), self.attempt, timeout, now)
    }

    /// Gives the attempt a fresh record when its write safety depends on one: no
    /// key, and a method that is not idempotent.
    #[inline]
    fn track(&mut self, req: Request<ReplayBody<B>>) -> Request<ReplayBody<B>> {
        let (mut parts, mut body) = req.into_parts();
        self.log = track(
            self.keyed,
            self.idempotent,
            &mut parts.extensions,
            &mut body,
        );
        Request::from_parts(parts, body)
    }

    /// The deadline leaves no time for a first attempt: the call is refused.
    pub(super) fn refused_by_deadline(&mut self) -> Error {
        let history = self.finish(StopReason::Deadline);
        Error::new(
            ErrorKind::Timeout,
            Some(Box::new(TimedOut { deadline: true })),
        )
        .with_history(history, false)
    }

    /// The request for the next attempt and its timeout, or how the call ends.
    pub(super) fn next_attempt<RB>(
        &mut self,
        now: Instant,
    ) -> Result<(S::Future, Option<Instant>), CallResult<RB>>
    where
        S: tower_service::Service<Request<ReplayBody<B>>, Response = Response<RB>>,
    {
        let Ok(timeout) = self.attempt_timeout(now) else {
            return Err(self.stopped(StopReason::Deadline));
        };
        self.attempt += 1;
        // The head stays kept to the end: the budget and breaker handles are read
        // from it, and a head that did not read back must still refund the retry.
        let request = match (self.head(), &self.body) {
            (Some(head), Some(body)) => head.clone().request(body.replay()),
            _ => None,
        };
        let Some(req) = request else {
            // The gates allowed another attempt, so the head is kept (it is `None`
            // only for a policy of one attempt); it fails to read back only if a
            // header value was made through http's unchecked constructor with bytes
            // the checked one refuses (see `head::flat::HeadCopy::parts`). The call
            // then ends here.
            return Err(self.stopped(StopReason::AttemptsExhausted));
        };
        let mut req = self.track(req);
        self.stamp(&mut req, timeout, now);
        let slow = self.slow();
        slow.last_error = None;
        slow.withdrawn = false;
        slow.attempt_started = Some(now);
        // The request came from the kept head, so the service kept beside it is
        // there, driven to readiness by the `Readying` state.
        match self.service() {
            Some(service) => Ok((service.call(req), timeout)),
            None => Err(self.stopped(StopReason::AttemptsExhausted)),
        }
    }

    /// Classifies an attempt's outcome and decides what comes next.
    pub(super) fn on_outcome<RB>(&mut self, result: Result<Response<RB>, BoxError>) -> Step<RB> {
        let progress = self.log.take().map(|p| p.snapshot());
        match result {
            Ok(res) => {
                // A layer beneath may return the attempt's record with the response
                // (a hedge layer's sends); it stays on the response too.
                let hedged = res
                    .extensions()
                    .get::<AttemptLog>()
                    .and_then(AttemptLog::hedged)
                    .cloned();
                let status = res.status();
                let outcome = Outcome::Response {
                    status,
                    headers: res.headers(),
                };
                let (class, hint) = self.classify(outcome, None, progress);
                self.answered(status);
                let now = Instant::now();
                // The classifier's hint replaces the server's `Retry-After`.
                let hint = match class {
                    Classification::Retryable(_) => hint.or_else(|| {
                        crate::policy::parse_retry_after(res.headers(), SystemTime::now())
                    }),
                    _ => None,
                };
                self.record(AttemptOutcome::Status(status), hint, progress, hedged, now);
                match class {
                    Classification::Retryable(reason) => match self.gates(hint, now) {
                        Ok(wait) => {
                            self.pause_origin(&res, now);
                            self.scheduled(wait, Some(res), reason)
                        }
                        Err(stop) => Step::Return(self.answer(res, stop)),
                    },
                    Classification::NotRetryable(why) => {
                        Step::Return(self.answer(res, StopReason::NotRetryable(why)))
                    }
                    Classification::Answer => Step::Return(self.answer(res, StopReason::Answered)),
                }
            }
            Err(err) => {
                let now = Instant::now();
                let kind = classify_error(&*err);
                tracing::debug!(
                    attempt = self.attempt,
                    error = kind.as_str(),
                    "attempt failed"
                );
                let (class, hint) = self.classify(Outcome::Error(kind), Some(&*err), progress);
                let hedged = Error::find(&*err)
                    .and_then(Error::attempt_log)
                    .and_then(AttemptLog::hedged)
                    .cloned();
                self.record(AttemptOutcome::Error(kind), hint, progress, hedged, now);
                // An attempt whose timeout was cut to the deadline timed out: the
                // deadline ended the call, not the attempts or the method.
                if err.downcast_ref::<TimedOut>().is_some_and(|t| t.deadline) {
                    let retryable = class.is_retryable();
                    return Step::Return(self.fail(kind, err, StopReason::Deadline, retryable));
                }
                match class {
                    Classification::Retryable(reason) => match self.gates(hint, now) {
                        Ok(wait) => {
                            self.slow().last_error = Some((kind, err));
                            self.scheduled(wait, None, reason)
                        }
                        Err(stop) => Step::Return(self.fail(kind, err, stop, true)),
                    },
                    Classification::NotRetryable(why) => {
                        // A body failure that is the replay body's own (an abandoned
                        // attempt's reader pushed it past the cap) says so.
                        let stop = match (why, self.body.as_ref().map(|b| b.replayable())) {
                            (NoRetry::BodyFailed, Some(Err(not))) => {
                                StopReason::BodyNotReplayable(not)
                            }
                            _ => StopReason::NotRetryable(why),
                        };
                        Step::Return(self.fail(kind, err, stop, false))
                    }
                    // The ladder answers only responses.
                    Classification::Answer => Step::Return(self.fail(
                        kind,
                        err,
                        StopReason::NotRetryable(NoRetry::Permanent),
                        false,
                    )),
                }
            }
        }
    }
}

impl<S, B> Call<S, B> {
    /// When the attempt starting at `now` must end: the policy's attempt timeout,
    /// cut to the deadline. `Err` when less than the minimum attempt time is left.
    pub(super) fn attempt_timeout(&mut self, now: Instant) -> Result<Option<Instant>, ()> {
        first_timeout(&self.policy, self.slow.as_deref_mut(), now)
    }

    /// The error of an attempt whose timer fired: its own timeout, or the deadline.
    pub(super) fn timed_out(&self) -> BoxError {
        Box::new(TimedOut {
            deadline: self.slow.as_ref().is_some_and(|r| r.timeout_is_deadline),
        })
    }

    /// The slow part of the state, allocated on first use.
    fn slow(&mut self) -> &mut SlowPath {
        let max_attempts = self.policy.max_attempts();
        self.slow
            .get_or_insert_with(|| SlowPath::new(max_attempts, None))
    }

    fn deadline(&self) -> Option<Instant> {
        self.slow.as_ref()?.deadline
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
        self.slow().resume_at = Some(at);
        at
    }

    /// What is left of the wait, after a drain.
    pub(super) fn rest_of_wait(&self, now: Instant) -> Option<Instant> {
        self.slow.as_ref()?.resume_at.filter(|&t| t > now)
    }

    /// Until when a failed response's body may be drained, from `now`.
    pub(super) fn drain_until(&self, now: Instant) -> Instant {
        let mut until = later(now, self.policy.drain_timeout());
        if let Some(latest) = self.deadline_for_readiness() {
            until = until.min(latest.max(now));
        }
        until
    }

    /// Runs the decision ladder on the current attempt's outcome: the verdict, and
    /// the classifier's wait hint.
    fn classify(
        &self,
        outcome: Outcome<'_>,
        error: Option<&(dyn std::error::Error + 'static)>,
        progress: Option<Progress>,
    ) -> (Classification, Option<Duration>) {
        let rules = self.policy.rules();
        ladder(rules, self.idempotent, self.keyed, outcome, error, progress)
    }

    /// Whether `res` ends the call as it is with nothing to tell: a first answer the
    /// ladder returns (rung 1) that no layer beneath returned a record with. This is
    /// the success path, so it reads only the status and `x-should-retry` (and asks
    /// the rules' classifier, when there is one).
    #[inline]
    pub(super) fn is_plain_answer<RB>(&self, res: &Response<RB>) -> bool {
        let status = res.status();
        let plain = self.slow.as_ref().map_or(true, |r| r.history.is_empty())
            && is_answer_under(self.policy.rules(), status, res.headers())
            && res.extensions().get::<AttemptLog>().is_none();
        if plain {
            self.answered(status);
            if let Some(observed) = self.observed.as_deref() {
                let elapsed = self.started.map_or(Duration::ZERO, |s| s.elapsed());
                observed.attempt_finished(1, AttemptOutcome::Status(status), None, elapsed);
            }
        }
        plain
    }

    fn answered(&self, status: http::StatusCode) {
        tracing::debug!(
            attempt = self.attempt,
            status = status.as_u16(),
            "attempt answered"
        );
    }

    /// The last moment worth starting an attempt: the deadline less the minimum
    /// attempt time.
    pub(super) fn deadline_for_readiness(&self) -> Option<Instant> {
        self.deadline()
            .map(|d| d.checked_sub(self.policy.min_attempt_time()).unwrap_or(d))
    }
}
