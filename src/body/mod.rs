//! The replay body: the request body wrapper that lets a retry send the same bytes
//! again without buffering the whole body before the first attempt.
//!
//! The retry layer wraps the caller's body once per call with `ReplayBody::new` and
//! hands the transport one *reader* per attempt (`ReplayBody::replay` makes a new
//! one). All readers of a call share one state behind an `Arc<Mutex<..>>`:
//!
//! * the original body (pinned on the heap, so a `!Unpin` body works), polled by
//!   whichever reader is at the front;
//! * the data chunks pulled from it so far, kept as reference-counted [`Bytes`]
//!   (zero-copy when the original already yields `Bytes`) while their total stays
//!   within the replay cap, and its trailers;
//! * whether the original ended or failed, and whether the body can still be
//!   replayed ([`NotReplayable`] says why not).
//!
//! A reader is a position in that shared sequence. Behind the front it yields kept
//! chunks; at the front it polls the original, appends what it pulled to the shared
//! chunks and yields it. A stale reader of an earlier attempt and a new one therefore
//! see the same byte sequence. Once the cap is crossed the kept chunks are dropped and
//! data only passes through to the reader that pulled it; a reader that is behind by
//! then gets an error frame rather than wrong data, and nothing ever panics.
//!
//! Readers waiting on the original share a fan-out waker, so when two readers poll at
//! once (a stale attempt still writing while a new one starts) neither is left
//! without a wake-up.
//!
//! A body that is already at its end (the usual `GET`) takes an allocation-free path:
//! no `Arc`, no `Mutex`, no `Box`.

use std::error::Error as StdError;
use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};
use std::task::{Context, Poll, Wake, Waker};

use bytes::{Buf, Bytes};
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};

use crate::error::BoxError;
use crate::policy::{AttemptLog, NotReplayable};

#[cfg(test)]
mod tests;

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

enum Repr<B> {
    /// The body was already at its end: nothing to keep, nothing to share.
    Empty,
    /// A reader of a shared, non-empty body.
    Shared(Reader<B>),
}

struct Reader<B> {
    shared: Arc<Mutex<Shared<B>>>,
    /// The shared state's waiting readers (a handle kept to leave it on drop).
    wakers: Arc<WakerSet>,
    /// Identifies this reader in the fan-out waker's list.
    id: u64,
    /// This reader may have a waker in the list.
    registered: bool,
    /// Data chunks (non-empty) this reader has yielded: its position.
    pos: usize,
    /// Bytes this reader has yielded.
    bytes: u64,
    /// This reader yielded the trailers.
    trailers_done: bool,
    /// This reader yielded its end.
    done: bool,
}

/// Why the original body can no longer be polled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Failure {
    /// It returned an error.
    Error,
    /// It panicked while our lock was held.
    Panicked,
}

struct Shared<B> {
    /// The original body; `None` once it ended or failed.
    original: Option<Pin<Box<B>>>,
    /// Replay cap in bytes.
    cap: usize,
    /// Kept data chunks; all pulled chunks while `status` is `Ok`, empty otherwise.
    chunks: Vec<Bytes>,
    /// Bytes in `chunks`.
    kept_bytes: usize,
    /// Non-empty data chunks pulled from the original so far.
    pulled_chunks: usize,
    /// Bytes pulled from the original so far.
    pulled_bytes: u64,
    /// Trailers pulled from the original, if kept.
    trailers: Option<HeaderMap>,
    /// Trailers were pulled but not kept.
    trailers_lost: bool,
    /// The original yielded its end (or said it is at its end).
    ended: bool,
    /// The original failed.
    failed: Option<Failure>,
    /// Whether a new reader could replay the whole body; chunks are kept while `Ok`.
    status: Result<(), NotReplayable>,
    /// Readers waiting on the original.
    wakers: Arc<WakerSet>,
    /// Waker handed to the original: wakes every waiting reader.
    fanout: Waker,
    /// Next reader id.
    next_id: u64,
}

/// The wakers of readers that polled the original and got `Pending`.
#[derive(Default)]
struct WakerSet {
    waiting: Mutex<Vec<(u64, Waker)>>,
}

impl WakerSet {
    fn lock(&self) -> MutexGuard<'_, Vec<(u64, Waker)>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers (or refreshes) the waker of reader `id`.
    fn register(&self, id: u64, waker: &Waker) {
        let mut waiting = self.lock();
        match waiting.iter_mut().find(|(i, _)| *i == id) {
            Some((_, w)) => {
                if !w.will_wake(waker) {
                    w.clone_from(waker);
                }
            }
            None => waiting.push((id, waker.clone())),
        }
    }

    /// Removes reader `id` and wakes every other waiting reader: something happened
    /// that they should look at.
    fn wake_others(&self, id: u64) {
        let woken: Vec<(u64, Waker)> = {
            let mut waiting = self.lock();
            if waiting.iter().all(|(i, _)| *i == id) {
                waiting.clear();
                return;
            }
            std::mem::take(&mut *waiting)
        };
        for (i, w) in woken {
            if i != id {
                w.wake();
            }
        }
    }

    /// Removes reader `id` (a reader that goes away).
    fn remove(&self, id: u64) {
        self.lock().retain(|(i, _)| *i != id);
    }

    fn wake_all(&self) {
        let woken = std::mem::take(&mut *self.lock());
        for (_, w) in woken {
            w.wake();
        }
    }
}

impl Wake for WakerSet {
    fn wake(self: Arc<Self>) {
        self.wake_all();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.wake_all();
    }
}

/// The error a reader yields when it cannot yield the right data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReplayError {
    /// The data this reader needs was passed on but not kept.
    NotKept,
    /// The original body failed earlier (its error went to the reader that met it).
    BodyFailed,
    /// The original body panicked earlier.
    BodyPanicked,
}

impl fmt::Display for ReplayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ReplayError::NotKept => "replay body: data no longer kept",
            ReplayError::BodyFailed => "replay body: the original body failed",
            ReplayError::BodyPanicked => "replay body: the original body panicked",
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

fn lock_shared<B>(mutex: &Mutex<Shared<B>>) -> MutexGuard<'_, Shared<B>> {
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
    fn new(body: B, cap: usize, status: Result<(), NotReplayable>) -> Self {
        let wakers = Arc::new(WakerSet::default());
        let fanout = Waker::from(Arc::clone(&wakers));
        Shared {
            original: Some(Box::pin(body)),
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
            wakers,
            fanout,
            next_id: 0,
        }
    }

    fn keeping(&self) -> bool {
        self.status.is_ok()
    }

    fn new_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        id
    }

    /// Stops keeping chunks (and frees them) for `why`.
    fn stop_keeping(&mut self, why: NotReplayable) {
        if self.status.is_ok() || why == NotReplayable::BodyError {
            self.status = Err(why);
        }
        self.chunks = Vec::new();
        self.kept_bytes = 0;
    }

    fn fail(&mut self, failure: Failure) {
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

    fn finish(&mut self) {
        self.ended = true;
        self.original = None;
        self.wakers.wake_all();
    }

    /// Whether the original can be polled.
    fn live(&self) -> bool {
        !self.ended && self.failed.is_none() && self.original.is_some()
    }

    /// Records a data chunk pulled from the original.
    fn record_chunk(&mut self, chunk: &Bytes) {
        let n = chunk.len();
        self.pulled_chunks = self.pulled_chunks.saturating_add(1);
        self.pulled_bytes = self.pulled_bytes.saturating_add(n as u64);
        if self.keeping() {
            match self.kept_bytes.checked_add(n) {
                Some(total) if total <= self.cap => {
                    self.chunks.push(chunk.clone());
                    self.kept_bytes = total;
                }
                _ => self.stop_keeping(NotReplayable::CapExceeded),
            }
        }
    }

    fn record_trailers(&mut self, trailers: &HeaderMap) {
        if self.keeping() {
            self.trailers = Some(trailers.clone());
        } else {
            self.trailers_lost = true;
        }
        self.finish();
    }

    fn is_fully_kept(&self) -> bool {
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
    fn at_end(&mut self, pos: usize, trailers_done: bool) -> bool {
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
}

impl<B> Reader<B> {
    fn new(shared: Arc<Mutex<Shared<B>>>) -> Self {
        let (id, wakers) = {
            let mut guard = lock_shared(&shared);
            (guard.new_id(), Arc::clone(&guard.wakers))
        };
        Reader {
            shared,
            wakers,
            id,
            registered: false,
            pos: 0,
            bytes: 0,
            trailers_done: false,
            done: false,
        }
    }
}

impl<B> Drop for Reader<B> {
    fn drop(&mut self) {
        if self.registered {
            self.wakers.remove(self.id);
        }
    }
}

impl<B> Reader<B>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
        progress: Option<&AttemptLog>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.done {
            return Poll::Ready(None);
        }
        let mut guard = lock_shared(&self.shared);
        let shared = &mut *guard;

        // Behind the front: replay a kept chunk.
        if self.pos < shared.pulled_chunks {
            let Some(chunk) = shared.chunks.get(self.pos).cloned() else {
                let err = match shared.failed {
                    Some(f) => ReplayError::from(f),
                    None => ReplayError::NotKept,
                };
                return Poll::Ready(Some(Err(err.into())));
            };
            self.pos += 1;
            self.bytes = self.bytes.saturating_add(chunk.len() as u64);
            let at_end = shared.at_end(self.pos, self.trailers_done);
            drop(guard);
            report_data(progress, &chunk, at_end);
            return Poll::Ready(Some(Ok(Frame::data(chunk))));
        }

        // At the front, the original over.
        if shared.ended {
            if !self.trailers_done {
                if let Some(trailers) = &shared.trailers {
                    let trailers = trailers.clone();
                    drop(guard);
                    self.trailers_done = true;
                    self.done = true;
                    mark_complete(progress);
                    return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
                }
                if shared.trailers_lost {
                    return Poll::Ready(Some(Err(ReplayError::NotKept.into())));
                }
            }
            drop(guard);
            self.done = true;
            mark_complete(progress);
            return Poll::Ready(None);
        }
        if let Some(failure) = shared.failed {
            return Poll::Ready(Some(Err(ReplayError::from(failure).into())));
        }

        // At the front, the original live: pull from it.
        let Some(original) = shared.original.as_mut() else {
            // Not reachable: a live original that is neither ended nor failed is
            // present. Treat it as ended rather than panic.
            shared.finish();
            drop(guard);
            self.done = true;
            mark_complete(progress);
            return Poll::Ready(None);
        };
        // Register before polling so a wake-up between the poll and the
        // registration cannot be lost.
        shared.wakers.register(self.id, cx.waker());
        self.registered = true;
        let polled = {
            let mut fanout_cx = Context::from_waker(&shared.fanout);
            original.as_mut().poll_frame(&mut fanout_cx)
        };
        let polled = match polled {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(polled) => polled,
        };
        shared.wakers.wake_others(self.id);

        match polled {
            None => {
                shared.finish();
                drop(guard);
                self.done = true;
                mark_complete(progress);
                Poll::Ready(None)
            }
            Some(Err(err)) => {
                shared.fail(Failure::Error);
                drop(guard);
                Poll::Ready(Some(Err(err.into())))
            }
            Some(Ok(frame)) => {
                let frame = frame.map_data(|mut data| data.copy_to_bytes(data.remaining()));
                match frame.into_data() {
                    Ok(chunk) => {
                        if !chunk.is_empty() {
                            shared.record_chunk(&chunk);
                            self.pos = shared.pulled_chunks;
                            self.bytes = shared.pulled_bytes;
                        }
                        let at_end = shared.at_end(self.pos, self.trailers_done);
                        drop(guard);
                        report_data(progress, &chunk, at_end);
                        Poll::Ready(Some(Ok(Frame::data(chunk))))
                    }
                    Err(frame) => match frame.into_trailers() {
                        Ok(trailers) => {
                            shared.record_trailers(&trailers);
                            drop(guard);
                            self.trailers_done = true;
                            self.done = true;
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

    fn is_end_stream(&self) -> bool {
        if self.done {
            return true;
        }
        lock_shared(&self.shared).at_end(self.pos, self.trailers_done)
    }

    fn size_hint(&self) -> SizeHint {
        if self.done {
            return SizeHint::with_exact(0);
        }
        let shared = lock_shared(&self.shared);
        let behind = shared.pulled_bytes.saturating_sub(self.bytes);
        if shared.ended {
            return SizeHint::with_exact(behind);
        }
        match (&shared.original, shared.failed) {
            (Some(original), None) => hint_plus(behind, &original.size_hint()),
            _ => hint_plus(behind, &SizeHint::new()),
        }
    }
}

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
    pub(crate) fn new(body: B, cap: usize) -> Self {
        if body.is_end_stream() {
            return ReplayBody {
                repr: Repr::Empty,
                progress: None,
            };
        }
        let status = if body.size_hint().lower() > cap as u64 {
            Err(NotReplayable::SizeHintOverCap)
        } else {
            Ok(())
        };
        Self::shared(Shared::new(body, cap, status))
    }

    /// A reader of `body` that keeps nothing.
    pub(crate) fn one_shot(body: B) -> Self {
        Self::shared(Shared::new(body, 0, Err(NotReplayable::OneShot)))
    }

    fn shared(shared: Shared<B>) -> Self {
        ReplayBody {
            repr: Repr::Shared(Reader::new(Arc::new(Mutex::new(shared)))),
            progress: None,
        }
    }

    /// A new reader from the first byte, sharing this body's state; its progress
    /// handle is unset.
    pub(crate) fn replay(&self) -> Self {
        self.source().replay()
    }

    /// A handle that makes new readers of this body later, from the first byte.
    pub(crate) fn source(&self) -> ReplaySource<B> {
        ReplaySource(match &self.repr {
            Repr::Empty => None,
            Repr::Shared(reader) => Some(Arc::clone(&reader.shared)),
        })
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
    /// A new reader from the first byte; its progress handle is unset.
    pub(crate) fn replay(&self) -> ReplayBody<B> {
        let repr = match &self.0 {
            None => Repr::Empty,
            Some(shared) => Repr::Shared(Reader::new(Arc::clone(shared))),
        };
        ReplayBody {
            repr,
            progress: None,
        }
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
    /// Whether a new reader could replay the whole body.
    ///
    /// An empty body is always replayable, and so is a body still being sent while
    /// what was sent so far is kept.
    ///
    /// # Errors
    ///
    /// Says why a new reader could not replay the body: it is one-shot
    /// ([`NotReplayable::OneShot`]), it announced a size over the cap
    /// ([`NotReplayable::SizeHintOverCap`]), it grew past the cap while being sent
    /// ([`NotReplayable::CapExceeded`]), or it failed while being read
    /// ([`NotReplayable::BodyError`], which outranks the other reasons).
    pub fn replayable(&self) -> Result<(), NotReplayable> {
        match &self.repr {
            Repr::Empty => Ok(()),
            Repr::Shared(reader) => lock_shared(&reader.shared).status,
        }
    }

    /// Whether the body is empty, or the original body ended and every chunk and the
    /// trailers are kept, so that several readers can read at once without waiting
    /// on each other.
    pub fn is_fully_kept(&self) -> bool {
        match &self.repr {
            Repr::Empty => true,
            Repr::Shared(reader) => lock_shared(&reader.shared).is_fully_kept(),
        }
    }

    #[cfg(test)]
    fn is_empty_repr(&self) -> bool {
        matches!(self.repr, Repr::Empty)
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
        match &mut this.repr {
            Repr::Empty => {
                mark_complete(this.progress.as_ref());
                Poll::Ready(None)
            }
            Repr::Shared(reader) => reader.poll_frame(cx, this.progress.as_ref()),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.repr {
            Repr::Empty => true,
            Repr::Shared(reader) => reader.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.repr {
            Repr::Empty => SizeHint::with_exact(0),
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
