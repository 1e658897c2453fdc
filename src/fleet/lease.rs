//! One account's share of the fleet: what it counts for its next report, the
//! allowance it leased last, and the arithmetic of that allowance.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::store::Totals;
use super::Fleet;
use crate::policy::later;

/// The numbers of the budget an account keeps, in its units.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Numbers {
    /// Units a first attempt deposits.
    pub(crate) deposit: i64,
    /// The floor of the window, in units (one floor for the whole fleet).
    pub(crate) floor: i64,
    /// Units of one retry.
    pub(crate) unit: i64,
    /// The window the budget counts over.
    pub(crate) window: Duration,
}

/// What one replica may spend until its next lease, in units: the fleet's
/// balance over the window (one floor, plus the ratio of the fleet's first
/// attempts, less the fleet's spent retries), weighted by this replica's share
/// of the fleet's first attempts. Each replica counts one extra first attempt in
/// its weight, so an idle replica still gets a share of the floor, and the
/// weights of the live replicas add up to one: the fleet together may spend its
/// balance, never more.
pub(crate) fn lease_units(totals: Totals, own_firsts: u64, numbers: Numbers) -> i64 {
    let Numbers {
        deposit,
        floor,
        unit,
        ..
    } = numbers;
    let balance = i128::from(floor) + i128::from(deposit) * i128::from(totals.firsts)
        - i128::from(unit) * i128::from(totals.spent);
    if balance <= 0 {
        return 0;
    }
    let replicas = i128::from(totals.replicas.max(1));
    let whole = i128::from(totals.firsts) + replicas;
    // The store may not have counted this replica's last report yet: a weight
    // is never over one.
    let own = (i128::from(own_firsts) + 1).min(whole);
    (balance * own / whole).min(i128::from(i64::MAX)) as i64
}

/// An account's share of its fleet. The call's path touches only atomics: a
/// first attempt counts itself, a retry spends from the lease while it is fresh.
#[derive(Debug)]
pub(crate) struct Lease {
    /// The fleet, kept while any of its accounts lives (its task ends with it).
    _fleet: Fleet,
    /// The store's key: a hash of the partition's key.
    pub(super) key: String,
    pub(super) numbers: Numbers,
    /// First attempts since the last report.
    firsts: AtomicU64,
    /// Retries spent since the last report, less those given back.
    spent: AtomicI64,
    /// Units leased and not yet spent.
    units: AtomicI64,
    /// When the lease ends, in nanoseconds after `base`; 0 when there is none
    /// (the account decides alone).
    expires: AtomicU64,
    base: Instant,
    /// The latest pause (Unix milliseconds) pushed to the store or learned
    /// from it, so a pause is pushed once.
    pub(super) pushed: AtomicU64,
}

impl Lease {
    pub(super) fn new(fleet: Fleet, key: String, numbers: Numbers) -> Self {
        Lease {
            _fleet: fleet,
            key,
            numbers,
            firsts: AtomicU64::new(0),
            spent: AtomicI64::new(0),
            units: AtomicI64::new(0),
            expires: AtomicU64::new(0),
            base: Instant::now(),
            pushed: AtomicU64::new(0),
        }
    }

    /// Says the account learned a pause here: the fleet's task pushes it now,
    /// not at its next refresh.
    pub(crate) fn learned_pause(&self) {
        self._fleet.0.learned.notify_one();
    }

    /// Counts one first attempt for the next report. Out of line: a stack
    /// without a fleet carries none of it on its success path.
    #[inline(never)]
    pub(crate) fn count_first(&self) {
        self.firsts.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether the lease holds at `now`: granted, and not revoked or run out
    /// of time since.
    #[inline]
    pub(crate) fn fresh(&self, now: Instant) -> bool {
        let expires = self.expires.load(Ordering::Acquire);
        expires != 0 && now.saturating_duration_since(self.base).as_nanos() < u128::from(expires)
    }

    /// Spends one retry from the lease if it holds a whole one.
    pub(crate) fn take(&self) -> bool {
        let unit = self.numbers.unit;
        let taken = self
            .units
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                (u >= unit).then_some(u - unit)
            })
            .is_ok();
        if taken {
            self.spent.fetch_add(1, Ordering::Relaxed);
        }
        taken
    }

    /// Gives back one retry spent and not sent.
    pub(crate) fn give_back(&self) {
        self.spent.fetch_sub(1, Ordering::Relaxed);
        self.units.fetch_add(self.numbers.unit, Ordering::Relaxed);
    }

    /// Whole retries left in the lease.
    pub(crate) fn available(&self) -> u64 {
        (self.units.load(Ordering::Relaxed).max(0) / self.numbers.unit) as u64
    }

    /// Takes the counts since the last report.
    pub(super) fn take_counts(&self) -> (u64, u64) {
        let firsts = self.firsts.swap(0, Ordering::Relaxed);
        let spent = self.spent.swap(0, Ordering::Relaxed);
        (firsts, spent.max(0) as u64)
    }

    /// Puts back counts a failed report did not deliver.
    pub(super) fn restore_counts(&self, firsts: u64, spent: u64) {
        self.firsts.fetch_add(firsts, Ordering::Relaxed);
        self.spent.fetch_add(spent as i64, Ordering::Relaxed);
    }

    /// Grants `units` until `until`, in place of the last lease.
    pub(super) fn grant(&self, units: i64, until: Instant) {
        self.units.store(units, Ordering::Relaxed);
        let nanos = until.saturating_duration_since(self.base).as_nanos();
        self.expires.store(
            nanos.clamp(1, u128::from(u64::MAX)) as u64,
            Ordering::Release,
        );
    }

    /// Ends the lease at once: the account decides alone until the next grant.
    pub(super) fn revoke(&self) {
        self.expires.store(0, Ordering::Release);
    }
}

/// Unix milliseconds from tokio's clock: the wall clock read once, then moved
/// by tokio's `Instant` (so a paused clock moves it too).
#[derive(Clone, Copy, Debug)]
pub(super) struct Clock {
    base: Instant,
    base_ms: u64,
}

impl Clock {
    pub(super) fn now() -> Self {
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Clock {
            base: Instant::now(),
            base_ms: wall.as_millis().min(u128::from(u64::MAX)) as u64,
        }
    }

    /// `at` in Unix milliseconds.
    pub(super) fn unix_ms(&self, at: Instant) -> u64 {
        if at >= self.base {
            let ms = (at - self.base).as_millis().min(u128::from(u64::MAX)) as u64;
            self.base_ms.saturating_add(ms)
        } else {
            let ms = (self.base - at).as_millis().min(u128::from(u64::MAX)) as u64;
            self.base_ms.saturating_sub(ms)
        }
    }

    /// Unix milliseconds `ms` as an `Instant`.
    pub(super) fn instant(&self, ms: u64) -> Instant {
        match ms.checked_sub(self.base_ms) {
            Some(after) => later(self.base, Duration::from_millis(after)),
            None => self
                .base
                .checked_sub(Duration::from_millis(self.base_ms - ms))
                .unwrap_or(self.base),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UNIT: i64 = 1_000_000;

    fn numbers(ratio: f64, floor: f64) -> Numbers {
        Numbers {
            deposit: (ratio * UNIT as f64) as i64,
            floor: (floor * UNIT as f64) as i64,
            unit: UNIT,
            window: Duration::from_secs(10),
        }
    }

    fn totals(firsts: u64, spent: u64, replicas: u64) -> Totals {
        Totals {
            firsts,
            spent,
            replicas,
        }
    }

    #[test]
    fn one_floor_for_the_whole_fleet() {
        // Twenty idle replicas share one floor of 100 retries: five each.
        let n = numbers(0.2, 100.0);
        let each = lease_units(totals(0, 0, 20), 0, n);
        assert_eq!(each, 5 * UNIT);
        assert_eq!(each * 20, 100 * UNIT);
    }

    #[test]
    fn shares_follow_traffic_and_add_up_to_the_balance() {
        // 400 first attempts in the window from 20 replicas: the balance is
        // 100 + 0.2 · 400 = 180 retries; a replica with 20 of them gets 1/20.
        let n = numbers(0.2, 100.0);
        let t = totals(400, 0, 20);
        assert_eq!(lease_units(t, 20, n), 9 * UNIT);
        // A busier replica gets more; their weights never pass one.
        assert_eq!(lease_units(t, 209, n), 90 * UNIT);
        assert_eq!(lease_units(t, 10_000, n), 180 * UNIT);
    }

    #[test]
    fn spent_retries_leave_the_balance() {
        let n = numbers(0.2, 100.0);
        assert_eq!(lease_units(totals(400, 170, 1), 400, n), 10 * UNIT);
        assert_eq!(lease_units(totals(400, 180, 1), 400, n), 0);
        assert_eq!(lease_units(totals(400, 500, 1), 400, n), 0);
    }

    #[test]
    fn ratio_exact_without_floor() {
        // Ratio 0.3 and no floor: exactly 3 retries per 10 first attempts.
        let n = numbers(0.3, 0.0);
        assert_eq!(lease_units(totals(10, 0, 1), 10, n), 3 * UNIT);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_spends_until_empty_and_ends_with_its_time() {
        let fleet = Fleet::builder(crate::fleet::InProcess::new())
            .build()
            .unwrap();
        let lease = Lease::new(fleet, "k".into(), numbers(0.2, 10.0));
        let now = Instant::now();
        assert!(!lease.fresh(now), "no lease before the first grant");
        lease.grant(2 * UNIT, now + Duration::from_secs(1));
        assert!(lease.fresh(now));
        assert!(lease.take() && lease.take() && !lease.take());
        lease.give_back();
        assert_eq!(lease.available(), 1);
        assert_eq!(lease.take_counts(), (0, 1));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(!lease.fresh(Instant::now()), "a lease not renewed runs out");
        lease.grant(UNIT, Instant::now() + Duration::from_secs(1));
        lease.revoke();
        assert!(!lease.fresh(Instant::now()));
    }

    #[tokio::test(start_paused = true)]
    async fn the_clock_round_trips_to_the_millisecond() {
        let clock = Clock::now();
        let at = Instant::now() + Duration::from_millis(1234);
        let ms = clock.unix_ms(at);
        assert_eq!(clock.unix_ms(clock.instant(ms)), ms);
        tokio::time::advance(Duration::from_millis(500)).await;
        assert_eq!(clock.unix_ms(Instant::now()), clock.unix_ms(at) - 734);
    }
}
