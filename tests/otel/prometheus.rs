//! `MetricsObserver` into a real Prometheus exporter: its text output has the
//! names Prometheus expects (counters end in `_total`, durations carry
//! `_seconds`) and bounded label sets.

use std::collections::BTreeSet;

use backstop::observe::{MetricsObserver, ObserveLayer};
use backstop::test_util::{Protocol, Reply};
use backstop::RetryLayer;
use http::{Request, StatusCode};
use metrics_exporter_prometheus::PrometheusBuilder;
use tower::{ServiceBuilder, ServiceExt};

use crate::support::wire::{empty, full, quick, transport, upstream};

/// Every label a backstop metric may carry, as Prometheus spells them (`.` is `_`),
/// and the exporter's own (`le`, `quantile`).
const BOUNDED: [&str; 11] = [
    "server_address",
    "server_port",
    "url_scheme",
    "http_request_method",
    "http_response_status_code",
    "error_type",
    "route",
    "stop",
    "reason",
    "le",
    "quantile",
];

/// A GET answered after a 503, and a keyless POST whose 503 is not sent again,
/// over a loopback upstream, recorded by a Prometheus recorder: its text output.
fn rendered() -> String {
    // Prometheus's naming: `_total` on counters, the described unit on the rest.
    let recorder = PrometheusBuilder::new()
        .with_recommended_naming(true)
        .set_buckets(&[
            0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
        ])
        .unwrap()
        .build_recorder();
    let handle = recorder.handle();
    crate::recorded_by(&recorder, async {
        let up = upstream(
            Protocol::Http1,
            vec![
                Reply::status(503).into(),
                Reply::ok().into(),
                Reply::status(503).into(),
            ],
        )
        .await;
        let client = ServiceBuilder::new()
            .layer(ObserveLayer::new(MetricsObserver::new()))
            .layer(RetryLayer::new(quick()))
            .service(transport(Protocol::Http1));
        let get = Request::get(up.uri("/items/7?token=s3cret"))
            .header("authorization", "Bearer s3cret")
            .body(empty())
            .unwrap();
        let res = client.clone().oneshot(get).await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        let post = Request::post(up.uri("/items?token=s3cret"))
            .body(full("s3cret body"))
            .unwrap();
        let res = client.oneshot(post).await.unwrap();
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    });
    handle.render()
}

/// The `# TYPE` lines: each metric's name and type.
fn types(text: &str) -> Vec<(&str, &str)> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .collect()
}

/// Every label name used in the samples.
fn label_names(text: &str) -> BTreeSet<&str> {
    let mut names = BTreeSet::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((_, rest)) = line.split_once('{') else {
            continue;
        };
        let Some((labels, _)) = rest.rsplit_once('}') else {
            continue;
        };
        for pair in labels.split("\",") {
            if let Some((name, _)) = pair.split_once('=') {
                names.insert(name.trim_start_matches(','));
            }
        }
    }
    names
}

#[test]
fn prometheus_sees_total_counters_second_durations_and_bounded_labels() {
    let text = rendered();
    let types = types(&text);
    let of = |name: &str| types.iter().find(|(n, _)| *n == name).map(|(_, t)| *t);

    // OpenTelemetry's duration, in seconds, as Prometheus names it.
    assert_eq!(
        of("http_client_request_duration_seconds"),
        Some("histogram"),
        "{text}"
    );
    assert_eq!(of("backstop_call_duration_seconds"), Some("histogram"));
    // Counters end in `_total`.
    for counter in [
        "backstop_calls_total",
        "backstop_attempts_total",
        "backstop_retries_total",
        "backstop_retries_skipped_total",
    ] {
        assert_eq!(of(counter), Some("counter"), "{counter} in {text}");
    }
    for (name, kind) in &types {
        match *kind {
            "counter" => assert!(name.ends_with("_total"), "{name}"),
            "histogram" | "summary" => assert!(name.ends_with("_seconds"), "{name}"),
            _ => {}
        }
    }

    // One series per request sent: the 503 and the 200 of the GET, the POST's 503.
    let sent = |labels: &[&str]| {
        text.lines()
            .filter(|l| l.starts_with("http_client_request_duration_seconds_count{"))
            .filter(|l| labels.iter().all(|label| l.contains(label)))
            .map(|l| l.rsplit(' ').next().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    let get = "http_request_method=\"GET\"";
    let ok = ["http_response_status_code=\"200\"", get];
    assert_eq!(sent(&ok), ["1"], "{text}");
    let failed = [
        "http_response_status_code=\"503\"",
        "error_type=\"503\"",
        get,
    ];
    assert_eq!(sent(&failed), ["1"], "{text}");
    let post = [
        "http_response_status_code=\"503\"",
        "http_request_method=\"POST\"",
    ];
    assert_eq!(sent(&post), ["1"], "{text}");
    // The POST may have been processed: its 503 is not sent again, and says why.
    assert!(
        text.lines()
            .any(|l| l.starts_with("backstop_retries_skipped_total{")
                && l.contains("http_request_method=\"POST\"")
                && l.contains("reason=\"method\"")),
        "{text}"
    );

    // Label sets bounded: the convention's attributes and backstop's own, no path,
    // query, header value or body.
    let names = label_names(&text);
    for name in &names {
        assert!(BOUNDED.contains(name), "unexpected label {name} in {text}");
    }
    assert!(names.contains("server_port"), "{names:?}");
    for secret in ["/items", "token", "s3cret", "Bearer"] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
}
