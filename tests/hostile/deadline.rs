//! An attempt whose timeout was cut to the deadline, on tokio's paused clock: when
//! it times out, the deadline ended the call.

use std::time::Duration;

use backstop::policy::StopReason;
use backstop::{RetryLayer, RetryPolicy};
use bytes::Bytes;
use http::{Method, Request};
use http_body_util::Full;
use tower::{Layer, ServiceExt};

use crate::support::script::{Script, Step};

fn request(method: Method) -> Request<Full<Bytes>> {
    Request::builder()
        .method(method)
        .uri("http://127.0.0.1/")
        .body(Full::new(Bytes::from_static(b"body")))
        .unwrap()
}

async fn send(mock: &Script, policy: RetryPolicy, method: Method) -> backstop::Error {
    RetryLayer::new(policy)
        .layer(mock.clone())
        .oneshot(request(method))
        .await
        .expect_err("every attempt hangs")
}

#[tokio::test(start_paused = true)]
async fn the_last_attempt_cut_to_the_deadline_says_deadline_not_attempts() {
    let mock = Script::new([Step::Hang, Step::Hang]);
    let policy = RetryPolicy::builder()
        .max_attempts(2)
        .backoff(Duration::ZERO, Duration::ZERO)
        .attempt_timeout(Duration::from_millis(300))
        .timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let started = tokio::time::Instant::now();
    let err = send(&mock, policy, Method::GET).await;
    assert_eq!(started.elapsed(), Duration::from_millis(500));
    assert_eq!(mock.calls(), 2);
    assert!(err.is_timeout(), "{err}");
    assert!(err.is_deadline(), "{err}");
    assert_eq!(err.stop_reason(), Some(StopReason::Deadline));
    assert!(
        err.is_retryable(),
        "a GET that timed out is worth another try"
    );
}

#[tokio::test(start_paused = true)]
async fn a_post_whose_only_attempt_hit_the_deadline_says_deadline() {
    let mock = Script::new([Step::Hang]);
    let policy = RetryPolicy::builder()
        .attempt_timeout(Duration::from_secs(5))
        .timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let err = send(&mock, policy, Method::POST).await;
    assert!(err.is_deadline(), "{err}");
    assert_eq!(err.stop_reason(), Some(StopReason::Deadline));
    // The body was written: a POST without a key is not worth another try.
    assert!(!err.is_retryable());
}

#[tokio::test(start_paused = true)]
async fn an_attempt_that_timed_out_on_its_own_is_not_the_deadline() {
    let mock = Script::new([Step::Hang]);
    let policy = RetryPolicy::builder()
        .max_attempts(1)
        .attempt_timeout(Duration::from_millis(100))
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let err = send(&mock, policy, Method::GET).await;
    assert!(err.is_timeout(), "{err}");
    assert!(!err.is_deadline(), "{err}");
    assert_eq!(err.stop_reason(), Some(StopReason::AttemptsExhausted));
}
