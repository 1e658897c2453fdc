//! The `metrics` observer: OpenTelemetry's `http.client.request.duration` once per
//! request sent, backstop's own instruments per call, each with its kind, unit and
//! bounded attributes.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::support::requests::call_with;
use crate::support::script::{slow, status, status_with, Script};
use backstop::budget::{BudgetLayer, BudgetPolicy};
use backstop::circuit_breaker::{CircuitBreakerLayer, CircuitBreakerPolicy};
use backstop::hedge::{HedgeLayer, HedgePolicy};
use backstop::observe::{MetricsObserver, ObserveLayer};
use backstop::policy::Deadline;
use backstop::{RetryLayer, RetryPolicy};
use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use metrics::Unit;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::MetricKind;

/// The attributes every instrument but the ones per origin carries, for
/// `http://upstream.test/…`.
const SERVER: [(&str, &str); 3] = [
    ("server.address", "upstream.test"),
    ("server.port", "80"),
    ("url.scheme", "http"),
];

/// What was recorded of one series.
#[derive(Clone, Debug, PartialEq)]
enum Seen {
    Counter(u64),
    Gauge(f64),
    Histogram(Vec<f64>),
}

/// Runs `run` on a paused clock with a debugging recorder installed, and returns
/// each series as `name{key=value,…}` (the attributes sorted, the server's left
/// out once checked) with its kind and unit.
fn recorded(run: impl std::future::Future<Output = ()>) -> BTreeMap<String, Seen> {
    series(&snapshot_of(run))
}

/// Runs `run` on a paused clock with a debugging recorder installed; what it
/// recorded.
pub(crate) fn snapshot_of(run: impl std::future::Future<Output = ()>) -> Snapshotter {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        // The observer describes its instruments once per process, to the
        // recorder installed then: each test's own recorder is told here.
        MetricsObserver::new().describe();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(run);
    });
    snapshotter
}

fn series(snapshotter: &Snapshotter) -> BTreeMap<String, Seen> {
    let mut out = BTreeMap::new();
    for (composite, unit, _desc, value) in snapshotter.snapshot().into_vec() {
        let (kind, k) = (composite.kind(), composite.key());
        for (key, value) in SERVER {
            let found: Vec<_> = k.labels().filter(|l| l.key() == key).collect();
            assert_eq!(found.len(), 1, "{key} on {k:?}");
            assert_eq!(found[0].value(), value, "{k:?}");
        }
        // Bounded: no path, query, user information or header value.
        for l in k.labels() {
            assert!(!l.value().contains('/'), "{k:?}");
            assert!(!l.value().contains("id=") && !l.value().contains("secret"));
        }
        let expected_unit = match kind {
            MetricKind::Histogram => Some(Unit::Seconds),
            MetricKind::Counter => Some(Unit::Count),
            MetricKind::Gauge => unit,
        };
        assert_eq!(unit, expected_unit, "{k:?}");
        let mut labels: Vec<_> = k
            .labels()
            .filter(|l| !SERVER.iter().any(|(key, _)| *key == l.key()))
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        labels.sort();
        let seen = match value {
            DebugValue::Counter(n) => Seen::Counter(n),
            DebugValue::Gauge(g) => Seen::Gauge(g.into_inner()),
            DebugValue::Histogram(v) => Seen::Histogram(v.iter().map(|v| v.into_inner()).collect()),
        };
        out.insert(format!("{}{{{}}}", k.name(), labels.join(",")), seen);
    }
    out
}

fn get() -> Request<Full<Bytes>> {
    Request::get("http://user:secret@upstream.test/items?id=1")
        .body(Full::default())
        .unwrap()
}

fn expect(entries: &[(&str, Seen)]) -> BTreeMap<String, Seen> {
    entries
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

use Seen::{Counter, Gauge, Histogram};

#[test]
fn a_call_retried_after_a_503_records_each_request_sent_and_the_call_once() {
    let seen = recorded(async {
        // The 503 takes 1 s, the backoff up to 0.1 s, the 200 takes 2 s.
        let mock = Script::new([
            slow(Duration::from_secs(1), 503),
            slow(Duration::from_secs(2), 200),
        ]);
        let policy = RetryPolicy::builder()
            .backoff(Duration::from_millis(100), Duration::from_millis(100))
            .jitter(backstop::policy::Jitter::None)
            .build()
            .unwrap();
        let mut svc = tower::ServiceBuilder::new()
            .layer(ObserveLayer::new(MetricsObserver::new()))
            .layer(RetryLayer::new(policy))
            .service(mock.clone());
        let res = call_with(&mut svc, get()).await.unwrap();
        assert_eq!(res.status(), 200);
        assert_eq!(mock.calls(), 2);
    });
    assert_eq!(
        seen,
        expect(&[
            // Per request sent, OpenTelemetry's names and nothing else.
            (
                "http.client.request.duration{error.type=503,http.request.method=GET,http.response.status_code=503}",
                Histogram(vec![1.0]),
            ),
            (
                "http.client.request.duration{http.request.method=GET,http.response.status_code=200}",
                Histogram(vec![2.0]),
            ),
            (
                "backstop.attempts{error.type=503,http.request.method=GET,http.response.status_code=503}",
                Counter(1),
            ),
            (
                "backstop.attempts{http.request.method=GET,http.response.status_code=200}",
                Counter(1),
            ),
            // Per call: the retry and its wait included.
            (
                "backstop.call.duration{http.request.method=GET,http.response.status_code=200,stop=answered}",
                Histogram(vec![3.1]),
            ),
            (
                "backstop.calls{http.request.method=GET,http.response.status_code=200,stop=answered}",
                Counter(1),
            ),
            (
                "backstop.retries{http.request.method=GET,reason=idempotent}",
                Counter(1),
            ),
        ])
    );
}

#[test]
fn a_503_the_server_declines_to_see_again_counts_a_retry_skipped() {
    let seen = recorded(async {
        let mock = Script::new([status_with(503, &[("x-should-retry", "false")])]);
        let mut svc = tower::ServiceBuilder::new()
            .layer(ObserveLayer::new(MetricsObserver::new()))
            .layer(RetryLayer::new(RetryPolicy::default()))
            .service(mock.clone());
        let res = call_with(&mut svc, get()).await.unwrap();
        assert_eq!(res.status(), 503);
        assert_eq!(mock.calls(), 1);
    });
    assert_eq!(
        seen["backstop.retries.skipped{http.request.method=GET,reason=server_declined}"],
        Counter(1)
    );
}

#[test]
fn a_keyless_post_whose_503_is_not_sent_again_counts_a_retry_skipped_for_its_method() {
    let seen = recorded(async {
        let mock = Script::new([status(503), status(200)]);
        let mut svc = tower::ServiceBuilder::new()
            .layer(ObserveLayer::new(MetricsObserver::new()))
            .layer(RetryLayer::new(RetryPolicy::default()))
            .service(mock.clone());
        let req = Request::post("http://upstream.test/pay")
            .body(Full::<Bytes>::default())
            .unwrap();
        let res = call_with(&mut svc, req).await.unwrap();
        assert_eq!(res.status(), 503);
        assert_eq!(mock.calls(), 1);
    });
    let names: Vec<_> = seen.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "backstop.attempts{error.type=503,http.request.method=POST,http.response.status_code=503}",
            "backstop.call.duration{error.type=503,http.request.method=POST,http.response.status_code=503,stop=not_retryable}",
            "backstop.calls{error.type=503,http.request.method=POST,http.response.status_code=503,stop=not_retryable}",
            "backstop.retries.skipped{http.request.method=POST,reason=method}",
            "http.client.request.duration{error.type=503,http.request.method=POST,http.response.status_code=503}",
        ]
    );
    assert_eq!(
        seen["backstop.retries.skipped{http.request.method=POST,reason=method}"],
        Counter(1)
    );
}

#[test]
fn each_send_of_a_hedged_attempt_is_a_request_sent() {
    let seen = recorded(async {
        let mock = Script::new([
            slow(Duration::from_secs(5), 200),
            slow(Duration::from_millis(50), 200),
        ]);
        let mut svc = tower::ServiceBuilder::new()
            .layer(ObserveLayer::new(MetricsObserver::new()))
            .layer(RetryLayer::new(RetryPolicy::default()))
            .layer(HedgeLayer::new(HedgePolicy::after(Duration::from_millis(
                100,
            ))))
            .service(mock.clone());
        let res = call_with(&mut svc, get()).await.unwrap();
        assert_eq!(res.status(), 200);
    });
    // The original, cancelled after 0.15 s (not an error: no `error.type`), and
    // the copy's answer after 0.05 s.
    let requests: BTreeMap<_, _> = seen
        .iter()
        .filter(|(k, _)| k.starts_with("http.client.request.duration"))
        .collect();
    assert_eq!(
        requests,
        BTreeMap::from([
            (
                &"http.client.request.duration{http.request.method=GET}".to_owned(),
                &Histogram(vec![0.15]),
            ),
            (
                &"http.client.request.duration{http.request.method=GET,http.response.status_code=200}"
                    .to_owned(),
                &Histogram(vec![0.05]),
            ),
        ])
    );
    assert_eq!(seen["backstop.hedges{http.request.method=GET}"], Counter(1));
    assert_eq!(
        seen["backstop.hedges.won{http.request.method=GET}"],
        Counter(1)
    );
    assert_eq!(
        seen["backstop.calls{http.request.method=GET,http.response.status_code=200,stop=answered}"],
        Counter(1)
    );
}

#[test]
fn refusals_count_among_calls_and_the_breaker_and_budget_per_server() {
    let seen = recorded(async {
        let breaker = CircuitBreakerPolicy::builder()
            .consecutive_failures(2)
            .min_calls(u32::MAX)
            .cooldown(Duration::from_secs(60))
            .jitter(0.0)
            .build()
            .unwrap();
        // A: 503 then 200. B and C: three 503s each. D: refused.
        let mock = Script::new([503, 200, 503, 503, 503, 503, 503, 503].map(status));
        let mut svc = tower::ServiceBuilder::new()
            .layer(ObserveLayer::new(MetricsObserver::new()))
            .layer(CircuitBreakerLayer::new(breaker))
            .layer(BudgetLayer::default())
            .layer(RetryLayer::new(RetryPolicy::default()))
            .service(mock.clone());
        let mut statuses = Vec::new();
        for _ in 0..4 {
            statuses.push(match call_with(&mut svc, get()).await {
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
    let counts: BTreeMap<_, _> = seen
        .iter()
        .filter_map(|(k, v)| match v {
            Counter(n) => Some((k.as_str(), *n)),
            _ => None,
        })
        .collect();
    let e503 = "error.type=503,http.request.method=GET,http.response.status_code=503";
    let ok = "http.request.method=GET,http.response.status_code=200";
    assert_eq!(
        counts,
        BTreeMap::from([
            (&*format!("backstop.attempts{{{ok}}}"), 1),
            (&*format!("backstop.attempts{{{e503}}}"), 7),
            ("backstop.breaker.transitions{state=open}", 1),
            (&*format!("backstop.calls{{{ok},stop=answered}}"), 1),
            (
                &*format!("backstop.calls{{{e503},stop=attempts_exhausted}}"),
                2
            ),
            (
                "backstop.calls{error.type=circuit_open,http.request.method=GET,stop=circuit_open}",
                1
            ),
            (
                "backstop.retries.skipped{http.request.method=GET,reason=attempts_exhausted}",
                2
            ),
            (
                "backstop.retries{http.request.method=GET,reason=idempotent}",
                5
            ),
        ])
    );
    // The floor of 100 retries, plus three deposits of 0.2, less five retries.
    assert_eq!(seen["backstop.breaker.state{}"], Gauge(1.0));
    assert_eq!(seen["backstop.budget.available{}"], Gauge(95.0));
    let durations = seen.keys().filter(|k| k.contains(".duration{")).count();
    // Two attempt outcomes, two call outcomes.
    assert_eq!(durations, 4, "{seen:#?}");
    assert!(seen.keys().all(|k| !k.contains("resend_count")));
}

#[test]
fn an_origin_pause_is_counted_with_its_waits_and_refusals() {
    let seen = recorded(async {
        let budget = BudgetPolicy::builder()
            .pause_spread(Duration::ZERO)
            .build()
            .unwrap();
        // A: a 429 that pauses for 2 s. B: refused (its deadline ends inside
        // the pause). C: waits 2 s, then answered.
        let mock = Script::new([status_with(429, &[("retry-after", "2")]), status(200)]);
        let mut svc = tower::ServiceBuilder::new()
            .layer(ObserveLayer::new(MetricsObserver::new()))
            .layer(BudgetLayer::new(budget))
            .layer(RetryLayer::new(RetryPolicy::none()))
            .service(mock.clone());
        let mut statuses = Vec::new();
        for deadline in [None, Some(Duration::from_secs(1)), None] {
            let mut req = get();
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
    let pauses: BTreeMap<_, _> = seen
        .iter()
        .filter(|(k, _)| k.contains("pause") || k.contains("resume") || k.contains("=paused"))
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    assert_eq!(
        pauses,
        BTreeMap::from([
            (
                "backstop.calls{error.type=paused,http.request.method=GET,stop=paused}",
                &Counter(1)
            ),
            ("backstop.origin.pauses{}", &Counter(1)),
            ("backstop.origin.resumes{}", &Counter(1)),
            ("backstop.origin.paused{}", &Gauge(0.0)),
            (
                "backstop.pause.wait{http.request.method=GET}",
                &Histogram(vec![2.0])
            ),
        ])
    );
}

#[test]
fn a_call_the_throttle_sheds_is_counted_as_a_rejection_and_a_refused_call() {
    let seen = recorded(async {
        // Every answer a 429: after the first, the throttle sheds (seeded draws).
        let mock = Script::new([429; 20].map(status));
        let throttle = backstop::ThrottlePolicy::builder().seed(9).build().unwrap();
        let mut svc = tower::ServiceBuilder::new()
            .layer(ObserveLayer::new(MetricsObserver::new()))
            .layer(backstop::ThrottleLayer::new(throttle))
            .layer(RetryLayer::new(RetryPolicy::none()))
            .service(mock.clone());
        let mut shed = 0;
        for _ in 0..20 {
            if let Err(err) = call_with(&mut svc, get()).await {
                assert!(err.is_throttled());
                shed += 1;
            }
        }
        assert!(shed > 10, "{shed}");
        assert_eq!(mock.calls(), 20 - shed);
    });
    let Counter(rejections) = seen["backstop.throttle.rejections{}"] else {
        panic!("a counter: {seen:#?}")
    };
    let refused = "backstop.calls{error.type=throttled,http.request.method=GET,stop=throttled}";
    assert_eq!(seen[refused], Counter(rejections));
    let e429 = "error.type=429,http.request.method=GET,http.response.status_code=429";
    let answered = format!("backstop.calls{{{e429},stop=attempts_exhausted}}");
    assert_eq!(seen[&*answered], Counter(20 - rejections));
}
