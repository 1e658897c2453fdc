//! A call whose origin is paused: where its first attempt waits, and which layer
//! holds it.
//!
//! A hold ends by the call's deadline: the request's [`Deadline`], or the retry
//! policy's total timeout from the call's date, whichever is earlier. Only the
//! retry layer knows that timeout (its route chose the policy), so the stack's
//! retry layer holds its calls itself, and a `BudgetLayer` above a `RetryLayer`
//! hands each held call down to it: the budget layer leaves the hold in the
//! call's extensions (a [`Note`] carrying a [`Deferred`] hold), calls its inner
//! service at once, and the retry layer beneath meets the hold exactly as the stack
//! does: one bound in both shapes.
//!
//! A budget layer's service learns from the first call it sends whether a retry
//! layer is beneath it ([`Beneath`]): that call carries a note, which a retry layer
//! beneath takes (and a transport drops untaken). Until it knows one is (and over
//! a transport), the budget layer holds the call itself before calling its inner
//! service, bounded by the call's `Deadline`, and the call asks again as it goes,
//! carrying the rest of the hold (the pause over, the deadline left): a retry
//! layer beneath meets it, its timeout counted from the call's date, so a call
//! whose timeout ended in the hold is refused there, unsent and uncounted. A hold handed
//! down that nobody beneath took by the time the inner service's `call` returned
//! (a router that sent the call another way, a layer between that calls the retry
//! layer later, such as tower's `Buffer`) is held by the budget layer itself,
//! before it polls its inner service's future; a retry layer that takes the note
//! later claims the hold and wakes the budget layer, which stops holding, so the
//! retry layer bounds the call as the stack does. Whoever claims the hold counts
//! the call, once, and only a call that goes.
//!
//! [`Deadline`]: crate::policy::Deadline

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::task::AtomicWaker;
use http::Request;
use tokio::time::Instant;

use super::budget::{Account, Hold};
use super::{Admitted, Pass};
use crate::observe::Observed;
use crate::policy::error::Error;
use crate::policy::{call_deadline, CallContext, Pause};

/// A held call's wait for its share of the end of its origin's pause.
pub(crate) struct Paused {
    account: Arc<Account>,
    hold: Hold,
    /// The call's observer as the hold was met, told of its end when the layer
    /// holding the call keeps no record of the call of its own (a hold handed
    /// down by a budget layer).
    observed: Option<Arc<Observed>>,
    /// Whether the call counts as a first attempt here when it goes (not when the
    /// budget layer above that handed the hold down counts it itself).
    counts: bool,
}

impl Paused {
    /// Notes in the call's context how long it was held since admission dated it
    /// `at`, as its hold ends: the retry layer's history of the call tells it.
    pub(crate) fn note_hold(extensions: &mut http::Extensions, at: Instant) {
        CallContext::of_mut(extensions).set_held(at.elapsed());
    }

    /// The rest of this hold, as the call is released, to hand down to a retry
    /// layer beneath (the budget layer's own hold, over): the pause is over, and
    /// the call's deadline, from its date `dated`, still bounds it.
    pub(crate) fn released(&self, dated: Instant) -> Deferred {
        Deferred {
            account: self.account.clone(),
            pause: Pause::new(Instant::now()),
            dated,
            deadline: self.hold.deadline(),
            observed: None,
        }
    }

    /// Counts the held call, dated `at`, as a first attempt: it goes (unless
    /// another layer counts it).
    pub(crate) fn deposit_at(&self, at: Instant) {
        if self.counts {
            self.account.deposit_at(at);
        }
    }

    /// Counts the call, dated `at`, as a first attempt as the layer holding it
    /// sends it, unless a retry layer beneath claimed the hold of `note` (which
    /// counts it only if it goes).
    pub(crate) fn deposit_unless_claimed(&self, at: Instant, note: Option<&Note>) {
        if note.is_none_or(Note::claim) {
            self.deposit_at(at);
        }
    }

    /// Waits out the hold: ready when the first attempt may go, or with the error
    /// that refuses the call (see [`Hold::poll`]). `observed` is the call's
    /// record, when the layer holding it keeps one.
    pub(crate) fn poll(
        &mut self,
        cx: &mut Context<'_>,
        observed: Option<&Observed>,
    ) -> Poll<Result<(), Error>> {
        let observed = observed.or(self.observed.as_deref());
        self.hold.poll(cx, &self.account, observed)
    }
}

/// The hold of a call whose origin is paused: what meeting the pause needs,
/// besides the retry policy's timeout. Met where admission ran (the stack's retry
/// layer, a budget layer that holds the call itself), or handed down by a budget
/// layer to the retry layer beneath it.
pub(crate) struct Deferred {
    pub(super) account: Arc<Account>,
    pub(super) pause: Pause,
    /// When admission dated the call: the total timeout counts from here.
    pub(super) dated: Instant,
    /// The request's own deadline, if it has one.
    pub(super) deadline: Option<Instant>,
    pub(super) observed: Option<Arc<Observed>>,
}

impl Deferred {
    /// When admission dated the call.
    pub(crate) fn dated(&self) -> Instant {
        self.dated
    }

    /// Meets the pause now for the call `admitted`, whose retry policy's total
    /// timeout is `timeout`: the call dated as admission dated it, with its wait;
    /// or what it holds, with the error that refuses it.
    #[cold]
    #[inline(never)]
    pub(crate) fn meet_for(
        &self,
        admitted: Admitted,
        timeout: Option<Duration>,
        counts: bool,
        tells: bool,
    ) -> Result<(Admitted, Paused), (Pass, Error)> {
        match self.meet(timeout, counts, tells) {
            Ok(paused) => {
                let at = Some(self.dated);
                Ok((Admitted { at, ..admitted }, paused))
            }
            Err(error) => Err((admitted.pass, error)),
        }
    }

    /// Meets the pause now for a call whose policy's total timeout is `timeout`
    /// (`None` for the budget layer, which knows no policy): the call's wait,
    /// which `counts` it as a first attempt when it goes, or the error that
    /// refuses it. It `tells` the call's observer, unless the budget layer above
    /// meets the same hold too and told it already (each decision is told once).
    pub(crate) fn meet(
        &self,
        timeout: Option<Duration>,
        counts: bool,
        tells: bool,
    ) -> Result<Paused, Error> {
        let deadline = call_deadline(self.deadline, timeout, self.dated);
        let observed = self.observed.as_ref().filter(|_| tells);
        let hold = Hold::meet(
            self.pause,
            Instant::now(),
            deadline,
            &self.account,
            observed.map(|o| &**o),
        )?;
        Ok(Paused {
            account: self.account.clone(),
            hold,
            observed: observed.cloned(),
            counts,
        })
    }
}

/// What a budget layer leaves in a call's extensions for the retry layer beneath:
/// a question (is a retry layer there?), and a hold to meet when the call's origin
/// is paused. (Its own extension rather than a part of the call's context: a call
/// carries one only when it asks, and the retry layer looks for it only in a call
/// whose extensions hold more than the context.) The note itself answers: a retry
/// layer that takes it tells the budget layer it is there; a note dropped
/// untaken (the call went to a transport) tells it none is.
///
/// The hold is met by every retry layer that takes the note, so no attempt goes
/// during the pause; the call is counted as a first attempt once, by whoever
/// claims the note first: the retry layer beneath as its `call` runs, or the
/// budget layer when nobody beneath took it by then (it holds the call itself).
pub(crate) struct Note {
    /// What the budget layer that left the note knows of the layers beneath.
    beneath: Option<Beneath>,
    /// The note of a budget layer above, left in the same call before this one:
    /// a retry layer beneath takes both (and a refusal settles both).
    outer: Option<Arc<Note>>,
    /// Whether the note was taken (by a retry layer, or settled by a refusal).
    seen: AtomicBool,
    /// Whether the hold was claimed: the claimer counts the call.
    claimed: AtomicBool,
    /// Whether the budget layer holds the call itself meanwhile (nobody beneath
    /// had taken the note when its inner service's `call` returned): it told the
    /// call's observer of the hold, so a retry layer that takes the note later
    /// tells nothing more.
    held_above: AtomicBool,
    /// The budget layer holding the call itself, woken when a retry layer
    /// beneath claims the hold after all (it then stops holding).
    waker: AtomicWaker,
    hold: Option<Box<Deferred>>,
}

/// A [`Note`] in a request's extensions.
#[derive(Clone)]
struct Left(Arc<Note>);

impl Note {
    /// Leaves a note in the extensions of `req`, from a budget layer that knows
    /// `beneath`, carrying `hold`; the budget layer keeps the other handle.
    pub(crate) fn leave<B>(
        req: &mut Request<B>,
        beneath: Option<&Beneath>,
        hold: Option<Box<Deferred>>,
    ) -> Arc<Note> {
        let outer = req
            .extensions_mut()
            .remove::<Left>()
            .map(|Left(outer)| outer);
        let note = Arc::new(Note {
            beneath: beneath.cloned(),
            outer,
            seen: AtomicBool::new(false),
            claimed: AtomicBool::new(false),
            held_above: AtomicBool::new(false),
            waker: AtomicWaker::new(),
            hold,
        });
        req.extensions_mut().insert(Left(note.clone()));
        note
    }

    /// Leaves a note in `req`'s extensions that only asks whether a retry layer
    /// is beneath the budget layer that knows `beneath`. Takes the request by
    /// reference: a request passed by value out of line is copied.
    #[cold]
    #[inline(never)]
    pub(crate) fn ask<B>(req: &mut Request<B>, beneath: &Beneath) {
        Note::leave(req, Some(beneath), None);
    }

    /// Whether a budget layer above left a note in `extensions`.
    #[inline]
    pub(crate) fn is_left(extensions: &http::Extensions) -> bool {
        extensions.get::<Left>().is_some()
    }

    /// The retry layer's look: takes the note a budget layer above left in the
    /// call's extensions, if any, and tells that budget layer a retry layer is
    /// beneath it.
    ///
    /// The notes of budget layers further up are taken too: each learns a retry
    /// layer is beneath it. Their holds (of other accounts) stay theirs to claim:
    /// unclaimed, each budget layer holds the call itself.
    #[cold]
    pub(crate) fn take<B>(req: &mut Request<B>) -> Option<Arc<Note>> {
        let Left(note) = req.extensions_mut().remove::<Left>()?;
        for note in note.chain() {
            note.seen.store(true, Ordering::Relaxed);
            if let Some(beneath) = &note.beneath {
                beneath.0.store(RETRY, Ordering::Relaxed);
            }
        }
        Some(note)
    }

    /// This note, then those of the budget layers above it.
    fn chain(&self) -> impl Iterator<Item = &Note> {
        std::iter::successors(Some(self), |note| note.outer.as_deref())
    }

    /// A call a layer beneath the budget layer refused before sending anything:
    /// the note in its extensions, if any, is settled (its hold claimed, so the
    /// budget layer neither holds nor counts the call; and it says nothing of
    /// what is beneath).
    #[cold]
    #[inline(never)]
    pub(crate) fn settle<B>(req: &mut Request<B>) {
        if let Some(Left(note)) = req.extensions_mut().remove::<Left>() {
            note.settle_taken();
        }
    }

    /// [`settle`](Note::settle), for a note already taken.
    pub(crate) fn settle_taken(&self) {
        for note in self.chain() {
            note.seen.store(true, Ordering::Relaxed);
            note.claimed.store(true, Ordering::Relaxed);
        }
    }

    /// The hold the note carries.
    pub(crate) fn hold(&self) -> Option<&Deferred> {
        self.hold.as_deref()
    }

    /// Claims the hold: `true` for the first to claim it, who counts the call.
    /// A budget layer holding the call meanwhile is woken: it stops holding.
    pub(crate) fn claim(&self) -> bool {
        let first = !self.claimed.swap(true, Ordering::AcqRel);
        if first {
            self.waker.wake();
        }
        first
    }

    /// Whether the hold was claimed.
    pub(crate) fn is_claimed(&self) -> bool {
        self.claimed.load(Ordering::Acquire)
    }

    /// Notes that the budget layer holds the call itself meanwhile.
    pub(crate) fn hold_above(&self) {
        self.held_above.store(true, Ordering::Release);
    }

    /// Whether the budget layer holds the call itself (and told the observer).
    pub(crate) fn is_held_above(&self) -> bool {
        self.held_above.load(Ordering::Acquire)
    }

    /// Wakes the budget layer holding the call when the hold is claimed.
    pub(crate) fn register(&self, cx: &Context<'_>) {
        self.waker.register(cx.waker());
    }
}

impl Drop for Note {
    /// A note nobody beneath took: no retry layer is beneath (unless one was
    /// seen before: a router may send calls several ways).
    fn drop(&mut self) {
        if let (false, Some(beneath)) = (*self.seen.get_mut(), &self.beneath) {
            let _ = beneath
                .0
                .compare_exchange(UNKNOWN, NONE, Ordering::Relaxed, Ordering::Relaxed);
        }
    }
}

/// Not known yet: the next call carries a note.
const UNKNOWN: u8 = 0;
/// A retry layer is beneath: holds are handed down.
const RETRY: u8 = 1;
/// None is: the budget layer holds its calls itself.
const NONE: u8 = 2;

/// What a budget layer's service knows of the layers beneath it: whether a retry
/// layer there meets the holds it hands down. Learned from the notes its calls
/// carry (its first call's, and those of the calls it holds itself, which ask
/// again as they go): once a retry layer took one, holds are handed down for good;
/// none is learned only while nothing is known. Shared by the service's clones.
#[derive(Clone, Debug, Default)]
pub(crate) struct Beneath(Arc<AtomicU8>);

impl Beneath {
    /// Whether a held call is handed down to the retry layer beneath: once a
    /// retry layer took a note. (Before, the budget layer holds the call itself,
    /// before calling its inner service, and the call asks as it goes.)
    #[inline]
    pub(crate) fn hands_down(&self) -> bool {
        self.0.load(Ordering::Relaxed) == RETRY
    }

    /// Whether the layer knows what is beneath it.
    #[inline]
    pub(crate) fn known(&self) -> bool {
        self.0.load(Ordering::Relaxed) != UNKNOWN
    }
}
