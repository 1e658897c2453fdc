//! A body read straight through: one reader, no shared chunks, no lock per frame.
//!
//! A body with nothing to keep (one-shot, or a cap of 0) does not need the shared
//! chunks, the fan-out waker or a lock per frame. Its one reader owns the original and polls it with the caller's own
//! waker, and keeps only what `replayable` and the progress record need to answer
//! exactly as the shared path would.
//!
//! Two things can still ask for more, both from `&self`:
//!
//! * a replay (`ReplayBody::replay`, or the source of a body that is still
//!   replayable, as under a retry policy with a cap of 0): the original moves into
//!   a shared state, resumed where this reader stands, and this reader becomes a
//!   reader of it at its next poll;
//! * the source of a body that can no longer be replayed (a one-shot body under a
//!   policy that retries): it only needs to answer `replayable`, so it gets a
//!   shared state without the original, whose status this reader updates when the
//!   answer changes (a body error outranks the other reasons) — a lock taken at
//!   most once or twice per body, never per frame.
//!
//! The original sits in a `Mutex` so that a replay can take it from `&self`; the
//! reader itself reaches it through `Mutex::get_mut`, which takes no lock.

use std::fmt;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};

use super::reader::Reader;
use super::shared::{lock_shared, stopped, Failure, ReplayError, Shared};
use super::{mark_complete, report_data};
use crate::policy::{AttemptLog, NotReplayable};
use crate::BoxError;

pub(super) struct Direct<B> {
    /// What a replay from `&self` takes or makes; this reader reaches it through
    /// `Mutex::get_mut`, without a lock.
    slot: Mutex<Slot<B>>,
    /// Bytes pulled from the original.
    pulled_bytes: u64,
    /// A replay moved the original into `slot.link`: answers come from there.
    moved: AtomicBool,
    /// Whether a new reader could replay the whole body.
    status: Result<(), NotReplayable>,
    /// The original failed.
    failed: Option<Failure>,
    /// A non-empty data chunk was pulled (and not kept: nothing is kept here).
    pulled_data: bool,
    /// The original yielded its end, or said it is at its end.
    ended: bool,
    /// Trailers were pulled but not kept.
    trailers_lost: bool,
    /// A call into the original began and never returned: it panicked.
    in_original: bool,
    /// This reader yielded the trailers.
    trailers_done: bool,
    /// This reader yielded its end.
    done: bool,
}

struct Slot<B> {
    /// The original body; `None` once it ended, failed, or moved to `link`.
    original: Option<Pin<Box<B>>>,
    /// The shared state of this body, once a source or a replay asked for one:
    /// before `moved`, only its status is kept up to date (a source of a body
    /// that cannot be replayed needs nothing else); after, it holds the original.
    link: Option<Arc<Mutex<Shared<B>>>>,
}

impl<B> Direct<B> {
    pub(super) fn new(body: B, status: Result<(), NotReplayable>) -> Self
    where
        B: Body,
    {
        // Asked once here, then after each data frame.
        let ended = body.is_end_stream();
        Direct {
            slot: Mutex::new(Slot {
                original: (!ended).then(|| Box::pin(body)),
                link: None,
            }),
            pulled_bytes: 0,
            moved: AtomicBool::new(false),
            status,
            failed: None,
            pulled_data: false,
            ended,
            trailers_lost: false,
            in_original: false,
            trailers_done: false,
            done: false,
        }
    }

    fn lock_slot(&self) -> MutexGuard<'_, Slot<B>> {
        // Poisoned only by the original's `size_hint` panicking; `share` and the
        // next poll see to that.
        self.slot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The shared state, once a replay moved the original there.
    fn moved_to(&self) -> Option<Arc<Mutex<Shared<B>>>> {
        if !self.moved.load(Ordering::Acquire) {
            return None;
        }
        self.lock_slot().link.clone()
    }

    /// The position a reader of the shared state takes for this one.
    fn pos(&self) -> usize {
        usize::from(self.pulled_data)
    }

    fn set_status(&mut self, why: NotReplayable) {
        let status = stopped(self.status, why);
        if status != self.status {
            self.status = status;
            if let Some(link) = &slot_mut(&mut self.slot).link {
                lock_shared(link).status = status;
            }
        }
    }

    fn fail(&mut self, failure: Failure) {
        if self.failed.is_none() {
            self.failed = Some(failure);
        }
        self.set_status(NotReplayable::BodyError);
        if failure == Failure::Error {
            slot_mut(&mut self.slot).original = None;
        }
        // A panicked body is not dropped here (its `Drop` may panic again); it goes
        // with this reader.
    }

    fn finish(&mut self) {
        self.ended = true;
        slot_mut(&mut self.slot).original = None;
    }

    /// The shared state of this body, with the original moved there (unless a
    /// replay moved it already).
    pub(super) fn share(&self) -> Arc<Mutex<Shared<B>>> {
        self.share_with(None)
    }

    fn share_with(&self, trailers: Option<HeaderMap>) -> Arc<Mutex<Shared<B>>> {
        let panicked = self.panicked();
        let mut slot = self.lock_slot();
        let Slot { original, link } = &mut *slot;
        let moved = self.moved.load(Ordering::Acquire);
        let link = link.get_or_insert_with(|| Arc::new(Mutex::new(Shared::lost(self.status))));
        if !moved {
            let mut shared = lock_shared(link);
            // Nothing is kept here, so the position of this reader is all a new
            // one needs: the chunks it would replay are gone either way.
            shared.original = original.take();
            shared.pulled_chunks = self.pos();
            shared.pulled_bytes = self.pulled_bytes;
            shared.trailers = trailers;
            shared.trailers_lost = self.trailers_lost;
            shared.ended = self.ended;
            shared.failed = self.failed;
            shared.status = self.status;
            if panicked {
                shared.fail(Failure::Panicked);
            }
            self.moved.store(true, Ordering::Release);
        }
        Arc::clone(link)
    }

    /// The shared state of this body, holding only whether it can be replayed:
    /// for the source of a body that cannot be replayed any more.
    pub(super) fn watch(&self) -> Arc<Mutex<Shared<B>>> {
        let status = self.status_now();
        let mut slot = self.lock_slot();
        Arc::clone(
            slot.link
                .get_or_insert_with(|| Arc::new(Mutex::new(Shared::lost(status)))),
        )
    }

    /// This reader as a reader of the shared state, once a replay moved the
    /// original there.
    pub(super) fn take_moved(&mut self) -> Option<Reader<B>> {
        if !*self.moved.get_mut() {
            return None;
        }
        let pos = self.pos();
        let shared = slot_mut(&mut self.slot).link.take()?;
        // A body read straight through is a call's first reader: the first attempt.
        Some(Reader::resume(
            shared,
            0,
            pos,
            self.pulled_bytes,
            self.trailers_done,
            self.done,
        ))
    }

    /// The original panicked in a call that did not return, and no poll saw to
    /// it yet.
    fn panicked(&self) -> bool {
        self.in_original || self.slot.is_poisoned()
    }

    /// `status`, with a panic no poll saw yet counted in.
    fn status_now(&self) -> Result<(), NotReplayable> {
        if self.panicked() {
            stopped(self.status, NotReplayable::BodyError)
        } else {
            self.status
        }
    }

    pub(super) fn replayable(&self) -> Result<(), NotReplayable> {
        match self.moved_to() {
            Some(shared) => lock_shared(&shared).status,
            None => self.status_now(),
        }
    }

    pub(super) fn is_fully_kept(&self) -> bool {
        match self.moved_to() {
            Some(shared) => lock_shared(&shared).is_fully_kept(),
            None => self.ended && self.status_now().is_ok(),
        }
    }

    #[cfg(test)]
    pub(super) fn has_moved(&self) -> bool {
        self.moved.load(Ordering::Acquire)
    }
}

fn slot_mut<B>(slot: &mut Mutex<Slot<B>>) -> &mut Slot<B> {
    slot.get_mut()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl<B> Direct<B>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    pub(super) fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
        progress: Option<&AttemptLog>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.done {
            return Poll::Ready(None);
        }
        if self.slot.is_poisoned() {
            // The original's `size_hint` panicked.
            self.slot.clear_poison();
            self.in_original = true;
        }
        if self.in_original {
            // The original panicked in our last call into it: it is in an unknown
            // state, so stop using it.
            self.in_original = false;
            self.fail(Failure::Panicked);
        }
        if self.ended {
            self.done = true;
            mark_complete(progress);
            return Poll::Ready(None);
        }
        if let Some(failure) = self.failed {
            return Poll::Ready(Some(Err(ReplayError::from(failure).into())));
        }
        let Some(original) = slot_mut(&mut self.slot).original.as_mut() else {
            // Not reachable: an original neither ended nor failed is present.
            // Treat it as ended rather than panic.
            self.finish();
            self.done = true;
            mark_complete(progress);
            return Poll::Ready(None);
        };
        self.in_original = true;
        let polled = original.as_mut().poll_frame(cx);
        self.in_original = false;
        let polled = match polled {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(polled) => polled,
        };
        match polled {
            None => {
                self.finish();
                self.done = true;
                mark_complete(progress);
                Poll::Ready(None)
            }
            Some(Err(err)) => {
                self.fail(Failure::Error);
                Poll::Ready(Some(Err(err.into())))
            }
            Some(Ok(frame)) => {
                self.in_original = true;
                let frame = frame.map_data(|mut data| data.copy_to_bytes(data.remaining()));
                self.in_original = false;
                match frame.into_data() {
                    Ok(chunk) => {
                        if !chunk.is_empty() {
                            self.pulled_data = true;
                            self.pulled_bytes =
                                self.pulled_bytes.saturating_add(chunk.len() as u64);
                            // Nothing is kept here: a data byte is past the cap.
                            self.set_status(NotReplayable::CapExceeded);
                        }
                        let at_end = self.check_original_end();
                        report_data(progress, &chunk, at_end);
                        Poll::Ready(Some(Ok(Frame::data(chunk))))
                    }
                    Err(frame) => match frame.into_trailers() {
                        Ok(trailers) => {
                            self.finish();
                            self.trailers_done = true;
                            self.done = true;
                            if self.status.is_ok() {
                                // A body of no data bytes and trailers is still
                                // replayable (rare): the shared state keeps them.
                                self.share_with(Some(trailers.clone()));
                            } else {
                                self.trailers_lost = true;
                            }
                            mark_complete(progress);
                            Poll::Ready(Some(Ok(Frame::trailers(trailers))))
                        }
                        // A kind of frame http-body does not have today: pass it on.
                        Err(frame) => Poll::Ready(Some(Ok(frame))),
                    },
                }
            }
        }
    }

    /// Marks the original ended if it says it is at its end; whether it is.
    fn check_original_end(&mut self) -> bool {
        let slot = slot_mut(&mut self.slot);
        if let Some(original) = &slot.original {
            self.in_original = true;
            let end = original.is_end_stream();
            self.in_original = false;
            if end {
                self.finish();
            }
        }
        self.ended
    }

    pub(super) fn is_end_stream(&self) -> bool {
        if self.done {
            return true;
        }
        match self.moved_to() {
            Some(shared) => lock_shared(&shared).at_end(self.pos(), self.trailers_done),
            // Asked of the original after each data frame: between polls the
            // answer only errs on the side of `false`, which the trait allows.
            None => self.ended && !self.panicked(),
        }
    }

    pub(super) fn size_hint(&self) -> SizeHint {
        if self.done {
            return SizeHint::with_exact(0);
        }
        let slot = self.lock_slot();
        let moved = self.moved.load(Ordering::Acquire);
        if let Some(shared) = slot.link.as_ref().filter(|_| moved) {
            return lock_shared(shared).remaining_hint(self.pulled_bytes);
        }
        if self.ended {
            return SizeHint::with_exact(0);
        }
        if self.panicked() {
            return SizeHint::new();
        }
        match (&slot.original, self.failed) {
            (Some(original), None) => original.size_hint(),
            _ => SizeHint::new(),
        }
    }
}

impl<B> Drop for Direct<B> {
    fn drop(&mut self) {
        // A reader dropped while its original's panic unwinds: a source watching
        // this body hears of the failure, as it would from the shared state.
        if self.panicked() {
            let status = self.status_now();
            let moved = *self.moved.get_mut();
            if let Some(link) = &slot_mut(&mut self.slot).link {
                if !moved {
                    lock_shared(link).status = status;
                }
            }
        }
    }
}

impl<B> fmt::Debug for Direct<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Direct")
            .field("done", &self.done)
            .field("ended", &self.ended)
            .field("failed", &self.failed)
            .field("replayable", &self.status)
            .field("moved", &self.moved.load(Ordering::Relaxed))
            .finish()
    }
}
