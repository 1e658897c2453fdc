use std::fmt;
use std::future::Future;
use std::mem;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::{Duration, SystemTime};

use bytes::Buf;
use http::{Request, Response};
use http_body::Body;
use pin_project_lite::pin_project;
use tokio::time::{sleep_until, Instant, Sleep};
use tower_service::Service;
use tracing::Span;

use super::head::Head;
use crate::body::{OneShot, ReplayBody, ReplaySource};
use crate::error::TimedOut;
use crate::hedge::Hedged;
use crate::policy::{
    classify_error, is_answer, ladder, later, should_retry, AttemptOutcome, AttemptProgress,
    AttemptRecord, BreakerHandle, BudgetHandle, Classification, Deadline, ErrorKind, History,
    NoRetry, Outcome, Progress, RetryPolicy, StopReason,
};
use crate::{BoxError, Error};

pin_project! {
    /// Response future of [`Retry`](super::Retry): the attempt loop of one call.
    pub struct ResponseFuture<S, B, RB>
    where
        S: Service<Request<ReplayBody<B>>, Response = Response<RB>>,
    {
        #[pin]
        state: State<S::Future, RB>,
        call: Call<S, B>,
        // The call's span, left out when nothing takes it (`Span::none()` does
        // nothing), which keeps the future small.
        span: Option<Box<Span>>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, RB> {
        // Waiting for the inner service's answer to the current attempt.
        Attempt { #[pin] future: F },
        // Reading and dropping the head of a failed response's body, so its
        // connection goes back to the pool before the wait (bounded in bytes and
        // time).
        Draining { #[pin] body: RB, read: usize },
        // Waiting out the rest of the backoff or Retry-After.
        Waiting,
        // Waiting for the inner service to be ready for the next attempt, no longer
        // than the deadline allows.
        Readying,
        // Refused before any attempt (the deadline left no time), or finished.
        Done { error: Option<Error> },
    }
}

/// Everything a call keeps between attempts.
struct Call<S, B> {
    service: S,
    policy: Arc<RetryPolicy>,
    /// The policy treats the method as idempotent.
    idempotent: bool,
    /// The request carries an idempotency key (and its method is not idempotent).
    keyed: bool,
    /// The request head for later attempts; `None` when the policy allows one.
    template: Option<Head>,
    /// A handle on the shared replay state; `None` when the policy allows one attempt.
    body: Option<ReplaySource<B>>,
    progress: Option<AttemptProgress>,
    attempt: u32,
    /// When the call started; `None` until something needs it (see `new`).
    started: Option<Instant>,
    /// What only a call that is timed, fails or is hedged needs: allocated then,
    /// so the success path moves a smaller future and initialises less.
    slow: Option<Box<SlowPath>>,
}

/// The part of a call's state that the success path does without.
struct SlowPath {
    /// The attempt's timeout, the wait before the next attempt, or the drain's time
    /// limit: never two at once. `None` when there is nothing to time, so the
    /// success path without timeouts registers no timer.
    timer: Option<Pin<Box<Sleep>>>,
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
}

impl SlowPath {
    fn new(max_attempts: u32, deadline: Option<Instant>) -> Box<Self> {
        Box::new(SlowPath {
            timer: None,
            deadline,
            timeout_is_deadline: false,
            attempt_started: None,
            resume_at: None,
            withdrawn: false,
            history: History::new(max_attempts),
            last_error: None,
        })
    }

    /// When the attempt starting at `now` must end: the policy's attempt timeout,
    /// cut to the deadline. `Err` when less than the minimum attempt time is left.
    fn attempt_timeout(
        &mut self,
        policy: &RetryPolicy,
        now: Instant,
    ) -> Result<Option<Instant>, ()> {
        let own = policy.attempt_timeout().map(|t| later(now, t));
        self.timeout_is_deadline = false;
        let Some(deadline) = self.deadline else {
            return Ok(own);
        };
        if deadline.saturating_duration_since(now) < policy.min_attempt_time() {
            return Err(());
        }
        match own {
            Some(own) if own <= deadline => Ok(Some(own)),
            _ => {
                self.timeout_is_deadline = true;
                Ok(Some(deadline))
            }
        }
    }
}

/// What a call ends with.
type CallResult<RB> = Result<Response<RB>, Error>;

/// What to do after an attempt's outcome.
enum Step<RB> {
    Return(CallResult<RB>),
    Wait {
        wait: Duration,
        response: Option<Response<RB>>,
    },
}

impl<S, B, RB> ResponseFuture<S, B, RB>
where
    S: Service<Request<ReplayBody<B>>, Response = Response<RB>>,
    B: Body,
    B::Data: Buf,
    B::Error: Into<BoxError>,
{
    #[inline]
    pub(crate) fn new(mut service: S, policy: Arc<RetryPolicy>, req: Request<B>) -> Self {
        let ext = req.extensions();
        // The clock is read at once only when something must be timed; otherwise the
        // call's start is taken when its first attempt first waits (a transport
        // always does), so an answer that is ready at once reads no clock at all.
        let given = ext.get::<Deadline>().map(Deadline::instant);
        let timed =
            given.is_some() || policy.timeout().is_some() || policy.attempt_timeout().is_some();
        let started = timed.then(Instant::now);
        let deadline = match (given, policy.timeout(), started) {
            (Some(d), Some(t), Some(started)) => Some(d.min(later(started, t))),
            (Some(d), _, _) => Some(d),
            (None, Some(t), Some(started)) => Some(later(started, t)),
            _ => None,
        };
        // For an idempotent method a key changes nothing, so it is not looked for.
        let idempotent = policy.is_idempotent_method(req.method());
        let keyed = !idempotent && policy.carries_key(req.headers(), ext);
        let needs_progress = !keyed && !idempotent;
        let one_shot = ext.get::<OneShot>().is_some();
        let retries = policy.max_attempts() > 1;

        // A policy of one attempt keeps nothing (an empty body stays free of any
        // allocation); a one-shot body is never sent twice, hedges included.
        let mut req = req.map(|body| {
            if one_shot {
                ReplayBody::one_shot(body)
            } else {
                ReplayBody::new(body, if retries { policy.replay_cap() } else { 0 })
            }
        });
        // Layers beneath (a hedge layer) see the call's deadline, whichever set it.
        if let Some(deadline) = deadline {
            req.extensions_mut().insert(Deadline::at(deadline));
        }
        let template = retries.then(|| Head::of(&req));
        let body = retries.then(|| req.body().source());
        let progress = needs_progress.then(|| {
            let p = AttemptProgress::new();
            req.extensions_mut().insert(p.clone());
            req.body_mut().set_progress(Some(p.clone()));
            p
        });
        let span = tracing::debug_span!(
            "backstop.retry",
            http.request.method = %req.method(),
            http.request.resend_count = tracing::field::Empty,
        );
        // `Span::none()` is what the macro gives when nothing takes the span; a
        // disabled span kept for `tracing`'s `log` output is kept here too.
        let span = (!span.is_none()).then(|| Box::new(span));
        let mut slow = timed.then(|| SlowPath::new(policy.max_attempts(), deadline));
        let timeout = match (started, slow.as_deref_mut()) {
            (Some(now), Some(slow)) => slow.attempt_timeout(&policy, now),
            _ => Ok(None),
        };
        let state = match timeout {
            Ok(timeout) => {
                if let (Some(t), Some(slow)) = (timeout, slow.as_deref_mut()) {
                    slow.timer = Some(Box::pin(sleep_until(t)));
                }
                let future = {
                    let _entered = span.as_deref().map(Span::enter);
                    service.call(req)
                };
                State::Attempt { future }
            }
            // The deadline leaves no time for a first attempt.
            Err(()) => {
                let mut history = History::new(policy.max_attempts());
                history.stop(StopReason::Deadline);
                let err = Error::new(
                    ErrorKind::Timeout,
                    Some(Box::new(TimedOut { deadline: true })),
                )
                .with_history(history, false);
                State::Done { error: Some(err) }
            }
        };
        ResponseFuture {
            state,
            call: Call {
                idempotent,
                slow,
                service,
                policy,
                keyed,
                template,
                body,
                progress,
                attempt: 1,
                started,
            },
            span,
        }
    }
}

impl<S, B> Call<S, B> {
    /// See [`SlowPath::attempt_timeout`]; a call without a slow part has no deadline.
    fn attempt_timeout(&mut self, now: Instant) -> Result<Option<Instant>, ()> {
        match self.slow.as_deref_mut() {
            Some(slow) => slow.attempt_timeout(&self.policy, now),
            None => Ok(self.policy.attempt_timeout().map(|t| later(now, t))),
        }
    }

    /// Sets the timer to fire at `at`, or clears it.
    fn set_timer(&mut self, at: Option<Instant>) {
        match at {
            Some(at) => self.slow().timer = Some(Box::pin(sleep_until(at))),
            None => {
                if let Some(slow) = self.slow.as_deref_mut() {
                    slow.timer = None;
                }
            }
        }
    }

    /// Polls the timer; `None` when none is set.
    fn poll_timer(&mut self, cx: &mut Context<'_>) -> Option<Poll<()>> {
        let timer = self.slow.as_deref_mut()?.timer.as_mut()?;
        Some(timer.as_mut().poll(cx))
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

    /// Whether the ladder's last rung needs a progress record: no key, and a method
    /// that is not idempotent.
    fn needs_progress(&self) -> bool {
        !self.keyed && !self.idempotent
    }

    /// Runs the decision ladder on the current attempt's outcome.
    fn classify(&self, outcome: Outcome<'_>, progress: Option<Progress>) -> Classification {
        ladder(&self.policy, self.idempotent, self.keyed, outcome, progress)
    }

    /// Records the attempt that just ended: one record, or one per send when a hedge
    /// layer beneath sent copies (the returned send's record gets the hint and the
    /// progress).
    fn record(
        &mut self,
        outcome: AttemptOutcome,
        retry_after: Option<Duration>,
        progress: Option<Progress>,
        hedged: Option<Hedged>,
        now: Instant,
    ) {
        let started = *self.started.get_or_insert(now);
        let attempt = self.attempt;
        let slow = self.slow();
        match hedged {
            Some(hedged) => {
                let attempt_started = slow.attempt_started.unwrap_or(started);
                let offset = attempt_started.saturating_duration_since(started);
                let mut records = hedged.attempt_records(attempt, offset);
                let returned = match hedged.winner() {
                    Some(w) => hedged.sent().iter().position(|s| s.copy == w),
                    None => (0..records.len()).max_by_key(|&i| records[i].elapsed),
                };
                if let Some(r) = returned.and_then(|i| records.get_mut(i)) {
                    r.retry_after = retry_after;
                    r.progress = progress;
                }
                for r in records {
                    slow.history.push(r);
                }
            }
            None => slow.history.push(AttemptRecord {
                number: attempt,
                outcome,
                retry_after,
                wait: None,
                progress,
                hedge: false,
                elapsed: now.saturating_duration_since(started),
            }),
        }
    }

    /// The gates a retryable outcome must pass; the wait before the next attempt, or
    /// the gate that refused.
    fn gates(&mut self, hint: Option<Duration>, now: Instant) -> Result<Duration, StopReason>
    where
        B: Body,
        B::Data: Buf,
        B::Error: Into<BoxError>,
    {
        let attempt = self.attempt;
        let sent = self.slow().history.len().max(attempt as usize);
        let policy = &*self.policy;
        // Hedges a layer beneath sent count as attempts too.
        if sent >= policy.max_attempts() as usize {
            return Err(StopReason::AttemptsExhausted);
        }
        if let Some(body) = &self.body {
            body.replayable().map_err(StopReason::BodyNotReplayable)?;
        }
        let wait = match hint {
            Some(hint) if hint > policy.max_retry_after() => {
                return Err(StopReason::RetryAfterTooLong)
            }
            Some(hint) => hint,
            None => policy.backoff().wait(self.attempt),
        };
        if let Some(deadline) = self.deadline() {
            let needed = wait.saturating_add(policy.min_attempt_time());
            if deadline.saturating_duration_since(now) < needed {
                return Err(StopReason::Deadline);
            }
        }
        if !self.breaker_allows_retry() {
            return Err(StopReason::CircuitOpen);
        }
        if let Some(budget) = self.handle::<BudgetHandle>() {
            if !budget.try_withdraw() {
                return Err(StopReason::Budget);
            }
            self.slow().withdrawn = true;
        }
        Ok(wait)
    }

    /// Ends the sequence: records why and hands the history out.
    fn finish(&mut self, stop: StopReason) -> History {
        if stop.is_gate() {
            tracing::debug!(
                attempt = self.attempt,
                gate = stop.as_str(),
                "retry skipped"
            );
        }
        let history = &mut self.slow().history;
        history.stop(stop);
        mem::replace(history, History::new(0))
    }

    /// Returns a response. Its history rides on it when there is something to tell:
    /// more than one attempt, or a gate that stopped a retry. A first-attempt answer
    /// carries none, so the success path allocates nothing for it.
    fn answer<RB>(&mut self, mut res: Response<RB>, stop: StopReason) -> CallResult<RB> {
        let history = self.finish(stop);
        if history.len() > 1 || stop != StopReason::Answered {
            res.extensions_mut().insert(history);
        }
        Ok(res)
    }

    fn fail<RB>(
        &mut self,
        kind: ErrorKind,
        err: BoxError,
        stop: StopReason,
        retryable: bool,
    ) -> CallResult<RB> {
        let history = self.finish(stop);
        Err(Error::wrap(kind, err).with_history(history, retryable))
    }

    fn scheduled<RB>(
        &mut self,
        wait: Duration,
        response: Option<Response<RB>>,
        reason: impl fmt::Display,
    ) -> Step<RB> {
        if let Some(last) = self.slow().history.last_mut() {
            last.wait = Some(wait);
        }
        tracing::debug!(
            attempt = self.attempt,
            reason = %reason,
            wait_ms = wait.as_millis() as u64,
            "retry scheduled"
        );
        Step::Wait { wait, response }
    }

    /// Whether `res` ends the call as it is with nothing to tell: a first answer the
    /// ladder returns (rung 1) that no hedge layer beneath recorded. This is the
    /// success path, so it reads only the status and `x-should-retry`.
    #[inline]
    fn is_plain_answer<RB>(&self, res: &Response<RB>) -> bool {
        let status = res.status();
        let plain = self.slow.as_ref().map_or(true, |r| r.history.is_empty())
            && is_answer(&self.policy, status, should_retry(res.headers()))
            && res.extensions().get::<Hedged>().is_none();
        if plain {
            self.answered(status);
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

    /// Classifies an attempt's outcome and decides what comes next.
    fn on_outcome<RB>(&mut self, result: Result<Response<RB>, BoxError>) -> Step<RB>
    where
        B: Body,
        B::Data: Buf,
        B::Error: Into<BoxError>,
    {
        let progress = self.progress.take().map(|p| p.snapshot());
        match result {
            Ok(res) => {
                // A hedge layer beneath leaves its record; it stays on the response too.
                let hedged = res.extensions().get::<Hedged>().cloned();
                let status = res.status();
                let outcome = Outcome::Response {
                    status,
                    headers: res.headers(),
                };
                let class = self.classify(outcome, progress);
                self.answered(status);
                let now = Instant::now();
                let hint = match class {
                    Classification::Retryable(_) => {
                        crate::policy::parse_retry_after(res.headers(), SystemTime::now())
                    }
                    _ => None,
                };
                self.record(AttemptOutcome::Status(status), hint, progress, hedged, now);
                match class {
                    Classification::Retryable(reason) => match self.gates(hint, now) {
                        Ok(wait) => self.scheduled(wait, Some(res), reason),
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
                let class = self.classify(Outcome::Error(kind), progress);
                let hedged = Hedged::find(&*err).cloned();
                self.record(AttemptOutcome::Error(kind), None, progress, hedged, now);
                // An attempt whose timeout was cut to the deadline timed out: the
                // deadline ended the call, not the attempts or the method.
                if err.downcast_ref::<TimedOut>().is_some_and(|t| t.deadline) {
                    let retryable = class.is_retryable();
                    return Step::Return(self.fail(kind, err, StopReason::Deadline, retryable));
                }
                match class {
                    Classification::Retryable(reason) => match self.gates(None, now) {
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

    /// The request for the next attempt.
    fn next_request(&mut self) -> Option<Request<ReplayBody<B>>>
    where
        B: Body,
        B::Data: Buf,
        B::Error: Into<BoxError>,
    {
        self.attempt += 1;
        // The head stays kept to the end: the budget and breaker handles are read
        // from it, and a head that did not read back must still refund the retry.
        let head = self.template.clone()?;
        let mut req = head.request(self.body.as_ref()?.replay())?;
        if self.needs_progress() {
            let p = AttemptProgress::new();
            req.extensions_mut().insert(p.clone());
            req.body_mut().set_progress(Some(p.clone()));
            self.progress = Some(p);
        }
        Some(req)
    }

    /// Ends the sequence after a wait, on a gate that refused the next attempt: the
    /// last error as it is, or, when the last outcome was an answer whose body was
    /// already drained, an error that names its status.
    fn stopped<RB>(&mut self, stop: StopReason) -> CallResult<RB> {
        self.refund();
        match self.slow().last_error.take() {
            Some((kind, err)) => self.fail(kind, err, stop, true),
            None => {
                let status =
                    self.slow()
                        .history
                        .attempts()
                        .iter()
                        .rev()
                        .find_map(|a| match a.outcome {
                            AttemptOutcome::Status(status) => Some(status),
                            _ => None,
                        });
                let history = self.finish(stop);
                let err = match status {
                    Some(status) => Error::answered(status),
                    None => Error::new(ErrorKind::Other, None),
                };
                Err(err.with_history(history, true))
            }
        }
    }

    /// Gives the budget back a retry it paid for that will not be sent.
    fn refund(&mut self) {
        if self
            .slow
            .as_mut()
            .is_some_and(|r| mem::take(&mut r.withdrawn))
        {
            if let Some(budget) = self.handle::<BudgetHandle>() {
                budget.refund();
            }
        }
    }

    /// A budget or breaker handle a layer above put into the request. Only a call
    /// that may retry reads them, from its request head kept for the next attempt,
    /// so the success path neither looks them up nor clones them.
    fn handle<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.template.as_ref()?.extension::<T>()
    }

    /// Whether the origin's breaker, when there is one, lets a retry through.
    fn breaker_allows_retry(&self) -> bool {
        self.handle::<BreakerHandle>()
            .map_or(true, BreakerHandle::allows_retry)
    }

    /// The last moment worth starting an attempt: the deadline less the minimum
    /// attempt time.
    fn deadline_for_readiness(&self) -> Option<Instant> {
        self.deadline()
            .map(|d| d.checked_sub(self.policy.min_attempt_time()).unwrap_or(d))
    }
}

impl<S, B, RB> Future for ResponseFuture<S, B, RB>
where
    S: Service<Request<ReplayBody<B>>, Response = Response<RB>>,
    S::Error: Into<BoxError>,
    B: Body,
    B::Data: Buf,
    B::Error: Into<BoxError>,
    RB: Body,
{
    type Output = Result<Response<RB>, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let call = this.call;
        let _entered = this.span.as_deref().map(Span::enter);
        loop {
            match this.state.as_mut().project() {
                StateProj::Attempt { future } => {
                    let result = match future.poll(cx) {
                        Poll::Ready(Ok(res)) => {
                            if call.is_plain_answer(&res) {
                                // The success path: nothing to record, nothing to wait.
                                call.set_timer(None);
                                this.state.set(State::Done { error: None });
                                return Poll::Ready(Ok(res));
                            }
                            Ok(res)
                        }
                        Poll::Ready(Err(err)) => Err(err.into()),
                        Poll::Pending => match call.poll_timer(cx) {
                            Some(fired) => {
                                ready!(fired);
                                let err: BoxError = Box::new(TimedOut {
                                    deadline: call
                                        .slow
                                        .as_ref()
                                        .is_some_and(|r| r.timeout_is_deadline),
                                });
                                Err(err)
                            }
                            None => {
                                if call.started.is_none() {
                                    call.started = Some(Instant::now());
                                }
                                return Poll::Pending;
                            }
                        },
                    };
                    call.set_timer(None);
                    match call.on_outcome(result) {
                        Step::Return(result) => {
                            this.state.set(State::Done { error: None });
                            return Poll::Ready(result);
                        }
                        Step::Wait { wait, response } => {
                            let now = Instant::now();
                            let resume_at = later(now, wait);
                            call.slow().resume_at = Some(resume_at);
                            match response {
                                Some(res) => {
                                    // Drain first, within its own limit and before the
                                    // deadline's last useful moment, then wait out what
                                    // is left of the wait.
                                    let mut until = later(now, call.policy.drain_timeout());
                                    if let Some(latest) = call.deadline_for_readiness() {
                                        until = until.min(latest.max(now));
                                    }
                                    call.set_timer(Some(until));
                                    this.state.set(State::Draining {
                                        body: res.into_body(),
                                        read: 0,
                                    });
                                }
                                None => {
                                    if !wait.is_zero() {
                                        call.set_timer(Some(resume_at));
                                    }
                                    this.state.set(State::Waiting);
                                }
                            }
                        }
                    }
                }
                StateProj::Draining { mut body, read } => {
                    let limit = call.policy.drain_limit();
                    while *read < limit {
                        match body.as_mut().poll_frame(cx) {
                            Poll::Ready(Some(Ok(frame))) => {
                                // Every frame counts for at least a byte, so a body of
                                // empty frames cannot keep this loop spinning.
                                let len = frame.data_ref().map_or(0, |d| d.remaining());
                                *read += len.max(1);
                            }
                            Poll::Ready(Some(Err(_))) | Poll::Ready(None) => break,
                            Poll::Pending => {
                                let expired = call.poll_timer(cx).map_or(true, |p| p.is_ready());
                                if !expired {
                                    return Poll::Pending;
                                }
                                break;
                            }
                        }
                    }
                    let resume_at = call.slow().resume_at.filter(|&t| t > Instant::now());
                    call.set_timer(resume_at);
                    this.state.set(State::Waiting);
                }
                StateProj::Waiting => {
                    if let Some(fired) = call.poll_timer(cx) {
                        ready!(fired);
                    }
                    // The breaker may have opened while we waited.
                    if !call.breaker_allows_retry() {
                        call.set_timer(None);
                        let result = call.stopped(StopReason::CircuitOpen);
                        this.state.set(State::Done { error: None });
                        return Poll::Ready(result);
                    }
                    // Readiness may take long (a saturated limit beneath): no longer
                    // than the deadline allows.
                    call.set_timer(call.deadline_for_readiness());
                    this.state.set(State::Readying);
                }
                StateProj::Readying => {
                    let ready = match call.service.poll_ready(cx) {
                        Poll::Ready(ready) => ready,
                        Poll::Pending => {
                            let expired = call.poll_timer(cx).is_some_and(|p| p.is_ready());
                            if !expired {
                                return Poll::Pending;
                            }
                            call.set_timer(None);
                            let result = call.stopped(StopReason::Deadline);
                            this.state.set(State::Done { error: None });
                            return Poll::Ready(result);
                        }
                    };
                    call.set_timer(None);
                    if let Err(e) = ready {
                        call.refund();
                        let result = call.fail::<RB>(
                            ErrorKind::Other,
                            e.into(),
                            StopReason::NotRetryable(NoRetry::Permanent),
                            false,
                        );
                        this.state.set(State::Done { error: None });
                        return Poll::Ready(result);
                    }
                    let now = Instant::now();
                    let timeout = match call.attempt_timeout(now) {
                        Ok(timeout) => timeout,
                        Err(()) => {
                            let result = call.stopped::<RB>(StopReason::Deadline);
                            this.state.set(State::Done { error: None });
                            return Poll::Ready(result);
                        }
                    };
                    let Some(req) = call.next_request() else {
                        // The gates allowed another attempt, so the head is kept; it
                        // fails to read back only if a header value was made through
                        // http's unchecked constructor with bytes the checked one
                        // refuses (see `head::HeadCopy::parts`). The call then ends here.
                        let result = call.stopped::<RB>(StopReason::AttemptsExhausted);
                        this.state.set(State::Done { error: None });
                        return Poll::Ready(result);
                    };
                    let slow = call.slow();
                    slow.last_error = None;
                    slow.withdrawn = false;
                    slow.attempt_started = Some(now);
                    if let Some(span) = this.span.as_deref() {
                        span.record("http.request.resend_count", call.attempt - 1);
                    }
                    call.set_timer(timeout);
                    let future = call.service.call(req);
                    this.state.set(State::Attempt { future });
                }
                StateProj::Done { error } => {
                    return match error.take() {
                        Some(err) => Poll::Ready(Err(err)),
                        None => Poll::Pending,
                    };
                }
            }
        }
    }
}

impl<S, B, RB> fmt::Debug for ResponseFuture<S, B, RB>
where
    S: Service<Request<ReplayBody<B>>, Response = Response<RB>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("attempt", &self.call.attempt)
            .finish_non_exhaustive()
    }
}
