//! One reader of a shared body: its position in the shared sequence, and its poll.
//!
//! Behind the front a reader yields kept chunks; at the front it polls the original
//! (with the fan-out waker), appends what it pulled to the shared chunks and yields
//! it. A reader registers its waker only when it returns `Pending`, and wakes the
//! other waiting readers only when it pulled something; see `waker` for how a
//! wake-up between the poll and the registration is not lost.

use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http_body::{Body, Frame, SizeHint};

use super::shared::{lock_shared, Failure, ReplayError, Shared};
use super::{mark_complete, report_data};
use crate::policy::AttemptLog;
use crate::BoxError;

pub(super) struct Reader<B> {
    pub(super) shared: Arc<Mutex<Shared<B>>>,
    /// Identifies this reader in the fan-out waker's list.
    id: u64,
    /// The attempt this reader belongs to; only the latest pulls from the original.
    pub(super) attempt: u64,
    /// This reader may have a waker in the list.
    registered: bool,
    /// Data chunks (non-empty) this reader has yielded: its position.
    pub(super) pos: usize,
    /// Bytes this reader has yielded.
    pub(super) bytes: u64,
    /// This reader yielded the trailers.
    trailers_done: bool,
    /// This reader yielded its end.
    pub(super) done: bool,
}

impl<B> Reader<B> {
    /// A reader from the first byte, for `attempt`.
    pub(super) fn new(shared: Arc<Mutex<Shared<B>>>, attempt: u64) -> Self {
        Self::resume(shared, attempt, 0, 0, false, false)
    }

    /// A reader for `attempt` that already yielded `pos` chunks of `bytes` bytes,
    /// and the trailers and its end if so.
    pub(super) fn resume(
        shared: Arc<Mutex<Shared<B>>>,
        attempt: u64,
        pos: usize,
        bytes: u64,
        trailers_done: bool,
        done: bool,
    ) -> Self {
        let id = lock_shared(&shared).new_id();
        Reader {
            shared,
            id,
            attempt,
            registered: false,
            pos,
            bytes,
            trailers_done,
            done,
        }
    }
}

impl<B> Drop for Reader<B> {
    fn drop(&mut self) {
        if self.registered {
            // Only a reader that waited on the original takes the lock here.
            lock_shared(&self.shared).wakers.remove(self.id);
        }
    }
}

impl<B> Reader<B>
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

        // At the front, the original live, but a later attempt took it over: this
        // reader's transport let go of it late, and must not send the rest.
        if self.attempt != shared.attempt {
            return Poll::Ready(Some(Err(ReplayError::Superseded.into())));
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
        // Read before polling: a fan-out wake after this point moves it, and then
        // the registration below fails rather than wait for a wake that happened.
        let epoch = shared.wakers.epoch();
        let polled = {
            let mut fanout_cx = Context::from_waker(&shared.fanout);
            original.as_mut().poll_frame(&mut fanout_cx)
        };
        let polled = match polled {
            Poll::Pending => {
                // Under the shared lock: no other reader pulls between the poll and
                // the registration, so their news cannot be missed either.
                if shared.wakers.register(self.id, cx.waker(), epoch) {
                    self.registered = true;
                } else {
                    // The original woke the readers while this one was not yet
                    // listed: poll again soon instead of waiting.
                    cx.waker().wake_by_ref();
                }
                return Poll::Pending;
            }
            Poll::Ready(polled) => polled,
        };
        // News for the readers waiting on the original: a chunk, trailers, the end
        // or a failure. A reader that is not waiting needs no wake.
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

    pub(super) fn is_end_stream(&self) -> bool {
        if self.done {
            return true;
        }
        lock_shared(&self.shared).at_end(self.pos, self.trailers_done)
    }

    pub(super) fn size_hint(&self) -> SizeHint {
        if self.done {
            return SizeHint::with_exact(0);
        }
        lock_shared(&self.shared).remaining_hint(self.bytes)
    }
}
