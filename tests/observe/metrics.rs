//! The `metrics` observer: a scripted run records exactly the expected counts.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::support::requests::call_with;
use crate::support::script::{status, status_with, Script};
use backstop::budget::{BudgetLayer, BudgetPolicy};
use backstop::circuit_breaker::{CircuitBreakerLayer, CircuitBreakerPolicy};
use backstop::observe::{MetricsObserver, ObserveLayer};
use backstop::policy::Deadline;
use backstop::{RetryLayer, RetryPolicy};
use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use tower::ServiceBuilder;

/// `name{label=value,…}` with the labels in order, `origin` left out (it is the
/// same everywhere, and checked once).
fn key(key: &metrics::Key) -> String {
    let mut labels: Vec<_> = key
        .labels()
        .filter(|l| l.key() != "origin")
        .map(|l| format!("{}={}", l.key(), l.value()))
        .collect();
    labels.sort();
    format!("{}{{{}}}", key.name(), labels.join(","))
}

#[test]
fn a_scripted_run_records_exactly_the_expected_counts() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(async {
            let breaker = CircuitBreakerPolicy::builder()
                .consecutive_failures(2)
                .min_calls(u32::MAX)
                .cooldown(Duration::from_secs(60))
                .jitter(0.0)
                .build()
                .unwrap();
            // A: 503 then 200. B and C: three 503s each. D: refused.
            let mock = Script::new([503, 200, 503, 503, 503, 503, 503, 503].map(status));
            let mut svc = ServiceBuilder::new()
                .layer(ObserveLayer::new(MetricsObserver::new()))
                .layer(CircuitBreakerLayer::new(breaker))
                .layer(BudgetLayer::default())
                .layer(RetryLayer::new(RetryPolicy::default()))
                .service(mock.clone());
            let mut statuses = Vec::new();
            for _ in 0..4 {
                let req = Request::get("http://upstream.test/items?id=1")
                    .body(Full::<Bytes>::default())
                    .unwrap();
                statuses.push(match call_with(&mut svc, req).await {
                    Ok(res) => res.status().as_u16(),
                    Err(err) => {
                        assert!(err.is_circuit_open());
                        0
                    }
                });
            }
            assert_eq!(statuses, [200, 503, 503, 0]);
            assert_eq!(mock.calls(), 8);
        });
    });

    let mut counters = BTreeMap::new();
    let mut gauges = BTreeMap::new();
    let mut histograms = BTreeMap::new();
    for (composite, _unit, _desc, value) in snapshotter.snapshot().into_vec() {
        let k = composite.key();
        let origins: Vec<_> = k.labels().filter(|l| l.key() == "origin").collect();
        assert_eq!(origins.len(), 1, "{k:?}");
        assert_eq!(origins[0].value(), "http://upstream.test");
        assert!(k.labels().all(|l| !l.value().contains("items")), "{k:?}");
        match value {
            DebugValue::Counter(n) => {
                counters.insert(key(k), n);
            }
            DebugValue::Gauge(g) => {
                gauges.insert(key(k), g.into_inner());
            }
            DebugValue::Histogram(v) => {
                histograms.insert(key(k), v.len());
            }
        }
    }
    let expected_counters: BTreeMap<String, u64> = [
        ("backstop.attempts{method=GET,outcome=200}", 1),
        ("backstop.attempts{method=GET,outcome=503}", 7),
        ("backstop.breaker.transitions{state=open}", 1),
        ("backstop.calls.refused{method=GET,refusal=circuit_open}", 1),
        ("backstop.calls{method=GET,outcome=200,stop=answered}", 1),
        (
            "backstop.calls{method=GET,outcome=503,stop=attempts_exhausted}",
            2,
        ),
        (
            "backstop.retries.skipped{gate=attempts_exhausted,method=GET}",
            2,
        ),
        ("backstop.retries{method=GET,reason=idempotent}", 5),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(counters, expected_counters);

    // The floor of 100 retries, plus three deposits of 0.2, less five retries.
    let expected_gauges: BTreeMap<String, f64> = [
        ("backstop.breaker.state{}", 1.0),
        ("backstop.budget.available{}", 95.0),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(gauges, expected_gauges);

    let expected_histograms: BTreeMap<String, usize> = [
        ("backstop.attempt.duration{method=GET,outcome=200}", 1),
        ("backstop.attempt.duration{method=GET,outcome=503}", 7),
        (
            "http.client.request.duration{http.request.resend_count=1,method=GET,outcome=200}",
            1,
        ),
        (
            "http.client.request.duration{http.request.resend_count=2,method=GET,outcome=503}",
            2,
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(histograms, expected_histograms);
}

#[test]
fn an_origin_pause_is_counted_with_its_waits_and_refusals() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(async {
            let budget = BudgetPolicy::builder()
                .pause_spread(Duration::ZERO)
                .build()
                .unwrap();
            // A: a 429 that pauses for 2 s. B: refused (its deadline ends inside
            // the pause). C: waits 2 s, then answered.
            let mock = Script::new([status_with(429, &[("retry-after", "2")]), status(200)]);
            let mut svc = ServiceBuilder::new()
                .layer(ObserveLayer::new(MetricsObserver::new()))
                .layer(BudgetLayer::new(budget))
                .layer(RetryLayer::new(RetryPolicy::none()))
                .service(mock.clone());
            let mut statuses = Vec::new();
            for deadline in [None, Some(Duration::from_secs(1)), None] {
                let mut req = Request::get("http://upstream.test/items?id=1")
                    .body(Full::<Bytes>::default())
                    .unwrap();
                if let Some(after) = deadline {
                    req.extensions_mut().insert(Deadline::after(after));
                }
                statuses.push(match call_with(&mut svc, req).await {
                    Ok(res) => res.status().as_u16(),
                    Err(err) => {
                        assert!(err.is_paused());
                        0
                    }
                });
            }
            assert_eq!(statuses, [429, 0, 200]);
            assert_eq!(mock.calls(), 2);
        });
    });

    let mut counters = BTreeMap::new();
    let mut gauges = BTreeMap::new();
    let mut histograms = BTreeMap::new();
    for (composite, _unit, _desc, value) in snapshotter.snapshot().into_vec() {
        let k = composite.key();
        if !k.name().contains("pause") && !k.name().contains("resume") {
            if k.name() == "backstop.calls.refused" {
                if let DebugValue::Counter(n) = value {
                    counters.insert(key(k), n);
                }
            }
            continue;
        }
        match value {
            DebugValue::Counter(n) => {
                counters.insert(key(k), n);
            }
            DebugValue::Gauge(g) => {
                gauges.insert(key(k), g.into_inner());
            }
            DebugValue::Histogram(v) => {
                histograms.insert(key(k), v);
            }
        }
    }
    let expected_counters: BTreeMap<String, u64> = [
        ("backstop.calls.refused{method=GET,refusal=paused}", 1),
        ("backstop.origin.pauses{}", 1),
        ("backstop.origin.resumes{}", 1),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(counters, expected_counters);
    assert_eq!(
        gauges,
        BTreeMap::from([("backstop.origin.paused{}".to_owned(), 0.0)])
    );
    let waits: Vec<f64> = histograms["backstop.pause.wait{method=GET}"]
        .iter()
        .map(|v| v.into_inner())
        .collect();
    assert_eq!(waits, [2.0]);
    assert_eq!(histograms.len(), 1);
}
