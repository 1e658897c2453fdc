//! Clients and requests for the reqwest tests.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use backstop::reqwest::BackstopMiddleware;
use backstop::test_util::{Protocol, Step, Upstream};
use backstop::RetryPolicy;
use bytes::Bytes;
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};

/// A reqwest client speaking `protocol` (h2c with prior knowledge for HTTP/2), with
/// reqwest's own retry off so every attempt is backstop's.
pub fn reqwest_client(protocol: Protocol) -> reqwest::Client {
    builder(protocol).build().expect("a reqwest client")
}

pub fn builder(protocol: Protocol) -> reqwest::ClientBuilder {
    let builder = backstop::reqwest::client_builder().no_proxy();
    match protocol {
        Protocol::Http2 => builder.http2_prior_knowledge(),
        _ => builder.http1_only(),
    }
}

/// A reqwest client with `middleware`.
pub fn client(protocol: Protocol, middleware: BackstopMiddleware) -> ClientWithMiddleware {
    ClientBuilder::new(reqwest_client(protocol))
        .with(middleware)
        .build()
}

/// The default policy with a backoff short enough for wire tests.
pub fn quick() -> RetryPolicy {
    RetryPolicy::builder()
        .backoff(Duration::from_millis(1), Duration::from_millis(5))
        .build()
        .expect("a valid policy")
}

/// A loopback upstream following `script`, then `200 OK`.
pub async fn upstream(protocol: Protocol, script: Vec<Step>) -> Upstream {
    Upstream::builder()
        .protocol(protocol)
        .script(script)
        .start()
        .await
        .expect("upstream starts")
}

/// The upstream's URL for `path`, as a string reqwest takes.
pub fn url(up: &Upstream, path: &str) -> String {
    up.uri(path).to_string()
}

/// A streamed body (no known length, not cloneable by reqwest) of these chunks.
pub fn streamed(chunks: &[&'static [u8]]) -> reqwest::Body {
    let frames: Vec<Result<http_body::Frame<Bytes>, std::io::Error>> = chunks
        .iter()
        .map(|c| Ok(http_body::Frame::data(Bytes::from_static(c))))
        .collect();
    reqwest::Body::wrap(http_body_util::StreamBody::new(futures_util::stream::iter(
        frames,
    )))
}

/// A resolver that sends the first connection to 127.0.0.2 (nothing listens there:
/// the connection is refused) and every later one to 127.0.0.1.
#[derive(Clone, Default)]
pub struct RefuseFirst {
    pub resolved: Arc<AtomicUsize>,
}

impl reqwest::dns::Resolve for RefuseFirst {
    fn resolve(&self, _name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let n = self.resolved.fetch_add(1, Ordering::SeqCst);
        let ip = if n == 0 {
            Ipv4Addr::new(127, 0, 0, 2)
        } else {
            Ipv4Addr::LOCALHOST
        };
        // Port 0: the connector puts the URL's port in.
        let addrs: reqwest::dns::Addrs = Box::new(std::iter::once(SocketAddr::from((ip, 0))));
        Box::pin(async move { Ok(addrs) })
    }
}
