#![cfg(feature = "test-util")]
//! Safe re-sends for writes, over real loopback upstreams: the retry layer with
//! `ProgressTrackingLayer` around a hyper-util client, asserting what the server processed.

use std::time::Duration;

use crate::support::wire::{
    channel, empty, faulty_transport, full, quick, transport, upstream, within_10s, Body, Connect,
    FaultyConnector, BOTH,
};
use backstop::policy::{History, NoRetry, StopReason};
use backstop::test_util::{Protocol, Reply, Step, Upstream};
use backstop::{IdempotencyKeyLayer, ProgressTrackingLayer, RetryLayer, RetryPolicy};
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use tower::{ServiceBuilder, ServiceExt};

/// Retry + progress around a hyper-util client.
async fn send(
    protocol: Protocol,
    req: Request<Body>,
) -> Result<Response<Incoming>, backstop::Error> {
    ServiceBuilder::new()
        .layer(RetryLayer::new(quick()))
        .layer(ProgressTrackingLayer::new())
        .service(transport(protocol))
        .oneshot(req)
        .await
}

fn request(method: Method, upstream: &Upstream, body: Body) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(upstream.uri("/charges"))
        .body(body)
        .unwrap()
}

#[tokio::test]
async fn a_lost_answer_after_the_whole_body_is_not_resent_for_a_post() {
    within_10s(async {
        for protocol in BOTH {
            let up = upstream(protocol, vec![Step::CloseAfterBody, Reply::ok().into()]).await;
            let err = send(protocol, request(Method::POST, &up, full("charge 42")))
                .await
                .unwrap_err();
            assert_eq!(up.requests().len(), 1, "{protocol:?}");
            assert_eq!(up.processed_count(), 1);
            assert_eq!(
                err.stop_reason(),
                Some(StopReason::NotRetryable(NoRetry::MaybeProcessed))
            );
            // The error says the request was written, body and all.
            let progress = err.history().unwrap().attempts()[0].progress.unwrap();
            assert!(progress.tracked && progress.connected && progress.write_began);
            assert_eq!(progress.body_bytes, 9);
            assert!(progress.body_complete);
            assert!(!progress.head_received);
        }
    })
    .await
}

#[tokio::test]
async fn with_a_key_the_same_post_is_resent_under_the_same_key() {
    within_10s(async {
        for protocol in BOTH {
            let up = upstream(protocol, vec![Step::CloseAfterBody, Reply::ok().into()]).await;
            let res = ServiceBuilder::new()
                .layer(IdempotencyKeyLayer::new())
                .layer(RetryLayer::new(quick()))
                .layer(ProgressTrackingLayer::new())
                .service(transport(protocol))
                .oneshot(request(Method::POST, &up, full("charge 42")))
                .await
                .unwrap();
            assert_eq!(res.status(), StatusCode::OK);
            let seen = up.requests();
            assert_eq!(seen.len(), 2, "{protocol:?}");
            let key = seen[0].idempotency_key.clone().expect("a key");
            assert_eq!(seen[1].idempotency_key.as_deref(), Some(key.as_str()));
            assert_eq!(seen[1].body, "charge 42");
        }
    })
    .await
}

#[tokio::test]
async fn a_get_is_resent_after_a_lost_answer() {
    within_10s(async {
        for protocol in BOTH {
            let up = upstream(protocol, vec![Step::CloseAfterBody, Reply::ok().into()]).await;
            let res = send(protocol, request(Method::GET, &up, empty()))
                .await
                .unwrap();
            assert_eq!(res.status(), StatusCode::OK);
            assert_eq!(up.requests().len(), 2, "{protocol:?}");
        }
    })
    .await
}

#[tokio::test]
async fn a_post_cut_after_part_of_its_body_is_not_resent() {
    within_10s(async {
        for protocol in BOTH {
            let up = upstream(
                protocol,
                vec![Step::CloseAfterBodyBytes(1000), Reply::ok().into()],
            )
            .await;
            let (tx, body) = channel();
            let feed = tokio::spawn(async move {
                for _ in 0..4 {
                    if tx.send(Bytes::from(vec![b'x'; 1000])).await.is_err() {
                        break;
                    }
                }
            });
            let err = send(protocol, request(Method::POST, &up, body))
                .await
                .unwrap_err();
            let _ = feed.await;
            assert_eq!(up.requests().len(), 1, "{protocol:?}");
            assert_eq!(up.processed_count(), 0);
            assert!(!err.is_retryable(), "{err}");
            let progress = err.history().unwrap().attempts()[0].progress.unwrap();
            assert!(progress.body_bytes >= 1000, "{progress:?}");
        }
    })
    .await
}

#[tokio::test]
async fn a_post_whose_connection_closed_before_it_was_written_is_resent() {
    within_10s(async {
        // HTTP/1.1: hyper sees the connection close before it writes the request and
        // reports it canceled. (Over HTTP/2 a client writes its first request without
        // waiting for the server, and a connection closed without GOAWAY leaves the
        // request's fate unknown: RFC 9113 §8.7. It is not re-sent.)
        let up = upstream(
            Protocol::Http1,
            vec![Step::RefuseConnection, Reply::ok().into()],
        )
        .await;
        let res = send(Protocol::Http1, request(Method::POST, &up, full("charge")))
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(up.requests().len(), 1);
        assert_eq!(up.processed_count(), 1);
        assert_eq!(up.connections(), 2);
        let history = res.extensions().get::<History>().unwrap();
        assert_eq!(history.len(), 2);
    })
    .await
}

#[tokio::test]
async fn a_post_whose_connection_was_refused_is_resent() {
    within_10s(async {
        for protocol in BOTH {
            let up = upstream(protocol, vec![Reply::ok().into()]).await;
            let connector = FaultyConnector::new([Connect::Refuse]);
            let res = ServiceBuilder::new()
                .layer(RetryLayer::new(quick()))
                .layer(ProgressTrackingLayer::new())
                .service(faulty_transport(protocol, connector, true))
                .oneshot(request(Method::POST, &up, full("charge")))
                .await
                .unwrap();
            assert_eq!(res.status(), StatusCode::OK, "{protocol:?}");
            assert_eq!(up.processed_count(), 1);
            let history = res.extensions().get::<History>().unwrap();
            assert_eq!(history.len(), 2);
        }
    })
    .await
}

#[tokio::test]
async fn a_read_timeout_after_the_body_went_out_is_not_resent_for_a_post() {
    within_10s(async {
        for protocol in BOTH {
            let up = upstream(
                protocol,
                vec![
                    Reply::ok().delay(Duration::from_secs(5)).into(),
                    Reply::ok().into(),
                ],
            )
            .await;
            let policy = RetryPolicy::builder()
                .attempt_timeout(Duration::from_millis(200))
                .build()
                .unwrap();
            let err = ServiceBuilder::new()
                .layer(RetryLayer::new(policy))
                .layer(ProgressTrackingLayer::new())
                .service(transport(protocol))
                .oneshot(request(Method::POST, &up, full("charge")))
                .await
                .unwrap_err();
            assert!(err.is_timeout(), "{err}");
            assert_eq!(up.requests().len(), 1, "{protocol:?}");
            assert_eq!(
                err.stop_reason(),
                Some(StopReason::NotRetryable(NoRetry::MaybeProcessed))
            );
        }
    })
    .await
}

#[tokio::test]
async fn a_timeout_before_any_connection_resends_a_post_only_with_progress_tracking() {
    within_10s(async {
        for protocol in BOTH {
            let policy = || {
                RetryPolicy::builder()
                    .backoff(Duration::from_millis(1), Duration::from_millis(5))
                    .attempt_timeout(Duration::from_millis(150))
                    .build()
                    .unwrap()
            };
            // The first connect hangs past the attempt timeout: nothing was written.
            let up = upstream(protocol, vec![Reply::ok().into()]).await;
            let connector = FaultyConnector::new([Connect::Delay(Duration::from_secs(5))]);
            let res = ServiceBuilder::new()
                .layer(RetryLayer::new(policy()))
                .layer(ProgressTrackingLayer::new())
                .service(faulty_transport(protocol, connector, true))
                .oneshot(request(Method::POST, &up, full("charge")))
                .await
                .unwrap();
            assert_eq!(res.status(), StatusCode::OK, "{protocol:?}");
            assert_eq!(up.processed_count(), 1);
            let first = &res.extensions().get::<History>().unwrap().attempts()[0];
            let progress = first.progress.unwrap();
            assert!(progress.tracked && !progress.connected, "{progress:?}");

            // Without the record, a timeout is judged by its type: maybe written.
            let up = upstream(protocol, vec![Reply::ok().into()]).await;
            let connector = FaultyConnector::new([Connect::Delay(Duration::from_secs(5))]);
            let err = ServiceBuilder::new()
                .layer(RetryLayer::new(policy()))
                .service(faulty_transport(protocol, connector, true))
                .oneshot(request(Method::POST, &up, full("charge")))
                .await
                .unwrap_err();
            assert!(err.is_timeout());
            assert_eq!(up.requests().len(), 0);
        }
    })
    .await
}

#[tokio::test]
async fn refused_streams_and_goaway_resend_a_post() {
    within_10s(async {
        for step in [Step::RefusedStream, Step::GoAway] {
            let up = upstream(Protocol::Http2, vec![step.clone(), Reply::ok().into()]).await;
            let res = send(Protocol::Http2, request(Method::POST, &up, full("order")))
                .await
                .unwrap();
            assert_eq!(res.status(), StatusCode::OK, "{step:?}");
            assert_eq!(up.processed_count(), 1, "{step:?}");
        }
    })
    .await
}
