//! The idempotency-key layer: one key per call, kept across every attempt.

use std::time::Duration;

use crate::support::orders::same_in_every_order;
use crate::support::script::{io_error, status, Script};
use crate::support::shape::Stack;
use backstop::idempotency_key::{CallKey, IdempotencyKeyLayer};
use backstop::policy::CallContext;
use backstop::RetryPolicy;
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Request, StatusCode};
use http_body_util::Full;
use tower::{Layer, Service, ServiceExt};

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

/// Sends `req` through the key layer alone and returns the head the transport saw,
/// with the call's context.
async fn stamped_in(layer: IdempotencyKeyLayer, req: Request<Full<Bytes>>) -> Request<()> {
    let (parts, _) = stamped(layer, req).await.into_parts();
    Request::from_parts(parts, ())
}

#[tokio::test]
async fn posts_and_patches_get_a_key_and_the_marker() {
    for method in [Method::POST, Method::PATCH] {
        let seen = stamped_in(IdempotencyKeyLayer::new(), req(method.clone())).await;
        let key = seen.headers()["idempotency-key"].to_str().unwrap();
        assert_eq!(key.len(), 36, "{method}");
        // The layer marks the call keyed in the context it hands down.
        assert!(
            CallContext::of(seen.extensions()).is_some_and(CallContext::is_keyed),
            "{method}"
        );
    }
}

#[tokio::test]
async fn other_methods_are_left_alone() {
    for method in [Method::GET, Method::PUT, Method::DELETE] {
        let seen = stamped_in(IdempotencyKeyLayer::new(), req(method.clone())).await;
        assert!(!seen.headers().contains_key("idempotency-key"), "{method}");
        assert!(
            !CallContext::of(seen.extensions()).is_some_and(CallContext::is_keyed),
            "{method}"
        );
    }
}

#[tokio::test]
async fn each_call_gets_its_own_key() {
    let a = stamped_in(IdempotencyKeyLayer::new(), req(Method::POST)).await;
    let b = stamped_in(IdempotencyKeyLayer::new(), req(Method::POST)).await;
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
    let seen = stamped_in(IdempotencyKeyLayer::new(), r).await;
    assert_eq!(seen.headers()["idempotency-key"], "caller-1");
    assert_eq!(seen.headers().get_all("idempotency-key").iter().count(), 1);
}

#[tokio::test]
async fn a_key_given_per_call_is_used() {
    let mut r = req(Method::POST);
    r.extensions_mut()
        .insert(CallKey(HeaderValue::from_static("order-7f3a")));
    let seen = stamped_in(IdempotencyKeyLayer::new(), r).await;
    assert_eq!(seen.headers()["idempotency-key"], "order-7f3a");
}

#[tokio::test]
async fn header_methods_and_generator_are_settings() {
    let layer = IdempotencyKeyLayer::new()
        .header(HeaderName::from_static("x-request-key"))
        .methods([Method::DELETE])
        .generator(|| HeaderValue::from_static("fixed"));
    let seen = stamped_in(layer.clone(), req(Method::DELETE)).await;
    assert_eq!(seen.headers()["x-request-key"], "fixed");
    assert!(!seen.headers().contains_key("idempotency-key"));
    let seen = stamped_in(layer, req(Method::POST)).await;
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
    let stack = Stack::new(policy).keys(IdempotencyKeyLayer::new());
    let mut client: tower::util::BoxCloneService<_, _, backstop::Error> =
        crate::stacked!(stack, record);
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

#[tokio::test(start_paused = true)]
async fn a_keyed_post_is_retried_after_a_reset_with_the_callers_key() {
    // A reset connection may have reached the server: only a keyed POST goes
    // again, with the caller's key on every attempt.
    let mock = Script::new([
        io_error(std::io::ErrorKind::ConnectionReset),
        status(503),
        status(201),
    ]);
    let policy = RetryPolicy::builder()
        .backoff(Duration::from_millis(10), Duration::from_millis(10))
        .build()
        .unwrap();
    let stack = Stack::new(policy.clone()).keys(IdempotencyKeyLayer::new());
    let mut client: tower::util::BoxCloneService<_, _, backstop::Error> =
        crate::stacked!(stack, mock.clone());
    let mut r = req(Method::POST);
    r.extensions_mut()
        .insert(CallKey(HeaderValue::from_static("order-7f3a")));
    let res = client.ready().await.unwrap().call(r).await.unwrap();
    assert_eq!(res.status(), StatusCode::CREATED);
    let seen = mock.seen();
    assert_eq!(seen.len(), 3);
    assert!(
        seen.iter().all(|s| s.key.as_deref() == Some("order-7f3a")),
        "{seen:?}"
    );

    // Without the key, the same reset ends the POST at once.
    let mock = Script::new([io_error(std::io::ErrorKind::ConnectionReset)]);
    let stack = Stack::new(policy);
    let mut client: tower::util::BoxCloneService<_, _, backstop::Error> =
        crate::stacked!(stack, mock.clone());
    let err = client
        .ready()
        .await
        .unwrap()
        .call(req(Method::POST))
        .await
        .unwrap_err();
    assert_eq!(err.attempts(), 1, "{err}");
    assert_eq!(mock.calls(), 1);
}

#[test]
fn the_layer_does_not_depend_on_the_order_of_its_setters() {
    type Step = dyn Fn(IdempotencyKeyLayer) -> IdempotencyKeyLayer;
    let steps: [&Step; 3] = [
        &|l| l.header(HeaderName::from_static("x-request-key")),
        &|l| l.methods([Method::POST, Method::DELETE]),
        &|l| l.generator(|| HeaderValue::from_static("k")),
    ];
    let layer = same_in_every_order(&IdempotencyKeyLayer::new(), &steps, |l| format!("{l:?}"));
    assert!(
        layer.contains("x-request-key") && layer.contains("DELETE"),
        "{layer}"
    );
    assert!(layer.contains("custom_generator: true"), "{layer}");
}
