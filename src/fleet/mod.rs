//! Replicas that share what a server said and how much they retry: an origin's
//! pause, and one leased retry budget, through a [`FleetStore`].
//!
//! Without a fleet (the default) every process keeps its own budget and pauses,
//! at no extra cost. A [`Fleet`] given to
//! [`BudgetPolicyBuilder::fleet`](crate::budget::BudgetPolicyBuilder::fleet)
//! makes the replicas that share its store one fleet:
//!
//! - **A shared origin pause.** A `Retry-After` (or a gRPC pushback) one replica
//!   learns is pushed to the store in the background and taken in by every other
//!   replica at its next refresh (every 50 ms by default): a 429 is learned once
//!   per fleet, not once per replica. The store keeps a forward-only "paused
//!   until" per key, so no replica can shorten another's pause, and forgets it
//!   when it ends.
//! - **One leased retry budget.** About once a second each replica reports its
//!   first attempts and spent retries, and leases its share of one fleet-wide
//!   account: the budget's ratio of the *fleet's* first attempts plus *one*
//!   floor for the whole fleet (twenty replicas do not get twenty floors). Its
//!   share follows its part of the fleet's traffic. Between leases, decisions are
//!   local atomics.
//! - **No network round trip on a call's path.** A background task does every
//!   exchange; a call reads only local state.
//! - **Fail open.** If the store is slow (past the fleet's
//!   [`timeout`](FleetBuilder::timeout)) or down, every lease is revoked at once
//!   and each replica decides with its own budget and pauses, as without a fleet;
//!   no call waits on the store or fails because of it. The task keeps trying, and
//!   sharing resumes when the store answers. The fleet's observer
//!   ([`FleetBuilder::on_event`]) and a `tracing` line (target
//!   `backstop::fleet`) say when the fleet view went stale and when it is fresh
//!   again; neither holds a key, an address or a value.
//!
//! **Breakers stay local.** A breaker judges what *this* replica sees of an
//! origin: its own connection pool, network path and zone. One replica's local
//! trouble must not open every replica's breaker, and a breaker opened
//! fleet-wide would also stop the probes that show the origin is back. A pause
//! is different: it is the server's own statement about itself, and the budget
//! is a load total, so those are what a fleet shares.
//!
//! The stores: [`InProcess`] (the stacks of one process, and tests) and, with
//! the `redis` feature, `RedisStore` (one Redis for the fleet, reconnecting by
//! itself). Another store implements [`FleetStore`]: it records and sums; the
//! lease is worked out here, so every store leases alike.
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use backstop::budget::BudgetPolicy;
//! use backstop::fleet::{Fleet, FleetEvent, InProcess};
//!
//! let fleet = Fleet::builder(InProcess::new())
//!     .refresh(Duration::from_millis(50))
//!     .on_event(|event: &FleetEvent| eprintln!("{event:?}"))
//!     .build()?;
//! let budget = BudgetPolicy::builder().fleet(fleet).build()?;
//! # let _ = budget;
//!
//! // Bad numbers are refused, never a panic.
//! assert!(Fleet::builder(InProcess::new()).refresh(Duration::ZERO).build().is_err());
//! # Ok::<(), backstop::policy::InvalidConfig>(())
//! ```

mod lease;
#[cfg(feature = "redis")]
mod redis;
mod store;
mod sync;

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

pub(crate) use lease::{Lease, Numbers};
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use redis::RedisStore;
pub use store::{
    FleetStore, InProcess, KeyCounts, LeaseReport, PauseReport, StoreError, StoreErrorKind,
    StoreFuture, Totals,
};
pub(crate) use sync::Member;

use crate::policy::{FirstError, InvalidConfig};

/// What a fleet tells its observer: its view of the fleet went stale, or is
/// fresh again. Kinds and durations only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FleetEvent {
    /// The store failed or was slow: every account decides alone from now on.
    Stale {
        /// Why.
        kind: StoreErrorKind,
    },
    /// The store answered again: pauses and leases are shared again.
    Fresh {
        /// How long the view was stale.
        stale_for: Duration,
    },
}

/// The settings of a fleet's background task.
#[derive(Clone, Copy, Debug)]
struct Settings {
    refresh: Duration,
    lease_every: Duration,
    timeout: Duration,
}

/// The replicas that share one [`FleetStore`]: given to a budget with
/// [`BudgetPolicyBuilder::fleet`](crate::budget::BudgetPolicyBuilder::fleet).
/// See the [module docs](self).
///
/// Clones are the same replica. Its task starts with the first account that
/// needs it (inside a tokio runtime) and ends when the last clone is dropped.
#[derive(Clone)]
pub struct Fleet(Arc<Inner>);

type Observe = Arc<dyn Fn(&FleetEvent) + Send + Sync>;

struct Inner {
    store: Arc<dyn FleetStore>,
    settings: Settings,
    on_event: Option<Observe>,
    /// This replica, in the store's count of live replicas.
    replica: u64,
    joined: Mutex<Joining>,
    /// Woken when an account learns a pause here, so the task pushes it at once
    /// rather than at its next refresh.
    learned: Arc<tokio::sync::Notify>,
}

/// Accounts that joined since the task last looked, and whether it runs.
#[derive(Default)]
struct Joining {
    new: Vec<sync::Joined>,
    running: bool,
}

impl Inner {
    /// Moves the accounts that joined since the last call into `joined`.
    fn take_joined(&self, joined: &mut Vec<sync::Joined>) {
        let mut joining = self.joined.lock().unwrap_or_else(PoisonError::into_inner);
        joined.append(&mut joining.new);
    }

    /// Tells the observer and the log.
    fn tell(&self, event: FleetEvent) {
        match event {
            FleetEvent::Stale { kind } => tracing::warn!(
                target: "backstop::fleet",
                kind = kind.as_str(),
                "fleet view stale: each replica decides alone"
            ),
            FleetEvent::Fresh { stale_for } => tracing::info!(
                target: "backstop::fleet",
                stale_ms = stale_for.as_millis() as u64,
                "fleet view fresh again"
            ),
        }
        if let Some(observe) = &self.on_event {
            observe(&event);
        }
    }
}

impl Fleet {
    /// A builder for a fleet that shares through `store`.
    pub fn builder(store: impl FleetStore) -> FleetBuilder {
        FleetBuilder {
            store: Arc::new(store),
            settings: Settings {
                refresh: Duration::from_millis(50),
                lease_every: Duration::from_secs(1),
                timeout: Duration::from_millis(250),
            },
            on_event: None,
        }
    }

    /// How often pauses are exchanged with the store.
    pub fn refresh(&self) -> Duration {
        self.0.settings.refresh
    }

    /// How often each account leases its allowance.
    pub fn lease_every(&self) -> Duration {
        self.0.settings.lease_every
    }

    /// How long an exchange may take before the view counts as stale.
    pub fn timeout(&self) -> Duration {
        self.0.settings.timeout
    }

    /// A lease for the account of the partition key `label` (kept as a hash).
    pub(crate) fn lease(&self, label: &str, numbers: Numbers) -> Arc<Lease> {
        Arc::new(Lease::new(self.clone(), key_of(label), numbers))
    }

    /// Shares `lease` and the pause of `member` with the fleet from the next
    /// refresh on (until `member` is dropped), and starts the task if it is not
    /// running and a tokio runtime is at hand (else the next account to join
    /// starts it; until then every account decides alone).
    pub(crate) fn join(&self, lease: Weak<Lease>, member: Weak<dyn Member>) {
        let mut joined = self.0.joined.lock().unwrap_or_else(PoisonError::into_inner);
        joined.new.push(sync::Joined::new(lease, member));
        if joined.running {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            joined.running = true;
            runtime.spawn(sync::run(Arc::downgrade(&self.0)));
        }
    }
}

impl fmt::Debug for Fleet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fleet")
            .field("store", &self.0.store)
            .field("refresh", &self.0.settings.refresh)
            .field("lease_every", &self.0.settings.lease_every)
            .field("timeout", &self.0.settings.timeout)
            .finish()
    }
}

/// Builds a [`Fleet`], checking every setting.
pub struct FleetBuilder {
    store: Arc<dyn FleetStore>,
    settings: Settings,
    on_event: Option<Observe>,
}

impl FleetBuilder {
    /// How often pauses are exchanged with the store, from 1 ms to 10 s
    /// (default 50 ms): a pause one replica learns is pushed at once and reaches
    /// the others within about this (at their next exchange).
    pub fn refresh(mut self, refresh: Duration) -> Self {
        self.settings.refresh = refresh;
        self
    }

    /// How often each account reports its counts and leases its allowance,
    /// from 10 ms to 60 s (default 1 s), and no shorter than `refresh` (leases
    /// go with a refresh).
    pub fn lease_every(mut self, every: Duration) -> Self {
        self.settings.lease_every = every;
        self
    }

    /// How long one exchange with the store may take, from 1 ms to 10 s
    /// (default 250 ms): past it the view is stale and every account decides
    /// alone until the store answers again.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.settings.timeout = timeout;
        self
    }

    /// Tells `observe` when the fleet view goes stale and when it is fresh again.
    pub fn on_event(mut self, observe: impl Fn(&FleetEvent) + Send + Sync + 'static) -> Self {
        self.on_event = Some(Arc::new(observe));
        self
    }

    /// The fleet, or the first invalid setting.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] names the setting and what is wrong with it.
    pub fn build(self) -> Result<Fleet, InvalidConfig> {
        let Settings {
            refresh,
            lease_every,
            timeout,
        } = self.settings;
        let mut error = FirstError::default();
        let ms = Duration::from_millis;
        for (setting, value, min, max) in [
            ("refresh", refresh, ms(1), ms(10_000)),
            ("lease_every", lease_every, ms(10), ms(60_000)),
            ("timeout", timeout, ms(1), ms(10_000)),
        ] {
            if !(min..=max).contains(&value) {
                error.fail(
                    setting,
                    format!("must be from {min:?} to {max:?}, got {value:?}"),
                );
            }
        }
        if lease_every < refresh {
            error.fail(
                "lease_every",
                format!("must be no shorter than refresh ({refresh:?}), got {lease_every:?}"),
            );
        }
        error.check()?;
        Ok(Fleet(Arc::new(Inner {
            store: self.store,
            settings: self.settings,
            on_event: self.on_event,
            learned: Arc::default(),
            replica: rand::random(),
            joined: Mutex::default(),
        })))
    }
}

impl fmt::Debug for FleetBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FleetBuilder")
            .field("store", &self.store)
            .field("settings", &self.settings)
            .finish()
    }
}

/// The store's key for a partition key: a hash (FNV-1a, the same in every
/// process and build), so no URL or custom key reaches the store.
fn key_of(label: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in label.as_bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

#[cfg(test)]
mod tests;
