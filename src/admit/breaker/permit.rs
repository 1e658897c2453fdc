//! The permit of a call the breaker admitted, and the refusal of one it did not.

use std::sync::Arc;

use http::{Request, Response};
use tokio::time::Instant;

use super::error::CircuitOpen;
use super::state::{Change, Core, Ticket};
use crate::observe::{BreakerStateChanged, CallRefused, Event, Observed, Refusal};
use crate::policy::error::Error;
use crate::policy::{BreakerGate, BreakerHandle, Outcome, StopReason};

/// What a permit reaches its breaker through: the breaker itself, or an origin's
/// entry that keeps it beside the origin's budget account, so that a call holds one
/// reference to both.
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
/// the record (a call keeps it, and its entry, until the call's state is dropped);
/// after it, nothing it does counts.
///
/// It is two words: the ticket is kept as its generation and probe flag (whether
/// admitting the call half-opened the breaker is told when it is made), and the
/// call's observer, told of the state changes its outcome makes, is the call's to
/// give.
pub(crate) struct Permit<O: BreakerOwner = Core> {
    owner: Arc<O>,
    /// The generation of the state that admitted the call.
    gen: u32,
    /// Whether the call holds a probe slot.
    probe: bool,
    /// An outcome was recorded, or the slot given back: the permit is spent.
    settled: bool,
}

impl<O: BreakerOwner> Permit<O> {
    #[inline]
    pub(crate) fn new(owner: Arc<O>, ticket: Ticket, observed: Option<&Observed>) -> Self {
        if let (true, Some(core)) = (ticket.half_opened, owner.breaker()) {
            changed(observed, core.state_change_to_half_open());
        }
        Permit {
            owner,
            gen: ticket.gen(),
            probe: ticket.probe,
            settled: false,
        }
    }

    /// The ticket the call was admitted with.
    #[inline]
    fn ticket(&self) -> Ticket {
        Ticket::held(self.gen, self.probe)
    }

    /// What the permit reaches its breaker through.
    #[inline]
    pub(crate) fn owner(&self) -> &O {
        &self.owner
    }

    /// Records the call's error; its answer is [`answered`](Permit::answered). A
    /// call that ended before it sent anything (refused by a layer inside, or out of
    /// time before its first attempt) says nothing of the origin: it counts neither
    /// way, and a probe's slot goes back, as for a dropped call. Only the first
    /// outcome counts.
    #[inline]
    pub(crate) fn failed(&mut self, err: &Error, observed: Option<&Observed>) {
        if err.sent_nothing() {
            self.release();
        } else {
            self.complete(Outcome::Error(err.kind()), Some(err), observed);
        }
    }

    /// Records the call's final answer (unless an outcome was recorded already).
    #[inline]
    pub(crate) fn answered<RB>(&mut self, res: &Response<RB>, observed: Option<&Observed>) {
        let outcome = Outcome::Response {
            status: res.status(),
            headers: res.headers(),
        };
        self.complete(outcome, None, observed)
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
        observed: Option<&Observed>,
    ) {
        let Some(core) = self.owner.breaker().filter(|_| !self.settled) else {
            return;
        };
        let failed = core.config.fails(outcome, error);
        self.settled = true;
        if let Some(change) = core.record(self.ticket(), failed) {
            changed(observed, change);
        }
    }

    /// Gives a probe's slot back, as for a call that was never sent, unless an
    /// outcome was recorded.
    fn release(&mut self) {
        if let Some(core) = self.owner.breaker().filter(|_| !self.settled) {
            core.release(self.ticket());
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

/// A call the breaker refuses: traced, told to the call's observer, and answered
/// with an error that says when the next probe is due.
#[cold]
pub(crate) fn refusal<B>(req: &Request<B>, origin: &str, next_probe_at: Option<Instant>) -> Error {
    tracing::debug!(
        origin,
        state = if next_probe_at.is_some() {
            "open"
        } else {
            "half-open"
        },
        next_probe_in_ms =
            next_probe_at.map(|at| at.saturating_duration_since(Instant::now()).as_millis() as u64),
        "call refused: circuit open"
    );
    if let Some(observed) = Observed::of(req) {
        observed.tell(|call| {
            Event::CallRefused(CallRefused {
                call,
                refusal: Refusal::CircuitOpen { next_probe_at },
            })
        });
    }
    Error::refused(
        StopReason::CircuitOpen,
        Box::new(CircuitOpen::new(next_probe_at)),
        next_probe_at,
    )
}
