//! Replicas sharing through a real `redis-server` on 127.0.0.1 (started by each
//! test, killed on drop): the origin pause over the wire, one leased budget, and
//! a Redis outage that no call notices.

#[path = "../support/mod.rs"]
mod support;

mod in_process;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use backstop::budget::{BudgetPolicy, OriginAccount};
use backstop::fleet::{Fleet, FleetEvent, RedisStore};
use backstop::test_util::{Protocol, RedisServer, Reply, Upstream};
use backstop::{Backstop, ProgressTrackingLayer};
use tokio::time::{sleep, timeout, Instant};
use tower::util::BoxCloneService;
use tower::{Service, ServiceBuilder, ServiceExt};

use support::wire::{empty, transport, Body};

type Client =
    BoxCloneService<http::Request<Body>, http::Response<hyper::body::Incoming>, backstop::Error>;

/// The test's own redis-server; the test fails (never skips) when it is missing.
fn redis() -> RedisServer {
    RedisServer::start().unwrap_or_else(|e| panic!("{e}"))
}

/// One replica's fleet, sharing through `redis` under `prefix`, telling its
/// events to `events`.
fn fleet(redis: &RedisServer, prefix: &str, events: Option<&Events>) -> Fleet {
    let store = RedisStore::new(&redis.url()).unwrap().prefix(prefix);
    let mut builder = Fleet::builder(store).refresh(Duration::from_millis(20));
    if let Some(events) = events {
        let events = events.clone();
        builder = builder.on_event(move |e: &FleetEvent| events.lock().unwrap().push(*e));
    }
    builder.build().unwrap()
}

type Events = Arc<Mutex<Vec<FleetEvent>>>;

/// A replica's stack: backstop with a budget in `fleet`, over hyper.
fn replica(fleet: Fleet) -> (backstop::BackstopLayer, Client) {
    let budget = BudgetPolicy::builder().fleet(fleet).build().unwrap();
    let layer = Backstop::builder().budget(budget).build().unwrap();
    let client = ServiceBuilder::new()
        .layer(layer.clone())
        .layer(ProgressTrackingLayer::new())
        .service(transport(Protocol::Http1));
    (layer, BoxCloneService::new(client))
}

fn get(up: &Upstream) -> http::Request<Body> {
    http::Request::get(up.uri("/")).body(empty()).unwrap()
}

fn account(layer: &backstop::BackstopLayer, up: &Upstream) -> OriginAccount {
    layer.budget_account(&get(up).into_parts().0).unwrap()
}

/// Waits (at most `limit`) until `done`; false if it never was.
async fn within(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    timeout(limit, async {
        while !done() {
            sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_one_replica_meets_holds_the_other_replicas() {
    let redis = redis();
    let up = Upstream::builder()
        .script([Reply::status(429).header("retry-after", "2")])
        .start()
        .await
        .unwrap();
    let (layer_a, mut a) = replica(fleet(&redis, "pause", None));
    let (layer_b, mut b) = replica(fleet(&redis, "pause", None));
    // B knows the origin (and its account joins the fleet) before the 429.
    let b_account = account(&layer_b, &up);
    let _ = account(&layer_a, &up);
    let first = tokio::spawn({
        let req = get(&up);
        async move { a.ready().await?.call(req).await }
    });
    assert!(
        within(Duration::from_secs(1), || b_account
            .paused_until()
            .is_some())
        .await,
        "the pause reached the other replica"
    );
    let learned = Instant::now();
    assert_eq!(
        up.requests().len(),
        1,
        "only the call that met the 429 reached the origin"
    );
    let until = b_account.paused_until().unwrap();
    assert!(
        until > learned + Duration::from_millis(1500),
        "the server's whole pause"
    );
    // B's call is held until the pause ends, then goes.
    let res = timeout(Duration::from_secs(5), async {
        b.ready().await?.call(get(&up)).await
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(res.status(), 200);
    assert!(Instant::now() >= until, "held for the shared pause");
    let res = timeout(Duration::from_secs(5), first)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(up.requests().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_replicas_lease_one_floor() {
    let redis = redis();
    // No ratio, a floor of 1 a second over 10 s: 10 retries alone, 10 for the fleet.
    let accounts: Vec<OriginAccount> = (0..5)
        .map(|_| {
            let budget = BudgetPolicy::builder()
                .ratio(0.0)
                .min_per_second(1.0)
                .fleet(fleet(&redis, "lease", None))
                .build()
                .unwrap();
            budget.account()
        })
        .collect();
    assert_eq!(accounts[0].available(), 10, "alone until the first lease");
    let leased = within(Duration::from_secs(3), || {
        accounts.iter().map(OriginAccount::available).sum::<u64>() <= 10
    })
    .await;
    assert!(leased, "every replica leased its share");
    let mut spent = 0;
    for account in &accounts {
        while account.try_withdraw() {
            spent += 1;
        }
    }
    assert!(spent <= 10, "one floor for the fleet, spent {spent}");
    assert!(spent >= 5, "the fleet may spend its floor, spent {spent}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_mid_run_fails_and_holds_no_call_and_sharing_resumes() {
    let mut redis = redis();
    let up = Upstream::builder().start().await.unwrap();
    let events: Events = Arc::default();
    let (layer_a, a) = replica(fleet(&redis, "outage", Some(&events)));
    let (layer_b, _b) = replica(fleet(&redis, "outage", None));
    // The pause goes to another origin, so the calls to `up` run on.
    let other = |layer: &backstop::BackstopLayer| {
        let head = http::Request::get("http://other.test/").body(()).unwrap();
        layer.budget_account(&head.into_parts().0).unwrap()
    };
    let (a_account, b_account) = (other(&layer_a), other(&layer_b));
    let mut failed = 0;
    let mut waited = 0;
    let mut calls = 0;
    let run = |a: Client, for_: Duration| {
        let up = &up;
        async move {
            let end = Instant::now() + for_;
            let (mut f, mut w, mut n) = (0, 0, 0);
            while Instant::now() < end {
                let start = Instant::now();
                let call = a.clone().oneshot(get(up));
                match timeout(Duration::from_secs(1), call).await {
                    Ok(Ok(res)) if res.status() == 200 => {}
                    _ => f += 1,
                }
                if start.elapsed() > Duration::from_millis(100) {
                    w += 1;
                }
                n += 1;
            }
            (f, w, n)
        }
    };
    let mut add = |(f, w, n): (u32, u32, u32)| {
        failed += f;
        waited += w;
        calls += n;
    };
    add(run(a.clone(), Duration::from_millis(300)).await);
    redis.kill();
    add(run(a.clone(), Duration::from_millis(700)).await);
    assert!(
        within(Duration::from_secs(1), || !events
            .lock()
            .unwrap()
            .is_empty())
        .await,
        "the fleet view went stale"
    );
    assert!(matches!(
        events.lock().unwrap()[0],
        FleetEvent::Stale { .. }
    ));
    // Decisions are local: a pause learned now is not shared yet.
    a_account.pause(Instant::now() + Duration::from_secs(3));
    redis.restart().unwrap();
    add(run(a.clone(), Duration::from_millis(300)).await);
    assert!(
        within(Duration::from_secs(5), || events.lock().unwrap().len() == 2).await,
        "the fleet view came back by itself"
    );
    assert!(matches!(
        events.lock().unwrap()[1],
        FleetEvent::Fresh { .. }
    ));
    // Sharing resumed: the pause learned while Redis was down reaches B.
    assert!(
        within(Duration::from_secs(1), || b_account
            .paused_until()
            .is_some())
        .await
    );
    assert!(calls > 10, "calls ran throughout: {calls}");
    assert_eq!((failed, waited), (0, 0), "of {calls} calls");
}
