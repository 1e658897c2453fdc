//! The store a fleet shares through: what it must do (record and sum, move a pause
//! forward), and the one in this process's memory.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, PoisonError};

/// A boxed future a store returns: the sync task awaits it under its timeout.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// Where the replicas of a fleet meet: a forward-only pause per key, and per key
/// the fleet's first attempts and spent retries over a window.
///
/// The store only records and sums; what a replica may spend is worked out by
/// backstop from the sums ([`Fleet`](super::Fleet)), so every store leases alike.
/// Each method is one batch for every key a replica knows, so a store over the
/// network makes one round trip per batch. Keys are opaque hashes of the
/// partition's key (never a URL).
///
/// Both methods are called by one background task, never on a call's path; a
/// store that fails or is slow only makes the fleet view stale.
pub trait FleetStore: fmt::Debug + Send + Sync + 'static {
    /// Moves each key's pause forward to its `until` (milliseconds since the Unix
    /// epoch; 0 leaves it as it is) and returns each key's pause as stored
    /// afterwards, 0 when it has ended by `now_ms`. A pause never moves back:
    /// no replica can shorten another's. A pause is forgotten once it ends.
    fn pauses<'a>(&'a self, now_ms: u64, pauses: &'a [PauseReport]) -> StoreFuture<'a, Vec<u64>>;

    /// Records each key's first attempts and spent retries at `now_ms`, notes
    /// the replica as live, and returns each key's totals over the window.
    fn totals<'a>(&'a self, report: &'a LeaseReport) -> StoreFuture<'a, Vec<Totals>>;
}

/// A replica's pause for one key, as it pushes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PauseReport {
    /// The key.
    pub key: String,
    /// Until when the replica has the key paused (Unix milliseconds), or 0.
    pub until: u64,
}

/// One replica's counts since its last report, for every key it knows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseReport {
    /// The replica (random per [`Fleet`](super::Fleet)).
    pub replica: u64,
    /// Now, in Unix milliseconds.
    pub now_ms: u64,
    /// How long a replica counts as live after its last report, in milliseconds.
    pub replica_ttl_ms: u64,
    /// Per key: the first attempts and spent retries since the last report.
    pub counts: Vec<KeyCounts>,
}

/// One key's counts in a [`LeaseReport`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyCounts {
    /// The key.
    pub key: String,
    /// First attempts since the last report.
    pub firsts: u64,
    /// Retries spent since the last report (net of those given back).
    pub spent: u64,
    /// The length of one slot of the key's window, in milliseconds: counts are
    /// kept per slot and expire with it.
    pub slot_ms: u64,
    /// How many slots make the window.
    pub slots: u64,
}

/// One key's fleet-wide totals over the window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// The fleet's first attempts.
    pub firsts: u64,
    /// The fleet's spent retries.
    pub spent: u64,
    /// The replicas that reported within their time to live (at least the one
    /// asking).
    pub replicas: u64,
}

/// Why a store could not answer: the kind only, never a key, an address or a
/// server's message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreError {
    kind: StoreErrorKind,
}

/// What kind of failure a [`StoreError`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// The store did not answer within the fleet's timeout.
    Timeout,
    /// The store could not be reached, or the connection broke.
    Unavailable,
    /// The store answered something unexpected.
    Protocol,
}

impl StoreErrorKind {
    /// A short `snake_case` name, for logs and metric labels.
    pub fn as_str(&self) -> &'static str {
        match self {
            StoreErrorKind::Timeout => "timeout",
            StoreErrorKind::Unavailable => "unavailable",
            StoreErrorKind::Protocol => "protocol",
        }
    }
}

impl StoreError {
    /// An error of this kind.
    pub fn new(kind: StoreErrorKind) -> Self {
        StoreError { kind }
    }

    /// What kind of failure it is.
    pub fn kind(&self) -> StoreErrorKind {
        self.kind
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "fleet store failed: {}", self.kind.as_str())
    }
}

impl std::error::Error for StoreError {}

/// A store in this process's memory: the stacks of one process that share it
/// make one fleet (useful for tests, and for several clients of one origin in a
/// process).
///
/// # Examples
///
/// ```
/// use backstop::budget::BudgetPolicy;
/// use backstop::fleet::{Fleet, InProcess};
///
/// let fleet = Fleet::builder(InProcess::new()).build()?;
/// // Budgets built with this fleet, in one process, share pauses and leases.
/// let budget = BudgetPolicy::builder().fleet(fleet).build()?;
/// assert!(budget.fleet().is_some());
/// # Ok::<(), backstop::policy::InvalidConfig>(())
/// ```
#[derive(Default)]
pub struct InProcess {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Each key's pause (Unix milliseconds).
    pauses: HashMap<String, u64>,
    /// Each key's counts per slot: (slot, firsts, spent).
    slots: HashMap<String, Vec<(u64, u64, u64)>>,
    /// Each key's replicas, with when they last reported.
    replicas: HashMap<String, HashMap<u64, u64>>,
}

impl InProcess {
    /// An empty store.
    pub fn new() -> Self {
        InProcess::default()
    }
}

impl fmt::Debug for InProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InProcess").finish_non_exhaustive()
    }
}

impl FleetStore for InProcess {
    fn pauses<'a>(&'a self, now_ms: u64, pauses: &'a [PauseReport]) -> StoreFuture<'a, Vec<u64>> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.pauses.retain(|_, until| *until > now_ms);
        let stored = pauses
            .iter()
            .map(|p| {
                let until = state.pauses.entry(p.key.clone()).or_insert(0);
                if p.until > now_ms {
                    *until = (*until).max(p.until);
                }
                *until
            })
            .collect();
        Box::pin(std::future::ready(Ok(stored)))
    }

    fn totals<'a>(&'a self, report: &'a LeaseReport) -> StoreFuture<'a, Vec<Totals>> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let State {
            slots, replicas, ..
        } = &mut *state;
        let live_since = report.now_ms.saturating_sub(report.replica_ttl_ms);
        let totals = report
            .counts
            .iter()
            .map(|c| {
                let slot = report.now_ms / c.slot_ms.max(1);
                let oldest = slot.saturating_sub(c.slots.saturating_sub(1));
                let kept = slots.entry(c.key.clone()).or_default();
                kept.retain(|&(s, _, _)| s >= oldest);
                match kept.iter_mut().find(|(s, _, _)| *s == slot) {
                    Some((_, f, s)) => {
                        *f += c.firsts;
                        *s += c.spent;
                    }
                    None => kept.push((slot, c.firsts, c.spent)),
                }
                let live = replicas.entry(c.key.clone()).or_default();
                live.insert(report.replica, report.now_ms);
                live.retain(|_, &mut at| at >= live_since);
                Totals {
                    firsts: kept.iter().map(|k| k.1).sum(),
                    spent: kept.iter().map(|k| k.2).sum(),
                    replicas: live.len() as u64,
                }
            })
            .collect();
        Box::pin(std::future::ready(Ok(totals)))
    }
}

/// One store shared by several fleets (each a replica), as in tests.
impl<T: FleetStore> FleetStore for std::sync::Arc<T> {
    fn pauses<'a>(&'a self, now_ms: u64, pauses: &'a [PauseReport]) -> StoreFuture<'a, Vec<u64>> {
        (**self).pauses(now_ms, pauses)
    }

    fn totals<'a>(&'a self, report: &'a LeaseReport) -> StoreFuture<'a, Vec<Totals>> {
        (**self).totals(report)
    }
}
