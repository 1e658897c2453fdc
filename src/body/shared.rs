//! The state every reader of a replayed body shares, and why a reader may fail.
//!
//! One `Shared` per call, behind an `Arc<Mutex<..>>`: the original body, the data
//! chunks pulled from it and kept (while the cap is not crossed), its
//! trailers, whether it ended or failed, and whether a new reader could still
//! replay the whole body.
//!
//! A chunk pulled from the original while the kept bytes are under the cap is kept
//! whole, even when it takes them past the cap ([`Shared::record_chunk`]): it is
//! already in memory, and the `Bytes` kept is the one yielded. Only pulling the
//! next chunk after the cap was crossed reads the body past the cap, so at most the
//! cap plus the one chunk that crosses it is kept.

use std::error::Error as StdError;
use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, SizeHint};

use super::waker::WakerSet;
use crate::policy::NotReplayable;

/// Why the original body can no longer be polled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Failure {
    /// It returned an error.
    Error,
    /// It panicked while it was being used.
    Panicked,
}

/// The error a reader yields when it cannot yield the right data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ReplayError {
    /// The data this reader needs was passed on but not kept.
    NotKept,
    /// The original body failed earlier (its error went to the reader that met it).
    BodyFailed,
    /// The original body panicked earlier.
    BodyPanicked,
    /// A later attempt took the original over: this reader's attempt is over.
    Superseded,
}

impl fmt::Display for ReplayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ReplayError::NotKept => "replay body: data no longer kept",
            ReplayError::BodyFailed => "replay body: the original body failed",
            ReplayError::BodyPanicked => "replay body: the original body panicked",
            ReplayError::Superseded => "replay body: a later attempt took the body over",
        })
    }
}

impl StdError for ReplayError {}

impl From<Failure> for ReplayError {
    fn from(f: Failure) -> Self {
        match f {
            Failure::Error => ReplayError::BodyFailed,
            Failure::Panicked => ReplayError::BodyPanicked,
        }
    }
}

/// The status after `why` stops keeping: a body error outranks the other reasons.
pub(super) fn stopped(
    status: Result<(), NotReplayable>,
    why: NotReplayable,
) -> Result<(), NotReplayable> {
    if status.is_ok() || why == NotReplayable::BodyError {
        Err(why)
    } else {
        status
    }
}

pub(super) struct Shared<B> {
    /// The original body; `None` once it ended or failed.
    pub(super) original: Option<Pin<Box<B>>>,
    /// Replay cap in bytes.
    pub(super) cap: usize,
    /// Kept data chunks; all pulled chunks while `status` is `Ok`, empty otherwise.
    pub(super) chunks: Vec<Bytes>,
    /// Bytes in `chunks`.
    pub(super) kept_bytes: usize,
    /// Non-empty data chunks pulled from the original so far.
    pub(super) pulled_chunks: usize,
    /// Bytes pulled from the original so far.
    pub(super) pulled_bytes: u64,
    /// Trailers pulled from the original, if kept.
    pub(super) trailers: Option<HeaderMap>,
    /// Trailers were pulled but not kept.
    pub(super) trailers_lost: bool,
    /// The original yielded its end (or said it is at its end).
    pub(super) ended: bool,
    /// The original failed.
    pub(super) failed: Option<Failure>,
    /// Whether a new reader could replay the whole body; chunks are kept while `Ok`.
    pub(super) status: Result<(), NotReplayable>,
    /// The attempt whose readers may pull from the original: a new attempt takes
    /// it over ([`take_over`](Shared::take_over)), so a reader of an earlier one
    /// (dropped late by its transport) never pulls the rest of the body away from it.
    pub(super) attempt: u64,
    /// Readers waiting on the original.
    pub(super) wakers: Arc<WakerSet>,
    /// Waker handed to the original: wakes every waiting reader.
    pub(super) fanout: Waker,
    /// Next reader id.
    next_id: u64,
}

/// Locks the shared state; a poisoned lock marks the original failed.
pub(super) fn lock_shared<B>(mutex: &Mutex<Shared<B>>) -> MutexGuard<'_, Shared<B>> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => {
            // Only the original body's own code can panic under this lock (its
            // `poll_frame`, `is_end_stream`, `size_hint`, `Buf` or `Drop`); it is in
            // an unknown state, so stop using it.
            let mut guard = poisoned.into_inner();
            guard.fail(Failure::Panicked);
            mutex.clear_poison();
            guard
        }
    }
}

/// `hint` with `n` bytes more.
fn hint_plus(n: u64, hint: &SizeHint) -> SizeHint {
    let mut out = SizeHint::new();
    out.set_lower(hint.lower().saturating_add(n));
    if let Some(upper) = hint.upper() {
        // Saturating addition keeps `upper >= lower`.
        out.set_upper(upper.saturating_add(n));
    }
    out
}

impl<B> Shared<B> {
    pub(super) fn new(
        original: Option<Pin<Box<B>>>,
        cap: usize,
        status: Result<(), NotReplayable>,
    ) -> Self {
        let wakers = Arc::new(WakerSet::default());
        let fanout = Waker::from(Arc::clone(&wakers));
        Shared {
            original,
            cap,
            chunks: Vec::new(),
            kept_bytes: 0,
            pulled_chunks: 0,
            pulled_bytes: 0,
            trailers: None,
            trailers_lost: false,
            ended: false,
            failed: None,
            status,
            attempt: 0,
            wakers,
            fanout,
            next_id: 0,
        }
    }

    /// The state of a body whose data is gone: every reader of it yields an error.
    pub(super) fn lost(status: Result<(), NotReplayable>) -> Self {
        let mut shared = Shared::new(None, 0, status);
        shared.pulled_chunks = 1;
        shared
    }

    pub(super) fn keeping(&self) -> bool {
        self.status.is_ok()
    }

    pub(super) fn new_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        id
    }

    /// A new attempt takes the original over, when a reader of it could still
    /// replay the whole body: the attempt its readers belong to. Readers of
    /// earlier attempts may still yield what is kept, but pull nothing more from
    /// the original; those waiting on it are woken to hear so.
    ///
    /// Checked and taken under one lock, so that no reader of an earlier attempt
    /// can read past the cap between the check and the new attempt's first byte.
    pub(super) fn take_over(&mut self) -> Result<u64, NotReplayable> {
        self.status?;
        self.attempt = self.attempt.wrapping_add(1);
        self.wakers.wake_all();
        Ok(self.attempt)
    }

    /// Stops keeping chunks (and frees them) for `why`.
    fn stop_keeping(&mut self, why: NotReplayable) {
        self.status = stopped(self.status, why);
        self.chunks = Vec::new();
        self.kept_bytes = 0;
    }

    pub(super) fn fail(&mut self, failure: Failure) {
        if self.failed.is_none() {
            self.failed = Some(failure);
        }
        self.stop_keeping(NotReplayable::BodyError);
        if failure == Failure::Error {
            self.original = None;
        }
        // A panicked body is not dropped here (its `Drop` may panic again); it goes
        // with the last reader.
        self.wakers.wake_all();
    }

    pub(super) fn finish(&mut self) {
        self.ended = true;
        self.original = None;
        self.wakers.wake_all();
    }

    /// Whether the original can be polled.
    fn live(&self) -> bool {
        !self.ended && self.failed.is_none() && self.original.is_some()
    }

    /// Records a non-empty data chunk pulled from the original: the one place that
    /// decides what is kept.
    ///
    /// While chunks are kept, a chunk pulled with the kept bytes under the cap is
    /// kept whole, even one that takes them past the cap (the `Bytes` the reader
    /// yields, a reference count, no copy). A chunk pulled once the kept bytes are
    /// at or past the cap reads the body past the cap: nothing is kept from then
    /// on. So a cap of 0 keeps nothing, and at most the cap plus the one chunk that
    /// crosses it is kept.
    pub(super) fn record_chunk(&mut self, chunk: &Bytes) {
        let n = chunk.len();
        self.pulled_chunks = self.pulled_chunks.saturating_add(1);
        self.pulled_bytes = self.pulled_bytes.saturating_add(n as u64);
        if self.keeping() {
            if self.kept_bytes < self.cap {
                self.kept_bytes = self.kept_bytes.saturating_add(n);
                self.chunks.push(chunk.clone());
            } else {
                self.stop_keeping(NotReplayable::CapExceeded);
            }
        }
    }

    pub(super) fn record_trailers(&mut self, trailers: &HeaderMap) {
        if self.keeping() {
            self.trailers = Some(trailers.clone());
        } else {
            self.trailers_lost = true;
        }
        self.finish();
    }

    pub(super) fn is_fully_kept(&self) -> bool {
        self.ended && self.keeping()
    }
}

impl<B: Body> Shared<B> {
    /// Marks the original ended if it says it is at its end.
    fn check_original_end(&mut self) {
        if self.live() && self.original.as_ref().is_some_and(Body::is_end_stream) {
            self.finish();
        }
    }

    /// Whether a reader at `pos` that has (`trailers_done`) or has not yielded the
    /// trailers has nothing left to yield.
    pub(super) fn at_end(&mut self, pos: usize, trailers_done: bool) -> bool {
        if pos < self.pulled_chunks {
            return false;
        }
        self.check_original_end();
        if self.ended {
            trailers_done || (self.trailers.is_none() && !self.trailers_lost)
        } else {
            false
        }
    }

    /// The size hint of what a reader that has yielded `yielded` bytes has left:
    /// the pulled bytes it has not yielded, then the original's.
    pub(super) fn remaining_hint(&self, yielded: u64) -> SizeHint {
        let behind = self.pulled_bytes.saturating_sub(yielded);
        if self.ended {
            return SizeHint::with_exact(behind);
        }
        match (&self.original, self.failed) {
            (Some(original), None) => hint_plus(behind, &original.size_hint()),
            _ => hint_plus(behind, &SizeHint::new()),
        }
    }
}
