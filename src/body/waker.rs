//! The fan-out waker: the wakers of the readers waiting on the original body.
//!
//! Only a reader whose poll of the original returned `Pending` is in the list; a
//! ready poll touches none of it. Two things wake the list:
//!
//! * the original body, through the waker it was polled with (the *fan-out*
//!   waker, [`Wake`] for `WakerSet`), which wakes every waiting reader, since
//!   any of them may pull what it announced;
//! * a reader that pulled something (a chunk, the trailers, the end, a failure),
//!   which wakes the others: the original never announces what another reader
//!   already took.
//!
//! A reader polls the original first and registers after it saw `Pending`. The
//! original may wake the fan-out waker in between (from another thread, or from
//! inside its own `poll_frame`), when the reader is not yet in the list. The
//! *epoch* catches that: every fan-out wake advances it under the list's lock, a
//! reader reads it before polling, and registration fails when it moved; the
//! reader then wakes itself instead of waiting. Wakes by a reader that pulled
//! need no epoch: the puller and a registering reader both hold the shared
//! state's lock.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Wake, Waker};

/// The wakers of readers that polled the original and got `Pending`.
#[derive(Default)]
pub(super) struct WakerSet {
    waiting: Mutex<Vec<(u64, Waker)>>,
    /// Entries in `waiting`, written under its lock, read without it.
    len: AtomicUsize,
    /// Fan-out wakes so far, advanced under the lock of `waiting`.
    epoch: AtomicU64,
}

impl WakerSet {
    pub(super) fn lock(&self) -> MutexGuard<'_, Vec<(u64, Waker)>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The epoch to give [`register`](Self::register) after polling the original.
    pub(super) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Registers (or refreshes) the waker of reader `id`, unless the original woke
    /// the fan-out waker since `epoch` was read: then it returns `false` and the
    /// caller must not wait for a wake-up that already happened.
    pub(super) fn register(&self, id: u64, waker: &Waker, epoch: u64) -> bool {
        let mut waiting = self.lock();
        if self.epoch.load(Ordering::Acquire) != epoch {
            return false;
        }
        match waiting.iter_mut().find(|(i, _)| *i == id) {
            Some((_, w)) => {
                if !w.will_wake(waker) {
                    w.clone_from(waker);
                }
            }
            None => {
                waiting.push((id, waker.clone()));
                self.len.store(waiting.len(), Ordering::Release);
            }
        }
        true
    }

    /// Removes reader `id` and wakes every other waiting reader: it pulled
    /// something they should look at.
    ///
    /// The caller holds the shared state's lock, so no reader registers meanwhile,
    /// and an empty list is seen without taking its lock.
    pub(super) fn wake_others(&self, id: u64) {
        self.wake_except(Some(id));
    }

    fn wake_except(&self, except: Option<u64>) {
        if self.len.load(Ordering::Acquire) == 0 {
            return;
        }
        let woken = {
            let mut waiting = self.lock();
            self.len.store(0, Ordering::Release);
            std::mem::take(&mut *waiting)
        };
        for (i, w) in woken {
            if Some(i) != except {
                w.wake();
            }
        }
    }

    /// Removes reader `id` (a reader that goes away).
    pub(super) fn remove(&self, id: u64) {
        let mut waiting = self.lock();
        waiting.retain(|(i, _)| *i != id);
        self.len.store(waiting.len(), Ordering::Release);
    }

    /// Wakes every waiting reader: the original ended or failed.
    ///
    /// Like [`wake_others`](Self::wake_others), called under the shared state's lock.
    pub(super) fn wake_all(&self) {
        self.wake_except(None);
    }

    /// The fan-out wake: the original announced something.
    fn wake_fanout(&self) {
        let woken = {
            let mut waiting = self.lock();
            self.epoch.fetch_add(1, Ordering::AcqRel);
            self.len.store(0, Ordering::Release);
            std::mem::take(&mut *waiting)
        };
        for (_, w) in woken {
            w.wake();
        }
    }
}

impl Wake for WakerSet {
    fn wake(self: Arc<Self>) {
        self.wake_fanout();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.wake_fanout();
    }
}
