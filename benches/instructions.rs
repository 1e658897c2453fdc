//! A driver for counting instructions per call on the success path, which stays
//! exact on a noisy machine where timings do not.
//!
//! It sends `N` GET requests through one stack over a trivial inner service (the
//! same stacks as `benches/overhead.rs`). Run it under callgrind twice, with two
//! values of `N`, and divide the difference of the totals by the difference of the
//! `N`s: start-up costs cancel out.
//!
//! ```text
//! cargo bench --bench instructions --no-run
//! for n in 1000 11000; do
//!   INSTR_STACK=backstop_stack INSTR_CALLS=$n valgrind --tool=callgrind \
//!     --callgrind-out-file=/dev/null target/release/deps/instructions-* 2>&1 | grep refs
//! done
//! ```
//!
//! `INSTR_STACK` is one of `bare`, `tower_retry`, `backstop_retry`, `backstop_stack`,
//! `backstop_layers` (the same five as separate layers), `backstop_reloadable` (the
//! stack made reloadable), `backstop_stack_throttle` (the stack with adaptive
//! throttling on), `backstop_stack_metrics` (the stack under an `ObserveLayer`
//! with `MetricsObserver`: build with `--features metrics`; `INSTR_RECORDER=debugging`
//! installs `metrics-util`'s debugging recorder, else the facade's no-op one counts
//! only backstop's own side: events and labels),
//! `floor_retry`, `floor_stack`, `floor_fused` (or the partial stacks `retry_progress`,
//! `budget_retry_progress`, `breaker_budget_retry_progress`, and the same prefixed
//! `floor_`); `sizes` prints the size of each layer's response future instead.
//!
//! `floor_retry` and `floor_stack` are the floor of `benches/common/floor.rs`:
//! hand-written layers doing only the work any correct implementation of this design
//! must do on the success path (a flat copy of the head, the kept service, a 5xx check;
//! in the stack also two registry lookups, one context in the extensions, two clock
//! reads, three relaxed atomics and a boxed copy of the context). What each stack adds
//! over `bare` set against `floor_*` shows how far backstop is from that floor.
//! `floor_check` checks the floor does that work (the head comes back byte for byte, a
//! 5xx is retried with the rebuilt request) and prints its head's size.
//!
//! `floor_fused` is the floor of a FUSED design (`benches/common/floor_fused.rs`): one
//! guard layer doing the key, breaker, budget and retry work of `floor_stack` in one
//! response future (one registry lookup, the same two clock reads and flat head copy,
//! nothing put in the extensions) over the floor's progress layer. What it adds over
//! `bare` against `floor_stack` is what fusing the layers can save at best.
//! `fused_check` checks the guard does that work (a 5xx is retried with the head byte
//! for byte, a POST is keyed and retried with its key, the counts land in the one
//! entry, an open breaker refuses, nothing goes into the extensions).

use backstop::RetryPolicy;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use tower::Service;

mod common;

use common::drive;

/// The stack without the idempotency key layer, then without the breaker, then
/// without the budget.
#[allow(clippy::type_complexity)]
fn layers() -> (
    impl Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>, Error = backstop::Error>
        + Clone,
    impl Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>, Error = backstop::Error>
        + Clone,
    impl Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>, Error = backstop::Error>
        + Clone,
) {
    use backstop::{
        BudgetLayer, BudgetPolicy, CircuitBreakerLayer, CircuitBreakerPolicy,
        ProgressTrackingLayer, RetryLayer,
    };
    let retry = tower::ServiceBuilder::new()
        .layer(RetryLayer::new(RetryPolicy::default()))
        .layer(ProgressTrackingLayer::new())
        .service(common::Trivial);
    let budget = tower::ServiceBuilder::new()
        .layer(BudgetLayer::new(BudgetPolicy::default()))
        .service(retry.clone());
    let breaker = tower::ServiceBuilder::new()
        .layer(CircuitBreakerLayer::new(CircuitBreakerPolicy::default()))
        .service(budget.clone());
    (retry, budget, breaker)
}

/// The size of each layer's response future over the trivial inner service.
fn sizes() {
    fn size<S: Service<R>, R>(_: &S) -> usize {
        std::mem::size_of::<S::Future>()
    }
    type Plain = Request<Full<Bytes>>;
    use backstop::{
        BudgetLayer, BudgetPolicy, CircuitBreakerLayer, CircuitBreakerPolicy, IdempotencyKeyLayer,
        ProgressTrackingLayer, RetryLayer,
    };
    use tower::Layer;
    let progress = || ProgressTrackingLayer::new().layer(common::Trivial);
    let retry = || RetryLayer::new(RetryPolicy::default()).layer(progress());
    let budget = || BudgetLayer::new(BudgetPolicy::default()).layer(retry());
    let breaker = || CircuitBreakerLayer::new(CircuitBreakerPolicy::default()).layer(budget());
    let key = IdempotencyKeyLayer::new().layer(breaker());
    println!(
        "progress {}",
        size::<_, Request<backstop::ReplayBody<Full<Bytes>>>>(&progress())
    );
    println!("retry {}", size::<_, Plain>(&retry()));
    println!("budget {}", size::<_, Plain>(&budget()));
    println!("breaker {}", size::<_, Plain>(&breaker()));
    println!("key {}", size::<_, Plain>(&key));
    println!(
        "backstop_stack {}",
        size::<_, Plain>(&common::backstop().layer(progress()))
    );
    println!("tower_retry {}", size::<_, Plain>(&common::tower_retry()));
    println!("floor_retry {}", size::<_, Plain>(&common::floor::retry()));
    println!("floor_stack {}", size::<_, Plain>(&common::floor::stack()));
    println!(
        "floor_fused {}",
        size::<_, Plain>(&common::floor_fused::fused())
    );
    println!(
        "call_context {}",
        std::mem::size_of::<backstop::policy::CallContext>()
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let calls = std::env::var("INSTR_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let stack = std::env::var("INSTR_STACK").unwrap_or_else(|_| "backstop_stack".into());
    match stack.as_str() {
        "bare" => drive(&rt, common::bare(), calls),
        "tower_retry" => drive(&rt, common::tower_retry(), calls),
        "backstop_retry" => drive(&rt, common::backstop_retry(RetryPolicy::default()), calls),
        "backstop_stack" => drive(&rt, common::backstop_stack(), calls),
        "backstop_stack_throttle" => drive(&rt, common::backstop_stack_throttle(), calls),
        #[cfg(feature = "metrics")]
        "backstop_stack_metrics" => {
            if std::env::var("INSTR_RECORDER").is_ok_and(|r| r == "debugging") {
                let recorder = metrics_util::debugging::DebuggingRecorder::new();
                recorder.install().unwrap();
            }
            let stack = tower::ServiceBuilder::new()
                .layer(backstop::observe::ObserveLayer::new(
                    backstop::observe::MetricsObserver::new(),
                ))
                .service(common::backstop_stack());
            drive(&rt, stack, calls)
        }
        "backstop_layers" => drive(&rt, common::backstop_layers(), calls),
        "backstop_reloadable" => drive(&rt, common::backstop_reloadable(), calls),
        "floor_retry" => drive(&rt, common::floor::retry(), calls),
        "floor_stack" => drive(&rt, common::floor::stack(), calls),
        "floor_fused" => drive(&rt, common::floor_fused::fused(), calls),
        "floor_check" => common::floor::check(),
        "fused_check" => common::floor_fused::check(),
        "floor_retry_progress" => drive(&rt, common::floor::partial().0, calls),
        "floor_budget_retry_progress" => drive(&rt, common::floor::partial().1, calls),
        "floor_breaker_budget_retry_progress" => drive(&rt, common::floor::partial().2, calls),
        "sizes" => sizes(),
        // The stack built up a layer at a time, to see what each adds.
        "retry_progress" => drive(&rt, layers().0, calls),
        "budget_retry_progress" => drive(&rt, layers().1, calls),
        "breaker_budget_retry_progress" => drive(&rt, layers().2, calls),
        other => eprintln!("unknown INSTR_STACK {other}"),
    }
}
