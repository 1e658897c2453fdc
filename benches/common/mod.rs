//! What the success-path benchmarks share: the request, the trivial inner services,
//! tower's retry policy, and the stacks measured.
#![allow(dead_code)]

use std::convert::Infallible;
use std::future::{ready, Ready};

use backstop::{
    BudgetLayer, BudgetPolicy, CircuitBreakerLayer, CircuitBreakerPolicy, IdempotencyKeyLayer,
    ProgressTrackingLayer, ReplayBody, RetryLayer, RetryPolicy,
};
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use tower::{Layer, Service};

pub mod floor;
pub mod floor_fused;
pub mod ratios;

/// The answer every stack gets.
pub type Res = Response<Full<Bytes>>;

pub fn request() -> Request<Full<Bytes>> {
    Request::get("http://127.0.0.1:8080/items/42?view=full")
        .header("accept", "application/json")
        .header("user-agent", "backstop-bench")
        .body(Full::default())
        .unwrap()
}

/// Sends one [`request`] through a clone of `svc` on `rt`, as every driver does
/// (the clone, readiness and the call are what a caller of a tower service pays).
#[inline(always)]
pub fn send<S>(rt: &tokio::runtime::Runtime, svc: &S)
where
    S: Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>> + Clone,
    S::Error: std::fmt::Debug,
{
    let mut svc = svc.clone();
    rt.block_on(async {
        std::hint::black_box(
            tower::ServiceExt::ready(&mut svc)
                .await
                .unwrap()
                .call(request())
                .await,
        )
    })
    .unwrap();
}

/// Sends `calls` requests through `svc` (see [`send`]): the drivers' loop.
pub fn drive<S>(rt: &tokio::runtime::Runtime, svc: S, calls: usize)
where
    S: Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>> + Clone,
    S::Error: std::fmt::Debug,
{
    for _ in 0..calls {
        send(rt, &svc);
    }
}

pub fn ok<B>(_: Request<B>) -> Ready<Result<Response<Full<Bytes>>, Infallible>> {
    ready(Ok(Response::new(Full::default())))
}

/// The trivial inner service for the stacks with progress tracking. It never writes
/// a byte, so it keeps the promise of `CapturesConnection` trivially.
#[derive(Clone, Copy)]
pub struct Trivial;

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

/// The same inner service for the floor's stacks (`floor`), whose body passes
/// straight, unwrapped.
impl Service<Request<Full<Bytes>>> for Trivial {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Ready<Result<Response<Full<Bytes>>, Infallible>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Full<Bytes>>) -> Self::Future {
        ok(req)
    }
}

/// Retries 5xx up to twice, cloning the request before each attempt, as a tower
/// user would write it.
#[derive(Clone)]
pub struct TowerPolicy(pub usize);

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

/// The inner service alone.
pub fn bare() -> impl Service<Request<Full<Bytes>>, Response = Res, Error = Infallible> + Clone {
    tower::service_fn(ok::<Full<Bytes>>)
}

/// tower's `Retry` with a policy that clones the request.
pub fn tower_retry(
) -> impl Service<Request<Full<Bytes>>, Response = Res, Error = Infallible> + Clone {
    tower::retry::RetryLayer::new(TowerPolicy(2)).layer(tower::service_fn(ok::<Full<Bytes>>))
}

/// backstop's `RetryLayer` with `policy`.
pub fn backstop_retry(
    policy: RetryPolicy,
) -> impl Service<Request<Full<Bytes>>, Response = Res, Error = backstop::Error> + Clone {
    RetryLayer::new(policy).layer(tower::service_fn(ok::<ReplayBody<Full<Bytes>>>))
}

/// The whole stack as the README builds it: key, breaker, budget and retry in one
/// `Backstop` layer, over progress.
pub fn backstop() -> backstop::BackstopLayer {
    backstop_with(BudgetPolicy::default())
}

/// [`backstop`], with `budget`.
pub fn backstop_with(budget: BudgetPolicy) -> backstop::BackstopLayer {
    backstop::Backstop::builder()
        .retry(RetryPolicy::default())
        .idempotency_key(IdempotencyKeyLayer::new())
        .circuit_breaker(CircuitBreakerPolicy::default())
        .budget(budget)
        .build()
        .unwrap()
}

/// The whole stack on the success path: key, breaker, budget, retry, progress, in
/// the `Backstop` stack (admission run in the retry layer's future).
pub fn backstop_stack(
) -> impl Service<Request<Full<Bytes>>, Response = Res, Error = backstop::Error> + Clone {
    tower::ServiceBuilder::new()
        .layer(backstop())
        .layer(ProgressTrackingLayer::new())
        .service(Trivial)
}

/// The whole stack with adaptive throttling on: key, breaker, throttle, budget,
/// retry, progress (every answer accepted, so it never sheds).
pub fn backstop_stack_throttle(
) -> impl Service<Request<Full<Bytes>>, Response = Res, Error = backstop::Error> + Clone {
    let layer = backstop::Backstop::builder()
        .retry(RetryPolicy::default())
        .idempotency_key(IdempotencyKeyLayer::new())
        .circuit_breaker(CircuitBreakerPolicy::default())
        .throttle(backstop::ThrottlePolicy::default())
        .budget(BudgetPolicy::default())
        .build()
        .unwrap();
    tower::ServiceBuilder::new()
        .layer(layer)
        .layer(ProgressTrackingLayer::new())
        .service(Trivial)
}

/// The whole stack made reloadable: each call reads its routes from the table a
/// reload swaps.
pub fn backstop_reloadable(
) -> impl Service<Request<Full<Bytes>>, Response = Res, Error = backstop::Error> + Clone {
    tower::ServiceBuilder::new()
        .layer(backstop().reloadable())
        .layer(ProgressTrackingLayer::new())
        .service(Trivial)
}

/// The same five as separate layers: key, breaker, budget, retry, progress.
pub fn backstop_layers(
) -> impl Service<Request<Full<Bytes>>, Response = Res, Error = backstop::Error> + Clone {
    tower::ServiceBuilder::new()
        .layer(IdempotencyKeyLayer::new())
        .layer(CircuitBreakerLayer::new(CircuitBreakerPolicy::default()))
        .layer(BudgetLayer::new(BudgetPolicy::default()))
        .layer(RetryLayer::new(RetryPolicy::default()))
        .layer(ProgressTrackingLayer::new())
        .service(Trivial)
}
