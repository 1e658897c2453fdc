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
//! does. One bound, in every shape.
//!
//! A budget layer learns from the first call it sends whether a retry layer is
//! beneath it ([`Beneath`]): that call carries a note, which a retry layer beneath
//! takes (and a transport drops untaken). With
//! none beneath (a budget layer over a transport), the budget layer holds the call
//! itself before calling its inner service, bounded by the call's `Deadline`, and
//! the call asks again as it goes. A hold handed down that nobody beneath took
//! (the layer's first call, or a router that sent the call another way) is held
//! by the budget layer after all, before it polls its inner service's future.
//!
//! [`Deadline`]: crate::policy::Deadline

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

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
    /// The observer of a hold handed down by a budget layer (the layer that holds
    /// it has no record of the call of its own).
    observed: Option<Arc<Observed>>,
}

impl Paused {
    /// The wait of a call held by the admission that admitted it.
    pub(crate) fn new(account: Arc<Account>, hold: Hold) -> Self {
        Paused {
            account,
            hold,
            observed: None,
        }
    }

    /// Notes in the call's context how long it was held since admission dated it
    /// `at`, as its hold ends: the retry layer's history of the call tells it.
    pub(crate) fn note_hold(extensions: &mut http::Extensions, at: Instant) {
        CallContext::of_mut(extensions).set_held(at.elapsed());
    }

    /// Counts the held call, dated `at`, as a first attempt: it goes.
    pub(crate) fn deposit_at(&self, at: Instant) {
        self.account.deposit_at(at);
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

/// A hold a budget layer hands down to the retry layer beneath it: what meeting
/// the pause needs, besides the retry policy's timeout.
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
    ) -> Result<(Admitted, Paused), (Pass, Error)> {
        match self.meet(timeout) {
            Ok(paused) => {
                let at = Some(self.dated);
                Ok((Admitted { at, ..admitted }, paused))
            }
            Err(error) => Err((admitted.pass, error)),
        }
    }

    /// Meets the pause now for a call whose policy's total timeout is `timeout`
    /// (`None` for the budget layer, which knows no policy): the call's wait, or
    /// the error that refuses it.
    pub(crate) fn meet(&self, timeout: Option<Duration>) -> Result<Paused, Error> {
        let deadline = call_deadline(self.deadline, timeout, self.dated);
        let observed = self.observed.as_deref();
        let hold = Hold::meet(
            self.pause,
            Instant::now(),
            deadline,
            &self.account,
            observed,
        )?;
        Ok(Paused {
            account: self.account.clone(),
            hold,
            observed: self.observed.clone(),
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
pub(crate) struct Note {
    /// What the budget layer that left the note knows of the layers beneath.
    beneath: Option<Beneath>,
    /// Whether a retry layer beneath took the note.
    seen: AtomicBool,
    /// The hold, until the retry layer beneath (or the budget layer, after all)
    /// takes it.
    hold: Mutex<Option<Box<Deferred>>>,
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
        let note = Arc::new(Note {
            beneath: beneath.cloned(),
            seen: AtomicBool::new(false),
            hold: Mutex::new(hold),
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
    #[cold]
    pub(crate) fn take<B>(req: &mut Request<B>) -> Option<Arc<Note>> {
        let Left(note) = req.extensions_mut().remove::<Left>()?;
        note.seen.store(true, Ordering::Relaxed);
        if let Some(beneath) = &note.beneath {
            beneath.0.store(RETRY, Ordering::Relaxed);
        }
        Some(note)
    }

    /// Takes the hold the note carries, unless it was taken already.
    pub(crate) fn claim(&self) -> Option<Box<Deferred>> {
        self.hold
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
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

/// What a budget layer knows of the layers beneath it: whether a retry layer
/// there meets the holds it hands down. Learned from the notes its calls carry
/// (its first call's, and those of the calls it holds itself, which ask again as
/// they go): once a retry layer took one, holds are handed down for good; none is
/// learned only while nothing is known. Shared by the services the layer builds.
#[derive(Clone, Debug, Default)]
pub(crate) struct Beneath(Arc<AtomicU8>);

impl Beneath {
    /// Whether a held call is handed down to the retry layer beneath: unless
    /// the layer knows none is there. (Before it knows, the call handed down
    /// asks; if nobody takes the hold, the budget layer holds the call after all.)
    #[inline]
    pub(crate) fn hands_down(&self) -> bool {
        self.0.load(Ordering::Relaxed) != NONE
    }

    /// Whether the layer knows what is beneath it.
    #[inline]
    pub(crate) fn known(&self) -> bool {
        self.0.load(Ordering::Relaxed) != UNKNOWN
    }
}
