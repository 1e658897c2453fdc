//! The idempotency-key layer: one key per call, kept across every attempt.

use std::time::Duration;

use crate::support::script::{status, Script};
use backstop::idempotency_key::{CallKey, IdempotencyKeyLayer};
use backstop::policy::CallContext;
use backstop::{RetryLayer, RetryPolicy};
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Request, StatusCode};
use http_body_util::Full;
use tower::{Layer, Service, ServiceBuilder, ServiceExt};

fn req(method: Method) -> Request<Full<Bytes>> {
    Request::builder()
        .method(method)
        .uri("http://upstream.test/charges")
        .body(Full::new(Bytes::from_static(b"amount=42")))
        .unwrap()
}

/// Sends `req` through the key layer alone and returns what the transport saw.
async fn stamped(layer: IdempotencyKeyLayer, req: Request<Full<Bytes>>) -> Request<Full<Bytes>> {
    let echo = tower::service_fn(|req: Request<Full<Bytes>>| async move {
        Ok::<_, std::convert::Infallible>(req)
    });
    layer.layer(echo).oneshot(req).await.unwrap()
}

#[tokio::test]
async fn posts_and_patches_get_a_key_and_the_marker() {
    for method in [Method::POST, Method::PATCH] {
        let seen = stamped(IdempotencyKeyLayer::new(), req(method.clone())).await;
        let key = seen.headers()["idempotency-key"].to_str().unwrap();
        assert_eq!(key.len(), 36, "{method}");
        assert!(
            CallContext::of(seen.extensions()).is_some_and(CallContext::is_keyed),
            "{method}"
        );
    }
}

#[tokio::test]
async fn other_methods_are_left_alone() {
    for method in [Method::GET, Method::PUT, Method::DELETE] {
        let seen = stamped(IdempotencyKeyLayer::new(), req(method.clone())).await;
        assert!(!seen.headers().contains_key("idempotency-key"), "{method}");
        assert!(
            !CallContext::of(seen.extensions()).is_some_and(CallContext::is_keyed),
            "{method}"
        );
    }
}

#[tokio::test]
async fn each_call_gets_its_own_key() {
    let a = stamped(IdempotencyKeyLayer::new(), req(Method::POST)).await;
    let b = stamped(IdempotencyKeyLayer::new(), req(Method::POST)).await;
    assert_ne!(
        a.headers()["idempotency-key"],
        b.headers()["idempotency-key"]
    );
}

#[tokio::test]
async fn a_key_in_the_headers_is_kept() {
    let mut r = req(Method::POST);
    r.headers_mut()
        .insert("idempotency-key", HeaderValue::from_static("caller-1"));
    r.extensions_mut()
        .insert(CallKey(HeaderValue::from_static("ignored")));
    let seen = stamped(IdempotencyKeyLayer::new(), r).await;
    assert_eq!(seen.headers()["idempotency-key"], "caller-1");
    assert_eq!(seen.headers().get_all("idempotency-key").iter().count(), 1);
}

#[tokio::test]
async fn a_key_given_per_call_is_used() {
    let mut r = req(Method::POST);
    r.extensions_mut()
        .insert(CallKey(HeaderValue::from_static("order-7f3a")));
    let seen = stamped(IdempotencyKeyLayer::new(), r).await;
    assert_eq!(seen.headers()["idempotency-key"], "order-7f3a");
}

#[tokio::test]
async fn header_methods_and_generator_are_settings() {
    let layer = IdempotencyKeyLayer::new()
        .header(HeaderName::from_static("x-request-key"))
        .methods([Method::DELETE])
        .generator(|| HeaderValue::from_static("fixed"));
    let seen = stamped(layer.clone(), req(Method::DELETE)).await;
    assert_eq!(seen.headers()["x-request-key"], "fixed");
    assert!(!seen.headers().contains_key("idempotency-key"));
    let seen = stamped(layer, req(Method::POST)).await;
    assert!(!seen.headers().contains_key("x-request-key"));
}

#[tokio::test(start_paused = true)]
async fn every_attempt_of_a_call_carries_the_same_key() {
    let keys = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = keys.clone();
    let mock = Script::new([status(503), status(503), status(201)]);
    let record = tower::service_fn(move |req: Request<backstop::ReplayBody<Full<Bytes>>>| {
        seen.lock()
            .unwrap()
            .push(req.headers()["idempotency-key"].clone());
        let mut mock = mock.clone();
        async move { mock.call(req).await }
    });
    let policy = RetryPolicy::builder()
        .backoff(Duration::from_millis(10), Duration::from_millis(10))
        .build()
        .unwrap();
    let mut client = ServiceBuilder::new()
        .layer(IdempotencyKeyLayer::new())
        .layer(RetryLayer::new(policy))
        .service(record);
    let res = client
        .ready()
        .await
        .unwrap()
        .call(req(Method::POST))
        .await
        .unwrap();
    // Keyed, so the POST was retried past two 503s.
    assert_eq!(res.status(), StatusCode::CREATED);
    let keys = keys.lock().unwrap();
    assert_eq!(keys.len(), 3);
    assert!(keys.iter().all(|k| *k == keys[0]));
}
