//! The replay body: the request body wrapper that lets a retry send the same bytes
//! again without buffering the whole body before the first attempt.
//!
//! The retry layer wraps the caller's body once per call with `ReplayBody::new` and
//! hands the transport one *reader* per attempt (`ReplayBody::replay` makes a new
//! one). All readers of a call share one state behind an `Arc<Mutex<..>>`
//! (`shared.rs`):
//!
//! * the original body (pinned on the heap, so a `!Unpin` body works), polled by
//!   whichever reader is at the front;
//! * the data chunks pulled from it so far, kept as reference-counted [`Bytes`]
//!   (zero-copy when the original already yields `Bytes`) until the replay cap is
//!   crossed (the chunk that crosses it included), and its trailers;
//! * whether the original ended or failed, and whether the body can still be
//!   replayed ([`NotReplayable`] says why not).
//!
//! A reader (`reader.rs`) is a position in that shared sequence. Behind the front it
//! yields kept chunks; at the front it polls the original, appends what it pulled to
//! the shared chunks and yields it. A chunk pulled while the kept bytes are under the
//! cap is kept whole, even one that takes them past the cap (the `Bytes` yielded is
//! the one kept: no copy); pulling the next chunk after that reads the body past the
//! cap (`Shared::record_chunk`, the one place that decides). Then the kept chunks are
//! dropped and data only passes through to the reader that pulled it; a reader that
//! is behind by then gets an error frame rather than wrong data, and nothing ever
//! panics.
//!
//! Whether the body can be sent again is a fact about what was read of it, never
//! about its size hint: a body larger than the cap that no reader polled is whole,
//! and one read no further than the cap is replayed from the kept chunks, then from
//! the untouched rest of the original. Readers belong to an *attempt*: a hedged
//! copy reads beside the reader it was made from (`ReplayBody::replay`), while a
//! retry's reader (`ReplaySource::replay`) takes the original over, checking in the
//! same step that nothing was read past the cap. A reader of an earlier attempt,
//! which its transport may drop late, may still yield what is kept, but at the
//! front it gets an error frame instead of pulling: the rest of the original is
//! read once, by the latest attempt, and that attempt's bytes are never sent twice
//! nor skipped.
//!
//! Readers waiting on the original share a fan-out waker (`waker.rs`), so when two
//! readers poll at once (a stale attempt still writing while a new one starts)
//! neither is left without a wake-up. A reader registers only when it returns
//! `Pending`, and wakes the others only when it pulled something.
//!
//! Two kinds of body skip the shared state:
//!
//! * a body that is already at its end (the usual `GET`) takes an allocation-free
//!   path: no `Arc`, no `Mutex`, no `Box`;
//! * a body with nothing to keep (one-shot, or a cap of 0) is read straight
//!   through (`direct.rs`): no shared chunks, no fan-out waker, no lock per frame.
//!   It moves into a shared state only if a replay is asked for while it could
//!   still succeed (a cap of 0 replays a body nothing has read).

use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Mutex, TryLockError};
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http_body::{Body, Frame, SizeHint};

use crate::policy::error::BoxError;
use crate::policy::{AttemptLog, NotReplayable};

mod direct;
mod reader;
mod shared;
mod waker;

#[cfg(test)]
mod tests;

use direct::Direct;
use reader::Reader;
use shared::{lock_shared, Shared};

/// Marks a request as one whose body must never be sent twice.
///
/// Put it in the request's extensions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OneShot;

/// The body the transport receives: one reader of a request body that the retry
/// layer can send again.
///
/// The retry layer wraps the caller's body `B` in a `ReplayBody<B>` and sends each
/// attempt with its own reader. The first reader streams the original body straight
/// through while keeping the chunks it passed on (up to the configured cap); a later
/// reader replays the kept chunks, then continues the original body where it stands.
/// A chunk pulled while the kept bytes are under the cap is kept whole, even one that
/// takes them past the cap: it is already in memory, and the `Bytes` yielded is the one
/// kept (a reference count, no copy). Only pulling the next chunk after the cap was
/// crossed reads the body past the cap, so at most the cap plus the one chunk that
/// crosses it is kept, and a body of one chunk (a `Full` body), read whole, is kept
/// whole whatever its size. A cap of 0 keeps nothing.
///
/// Because the inner service receives `Request<ReplayBody<B>>`, a hyper-util client
/// under the retry layer is declared with this body type: for a caller that sends
/// `Request<Full<Bytes>>`, the client is a
/// `hyper_util::client::legacy::Client<HttpConnector, ReplayBody<Full<Bytes>>>`,
/// built as usual with `Client::builder(TokioExecutor::new()).build_http()`. The
/// type is `Send` and `Sync` whenever `B` is `Send`, and it is always `Unpin`, so it
/// meets hyper's body requirements for any `B: Body + Send + 'static` whose error
/// converts into [`BoxError`].
///
/// Its [`size_hint`](Body::size_hint) is exact whenever the original's is (so hyper
/// sets `content-length` the same way on every attempt), and exact once the whole body
/// is kept.
pub struct ReplayBody<B> {
    repr: Repr<B>,
    progress: Option<AttemptLog>,
}

/// Boxed, so that a replay body is no larger than the bodies it stands for (three
/// words, where `Full<Bytes>` has four): hyper moves the request it sends many times
/// on its way to the wire, and a request over 256 bytes costs it more on each move
/// (about 650 instructions a call over HTTP/2, measured with the loopback bench).
/// An empty body, the usual `GET`, has nothing to box.
enum Repr<B> {
    /// The body was already at its end: nothing to keep, nothing to share.
    Empty,
    /// The one reader of a body read straight through.
    Direct(Box<Direct<B>>),
    /// A reader of a shared, non-empty body.
    Shared(Box<Reader<B>>),
}

impl<B> Repr<B> {
    fn direct(direct: Direct<B>) -> Self {
        Repr::Direct(Box::new(direct))
    }

    fn shared(reader: Reader<B>) -> Self {
        Repr::Shared(Box::new(reader))
    }
}

/// Reports a data frame into the attempt's progress record; `at_end` says the body
/// has nothing left after it.
fn report_data(progress: Option<&AttemptLog>, chunk: &Bytes, at_end: bool) {
    if let Some(progress) = progress {
        progress.add_body_bytes(chunk.len() as u64);
        if at_end {
            // hyper stops polling once `is_end_stream` says so after a data frame,
            // so the last data frame is where the body is known to be complete.
            progress.mark_body_complete();
        }
    }
}

/// Reports the end of the body into the attempt's progress record.
fn mark_complete(progress: Option<&AttemptLog>) {
    if let Some(progress) = progress {
        progress.mark_body_complete();
    }
}

impl<B> ReplayBody<B>
where
    B: Body,
    B::Data: Buf,
    B::Error: Into<BoxError>,
{
    /// The first reader of `body`, keeping up to `cap` bytes for replays.
    #[inline(always)]
    pub(crate) fn new(body: B, cap: usize) -> Self {
        // The usual `GET`'s empty body is settled where the call starts.
        if body.is_end_stream() {
            return ReplayBody::from_repr(Repr::Empty);
        }
        ReplayBody::with_bytes(body, cap)
    }

    /// [`new`](ReplayBody::new) for a body that may have bytes.
    ///
    /// Its size hint decides nothing: a body over the cap is still whole until
    /// an attempt reads it, and replayable until one reads past the cap.
    fn with_bytes(body: B, cap: usize) -> Self {
        // With nothing to keep, the body is read straight through.
        if cap == 0 {
            return ReplayBody::from_repr(Repr::direct(Direct::new(body, Ok(()))));
        }
        let shared = Shared::new(Some(Box::pin(body)), cap, Ok(()));
        ReplayBody::from_repr(Repr::shared(Reader::new(Arc::new(Mutex::new(shared)), 0)))
    }

    /// A reader of `body` that keeps nothing.
    pub(crate) fn one_shot(body: B) -> Self {
        ReplayBody::from_repr(Repr::direct(Direct::new(body, Err(NotReplayable::OneShot))))
    }

    /// A new reader from the first byte, sharing this body's state and reading
    /// beside this one, in the same attempt (a hedged copy); its progress handle
    /// is unset.
    pub(crate) fn replay(&self) -> Self {
        ReplayBody::from_repr(match &self.repr {
            Repr::Empty => Repr::Empty,
            // Asked for a replay, the body moves into a shared state, whatever it
            // can still replay.
            Repr::Direct(direct) => Repr::shared(Reader::new(direct.share(), 0)),
            Repr::Shared(reader) => {
                Repr::shared(Reader::new(Arc::clone(&reader.shared), reader.attempt))
            }
        })
    }

    /// A handle that makes new readers of this body later, from the first byte.
    #[inline]
    pub(crate) fn source(&self) -> ReplaySource<B> {
        ReplaySource(match &self.repr {
            Repr::Empty => None,
            Repr::Shared(reader) => Some(Arc::clone(&reader.shared)),
            // A body that can never be replayed again needs only its answer; one
            // that still can needs the original.
            Repr::Direct(direct) => Some(match direct.replayable() {
                Ok(()) => direct.share(),
                Err(_) => direct.watch(),
            }),
        })
    }

    /// The first reader of `body` through the shared state whatever the cap: what
    /// the direct path is compared with.
    #[cfg(test)]
    fn through_shared(body: B, cap: usize, status: Result<(), NotReplayable>) -> Self {
        let shared = Shared::new(Some(Box::pin(body)), cap, status);
        ReplayBody::from_repr(Repr::shared(Reader::new(Arc::new(Mutex::new(shared)), 0)))
    }

    /// Sets the progress record this reader reports its body bytes into.
    pub(crate) fn set_progress(&mut self, progress: Option<AttemptLog>) {
        self.progress = progress;
    }
}

/// Where a call's later readers of its body come from: the shared state, or
/// nothing for an empty body. It is smaller than a reader, which the retry layer's
/// response future carries through every attempt.
pub(crate) struct ReplaySource<B>(Option<Arc<Mutex<Shared<B>>>>);

impl<B> ReplaySource<B> {
    /// The reader of a new attempt, from the first byte, when it can replay the
    /// whole body; its progress handle is unset.
    ///
    /// The new attempt takes the original over: a reader of an earlier attempt
    /// (which its transport may drop late) pulls nothing more from it, so the
    /// rest of the body is read once, by this attempt. Whether the body can be
    /// replayed is checked in the same step, so no earlier reader can read past
    /// the cap in between.
    ///
    /// # Errors
    ///
    /// Why the body cannot be sent again (see [`ReplayBody::replayable`]); then no
    /// attempt takes it over.
    pub(crate) fn replay(&self) -> Result<ReplayBody<B>, NotReplayable> {
        Ok(ReplayBody::from_repr(match &self.0 {
            None => Repr::Empty,
            Some(shared) => {
                let attempt = lock_shared(shared).take_over()?;
                Repr::shared(Reader::new(Arc::clone(shared), attempt))
            }
        }))
    }

    /// Whether a new reader could replay the whole body; see
    /// [`ReplayBody::replayable`].
    pub(crate) fn replayable(&self) -> Result<(), NotReplayable> {
        match &self.0 {
            None => Ok(()),
            Some(shared) => lock_shared(shared).status,
        }
    }
}

impl<B> ReplayBody<B> {
    fn from_repr(repr: Repr<B>) -> Self {
        ReplayBody {
            repr,
            progress: None,
        }
    }

    /// Whether a new reader could replay the whole body.
    ///
    /// This is a fact about what has been read of the body, not about its size:
    /// a body nothing has read yet is whole, whatever its size hint says; a body
    /// read no further than the replay cap is replayed from the kept chunks, then
    /// continues from the rest of the original, which no reader has touched. An
    /// empty body is always replayable.
    ///
    /// # Errors
    ///
    /// Says why a new reader could not replay the body: it is one-shot
    /// ([`NotReplayable::OneShot`]), a reader read it past the cap
    /// ([`NotReplayable::CapExceeded`]), or it failed while being read
    /// ([`NotReplayable::BodyError`], which outranks the other reasons).
    pub fn replayable(&self) -> Result<(), NotReplayable> {
        match &self.repr {
            Repr::Empty => Ok(()),
            Repr::Direct(direct) => direct.replayable(),
            Repr::Shared(reader) => lock_shared(&reader.shared).status,
        }
    }

    /// Whether the body is empty, or the original body ended and every chunk and the
    /// trailers are kept, so that several readers can read at once without waiting
    /// on each other.
    pub fn is_fully_kept(&self) -> bool {
        match &self.repr {
            Repr::Empty => true,
            Repr::Direct(direct) => direct.is_fully_kept(),
            Repr::Shared(reader) => lock_shared(&reader.shared).is_fully_kept(),
        }
    }

    #[cfg(test)]
    fn is_empty_repr(&self) -> bool {
        matches!(self.repr, Repr::Empty)
    }

    /// Readers waiting on the original (0 off the shared path).
    #[cfg(test)]
    fn waiting(&self) -> usize {
        match &self.repr {
            Repr::Shared(reader) => lock_shared(&reader.shared).wakers.lock().len(),
            _ => 0,
        }
    }

    /// Read straight through, and not moved into a shared state.
    #[cfg(test)]
    fn is_direct_repr(&self) -> bool {
        matches!(&self.repr, Repr::Direct(d) if !d.has_moved())
    }
}

impl<B> Body for ReplayBody<B>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if let Repr::Direct(direct) = &mut this.repr {
            // A replay moved the original into a shared state: read from there on.
            if let Some(reader) = direct.take_moved() {
                this.repr = Repr::shared(reader);
            }
        }
        match &mut this.repr {
            Repr::Empty => {
                mark_complete(this.progress.as_ref());
                Poll::Ready(None)
            }
            Repr::Direct(direct) => direct.poll_frame(cx, this.progress.as_ref()),
            Repr::Shared(reader) => reader.poll_frame(cx, this.progress.as_ref()),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.repr {
            Repr::Empty => true,
            Repr::Direct(direct) => direct.is_end_stream(),
            Repr::Shared(reader) => reader.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.repr {
            Repr::Empty => SizeHint::with_exact(0),
            Repr::Direct(direct) => direct.size_hint(),
            Repr::Shared(reader) => reader.size_hint(),
        }
    }
}

impl<B> fmt::Debug for ReplayBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("ReplayBody");
        match &self.repr {
            Repr::Empty => {
                d.field("empty", &true);
            }
            Repr::Direct(direct) => {
                d.field("direct", direct);
            }
            Repr::Shared(reader) => {
                d.field("position", &reader.pos)
                    .field("bytes_read", &reader.bytes)
                    .field("done", &reader.done);
                let guard = match reader.shared.try_lock() {
                    Ok(guard) => Some(guard),
                    Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
                    Err(TryLockError::WouldBlock) => None,
                };
                match guard {
                    Some(shared) => {
                        d.field("pulled_chunks", &shared.pulled_chunks)
                            .field("pulled_bytes", &shared.pulled_bytes)
                            .field("kept_bytes", &shared.kept_bytes)
                            .field("cap", &shared.cap)
                            .field("ended", &shared.ended)
                            .field("failed", &shared.failed)
                            .field("replayable", &shared.status);
                    }
                    None => {
                        d.field("shared", &format_args!("<locked>"));
                    }
                }
            }
        }
        d.field("progress", &self.progress.is_some()).finish()
    }
}
