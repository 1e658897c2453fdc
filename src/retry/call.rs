//! The decisions of one call: what an attempt's outcome means, the gates, the
//! history, and how the call ends. The state machine that drives them is in
//! `future.rs`.

use std::mem;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Buf;
use http::{Request, Response};
use http_body::Body;
use tokio::time::Instant;

use super::future::{ResponseFuture, State};
use super::head::Head;
use crate::body::{ReplayBody, ReplaySource};
use crate::error::{BoxError, Error, TimedOut};
use crate::observe::{self, Event, Observed};
use crate::policy::{
    classify_error, is_answer_under, ladder, later, meet, pause_hint, AttemptLog, AttemptOutcome,
    AttemptRecord, BudgetHandle, CallContext, Classification, ErrorKind, Hedged, History, NoRetry,
    Outcome, Progress, RetryPolicy, RetryReason, StopReason,
};

/// Everything a call keeps between attempts.
pub(super) struct Call<S, B> {
    pub(super) service: S,
    pub(super) policy: Arc<RetryPolicy>,
    /// The policy treats the method as idempotent.
    idempotent: bool,
    /// The request carries an idempotency key (and its method is not idempotent).
    keyed: bool,
    /// The request head for later attempts; `None` when the policy allows one.
    template: Option<Head>,
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

/// An attempt's request, and when its timeout fires.
pub(super) type Attempt<B> = (Request<ReplayBody<B>>, Option<Instant>);

/// A fresh record for an attempt whose write safety depends on one (no key, and a
/// method that is not idempotent), given to the request's context and body.
#[inline]
fn track<B>(keyed: bool, idempotent: bool, req: &mut Request<ReplayBody<B>>) -> Option<AttemptLog>
where
    B: Body,
    B::Data: Buf,
    B::Error: Into<BoxError>,
{
    if keyed || idempotent {
        return None;
    }
    let log = AttemptLog::new();
    CallContext::of_mut(req.extensions_mut()).set_attempt(Some(log.clone()));
    req.body_mut().set_progress(Some(log.clone()));
    Some(log)
}

/// Stamps an attempt's headers as the rules ask.
fn stamp<B>(
    policy: &RetryPolicy,
    req: &mut Request<B>,
    attempt: u32,
    timeout: Option<Instant>,
    now: Instant,
) {
    let rules = policy.rules();
    if rules.stamps() {
        let left = timeout.map(|t| t.saturating_duration_since(now));
        rules.stamp(req.headers_mut(), attempt, left);
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
        mut service: S,
        policy: Arc<RetryPolicy>,
        req: Request<B>,
        span: Option<Box<tracing::Span>>,
    ) -> ResponseFuture<S, B, RB>
    where
        S: tower_service::Service<Request<ReplayBody<B>>, Response = Response<RB>>,
    {
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
        // An observer is told the call's time, so its start is read at once too.
        let started = (timed || observed.is_some()).then(Instant::now);
        let deadline = match (given_deadline, policy.timeout(), started) {
            (Some(d), Some(t), Some(started)) => Some(d.min(later(started, t))),
            (Some(d), _, _) => Some(d),
            (None, Some(t), Some(started)) => Some(later(started, t)),
            _ => None,
        };
        // For an idempotent request a key changes nothing, so it is not looked for.
        let idempotent = policy.rules().is_idempotent(req.method(), req.uri());
        let keyed = !idempotent && policy.carries_key(req.headers(), ext);
        let one_shot = ext.get::<crate::body::OneShot>().is_some();
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
            CallContext::of_mut(req.extensions_mut())
                .set_deadline(crate::policy::Deadline::at(deadline));
        }
        let template = retries.then(|| Head::of(&req));
        let body = retries.then(|| req.body().source());
        let log = track(keyed, idempotent, &mut req);
        let mut slow = timed.then(|| SlowPath::new(policy.max_attempts(), deadline));
        let timeout = match (started, slow.as_deref_mut()) {
            (Some(now), slow) => first_timeout(&policy, slow, now).map(|t| (t, Some(now))),
            (None, _) => Ok((None, policy.rules().stamps().then(Instant::now))),
        };
        let (state, refused) = match timeout {
            Ok((timeout, now)) => {
                if let Some(now) = now {
                    stamp(&policy, &mut req, 1, timeout, now);
                }
                let future = {
                    let _entered = span.as_deref().map(tracing::Span::enter);
                    service.call(req)
                };
                (State::first(future, timeout), false)
            }
            Err(()) => (State::Done, true),
        };
        let mut future = ResponseFuture {
            state,
            call: Call {
                idempotent,
                slow,
                service,
                keyed,
                template,
                body,
                log,
                attempt: 1,
                route,
                started,
                policy,
                observed,
            },
            span,
        };
        if refused {
            future.refuse_by_deadline();
        }
        future
    }

    /// Stamps an attempt's headers as the rules ask (an attempt header, gRPC's
    /// `grpc-timeout` cut to the time the attempt has, `grpc-previous-rpc-attempts`).
    #[inline]
    fn stamp(&self, req: &mut Request<ReplayBody<B>>, timeout: Option<Instant>, now: Instant) {
        stamp(&self.policy, req, self.attempt, timeout, now)
    }

    /// Gives the attempt a fresh record when its write safety depends on one: no
    /// key, and a method that is not idempotent.
    #[inline]
    fn track(&mut self, req: &mut Request<ReplayBody<B>>) {
        self.log = track(self.keyed, self.idempotent, req);
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
    pub(super) fn next_attempt<RB>(&mut self, now: Instant) -> Result<Attempt<B>, CallResult<RB>> {
        let Ok(timeout) = self.attempt_timeout(now) else {
            return Err(self.stopped(StopReason::Deadline));
        };
        self.attempt += 1;
        // The head stays kept to the end: the budget and breaker handles are read
        // from it, and a head that did not read back must still refund the retry.
        let request = match (&self.template, &self.body) {
            (Some(head), Some(body)) => head.clone().request(body.replay()),
            _ => None,
        };
        let Some(mut req) = request else {
            // The gates allowed another attempt, so the head is kept; it fails to
            // read back only if a header value was made through http's unchecked
            // constructor with bytes the checked one refuses (see
            // `head::HeadCopy::parts`). The call then ends here.
            return Err(self.stopped(StopReason::AttemptsExhausted));
        };
        self.track(&mut req);
        self.stamp(&mut req, timeout, now);
        let slow = self.slow();
        slow.last_error = None;
        slow.withdrawn = false;
        slow.attempt_started = Some(now);
        Ok((req, timeout))
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

    /// The gates a retryable outcome must pass; the wait before the next attempt, or
    /// the gate that refused.
    fn gates(&mut self, hint: Option<Duration>, now: Instant) -> Result<Duration, StopReason> {
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
        // A paused origin: the retry waits for the pause when its own wait ends
        // first (a retry waiting for the hint that set the pause goes with it).
        let wait = match self.meet_pause(now, later(now, wait))? {
            Some(release) => release.saturating_duration_since(now),
            None => wait,
        };
        if !self.breaker_allows_retry() {
            return Err(StopReason::CircuitOpen);
        }
        let withdrawn = match self.budget() {
            Some(budget) if !budget.try_withdraw() => return Err(StopReason::Budget),
            Some(budget) => {
                if let Some(observed) = self.observed.as_deref() {
                    observed.ran_dry_if(budget);
                }
                true
            }
            None => false,
        };
        self.slow().withdrawn = withdrawn;
        Ok(wait)
    }
}

impl<S, B> Call<S, B> {
    /// The budget account of the call's origin. Only a call that may retry reads
    /// it, from its request head kept for the next attempt.
    fn budget(&self) -> Option<&BudgetHandle> {
        self.template.as_ref().and_then(|h| h.given().budget())
    }

    /// Pauses the call's origin on the hint of an answer the call will retry
    /// after (the budget layer pauses it on the call's final answer).
    fn pause_origin<RB>(&self, res: &Response<RB>, now: Instant) {
        if let Some(budget) = self.budget() {
            if let Some(hint) = pause_hint(res.status(), res.headers(), SystemTime::now()) {
                budget.pause_told(later(now, hint), self.observed.as_deref());
            }
        }
    }

    /// Meets the origin's pause before an attempt whose own wait ends at `own_end`:
    /// `Ok(None)` when the pause does not hold it (none, or over by then),
    /// `Ok(Some(at))` to wait until `at` (the pause's end plus this call's share of
    /// the release spread, within the deadline), `Err(Paused)` when it may not wait
    /// (the deadline ends inside the pause, the budget fails fast, or the pause
    /// lasts longer than the policy's `max_retry_after`: waiting for a pause is
    /// waiting for another call's hint, and no hint is waited longer than that).
    pub(super) fn meet_pause(
        &mut self,
        now: Instant,
        own_end: Instant,
    ) -> Result<Option<Instant>, StopReason> {
        let observed = self.observed.as_deref();
        let Some(pause) = self.budget().and_then(|b| b.paused_told(now, observed)) else {
            return Ok(None);
        };
        if pause.until() <= own_end {
            return Ok(None);
        }
        let too_long = pause.until().saturating_duration_since(now) > self.policy.max_retry_after();
        let met = if too_long {
            Err(())
        } else {
            meet(&pause, now, self.deadline(), self.policy.min_attempt_time())
        };
        match met {
            Ok(release) => {
                tracing::debug!(
                    attempt = self.attempt,
                    wait_ms = release.saturating_duration_since(now).as_millis() as u64,
                    "retry waits for origin pause"
                );
                if let Some(observed) = self.observed.as_deref() {
                    let wait = release.saturating_duration_since(now);
                    observed.tell(|call| Event::CallWaited(observe::CallWaited { call, wait }));
                }
                Ok(Some(release))
            }
            Err(()) => {
                self.slow().paused = Some(pause.until());
                Err(StopReason::Paused)
            }
        }
    }

    /// Adds a wait for the origin's pause, found after the call's own wait, to the
    /// wait recorded before the next attempt.
    pub(super) fn waits_longer(&mut self, extra: Duration) {
        if let Some(last) = self.slow().history.last_mut() {
            last.wait = Some(last.wait.unwrap_or_default().saturating_add(extra));
        }
    }

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
        let attempt_started = slow.attempt_started.unwrap_or(started);
        if let Some(observed) = self.observed.as_deref() {
            observed.attempt_finished(
                attempt,
                outcome,
                progress,
                now.saturating_duration_since(attempt_started),
            );
        }
        let slow = self.slow();
        match hedged {
            Some(hedged) => {
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

    /// Ends the sequence: records why and hands the history out.
    fn finish(&mut self, stop: StopReason) -> History {
        if stop.is_gate() {
            tracing::debug!(
                attempt = self.attempt,
                gate = stop.as_str(),
                "retry skipped"
            );
            let refused = self.slow().history.is_empty();
            self.tell(|call, attempt| match refused {
                true => Event::CallRefused(observe::CallRefused {
                    call,
                    refusal: observe::Refusal::Deadline,
                }),
                false => Event::RetrySkipped(observe::RetrySkipped {
                    call,
                    attempt,
                    gate: stop,
                }),
            });
        }
        let route = self.route.clone();
        let history = &mut self.slow().history;
        history.stop(stop);
        history.set_route(route);
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
        let paused = self.slow.as_ref().and_then(|s| s.paused);
        let history = self.finish(stop);
        let err = Error::wrap(kind, err).with_history(history, retryable);
        Err(match paused {
            Some(until) => err.with_pause(until, Instant::now()),
            None => err,
        })
    }

    /// The inner service failed to get ready for the next attempt.
    pub(super) fn unavailable<RB>(&mut self, err: BoxError) -> CallResult<RB> {
        self.refund();
        self.fail(
            ErrorKind::Other,
            err,
            StopReason::NotRetryable(NoRetry::Permanent),
            false,
        )
    }

    fn scheduled<RB>(
        &mut self,
        wait: Duration,
        response: Option<Response<RB>>,
        reason: RetryReason,
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
        self.tell(|call, attempt| {
            Event::RetryScheduled(observe::RetryScheduled {
                call,
                attempt,
                reason,
                wait,
            })
        });
        Step::Wait { wait, response }
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

    /// Ends the sequence after a wait, on a gate that refused the next attempt: the
    /// last error as it is, or, when the last outcome was an answer whose body was
    /// already drained, an error that names its status.
    pub(super) fn stopped<RB>(&mut self, stop: StopReason) -> CallResult<RB> {
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
                let paused = self.slow().paused;
                let history = self.finish(stop);
                let err = match status {
                    Some(status) => Error::answered(status),
                    None => Error::new(ErrorKind::Other, None),
                };
                let err = err.with_history(history, true);
                Err(match paused {
                    Some(until) => err.with_pause(until, Instant::now()),
                    None => err,
                })
            }
        }
    }

    /// Tells the call's observer, if any, the event `make` builds from the call
    /// and the current attempt's number.
    #[inline]
    fn tell(&self, make: impl for<'a> FnOnce(&'a observe::CallInfo, u32) -> Event<'a>) {
        if let Some(observed) = self.observed.as_deref() {
            let attempt = self.attempt;
            observed.tell(|call| make(call, attempt));
        }
    }

    /// Whether an observer is told of this call.
    #[inline]
    pub(super) fn is_observed(&self) -> bool {
        self.observed.is_some()
    }

    /// Tells the observer, once, how the call ended.
    #[inline]
    pub(super) fn ended<RB>(&mut self, result: &CallResult<RB>) {
        if let Some(observed) = self.observed.take() {
            self.tell_finished(&observed, result);
        }
    }

    #[cold]
    fn tell_finished<RB>(&self, observed: &Observed, result: &CallResult<RB>) {
        let (outcome, history) = match result {
            Ok(res) => (
                AttemptOutcome::Status(res.status()),
                res.extensions().get::<History>(),
            ),
            Err(err) => (
                err.status()
                    .map_or(AttemptOutcome::Error(err.kind()), AttemptOutcome::Status),
                err.history(),
            ),
        };
        let attempts = history.map_or(1, |h| h.len() as u32);
        let stop = history
            .and_then(History::stop_reason)
            .unwrap_or(StopReason::Answered);
        let elapsed = self.started.map_or(Duration::ZERO, |s| s.elapsed());
        let budget_available = self
            .template
            .as_ref()
            .and_then(|h| h.given().budget())
            .and_then(|b| b.available());
        observed.tell(|call| {
            Event::CallFinished(observe::CallFinished {
                call,
                outcome,
                attempts,
                elapsed,
                stop,
                budget_available,
            })
        });
    }

    /// Gives the budget back a retry it paid for that will not be sent.
    fn refund(&mut self) {
        if self
            .slow
            .as_mut()
            .is_some_and(|r| mem::take(&mut r.withdrawn))
        {
            if let Some(budget) = self.budget() {
                budget.refund();
            }
        }
    }

    /// Whether the origin's breaker, when there is one, lets a retry through. Only a
    /// call that may retry reads it, from its request head kept for the next
    /// attempt, so the success path neither looks it up nor clones it.
    pub(super) fn breaker_allows_retry(&self) -> bool {
        self.template
            .as_ref()
            .and_then(|h| h.given().breaker())
            .map_or(true, |b| b.allows_retry())
    }

    /// The last moment worth starting an attempt: the deadline less the minimum
    /// attempt time.
    pub(super) fn deadline_for_readiness(&self) -> Option<Instant> {
        self.deadline()
            .map(|d| d.checked_sub(self.policy.min_attempt_time()).unwrap_or(d))
    }
}
