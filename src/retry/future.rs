//! The retry layer's response future: the state machine of one call. What each
//! outcome means is decided in `call.rs`.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Buf;
use http::{Request, Response};
use http_body::Body;
use pin_project_lite::pin_project;
use tokio::time::{sleep_until, Instant, Sleep};
use tower_service::Service;

use super::call::{Call, CallResult, Lazy, Next};
use super::spans::Spans;
use super::RetryPolicy;
use crate::admit::{Admitted, Pass, Paused};
use crate::body::ReplayBody;
use crate::policy::error::{BoxError, Error};
use crate::policy::{AttemptOutcome, StopReason};
use std::mem;
use std::sync::Arc;

pin_project! {
    /// Response future of [`Retry`](super::Retry): the attempt loop of one call.
    pub struct ResponseFuture<S, B, RB>
    where
        S: Service<Request<ReplayBody<B>>, Response = Response<RB>>,
    {
        #[pin]
        pub(super) state: State<S::Future, RB, Held<S, B>>,
        pub(super) call: Call<S, B>,
        // The call's span and its current request's, left out when nothing takes
        // them (`Span::none()` does nothing), which keeps the future small.
        pub(super) span: Lazy<Spans>,
    }
}

/// A timer a state waits on beside its work; `None` when there is nothing to time,
/// so the success path without timeouts registers no timer.
type Timer = Option<Pin<Box<Sleep>>>;

#[inline]
pub(super) fn timer(at: Option<Instant>) -> Timer {
    at.map(|at| Box::pin(sleep_until(at)))
}

/// Polls `timer`: `None` when there is none.
#[inline]
fn poll_timer(timer: &mut Timer, cx: &mut Context<'_>) -> Option<Poll<()>> {
    timer.as_mut().map(|t| t.as_mut().poll(cx))
}

/// A call admitted by a stack whose origin is paused: its request, and a clone of the inner
/// service to send it with once the pause is over for it (the service the caller
/// drove ready is left to the next call, so no readiness is held during the wait).
pub(super) struct Held<S, B> {
    service: S,
    request: Option<Request<B>>,
    paused: Paused,
    keyed: bool,
    /// When admission dated the call, before the hold.
    dated: Option<Instant>,
}

impl<S, B> Held<S, B>
where
    B: Body,
    B::Data: Buf,
    B::Error: Into<BoxError>,
{
    /// Waits out the hold, then the service's readiness, then starts the call as an
    /// unheld call starts (its span opened then, its first attempt sent); or the
    /// error that refuses the call if the hold or the service's readiness ends in
    /// one.
    #[cold]
    #[inline(never)]
    fn poll_start<RB>(
        &mut self,
        cx: &mut Context<'_>,
        idle: &mut Call<S, B>,
    ) -> Poll<Result<ResponseFuture<S, B, RB>, Error>>
    where
        S: Service<Request<ReplayBody<B>>, Response = Response<RB>> + Clone,
        S::Error: Into<BoxError>,
    {
        let observed = idle.pass().and_then(Pass::observed);
        ready!(self.paused.poll(cx, observed))?;
        ready!(self.service.poll_ready(cx)).map_err(|e| Error::from_inner(e.into()))?;
        let Some(mut request) = self.request.take() else {
            // Taken only as the call starts, and then it is not held any more.
            return Poll::Ready(Err(Error::polled_after_completion("retry")));
        };
        if let Some(dated) = self.dated {
            Paused::note_hold(request.extensions_mut(), dated);
        }
        let admitted = Admitted {
            pass: idle.pass_mut().map(mem::take).unwrap_or_default(),
            keyed: self.keyed,
            at: self.dated,
        };
        let policy = idle.policy.clone();
        let span = Spans::for_call(&request);
        let started = Call::start(&mut self.service, policy, request, span, Some(admitted));
        // It went, unless its deadline refused it at the last moment: only a call
        // that goes counts as a first attempt, at its date.
        if !matches!(started.state, State::Refused { .. }) {
            self.paused
                .deposit_at(self.dated.unwrap_or_else(Instant::now));
        }
        Poll::Ready(Ok(started))
    }
}

pin_project! {
    #[project = StateProj]
    pub(super) enum State<F, RB, H> {
        // Waiting for the inner service's answer to the current attempt, and for
        // the attempt's timeout.
        Attempt { #[pin] future: F, timeout: Timer },
        // Reading and dropping the head of a failed response's body, so its
        // connection goes back to the pool before the wait; bounded in bytes and by
        // `until`.
        Draining { #[pin] body: RB, read: usize, until: Timer },
        // Waiting out the backoff or Retry-After, until `resume`.
        Waiting { resume: Timer },
        // Waiting for the inner service to be ready for the next attempt, no longer
        // than `latest` (the deadline's last useful moment).
        Readying { latest: Timer },
        // A call admitted by a stack's first attempt, held while its origin is paused.
        Held { held: Box<H> },
        // Refused before any attempt: the deadline left no time for one, or the
        // admission refused it.
        Refused { error: Option<Error> },
        // The call has ended; polling again is a caller's mistake, answered with an
        // error rather than a future that never completes.
        Done,
    }
}

impl<S, B, RB> ResponseFuture<S, B, RB>
where
    S: Service<Request<ReplayBody<B>>, Response = Response<RB>>,
    B: Body,
    B::Data: Buf,
    B::Error: Into<BoxError>,
{
    /// The deadline left no time for a first attempt: the call is refused.
    #[cold]
    pub(super) fn refused_by_deadline(mut call: Call<S, B>, span: Option<Box<Spans>>) -> Self {
        let error = call.refused_by_deadline();
        ResponseFuture {
            state: State::Refused { error: Some(error) },
            call,
            span: Lazy::new(span),
        }
    }

    /// A call admission refused.
    #[cold]
    pub(super) fn refused(policy: Arc<RetryPolicy>, pass: Pass, error: Error) -> Self {
        ResponseFuture {
            state: State::Refused { error: Some(error) },
            call: Call::idle(policy, pass),
            span: Lazy::new(None),
        }
    }

    /// A call admitted by a stack whose origin is paused: its first attempt waits out `hold`,
    /// then goes through `service`.
    #[cold]
    pub(super) fn held(
        service: S,
        policy: Arc<RetryPolicy>,
        req: Request<B>,
        admitted: Admitted,
        paused: Paused,
    ) -> Self {
        ResponseFuture {
            state: State::Held {
                held: Box::new(Held {
                    service,
                    request: Some(req),
                    paused,
                    keyed: admitted.keyed,
                    dated: admitted.at,
                }),
            },
            call: Call::idle(policy, admitted.pass),
            span: Lazy::new(None),
        }
    }
}

impl<S, B, RB> Future for ResponseFuture<S, B, RB>
where
    S: Service<Request<ReplayBody<B>>, Response = Response<RB>> + Clone,
    S::Error: Into<BoxError>,
    B: Body,
    B::Data: Buf,
    B::Error: Into<BoxError>,
    RB: Body,
{
    type Output = CallResult<RB>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        // A held call starts (or is refused) once its hold is over.
        // (The variant is read first: projecting the state reads every variant.)
        if matches!(*this.state, State::Held { .. }) {
            if let StateProj::Held { held } = this.state.as_mut().project() {
                match ready!(held.poll_start(cx, this.call)) {
                    Ok(ResponseFuture { state, call, span }) => {
                        *this.call = call;
                        *this.span = span;
                        this.state.set(state);
                    }
                    Err(error) => this.state.set(State::Refused { error: Some(error) }),
                }
            }
        }
        let call = this.call;
        let mut entered = this.span.as_deref().map(Spans::enter);
        // Every way a call ends leaves this loop with its result, and only here (a
        // plain first answer that nobody is told of returns at once).
        let ended: CallResult<RB> = loop {
            match this.state.as_mut().project() {
                StateProj::Attempt { future, timeout } => {
                    let result = match future.poll(cx) {
                        Poll::Ready(Ok(res)) => {
                            if call.is_plain_answer(&res) {
                                // The success path: nothing to record, nothing to wait,
                                // and, without a span or an observer, nobody to tell.
                                if let Some(spans) = this.span.as_deref_mut() {
                                    let outcome = AttemptOutcome::Status(res.status());
                                    spans.sent(entered.as_mut(), outcome);
                                    break Ok(res);
                                }
                                if call.is_observed() {
                                    break Ok(res);
                                }
                                if let Some(pass) = call.pass_mut() {
                                    pass.answered(&res);
                                }
                                this.state.set(State::Done);
                                return Poll::Ready(Ok(res));
                            }
                            Ok(res)
                        }
                        Poll::Ready(Err(err)) => Err(err.into()),
                        Poll::Pending => match poll_timer(timeout, cx) {
                            Some(fired) => {
                                ready!(fired);
                                Err(call.timed_out())
                            }
                            None => {
                                call.note_start();
                                return Poll::Pending;
                            }
                        },
                    };
                    if let Some(spans) = this.span.as_deref_mut() {
                        spans.sent(entered.as_mut(), Call::<S, B>::sent_outcome(&result));
                    }
                    match call.on_outcome(result) {
                        Next::Return(result) => break result,
                        Next::Wait { wait, response } => {
                            let now = Instant::now();
                            let resume_at = call.resume_at(now, wait);
                            match response {
                                // Drain first, within its own limit and before the
                                // deadline's last useful moment, then wait out what
                                // is left of the wait.
                                Some(res) => this.state.set(State::Draining {
                                    body: res.into_body(),
                                    read: 0,
                                    until: timer(Some(call.drain_until(now))),
                                }),
                                None => this.state.set(State::Waiting {
                                    resume: timer((!wait.is_zero()).then_some(resume_at)),
                                }),
                            }
                        }
                    }
                }
                StateProj::Draining {
                    mut body,
                    read,
                    until,
                } => {
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
                                let expired = poll_timer(until, cx).is_none_or(|p| p.is_ready());
                                if !expired {
                                    return Poll::Pending;
                                }
                                break;
                            }
                        }
                    }
                    let resume = timer(call.rest_of_wait(Instant::now()));
                    this.state.set(State::Waiting { resume });
                }
                StateProj::Waiting { resume } => {
                    if let Some(fired) = poll_timer(resume, cx) {
                        ready!(fired);
                    }
                    // The breaker may have opened while we waited.
                    if !call.breaker_allows_retry() {
                        break call.stopped(StopReason::CircuitOpen);
                    }
                    // Another call's answer may have paused the origin while we
                    // waited: wait for that pause too, or stop.
                    let now = Instant::now();
                    match call.meet_pause(now, now) {
                        Ok(None) => {}
                        Ok(Some(release)) => {
                            call.waits_longer(release.saturating_duration_since(now));
                            this.state.set(State::Waiting {
                                resume: timer(Some(release)),
                            });
                            continue;
                        }
                        Err(stop) => break call.stopped(stop),
                    }
                    // Readiness may take long (a saturated limit beneath): no longer
                    // than the deadline allows.
                    let latest = timer(call.deadline_for_readiness());
                    this.state.set(State::Readying { latest });
                }
                StateProj::Readying { latest } => {
                    // The gates let only a call that kept its head retry (a policy
                    // of one attempt keeps none), and the service is kept with it.
                    let Some(service) = call.service() else {
                        break call.stopped(StopReason::AttemptsExhausted);
                    };
                    match service.poll_ready(cx) {
                        Poll::Ready(Ok(())) => {}
                        Poll::Ready(Err(e)) => break call.unavailable(e.into()),
                        Poll::Pending => {
                            if poll_timer(latest, cx).is_some_and(|p| p.is_ready()) {
                                break call.stopped(StopReason::Deadline);
                            }
                            return Poll::Pending;
                        }
                    }
                    let spans = this.span.as_deref_mut();
                    let (future, timeout) = match call.next_attempt(Instant::now(), spans) {
                        Ok(next) => next,
                        Err(result) => break result,
                    };
                    if let (Some(spans), Some(entered)) = (this.span.as_deref(), entered.as_mut()) {
                        spans.enter_request(entered);
                    }
                    this.state.set(State::Attempt {
                        future,
                        timeout: timer(timeout),
                    });
                }
                StateProj::Refused { error } => match error.take() {
                    Some(err) => break Err(err),
                    None => break Err(Error::polled_after_completion("retry")),
                },
                // A held call is started before this loop.
                StateProj::Held { .. } | StateProj::Done => {
                    break Err(Error::polled_after_completion("retry"))
                }
            }
        };
        this.state.set(State::Done);
        drop(entered);
        if let Some(spans) = this.span.take() {
            spans.finished(call.attempt);
        }
        call.ended(&ended);
        Poll::Ready(ended)
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
