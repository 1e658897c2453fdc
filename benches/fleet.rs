//! The request path's cost with a fleet: the whole stack (key, breaker, budget,
//! retry, progress) over a trivial service, its budget without a fleet (the
//! default, every process on its own), in a fleet over the in-process store, and
//! in a fleet over a real `redis-server` on 127.0.0.1 (started here; install it
//! with `apt-get install redis-server`).
//!
//! ```text
//! cargo bench --bench fleet --features redis,test-util
//! ```
//!
//! A call never awaits the store: the fleet's task exchanges with it in the
//! background (every 50 ms), so the stacks differ by what a call touches locally
//! (one more relaxed atomic for a first attempt). The runtime has two workers,
//! so the task runs beside the calls, as in a service.
//!
//! It first prints how stale a replica's view of a pause is over Redis: two
//! replicas (two fleets, each with its own connection to the one `redis-server`,
//! the default 50 ms refresh), one pauses an origin, and the time until the other
//! sees the pause is measured, over 20 origins:
//!
//! ```text
//! fleet staleness samples=20 p50_ms=… max_ms=…
//! ```

use std::hint::black_box;

use backstop::budget::BudgetPolicy;
use backstop::fleet::{Fleet, FleetStore, InProcess, RedisStore};
use backstop::test_util::RedisServer;
use backstop::ProgressTrackingLayer;
use bytes::Bytes;
use criterion::{criterion_group, Criterion};
use http::{Request, Response};
use http_body_util::Full;
use tower::{Service, ServiceExt};

mod common;

use common::{request, Trivial};

/// The whole stack with `budget`.
fn stack(
    budget: BudgetPolicy,
) -> impl Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>, Error = backstop::Error> + Clone
{
    tower::ServiceBuilder::new()
        .layer(common::backstop_with(budget))
        .layer(ProgressTrackingLayer::new())
        .service(Trivial)
}

fn in_fleet(store: impl FleetStore) -> BudgetPolicy {
    let fleet = Fleet::builder(store).build().unwrap();
    BudgetPolicy::builder().fleet(fleet).build().unwrap()
}

/// How long a pause one replica sets takes to reach another over `redis`.
fn staleness(rt: &tokio::runtime::Runtime, redis: &RedisServer) {
    let replica = || {
        let store = RedisStore::new(&redis.url()).unwrap().prefix("staleness");
        backstop::BudgetLayer::new(in_fleet(store))
    };
    let (a, b) = (replica(), replica());
    let mut delays: Vec<std::time::Duration> = rt.block_on(async {
        let mut delays = Vec::new();
        for i in 0..20 {
            let uri = format!("http://o{i}.test/");
            let head = http::Request::get(&uri).body(()).unwrap().into_parts().0;
            // Both replicas know the origin (its account has joined each fleet).
            let (theirs, ours) = (a.account(&head), b.account(&head));
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            let set = tokio::time::Instant::now();
            theirs.pause(set + std::time::Duration::from_secs(5));
            while ours.paused_until().is_none() {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                assert!(
                    set.elapsed() < std::time::Duration::from_secs(5),
                    "never shared"
                );
            }
            delays.push(set.elapsed());
        }
        delays
    });
    delays.sort();
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1000.0;
    println!(
        "fleet staleness samples={} p50_ms={:.0} max_ms={:.0}",
        delays.len(),
        ms(delays[delays.len() / 2]),
        ms(delays[delays.len() - 1]),
    );
}

fn fleet(c: &mut Criterion) {
    let redis = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let _guard = rt.enter();
    staleness(&rt, &redis);
    let stacks = [
        ("no_fleet", BudgetPolicy::default()),
        ("in_process_store", in_fleet(InProcess::new())),
        (
            "redis_store",
            in_fleet(RedisStore::new(&redis.url()).unwrap().prefix("bench")),
        ),
    ];
    let mut group = c.benchmark_group("fleet");
    for (name, budget) in stacks {
        let svc = stack(budget);
        // The first call creates the origin's account (and starts the fleet's
        // task); let the first exchanges land before measuring.
        rt.block_on(async {
            svc.clone().oneshot(request()).await.unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
        });
        group.bench_function(name, |b| {
            b.to_async(&rt).iter(|| {
                let svc = svc.clone();
                async move { black_box(svc.oneshot(request()).await.unwrap()) }
            })
        });
    }
    group.finish();
    drop(redis);
}

criterion_group!(benches, fleet);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
