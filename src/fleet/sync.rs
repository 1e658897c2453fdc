//! The background task that keeps a replica's accounts in step with its fleet:
//! every `refresh` it pushes the pauses learned here (at once when one is
//! learned) and takes in those learned elsewhere; every `lease_every` it reports the counts and leases each
//! account's allowance. Nothing here runs on a call's path, and a store that
//! fails or is slow only revokes the leases (every account decides alone at once).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::{timeout, Instant, MissedTickBehavior};

use super::lease::{lease_units, Clock, Lease};
use super::store::{KeyCounts, LeaseReport, PauseReport, StoreError, StoreErrorKind};
use super::{FleetEvent, Inner};
use crate::policy::later;

/// The pause of an account in a fleet (its lease the fleet holds itself).
pub(crate) trait Member: Send + Sync + 'static {
    /// When the account's pause ends, if one is set (it may have ended).
    fn pause_end(&self) -> Option<Instant>;

    /// Pauses the account's origin until `until` (forward only, capped as any
    /// pause is).
    fn pause(&self, until: Instant);
}

/// How the fleet view stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum View {
    /// No exchange has ended yet.
    Starting,
    Fresh,
    /// Stale since then.
    Stale(Instant),
}

/// An account in the fleet, while it lives: its lease and its pause (weak, so
/// the registry still forgets an idle account, and nothing here keeps the
/// fleet), and its own first attempts per report over the window (its weight).
pub(super) struct Joined {
    lease: Weak<Lease>,
    member: Weak<dyn Member>,
    reports: VecDeque<(Instant, u64)>,
}

impl Joined {
    pub(super) fn new(lease: Weak<Lease>, member: Weak<dyn Member>) -> Self {
        Joined {
            lease,
            member,
            reports: VecDeque::new(),
        }
    }

    /// Adds a report's first attempts; the sum over `window`.
    fn add(&mut self, now: Instant, firsts: u64, window: Duration) -> u64 {
        self.reports.push_back((now, firsts));
        while let Some(&(at, _)) = self.reports.front() {
            if now.saturating_duration_since(at) < window {
                break;
            }
            self.reports.pop_front();
        }
        self.reports.iter().map(|&(_, f)| f).sum()
    }
}

/// An account alive for one exchange.
struct Live<'a> {
    joined: &'a mut Joined,
    lease: Arc<Lease>,
    member: Arc<dyn Member>,
}

/// Runs until the fleet is dropped.
pub(super) async fn run(fleet: Weak<Inner>) {
    let Some((settings, learned)) = fleet.upgrade().map(|f| (f.settings, f.learned.clone())) else {
        return;
    };
    let clock = Clock::now();
    let mut tick = tokio::time::interval(settings.refresh);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut view = View::Starting;
    let mut next_lease = Instant::now();
    let mut joined: Vec<Joined> = Vec::new();
    loop {
        // Every refresh, and at once when an account learned a pause here.
        let tick = std::pin::pin!(tick.tick());
        let learned = std::pin::pin!(learned.notified());
        futures_util::future::select(tick, learned).await;
        let Some(inner) = fleet.upgrade() else {
            return;
        };
        inner.take_joined(&mut joined);
        joined.retain(|j| j.member.strong_count() > 0 && j.lease.strong_count() > 0);
        let mut live: Vec<Live<'_>> = joined
            .iter_mut()
            .filter_map(|joined| {
                let lease = joined.lease.upgrade()?;
                let member = joined.member.upgrade()?;
                Some(Live {
                    joined,
                    lease,
                    member,
                })
            })
            .collect();
        if live.is_empty() {
            continue;
        }
        let now = Instant::now();
        let lease_due = now >= next_lease;
        let result = exchange(&inner, &clock, &mut live, lease_due).await;
        if lease_due && result.is_ok() {
            next_lease = later(now, settings.lease_every);
        }
        if result.is_err() {
            // Every account decides alone at once.
            for account in &live {
                account.lease.revoke();
            }
        }
        view = match (result, view) {
            (Ok(()), View::Stale(since)) => {
                inner.tell(FleetEvent::Fresh {
                    stale_for: since.elapsed(),
                });
                View::Fresh
            }
            (Ok(()), _) => View::Fresh,
            (Err(_), View::Stale(since)) => View::Stale(since),
            (Err(error), _) => {
                inner.tell(FleetEvent::Stale { kind: error.kind() });
                View::Stale(now)
            }
        };
    }
}

/// One exchange with the store: the pauses, then (when due) the lease.
async fn exchange(
    inner: &Inner,
    clock: &Clock,
    live: &mut [Live<'_>],
    lease_due: bool,
) -> Result<(), StoreError> {
    let settings = inner.settings;
    let now = Instant::now();
    let now_ms = clock.unix_ms(now);
    let end_ms = |m: &Arc<dyn Member>| m.pause_end().map_or(0, |end| clock.unix_ms(end));
    let reports: Vec<PauseReport> = live
        .iter()
        .map(|a| {
            let end = end_ms(&a.member);
            let new = end > now_ms && end > a.lease.pushed.load(Ordering::Relaxed);
            PauseReport {
                key: a.lease.key.clone(),
                until: if new { end } else { 0 },
            }
        })
        .collect();
    let stored = bounded(settings.timeout, inner.store.pauses(now_ms, &reports)).await?;
    if stored.len() != live.len() {
        return Err(StoreError::new(StoreErrorKind::Protocol));
    }
    for ((a, report), until) in live.iter().zip(&reports).zip(stored) {
        let pushed = &a.lease.pushed;
        pushed.fetch_max(until.max(report.until), Ordering::Relaxed);
        if until > now_ms && until > end_ms(&a.member) {
            a.member.pause(clock.instant(until));
        }
    }
    if !lease_due {
        return Ok(());
    }
    let counts: Vec<KeyCounts> = live
        .iter()
        .map(|a| {
            let lease = &a.lease;
            let (firsts, spent) = lease.take_counts();
            let slot_ms = (lease.numbers.window.as_millis() / 10).max(1) as u64;
            KeyCounts {
                key: lease.key.clone(),
                firsts,
                spent,
                slot_ms,
                slots: 10,
            }
        })
        .collect();
    let report = LeaseReport {
        replica: inner.replica,
        now_ms,
        replica_ttl_ms: (settings.lease_every * 3).as_millis() as u64,
        counts,
    };
    let totals = match bounded(settings.timeout, inner.store.totals(&report)).await {
        Ok(totals) if totals.len() == live.len() => totals,
        failed => {
            for (a, c) in live.iter().zip(&report.counts) {
                a.lease.restore_counts(c.firsts, c.spent);
            }
            return Err(failed
                .err()
                .unwrap_or(StoreError::new(StoreErrorKind::Protocol)));
        }
    };
    // A lease holds until a little after the next one is due, so a late tick
    // never drops an account to its local view; a failed exchange revokes it.
    let until = later(Instant::now(), settings.lease_every * 2);
    for ((a, c), totals) in live.iter_mut().zip(&report.counts).zip(totals) {
        let lease = &a.lease;
        let weight = a.joined.add(now, c.firsts, lease.numbers.window);
        lease.grant(lease_units(totals, weight, lease.numbers), until);
    }
    Ok(())
}

/// `call`, failed with [`StoreErrorKind::Timeout`] after `limit`.
async fn bounded<T>(
    limit: Duration,
    call: impl std::future::Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    timeout(limit, call)
        .await
        .unwrap_or(Err(StoreError::new(StoreErrorKind::Timeout)))
}
