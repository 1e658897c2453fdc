//! The response future of a layer that runs a part of admission in front of its
//! inner service: the call sent at once, or held while its origin is paused, and its
//! outcome recorded once when it ends.

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use http::{Request, Response};
use pin_project_lite::pin_project;
use tokio::time::Instant;
use tower_service::Service;

use super::{Admission, Beneath, Deferred, Entered, Note, Pass, Paused};
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

/// A call held while its origin is paused, by a budget layer that holds it
/// itself (no retry layer beneath to hand the hold down to).
pub struct Held<S, B>
where
    S: Service<Request<B>>,
{
    way: Way<S, B>,
    paused: Paused,
    /// When the call was dated: its deposit's time, made once it goes.
    dated: Instant,
}

/// Where a held call waits. (The whole hold is boxed, so its ways' sizes do not
/// weigh on the front-end's future.)
#[allow(clippy::large_enum_variant)]
enum Way<S, B>
where
    S: Service<Request<B>>,
{
    /// Before its inner service is called: the request, and a clone of the inner
    /// service to send it with (the one the caller drove ready is left to the
    /// next call, so no readiness, such as a concurrency permit, is held during
    /// the wait).
    Unsent {
        service: S,
        request: Option<Request<B>>,
        /// What the budget layer knows of the layers beneath, asked again as the
        /// call goes.
        beneath: Option<Beneath>,
    },
    /// After: the inner service's future, not polled until the hold is over (a
    /// hold handed down that nobody beneath had taken when the inner service's
    /// `call` returned), or until a retry layer beneath claims it after all.
    Called {
        future: Option<S::Future>,
        note: Arc<Note>,
    },
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
        match &mut self.way {
            Way::Unsent {
                service,
                request,
                beneath,
            } => {
                ready!(self.paused.poll(cx, observed))?;
                ready!(service.poll_ready(cx)).map_err(|e| Error::from_inner(e.into()))?;
                let Some(mut request) = request.take() else {
                    return Poll::Ready(Err(Error::polled_after_completion("admission")));
                };
                Paused::note_hold(request.extensions_mut(), self.dated);
                // It asks again whether a retry layer is beneath, and hands the
                // rest of the hold down with it (the pause is over; what is left is
                // the deadline): a retry layer beneath takes it, and counts the
                // call only if it goes. It told the call's observer of the hold.
                let note = beneath.as_ref().map(|beneath| {
                    let hold = Box::new(self.paused.released(self.dated));
                    let note = Note::leave(&mut request, Some(beneath), Some(hold));
                    note.hold_above();
                    note
                });
                let future = service.call(request);
                // Nobody beneath took it: it goes from here, counted now.
                self.paused
                    .deposit_unless_claimed(self.dated, note.as_deref());
                Poll::Ready(Ok(future))
            }
            Way::Called { future, note } => {
                // Held here until a retry layer beneath claims the hold after all
                // (it then holds, refuses or counts the call itself), or until
                // the hold is over: then the call is counted here, unless a retry
                // layer claimed it meanwhile.
                note.register(cx);
                if !note.is_claimed() {
                    ready!(self.paused.poll(cx, observed))?;
                    self.paused.deposit_unless_claimed(self.dated, Some(note));
                }
                match future.take() {
                    Some(future) => Poll::Ready(Ok(future)),
                    None => Poll::Ready(Err(Error::polled_after_completion("admission"))),
                }
            }
        }
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

/// How a front-end makes the hold of a call it holds itself.
pub(crate) trait Holding<S, B>: Sized
where
    S: Service<Request<B>>,
{
    /// A call held before its inner service is called (sent through a clone of
    /// `service` once its hold is over).
    fn unsent(
        service: &mut S,
        req: Request<B>,
        paused: Paused,
        dated: Instant,
        beneath: Option<&Beneath>,
    ) -> Self;

    /// A call held after: its inner service's future waits, unpolled.
    fn called(future: S::Future, note: Arc<Note>, paused: Paused, dated: Instant) -> Self;
}

impl<S, B> Holding<S, B> for Held<S, B>
where
    S: Service<Request<B>> + Clone,
{
    fn unsent(
        service: &mut S,
        req: Request<B>,
        paused: Paused,
        dated: Instant,
        beneath: Option<&Beneath>,
    ) -> Self {
        Held {
            way: Way::Unsent {
                service: service.clone(),
                request: Some(req),
                beneath: beneath.cloned(),
            },
            paused,
            dated,
        }
    }

    fn called(future: S::Future, note: Arc<Note>, paused: Paused, dated: Instant) -> Self {
        Held {
            way: Way::Called {
                future: Some(future),
                note,
            },
            paused,
            dated,
        }
    }
}

impl<S, B> Holding<S, B> for NeverHeld<S::Future>
where
    S: Service<Request<B>>,
{
    fn unsent(_: &mut S, _: Request<B>, _: Paused, _: Instant, _: Option<&Beneath>) -> Self {
        unreachable_hold()
    }

    fn called(_: S::Future, _: Arc<Note>, _: Paused, _: Instant) -> Self {
        unreachable_hold()
    }
}

impl<F, H> ResponseFuture<F, H> {
    /// Runs `admission` on `req` and sends it through `service` when it goes at
    /// once; holds it (see [`Holding`]) when its origin is paused, or hands the
    /// hold down to the retry layer `beneath` (a budget layer's; `None` for a part
    /// that never holds). Always inlined, as the front-ends' `call`s are: the
    /// inner future is built in place instead of copied out through each layer.
    #[inline(always)]
    pub(crate) fn admit<S, B>(
        admission: &Admission,
        service: &mut S,
        mut req: Request<B>,
        beneath: Option<&Beneath>,
    ) -> Self
    where
        S: Service<Request<B>, Future = F>,
        H: Holding<S, B>,
    {
        match admission.enter_front(&mut req, beneath) {
            Entered::Go(admitted) => ResponseFuture {
                // Built in one expression, the inner future written straight in.
                state: State::Called {
                    future: service.call(req),
                },
                pass: admitted.pass,
            },
            // Held here: the layer does not know of a retry layer beneath (yet).
            Entered::Held { admitted, paused } => {
                let dated = admitted.at.unwrap_or_else(Instant::now);
                ResponseFuture {
                    state: State::Held {
                        held: Box::new(H::unsent(service, req, *paused, dated, beneath)),
                    },
                    pass: admitted.pass,
                }
            }
            Entered::Deferred { admitted, hold } => {
                ResponseFuture::handed_down(beneath, service, req, admitted.pass, hold)
            }
            Entered::Refused { pass, error } => {
                // A budget layer above that left a note neither holds nor counts a
                // call refused here.
                Note::settle(&mut req);
                ResponseFuture {
                    state: State::Done { error: Some(error) },
                    pass,
                }
            }
        }
    }

    /// Hands the hold of a call whose origin is paused down to the retry layer
    /// beneath, which meets it within its policy's timeout and counts the call
    /// when it goes. When nobody beneath took it, the call is held here after
    /// all, its inner future unpolled until the hold is over.
    #[cold]
    #[inline(never)]
    fn handed_down<S, B>(
        beneath: Option<&Beneath>,
        service: &mut S,
        mut req: Request<B>,
        pass: Pass,
        hold: Box<Deferred>,
    ) -> Self
    where
        S: Service<Request<B>, Future = F>,
        H: Holding<S, B>,
    {
        let note = Note::leave(&mut req, beneath, Some(hold));
        let future = service.call(req);
        // Claimed beneath (or settled by a refusal there): passed through. Else
        // held here until it is over (and counted then) or until a retry layer
        // beneath claims it after all.
        let hold = note.hold().filter(|_| !note.is_claimed());
        let state = match hold.map(|hold| (hold.dated(), hold.meet(None, true, true))) {
            None => State::Called { future },
            Some((dated, Ok(paused))) => {
                note.hold_above();
                State::Held {
                    held: Box::new(H::called(future, note.clone(), paused, dated)),
                }
            }
            Some((_, Err(error))) => {
                // Refused: a retry layer that takes the note later neither
                // holds nor counts the call.
                note.settle_taken();
                State::Done { error: Some(error) }
            }
        };
        ResponseFuture { state, pass }
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
        ResponseFuture::admit(admission, service, req, None)
    }
}

/// Only a budget holds a call (for its origin's pause).
#[cold]
fn unreachable_hold<F>() -> NeverHeld<F> {
    unreachable!("an admission without a budget has no pause to hold a call for")
}

impl<S, B> fmt::Debug for Held<S, B>
where
    S: Service<Request<B>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Held").finish_non_exhaustive()
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
