#![cfg(feature = "test-util")]
//! The retry layer over real hyper-util clients and loopback upstreams, HTTP/1.1 and
//! HTTP/2: what the server processed, not only what the client saw.

use std::time::{Duration, Instant};

use crate::support::wire::{
    channel, empty, full, probed_channel, quick, transport, upstream, within_10s, Body, BOTH,
};
use backstop::policy::{History, NoRetry, NotReplayable, StopReason};
use backstop::test_util::{Protocol, Reply, Step, Upstream};
use backstop::{RetryLayer, RetryPolicy};
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tower::{Layer, ServiceExt};

async fn send(
    protocol: Protocol,
    policy: RetryPolicy,
    req: Request<Body>,
) -> Result<Response<Incoming>, backstop::Error> {
    RetryLayer::new(policy)
        .layer(transport(protocol))
        .oneshot(req)
        .await
}

fn request(method: Method, upstream: &Upstream, body: Body) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(upstream.uri("/items"))
        .body(body)
        .unwrap()
}

fn history(res: &Response<Incoming>) -> &History {
    res.extensions().get::<History>().expect("history")
}

#[tokio::test]
async fn scenario_1_503_then_200_makes_two_upstream_calls() {
    within_10s(async {
        for protocol in BOTH {
            let up = upstream(
                protocol,
                vec![Reply::status(503).into(), Reply::ok().into()],
            )
            .await;
            let res = send(protocol, quick(), request(Method::GET, &up, empty()))
                .await
                .unwrap();
            assert_eq!(res.status(), StatusCode::OK, "{protocol:?}");
            assert_eq!(up.requests().len(), 2, "{protocol:?}");
            assert_eq!(history(&res).len(), 2);
        }
    })
    .await
}

#[tokio::test]
async fn every_header_reaches_each_attempt_the_same() {
    within_10s(async {
        // A head small enough to be kept as a flat copy, and one over the limit,
        // which is kept as a cloned map.
        for big in [0, 6000] {
            for protocol in BOTH {
                let up = upstream(
                    protocol,
                    vec![
                        Reply::status(503).into(),
                        Reply::status(502).into(),
                        Reply::ok().into(),
                    ],
                )
                .await;
                let mut req = request(Method::GET, &up, empty());
                let headers = req.headers_mut();
                headers.append("accept", "text/html".parse().unwrap());
                headers.append("accept", "application/json".parse().unwrap());
                headers.append("x-trace-hop", "one".parse().unwrap());
                headers.append("x-trace-hop", "two".parse().unwrap());
                headers.insert("authorization", "Bearer abc".parse().unwrap());
                headers.insert("x-big", "b".repeat(big + 1).parse().unwrap());
                let sent = headers.clone();
                let res = send(protocol, quick(), req).await.unwrap();
                assert_eq!(res.status(), StatusCode::OK, "{protocol:?}");
                let seen = up.requests();
                assert_eq!(seen.len(), 3, "{protocol:?}");
                for attempt in &seen {
                    for name in sent.keys() {
                        let want: Vec<_> = sent.get_all(name).iter().collect();
                        let got: Vec<_> = attempt.headers.get_all(name).iter().collect();
                        assert_eq!(got, want, "{protocol:?} {name} big={big}");
                    }
                }
            }
        }
    })
    .await
}

#[tokio::test]
async fn a_streamed_put_is_replayed_byte_for_byte() {
    within_10s(async {
        for protocol in BOTH {
            let up = upstream(
                protocol,
                vec![Reply::status(503).into(), Reply::ok().into()],
            )
            .await;
            let (tx, body) = channel();
            let feed = tokio::spawn(async move {
                for i in 0..8u8 {
                    tx.send(Bytes::from(vec![b'a' + i; 1000])).await.unwrap();
                }
            });
            let res = send(protocol, quick(), request(Method::PUT, &up, body))
                .await
                .unwrap();
            feed.await.unwrap();
            assert_eq!(res.status(), StatusCode::OK);
            let seen = up.requests();
            assert_eq!(seen.len(), 2);
            let want: Vec<u8> = (0..8u8).flat_map(|i| vec![b'a' + i; 1000]).collect();
            assert_eq!(seen[0].body, want, "{protocol:?}: first attempt");
            assert_eq!(seen[1].body, want, "{protocol:?}: replay");
        }
    })
    .await
}

#[tokio::test]
async fn scenario_4_a_body_over_the_cap_is_sent_once() {
    within_10s(async {
        for protocol in BOTH {
            // A body over the cap in one chunk, read whole by the server: the chunk
            // crossing the cap is kept whole, so it is sent again.
            let up = upstream(
                protocol,
                vec![Reply::status(503).into(), Reply::status(503).into()],
            )
            .await;
            let policy = RetryPolicy::builder()
                .replay_cap(1024)
                .max_attempts(2)
                .build()
                .unwrap();
            let res = send(
                protocol,
                policy,
                request(Method::PUT, &up, full(vec![7u8; 4096])),
            )
            .await
            .unwrap();
            assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(up.requests().len(), 2);
            assert_eq!(up.requests()[1].body, vec![7u8; 4096]);

            // No size hint: the cap is crossed mid-stream.
            let up = upstream(protocol, vec![Reply::status(503).into()]).await;
            let (tx, body) = channel();
            let feed = tokio::spawn(async move {
                for _ in 0..4 {
                    tx.send(Bytes::from(vec![1u8; 512])).await.unwrap();
                }
            });
            let policy = RetryPolicy::builder().replay_cap(1024).build().unwrap();
            let res = send(protocol, policy, request(Method::PUT, &up, body))
                .await
                .unwrap();
            feed.await.unwrap();
            assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(up.requests().len(), 1, "{protocol:?}");
            assert_eq!(up.requests()[0].body.len(), 2048);
            assert_eq!(
                history(&res).stop_reason(),
                Some(StopReason::BodyNotReplayable(NotReplayable::CapExceeded))
            );
        }
    })
    .await
}

#[tokio::test]
async fn scenario_5_an_answer_lost_after_the_body_resends_a_get_not_a_post() {
    within_10s(async {
        for protocol in BOTH {
            let up = upstream(protocol, vec![Step::CloseAfterBody, Reply::ok().into()]).await;
            let res = send(protocol, quick(), request(Method::GET, &up, empty()))
                .await
                .unwrap();
            assert_eq!(res.status(), StatusCode::OK, "{protocol:?}");
            assert_eq!(up.requests().len(), 2);

            let up = upstream(protocol, vec![Step::CloseAfterBody, Reply::ok().into()]).await;
            let err = send(
                protocol,
                quick(),
                request(Method::POST, &up, full("charge")),
            )
            .await
            .unwrap_err();
            assert_eq!(
                up.requests().len(),
                1,
                "{protocol:?}: a POST is not re-sent"
            );
            assert_eq!(up.processed_count(), 1);
            assert_eq!(
                err.stop_reason(),
                Some(StopReason::NotRetryable(NoRetry::MaybeProcessed))
            );
            assert!(!err.is_retryable());
        }
    })
    .await
}

#[tokio::test]
async fn scenario_6_a_refused_stream_resends_a_post() {
    within_10s(async {
        let up = upstream(
            Protocol::Http2,
            vec![Step::RefusedStream, Reply::ok().into()],
        )
        .await;
        let res = send(
            Protocol::Http2,
            quick(),
            request(Method::POST, &up, full("order")),
        )
        .await
        .unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        let seen = up.requests();
        assert_eq!(seen.len(), 2);
        assert!(!seen[0].processed());
        assert!(seen[1].processed());
        assert_eq!(seen[1].body, "order");
        assert_eq!(up.processed_count(), 1, "processed exactly once");
    })
    .await
}

#[tokio::test]
async fn a_goaway_above_the_stream_resends_a_post() {
    within_10s(async {
        let up = upstream(Protocol::Http2, vec![Step::GoAway, Reply::ok().into()]).await;
        let res = send(
            Protocol::Http2,
            quick(),
            request(Method::POST, &up, full("order")),
        )
        .await
        .unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(up.processed_count(), 1);
        assert_eq!(up.requests().len(), 2);
    })
    .await
}

#[tokio::test]
async fn scenario_8_retry_after_is_waited_and_an_excessive_one_reported() {
    within_10s(async {
        for protocol in BOTH {
            let up = upstream(
                protocol,
                vec![
                    Reply::status(503).header("retry-after-ms", "150").into(),
                    Reply::ok().into(),
                ],
            )
            .await;
            let started = Instant::now();
            let res = send(protocol, quick(), request(Method::GET, &up, empty()))
                .await
                .unwrap();
            assert_eq!(res.status(), StatusCode::OK);
            assert!(started.elapsed() >= Duration::from_millis(150));
            assert_eq!(
                history(&res).attempts()[0].wait,
                Some(Duration::from_millis(150))
            );

            let up = upstream(
                protocol,
                vec![Reply::status(429).header("retry-after", "3600").into()],
            )
            .await;
            let res = send(protocol, quick(), request(Method::GET, &up, empty()))
                .await
                .unwrap();
            assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
            assert_eq!(up.requests().len(), 1);
            assert_eq!(history(&res).retry_after(), Some(Duration::from_secs(3600)));
            assert_eq!(
                history(&res).stop_reason(),
                Some(StopReason::RetryAfterTooLong)
            );
        }
    })
    .await
}

#[tokio::test]
async fn scenario_12_a_slow_head_times_out_and_the_deadline_covers_all() {
    within_10s(async {
        for protocol in BOTH {
            // One slow head, then a quick answer.
            let slow = Reply::ok().delay(Duration::from_secs(5));
            let up = upstream(protocol, vec![slow.clone().into(), Reply::ok().into()]).await;
            let policy = RetryPolicy::builder()
                .backoff(Duration::from_millis(1), Duration::from_millis(5))
                .attempt_timeout(Duration::from_millis(200))
                .build()
                .unwrap();
            let res = send(protocol, policy, request(Method::GET, &up, empty()))
                .await
                .unwrap();
            assert_eq!(res.status(), StatusCode::OK);
            assert_eq!(up.requests().len(), 2, "{protocol:?}");

            // Every head slow: the deadline ends the call, attempts and waits included.
            let up = Upstream::builder()
                .protocol(protocol)
                .then(slow)
                .start()
                .await
                .unwrap();
            let policy = RetryPolicy::builder()
                .max_attempts(10)
                .backoff(Duration::from_millis(1), Duration::from_millis(5))
                .attempt_timeout(Duration::from_millis(150))
                .timeout(Duration::from_millis(400))
                .build()
                .unwrap();
            let started = Instant::now();
            let err = send(protocol, policy, request(Method::GET, &up, empty()))
                .await
                .unwrap_err();
            let took = started.elapsed();
            assert!(err.is_timeout(), "{err}");
            assert!(took >= Duration::from_millis(380), "{took:?}");
            assert!(took < Duration::from_millis(900), "{took:?}");
            assert!((2..=3).contains(&err.attempts()), "{}", err.attempts());
        }
    })
    .await
}

#[tokio::test]
async fn a_stalled_failed_body_does_not_hold_the_retry() {
    within_10s(async {
        for protocol in BOTH {
            let stalled = Reply::status(503).body("x".repeat(100)).stall_body();
            let up = upstream(protocol, vec![stalled.into(), Reply::ok().into()]).await;
            let policy = RetryPolicy::builder()
                .backoff(Duration::from_millis(1), Duration::from_millis(5))
                .drain(64 * 1024, Duration::from_millis(100))
                .build()
                .unwrap();
            let started = Instant::now();
            let res = send(protocol, policy, request(Method::GET, &up, empty()))
                .await
                .unwrap();
            assert_eq!(res.status(), StatusCode::OK);
            assert!(started.elapsed() < Duration::from_secs(2));
            assert_eq!(up.requests().len(), 2);
        }
    })
    .await
}

#[tokio::test]
async fn http1_retries_after_a_failed_response_reuse_the_connection() {
    within_10s(async {
        // A failed response with a body larger than what arrives with its head.
        let failing = || Reply::status(503).body("b".repeat(48 * 1024));
        let up = upstream(
            Protocol::Http1,
            vec![failing().into(), failing().into(), Reply::ok().into()],
        )
        .await;
        let res = send(Protocol::Http1, quick(), request(Method::GET, &up, empty()))
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        let seen = up.requests();
        assert_eq!(seen.len(), 3);
        assert!(seen.iter().all(|r| r.connection == seen[0].connection));
        assert_eq!(
            up.connections(),
            1,
            "the drained connection went back to the pool"
        );

        // Without the drain the failed response's connection cannot be reused.
        let up = upstream(
            Protocol::Http1,
            vec![failing().into(), failing().into(), Reply::ok().into()],
        )
        .await;
        let policy = RetryPolicy::builder()
            .backoff(Duration::from_millis(1), Duration::from_millis(5))
            .drain(0, Duration::ZERO)
            .build()
            .unwrap();
        let res = send(Protocol::Http1, policy, request(Method::GET, &up, empty()))
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(up.connections(), 3);
    })
    .await
}

#[tokio::test]
async fn the_final_response_body_is_intact() {
    within_10s(async {
        for protocol in BOTH {
            let up = upstream(
                protocol,
                vec![
                    Reply::status(502).into(),
                    Reply::ok().body("payload").into(),
                ],
            )
            .await;
            let res = send(protocol, quick(), request(Method::GET, &up, empty()))
                .await
                .unwrap();
            let body = res.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(body, "payload");
        }
    })
    .await
}

#[tokio::test]
async fn scenario_3_an_early_503_then_a_reset_mid_upload_is_retried_whole() {
    within_10s(async {
        for protocol in BOTH {
            // The server answers 503 as soon as the head arrives, then stops the upload
            // (HTTP/2: RST_STREAM NO_ERROR; HTTP/1.1: the connection closes).
            let up = upstream(
                protocol,
                vec![Reply::status(503).before_body().into(), Reply::ok().into()],
            )
            .await;
            let (tx, body, mut dropped) = probed_channel();
            let feed = tokio::spawn(async move {
                for i in 0..16u8 {
                    if tx.send(Bytes::from(vec![b'a' + i; 2048])).await.is_err() {
                        break;
                    }
                    tokio::task::yield_now().await;
                }
            });
            let res = send(protocol, quick(), request(Method::PUT, &up, body))
                .await
                .unwrap();
            feed.await.unwrap();
            assert_eq!(res.status(), StatusCode::OK, "{protocol:?}");
            let seen = up.requests();
            assert_eq!(seen.len(), 2, "{protocol:?}");
            assert!(!seen[0].processed());
            let want: Vec<u8> = (0..16u8).flat_map(|i| vec![b'a' + i; 2048]).collect();
            assert_eq!(
                seen[1].body, want,
                "{protocol:?}: the retry carries the whole body"
            );
            // No leak: once the call is over, every reader of the body is gone, and the
            // original body with them (hyper may drop an attempt's body on its
            // connection task a moment later).
            drop(res);
            tokio::time::timeout(Duration::from_secs(2), dropped.wait_for(|gone| *gone))
                .await
                .expect("the request body was released")
                .unwrap();
        }
    })
    .await
}

#[tokio::test]
async fn a_request_body_that_fails_is_not_resent_and_says_why() {
    within_10s(async {
        for protocol in BOTH {
            let up = upstream(protocol, vec![Reply::ok().into()]).await;
            let frames: Vec<Result<http_body::Frame<Bytes>, backstop::BoxError>> = vec![
                Ok(http_body::Frame::data(Bytes::from_static(b"part one"))),
                Err(std::io::Error::other("the disk went away").into()),
            ];
            let body = http_body_util::StreamBody::new(futures_util::stream::iter(frames));
            let req = request(Method::PUT, &up, BodyExt::boxed(body));
            let err = send(protocol, quick(), req).await.unwrap_err();
            // HTTP/1.1 reports the body's failure; HTTP/2 resets the stream, which
            // reads as a closed stream. Either way the body cannot be sent again.
            let want = match protocol {
                Protocol::Http1 => backstop::policy::ErrorKind::BodyWrite,
                _ => backstop::policy::ErrorKind::Closed,
            };
            assert_eq!(err.kind(), want, "{protocol:?}");
            assert_eq!(
                err.stop_reason(),
                Some(StopReason::BodyNotReplayable(NotReplayable::BodyError))
            );
            assert_eq!(err.attempts(), 1);
            assert_eq!(up.processed_count(), 0);
        }
    })
    .await
}
