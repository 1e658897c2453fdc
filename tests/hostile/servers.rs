#![cfg(feature = "hyper")]
//! The retry layer over a hyper-util client against raw loopback servers (HTTP/1.1),
//! one hostile server per test, each bounded in time.

use std::time::{Duration, Instant};

use backstop::policy::{ErrorKind, History, NoRetry, StopReason};
use backstop::{ReplayBody, RetryLayer, RetryPolicy};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use tower::{Layer, ServiceExt};

use crate::support::raw::{Conn, RawServer};

type Transport = Client<HttpConnector, ReplayBody<Full<Bytes>>>;

async fn get(policy: RetryPolicy, uri: String) -> Result<Response<Incoming>, backstop::Error> {
    let transport: Transport = Client::builder(TokioExecutor::new()).build_http();
    let req = Request::get(uri).body(Full::default()).unwrap();
    RetryLayer::new(policy).layer(transport).oneshot(req).await
}

/// Three attempts, a backoff of a few milliseconds, and whatever `f` adds.
fn policy(
    f: impl FnOnce(backstop::retry::RetryPolicyBuilder) -> backstop::retry::RetryPolicyBuilder,
) -> RetryPolicy {
    f(RetryPolicy::builder().backoff(Duration::from_millis(1), Duration::from_millis(5)))
        .build()
        .expect("a valid policy")
}

/// No test may hang the suite.
async fn within_10s<T>(body: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), body)
        .await
        .expect("test timed out")
}

fn history(res: &Response<Incoming>) -> &History {
    res.extensions().get::<History>().expect("a history")
}

/// Answers every request with `head`, then nothing more on that request.
async fn answer_with(head: &'static [u8], mut conn: Conn) {
    while conn.next_request().await {
        if conn.write(head).await.is_err() {
            return;
        }
    }
}

#[tokio::test]
async fn a_head_too_large_is_not_downloaded_again() {
    within_10s(async {
        // About 2 MB of headers, more than hyper's client reads for a head.
        let server = RawServer::start(|mut conn| async move {
            let line = format!("x-big: {}\r\n", "a".repeat(1000));
            while conn.next_request().await {
                if conn.write(b"HTTP/1.1 200 OK\r\n").await.is_err() {
                    return;
                }
                for _ in 0..2_000 {
                    if conn.write(line.as_bytes()).await.is_err() {
                        return;
                    }
                }
                let _ = conn.write(b"content-length: 0\r\n\r\n").await;
            }
        })
        .await;
        let err = get(policy(|p| p), server.uri("/")).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidResponse, "{err}");
        assert_eq!(err.attempts(), 1, "{err}");
        assert_eq!(
            err.stop_reason(),
            Some(StopReason::NotRetryable(NoRetry::Permanent))
        );
        assert!(!err.is_retryable());
        assert_eq!(server.requests(), 1, "the head was asked for again");
    })
    .await
}

#[tokio::test]
async fn an_invalid_status_line_is_not_asked_for_again() {
    within_10s(async {
        let heads: [&'static [u8]; 3] = [
            b"HTTP/1.1 20x OK\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 2000 OK\r\ncontent-length: 0\r\n\r\n",
            b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
        ];
        for head in heads {
            let server = RawServer::start(move |conn| answer_with(head, conn)).await;
            let err = get(policy(|p| p), server.uri("/")).await.unwrap_err();
            let line = String::from_utf8_lossy(head);
            assert_eq!(err.kind(), ErrorKind::InvalidResponse, "{line:?}: {err}");
            assert_eq!(err.attempts(), 1, "{line:?}");
            assert_eq!(server.requests(), 1, "{line:?}");
        }
    })
    .await
}

/// A 503 whose chunked body never ends, written as fast as the client reads it.
async fn endless_503(mut conn: Conn) {
    if !conn.next_request().await {
        return;
    }
    let head = b"HTTP/1.1 503 Service Unavailable\r\ntransfer-encoding: chunked\r\n\r\n";
    if conn.write(head).await.is_err() {
        return;
    }
    let mut chunk = b"4000\r\n".to_vec();
    chunk.resize(chunk.len() + 0x4000, b'x');
    chunk.extend_from_slice(b"\r\n");
    while conn.write(&chunk).await.is_ok() {}
}

#[tokio::test]
async fn an_endless_fast_503_body_is_drained_up_to_its_byte_limit() {
    within_10s(async {
        let server = RawServer::start(endless_503).await;
        // The time limit is far: only the byte limit can end the drain early.
        let p = policy(|p| {
            p.max_attempts(2)
                .drain(64 * 1024, Duration::from_secs(5))
                .timeout(Duration::from_secs(8))
        });
        let started = Instant::now();
        let res = get(p, server.uri("/")).await.unwrap();
        let took = started.elapsed();
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(history(&res).len(), 2);
        assert_eq!(
            history(&res).stop_reason(),
            Some(StopReason::AttemptsExhausted)
        );
        assert!(
            took < Duration::from_secs(2),
            "the drain ran past its byte limit: {took:?}"
        );
        // The undrained connection was given up, not reused.
        assert_eq!(server.connections(), 2);
    })
    .await
}

#[tokio::test]
async fn an_endless_503_body_one_byte_at_a_time_is_drained_up_to_its_time_limit() {
    within_10s(async {
        let server = RawServer::start(|mut conn| async move {
            if !conn.next_request().await {
                return;
            }
            let head = b"HTTP/1.1 503 Service Unavailable\r\ntransfer-encoding: chunked\r\n\r\n";
            if conn.write(head).await.is_err() {
                return;
            }
            while conn.write(b"1\r\nx\r\n").await.is_ok() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        // The byte limit is far: only the time limit can end the drain.
        let drain = Duration::from_millis(200);
        let p = policy(|p| {
            p.max_attempts(2)
                .drain(1024 * 1024, drain)
                .timeout(Duration::from_secs(3))
        });
        let started = Instant::now();
        let res = get(p, server.uri("/")).await.unwrap();
        let took = started.elapsed();
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(history(&res).len(), 2);
        assert!(
            took >= drain,
            "the drain ended before its time limit: {took:?}"
        );
        assert!(
            took < Duration::from_millis(1500),
            "the drain ran past its time limit: {took:?}"
        );
        assert_eq!(server.connections(), 2);
    })
    .await
}

/// Asserts that a call ended at its deadline, not before and not much after.
fn ended_at_deadline(err: &backstop::Error, took: Duration, deadline: Duration) {
    assert!(err.is_deadline(), "{err}");
    assert!(err.is_timeout(), "{err}");
    assert_eq!(err.stop_reason(), Some(StopReason::Deadline));
    assert!(took >= deadline, "ended before the deadline: {took:?}");
    assert!(
        took < deadline + Duration::from_millis(400),
        "ended late: {took:?}"
    );
}

#[tokio::test]
async fn a_head_one_byte_at_a_time_ends_at_the_deadline() {
    within_10s(async {
        let server = RawServer::start(|mut conn| async move {
            if !conn.next_request().await {
                return;
            }
            let head = b"HTTP/1.1 200 OK\r\n".iter();
            let lines = b"x-slow: y\r\n".iter().cycle();
            for byte in head.chain(lines) {
                if conn.write(&[*byte]).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        let deadline = Duration::from_millis(400);
        let started = Instant::now();
        let err = get(policy(|p| p.timeout(deadline)), server.uri("/"))
            .await
            .unwrap_err();
        ended_at_deadline(&err, started.elapsed(), deadline);
        assert_eq!(err.attempts(), 1);
    })
    .await
}

#[tokio::test]
async fn a_server_that_never_answers_ends_at_the_deadline() {
    within_10s(async {
        let server = RawServer::start(|mut conn| async move {
            if conn.next_request().await {
                conn.hold().await;
            }
        })
        .await;
        // The first attempt times out on its own; the second is cut to the deadline,
        // which ends the call (not the two attempts it was allowed).
        let deadline = Duration::from_millis(400);
        let p = policy(|p| {
            p.max_attempts(2)
                .attempt_timeout(Duration::from_millis(250))
                .timeout(deadline)
        });
        let started = Instant::now();
        let err = get(p, server.uri("/")).await.unwrap_err();
        ended_at_deadline(&err, started.elapsed(), deadline);
        assert_eq!(err.attempts(), 2, "{err}");
        assert_eq!(server.requests(), 2);
    })
    .await
}

#[tokio::test]
async fn a_retry_after_of_ten_to_the_twentieth_seconds_does_not_park_the_caller() {
    within_10s(async {
        let head: &'static [u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
            retry-after: 100000000000000000000\r\ncontent-length: 0\r\n\r\n";
        let server = RawServer::start(move |conn| answer_with(head, conn)).await;
        let started = Instant::now();
        let res = get(
            policy(|p| p.timeout(Duration::from_secs(5))),
            server.uri("/"),
        )
        .await
        .unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        let history = history(&res);
        assert_eq!(history.stop_reason(), Some(StopReason::RetryAfterTooLong));
        // Clamped to the documented ceiling, and told to the caller.
        assert_eq!(
            history.retry_after(),
            Some(Duration::from_secs(365 * 24 * 60 * 60))
        );
        assert_eq!(server.requests(), 1);
    })
    .await
}

#[tokio::test]
async fn a_garbage_retry_after_is_ignored_without_a_panic() {
    within_10s(async {
        let head: &'static [u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
            retry-after: \xff\xfe\x80 soon\r\nretry-after: -1\r\nretry-after: 1e3\r\n\
            retry-after-ms: \xc3\x28\r\nretry-after-ms: NaN\r\ncontent-length: 0\r\n\r\n";
        let server = RawServer::start(move |conn| answer_with(head, conn)).await;
        let started = Instant::now();
        let res = get(
            policy(|p| p.timeout(Duration::from_secs(5))),
            server.uri("/"),
        )
        .await
        .unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        let history = history(&res);
        // No hint: the backoff paced three attempts.
        assert_eq!(history.len(), 3);
        assert_eq!(history.stop_reason(), Some(StopReason::AttemptsExhausted));
        assert_eq!(history.retry_after(), None);
        assert_eq!(server.requests(), 3);
    })
    .await
}
