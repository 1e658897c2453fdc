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
//! `INSTR_STACK` is one of `bare`, `tower_retry`, `backstop_retry`, `backstop_stack`.

use std::convert::Infallible;
use std::future::{ready, Ready};
use std::hint::black_box;

use backstop::{
    BudgetLayer, BudgetPolicy, CircuitBreakerLayer, CircuitBreakerPolicy, IdempotencyKeyLayer,
    ProgressTrackingLayer, ReplayBody, RetryLayer, RetryPolicy,
};
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use tower::{Layer, Service, ServiceExt};

fn request() -> Request<Full<Bytes>> {
    Request::get("http://127.0.0.1:8080/items/42?view=full")
        .header("accept", "application/json")
        .header("user-agent", "backstop-bench")
        .body(Full::default())
        .unwrap()
}

fn ok<B>(_: Request<B>) -> Ready<Result<Response<Full<Bytes>>, Infallible>> {
    ready(Ok(Response::new(Full::default())))
}

#[derive(Clone, Copy)]
struct Trivial;

impl backstop::progress::CapturesConnection for Trivial {}

impl Service<Request<ReplayBody<Full<Bytes>>>> for Trivial {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Ready<Result<Response<Full<Bytes>>, Infallible>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<ReplayBody<Full<Bytes>>>) -> Self::Future {
        ok(req)
    }
}

#[derive(Clone)]
struct TowerPolicy(usize);

impl tower::retry::Policy<Request<Full<Bytes>>, Response<Full<Bytes>>, Infallible> for TowerPolicy {
    type Future = Ready<()>;

    fn retry(
        &mut self,
        _: &mut Request<Full<Bytes>>,
        result: &mut Result<Response<Full<Bytes>>, Infallible>,
    ) -> Option<Self::Future> {
        match result {
            Ok(res) if res.status().is_server_error() && self.0 > 0 => {
                self.0 -= 1;
                Some(ready(()))
            }
            _ => None,
        }
    }

    fn clone_request(&mut self, req: &Request<Full<Bytes>>) -> Option<Request<Full<Bytes>>> {
        Some(req.clone())
    }
}

fn drive<S>(rt: &tokio::runtime::Runtime, svc: S, calls: usize)
where
    S: Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>> + Clone,
    S::Error: std::fmt::Debug,
{
    for _ in 0..calls {
        let mut svc = svc.clone();
        rt.block_on(async { black_box(svc.ready().await.unwrap().call(request()).await) })
            .unwrap();
    }
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
        "bare" => drive(&rt, tower::service_fn(ok::<Full<Bytes>>), calls),
        "tower_retry" => drive(
            &rt,
            tower::retry::RetryLayer::new(TowerPolicy(2))
                .layer(tower::service_fn(ok::<Full<Bytes>>)),
            calls,
        ),
        "backstop_retry" => drive(
            &rt,
            RetryLayer::new(RetryPolicy::default())
                .layer(tower::service_fn(ok::<ReplayBody<Full<Bytes>>>)),
            calls,
        ),
        "backstop_stack" => drive(
            &rt,
            tower::ServiceBuilder::new()
                .layer(IdempotencyKeyLayer::new())
                .layer(CircuitBreakerLayer::new(CircuitBreakerPolicy::default()))
                .layer(BudgetLayer::new(BudgetPolicy::default()))
                .layer(RetryLayer::new(RetryPolicy::default()))
                .layer(ProgressTrackingLayer::new())
                .service(Trivial),
            calls,
        ),
        other => eprintln!("unknown INSTR_STACK {other}"),
    }
}
