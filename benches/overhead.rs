//! What the retry layer costs on the success path, over a trivial inner service.
//!
//! Each iteration builds a GET request with two headers and sends it; the request's
//! construction is the same in every benchmark, so the differences are the layers'.
//!
//! `cargo bench --bench overhead`
//!
//! - `overhead/bare`: the inner service alone.
//! - `overhead/tower_retry`: tower's `Retry` with a policy that clones the request.
//! - `overhead/backstop_retry`: backstop's `RetryLayer` with the default policy.
//! - `overhead/backstop_retry_no_opinion`: the same with a classifier of your own
//!   that has no opinion (the cost of consulting one).
//! - `overhead/backstop_retry_progress`: the same over `ProgressTrackingLayer`.
//! - `overhead/backstop_stack`: idempotency key, circuit breaker, budget, retry and
//!   progress layers together.
//!
//! On a shared or noisy machine the time of a whole call drifts between benchmarks
//! run one after the other, which blurs differences of a few tens of nanoseconds. The
//! `added` group measures what a stack adds over `bare` with the two interleaved in
//! short runs, so that drift falls on both: `added/tower_retry`,
//! `added/backstop_retry`, `added/backstop_retry_no_opinion` and
//! `added/backstop_stack` report nanoseconds added per call.

use std::hint::black_box;
use std::time::{Duration, Instant};

use backstop::{ProgressTrackingLayer, RetryLayer, RetryPolicy};
use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion};
use http::{Request, Response};
use http_body_util::Full;
use tower::{Service, ServiceExt};

mod common;

use common::{request, Trivial};

fn overhead(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("overhead");

    let bare = common::bare();
    group.bench_function("bare", |b| {
        b.to_async(&rt).iter(|| {
            let mut svc = bare.clone();
            async move { black_box(svc.ready().await.unwrap().call(request()).await.unwrap()) }
        })
    });

    let tower_retry = common::tower_retry();
    group.bench_function("tower_retry", |b| {
        b.to_async(&rt).iter(|| {
            let mut svc = tower_retry.clone();
            async move { black_box(svc.ready().await.unwrap().call(request()).await.unwrap()) }
        })
    });

    let backstop_retry = common::backstop_retry(RetryPolicy::default());
    group.bench_function("backstop_retry", |b| {
        b.to_async(&rt).iter(|| {
            let mut svc = backstop_retry.clone();
            async move { black_box(svc.ready().await.unwrap().call(request()).await.unwrap()) }
        })
    });

    // The same with a classifier that has no opinion: one dynamic call per answer.
    let no_opinion = backstop::policy::Rules::builder()
        .classifier(backstop::policy::classify_fn(
            |_: backstop::policy::Observed<'_>| backstop::policy::Verdict::NoOpinion,
        ))
        .build()
        .unwrap();
    let backstop_retry_no_opinion =
        common::backstop_retry(RetryPolicy::builder().rules(no_opinion).build().unwrap());
    group.bench_function("backstop_retry_no_opinion", |b| {
        b.to_async(&rt).iter(|| {
            let mut svc = backstop_retry_no_opinion.clone();
            async move { black_box(svc.ready().await.unwrap().call(request()).await.unwrap()) }
        })
    });

    // The same with progress tracking beneath the retry layer: a GET carries no
    // progress record, so it passes straight through.
    let backstop_retry_progress = tower::ServiceBuilder::new()
        .layer(RetryLayer::new(RetryPolicy::default()))
        .layer(ProgressTrackingLayer::new())
        .service(Trivial);
    group.bench_function("backstop_retry_progress", |b| {
        b.to_async(&rt).iter(|| {
            let mut svc = backstop_retry_progress.clone();
            async move { black_box(svc.ready().await.unwrap().call(request()).await.unwrap()) }
        })
    });

    // The whole stack on the success path: key, breaker, budget, retry, progress.
    let backstop_stack = common::backstop_stack();
    group.bench_function("backstop_stack", |b| {
        b.to_async(&rt).iter(|| {
            let mut svc = backstop_stack.clone();
            async move { black_box(svc.ready().await.unwrap().call(request()).await.unwrap()) }
        })
    });

    group.finish();

    let mut added = c.benchmark_group("added");
    added.bench_function("tower_retry", |b| {
        b.iter_custom(|iters| added_over_bare(&rt, iters, &tower_retry))
    });
    added.bench_function("backstop_retry", |b| {
        b.iter_custom(|iters| added_over_bare(&rt, iters, &backstop_retry))
    });
    added.bench_function("backstop_retry_no_opinion", |b| {
        b.iter_custom(|iters| added_over_bare(&rt, iters, &backstop_retry_no_opinion))
    });
    added.bench_function("backstop_stack", |b| {
        b.iter_custom(|iters| added_over_bare(&rt, iters, &backstop_stack))
    });
    added.finish();
}

/// Calls `svc` and the bare service `iters` times each, alternating in runs of 64
/// calls, and returns the time `svc` took beyond the bare service's. A sample that a
/// pause made come out negative counts as one nanosecond (criterion refuses zero);
/// such a sample is an outlier that the analysis sets aside.
fn added_over_bare<S>(rt: &tokio::runtime::Runtime, iters: u64, svc: &S) -> Duration
where
    S: Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>> + Clone,
    S::Error: std::fmt::Debug,
{
    const RUN: u64 = 64;
    let bare = common::bare();
    let (mut with, mut without) = (Duration::ZERO, Duration::ZERO);
    let mut left = iters;
    while left > 0 {
        let n = left.min(RUN);
        left -= n;
        let start = Instant::now();
        for _ in 0..n {
            let mut svc = bare.clone();
            rt.block_on(async { black_box(svc.ready().await.unwrap().call(request()).await) })
                .unwrap();
        }
        without += start.elapsed();
        let start = Instant::now();
        for _ in 0..n {
            let mut svc = svc.clone();
            rt.block_on(async { black_box(svc.ready().await.unwrap().call(request()).await) })
                .unwrap();
        }
        with += start.elapsed();
    }
    with.saturating_sub(without).max(Duration::from_nanos(1))
}

criterion_group!(benches, overhead);
criterion_main!(benches);
