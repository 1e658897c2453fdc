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
//!   progress together, with the retry layer doing the key's, breaker's and
//!   budget's work itself (`RetryLayer::circuit_breaker` and the like).
//! - `overhead/backstop_layers`: the same five as separate layers.
//!
//! On a shared or noisy machine the time of a whole call drifts between benchmarks
//! run one after the other, which blurs differences of a few tens of nanoseconds. The
//! `added` group measures what a stack adds over `bare` with the two interleaved in
//! short runs, so that drift falls on both: `added/tower_retry`,
//! `added/backstop_retry`, `added/backstop_retry_no_opinion`,
//! `added/backstop_stack` and `added/backstop_layers` report nanoseconds added per
//! call. After them, one run
//! interleaves tower's retry, backstop's retry and the whole stack in rounds and
//! prints each one's median added time and its ratio to `tower_retry`, measured in
//! that same run (`cargo bench --bench overhead -- ratios` runs only that):
//!
//! ```text
//! added stack=backstop_stack ns=250.0 ratio_to_tower_retry=1.90
//! ```
//!
//! The same run also measures `floor_retry` and `floor_stack`, the floor of
//! `benches/common/floor.rs`: hand-written layers that do only the work any correct
//! implementation of this design must do on the success path, so the ratios of
//! `backstop_retry` and `backstop_stack` can be read against what cannot be avoided,
//! and `floor_fused`, the floor of a fused design (`benches/common/floor_fused.rs`:
//! one guard layer doing the key, breaker, budget and retry work in one future, over
//! the floor's progress layer), so `floor_stack` can be read against what fusing the
//! layers could save at best.
//!
//! One process's ratios are not enough on their own: with the same binary,
//! `tower_retry`'s own time moves by a third from one process to the next (where
//! the allocator and the stack put things), and every ratio moves with it. So
//! `ratios` runs that measurement in `RATIOS_PROCESSES` fresh processes (default 9),
//! prints each one's lines, then each stack's median over the processes and their
//! range:
//!
//! ```text
//! ratios stack=backstop_stack ns=480.0 ratio_to_tower_retry=3.40 range=2.90..3.60 processes=9
//! ```

use std::hint::black_box;

use backstop::{ProgressTrackingLayer, RetryLayer, RetryPolicy};
use criterion::{criterion_group, Criterion};
use tower::{Service, ServiceExt};

mod common;

use common::ratios::{added_over_bare, measure, Measure};

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

    // The same five as separate layers.
    let backstop_layers = common::backstop_layers();
    group.bench_function("backstop_layers", |b| {
        b.to_async(&rt).iter(|| {
            let mut svc = backstop_layers.clone();
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
    added.bench_function("backstop_layers", |b| {
        b.iter_custom(|iters| added_over_bare(&rt, iters, &backstop_layers))
    });
    added.finish();
}

/// Set in the processes `ratios` starts, each of which measures once.
const CHILD: &str = "BACKSTOP_RATIOS_CHILD";

/// Runs [`ratios_once`] in fresh processes and prints each stack's median over them
/// (see [`common::ratios::over_processes`]).
fn ratios() {
    if std::env::var_os(CHILD).is_some() {
        ratios_once();
        return;
    }
    common::ratios::over_processes(CHILD, &["ratios"]);
}

/// One process's measurement: every stack interleaved in rounds, each one's median
/// added time and its ratio to `tower_retry`'s (see [`common::ratios::interleaved`]).
fn ratios_once() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let tower_retry = common::tower_retry();
    let backstop_retry = common::backstop_retry(RetryPolicy::default());
    let backstop_stack = common::backstop_stack();
    let backstop_layers = common::backstop_layers();
    let floor_retry = common::floor::retry();
    let floor_stack = common::floor::stack();
    let floor_fused = common::floor_fused::fused();
    let stacks: [(&str, Measure<'_>); 7] = [
        ("tower_retry", measure(&rt, &tower_retry)),
        ("backstop_retry", measure(&rt, &backstop_retry)),
        ("backstop_stack", measure(&rt, &backstop_stack)),
        ("backstop_layers", measure(&rt, &backstop_layers)),
        ("floor_retry", measure(&rt, &floor_retry)),
        ("floor_stack", measure(&rt, &floor_stack)),
        ("floor_fused", measure(&rt, &floor_fused)),
    ];
    common::ratios::interleaved(&stacks);
}

criterion_group!(benches, overhead);

fn main() {
    benches();
    // The interleaved summary runs with the `added` group, or alone with `ratios`.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    if args.is_empty()
        || args
            .iter()
            .any(|a| "added".contains(a.as_str()) || a == "ratios")
    {
        ratios();
    }
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
}
