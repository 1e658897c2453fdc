//! The hedge layer's response future: the original send, and the race beside it
//! once a copy is due.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::request::Parts;
use http::{Request, Response};
use pin_project_lite::pin_project;
use tokio::time::{sleep_until, Instant, Sleep};
use tower_service::Service;

mod race;

use super::HedgeBody;
use super::{Estimator, Judging};
use crate::observe::Observed;
use crate::policy::error::{BoxError, Error};
use crate::policy::{later, AttemptOutcome, ErrorKind, NotHedged};

pin_project! {
    /// Response future of [`Hedge`](super::Hedge).
    ///
    /// A request that is not hedged is only its inner future; a hedged one also
    /// keeps, in one allocation, what it needs to send copies.
    pub struct ResponseFuture<S, B>
    where
        S: Service<Request<B>>,
    {
        #[pin]
        state: State<S::Future>,
        race: Option<Pin<Box<Race<S, B>>>>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F> {
        // Waiting for the original send (and, in a race, for the copies beside it).
        Original { #[pin] future: F },
        // The original failed with a retryable failure: waiting for the copies.
        Copies,
        // The answer was returned.
        Done,
    }
}

pin_project! {
    /// What a hedged request keeps to send copies and pick the winner.
    #[project = RaceProj]
    struct Race<S, B>
    where
        S: Service<Request<B>>,
    {
        // When the next copy is due.
        #[pin]
        timer: Sleep,
        // The service copies are sent with; `None` once no further copy will be
        // sent, so that no readiness it reserved is held for the rest of the race.
        service: Option<S>,
        parts: Parts,
        // The handle copies' bodies are made from.
        body: B,
        // A copy's body, made when the copy was due, waiting for the service to be
        // ready.
        next_body: Option<B>,
        policy: Arc<Judging>,
        // The rules' verdict on the request, for the decision ladder.
        idempotent: bool,
        keyed: bool,
        delay: Duration,
        max_extra: u32,
        started: Instant,
        estimator: Option<Arc<Estimator>>,
        // How the original ended, once it did: its outcome and when.
        original: Option<(AttemptOutcome, Duration)>,
        copies: Vec<InFlight<S::Future>>,
        // A copy was due at least once: the record rides on the result.
        due: bool,
        not_sent: Option<NotHedged>,
        // The latest retryable failure, returned if every send fails.
        last_failure: Option<Result<S::Response, Failure>>,
        // The call's observer, when one was set.
        observed: Option<Observed>,
    }

    impl<S, B> PinnedDrop for Race<S, B>
    where
        S: Service<Request<B>>,
    {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            // An original the caller gave up on had run for at least this long: a
            // lower bound that still counts it as slow, when it is past the hedge
            // delay. (One that lost to a copy was recorded when the race ended.)
            if let (None, Some(estimator)) = (this.original.as_ref(), this.estimator.as_ref()) {
                let at = Instant::now();
                let ran = at.saturating_duration_since(*this.started);
                if ran >= *this.delay {
                    estimator.record_at(ran, at);
                }
            }
        }
    }
}

/// One copy: its future while in flight, how it ended, and its span while in
/// flight (when the call is traced).
struct InFlight<F> {
    future: Option<Pin<Box<F>>>,
    started: Duration,
    ended: Option<(AttemptOutcome, Duration)>,
    span: Option<tracing::Span>,
}

/// A failed send: its kind, read once from the error, and the error.
type Failure = (ErrorKind, BoxError);

/// What judging one send's outcome decided.
enum Verdict<T> {
    /// Return this at once.
    Return(T),
    /// A retryable failure: keep waiting for the other sends.
    Wait,
}

/// What a hedged request needs, read from the request when it arrives.
pub(super) struct Plan<B> {
    pub(super) started: Instant,
    pub(super) body: B,
    pub(super) policy: Arc<Judging>,
    pub(super) keyed: bool,
    pub(super) delay: Duration,
    pub(super) max_extra: u32,
    pub(super) estimator: Option<Arc<Estimator>>,
}

impl<S, B, RB> ResponseFuture<S, B>
where
    S: Service<Request<B>, Response = Response<RB>>,
{
    pub(super) fn passthrough(future: S::Future) -> Self {
        ResponseFuture {
            state: State::Original { future },
            race: None,
        }
    }

    pub(super) fn race(service: S, parts: Parts, future: S::Future, plan: Plan<B>) -> Self {
        let started = plan.started;
        let observed = Observed::of_parts(&parts);
        let race = Race {
            timer: sleep_until(later(started, plan.delay)),
            service: Some(service),
            idempotent: plan.policy.rules.is_idempotent(&parts.method, &parts.uri),
            parts,
            body: plan.body,
            next_body: None,
            policy: plan.policy,
            keyed: plan.keyed,
            delay: plan.delay,
            max_extra: plan.max_extra,
            started,
            estimator: plan.estimator,
            original: None,
            copies: Vec::new(),
            due: false,
            not_sent: None,
            last_failure: None,
            observed,
        };
        ResponseFuture {
            state: State::Original { future },
            race: Some(Box::pin(race)),
        }
    }
}

impl<S, B, RB> Future for ResponseFuture<S, B>
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Error: Into<BoxError>,
    B: HedgeBody,
{
    type Output = Result<Response<RB>, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let Some(race) = this.race.as_mut() else {
            // Not hedged: the inner future as it is.
            return match this.state.as_mut().project() {
                StateProj::Original { future } => {
                    let result = std::task::ready!(future.poll(cx));
                    this.state.set(State::Done);
                    Poll::Ready(result.map_err(|e| Error::from_inner(e.into())))
                }
                // Without a race there are no copies: only polled after it ended.
                _ => Poll::Ready(Err(Error::polled_after_completion("hedge"))),
            };
        };
        loop {
            // The original first: an answer that is ready wins before a copy is sent.
            let mut original_live = false;
            if let StateProj::Original { future } = this.state.as_mut().project() {
                match future.poll(cx) {
                    Poll::Ready(result) => {
                        this.state.set(State::Copies);
                        if let Verdict::Return(out) = race.as_mut().judge(0, result) {
                            this.state.set(State::Done);
                            return Poll::Ready(out);
                        }
                    }
                    Poll::Pending => original_live = true,
                }
            } else if let StateProj::Done = this.state.as_mut().project() {
                return Poll::Ready(Err(Error::polled_after_completion("hedge")));
            }
            // Then the copies, in the order they were sent.
            let mut i = 0;
            while i < race.copies.len() {
                let copy = &mut race.as_mut().project().copies[i];
                let _entered = copy.span.as_ref().map(tracing::Span::enter);
                let polled = match copy.future.as_mut() {
                    Some(future) => future.as_mut().poll(cx),
                    None => Poll::Pending,
                };
                drop(_entered);
                if let Poll::Ready(result) = polled {
                    if let Verdict::Return(out) = race.as_mut().judge(i as u32 + 1, result) {
                        this.state.set(State::Done);
                        return Poll::Ready(out);
                    }
                }
                i += 1;
            }
            if !race.any_live(original_live) {
                this.state.set(State::Done);
                return Poll::Ready(race.as_mut().all_failed());
            }
            match race.as_mut().poll_hedge(cx) {
                // A copy was sent: poll it.
                Poll::Ready(()) => continue,
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl<S, B> fmt::Debug for ResponseFuture<S, B>
where
    S: Service<Request<B>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("ResponseFuture");
        d.field("hedged", &self.race.is_some());
        if let Some(race) = &self.race {
            d.field("delay", &race.delay)
                .field("copies", &race.copies.len());
        }
        d.finish_non_exhaustive()
    }
}
