//! What the examples share: a loopback upstream that serves a handler, and a
//! hyper-util client. Each example loads it with `mod common;`.

#![allow(dead_code)]

pub mod chart;

use std::future::Future;
use std::net::SocketAddr;

use backstop::BoxError;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

/// The streams an HTTP/2 upstream takes at once on one connection: every one a
/// client opens in the examples. (hyper's default, 200, would hold the rest back
/// in the client, a queue the upstream never sees.)
const MAX_STREAMS: u32 = 100_000;

/// Serves `handler` on a fresh port of 127.0.0.1, over HTTP/2 (cleartext) when
/// `h2`, else HTTP/1.1, with `TCP_NODELAY`; the address it listens on.
pub async fn serve<F, Fut, E>(h2: bool, handler: F) -> std::io::Result<SocketAddr>
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<Response<Full<Bytes>>, E>> + Send + 'static,
    E: Into<BoxError>,
{
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            let handler = handler.clone();
            tokio::spawn(async move {
                let io = TokioIo::new(stream);
                let service = service_fn(handler);
                let _ = if h2 {
                    http2::Builder::new(TokioExecutor::new())
                        .max_concurrent_streams(MAX_STREAMS)
                        .serve_connection(io, service)
                        .await
                } else {
                    http1::Builder::new().serve_connection(io, service).await
                };
            });
        }
    });
    Ok(addr)
}

/// A hyper-util client over HTTP/1.1 (or HTTP/2 when `h2`), with `TCP_NODELAY`.
pub fn client<B>(h2: bool) -> Client<HttpConnector, B>
where
    B: http_body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .http2_only(h2)
        .build(connector)
}

/// Points a request a gateway received at `upstream` (same path and query), for
/// its upstream client; `false` when its path cannot make a URI.
pub fn to_upstream<B>(req: &mut Request<B>, upstream: SocketAddr) -> bool {
    let path = req
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let uri = http::Uri::builder()
        .scheme("http")
        .authority(upstream.to_string())
        .path_and_query(path)
        .build();
    let Ok(uri) = uri else {
        return false;
    };
    *req.uri_mut() = uri;
    req.headers_mut().remove(http::header::HOST);
    true
}
