//! `MetricsObserver` through the `metrics` facade into OpenTelemetry's SDK (the
//! `metrics-exporter-otel` recorder, OpenTelemetry's in-memory metric exporter):
//! names, units and attributes as OpenTelemetry receives them.

use backstop::observe::{MetricsObserver, ObserveLayer};
use backstop::test_util::{Protocol, Reply};
use backstop::RetryLayer;
use http::{Request, StatusCode};
use metrics_exporter_otel::OpenTelemetryRecorder;
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, Metric, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use tower::{ServiceBuilder, ServiceExt};

use crate::support::wire::{empty, quick, transport, upstream};

/// A GET answered after a 503 over a loopback upstream, recorded through the
/// facade into OpenTelemetry's SDK: what its exporter received.
fn exported() -> Vec<ResourceMetrics> {
    let exporter = InMemoryMetricExporter::default();
    let provider = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(exporter.clone()).build())
        .build();
    let recorder = OpenTelemetryRecorder::new(provider.meter("backstop-test"));
    crate::recorded_by(&recorder, async {
        let up = upstream(
            Protocol::Http2,
            vec![Reply::status(503).into(), Reply::ok().into()],
        )
        .await;
        let client = ServiceBuilder::new()
            .layer(ObserveLayer::new(MetricsObserver::new()))
            .layer(RetryLayer::new(quick()))
            .service(transport(Protocol::Http2));
        let req = Request::get(up.uri("/items?token=s3cret"))
            .body(empty())
            .unwrap();
        let res = client.oneshot(req).await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
    });
    provider.force_flush().unwrap();
    exporter.get_finished_metrics().unwrap()
}

fn find<'a>(all: &'a [ResourceMetrics], name: &str) -> Option<&'a Metric> {
    all.iter()
        .flat_map(|rm| rm.scope_metrics())
        .flat_map(|sm| sm.metrics())
        .find(|m| m.name() == name)
}

/// The attributes of each data point of a histogram, sorted.
fn histogram_points(metric: &Metric) -> Vec<(Vec<(String, String)>, u64)> {
    let AggregatedMetrics::F64(MetricData::Histogram(h)) = metric.data() else {
        panic!(
            "{} is not an f64 histogram: {:?}",
            metric.name(),
            metric.data()
        );
    };
    let mut points: Vec<_> = h
        .data_points()
        .map(|p| {
            let mut attrs: Vec<_> = p.attributes().map(pair).collect();
            attrs.sort();
            (attrs, p.count())
        })
        .collect();
    points.sort();
    points
}

fn pair(kv: &KeyValue) -> (String, String) {
    let value = match &kv.value {
        Value::String(s) => s.to_string(),
        other => panic!("{} is not a string: {other:?}", kv.key),
    };
    (kv.key.to_string(), value)
}

#[test]
fn opentelemetry_receives_the_conventions_duration_in_seconds_per_request_sent() {
    let all = exported();
    let duration = find(&all, "http.client.request.duration").expect("the duration");
    assert_eq!(duration.unit(), "s");
    let points = histogram_points(duration);
    let attrs = |status: &'static str, error: Option<&'static str>| {
        let mut attrs = vec![
            ("http.request.method", "GET"),
            ("http.response.status_code", status),
            ("server.address", "127.0.0.1"),
            ("url.scheme", "http"),
        ];
        attrs.extend(error.map(|e| ("error.type", e)));
        attrs
    };
    // One point per request sent: the 503, then the resend's 200; the port is the
    // upstream's, whatever it was.
    assert_eq!(points.len(), 2, "{points:?}");
    for (got, count) in &points {
        assert_eq!(*count, 1);
        let port = got
            .iter()
            .find(|(k, _)| k == "server.port")
            .expect("a port");
        assert!(port.1.parse::<u16>().is_ok(), "{port:?}");
        let without_port: Vec<(&str, &str)> = got
            .iter()
            .filter(|(k, _)| k != "server.port")
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let mut ok = attrs("200", None);
        ok.sort();
        let mut failed = attrs("503", Some("503"));
        failed.sort();
        assert!(without_port == ok || without_port == failed, "{got:?}");
    }

    let call = find(&all, "backstop.call.duration").expect("the call's duration");
    assert_eq!(call.unit(), "s");
    let calls = find(&all, "backstop.calls").expect("the calls");
    assert!(
        matches!(calls.data(), AggregatedMetrics::U64(MetricData::Sum(_))),
        "{:?}",
        calls.data()
    );
    // Resends are a span attribute, never a metric attribute.
    for rm in &all {
        for m in rm.scope_metrics().flat_map(|sm| sm.metrics()) {
            let text = format!("{:?}", m.data());
            assert!(!text.contains("resend_count"), "{}: {text}", m.name());
            assert!(
                !text.contains("s3cret") && !text.contains("/items"),
                "{text}"
            );
        }
    }
}
