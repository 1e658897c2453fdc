#![cfg(feature = "test-util")]
//! The fault-injection kit, `backstop::test_util`, seen from a real hyper client: what
//! each step does to the client and what the server records.

use std::error::Error as StdError;
use std::io;
use std::time::{Duration, Instant};

use crate::support::wire::{client, upstream, within_10s, BOTH};
use backstop::test_util::{Protocol, Reply, Step, Upstream};
use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};

type BoxError = Box<dyn StdError + Send + Sync>;
type TestClient = Client<HttpConnector, Full<Bytes>>;

/// What the client saw of one exchange.
#[derive(Debug)]
enum Seen {
    /// A response head, then the body or the error that ended it.
    Response(StatusCode, HeaderMap, Result<Bytes, hyper::Error>),
    /// No response.
    Error(hyper_util::client::legacy::Error),
}

impl Seen {
    fn status(&self) -> StatusCode {
        match self {
            Seen::Response(status, ..) => *status,
            Seen::Error(e) => panic!("expected a response, got error {e:?}"),
        }
    }

    fn body(&self) -> Bytes {
        match self {
            Seen::Response(_, _, Ok(body)) => body.clone(),
            other => panic!("expected a whole body, got {other:?}"),
        }
    }

    fn error(&self) -> &(dyn StdError + 'static) {
        match self {
            Seen::Error(e) => e,
            other => panic!("expected an error, got {other:?}"),
        }
    }

    fn body_error(&self) -> &(dyn StdError + 'static) {
        match self {
            Seen::Response(_, _, Err(e)) => e,
            other => panic!("expected a body error, got {other:?}"),
        }
    }
}

async fn send(client: &TestClient, upstream: &Upstream, path: &str, body: &'static str) -> Seen {
    let request = http::Request::post(upstream.uri(path))
        .header("idempotency-key", "key-1")
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .expect("valid request");
    exchange(client, request).await
}

async fn get(client: &TestClient, upstream: &Upstream, path: &str) -> Seen {
    let request = http::Request::get(upstream.uri(path))
        .body(Full::new(Bytes::new()))
        .expect("valid request");
    exchange(client, request).await
}

async fn exchange(client: &TestClient, request: http::Request<Full<Bytes>>) -> Seen {
    match client.request(request).await {
        Err(e) => Seen::Error(e),
        Ok(response) => {
            let (head, body) = response.into_parts();
            let body = body.collect().await.map(|body| body.to_bytes());
            Seen::Response(head.status, head.headers, body)
        }
    }
}

// ---------------------------------------------------------------------------------------
// Error predicates: walk the `source()` chain.

fn chain<'a>(
    err: &'a (dyn StdError + 'static),
) -> impl Iterator<Item = &'a (dyn StdError + 'static)> {
    std::iter::successors(Some(err), |e: &&'a (dyn StdError + 'static)| (*e).source())
}

fn find<'a, E: StdError + 'static>(err: &'a (dyn StdError + 'static)) -> Option<&'a E> {
    chain(err).find_map(|e| e.downcast_ref::<E>())
}

fn hyper_incomplete(err: &(dyn StdError + 'static)) -> bool {
    chain(err)
        .filter_map(|e| e.downcast_ref::<hyper::Error>())
        .any(hyper::Error::is_incomplete_message)
}

fn hyper_canceled(err: &(dyn StdError + 'static)) -> bool {
    chain(err)
        .filter_map(|e| e.downcast_ref::<hyper::Error>())
        .any(hyper::Error::is_canceled)
}

fn io_kind(err: &(dyn StdError + 'static)) -> Option<io::ErrorKind> {
    find::<io::Error>(err).map(io::Error::kind).or_else(|| {
        find::<h2::Error>(err)
            .and_then(h2::Error::get_io)
            .map(io::Error::kind)
    })
}

/// What the client sees when an HTTP/1.1 server closes the connection without answering.
fn assert_h1_closed(err: &(dyn StdError + 'static)) {
    assert!(hyper_incomplete(err), "expected IncompleteMessage: {err:?}");
    assert!(!hyper_canceled(err), "not canceled: {err:?}");
}

/// What the client sees when an HTTP/2 server closes the connection: hyper turns the
/// `h2` I/O error into a `hyper::Error` whose source is an `io::Error` (BrokenPipe).
fn assert_h2_closed(err: &(dyn StdError + 'static)) {
    assert_eq!(io_kind(err), Some(io::ErrorKind::BrokenPipe), "{err:?}");
    assert!(find::<h2::Error>(err).is_none(), "{err:?}");
    assert!(find::<hyper::Error>(err).is_some(), "{err:?}");
}

fn assert_closed(protocol: Protocol, err: &(dyn StdError + 'static)) {
    match protocol {
        Protocol::Http1 => assert_h1_closed(err),
        _ => assert_h2_closed(err),
    }
}

/// The connection recovers: a new request gets the fallback `200`.
async fn assert_recovers(client: &TestClient, upstream: &Upstream) {
    assert_eq!(
        get(client, upstream, "/again").await.status(),
        StatusCode::OK
    );
}

// ---------------------------------------------------------------------------------------
// Replies

#[tokio::test]
async fn replies_follow_the_script_on_one_kept_alive_connection() {
    within_10s(async {
        for protocol in BOTH {
            let upstream = Upstream::builder()
                .protocol(protocol)
                .script([
                    Reply::status(503).header("retry-after", "1").body("busy"),
                    Reply::status(429).header("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT"),
                ])
                .then(Reply::ok().body("fine"))
                .start()
                .await
                .unwrap();
            assert_eq!(upstream.protocol(), protocol);
            let client: TestClient = client(protocol);

            let first = send(&client, &upstream, "/orders?id=7", "one").await;
            assert_eq!(first.status(), StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(first.body(), "busy");
            if let Seen::Response(_, headers, _) = &first {
                assert_eq!(headers["retry-after"], "1");
            }
            let second = send(&client, &upstream, "/orders", "two").await;
            assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
            if let Seen::Response(_, headers, _) = &second {
                assert_eq!(headers["retry-after"], "Wed, 21 Oct 2015 07:28:00 GMT");
            }
            for _ in 0..3 {
                let third = send(&client, &upstream, "/orders", "three").await;
                assert_eq!(third.status(), StatusCode::OK);
                assert_eq!(third.body(), "fine");
            }

            let seen = upstream.requests();
            assert_eq!(seen.len(), 5, "{protocol:?}");
            assert_eq!(upstream.processed_count(), 5);
            assert_eq!(upstream.steps_taken(), 5);
            assert_eq!(upstream.connections(), 1, "{protocol:?}: keep-alive");
            for (index, recorded) in seen.iter().enumerate() {
                assert_eq!(recorded.step_index, index);
                assert_eq!(recorded.connection, 0);
                assert_eq!(recorded.protocol, protocol);
                assert_eq!(recorded.method, http::Method::POST);
                assert_eq!(recorded.path, "/orders");
                assert_eq!(recorded.idempotency_key.as_deref(), Some("key-1"));
                assert_eq!(recorded.headers["idempotency-key"], "key-1");
                assert!(recorded.processed());
                assert!(recorded.body_complete);
            }
            assert_eq!(seen[0].query.as_deref(), Some("id=7"));
            assert_eq!(seen[1].query, None);
            assert_eq!(seen[0].body, "one");
            assert_eq!(seen[2].body, "three");
            assert!(matches!(&seen[0].step, Step::Reply(_)));
            assert_eq!(seen[4].step, Step::Reply(Reply::ok().body("fine")));
        }
    })
    .await;
}

#[tokio::test]
async fn get_without_body_is_processed() {
    within_10s(async {
        for protocol in BOTH {
            let upstream = upstream(protocol, vec![]).await;
            let client: TestClient = client(protocol);
            let seen = get(&client, &upstream, "/").await;
            assert_eq!(seen.status(), StatusCode::OK);
            assert_eq!(seen.body(), "");
            let recorded = &upstream.requests()[0];
            assert_eq!(recorded.method, http::Method::GET);
            assert_eq!(recorded.idempotency_key, None);
            assert!(recorded.processed());
            assert!(recorded.body.is_empty());
        }
    })
    .await;
}

#[tokio::test]
async fn large_bodies_are_read_whole() {
    within_10s(async {
        for protocol in BOTH {
            // Beyond HTTP/2's initial 64 KiB windows, so flow control must be released.
            let big = Bytes::from(vec![7_u8; 300 * 1024]);
            let upstream = upstream(protocol, vec![Reply::ok().body(big.clone()).into()]).await;
            let client: TestClient = client(protocol);
            let request = http::Request::put(upstream.uri("/big"))
                .body(Full::new(big.clone()))
                .unwrap();
            let seen = exchange(&client, request).await;
            assert_eq!(seen.status(), StatusCode::OK);
            assert_eq!(seen.body(), big);
            let recorded = &upstream.requests()[0];
            assert!(recorded.processed());
            assert_eq!(recorded.body, big);
        }
    })
    .await;
}

#[tokio::test]
async fn delay_holds_back_the_head() {
    within_10s(async {
        for protocol in BOTH {
            let delay = Duration::from_millis(300);
            let upstream = upstream(protocol, vec![Reply::ok().delay(delay).into()]).await;
            let client: TestClient = client(protocol);
            let started = Instant::now();
            let seen = send(&client, &upstream, "/slow", "body").await;
            assert_eq!(seen.status(), StatusCode::OK);
            assert!(started.elapsed() >= delay);
            // The body was read before the delay.
            assert!(upstream.requests()[0].processed());
        }
    })
    .await;
}

#[tokio::test]
async fn stall_body_for_sends_head_then_body_later() {
    within_10s(async {
        for protocol in BOTH {
            let stall = Duration::from_millis(600);
            let upstream = upstream(
                protocol,
                vec![Reply::ok().body("late").stall_body_for(stall).into()],
            )
            .await;
            let client: TestClient = client(protocol);
            let request = http::Request::get(upstream.uri("/"))
                .body(Full::default())
                .unwrap();
            let started = Instant::now();
            let response = client.request(request).await.unwrap();
            let head_after = started.elapsed();
            assert!(
                head_after < stall,
                "{protocol:?}: head came after {head_after:?}"
            );
            let body = response.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(body, "late");
            assert!(started.elapsed() >= stall);
        }
    })
    .await;
}

#[tokio::test]
async fn stall_body_never_finishes_and_dropping_the_upstream_ends_it() {
    within_10s(async {
        for protocol in BOTH {
            let upstream = upstream(
                protocol,
                vec![Reply::ok().body("never").stall_body().into()],
            )
            .await;
            let client: TestClient = client(protocol);
            let request = http::Request::get(upstream.uri("/"))
                .body(Full::default())
                .unwrap();
            let response = client.request(request).await.unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            let mut body = response.into_body();
            let waited = tokio::time::timeout(Duration::from_millis(300), body.frame()).await;
            assert!(waited.is_err(), "{protocol:?}: the body must stall");
            assert!(upstream.requests()[0].processed());

            // Dropping the upstream aborts its connection tasks: the client's body read
            // ends with an error instead of hanging.
            drop(upstream);
            let end = loop {
                match body.frame().await {
                    Some(Ok(_)) => continue,
                    other => break other,
                }
            };
            assert!(matches!(end, Some(Err(_))), "{protocol:?}: {end:?}");
        }
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// Faults

#[tokio::test]
async fn refuse_connection_closes_the_next_accepted_connection() {
    within_10s(async {
        for protocol in BOTH {
            let upstream = upstream(protocol, vec![Step::RefuseConnection]).await;
            let client: TestClient = client(protocol);
            let seen = send(&client, &upstream, "/", "body").await;
            let err = seen.error();
            match protocol {
                // hyper usually sees the close before it writes the request: Canceled
                // (whose source is IncompleteMessage). Had it written first, it would be
                // a plain IncompleteMessage.
                Protocol::Http1 => assert!(hyper_incomplete(err), "{err:?}"),
                _ => assert_h2_closed(err),
            }
            assert!(
                upstream.requests().is_empty(),
                "no request reached the handler"
            );
            assert_eq!(upstream.steps_taken(), 1);
            assert_recovers(&client, &upstream).await;
            assert_eq!(upstream.connections(), 2);
            assert_eq!(upstream.requests()[0].connection, 1);
            assert_eq!(upstream.requests()[0].step_index, 1);
        }
    })
    .await;
}

#[tokio::test]
async fn refuse_connection_taken_by_a_request_closes_its_connection() {
    within_10s(async {
        for protocol in BOTH {
            let upstream =
                upstream(protocol, vec![Reply::ok().into(), Step::RefuseConnection]).await;
            let client: TestClient = client(protocol);
            assert_eq!(get(&client, &upstream, "/").await.status(), StatusCode::OK);
            // The kept-alive connection carries the next request, which takes the step.
            let seen = send(&client, &upstream, "/", "body").await;
            assert_closed(protocol, seen.error());
            let recorded = &upstream.requests()[1];
            assert_eq!(recorded.step, Step::RefuseConnection);
            assert!(!recorded.processed());
            assert_eq!(upstream.connections(), 1);
        }
    })
    .await;
}

#[tokio::test]
async fn close_on_head_reads_none_of_the_body() {
    within_10s(async {
        for protocol in BOTH {
            let upstream = upstream(protocol, vec![Step::CloseOnHead]).await;
            let client: TestClient = client(protocol);
            let seen = send(&client, &upstream, "/", "hello world").await;
            assert_closed(protocol, seen.error());
            let recorded = &upstream.requests()[0];
            assert_eq!(recorded.step, Step::CloseOnHead);
            assert!(recorded.body.is_empty());
            assert!(!recorded.processed());
            assert_eq!(upstream.processed_count(), 0);
            assert_recovers(&client, &upstream).await;
            assert_eq!(upstream.connections(), 2);
        }
    })
    .await;
}

#[tokio::test]
async fn close_after_body_bytes_reads_a_prefix() {
    within_10s(async {
        for protocol in BOTH {
            let upstream = upstream(
                protocol,
                vec![Step::CloseAfterBodyBytes(5), Step::CloseAfterBodyBytes(50)],
            )
            .await;
            let client: TestClient = client(protocol);
            let seen = send(&client, &upstream, "/", "hello world").await;
            assert_closed(protocol, seen.error());
            let recorded = &upstream.requests()[0];
            assert_eq!(recorded.body, "hello");
            assert!(!recorded.processed());

            // A body within the limit is read whole: processed, answer lost.
            let seen = send(&client, &upstream, "/", "short").await;
            assert_closed(protocol, seen.error());
            let recorded = &upstream.requests()[1];
            assert_eq!(recorded.body, "short");
            assert!(recorded.processed());
            assert_eq!(upstream.processed_count(), 1);
        }
    })
    .await;
}

#[tokio::test]
async fn close_after_body_processes_and_loses_the_answer() {
    within_10s(async {
        for protocol in BOTH {
            let upstream = upstream(protocol, vec![Step::CloseAfterBody]).await;
            let client: TestClient = client(protocol);
            let seen = send(&client, &upstream, "/pay", "hello world").await;
            assert_closed(protocol, seen.error());
            let recorded = &upstream.requests()[0];
            assert_eq!(recorded.body, "hello world");
            assert!(recorded.processed());
            assert_eq!(recorded.idempotency_key.as_deref(), Some("key-1"));
            assert_recovers(&client, &upstream).await;
            assert_eq!(upstream.connections(), 2);
        }
    })
    .await;
}

#[tokio::test]
async fn close_after_head_breaks_the_response_body() {
    within_10s(async {
        for protocol in BOTH {
            let upstream = upstream(protocol, vec![Step::CloseAfterHead]).await;
            let client: TestClient = client(protocol);
            let seen = send(&client, &upstream, "/", "hello world").await;
            assert_eq!(seen.status(), StatusCode::OK);
            if let Seen::Response(_, headers, _) = &seen {
                assert_eq!(headers["content-length"], "64");
            }
            let err = seen.body_error();
            let hyper_err = find::<hyper::Error>(err).expect("a hyper::Error");
            assert!(!hyper_err.is_incomplete_message());
            match protocol {
                // "error reading a body from connection", source io UnexpectedEof.
                Protocol::Http1 => assert_eq!(io_kind(err), Some(io::ErrorKind::UnexpectedEof)),
                // Source: an h2::Error that is_io(), BrokenPipe.
                _ => {
                    let h2_err = find::<h2::Error>(err).expect("an h2::Error");
                    assert!(h2_err.is_io());
                    assert_eq!(io_kind(err), Some(io::ErrorKind::BrokenPipe));
                }
            }
            assert!(upstream.requests()[0].processed());
            assert_recovers(&client, &upstream).await;
            assert_eq!(upstream.connections(), 2);
        }
    })
    .await;
}

#[tokio::test]
async fn refused_stream_is_not_processed() {
    within_10s(async {
        for protocol in BOTH {
            let upstream = upstream(protocol, vec![Step::RefusedStream]).await;
            let client: TestClient = client(protocol);
            let seen = send(&client, &upstream, "/", "hello world").await;
            let err = seen.error();
            match protocol {
                Protocol::Http1 => assert_h1_closed(err),
                _ => {
                    let h2_err = find::<h2::Error>(err).expect("an h2::Error");
                    assert_eq!(h2_err.reason(), Some(h2::Reason::REFUSED_STREAM));
                    assert!(h2_err.is_reset() && h2_err.is_remote());
                    assert!(!h2_err.is_go_away());
                }
            }
            let recorded = &upstream.requests()[0];
            assert!(recorded.body.is_empty());
            assert!(!recorded.processed());
            assert_recovers(&client, &upstream).await;
            // HTTP/2 keeps the connection: only the stream was refused.
            let expected = if protocol == Protocol::Http1 { 2 } else { 1 };
            assert_eq!(upstream.connections(), expected);
        }
    })
    .await;
}

#[tokio::test]
async fn go_away_puts_the_stream_above_the_last_stream_id() {
    within_10s(async {
        for protocol in BOTH {
            // The GOAWAY comes on the first stream, then on a later one (stream 3, so the
            // last-stream-id is 1).
            let upstream = upstream(
                protocol,
                vec![Step::GoAway, Reply::ok().into(), Step::GoAway],
            )
            .await;
            let client: TestClient = client(protocol);
            for round in 0..2 {
                if round == 1 {
                    assert_eq!(get(&client, &upstream, "/").await.status(), StatusCode::OK);
                }
                let seen = send(&client, &upstream, "/", "hello world").await;
                let err = seen.error();
                match protocol {
                    Protocol::Http1 => assert_h1_closed(err),
                    _ => {
                        let h2_err = find::<h2::Error>(err).expect("an h2::Error");
                        assert!(h2_err.is_go_away() && h2_err.is_remote(), "{h2_err:?}");
                        assert_eq!(h2_err.reason(), Some(h2::Reason::NO_ERROR));
                        assert!(!h2_err.is_reset());
                    }
                }
            }
            let seen = upstream.requests();
            assert_eq!(seen.len(), 3);
            assert!(!seen[0].processed() && !seen[2].processed());
            assert_eq!(seen[1].connection, seen[2].connection);
            assert_recovers(&client, &upstream).await;
            assert_eq!(upstream.connections(), 3);
        }
    })
    .await;
}

#[tokio::test]
async fn reset_stream_processes_then_resets() {
    within_10s(async {
        for protocol in BOTH {
            let upstream = upstream(protocol, vec![Step::ResetStream]).await;
            let client: TestClient = client(protocol);
            let seen = send(&client, &upstream, "/", "hello world").await;
            let err = seen.error();
            match protocol {
                Protocol::Http1 => assert_h1_closed(err),
                _ => {
                    let h2_err = find::<h2::Error>(err).expect("an h2::Error");
                    assert_eq!(h2_err.reason(), Some(h2::Reason::INTERNAL_ERROR));
                    assert!(h2_err.is_reset() && h2_err.is_remote());
                }
            }
            assert!(upstream.requests()[0].processed());
            assert_recovers(&client, &upstream).await;
            let expected = if protocol == Protocol::Http1 { 2 } else { 1 };
            assert_eq!(upstream.connections(), expected);
        }
    })
    .await;
}

#[tokio::test]
async fn fallback_can_be_a_fault() {
    within_10s(async {
        for protocol in BOTH {
            let upstream = Upstream::builder()
                .protocol(protocol)
                .script([Reply::ok()])
                .then(Step::CloseAfterBody)
                .start()
                .await
                .unwrap();
            let client: TestClient = client(protocol);
            assert_eq!(
                send(&client, &upstream, "/", "a").await.status(),
                StatusCode::OK
            );
            for _ in 0..2 {
                assert_closed(protocol, send(&client, &upstream, "/", "b").await.error());
            }
            let seen = upstream.requests();
            assert_eq!(seen.len(), 3);
            assert_eq!(seen[2].step_index, 2);
            assert_eq!(seen[2].step, Step::CloseAfterBody);
            assert_eq!(upstream.processed_count(), 3);
        }
    })
    .await;
}

#[tokio::test]
async fn concurrent_http2_streams_share_one_connection() {
    within_10s(async {
        let upstream = Upstream::builder()
            .protocol(Protocol::Http2)
            .then(Reply::ok().delay(Duration::from_millis(300)))
            .start()
            .await
            .unwrap();
        let client = client(Protocol::Http2);
        // Open the connection first, so the concurrent requests share it.
        assert_eq!(get(&client, &upstream, "/").await.status(), StatusCode::OK);
        let started = Instant::now();
        let all = futures_util::future::join_all((0..5).map(|_| get(&client, &upstream, "/")));
        for seen in all.await {
            assert_eq!(seen.status(), StatusCode::OK);
        }
        // One after the other, they would take 1.5 s.
        assert!(
            started.elapsed() < Duration::from_millis(1200),
            "streams ran concurrently"
        );
        assert_eq!(upstream.connections(), 1);
        assert_eq!(upstream.requests().len(), 6);
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// Builder and helpers

#[tokio::test]
async fn invalid_replies_are_reported_by_start() {
    within_10s(async {
        for code in [0, 99, 101, 1000] {
            let bad_status = Upstream::builder()
                .script([Reply::status(code)])
                .start()
                .await;
            assert_eq!(bad_status.unwrap_err().kind(), io::ErrorKind::InvalidInput);
        }
        let bad_name = Upstream::builder()
            .then(Reply::ok().header("bad name", "x"))
            .start()
            .await;
        assert_eq!(bad_name.unwrap_err().kind(), io::ErrorKind::InvalidInput);
        let bad_value = Upstream::builder()
            .script([Reply::ok().header("x-ok", "line\nbreak")])
            .start()
            .await;
        let err = bad_value.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(err.to_string().contains("script step 0"), "{err}");
    })
    .await;
}

#[tokio::test]
async fn uri_points_at_the_loopback_port() {
    within_10s(async {
        let upstream = Upstream::builder().start().await.unwrap();
        let addr = upstream.addr();
        assert!(addr.ip().is_loopback());
        assert_eq!(
            upstream.uri("/a?b=1").to_string(),
            format!("http://{addr}/a?b=1")
        );
        assert_eq!(upstream.uri("x").to_string(), format!("http://{addr}/x"));
        assert_eq!(
            upstream.uri("/a b\n").to_string(),
            format!("http://{addr}/a%20b%0A")
        );
        assert!(format!("{upstream:?}").contains("Upstream"));
    })
    .await;
}

#[test]
fn start_outside_a_runtime_is_an_error_not_a_panic() {
    let started = futures_util::FutureExt::now_or_never(Upstream::builder().start());
    match started {
        Some(result) => assert_eq!(result.unwrap_err().kind(), io::ErrorKind::Other),
        None => panic!("start must not wait outside a runtime"),
    }
}

#[allow(dead_code)]
fn assert_send_sync() {
    fn check<T: Send + Sync>() {}
    check::<Upstream>();
    check::<Step>();
    check::<backstop::test_util::Recorded>();
    let _: Option<BoxError> = None;
}

#[tokio::test]
async fn connection_specific_headers_do_not_break_the_server() {
    within_10s(async {
        for protocol in BOTH {
            let upstream = upstream(
                protocol,
                vec![Reply::ok().header("connection", "close").body("x").into()],
            )
            .await;
            let client: TestClient = client(protocol);
            let seen = get(&client, &upstream, "/").await;
            match protocol {
                Protocol::Http1 => assert_eq!(seen.body(), "x"),
                _ => {
                    let h2_err = find::<h2::Error>(seen.error()).expect("an h2::Error");
                    assert_eq!(h2_err.reason(), Some(h2::Reason::INTERNAL_ERROR));
                }
            }
            assert_recovers(&client, &upstream).await;
        }
    })
    .await;
}
