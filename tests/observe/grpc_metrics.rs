#![cfg(all(feature = "metrics", feature = "grpc"))]
//! gRPC's own retry metrics (gRFC A96), recorded for gRPC calls.

use std::collections::BTreeMap;
use std::io;
use std::time::Duration;

use crate::metrics::snapshot_of;
use crate::support::requests::call_with;
use crate::support::script::{io_error, status, status_with, Script};
use backstop::grpc::{self, Code};
use backstop::observe::{MetricsObserver, ObserveLayer};
use backstop::policy::Jitter;
use backstop::{RetryLayer, RetryPolicy};
use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use metrics::Unit;
use metrics_util::debugging::DebugValue;

/// Each `grpc.*` series as `name{key=value,…}`, with its unit and its values.
fn grpc_series(
    run: impl std::future::Future<Output = ()>,
) -> BTreeMap<String, (Option<Unit>, Vec<f64>)> {
    let mut out = BTreeMap::new();
    for (composite, unit, _, value) in snapshot_of(run).snapshot().into_vec() {
        let key = composite.key();
        if !key.name().starts_with("grpc.") {
            continue;
        }
        let mut labels: Vec<_> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        labels.sort();
        let DebugValue::Histogram(values) = value else {
            panic!("{key:?} is not a histogram");
        };
        let values = values.iter().map(|v| v.into_inner()).collect();
        out.insert(
            format!("{}{{{}}}", key.name(), labels.join(",")),
            (unit, values),
        );
    }
    out
}

fn policy() -> RetryPolicy {
    let rules = grpc::rules()
        .retryable_codes([Code::Unavailable])
        .all_idempotent()
        .build()
        .unwrap();
    RetryPolicy::builder()
        .rules(rules)
        .backoff(Duration::from_millis(100), Duration::from_millis(100))
        .jitter(Jitter::None)
        .build()
        .unwrap()
}

fn grpc_call() -> Request<Full<Bytes>> {
    Request::post("http://upstream.test/shop.Catalog/Get?token=secret")
        .header("content-type", "application/grpc")
        .body(Full::default())
        .unwrap()
}

const LABELS: &str = "grpc.method=other,grpc.target=http://upstream.test";

#[test]
fn a_grpc_call_records_its_retries_transparent_retries_and_delay() {
    let seen = grpc_series(async {
        // UNAVAILABLE (a retry), a refused connection (a transparent retry), then OK.
        let unavailable = status_with(
            200,
            &[("content-type", "application/grpc"), ("grpc-status", "14")],
        );
        let mock = Script::new([
            unavailable,
            io_error(io::ErrorKind::ConnectionRefused),
            status(200),
        ]);
        let mut svc = tower::ServiceBuilder::new()
            .layer(ObserveLayer::new(MetricsObserver::new()))
            .layer(RetryLayer::new(policy()))
            .service(mock.clone());
        let res = call_with(&mut svc, grpc_call()).await.unwrap();
        assert_eq!(res.status(), 200);
        assert_eq!(mock.calls(), 3);
    });
    let expected: BTreeMap<String, (Option<Unit>, Vec<f64>)> = [
        ("grpc.client.call.retries", Unit::Count, vec![1.0]),
        (
            "grpc.client.call.transparent_retries",
            Unit::Count,
            vec![1.0],
        ),
        ("grpc.client.call.retry_delay", Unit::Seconds, vec![0.2]),
    ]
    .into_iter()
    .map(|(name, unit, values)| (format!("{name}{{{LABELS}}}"), (Some(unit), values)))
    .collect();
    // No hedges were sent: a count of zero is not reported.
    assert_eq!(seen, expected);
}

#[test]
fn a_first_answer_and_a_plain_http_call_record_no_grpc_metric() {
    let seen = grpc_series(async {
        let mock = Script::new([status(200), status(503), status(200)]);
        let mut svc = tower::ServiceBuilder::new()
            .layer(ObserveLayer::new(MetricsObserver::new()))
            .layer(RetryLayer::new(policy()))
            .service(mock.clone());
        // A gRPC call answered at once.
        call_with(&mut svc, grpc_call()).await.unwrap();
        // An HTTP call retried once.
        let get = Request::get("http://upstream.test/")
            .body(Full::default())
            .unwrap();
        call_with(&mut svc, get).await.unwrap();
        assert_eq!(mock.calls(), 3);
    });
    assert!(seen.is_empty(), "{seen:?}");
}
