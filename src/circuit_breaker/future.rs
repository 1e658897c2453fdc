use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use http::Response;
use pin_project_lite::pin_project;

use super::state::{Change, Core, Ticket};
use crate::error::{BoxError, Error};
use crate::observe::{BreakerStateChanged, Event, Observed};
use crate::policy::{BreakerGate, BreakerHandle, Outcome};

pin_project! {
    /// Response future of [`CircuitBreaker`](super::CircuitBreaker).
    pub struct ResponseFuture<F> {
        #[pin]
        pub(super) state: State<F>,
    }
}

pin_project! {
    #[project = StateProj]
    pub(super) enum State<F> {
        // Waiting for the inner service's answer; the permit records its outcome,
        // or gives a probe slot back if the future is dropped first.
        Called { #[pin] future: F, permit: Option<Permit> },
        // Refused without calling the inner service, or finished.
        Done { error: Option<Error> },
    }
}

/// What a permit reaches its breaker through: the breaker itself (the breaker
/// layer's permits), or an entry that keeps it beside the origin's other state (a
/// guard's), so that a call holds one reference to both.
pub(crate) trait BreakerOwner: Send + Sync + 'static {
    /// The breaker, when this owner keeps one (a breaker always does).
    fn breaker(&self) -> Option<&Core>;

    /// The breaker as the layers beneath see it, when this owner keeps one.
    fn handle(this: &Arc<Self>) -> Option<BreakerHandle>;
}

impl BreakerOwner for Core {
    #[inline]
    fn breaker(&self) -> Option<&Core> {
        Some(self)
    }

    fn handle(this: &Arc<Self>) -> Option<BreakerHandle> {
        Some(BreakerHandle::new(this.clone()))
    }
}

/// A call the breaker admitted: it records the call's outcome once, or gives a
/// probe's slot back if the call ends (or is dropped) without one. It may outlive
/// the record (a guarded call keeps it, and its entry, until the call's state is
/// dropped); after it, nothing it does counts.
pub(crate) struct Permit<O: BreakerOwner = Core> {
    owner: Arc<O>,
    ticket: Ticket,
    /// An outcome was recorded, or the slot given back: the permit is spent.
    settled: bool,
    /// The call's observer, told of the state changes its outcome makes.
    observed: Option<Arc<Observed>>,
}

impl<O: BreakerOwner> Permit<O> {
    #[inline]
    pub(crate) fn new(owner: Arc<O>, ticket: Ticket, observed: Option<Arc<Observed>>) -> Self {
        if let (true, Some(core)) = (ticket.half_opened, owner.breaker()) {
            changed(observed.as_deref(), core.state_change_to_half_open());
        }
        Permit {
            owner,
            ticket,
            settled: false,
            observed,
        }
    }

    /// What the permit reaches its breaker through.
    #[inline]
    pub(crate) fn owner(&self) -> &O {
        &self.owner
    }

    /// Records the call's outcome: its final answer or error. A call that ended
    /// before it sent anything (refused by a layer inside, or out of time before
    /// its first attempt) says nothing of the origin: it counts neither way, and a
    /// probe's slot goes back, as for a dropped call. Only the first outcome
    /// counts.
    #[inline]
    pub(crate) fn finish<RB>(&mut self, result: &Result<Response<RB>, Error>) {
        match result {
            Ok(res) => self.answered(res),
            Err(err) if err.sent_nothing() => self.release(),
            Err(err) => self.complete(Outcome::Error(err.kind()), Some(err)),
        }
    }

    /// Records the call's final answer (unless an outcome was recorded already).
    #[inline]
    pub(crate) fn answered<RB>(&mut self, res: &Response<RB>) {
        let outcome = Outcome::Response {
            status: res.status(),
            headers: res.headers(),
        };
        self.complete(outcome, None)
    }

    /// Whether the breaker lets an extra attempt of this call through now.
    #[inline]
    pub(crate) fn allows_retry(&self) -> bool {
        self.owner.breaker().is_none_or(BreakerGate::allows_retry)
    }

    /// The breaker, as the layers beneath see it.
    pub(crate) fn handle(&self) -> Option<BreakerHandle> {
        O::handle(&self.owner)
    }

    #[inline]
    fn complete(
        &mut self,
        outcome: Outcome<'_>,
        error: Option<&(dyn std::error::Error + 'static)>,
    ) {
        let Some(core) = self.owner.breaker().filter(|_| !self.settled) else {
            return;
        };
        let failed = core.config.fails(outcome, error);
        self.settled = true;
        if let Some(change) = core.record(self.ticket, failed) {
            changed(self.observed.as_deref(), change);
        }
    }

    /// Gives a probe's slot back, as for a call that was never sent, unless an
    /// outcome was recorded.
    fn release(&mut self) {
        if let Some(core) = self.owner.breaker().filter(|_| !self.settled) {
            core.release(self.ticket);
        }
        self.settled = true;
    }
}

/// Tells the observer, if any, of a state change.
fn changed(observed: Option<&Observed>, change: Change) {
    if let Some(observed) = observed {
        observed.tell(|call| {
            Event::BreakerStateChanged(BreakerStateChanged {
                call,
                from: change.from,
                to: change.to,
                next_probe_at: change.next_probe_at,
            })
        });
    }
}

impl<O: BreakerOwner> Drop for Permit<O> {
    fn drop(&mut self) {
        // Dropped before its outcome: a probe's slot goes back to the breaker.
        self.release();
    }
}

impl<F> ResponseFuture<F> {
    pub(crate) fn refused(error: Error) -> Self {
        ResponseFuture {
            state: State::Done { error: Some(error) },
        }
    }
}

impl<F, RB, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<RB>, E>>,
    E: Into<BoxError>,
{
    type Output = Result<Response<RB>, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        match this.state.as_mut().project() {
            StateProj::Called { future, permit } => {
                let result = ready!(future.poll(cx)).map_err(|e| Error::from_inner(e.into()));
                if let Some(mut permit) = permit.take() {
                    permit.finish(&result);
                }
                this.state.set(State::Done { error: None });
                Poll::Ready(result)
            }
            StateProj::Done { error } => Poll::Ready(Err(error
                .take()
                .unwrap_or_else(|| Error::polled_after_completion("circuit breaker")))),
        }
    }
}

impl<F> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Called { .. } => "called",
            State::Done { error: Some(_) } => "refused",
            State::Done { error: None } => "done",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish()
    }
}
