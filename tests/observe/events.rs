//! What each layer tells the observer: retries, gates, refusals, breaker states,
//! budgets and hedges, on the paused clock and over real loopback upstreams.

use crate::support::shape::{BudgetLayer, CircuitBreakerLayer};
use std::io;
use std::sync::Arc;
use std::time::Duration;

use crate::record::Recorder;
use crate::support::requests::call_with;
use crate::support::script::{io_error, slow, status, status_with, Reply, Script};
use crate::support::shape::Stack;
use backstop::budget::{BudgetPolicy, PauseMode};
use backstop::hedge::{HedgeLayer, HedgePolicy};
use backstop::observe::ObserveLayer;
use backstop::policy::{CallContext, Deadline};
use backstop::{RetryLayer, RetryPolicy};
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use tower::ServiceBuilder;

fn get(uri: &str) -> Request<Full<Bytes>> {
    Request::get(uri).body(Full::default()).unwrap()
}

use crate::support::policies::breaker;

type Client =
    tower::util::BoxCloneService<Request<Full<Bytes>>, http::Response<Reply>, backstop::Error>;

/// Observe → the stack → `mock`.
fn observed(stack: &Stack, recorder: &Recorder, mock: &Script) -> Client {
    let inner: Client = crate::stacked!(stack, mock.clone());
    tower::util::BoxCloneService::new(
        ServiceBuilder::new()
            .layer(ObserveLayer::new(recorder.clone()))
            .service(inner),
    )
}

const ORIGIN: &str = "origin=http://upstream.test:8080 method=GET";

#[tokio::test(start_paused = true)]
async fn retries_tell_the_reason_the_wait_and_the_gate_without_secrets() {
    let recorder = Recorder::default();
    let mock = Script::new([
        status_with(503, &[("retry-after", "1")]),
        io_error(io::ErrorKind::ConnectionReset),
        status(503),
    ]);
    let mut svc = ServiceBuilder::new()
        .layer(ObserveLayer::new(recorder.clone()))
        .layer(RetryLayer::new(RetryPolicy::default()))
        .service(mock.clone());
    let req = get("http://user:pw@upstream.test:8080/items?token=s3cret");
    let res = call_with(&mut svc, req).await.unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);

    let lines = recorder.lines();
    assert_eq!(lines.len(), 7, "{lines:#?}");
    assert_eq!(
        lines[0],
        format!("attempt_finished attempt=1 outcome=503 tracked=false {ORIGIN}")
    );
    assert_eq!(
        lines[1],
        format!("retry_scheduled attempt=1 reason=idempotent wait_ms=1000 {ORIGIN}")
    );
    assert_eq!(
        lines[2],
        format!("attempt_finished attempt=2 outcome=closed tracked=false {ORIGIN}")
    );
    assert!(
        lines[3].starts_with("retry_scheduled attempt=2 reason=idempotent wait_ms="),
        "{}",
        lines[3]
    );
    assert_eq!(
        lines[4],
        format!("attempt_finished attempt=3 outcome=503 tracked=false {ORIGIN}")
    );
    assert_eq!(
        lines[5],
        format!("retry_skipped attempt=3 gate=attempts_exhausted {ORIGIN}")
    );
    assert_eq!(
        lines[6],
        format!("call_finished outcome=503 attempts=3 stop=attempts_exhausted {ORIGIN}")
    );
    for line in &lines {
        for secret in ["s3cret", "user", "pw@", "/items"] {
            assert!(!line.contains(secret), "{secret} leaked into {line}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_first_answer_is_one_attempt_and_one_call() {
    let recorder = Recorder::default();
    let mut svc = ServiceBuilder::new()
        .layer(ObserveLayer::new(recorder.clone()))
        .layer(RetryLayer::new(RetryPolicy::default()))
        .service(Script::new([status(200)]));
    let res = call_with(&mut svc, get("http://upstream.test:8080/"))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(
        recorder.lines(),
        [
            format!("attempt_finished attempt=1 outcome=200 tracked=false {ORIGIN}"),
            format!("call_finished outcome=200 attempts=1 stop=answered {ORIGIN}"),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn an_observer_set_for_one_call_wins_and_a_post_is_tracked() {
    let layer = Recorder::default();
    let own = Recorder::default();
    let mut svc = ServiceBuilder::new()
        .layer(ObserveLayer::new(layer.clone()))
        .layer(RetryLayer::new(RetryPolicy::default()))
        .service(Script::new([io_error(io::ErrorKind::ConnectionRefused)]));
    let mut req = Request::post("http://upstream.test:8080/pay")
        .body(Full::<Bytes>::default())
        .unwrap();
    CallContext::of_mut(req.extensions_mut()).set_observer(Arc::new(own.clone()));
    let res = call_with(&mut svc, req).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert!(layer.lines().is_empty(), "{:?}", layer.lines());
    let lines = own.lines();
    assert_eq!(lines.len(), 4, "{lines:#?}");
    // A keyless POST is tracked: its attempts carry their wire progress.
    assert!(
        lines[0].starts_with("attempt_finished attempt=1 outcome=connect tracked=true"),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].starts_with("retry_scheduled attempt=1 reason=not_processed"),
        "{}",
        lines[1]
    );
    assert!(
        lines[3].starts_with("call_finished outcome=200 attempts=2 stop=answered"),
        "{}",
        lines[3]
    );
    assert!(lines[3].ends_with("method=POST"), "{}", lines[3]);
}

#[tokio::test(start_paused = true)]
async fn a_keyless_post_whose_503_is_not_sent_again_tells_a_skipped_retry() {
    let recorder = Recorder::default();
    let mock = Script::new([status(503), status(200)]);
    let mut svc = ServiceBuilder::new()
        .layer(ObserveLayer::new(recorder.clone()))
        .layer(RetryLayer::new(RetryPolicy::default()))
        .service(mock.clone());
    let req = Request::post("http://upstream.test:8080/pay")
        .body(Full::<Bytes>::default())
        .unwrap();
    let res = call_with(&mut svc, req).await.unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(mock.calls(), 1);
    let tail = "origin=http://upstream.test:8080 method=POST";
    assert_eq!(
        recorder.lines(),
        [
            format!("attempt_finished attempt=1 outcome=503 tracked=true {tail}"),
            format!("retry_skipped attempt=1 gate=not_retryable {tail}"),
            format!("call_finished outcome=503 attempts=1 stop=not_retryable {tail}"),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_503_the_server_declines_to_see_again_tells_a_skipped_retry() {
    let recorder = Recorder::default();
    let mock = Script::new([status_with(503, &[("x-should-retry", "false")])]);
    let mut svc = ServiceBuilder::new()
        .layer(ObserveLayer::new(recorder.clone()))
        .layer(RetryLayer::new(RetryPolicy::default()))
        .service(mock.clone());
    let res = call_with(&mut svc, get("http://upstream.test:8080/"))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(mock.calls(), 1);
    assert_eq!(
        recorder.lines(),
        [
            format!("attempt_finished attempt=1 outcome=503 tracked=false {ORIGIN}"),
            format!("retry_skipped attempt=1 gate=not_retryable {ORIGIN}"),
            format!("call_finished outcome=503 attempts=1 stop=not_retryable {ORIGIN}"),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_without_time_for_an_attempt_is_refused_and_finished() {
    let recorder = Recorder::default();
    let mock = Script::new([]);
    let mut svc = ServiceBuilder::new()
        .layer(ObserveLayer::new(recorder.clone()))
        .layer(RetryLayer::new(RetryPolicy::default()))
        .service(mock.clone());
    let mut req = get("http://upstream.test:8080/");
    req.extensions_mut().insert(Deadline::after(Duration::ZERO));
    let err = call_with(&mut svc, req).await.unwrap_err();
    assert!(err.is_deadline());
    assert_eq!(mock.calls(), 0);
    assert_eq!(
        recorder.lines(),
        [
            format!("call_refused refusal=deadline {ORIGIN}"),
            format!("call_finished outcome=timeout attempts=0 stop=deadline {ORIGIN}"),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn the_breaker_tells_each_state_change_and_each_refusal() {
    let recorder = Recorder::default();
    let mock = Script::new([status(503), status(503), status(200)]);
    let stack = Stack::new(RetryPolicy::none()).breaker(&CircuitBreakerLayer::new(breaker(
        2,
        Duration::from_secs(1),
    )));
    let mut svc = observed(&stack, &recorder, &mock);
    let uri = "http://upstream.test:8080/";
    for _ in 0..2 {
        let res = call_with(&mut svc, get(uri)).await.unwrap();
        assert_eq!(res.status(), 503);
    }
    for _ in 0..3 {
        let err = call_with(&mut svc, get(uri)).await.unwrap_err();
        assert!(err.is_circuit_open());
    }
    tokio::time::advance(Duration::from_secs(1)).await;
    let res = call_with(&mut svc, get(uri)).await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(mock.calls(), 3);

    assert_eq!(
        recorder.named("breaker_state_changed"),
        [
            format!("breaker_state_changed from=closed to=open {ORIGIN}"),
            format!("breaker_state_changed from=open to=half-open {ORIGIN}"),
            format!("breaker_state_changed from=half-open to=closed {ORIGIN}"),
        ]
    );
    assert_eq!(
        recorder.named("call_refused"),
        vec![format!("call_refused refusal=circuit_open {ORIGIN}"); 3]
    );
    // A refused call never reaches the retry layer: three calls finished there.
    assert_eq!(recorder.named("call_finished").len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_budget_that_runs_dry_is_told_once() {
    let recorder = Recorder::default();
    let budget = BudgetPolicy::builder()
        .ratio(0.5)
        .min_per_second(0.0)
        .build()
        .unwrap();
    let mock = Script::new((0..10).map(|_| status(503)));
    let stack = Stack::new(RetryPolicy::default()).budget(&BudgetLayer::new(budget));
    let mut svc = observed(&stack, &recorder, &mock);
    for _ in 0..2 {
        let res = call_with(&mut svc, get("http://upstream.test:8080/"))
            .await
            .unwrap();
        assert_eq!(res.status(), 503);
    }
    // Half a retry per call: the second call's completes one, which its retry takes.
    assert_eq!(mock.calls(), 3);
    assert_eq!(
        recorder.named("budget_ran_dry"),
        [format!("budget_ran_dry {ORIGIN}")]
    );
    assert_eq!(
        recorder.named("retry_skipped"),
        [
            format!("retry_skipped attempt=1 gate=budget {ORIGIN}"),
            format!("retry_skipped attempt=2 gate=budget {ORIGIN}"),
        ]
    );
    assert_eq!(recorder.named("retry_scheduled").len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_hedge_that_wins_cancels_the_original() {
    let recorder = Recorder::default();
    let mock = Script::new([slow(Duration::from_secs(5), 200), status(200)]);
    let mut svc = ServiceBuilder::new()
        .layer(ObserveLayer::new(recorder.clone()))
        .layer(RetryLayer::new(RetryPolicy::default()))
        .layer(HedgeLayer::new(HedgePolicy::after(Duration::from_millis(
            100,
        ))))
        .service(mock.clone());
    let started = tokio::time::Instant::now();
    let res = call_with(&mut svc, get("http://upstream.test:8080/"))
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(started.elapsed(), Duration::from_millis(100));
    let lines: Vec<_> = recorder
        .lines()
        .into_iter()
        .filter(|l| l.starts_with("hedge") || l.starts_with("loser"))
        .collect();
    assert_eq!(
        lines,
        [
            format!("hedge_sent copy=1 {ORIGIN}"),
            format!("loser_cancelled copy=0 {ORIGIN}"),
            format!("hedge_won copy=1 {ORIGIN}"),
        ]
    );
    assert_eq!(
        recorder.named("call_finished"),
        [format!(
            "call_finished outcome=200 attempts=2 stop=answered {ORIGIN}"
        )]
    );
    // One request sent per send: the original cancelled, the copy answered.
    assert_eq!(
        recorder.named("attempt_finished"),
        [
            format!("attempt_finished attempt=1 outcome=canceled tracked=false {ORIGIN}"),
            format!("attempt_finished attempt=1 outcome=200 tracked=false copy=1 {ORIGIN}"),
        ]
    );
}

// Over real loopback upstreams

#[cfg(feature = "test-util")]
mod wire {
    use super::*;
    use crate::support::wire::{client, within_10s, BOTH};
    use backstop::test_util::{Reply, Upstream};
    use backstop::ReplayBody;
    use hyper_util::client::legacy::{connect::HttpConnector, Client};

    type Transport = Client<HttpConnector, ReplayBody<Full<Bytes>>>;

    /// Observe → the stack → `transport`.
    fn observed_over(
        stack: &Stack,
        recorder: &Recorder,
        transport: Transport,
    ) -> tower::util::BoxCloneService<
        Request<Full<Bytes>>,
        http::Response<hyper::body::Incoming>,
        backstop::Error,
    > {
        let inner: tower::util::BoxCloneService<_, _, backstop::Error> =
            crate::stacked!(stack, transport);
        tower::util::BoxCloneService::new(
            ServiceBuilder::new()
                .layer(ObserveLayer::new(recorder.clone()))
                .service(inner),
        )
    }

    fn quick() -> RetryPolicy {
        RetryPolicy::builder()
            .backoff(Duration::from_millis(1), Duration::from_millis(5))
            .build()
            .unwrap()
    }

    #[tokio::test]
    async fn a_stack_tells_one_call_with_its_attempts_and_retries() {
        within_10s(async {
            for protocol in BOTH {
                let upstream = Upstream::builder()
                    .protocol(protocol)
                    .script([Reply::status(503), Reply::status(502)])
                    .then(Reply::ok().body("ok"))
                    .start()
                    .await
                    .unwrap();
                let recorder = Recorder::default();
                let stack = Stack::new(quick())
                    .breaker(&CircuitBreakerLayer::default())
                    .budget(&BudgetLayer::default());
                let mut svc = observed_over(&stack, &recorder, client(protocol));
                let req = get(&upstream.uri("/orders?id=42").to_string());
                let res = call_with(&mut svc, req).await.unwrap();
                assert_eq!(res.status(), 200, "{protocol:?}");
                let origin = format!("origin=http://{} method=GET", upstream.addr());
                let lines = recorder.lines();
                let names: Vec<_> = lines.iter().map(|l| l.split(' ').next().unwrap()).collect();
                assert_eq!(
                    names,
                    [
                        "attempt_finished",
                        "retry_scheduled",
                        "attempt_finished",
                        "retry_scheduled",
                        "attempt_finished",
                        "call_finished"
                    ],
                    "{protocol:?}: {lines:#?}"
                );
                assert!(lines[0].contains("outcome=503"), "{}", lines[0]);
                assert!(lines[2].contains("outcome=502"), "{}", lines[2]);
                assert_eq!(
                    lines[5],
                    format!("call_finished outcome=200 attempts=3 stop=answered {origin}")
                );
                assert!(lines
                    .iter()
                    .all(|l| l.ends_with(&origin) && !l.contains("orders")));
                assert_eq!(upstream.requests().len(), 3, "{protocol:?}");
            }
        })
        .await;
    }

    #[tokio::test]
    async fn an_open_breaker_is_told_as_refusals_that_reach_no_upstream() {
        within_10s(async {
            for protocol in BOTH {
                let upstream = Upstream::builder()
                    .protocol(protocol)
                    .then(Reply::status(503))
                    .start()
                    .await
                    .unwrap();
                let recorder = Recorder::default();
                let stack = Stack::new(quick()).breaker(&CircuitBreakerLayer::new(breaker(
                    2,
                    Duration::from_secs(60),
                )));
                let mut svc = observed_over(&stack, &recorder, client(protocol));
                for _ in 0..5 {
                    let req = get(&upstream.uri("/").to_string());
                    let _ = call_with(&mut svc, req).await;
                }
                assert_eq!(
                    upstream.requests().len(),
                    6,
                    "{protocol:?}: two calls of three"
                );
                assert_eq!(recorder.named("call_refused").len(), 3, "{protocol:?}");
                assert_eq!(
                    recorder.named("breaker_state_changed").len(),
                    1,
                    "{protocol:?}"
                );
                assert_eq!(recorder.named("attempt_finished").len(), 6, "{protocol:?}");
                assert_eq!(recorder.named("call_finished").len(), 2, "{protocol:?}");
            }
        })
        .await;
    }

    #[tokio::test]
    async fn a_slow_original_loses_to_its_hedge_over_the_wire() {
        within_10s(async {
            for protocol in BOTH {
                let upstream = Upstream::builder()
                    .protocol(protocol)
                    .script([Reply::ok().delay(Duration::from_secs(5))])
                    .then(Reply::ok().body("fast"))
                    .start()
                    .await
                    .unwrap();
                let recorder = Recorder::default();
                let mut svc = ServiceBuilder::new()
                    .layer(ObserveLayer::new(recorder.clone()))
                    .layer(RetryLayer::new(quick()))
                    .layer(HedgeLayer::new(HedgePolicy::after(Duration::from_millis(
                        50,
                    ))))
                    .service::<Transport>(client(protocol));
                let req = get(&upstream.uri("/").to_string());
                let res = call_with(&mut svc, req).await.unwrap();
                assert_eq!(res.status(), 200);
                assert_eq!(recorder.named("hedge_sent").len(), 1, "{protocol:?}");
                assert_eq!(recorder.named("loser_cancelled").len(), 1, "{protocol:?}");
                assert!(recorder.named("loser_cancelled")[0].starts_with("loser_cancelled copy=0"));
                assert!(recorder.named("hedge_won")[0].starts_with("hedge_won copy=1"));
            }
        })
        .await;
    }
}

fn pausing_budget(mode: PauseMode) -> BudgetLayer {
    BudgetLayer::new(
        BudgetPolicy::builder()
            .pause_mode(mode)
            .pause_spread(Duration::ZERO)
            .build()
            .unwrap(),
    )
}

#[tokio::test(start_paused = true)]
async fn a_paused_then_resumed_origin_is_told_with_the_calls_that_waited() {
    let recorder = Recorder::default();
    let mock = Script::new([status_with(429, &[("retry-after", "2")]), status(200)]);
    let stack = Stack::new(RetryPolicy::none()).budget(&pausing_budget(PauseMode::Wait));
    let mut svc = observed(&stack, &recorder, &mock);
    let res = call_with(&mut svc, get("http://upstream.test:8080/a?token=s3cret"))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    let before = recorder.lines().len();
    let start = tokio::time::Instant::now();
    let res = call_with(&mut svc, get("http://upstream.test:8080/b"))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    assert_eq!(mock.calls(), 2);
    let lines = recorder.lines();
    assert_eq!(before, 4);
    assert_eq!(
        lines,
        [
            // The first call's final answer pauses the origin (budget layer)...
            format!("attempt_finished attempt=1 outcome=429 tracked=false {ORIGIN}"),
            format!("retry_skipped attempt=1 gate=attempts_exhausted {ORIGIN}"),
            format!("call_finished outcome=429 attempts=1 stop=attempts_exhausted {ORIGIN}"),
            format!("origin_paused pause_ms=2000 {ORIGIN}"),
            // ...the second waits for it, and is the first to find it over.
            format!("call_waited wait_ms=2000 {ORIGIN}"),
            format!("origin_resumed {ORIGIN}"),
            format!("attempt_finished attempt=1 outcome=200 tracked=false {ORIGIN}"),
            format!("call_finished outcome=200 attempts=1 stop=answered {ORIGIN}"),
        ]
    );
    assert!(lines.iter().all(|l| !l.contains("s3cret")));
}

#[tokio::test(start_paused = true)]
async fn a_retry_that_paused_its_origin_tells_the_pause_and_its_end() {
    let recorder = Recorder::default();
    let mock = Script::new([status_with(503, &[("retry-after", "1")]), status(200)]);
    let stack = Stack::new(RetryPolicy::default()).budget(&pausing_budget(PauseMode::Wait));
    let mut svc = observed(&stack, &recorder, &mock);
    let res = call_with(&mut svc, get("http://upstream.test:8080/"))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(
        recorder.lines(),
        [
            format!("attempt_finished attempt=1 outcome=503 tracked=false {ORIGIN}"),
            // The retry layer pauses on the answer it retries after...
            format!("origin_paused pause_ms=1000 {ORIGIN}"),
            format!("retry_scheduled attempt=1 reason=idempotent wait_ms=1000 {ORIGIN}"),
            // ...and finds the pause over when its own wait (the same hint) ends.
            format!("origin_resumed {ORIGIN}"),
            format!("attempt_finished attempt=2 outcome=200 tracked=false {ORIGIN}"),
            format!("call_finished outcome=200 attempts=2 stop=answered {ORIGIN}"),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_the_pause_refuses_is_told_as_a_refusal_alone() {
    for (mode, deadline) in [
        (PauseMode::Wait, Some(Duration::from_secs(1))),
        (PauseMode::FailFast, None),
    ] {
        let recorder = Recorder::default();
        let mock = Script::new([status_with(429, &[("retry-after", "2")])]);
        let stack = Stack::new(RetryPolicy::none()).budget(&pausing_budget(mode));
        let mut svc = observed(&stack, &recorder, &mock);
        let res = call_with(&mut svc, get("http://upstream.test:8080/"))
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
        let before = recorder.lines().len();
        let mut req = get("http://upstream.test:8080/");
        if let Some(after) = deadline {
            req.extensions_mut().insert(Deadline::after(after));
        }
        let err = call_with(&mut svc, req).await.unwrap_err();
        assert!(err.is_paused(), "{mode:?}");
        assert_eq!(mock.calls(), 1);
        assert_eq!(
            recorder.lines()[before..],
            [format!("call_refused refusal=paused {ORIGIN}")],
            "{mode:?}"
        );
    }
}
