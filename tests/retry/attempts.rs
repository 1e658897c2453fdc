//! The retry layer's attempt loop, gates and timing, on tokio's paused clock over a
//! scripted in-process transport. Wire behaviour is in `wire.rs`.

use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::gates::{Switch, Tokens};
use crate::support::requests::call_with;
use crate::support::script::{io_error, slow, status, status_with, Reply, Script, Step};
use backstop::policy::{Deadline, ErrorKind, History, NoRetry, NotReplayable, StopReason};
use backstop::{OneShot, RetryLayer, RetryPolicy};
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use tower::{Layer, Service, ServiceExt};

fn get() -> Request<Full<Bytes>> {
    Request::get("http://upstream.test/items?token=s3cret")
        .body(Full::default())
        .unwrap()
}

fn post(body: &'static str) -> Request<Full<Bytes>> {
    Request::post("http://upstream.test/charges")
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .unwrap()
}

async fn send(
    mock: &Script,
    policy: RetryPolicy,
    req: Request<Full<Bytes>>,
) -> Result<http::Response<Reply>, backstop::Error> {
    let mut svc = RetryLayer::new(policy).layer(mock.clone());
    ServiceExt::<Request<Full<Bytes>>>::ready(&mut svc)
        .await?
        .call(req)
        .await
}

fn history<B>(res: &http::Response<B>) -> &History {
    res.extensions()
        .get::<History>()
        .expect("history on the response")
}

fn fast() -> RetryPolicy {
    RetryPolicy::builder()
        .backoff(Duration::from_millis(100), Duration::from_secs(1))
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn scenario_1_503_then_200_on_get_makes_two_calls() {
    let mock = Script::new([status(503), status(200)]);
    let res = send(&mock, fast(), get()).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(mock.calls(), 2);
    let h = history(&res);
    assert_eq!(h.len(), 2);
    assert_eq!(h.retries(), 1);
    assert_eq!(h.stop_reason(), Some(StopReason::Answered));
    // Full jitter: below the first ceiling, which tokio's timer may round up to.
    assert!(mock.gaps()[0] <= Duration::from_millis(100));
}

#[tokio::test(start_paused = true)]
async fn a_first_attempt_answer_carries_no_history() {
    // Nothing to tell, and nothing allocated for it on the success path.
    let mock = Script::new([status(200)]);
    let res = send(&mock, fast(), get()).await.unwrap();
    assert!(res.extensions().get::<History>().is_none());
}

#[tokio::test(start_paused = true)]
async fn a_gate_on_the_first_attempt_is_told() {
    let mock = Script::new([status(503)]);
    let res = send(&mock, RetryPolicy::none(), get()).await.unwrap();
    let h = history(&res);
    assert_eq!(h.len(), 1);
    let first = &h.attempts()[0];
    assert_eq!(first.wait, None);
    assert_eq!(first.number, 1);
    assert_eq!(h.stop_reason(), Some(StopReason::AttemptsExhausted));
}

#[tokio::test(start_paused = true)]
async fn attempts_are_exhausted_and_the_last_answer_returned() {
    let mock = Script::new([status(503), status(502), status(504), status(200)]);
    let res = send(&mock, fast(), get()).await.unwrap();
    assert_eq!(res.status(), StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(mock.calls(), 3);
    assert_eq!(
        history(&res).stop_reason(),
        Some(StopReason::AttemptsExhausted)
    );
}

#[tokio::test(start_paused = true)]
async fn none_policy_sends_once() {
    let mock = Script::new([status(503)]);
    let res = send(&mock, RetryPolicy::none(), get()).await.unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(mock.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn non_retryable_statuses_are_answers() {
    for code in [200, 400, 404, 409, 500, 501] {
        let mock = Script::new([status(code)]);
        let res = send(&mock, fast(), get()).await.unwrap();
        assert_eq!(res.status().as_u16(), code);
        assert_eq!(mock.calls(), 1, "{code}");
        assert!(res.extensions().get::<History>().is_none(), "{code}");
    }
}

#[tokio::test(start_paused = true)]
async fn status_500_is_opt_in() {
    let mock = Script::new([status(500), status(200)]);
    let policy = RetryPolicy::builder().retry_on(500).build().unwrap();
    let res = send(&mock, policy, get()).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(mock.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn retry_after_seconds_is_waited_exactly() {
    let mock = Script::new([status_with(503, &[("retry-after", "2")]), status(200)]);
    let res = send(&mock, fast(), get()).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(mock.gaps(), [Duration::from_secs(2)]);
    let first = history(&res).attempts()[0].clone();
    assert_eq!(first.retry_after, Some(Duration::from_secs(2)));
    assert_eq!(first.wait, Some(Duration::from_secs(2)));
}

#[tokio::test(start_paused = true)]
async fn retry_after_ms_and_fractions_are_waited_exactly() {
    let mock = Script::new([
        status_with(429, &[("retry-after-ms", "250"), ("retry-after", "9")]),
        status_with(503, &[("retry-after", "1.5")]),
        status(200),
    ]);
    let res = send(&mock, fast(), get()).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(
        mock.gaps(),
        [Duration::from_millis(250), Duration::from_millis(1500)]
    );
}

#[tokio::test(start_paused = true)]
async fn retry_after_zero_and_past_dates_retry_at_once() {
    let mock = Script::new([
        status_with(503, &[("retry-after", "0")]),
        status_with(503, &[("retry-after", "Sun, 06 Nov 1994 08:49:37 GMT")]),
        status(200),
    ]);
    let res = send(&mock, fast(), get()).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(mock.gaps(), [Duration::ZERO, Duration::ZERO]);
}

#[tokio::test(start_paused = true)]
async fn garbage_and_negative_retry_after_fall_back_to_backoff() {
    let mock = Script::new([
        status_with(503, &[("retry-after", "-1")]),
        status_with(503, &[("retry-after", "abc")]),
        status(200),
    ]);
    let res = send(&mock, fast(), get()).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let gaps = mock.gaps();
    // Below the ceilings of 100 and 200 ms, which tokio's timer may round up to.
    assert!(gaps[0] <= Duration::from_millis(100), "{gaps:?}");
    assert!(gaps[1] <= Duration::from_millis(200), "{gaps:?}");
    assert!(history(&res)
        .attempts()
        .iter()
        .all(|a| a.retry_after.is_none()));
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_over_the_cap_ends_the_call_and_is_reported() {
    let mock = Script::new([status_with(503, &[("retry-after", "120")]), status(200)]);
    let started = tokio::time::Instant::now();
    let res = send(&mock, fast(), get()).await.unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(mock.calls(), 1);
    assert_eq!(started.elapsed(), Duration::ZERO);
    let h = history(&res);
    assert_eq!(h.stop_reason(), Some(StopReason::RetryAfterTooLong));
    assert_eq!(h.retry_after(), Some(Duration::from_secs(120)));
}

#[tokio::test(start_paused = true)]
async fn a_huge_retry_after_is_clamped_not_a_panic() {
    let mock = Script::new([status_with(
        503,
        &[("retry-after", "99999999999999999999999999")],
    )]);
    let res = send(&mock, fast(), get()).await.unwrap();
    assert_eq!(
        history(&res).stop_reason(),
        Some(StopReason::RetryAfterTooLong)
    );
    assert!(history(&res).retry_after().unwrap() >= Duration::from_secs(86_400));
}

#[tokio::test(start_paused = true)]
async fn x_should_retry_decides() {
    let mock = Script::new([status_with(500, &[("x-should-retry", "true")]), status(200)]);
    let res = send(&mock, fast(), post("x")).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(mock.calls(), 2);

    let mock = Script::new([
        status_with(503, &[("x-should-retry", "false")]),
        status(200),
    ]);
    let res = send(&mock, fast(), get()).await.unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        history(&res).stop_reason(),
        Some(StopReason::NotRetryable(NoRetry::ServerDeclined))
    );
}

#[tokio::test(start_paused = true)]
async fn a_post_without_key_is_not_resent_after_an_answer() {
    let mock = Script::new([status(503), status(200)]);
    let res = send(&mock, fast(), post("charge")).await.unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(mock.calls(), 1);
    assert_eq!(
        history(&res).stop_reason(),
        Some(StopReason::NotRetryable(NoRetry::MaybeProcessed))
    );
    // The attempt carried a progress record for the last rung.
    assert!(mock.seen()[0].progress);
}

#[tokio::test(start_paused = true)]
async fn a_keyed_post_is_resent_with_the_whole_body() {
    let mock = Script::new([status(503), status(200)]);
    let mut req = post("charge 42");
    req.headers_mut()
        .insert("idempotency-key", "k-1".parse().unwrap());
    let res = send(&mock, fast(), req).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let seen = mock.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].body.as_deref(), Some(&b"charge 42"[..]));
    assert_eq!(seen[1].body.as_deref(), Some(&b"charge 42"[..]));
    assert!(!seen[1].progress, "keyed requests need no progress record");
}

#[tokio::test(start_paused = true)]
async fn a_425_is_resent_for_every_method() {
    let mock = Script::new([status(425), status(201)]);
    let res = send(&mock, fast(), post("x")).await.unwrap();
    assert_eq!(res.status(), StatusCode::CREATED);
    assert_eq!(mock.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_refused_connection_is_resent_even_for_a_post() {
    let mock = Script::new([io_error(io::ErrorKind::ConnectionRefused), status(200)]);
    let res = send(&mock, fast(), post("x")).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(mock.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_reset_post_is_not_resent_and_the_error_says_why() {
    let mock = Script::new([io_error(io::ErrorKind::ConnectionReset), status(200)]);
    let err = send(&mock, fast(), post("x")).await.unwrap_err();
    assert_eq!(mock.calls(), 1);
    assert_eq!(err.kind(), ErrorKind::Closed);
    assert!(!err.is_retryable());
    assert_eq!(err.attempts(), 1);
    assert_eq!(
        err.stop_reason(),
        Some(StopReason::NotRetryable(NoRetry::MaybeProcessed))
    );
    // The inner error is the source.
    let source = std::error::Error::source(&err).unwrap();
    assert_eq!(
        source.downcast_ref::<io::Error>().unwrap().kind(),
        io::ErrorKind::ConnectionReset
    );
}

#[tokio::test(start_paused = true)]
async fn errors_report_attempts_and_retryability() {
    let mock = Script::new([
        io_error(io::ErrorKind::ConnectionReset),
        io_error(io::ErrorKind::ConnectionReset),
        io_error(io::ErrorKind::ConnectionReset),
    ]);
    let err = send(&mock, fast(), get()).await.unwrap_err();
    assert_eq!(mock.calls(), 3);
    assert!(err.is_retryable());
    assert_eq!(err.attempts(), 3);
    assert_eq!(err.stop_reason(), Some(StopReason::AttemptsExhausted));
    assert_eq!(
        err.to_string(),
        "connection closed after 3 attempts (attempts exhausted)"
    );
}

#[tokio::test(start_paused = true)]
async fn invalid_requests_are_never_resent() {
    let mock = Script::new([io_error(io::ErrorKind::InvalidInput), status(200)]);
    let err = send(&mock, fast(), get()).await.unwrap_err();
    assert_eq!(mock.calls(), 1);
    assert_eq!(err.kind(), ErrorKind::Config);
    assert_eq!(
        err.stop_reason(),
        Some(StopReason::NotRetryable(NoRetry::Permanent))
    );
}

#[tokio::test(start_paused = true)]
async fn a_one_shot_body_is_never_sent_twice() {
    let mock = Script::new([status(503), status(200)]);
    let mut req = Request::put("http://upstream.test/blob")
        .body(Full::new(Bytes::from_static(b"data")))
        .unwrap();
    req.extensions_mut().insert(OneShot);
    let res = send(&mock, fast(), req).await.unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(mock.calls(), 1);
    assert_eq!(
        history(&res).stop_reason(),
        Some(StopReason::BodyNotReplayable(NotReplayable::OneShot))
    );
}

#[tokio::test(start_paused = true)]
async fn scenario_4_a_body_read_past_the_replay_cap_is_not_resent() {
    // The transport reads the whole body: the chunk crossing the cap (kept whole),
    // then one more, past the cap.
    let mock = Script::new([status(503), status(200)]);
    let policy = RetryPolicy::builder().replay_cap(4).build().unwrap();
    let chunks = [&b"012345"[..], &b"6789"[..]]
        .map(|chunk| Ok::<_, io::Error>(http_body::Frame::data(Bytes::from_static(chunk))));
    let body = http_body_util::StreamBody::new(futures_util::stream::iter(chunks));
    let req = Request::put("http://upstream.test/blob")
        .body(body)
        .unwrap();
    let res = RetryLayer::new(policy)
        .layer(mock.clone())
        .oneshot(req)
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(mock.calls(), 1);
    assert_eq!(mock.seen()[0].body.as_deref(), Some(&b"0123456789"[..]));
    assert_eq!(
        history(&res).stop_reason(),
        Some(StopReason::BodyNotReplayable(NotReplayable::CapExceeded))
    );
}

#[tokio::test(start_paused = true)]
async fn a_body_over_the_replay_cap_that_was_not_read_is_resent_whole() {
    // The transport answers without reading the body: it is whole for the retry.
    let mock = Script::new([Step::Unread(Duration::ZERO, 503), status(200)]);
    let policy = RetryPolicy::builder().replay_cap(4).build().unwrap();
    let req = Request::put("http://upstream.test/blob")
        .body(Full::new(Bytes::from_static(b"0123456789")))
        .unwrap();
    let res = send(&mock, policy, req).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(mock.calls(), 2);
    assert_eq!(mock.seen()[1].body.as_deref(), Some(&b"0123456789"[..]));
}

#[tokio::test(start_paused = true)]
async fn scenario_12_the_attempt_timeout_fires_and_the_deadline_covers_everything() {
    let mock = Script::new([Step::Hang, Step::Hang, Step::Hang, Step::Hang]);
    let policy = RetryPolicy::builder()
        .max_attempts(10)
        .attempt_timeout(Duration::from_millis(300))
        .timeout(Duration::from_secs(1))
        .backoff(Duration::from_millis(50), Duration::from_millis(50))
        .build()
        .unwrap();
    let started = tokio::time::Instant::now();
    let err = send(&mock, policy, get()).await.unwrap_err();
    let took = started.elapsed();
    assert!(err.is_timeout(), "{err}");
    assert!(took <= Duration::from_secs(1), "{took:?}");
    // Three full attempts fit (3 × 300 ms plus waits); the fourth is cut to the deadline
    // or not started at all.
    assert!(mock.calls() >= 3 && mock.calls() <= 4, "{}", mock.calls());
    // Each gap is the 300 ms timeout plus a jittered wait below 50 ms, which tokio's
    // timer rounds up to its next millisecond.
    for gap in mock.gaps().iter().take(2) {
        assert!(
            *gap >= Duration::from_millis(300) && *gap <= Duration::from_millis(350),
            "{gap:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_slow_answer_within_the_attempt_timeout_is_taken() {
    let mock = Script::new([slow(Duration::from_millis(250), 200)]);
    let policy = RetryPolicy::builder()
        .attempt_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let res = send(&mock, policy, get()).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn the_deadline_refuses_a_wait_it_cannot_afford() {
    let mock = Script::new([status_with(503, &[("retry-after", "5")]), status(200)]);
    let policy = RetryPolicy::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let started = tokio::time::Instant::now();
    let res = send(&mock, policy, get()).await.unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        started.elapsed(),
        Duration::ZERO,
        "no sleeping past the deadline"
    );
    assert_eq!(history(&res).stop_reason(), Some(StopReason::Deadline));
}

#[tokio::test(start_paused = true)]
async fn a_per_call_deadline_that_left_no_time_sends_nothing() {
    let mock = Script::new([status(200)]);
    let mut req = get();
    req.extensions_mut()
        .insert(Deadline::after(Duration::from_millis(1)));
    let err = send(&mock, fast(), req).await.unwrap_err();
    assert_eq!(mock.calls(), 0);
    assert!(err.is_deadline());
    assert_eq!(err.attempts(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_per_call_policy_overrides_the_layer() {
    let mock = Script::new([status(503), status(200)]);
    let mut req = get();
    req.extensions_mut().insert(RetryPolicy::none());
    let res = send(&mock, fast(), req).await.unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(mock.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn routes_pick_the_policy() {
    use backstop::retry::{Route, Routes};
    let routes = Routes::new(fast()).route(Route::path_prefix("/items"), RetryPolicy::none());
    let mock = Script::new([status(503), status(503), status(200)]);
    let mut svc = RetryLayer::with_routes(routes).layer(mock.clone());
    let res = call_with(&mut svc, get()).await.unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(mock.calls(), 1);
    let other = Request::get("http://upstream.test/other")
        .body(Full::<Bytes>::default())
        .unwrap();
    let res = call_with(&mut svc, other).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(mock.calls(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_spent_budget_stops_with_the_last_outcome() {
    let mock = Script::new([status(503), status(503), status(200)]);
    let mut req = get();
    backstop::policy::CallContext::of_mut(req.extensions_mut()).set_budget(Tokens::handle(1).0);
    let res = send(&mock, fast(), req).await.unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(mock.calls(), 2, "one retry from a budget of one");
    assert_eq!(history(&res).stop_reason(), Some(StopReason::Budget));
}

#[tokio::test(start_paused = true)]
async fn an_open_breaker_stops_before_the_retry() {
    let mock = Script::new([io_error(io::ErrorKind::ConnectionReset), status(200)]);
    let mut req = get();
    backstop::policy::CallContext::of_mut(req.extensions_mut())
        .set_breaker(Switch::open().handle());
    let err = send(&mock, fast(), req).await.unwrap_err();
    assert_eq!(mock.calls(), 1);
    assert!(err.is_circuit_open());
    assert!(err.is_retryable());
}

#[tokio::test(start_paused = true)]
async fn a_breaker_that_opens_during_the_wait_stops_after_it() {
    let switch = Switch::closed();
    let mock = Script::new([status_with(503, &[("retry-after", "1")]), status(200)]);
    let mut req = get();
    backstop::policy::CallContext::of_mut(req.extensions_mut()).set_breaker(switch.handle());
    let mut svc = RetryLayer::new(fast()).layer(mock.clone());
    let call = ServiceExt::<Request<Full<Bytes>>>::ready(&mut svc)
        .await
        .unwrap()
        .call(req);
    let flip = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        switch.set_open(true);
    };
    let (res, ()) = tokio::join!(call, flip);
    // The 503's body was drained before the wait: the error names its status.
    let err = res.unwrap_err();
    assert_eq!(err.status(), Some(StatusCode::SERVICE_UNAVAILABLE));
    assert_eq!(mock.calls(), 1);
    assert!(err.is_circuit_open());
    assert!(err.is_retryable());
    assert_eq!(
        err.to_string(),
        "transient 503 Service Unavailable after 1 attempt (circuit open)"
    );
}

/// A response body that records when it was first read.
struct Watched(
    Arc<std::sync::Mutex<Option<tokio::time::Instant>>>,
    Option<Bytes>,
);

impl http_body::Body for Watched {
    type Data = Bytes;
    type Error = std::convert::Infallible;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        self.0
            .lock()
            .unwrap()
            .get_or_insert_with(tokio::time::Instant::now);
        std::task::Poll::Ready(self.1.take().map(|d| Ok(http_body::Frame::data(d))))
    }
}

#[tokio::test(start_paused = true)]
async fn a_failed_body_is_drained_before_the_wait() {
    let read_at = Arc::new(std::sync::Mutex::new(None));
    let seen = read_at.clone();
    let calls = Arc::new(AtomicU32::new(0));
    let counter = calls.clone();
    let inner = tower::service_fn(move |_req: Request<backstop::ReplayBody<Full<Bytes>>>| {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        let mut res = http::Response::new(Watched(seen.clone(), Some(Bytes::from_static(b"busy"))));
        if n == 0 {
            *res.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            res.headers_mut()
                .insert("retry-after", "5".parse().unwrap());
        }
        async move { Ok::<_, io::Error>(res) }
    });
    let started = tokio::time::Instant::now();
    let mut svc = RetryLayer::new(fast()).layer(inner);
    let res = call_with(&mut svc, get()).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(started.elapsed(), Duration::from_secs(5));
    let read = read_at.lock().unwrap().expect("the failed body was read");
    assert_eq!(
        read - started,
        Duration::ZERO,
        "drained at once, not after the wait"
    );
}

/// Ready for its first call, then never again.
#[derive(Clone)]
struct ReadyOnce(Arc<AtomicU32>);

impl tower::Service<Request<backstop::ReplayBody<Full<Bytes>>>> for ReadyOnce {
    type Response = http::Response<Full<Bytes>>;
    type Error = io::Error;
    type Future = std::future::Ready<Result<Self::Response, io::Error>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), io::Error>> {
        if self.0.load(Ordering::SeqCst) == 0 {
            std::task::Poll::Ready(Ok(()))
        } else {
            std::task::Poll::Pending
        }
    }

    fn call(&mut self, _: Request<backstop::ReplayBody<Full<Bytes>>>) -> Self::Future {
        self.0.fetch_add(1, Ordering::SeqCst);
        let mut res = http::Response::new(Full::default());
        *res.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        std::future::ready(Ok(res))
    }
}

/// Answers 503 then 200, and records for each call whether this very instance was
/// driven to readiness first (a clone starts unready), and how many clones were made.
struct Readied {
    ready: bool,
    calls_on_readied: Arc<std::sync::Mutex<Vec<bool>>>,
    clones: Arc<AtomicU32>,
}

impl Readied {
    fn new() -> Self {
        Readied {
            ready: false,
            calls_on_readied: Arc::default(),
            clones: Arc::default(),
        }
    }
}

impl Clone for Readied {
    fn clone(&self) -> Self {
        self.clones.fetch_add(1, Ordering::SeqCst);
        Readied {
            ready: false,
            calls_on_readied: self.calls_on_readied.clone(),
            clones: self.clones.clone(),
        }
    }
}

impl tower::Service<Request<backstop::ReplayBody<Full<Bytes>>>> for Readied {
    type Response = http::Response<Full<Bytes>>;
    type Error = io::Error;
    type Future = std::future::Ready<Result<Self::Response, io::Error>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), io::Error>> {
        self.ready = true;
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<backstop::ReplayBody<Full<Bytes>>>) -> Self::Future {
        let mut calls = self.calls_on_readied.lock().unwrap();
        calls.push(std::mem::take(&mut self.ready));
        let mut res = http::Response::new(Full::default());
        if calls.len() == 1 {
            *res.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        }
        std::future::ready(Ok(res))
    }
}

#[tokio::test(start_paused = true)]
async fn every_attempt_goes_through_an_instance_driven_to_readiness() {
    let inner = Readied::new();
    let (calls, clones) = (inner.calls_on_readied.clone(), inner.clones.clone());
    let mut svc = RetryLayer::new(fast()).layer(inner);
    let res = call_with(&mut svc, get()).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    // The first through the service the caller readied, the retry through the
    // call's own clone, readied before it was called.
    assert_eq!(*calls.lock().unwrap(), [true, true]);
    assert_eq!(clones.load(Ordering::SeqCst), 1);
}

#[test]
fn the_response_future_does_not_carry_the_inner_service() {
    use std::mem::size_of;
    type Replay = Request<backstop::ReplayBody<Full<Bytes>>>;
    /// The sizes of `inner`, of its future and of the retry layer's over it.
    fn sizes<S>(_: &S) -> (usize, usize, usize)
    where
        S: tower::Service<Replay, Response = http::Response<Full<Bytes>>>,
    {
        let retry = size_of::<backstop::retry::ResponseFuture<S, Full<Bytes>, Full<Bytes>>>();
        (size_of::<S>(), size_of::<S::Future>(), retry)
    }
    // An inner service as large as a real client (hyper-util's is 304 bytes).
    let state = [0u64; 64];
    let large = tower::service_fn(move |_: Replay| {
        let _ = &state;
        std::future::ready(Ok::<_, io::Error>(http::Response::new(
            Full::<Bytes>::default(),
        )))
    });
    let (service, inner, retry) = sizes(&large);
    // The clone for later attempts is kept on the heap: every layer above moves
    // the future, and it stays a few words over the inner one.
    assert!(retry <= inner + 128, "{retry} over {inner}");
    assert!(retry < service, "{retry} for a service of {service}");
}

#[tokio::test(start_paused = true)]
async fn a_policy_of_one_attempt_clones_no_service() {
    let inner = Readied::new();
    let (calls, clones) = (inner.calls_on_readied.clone(), inner.clones.clone());
    let mut svc = RetryLayer::new(RetryPolicy::none()).layer(inner);
    let res = call_with(&mut svc, get()).await.unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(*calls.lock().unwrap(), [true]);
    assert_eq!(clones.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn the_deadline_covers_waiting_for_the_inner_service_to_be_ready() {
    let calls = Arc::new(AtomicU32::new(0));
    let policy = RetryPolicy::builder()
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let mut svc = RetryLayer::new(policy).layer(ReadyOnce(calls.clone()));
    let started = tokio::time::Instant::now();
    let err = call_with(&mut svc, get()).await.unwrap_err();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(err.is_deadline(), "{err}");
    assert_eq!(err.status(), Some(StatusCode::SERVICE_UNAVAILABLE));
    // It gives up when no useful attempt fits any more: 10 ms before the deadline.
    assert_eq!(started.elapsed(), Duration::from_millis(990));
}

#[tokio::test(start_paused = true)]
async fn history_and_errors_name_no_url_or_header_value() {
    let mock = Script::new([
        status_with(503, &[("retry-after", "1"), ("x-secret", "hunter2")]),
        io_error(io::ErrorKind::ConnectionReset),
        io_error(io::ErrorKind::ConnectionReset),
    ]);
    let err = send(&mock, fast(), get()).await.unwrap_err();
    let text = format!("{err} {err:?} {}", err.history().unwrap());
    for secret in ["s3cret", "upstream.test", "hunter2", "/items"] {
        assert!(!text.contains(secret), "{secret} leaked into {text}");
    }
    let history = err.history().unwrap().to_string();
    assert!(
        history.starts_with(
            "attempt 1/3: 503 Service Unavailable (Retry-After 1.0s) after 0.00s, waited 1.00s\n"
        ),
        "{history}"
    );
    assert!(
        history.ends_with("stopped: attempts exhausted"),
        "{history}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_service_is_clone_and_its_error_send_sync() {
    fn assert_clone<T: Clone>(_: &T) {}
    fn assert_send_sync<T: Send + Sync + 'static>() {}
    fn assert_send<T: Send>(_: &T) {}
    let mut svc = RetryLayer::new(fast()).layer(Script::new([]));
    assert_clone(&svc);
    assert_send_sync::<backstop::Error>();
    let future = ServiceExt::<Request<Full<Bytes>>>::ready(&mut svc)
        .await
        .unwrap()
        .call(get());
    assert_send(&future);
    assert_eq!(future.await.unwrap().status(), StatusCode::OK);
}

#[derive(Debug)]
struct Chatty(String);
impl std::fmt::Display for Chatty {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "failed to reach {}", self.0)
    }
}
impl std::error::Error for Chatty {}

#[tokio::test(start_paused = true)]
async fn an_inner_error_that_names_its_url_does_not_leak_through_ours() {
    let inner = tower::service_fn(|_req: Request<backstop::ReplayBody<Full<Bytes>>>| async {
        Err::<http::Response<Full<Bytes>>, _>(Chatty(
            "http://upstream.test/items?token=s3cret".to_owned(),
        ))
    });
    let mut svc = RetryLayer::new(RetryPolicy::none()).layer(inner);
    let err = call_with(&mut svc, get()).await.unwrap_err();
    let text = format!("{err} {err:?} {}", err.history().unwrap());
    assert!(!text.contains("s3cret"), "{text}");
    assert!(!text.contains("upstream.test"), "{text}");
    // The inner error is still there for a caller who asks for it.
    let source = std::error::Error::source(&err).unwrap();
    assert!(source.to_string().contains("upstream.test"));
}

#[tokio::test(start_paused = true)]
async fn a_retry_refused_after_the_wait_gives_its_budget_back() {
    let switch = Switch::closed();
    let (budget, tokens) = Tokens::handle(1);
    let mock = Script::new([status_with(503, &[("retry-after", "1")]), status(200)]);
    let mut req = get();
    backstop::policy::CallContext::of_mut(req.extensions_mut()).set_breaker(switch.handle());
    backstop::policy::CallContext::of_mut(req.extensions_mut()).set_budget(budget);
    let mut svc = RetryLayer::new(fast()).layer(mock.clone());
    let call = ServiceExt::<Request<Full<Bytes>>>::ready(&mut svc)
        .await
        .unwrap()
        .call(req);
    let flip = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        // The retry was paid for when it was decided.
        assert_eq!(tokens.left(), 0);
        switch.set_open(true);
    };
    let (res, ()) = tokio::join!(call, flip);
    assert!(res.unwrap_err().is_circuit_open());
    assert_eq!(mock.calls(), 1);
    assert_eq!(tokens.left(), 1, "the unsent retry was refunded");
}

#[tokio::test(start_paused = true)]
async fn a_future_polled_after_it_ended_answers_an_error_not_pending_forever() {
    use std::future::Future;
    use std::task::{Context, Poll};
    let mock = Script::new([status(200)]);
    let mut svc = RetryLayer::new(fast()).layer(mock.clone());
    let mut future = Box::pin(
        ServiceExt::<Request<Full<Bytes>>>::ready(&mut svc)
            .await
            .unwrap()
            .call(get()),
    );
    let waker = futures_util::task::noop_waker();
    let mut cx = Context::from_waker(&waker);
    assert!(matches!(future.as_mut().poll(&mut cx), Poll::Ready(Ok(_))));
    match future.as_mut().poll(&mut cx) {
        Poll::Ready(Err(err)) => assert_eq!(err.attempts(), 0),
        other => panic!("expected an error, got {:?}", other.map(|r| r.map(|_| ()))),
    }
}

#[tokio::test(start_paused = true)]
async fn a_call_refused_by_its_deadline_sends_nothing() {
    let mock = Script::new([status(200)]);
    let mut req = get();
    req.extensions_mut()
        .insert(Deadline::after(Duration::from_millis(1)));
    let err = send(&mock, fast(), req).await.unwrap_err();
    assert!(err.is_deadline());
    assert_eq!(err.attempts(), 0);
    assert_eq!(mock.calls(), 0);
}

#[tokio::test(start_paused = true)]
async fn each_attempt_gets_the_call_context_and_nothing_else_is_lost() {
    // The context alone is copied into each attempt; other extensions are cloned.
    #[derive(Clone)]
    struct Mine(u32);
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    let transport = tower::service_fn(move |req: Request<backstop::ReplayBody<Full<Bytes>>>| {
        let ctx = backstop::policy::CallContext::of(req.extensions());
        log.lock().unwrap().push((
            ctx.is_some_and(|c| c.is_keyed()),
            req.extensions().get::<Mine>().map(|m| m.0),
        ));
        async move {
            let mut res = http::Response::new(Full::<Bytes>::default());
            *res.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            Ok::<_, std::io::Error>(res)
        }
    });
    let mut svc = RetryLayer::new(fast()).layer(transport);
    for mine in [None, Some(7)] {
        let mut req = post("x");
        backstop::policy::CallContext::of_mut(req.extensions_mut()).mark_keyed();
        if let Some(m) = mine {
            req.extensions_mut().insert(Mine(m));
        }
        let res = call_with(&mut svc, req).await.unwrap();
        assert_eq!(history(&res).len(), 3);
    }
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 6);
    assert!(seen[..3].iter().all(|s| *s == (true, None)), "{seen:?}");
    assert!(seen[3..].iter().all(|s| *s == (true, Some(7))), "{seen:?}");
}
