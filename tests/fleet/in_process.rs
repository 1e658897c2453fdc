//! The fleet's exchange on tokio's paused clock, through the in-process store:
//! pauses shared forward-only, one leased budget, and failing open (no
//! redis-server needed).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::{sleep, Instant};

use backstop::budget::{BudgetPolicy, OriginAccount};
use backstop::fleet::*;

const MS: Duration = Duration::from_millis(1);

/// A store that fails while `down` is set, else answers as `InProcess`.
#[derive(Debug, Default)]
struct Flaky {
    store: InProcess,
    down: AtomicBool,
}

impl Flaky {
    fn check(&self) -> Result<(), StoreError> {
        match self.down.load(Ordering::Relaxed) {
            true => Err(StoreError::new(StoreErrorKind::Unavailable)),
            false => Ok(()),
        }
    }
}

impl FleetStore for Flaky {
    fn pauses<'a>(&'a self, now_ms: u64, pauses: &'a [PauseReport]) -> StoreFuture<'a, Vec<u64>> {
        match self.check() {
            Ok(()) => self.store.pauses(now_ms, pauses),
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }

    fn totals<'a>(&'a self, report: &'a LeaseReport) -> StoreFuture<'a, Vec<Totals>> {
        match self.check() {
            Ok(()) => self.store.totals(report),
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }
}

/// One replica's account, with a budget of no ratio and a floor of
/// `floor_per_second` retries a second over a 10 s window, in a fleet over
/// `store`.
fn replica<S: FleetStore>(
    store: &Arc<S>,
    floor_per_second: f64,
    fleet: FleetBuilder,
) -> OriginAccount {
    let _ = store;
    let budget = BudgetPolicy::builder()
        .ratio(0.0)
        .min_per_second(floor_per_second)
        .fleet(fleet.build().unwrap())
        .build()
        .unwrap();
    budget.account()
}

fn spend_all(account: &OriginAccount) -> u64 {
    let mut n = 0;
    while account.try_withdraw() {
        n += 1;
    }
    n
}

#[tokio::test(start_paused = true)]
async fn a_pause_reaches_every_replica_within_one_refresh() {
    let store = Arc::new(InProcess::new());
    // Both exchange every 50 ms, b first at each tick.
    let b = replica(&store, 10.0, Fleet::builder(store.clone()));
    let a = replica(&store, 10.0, Fleet::builder(store.clone()));
    // Just after their exchange at 100 ms: the pause is pushed at once, not at
    // a's next refresh (after b's, at 150 ms), so b takes it in at 150 ms.
    sleep(101 * MS).await;
    let until = Instant::now() + Duration::from_secs(5);
    a.pause(until);
    assert_eq!(b.paused_until(), None, "nothing is read on the call's path");
    sleep(50 * MS).await;
    let shared = b
        .paused_until()
        .expect("b learned a's pause within one refresh");
    assert!(shared.abs_diff_ms(until) <= 1, "to the millisecond");
}

#[tokio::test(start_paused = true)]
async fn no_replica_shortens_another_replicas_pause() {
    let store = Arc::new(InProcess::new());
    let a = replica(&store, 10.0, Fleet::builder(store.clone()));
    let b = replica(&store, 10.0, Fleet::builder(store.clone()));
    let long = Instant::now() + Duration::from_secs(8);
    a.pause(long);
    sleep(100 * MS).await;
    b.pause(Instant::now() + Duration::from_secs(2));
    sleep(200 * MS).await;
    for account in [&a, &b] {
        let until = account.paused_until().expect("paused");
        assert!(until.abs_diff_ms(long) <= 1, "the longer pause stands");
    }
    // And it ends for everyone when it ends.
    sleep(Duration::from_secs(8)).await;
    assert_eq!(a.paused_until(), None);
    assert_eq!(b.paused_until(), None);
}

#[tokio::test(start_paused = true)]
async fn twenty_replicas_lease_one_floor() {
    let store = Arc::new(InProcess::new());
    // A floor of 2 a second over 10 s: 20 retries for the whole fleet.
    let replicas: Vec<_> = (0..20)
        .map(|_| replica(&store, 2.0, Fleet::builder(store.clone())))
        .collect();
    // Alone, each would spend its own 20.
    assert_eq!(replicas[0].available(), 20);
    sleep(1500 * MS).await;
    let spent: u64 = replicas.iter().map(spend_all).sum();
    assert!(spent <= 20, "one floor for the fleet, spent {spent}");
    assert!(spent >= 19, "the fleet may spend its floor, spent {spent}");
    // The next leases know what was spent: nothing is left this window.
    sleep(1500 * MS).await;
    let again: u64 = replicas.iter().map(spend_all).sum();
    assert_eq!(again, 0);
}

#[tokio::test(start_paused = true)]
async fn a_store_down_leaves_every_replica_to_itself_and_sharing_resumes() {
    let store = Arc::new(Flaky::default());
    let events = Arc::new(Mutex::new(Vec::new()));
    let told = events.clone();
    let fleet =
        Fleet::builder(store.clone()).on_event(move |e: &FleetEvent| told.lock().unwrap().push(*e));
    let a = replica(&store, 2.0, fleet);
    let b = replica(&store, 2.0, Fleet::builder(store.clone()));
    sleep(1500 * MS).await;
    // Two replicas share one floor of 20.
    assert!(a.available() <= 10, "leased: {}", a.available());
    store.down.store(true, Ordering::Relaxed);
    sleep(100 * MS).await;
    // Its own floor at once, its own pauses.
    assert_eq!(a.available(), 20);
    assert_eq!(
        *events.lock().unwrap(),
        [FleetEvent::Stale {
            kind: StoreErrorKind::Unavailable
        }]
    );
    let until = Instant::now() + Duration::from_secs(5);
    a.pause(until);
    assert!(a.paused_until().is_some());
    sleep(Duration::from_secs(1)).await;
    assert_eq!(b.paused_until(), None, "not shared while the store is down");
    store.down.store(false, Ordering::Relaxed);
    sleep(1200 * MS).await;
    assert!(matches!(
        events.lock().unwrap()[..],
        [FleetEvent::Stale { .. }, FleetEvent::Fresh { stale_for }] if stale_for >= Duration::from_secs(1)
    ));
    // The pause learned while the store was down is shared once it is back.
    let shared = b.paused_until().expect("shared after the store came back");
    assert!(shared.abs_diff_ms(until) <= 1);
    assert!(a.available() <= 10, "leased again: {}", a.available());
}

#[test]
fn bad_settings_are_refused() {
    let bad = [
        Fleet::builder(InProcess::new()).refresh(Duration::ZERO),
        Fleet::builder(InProcess::new()).lease_every(Duration::from_secs(3600)),
        Fleet::builder(InProcess::new()).timeout(Duration::ZERO),
        Fleet::builder(InProcess::new())
            .refresh(Duration::from_secs(2))
            .lease_every(Duration::from_secs(1)),
    ];
    let settings: Vec<_> = bad
        .into_iter()
        .map(|b| b.build().unwrap_err().setting())
        .collect();
    assert_eq!(
        settings,
        ["refresh", "lease_every", "timeout", "lease_every"]
    );
}

trait Near {
    fn abs_diff_ms(self, other: Instant) -> u128;
}

impl Near for Instant {
    fn abs_diff_ms(self, other: Instant) -> u128 {
        let d = if self > other {
            self - other
        } else {
            other - self
        };
        d.as_millis()
    }
}

#[tokio::test(start_paused = true)]
async fn the_task_ends_with_the_last_account_and_fleet() {
    let metrics = tokio::runtime::Handle::current().metrics();
    let store = Arc::new(InProcess::new());
    let a = replica(&store, 1.0, Fleet::builder(store.clone()));
    sleep(100 * MS).await;
    assert_eq!(metrics.num_alive_tasks(), 1, "the fleet's task runs");
    drop(a);
    sleep(100 * MS).await;
    assert_eq!(
        metrics.num_alive_tasks(),
        0,
        "and ends with its last account"
    );
}
