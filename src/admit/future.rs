//! The response future of a layer that runs a part of admission in front of its
//! inner service: the call sent at once, or held while its origin is paused, and its
//! outcome recorded once when it ends.

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use http::{Request, Response};
use pin_project_lite::pin_project;
use tokio::time::Instant;
use tower_service::Service;

use super::{Admission, Entered, Pass, Paused};
use crate::observe::Observed;
use crate::policy::error::{BoxError, Error};

/// How a held call starts once its hold is over: the inner service's future, or
/// the error that refuses the call.
pub(crate) trait Start {
    /// The inner service's future.
    type Future;

    /// Waits out the hold and the inner service's readiness, then sends the call.
    fn poll_start(
        &mut self,
        cx: &mut Context<'_>,
        observed: Option<&Observed>,
    ) -> Poll<Result<Self::Future, Error>>;
}

/// A call held while its origin is paused: the request, and a clone of the inner
/// service to send it with (the one the caller drove ready is left to the next
/// call, so no readiness, such as a concurrency permit, is held during the wait).
pub struct Held<S, B> {
    service: S,
    request: Option<Request<B>>,
    paused: Paused,
    /// When the call was dated: its deposit's time, made once it goes.
    dated: Instant,
}

impl<S, B> Start for Held<S, B>
where
    S: Service<Request<B>>,
    S::Error: Into<BoxError>,
{
    type Future = S::Future;

    fn poll_start(
        &mut self,
        cx: &mut Context<'_>,
        observed: Option<&Observed>,
    ) -> Poll<Result<S::Future, Error>> {
        ready!(self.paused.poll(cx, observed))?;
        ready!(self.service.poll_ready(cx)).map_err(|e| Error::from_inner(e.into()))?;
        let Some(mut request) = self.request.take() else {
            return Poll::Ready(Err(Error::polled_after_completion("admission")));
        };
        Paused::note_hold(request.extensions_mut(), self.dated);
        // It goes: it counts as a first attempt now, at its date.
        self.paused.deposit_at(self.dated);
        Poll::Ready(Ok(self.service.call(request)))
    }
}

/// The hold of a layer whose part never holds a call (the breaker's).
#[derive(Debug)]
pub struct NeverHeld<F>(Infallible, std::marker::PhantomData<fn() -> F>);

impl<F> Start for NeverHeld<F> {
    type Future = F;

    fn poll_start(&mut self, _: &mut Context<'_>, _: Option<&Observed>) -> Poll<Result<F, Error>> {
        match self.0 {}
    }
}

pin_project! {
    /// The response future of a layer running a part of admission: the future of
    /// [`Budget`](crate::budget::Budget), [`CircuitBreaker`](crate::circuit_breaker::CircuitBreaker)
    /// and [`Throttle`](crate::throttle::Throttle), named by their modules'
    /// `ResponseFuture` aliases. One type for all, so a front-end's call writes the
    /// inner future where it stays instead of moving it into a wrapper.
    pub struct ResponseFuture<F, H> {
        #[pin]
        state: State<F, H>,
        // What the call holds: the breaker's permit, the budget's account, the
        // observer; its outcome is recorded through them once.
        pass: Pass,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, H> {
        // Waiting for the inner service's answer.
        Called { #[pin] future: F },
        // Waiting for the origin's pause to end, then for the held service to be
        // ready.
        Held { held: Box<H> },
        // Refused without calling the inner service, or finished.
        Done { error: Option<Error> },
    }
}

impl<F, H> ResponseFuture<F, H> {
    /// Runs `admission` on `req` and sends it through `service` when it goes at
    /// once; `hold` makes the held call of one that waits for its origin's pause
    /// (from the service, which it clones: the one driven ready is left to the next
    /// call). Always inlined, as the front-ends' `call`s are: the inner future is
    /// built in place instead of copied out through each layer.
    #[inline(always)]
    pub(crate) fn admit<S, B>(
        admission: &Admission,
        service: &mut S,
        mut req: Request<B>,
        hold: impl FnOnce(&mut S, Request<B>, Paused, Instant) -> H,
    ) -> Self
    where
        S: Service<Request<B>, Future = F>,
    {
        match admission.enter(&mut req, None) {
            Entered::Go(admitted) => ResponseFuture {
                // Built in one expression, the inner future written straight in.
                state: State::Called {
                    future: service.call(req),
                },
                pass: admitted.pass,
            },
            Entered::Held { admitted, paused } => {
                let dated = admitted.at.unwrap_or_else(Instant::now);
                ResponseFuture {
                    state: State::Held {
                        held: Box::new(hold(service, req, paused, dated)),
                    },
                    pass: admitted.pass,
                }
            }
            Entered::Refused { pass, error } => ResponseFuture {
                state: State::Done { error: Some(error) },
                pass,
            },
        }
    }
}

impl<F> ResponseFuture<F, NeverHeld<F>> {
    /// [`admit`](ResponseFuture::admit), for an admission that never holds a call
    /// (it has no budget: a breaker's, a throttle's).
    #[inline(always)]
    pub(crate) fn admit_unheld<S, B>(
        admission: &Admission,
        service: &mut S,
        req: Request<B>,
    ) -> Self
    where
        S: Service<Request<B>, Future = F>,
    {
        ResponseFuture::admit(admission, service, req, |_: &mut S, _, _, _| {
            unreachable_hold()
        })
    }
}

/// Only a budget holds a call (for its origin's pause).
#[cold]
fn unreachable_hold<F>() -> NeverHeld<F> {
    unreachable!("an admission without a budget has no pause to hold a call for")
}

impl<S, B> fmt::Debug for Held<S, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Held").finish_non_exhaustive()
    }
}

impl<S, B> Held<S, B> {
    /// A call held for its origin's pause, to be sent through `service`.
    pub(crate) fn new(service: S, request: Request<B>, paused: Paused, dated: Instant) -> Self {
        Held {
            service,
            request: Some(request),
            paused,
            dated,
        }
    }
}

// The bound names a crate-private trait: the two kinds of hold ([`Held`] and
// [`NeverHeld`]) are the crate's own, and users name the future only through the
// front-ends' `ResponseFuture` aliases.
#[allow(private_bounds)]
impl<F, H, RB, E> Future for ResponseFuture<F, H>
where
    F: Future<Output = Result<Response<RB>, E>>,
    E: Into<BoxError>,
    H: Start<Future = F>,
{
    type Output = Result<Response<RB>, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Called { future } => {
                    let result = ready!(future.poll(cx)).map_err(|e| Error::from_inner(e.into()));
                    this.pass.finish(&result);
                    this.state.set(State::Done { error: None });
                    return Poll::Ready(result);
                }
                StateProj::Held { held } => {
                    let state = match ready!(held.poll_start(cx, this.pass.observed())) {
                        Ok(future) => State::Called { future },
                        Err(error) => State::Done { error: Some(error) },
                    };
                    this.state.set(state);
                }
                StateProj::Done { error } => {
                    let result = match error.take() {
                        // Refused, or its hold or readiness failed: it sent nothing,
                        // which the breaker's permit (if any) records as such.
                        Some(error) => Err(error),
                        None => {
                            return Poll::Ready(Err(Error::polled_after_completion("admission")))
                        }
                    };
                    this.pass.finish(&result);
                    return Poll::Ready(result);
                }
            }
        }
    }
}

impl<F, H> fmt::Debug for ResponseFuture<F, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Called { .. } => "called",
            State::Held { .. } => "held",
            State::Done { error: Some(_) } => "refused",
            State::Done { error: None } => "done",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish()
    }
}
