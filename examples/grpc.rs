//! gRPC through backstop: a tonic client whose calls go through the retry layer
//! with gRPC's rules, against a local HTTP/2 server that is briefly `UNAVAILABLE`.
//!
//! ```text
//! cargo run --example grpc --features grpc
//! ```
//!
//! The server answers the first call with a trailers-only `UNAVAILABLE` and a
//! `grpc-retry-pushback-ms: 200`; the retry layer waits exactly 200 ms and sends
//! the call again, with `grpc-previous-rpc-attempts: 1` and its `grpc-timeout`
//! cut to the time left before the call's deadline. A method not listed as
//! idempotent is not re-sent once written.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use backstop::grpc::{self, Code};
use backstop::{ReplayBody, RetryLayer, RetryPolicy};
use bytes::{Buf, BufMut, Bytes};
use http::uri::PathAndQuery;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::Status;
use tower::ServiceBuilder;

/// Messages as raw bytes: a codec by hand, so the example needs no protoc.
#[derive(Clone, Copy, Default)]
struct Raw;

impl Codec for Raw {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = Raw;
    type Decoder = Raw;
    fn encoder(&mut self) -> Raw {
        Raw
    }
    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl Encoder for Raw {
    type Item = Bytes;
    type Error = Status;
    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = Bytes;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// A server whose every odd call is `UNAVAILABLE` (trailers-only, with pushback) and
/// every even one answers its message back.
async fn server() -> std::io::Result<(SocketAddr, Arc<AtomicUsize>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let counter = counter.clone();
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let n = counter.fetch_add(1, Ordering::SeqCst);
                async move {
                    let attempt = req.headers().get("grpc-previous-rpc-attempts").cloned();
                    let timeout = req.headers().get("grpc-timeout").cloned();
                    println!(
                        "  server: {} (previous attempts {attempt:?}, grpc-timeout {timeout:?})",
                        req.uri().path()
                    );
                    let message = req
                        .into_body()
                        .collect()
                        .await
                        .map(|b| b.to_bytes())
                        .unwrap_or_default();
                    let res = Response::builder().header("content-type", "application/grpc");
                    let body: BoxBody<Bytes, Infallible> = if n.is_multiple_of(2) {
                        let res = res
                            .header("grpc-status", "14")
                            .header("grpc-retry-pushback-ms", "200");
                        return Ok::<_, Infallible>(
                            res.body(http_body_util::Empty::new().boxed()).unwrap(),
                        );
                    } else {
                        let mut trailers = HeaderMap::new();
                        trailers.insert("grpc-status", HeaderValue::from_static("0"));
                        // The request's gRPC frame, echoed as the response's.
                        let frames = [Frame::data(message), Frame::trailers(trailers)];
                        StreamBody::new(futures_util::stream::iter(frames.map(Ok))).boxed()
                    };
                    Ok(res.body(body).unwrap())
                }
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tcp), service)
                    .await;
            });
        }
    });
    Ok((addr, calls))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let (addr, calls) = server().await?;

    // gRPC's rules: UNAVAILABLE is retryable, for the methods that are idempotent.
    let rules = grpc::rules()
        .retryable_codes([Code::Unavailable])
        .idempotent("/demo.Echo/Get")
        .build()?;
    let policy = RetryPolicy::builder()
        .rules(rules)
        .timeout(Duration::from_secs(2))
        .build()?;

    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
        .connect()
        .await?;
    let svc = ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .map_request(|req: Request<ReplayBody<tonic::body::Body>>| req.map(tonic::body::Body::new))
        .service(channel);
    let mut client = tonic::client::Grpc::new(svc);

    for path in ["/demo.Echo/Get", "/demo.Echo/Put"] {
        println!("call {path}");
        client.ready().await?;
        let before = calls.load(Ordering::SeqCst);
        let started = std::time::Instant::now();
        let req = tonic::Request::new(Bytes::from_static(b"hello"));
        let result = client
            .unary(req, PathAndQuery::from_static(path), Raw)
            .await;
        let sent = calls.load(Ordering::SeqCst) - before;
        match result {
            Ok(res) => println!(
                "  answered {:?} after {sent} attempts in {:?}",
                res.into_inner(),
                started.elapsed()
            ),
            Err(status) => println!(
                "  {:?} after {sent} attempt(s): not idempotent, not re-sent",
                status.code()
            ),
        }
    }
    Ok(())
}
