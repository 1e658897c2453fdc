//! One OpenTelemetry HTTP client span per request sent, under the call's span,
//! over real loopback upstreams, exported by OpenTelemetry's SDK.

use std::time::Duration;

use backstop::hedge::{HedgeLayer, HedgePolicy};
use backstop::test_util::{Protocol, Reply, Step, Upstream};
use backstop::RetryLayer;
use http::{Request, StatusCode};
use opentelemetry::trace::{SpanId, SpanKind, Status, TracerProvider as _};
use opentelemetry::Value;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tower::{ServiceBuilder, ServiceExt};
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;

use crate::support::wire::{empty, quick, transport, upstream, within_10s};

/// Runs `run` with every `tracing` span of this thread exported, through
/// `tracing-opentelemetry`, to OpenTelemetry's in-memory exporter; returns the
/// spans ended.
async fn exported(run: impl std::future::Future<Output = ()>) -> Vec<SpanData> {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("backstop-test")));
    {
        let _guard = tracing::subscriber::set_default(subscriber);
        within_10s(run).await;
    }
    provider.force_flush().unwrap();
    exporter.get_finished_spans().unwrap()
}

/// Sends `req` through a retry layer over an HTTP/1.1 client, and checks that the
/// call ended with a 200.
async fn answered_ok(req: Request<crate::support::wire::Body>) {
    let client = ServiceBuilder::new()
        .layer(RetryLayer::new(quick()))
        .service(transport(Protocol::Http1));
    let res = client.oneshot(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
}

fn attr<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

fn named<'a>(spans: &'a [SpanData], name: &str) -> Vec<&'a SpanData> {
    spans.iter().filter(|s| s.name == name).collect()
}

/// Every attribute of every span: none holds the path, the query or a header value.
fn assert_no_url(spans: &[SpanData]) {
    for span in spans {
        assert!(attr(span, "url.full").is_none(), "{span:?}");
        for kv in &span.attributes {
            let value = kv.value.as_str();
            for secret in ["/items", "token", "s3cret"] {
                assert!(!value.contains(secret), "{secret} in {kv:?}");
            }
        }
    }
}

/// The convention's attributes of a request sent to `upstream`.
fn assert_request_attrs(span: &SpanData, upstream: &Upstream) {
    assert_eq!(span.span_kind, SpanKind::Client, "{span:?}");
    assert_eq!(attr(span, "http.request.method"), Some(&Value::from("GET")));
    assert_eq!(
        attr(span, "server.address"),
        Some(&Value::from(upstream.addr().ip().to_string()))
    );
    assert_eq!(
        attr(span, "server.port"),
        Some(&Value::I64(i64::from(upstream.addr().port())))
    );
    assert_eq!(attr(span, "url.scheme"), Some(&Value::from("http")));
}

/// An upstream that answers a 503, then a 200; and the spans exported while a GET
/// of `path` is sent to it through a retry layer with `policy`, inside a user's
/// span named `checkout`, and ends with the 200.
async fn a_503_then_ok(policy: backstop::RetryPolicy, path: &str) -> (Upstream, Vec<SpanData>) {
    let up = upstream(
        Protocol::Http1,
        vec![Reply::status(503).into(), Reply::ok().into()],
    )
    .await;
    let uri = up.uri(path);
    let spans = exported(async {
        let client = ServiceBuilder::new()
            .layer(RetryLayer::new(policy))
            .service(transport(Protocol::Http1));
        let req = Request::get(uri).body(empty()).unwrap();
        let res = client
            .oneshot(req)
            .instrument(tracing::info_span!("checkout"))
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK);
    })
    .await;
    (up, spans)
}

#[tokio::test]
async fn each_attempt_is_a_client_span_under_the_call_span() {
    let (up, spans) = a_503_then_ok(quick(), "/items?token=s3cret").await;

    let user = named(&spans, "checkout");
    let call = named(&spans, "backstop.retry");
    let sent = named(&spans, "GET");
    assert_eq!(
        (user.len(), call.len(), sent.len()),
        (1, 1, 2),
        "{spans:#?}"
    );
    let (user, call) = (user[0], call[0]);
    // user span → call span → one span per request sent, in one trace.
    assert_eq!(call.parent_span_id, user.span_context.span_id());
    assert_eq!(call.span_kind, SpanKind::Internal);
    assert_eq!(
        attr(call, "http.request.resend_count"),
        Some(&Value::I64(1))
    );
    for span in &sent {
        assert_eq!(span.parent_span_id, call.span_context.span_id());
        assert_eq!(span.span_context.trace_id(), user.span_context.trace_id());
        assert_request_attrs(span, &up);
    }
    assert_ne!(user.parent_span_id, call.span_context.span_id());
    assert_eq!(user.parent_span_id, SpanId::INVALID);

    // In the order they ended: the 503, then the resend's 200.
    let (first, resend) = (sent[0], sent[1]);
    assert_eq!(
        attr(first, "http.response.status_code"),
        Some(&Value::I64(503))
    );
    assert_eq!(attr(first, "error.type"), Some(&Value::from("503")));
    assert!(matches!(first.status, Status::Error { .. }), "{first:?}");
    assert_eq!(attr(first, "http.request.resend_count"), None);

    assert_eq!(
        attr(resend, "http.response.status_code"),
        Some(&Value::I64(200))
    );
    assert_eq!(attr(resend, "error.type"), None);
    assert_eq!(resend.status, Status::Unset);
    assert_eq!(
        attr(resend, "http.request.resend_count"),
        Some(&Value::I64(1))
    );
    assert!(first.end_time <= resend.start_time);
    assert_no_url(&spans);
}

#[tokio::test]
async fn a_resend_sent_at_once_starts_after_the_first_request_span_ended() {
    // No backoff: the poll that reads the 503 drains it and sends the request again
    // at once. The first request's span ends when its outcome is known, not at the
    // end of that poll, so the two spans do not overlap.
    let at_once = backstop::RetryPolicy::builder()
        .backoff(Duration::ZERO, Duration::ZERO)
        .build()
        .unwrap();
    let (_up, spans) = a_503_then_ok(at_once, "/items").await;

    let sent = named(&spans, "GET");
    assert_eq!(sent.len(), 2, "{spans:#?}");
    let (first, resend) = (sent[0], sent[1]);
    assert_eq!(attr(first, "error.type"), Some(&Value::from("503")));
    assert_eq!(
        attr(resend, "http.request.resend_count"),
        Some(&Value::I64(1))
    );
    assert!(
        first.end_time <= resend.start_time,
        "the first request's span ended at {:?}, after the resend's began at {:?}",
        first.end_time,
        resend.start_time
    );
}

#[tokio::test]
async fn a_hedged_copy_is_a_client_span_of_its_own_beside_the_original() {
    // The original is slow; the copy, sent 20 ms later, answers at once and wins.
    let up = upstream(
        Protocol::Http2,
        vec![
            Reply::ok().delay(Duration::from_secs(5)).into(),
            Reply::ok().into(),
        ],
    )
    .await;
    let uri = up.uri("/items?token=s3cret");
    let spans = exported(async {
        let client = ServiceBuilder::new()
            .layer(RetryLayer::new(quick()))
            .layer(HedgeLayer::new(HedgePolicy::after(Duration::from_millis(
                20,
            ))))
            .service(transport(Protocol::Http2));
        let req = Request::get(uri).body(empty()).unwrap();
        let res = client.oneshot(req).await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
    })
    .await;

    let call = named(&spans, "backstop.retry");
    let sent = named(&spans, "GET");
    assert_eq!((call.len(), sent.len()), (1, 2), "{spans:#?}");
    let call = call[0];
    for span in &sent {
        assert_eq!(span.parent_span_id, call.span_context.span_id());
        assert_request_attrs(span, &up);
        // One attempt: neither is a resend.
        assert_eq!(attr(span, "http.request.resend_count"), None);
    }
    let copy = sent
        .iter()
        .find(|s| attr(s, "backstop.hedge.copy").is_some())
        .expect("the copy's span");
    let original = sent
        .iter()
        .find(|s| attr(s, "backstop.hedge.copy").is_none())
        .expect("the original's span");
    assert_eq!(attr(copy, "backstop.hedge.copy"), Some(&Value::I64(1)));
    assert_eq!(
        attr(copy, "http.response.status_code"),
        Some(&Value::I64(200))
    );
    // The original lost and was cancelled on purpose: no status, no error.
    assert_eq!(attr(original, "http.response.status_code"), None);
    assert_eq!(attr(original, "error.type"), None);
    assert_eq!(original.status, Status::Unset);
    assert!(original.start_time <= copy.start_time);
    assert_no_url(&spans);
}

#[tokio::test]
async fn a_failed_send_has_an_error_type_and_no_status_code() {
    // The first request's connection closes before any answer; the resend answers.
    let up = upstream(Protocol::Http1, vec![Step::CloseOnHead, Reply::ok().into()]).await;
    let uri = up.uri("/items?token=s3cret");
    let req = Request::get(uri).body(empty()).unwrap();
    let spans = exported(answered_ok(req)).await;
    let sent = named(&spans, "GET");
    assert_eq!(sent.len(), 2, "{spans:#?}");
    let failed = sent[0];
    assert_eq!(attr(failed, "http.response.status_code"), None);
    assert!(matches!(failed.status, Status::Error { .. }), "{failed:?}");
    // An error kind (`closed`, `connect`, …), never a status code.
    let kind = attr(failed, "error.type").expect("an error.type").as_str();
    assert!(kind.parse::<u16>().is_err() && !kind.is_empty(), "{kind}");
    assert_eq!(
        attr(sent[1], "http.request.resend_count"),
        Some(&Value::I64(1))
    );
    assert_no_url(&spans);
}

#[tokio::test]
async fn a_method_outside_the_known_ones_is_named_http() {
    let up = upstream(Protocol::Http1, vec![Reply::ok().into()]).await;
    let uri = up.uri("/items?token=s3cret");
    let method = http::Method::from_bytes(b"PURGE").unwrap();
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .body(empty())
        .unwrap();
    let spans = exported(answered_ok(req)).await;
    let sent = named(&spans, "HTTP");
    assert_eq!(sent.len(), 1, "{spans:#?}");
    assert_eq!(sent[0].span_kind, SpanKind::Client);
    assert_eq!(
        attr(sent[0], "http.request.method"),
        Some(&Value::from("_OTHER"))
    );
    assert_no_url(&spans);
}
