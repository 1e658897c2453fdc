//! tower-http's layers with backstop's, over real servers on 127.0.0.1 (HTTP/1.1
//! and HTTP/2): `TraceLayer` between the retry layer and `ProgressTrackingLayer`
//! traces every attempt, and `TimeoutLayer` over the retry layer (or the stack)
//! bounds the whole call once its response body is one tower-http can answer with.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::wire::{empty, quick, transport, upstream, within_10s, Body, BOTH};
use backstop::policy::{AttemptOutcome, History};
use backstop::progress::ProgressTrackingLayer;
use backstop::test_util::{Protocol, Reply};
use backstop::{Backstop, BudgetPolicy, CircuitBreakerPolicy, RetryLayer};
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_http::map_response_body::MapResponseBodyLayer;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

/// A 503, then 200 for every request.
async fn unavailable_once(protocol: Protocol) -> backstop::test_util::Upstream {
    upstream(protocol, vec![Reply::status(503).into()]).await
}

fn get(up: &backstop::test_util::Upstream) -> Request<Body> {
    Request::get(up.uri("/")).body(empty()).unwrap()
}

/// The statuses of a call's attempts.
fn statuses(history: &History) -> Vec<u16> {
    history
        .attempts()
        .iter()
        .map(|a| match a.outcome {
            AttemptOutcome::Status(s) => s.as_u16(),
            _ => 0,
        })
        .collect()
}

/// Sends a GET to `up` through `client`: answered 200 after one retry of a 503.
async fn assert_retried_once<S, B>(client: S, up: &backstop::test_util::Upstream)
where
    S: Service<Request<Body>, Response = http::Response<B>>,
    S::Error: std::fmt::Debug,
{
    let protocol = up.protocol();
    let res = client.oneshot(get(up)).await.unwrap();
    assert_eq!(res.status(), 200, "{protocol:?}");
    let history = res.extensions().get::<History>().unwrap();
    assert_eq!(statuses(history), [503, 200], "{protocol:?}");
}

/// tower-http's timeout, over a layer whose response body it can answer 408 with.
fn timeout(after: Duration) -> TimeoutLayer {
    TimeoutLayer::with_status_code(StatusCode::REQUEST_TIMEOUT, after)
}

#[tokio::test]
async fn a_trace_layer_between_retry_and_progress_sees_every_attempt() {
    within_10s(async {
        for protocol in BOTH {
            let up = unavailable_once(protocol).await;
            let traced = Arc::new(AtomicUsize::new(0));
            let seen = traced.clone();
            let client = ServiceBuilder::new()
                .layer(RetryLayer::new(quick()))
                .layer(TraceLayer::new_for_http().on_request(
                    move |_: &Request<_>, _: &tracing::Span| {
                        seen.fetch_add(1, Ordering::SeqCst);
                    },
                ))
                .layer(ProgressTrackingLayer::new())
                .service(transport(protocol));
            assert_retried_once(client, &up).await;
            assert_eq!(traced.load(Ordering::SeqCst), 2, "{protocol:?}");
            assert_eq!(up.processed_count(), 2);
        }
    })
    .await;
}

/// tower-http's timeout over the retry layer, the response body boxed between them.
fn timed_retries(
    after: Duration,
    protocol: Protocol,
) -> impl Service<Request<Body>, Response = http::Response<impl Sized>, Error = backstop::Error> {
    ServiceBuilder::new()
        .layer(timeout(after))
        .layer(MapResponseBodyLayer::new(BodyExt::boxed))
        .layer(RetryLayer::new(quick()))
        .service(transport(protocol))
}

#[tokio::test]
async fn a_timeout_layer_over_the_retry_layer_bounds_the_retried_call() {
    within_10s(async {
        for protocol in BOTH {
            let up = unavailable_once(protocol).await;
            let client = timed_retries(Duration::from_secs(5), protocol);
            assert_retried_once(client, &up).await;

            // A retry that outlasts the timeout: tower-http answers 408 itself.
            let up = upstream(
                protocol,
                vec![
                    Reply::status(503).into(),
                    Reply::ok().delay(Duration::from_secs(30)).into(),
                ],
            )
            .await;
            let client = timed_retries(Duration::from_millis(200), protocol);
            let res = client.oneshot(get(&up)).await.unwrap();
            assert_eq!(res.status(), StatusCode::REQUEST_TIMEOUT, "{protocol:?}");
            assert_eq!(up.requests().len(), 2, "{protocol:?}");
        }
    })
    .await;
}

#[tokio::test]
async fn a_timeout_layer_over_the_stack_bounds_the_retried_call() {
    within_10s(async {
        for protocol in BOTH {
            let up = unavailable_once(protocol).await;
            let stack = Backstop::builder()
                .retry(quick())
                .circuit_breaker(CircuitBreakerPolicy::default())
                .budget(BudgetPolicy::default())
                .build()
                .unwrap();
            let client = ServiceBuilder::new()
                .layer(timeout(Duration::from_secs(5)))
                .layer(MapResponseBodyLayer::new(BodyExt::boxed))
                .layer(stack)
                .layer(TraceLayer::new_for_http())
                .layer(ProgressTrackingLayer::new())
                .service(transport(protocol));
            assert_retried_once(client, &up).await;
        }
    })
    .await;
}
