#![cfg(all(feature = "grpc", feature = "test-util"))]
//! gRPC's rules over a real tonic `Channel` (a hand-written codec, no protoc)
//! against a real HTTP/2 server on 127.0.0.1.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::raw_codec::Raw;
use crate::support::wire::within_10s;
use backstop::grpc::{self, Code};
use backstop::policy::{History, NoRetry, StopReason};
use backstop::test_util::{Protocol, Reply, Step, Upstream};
use backstop::{BudgetLayer, BudgetPolicy, ReplayBody, RetryLayer, RetryPolicy};
use bytes::Bytes;
use http::uri::PathAndQuery;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::time::Instant;
use tonic::Status;
use tower::ServiceBuilder;

/// What the server answers one call with.
#[derive(Clone)]
pub(crate) enum Answer {
    /// A trailers-only response: HTTP 200, `grpc-status` (and a pushback) in the
    /// headers, no body.
    TrailersOnly(u32, Option<&'static str>),
    /// A message and `grpc-status: 0` in the trailers.
    Message(&'static str),
    /// Headers without a status (committed), then `grpc-status` in the trailers.
    Committed(u32),
}

/// What the server saw of one call.
#[derive(Clone, Debug)]
pub(crate) struct Seen {
    path: String,
    headers: HeaderMap,
    at: Instant,
}

type ResBody = BoxBody<Bytes, Infallible>;

fn grpc_response(answer: Answer) -> Response<ResBody> {
    let mut frames: Vec<Frame<Bytes>> = Vec::new();
    let mut res = Response::builder().header("content-type", "application/grpc");
    let trailers = |code: u32| {
        let mut t = HeaderMap::new();
        t.insert("grpc-status", HeaderValue::from(code));
        Frame::trailers(t)
    };
    match answer {
        Answer::TrailersOnly(code, pushback) => {
            res = res.header("grpc-status", code.to_string());
            if let Some(p) = pushback {
                res = res.header("grpc-retry-pushback-ms", p);
            }
        }
        Answer::Message(text) => {
            let mut frame = vec![0u8];
            frame.extend_from_slice(&(text.len() as u32).to_be_bytes());
            frame.extend_from_slice(text.as_bytes());
            frames.push(Frame::data(Bytes::from(frame)));
            frames.push(trailers(0));
        }
        Answer::Committed(code) => frames.push(trailers(code)),
    }
    let stream = futures_util::stream::iter(frames.into_iter().map(Ok::<_, Infallible>));
    res.body(StreamBody::new(stream).boxed()).unwrap()
}

/// An HTTP/2 server answering calls from `script` (then `Message("done")`).
pub(crate) async fn grpc_server(script: Vec<Answer>) -> (SocketAddr, Arc<Mutex<Vec<Seen>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let script = Arc::new(Mutex::new(VecDeque::from(script)));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let recorded = seen.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let script = script.clone();
            let seen = recorded.clone();
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let script = script.clone();
                let seen = seen.clone();
                async move {
                    let (parts, body) = req.into_parts();
                    // The request is read whole: it was written.
                    let _ = body.collect().await;
                    seen.lock().unwrap().push(Seen {
                        path: parts.uri.path().to_owned(),
                        headers: parts.headers,
                        at: Instant::now(),
                    });
                    let answer = script
                        .lock()
                        .unwrap()
                        .pop_front()
                        .unwrap_or(Answer::Message("done"));
                    Ok::<_, Infallible>(grpc_response(answer))
                }
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tcp), service)
                    .await;
            });
        }
    });
    (addr, seen)
}

/// The histories the retry layer returned with its responses, caught before
/// tonic reads them.
pub(crate) type Caught = Arc<Mutex<Vec<Option<History>>>>;

/// A tonic client over a `Channel` to `addr`, with the retry layer between them.
pub(crate) type Svc = tower::util::BoxCloneService<
    Request<tonic::body::Body>,
    Response<tonic::body::Body>,
    backstop::Error,
>;

pub(crate) async fn client(
    addr: SocketAddr,
    policy: RetryPolicy,
) -> (tonic::client::Grpc<Svc>, Caught) {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let caught: Caught = Arc::default();
    let keep = caught.clone();
    let svc = ServiceBuilder::new()
        .map_response(move |res: Response<tonic::body::Body>| {
            keep.lock()
                .unwrap()
                .push(res.extensions().get::<History>().cloned());
            res
        })
        .layer(RetryLayer::new(policy))
        .map_request(|req: Request<ReplayBody<tonic::body::Body>>| req.map(tonic::body::Body::new))
        .service(channel);
    (tonic::client::Grpc::new(Svc::new(svc)), caught)
}

pub(crate) fn policy() -> RetryPolicy {
    let rules = grpc::rules()
        .retryable_codes([Code::Unavailable])
        .idempotent("/echo.Echo/Get")
        .build()
        .unwrap();
    RetryPolicy::builder()
        .rules(rules)
        .backoff(Duration::from_millis(1), Duration::from_millis(2))
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

pub(crate) async fn call(
    grpc: &mut tonic::client::Grpc<Svc>,
    path: &'static str,
) -> Result<tonic::Response<Bytes>, Status> {
    grpc.ready()
        .await
        .map_err(|e| Status::unknown(e.to_string()))?;
    let mut req = tonic::Request::new(Bytes::from_static(b"hello"));
    req.set_timeout(Duration::from_secs(30));
    grpc.unary(req, PathAndQuery::from_static(path), Raw).await
}

fn grpc_timeout(seen: &Seen) -> Duration {
    let v = seen.headers["grpc-timeout"].to_str().unwrap();
    let (n, unit) = v.split_at(v.len() - 1);
    let n: u64 = n.parse().unwrap();
    match unit {
        "u" => Duration::from_micros(n),
        "m" => Duration::from_millis(n),
        "S" => Duration::from_secs(n),
        other => panic!("unit {other}"),
    }
}

#[tokio::test]
async fn unavailable_is_retried_after_the_pushback_exactly() {
    within_10s(async {
        let (addr, seen) = grpc_server(vec![
            Answer::TrailersOnly(14, Some("150")),
            Answer::Message("hi"),
        ])
        .await;
        let (mut grpc, caught) = client(addr, policy()).await;
        let res = call(&mut grpc, "/echo.Echo/Get").await.unwrap();
        assert_eq!(res.into_inner(), Bytes::from_static(b"hi"));
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 2);
        assert!(seen.iter().all(|s| s.path == "/echo.Echo/Get"));
        // Waited the pushback, not the 1 ms backoff, and recorded it exactly.
        let gap = seen[1].at - seen[0].at;
        assert!(gap >= Duration::from_millis(150), "{gap:?}");
        assert!(gap < Duration::from_millis(650), "{gap:?}");
        let history = caught.lock().unwrap()[0].clone().expect("history");
        assert_eq!(history.attempts()[0].wait, Some(Duration::from_millis(150)));
        assert_eq!(history.attempts()[0].grpc_status, Some(Code::Unavailable));
        // Its line names the code and the pushback as the server sent it.
        let first = history.to_string().lines().next().unwrap().to_owned();
        assert!(
            first.starts_with(
                "attempt 1/3: 200 OK, grpc-status 14 UNAVAILABLE (pushback 150ms) after "
            ),
            "{first}"
        );
        assert_eq!(history.stop_reason(), Some(StopReason::Answered));
        // Retries carry the count of attempts before them.
        assert!(!seen[0].headers.contains_key("grpc-previous-rpc-attempts"));
        assert_eq!(seen[1].headers["grpc-previous-rpc-attempts"], "1");
        // Each attempt's grpc-timeout is cut from the caller's 30 s to the time
        // left before the call's 5 s deadline.
        let (first, second) = (grpc_timeout(&seen[0]), grpc_timeout(&seen[1]));
        assert!(
            first <= Duration::from_secs(5) && first > Duration::from_secs(4),
            "{first:?}"
        );
        assert!(second <= first - Duration::from_millis(150), "{second:?}");
    })
    .await;
}

#[tokio::test]
async fn a_negative_pushback_stops() {
    within_10s(async {
        for pushback in ["-1", "soon"] {
            let (addr, seen) = grpc_server(vec![
                Answer::TrailersOnly(14, Some(pushback)),
                Answer::Message("hi"),
            ])
            .await;
            let (mut grpc, caught) = client(addr, policy()).await;
            let status = call(&mut grpc, "/echo.Echo/Get").await.unwrap_err();
            assert_eq!(status.code(), tonic::Code::Unavailable, "{pushback}");
            assert_eq!(seen.lock().unwrap().len(), 1);
            let history = caught.lock().unwrap()[0].clone().expect("history");
            assert_eq!(
                history.stop_reason(),
                Some(StopReason::NotRetryable(NoRetry::ServerDeclined))
            );
        }
    })
    .await;
}

#[tokio::test]
async fn a_committed_response_is_not_retried() {
    within_10s(async {
        let (addr, seen) = grpc_server(vec![Answer::Committed(14), Answer::Message("hi")]).await;
        let (mut grpc, caught) = client(addr, policy()).await;
        let status = call(&mut grpc, "/echo.Echo/Get").await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unavailable);
        assert_eq!(seen.lock().unwrap().len(), 1);
        // An answer at the first attempt: no history.
        assert!(caught.lock().unwrap()[0].is_none());
    })
    .await;
}

#[tokio::test]
async fn other_codes_are_answers() {
    within_10s(async {
        let (addr, seen) = grpc_server(vec![Answer::TrailersOnly(13, None)]).await;
        let (mut grpc, _) = client(addr, policy()).await;
        let status = call(&mut grpc, "/echo.Echo/Get").await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::Internal);
        assert_eq!(seen.lock().unwrap().len(), 1);
    })
    .await;
}

#[tokio::test]
async fn a_method_not_idempotent_is_not_retried_once_written() {
    within_10s(async {
        let (addr, seen) =
            grpc_server(vec![Answer::TrailersOnly(14, None), Answer::Message("hi")]).await;
        let (mut grpc, caught) = client(addr, policy()).await;
        let status = call(&mut grpc, "/echo.Echo/Put").await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unavailable);
        assert_eq!(seen.lock().unwrap().len(), 1);
        let history = caught.lock().unwrap()[0].clone().expect("history");
        assert_eq!(
            history.stop_reason(),
            Some(StopReason::NotRetryable(NoRetry::MaybeProcessed))
        );
    })
    .await;
}

#[tokio::test]
async fn refused_streams_and_goaway_are_resent_for_any_method() {
    within_10s(async {
        for refusal in [Step::RefusedStream, Step::GoAway] {
            // The second attempt gets a trailers-only NOT_FOUND: an answer.
            let up = Upstream::builder()
                .protocol(Protocol::Http2)
                .script([
                    refusal.clone(),
                    Reply::ok()
                        .header("content-type", "application/grpc")
                        .header("grpc-status", "5")
                        .into(),
                ])
                .start()
                .await
                .unwrap();
            let (mut grpc, _) = client(up.addr(), policy()).await;
            let status = call(&mut grpc, "/echo.Echo/Put").await.unwrap_err();
            assert_eq!(status.code(), tonic::Code::NotFound, "{refusal:?}");
            let requests = up.requests();
            assert_eq!(requests.len(), 2, "{refusal:?}");
            assert_eq!(requests[1].headers["grpc-previous-rpc-attempts"], "1");
            assert_eq!(up.processed_count(), 1);
        }
    })
    .await;
}

#[tokio::test]
async fn a_proxy_503_is_unavailable() {
    within_10s(async {
        let up = Upstream::builder()
            .protocol(Protocol::Http2)
            .script([
                Step::from(Reply::status(503)),
                Reply::ok()
                    .header("content-type", "application/grpc")
                    .header("grpc-status", "5")
                    .into(),
            ])
            .start()
            .await
            .unwrap();
        let (mut grpc, _) = client(up.addr(), policy()).await;
        let status = call(&mut grpc, "/echo.Echo/Get").await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::NotFound);
        assert_eq!(up.processed_count(), 2);
    })
    .await;
}

#[tokio::test]
async fn a_pushback_pauses_the_origin_for_every_call() {
    within_10s(async {
        let (addr, seen) = grpc_server(vec![Answer::TrailersOnly(14, Some("300"))]).await;
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let budget = BudgetLayer::new(
            BudgetPolicy::builder()
                .pause_spread(Duration::ZERO)
                .build()
                .unwrap(),
        );
        let svc: Svc = tower::util::BoxCloneService::new(
            ServiceBuilder::new()
                .layer(budget.clone())
                .layer(RetryLayer::new(policy()))
                .map_request(|req: Request<ReplayBody<tonic::body::Body>>| {
                    req.map(tonic::body::Body::new)
                })
                .service(channel),
        );
        let mut grpc = tonic::client::Grpc::new(svc);
        // Not idempotent: its UNAVAILABLE is the call's answer, and its pushback
        // pauses the origin (the budget layer reads it from the final answer)...
        let status = call(&mut grpc, "/echo.Echo/Put").await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unavailable);
        // Tonic leaves the origin to its channel: the request is path only.
        let head = Request::get("/echo.Echo/Get")
            .body(())
            .unwrap()
            .into_parts()
            .0;
        assert!(budget.account(&head).paused_until().is_some());
        // ...so the next call, to another method, waits for it.
        let res = call(&mut grpc, "/echo.Echo/Get").await.unwrap();
        assert_eq!(res.into_inner(), Bytes::from_static(b"done"));
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 2);
        let gap = seen[1].at - seen[0].at;
        assert!(gap >= Duration::from_millis(300), "{gap:?}");
        assert!(gap < Duration::from_millis(800), "{gap:?}");
    })
    .await;
}
