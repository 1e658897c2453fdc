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

use std::hint::black_box;

use backstop::budget::BudgetPolicy;
use backstop::fleet::{Fleet, FleetStore, InProcess, RedisStore};
use backstop::test_util::RedisServer;
use backstop::{CircuitBreakerPolicy, IdempotencyKeyLayer, ProgressTrackingLayer, RetryPolicy};
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
    let layer = backstop::Backstop::builder()
        .retry(RetryPolicy::default())
        .idempotency_key(IdempotencyKeyLayer::new())
        .circuit_breaker(CircuitBreakerPolicy::default())
        .budget(budget)
        .build()
        .unwrap();
    tower::ServiceBuilder::new()
        .layer(layer)
        .layer(ProgressTrackingLayer::new())
        .service(Trivial)
}

fn in_fleet(store: impl FleetStore) -> BudgetPolicy {
    let fleet = Fleet::builder(store).build().unwrap();
    BudgetPolicy::builder().fleet(fleet).build().unwrap()
}

fn fleet(c: &mut Criterion) {
    let redis = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let _guard = rt.enter();
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
