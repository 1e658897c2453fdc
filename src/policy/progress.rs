//! The per-attempt record: how far an attempt got onto the wire, and what a hedge
//! layer did with it.

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

use super::Hedged;

const TRACKED: u8 = 1;
const CONNECTED: u8 = 1 << 1;
const WRITE_BEGAN: u8 = 1 << 2;
const BODY_COMPLETE: u8 = 1 << 3;
const HEAD_RECEIVED: u8 = 1 << 4;

/// The record of one attempt: how far it got onto the wire, and the sends of a
/// hedge layer.
///
/// The retry layer gives a fresh `AttemptLog` (through the
/// [`CallContext`](super::CallContext)) to each attempt whose safety depends on it
/// (a request that is neither idempotent nor keyed): the replay body counts the body
/// bytes the transport took, and a progress-tracking service around the transport
/// fills in the rest. A hedge layer records its sends in it
/// ([`hedged`](AttemptLog::hedged)) and returns it with the attempt's outcome, on
/// the response's extensions or in the [`Error`](crate::Error). The retry layer
/// reads the record; it never names the layers that filled it in. A handle is cheap
/// to clone: every clone reports into the same record.
///
/// # Examples
///
/// ```
/// use backstop::policy::AttemptLog;
///
/// let progress = AttemptLog::new();
/// assert!(!progress.snapshot().anything_written());
/// progress.add_body_bytes(10);
/// assert!(progress.snapshot().anything_written());
/// ```
#[derive(Clone, Default)]
pub struct AttemptLog {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    flags: AtomicU8,
    body_bytes: AtomicU64,
    hedged: OnceLock<Hedged>,
}

impl AttemptLog {
    /// A record where nothing has happened yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn set(&self, flag: u8) {
        self.inner.flags.fetch_or(flag, Ordering::Release);
    }

    /// Marks the record as kept by a transport that reports its progress, so that
    /// "nothing written" can be trusted as a fact rather than a guess.
    pub fn mark_tracked(&self) {
        self.set(TRACKED);
    }

    /// Records that a connection was obtained for this attempt.
    pub fn mark_connected(&self) {
        self.set(CONNECTED);
    }

    /// Records that the transport began writing the request.
    pub fn mark_write_began(&self) {
        self.set(WRITE_BEGAN);
    }

    /// Records that the transport took the whole request body.
    pub fn mark_body_complete(&self) {
        self.set(BODY_COMPLETE);
    }

    /// Records that a response head arrived.
    pub fn mark_head_received(&self) {
        self.set(HEAD_RECEIVED);
    }

    /// Adds `n` body bytes taken by the transport.
    pub fn add_body_bytes(&self, n: u64) {
        if n > 0 {
            self.inner.body_bytes.fetch_add(n, Ordering::Release);
            self.set(WRITE_BEGAN);
        }
    }

    /// What a hedge layer did with the attempt, when a hedge was due.
    pub fn hedged(&self) -> Option<&Hedged> {
        self.inner.hedged.get()
    }

    /// Records what a hedge layer did with the attempt; only the first record is
    /// kept.
    pub fn record_hedged(&self, hedged: Hedged) {
        let _ = self.inner.hedged.set(hedged);
    }

    /// What the record says now.
    pub fn snapshot(&self) -> Progress {
        let flags = self.inner.flags.load(Ordering::Acquire);
        Progress {
            tracked: flags & TRACKED != 0,
            connected: flags & CONNECTED != 0,
            write_began: flags & WRITE_BEGAN != 0,
            body_bytes: self.inner.body_bytes.load(Ordering::Acquire),
            body_complete: flags & BODY_COMPLETE != 0,
            head_received: flags & HEAD_RECEIVED != 0,
        }
    }
}

impl fmt::Debug for AttemptLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.snapshot().fmt(f)
    }
}

/// A snapshot of an [`AttemptLog`] record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Progress {
    /// A progress-tracking transport kept this record; without one only the body
    /// bytes are known.
    pub tracked: bool,
    /// A connection was obtained.
    pub connected: bool,
    /// The transport began writing the request.
    pub write_began: bool,
    /// Body bytes the transport took.
    pub body_bytes: u64,
    /// The transport took the whole body.
    pub body_complete: bool,
    /// A response head arrived.
    pub head_received: bool,
}

impl Progress {
    /// Whether any part of the request may have reached the wire.
    pub fn anything_written(&self) -> bool {
        self.write_began || self.body_bytes > 0 || self.body_complete || self.head_received
    }

    /// Whether the record proves that nothing was written: it was kept by a
    /// progress-tracking transport and shows no write.
    pub fn proves_nothing_written(&self) -> bool {
        self.tracked && !self.anything_written()
    }
}
