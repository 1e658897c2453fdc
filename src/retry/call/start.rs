//! How a call starts, and how each later attempt is sent: the first attempt's
//! request, the record its write safety depends on, its headers and its timeout.

use super::*;

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
pub(super) fn first_timeout(
    policy: &RetryPolicy,
    ledger: Option<&mut Ledger>,
    now: Instant,
) -> Result<Option<Instant>, ()> {
    let own = policy.attempt_timeout().map(|t| later(now, t));
    let Some(ledger) = ledger else {
        return Ok(own);
    };
    ledger.timeout_is_deadline = false;
    let Some(deadline) = ledger.deadline else {
        return Ok(own);
    };
    if deadline.saturating_duration_since(now) < policy.min_attempt_time() {
        return Err(());
    }
    match own {
        Some(own) if own <= deadline => Ok(Some(own)),
        _ => {
            ledger.timeout_is_deadline = true;
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
    /// once, in place, instead of being moved through intermediate values; the
    /// request is moved once, as its body is wrapped for replay.
    #[inline(always)]
    pub(in crate::retry) fn start<RB>(
        service: &mut S,
        policy: Arc<RetryPolicy>,
        req: Request<B>,
        mut span: Option<Box<Spans>>,
        admitted: Option<Admitted>,
    ) -> ResponseFuture<S, B, RB>
    where
        S: tower_service::Service<Request<ReplayBody<B>>, Response = Response<RB>> + Clone,
    {
        // A retry layer without admission has no pass at all (not an empty one, to
        // test where the call's answer is recorded and where it drops).
        let (pass, keyed, at) = match admitted {
            Some(Admitted { pass, keyed, at }) => (Some(pass), keyed, at),
            None => (None, false, None),
        };
        let keyed_by_admission = keyed;
        let ext = req.extensions();
        let given = crate::policy::Given::new(ext);
        // The clock is read at once only when something must be timed; otherwise the
        // call's start is taken when its first attempt first waits (a transport
        // always does), so an answer that is ready at once reads no clock at all.
        let given_deadline = given.deadline();
        let route = given.route().cloned();
        let held = given.held();
        // Admission that recorded the call for its observer shares its record.
        let observed = match pass.as_ref().and_then(Pass::shared_observed) {
            Some(observed) => Some(observed.clone()),
            None => given
                .observer()
                .map(|o| Arc::new(Observed::new(o.clone(), &req))),
        };
        let timed = given_deadline.is_some()
            || policy.timeout().is_some()
            || policy.attempt_timeout().is_some();
        // An observer is told the call's time, so its start is read at once too. A
        // layer above that dated the call (the budget's window) saves the read.
        let started = (timed || observed.is_some())
            .then(Instant::now)
            .or(at)
            .or_else(|| given.entered());
        // The total timeout counts from admission's date (its own, or a budget
        // layer's above): a call held for a paused origin counts the hold, so a
        // call whose timeout ended in it is refused unsent. (An untimed call has
        // neither deadline: nothing to compare.)
        let deadline = if timed {
            at.or_else(|| given.entered())
                .or(started)
                .and_then(|dated| call_deadline(given_deadline, policy.timeout(), dated))
        } else {
            None
        };
        // For an idempotent request a key changes nothing, so it is not looked for.
        let idempotent = policy.rules().is_idempotent(req.method(), req.uri());
        let keyed = !idempotent && (keyed_by_admission || policy.carries_key(req.headers(), ext));
        let one_shot = given.get::<crate::body::OneShot>().is_some();
        let retries = policy.max_attempts() > 1;

        // A policy of one attempt keeps nothing (an empty body stays free of any
        // allocation); a one-shot body is never sent twice, hedges included. The
        // body is wrapped where the request is moved once, for the service.
        let replay_cap = if retries { policy.replay_cap() } else { 0 };
        let mut req = req.map(|body| {
            if one_shot {
                ReplayBody::one_shot(body)
            } else {
                ReplayBody::new(body, replay_cap)
            }
        });
        // Layers beneath (a hedge layer) see the call's deadline, whichever set it.
        if let Some(deadline) = deadline.map(crate::policy::Deadline::at) {
            CallContext::of_mut(req.extensions_mut()).set_deadline(deadline);
        }
        // What later attempts need, allocated once and filled in place (see
        // `in_place`): what is kept of the extensions (read once the deadline is in
        // them) and the head's bytes are written where they stay. The service was
        // driven to readiness for the first attempt; the clone drives its own.
        let carry = if retries {
            let mut carry = in_place!(Carry {
                resend: Some(Resend {
                    service: service.clone(),
                    head: Head::empty(),
                }),
                pass,
            });
            if let Some(resend) = &mut carry.resend {
                resend.head.fill(&req);
            }
            Some(carry)
        } else {
            pass.and_then(Carry::passed)
        };
        let source = retries.then(|| req.body().source());
        let log = track(keyed, idempotent, &mut req);
        let mut ledger = timed.then(|| Ledger::new(policy.max_attempts(), deadline));
        // A call admission held for its origin's pause tells the hold in its history.
        if let Some(held) = held {
            let ledger = ledger.get_or_insert_with(|| Ledger::new(policy.max_attempts(), deadline));
            ledger.history.set_held(held);
        }
        // The first attempt's timeout, and when it starts if its headers are stamped.
        let timeout = match (timed, started) {
            (true, Some(now)) => {
                first_timeout(&policy, ledger.as_deref_mut(), now).map(|t| (t, Some(now)))
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
                    ledger: Lazy::new(ledger),
                    carry,
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
            stamp(&policy, req.headers_mut(), 1, timeout, now);
        }
        if let Some(spans) = span.as_deref_mut() {
            spans.open(&mut req, 1);
        }
        // Built in one expression, the inner future written straight into ours.
        ResponseFuture {
            state: State::Attempt {
                future: {
                    let _entered = span.as_deref().and_then(Spans::request).map(Span::enter);
                    service.call(req)
                },
                timeout: crate::retry::future::timer(timeout),
            },
            call: call!(),
            span: Lazy::new(span),
        }
    }

    /// A call that sends nothing (yet): refused by admission, or held by it.
    pub(in crate::retry) fn idle(policy: Arc<RetryPolicy>, pass: Pass) -> Self {
        Call {
            carry: Carry::passed(pass),
            policy,
            idempotent: false,
            keyed: false,
            body: None,
            log: None,
            attempt: 0,
            route: None,
            started: None,
            ledger: Lazy::new(None),
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
    fn track(&mut self, req: &mut Request<ReplayBody<B>>) {
        self.log = track(self.keyed, self.idempotent, req);
    }

    /// The deadline leaves no time for a first attempt: the call is refused.
    pub(in crate::retry) fn refused_by_deadline(&mut self) -> Error {
        let history = self.finish(StopReason::Deadline);
        Error::new(
            ErrorKind::Timeout,
            Some(Box::new(TimedOut { deadline: true })),
        )
        .with_history(history, false)
    }

    /// The request for the next attempt and its timeout, or how the call ends.
    /// The request's span is opened among `spans`, when the call has them.
    pub(in crate::retry) fn next_attempt<RB>(
        &mut self,
        now: Instant,
        spans: Option<&mut Spans>,
    ) -> Result<(S::Future, Option<Instant>), CallResult<RB>>
    where
        S: tower_service::Service<Request<ReplayBody<B>>, Response = Response<RB>>,
    {
        let Ok(timeout) = self.attempt_timeout(now) else {
            return Err(self.stopped(StopReason::Deadline));
        };
        // The new attempt takes the body over. The gates found it replayable, but
        // the last attempt's reader, let go of late by its transport, may have read
        // past the cap during the wait: then nothing is sent.
        let body = match self.body.as_ref().map(ReplaySource::replay).transpose() {
            Ok(body) => body,
            Err(why) => return Err(self.stopped(StopReason::BodyNotReplayable(why))),
        };
        self.attempt += 1;
        // The head stays kept to the end: the budget and breaker handles are read
        // from it, and a head that did not read back must still refund the retry.
        let request = match (self.head(), body) {
            (Some(head), Some(body)) => head.clone().request(body),
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
        let mut req = req;
        self.track(&mut req);
        self.stamp(&mut req, timeout, now);
        let attempt = self.attempt;
        let ledger = self.ledger();
        ledger.last_error = None;
        ledger.withdrawn = None;
        ledger.attempt_started = Some(now);
        // The request came from the kept head, so the service kept beside it is
        // there, driven to readiness by the `Readying` state.
        match self.service() {
            Some(service) => {
                let spans = spans.map(|spans| {
                    spans.open(&mut req, attempt);
                    &*spans
                });
                let _entered = spans.and_then(Spans::request).map(Span::enter);
                Ok((service.call(req), timeout))
            }
            None => Err(self.stopped(StopReason::AttemptsExhausted)),
        }
    }
}
