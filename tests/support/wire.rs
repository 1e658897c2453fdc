//! Clients over real loopback upstreams from `backstop::test_util`.

use std::future::Future;
use std::time::Duration;

use backstop::test_util::Protocol;
use backstop::{BoxError, ReplayBody};
use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;

pub const BOTH: [Protocol; 2] = [Protocol::Http1, Protocol::Http2];

/// The body type every wire test sends.
pub type Body = BoxBody<Bytes, BoxError>;

/// A hyper-util client declared for backstop's replay body.
pub type Transport = Client<HttpConnector, ReplayBody<Body>>;

pub fn transport(protocol: Protocol) -> Transport {
    client(protocol)
}

/// A hyper-util client speaking `protocol`, for any body.
pub fn client<B>(protocol: Protocol) -> Client<HttpConnector, B>
where
    B: http_body::Body + Send + 'static,
    B::Data: Send,
{
    let mut builder = Client::builder(TokioExecutor::new());
    if protocol == Protocol::Http2 {
        builder.http2_only(true);
    }
    builder.build_http()
}

/// A loopback upstream following `script`.
pub async fn upstream(
    protocol: Protocol,
    script: Vec<backstop::test_util::Step>,
) -> backstop::test_util::Upstream {
    backstop::test_util::Upstream::builder()
        .protocol(protocol)
        .script(script)
        .start()
        .await
        .expect("upstream starts")
}

/// The default policy with a backoff short enough for wire tests.
pub fn quick() -> backstop::RetryPolicy {
    backstop::RetryPolicy::builder()
        .backoff(Duration::from_millis(1), Duration::from_millis(5))
        .build()
        .expect("a valid policy")
}

/// Runs a test body with a deadline, so that nothing can hang the suite.
pub async fn within_10s<T>(body: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), body)
        .await
        .expect("test timed out")
}

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).map_err(|e| match e {}).boxed()
}

pub fn empty() -> Body {
    full(Bytes::new())
}

/// A body of unknown length fed chunk by chunk through the returned sender.
pub fn channel() -> (tokio::sync::mpsc::Sender<Bytes>, Body) {
    let (tx, body, _) = probed_channel();
    (tx, body)
}

/// Tells its watchers when it is dropped.
pub struct DropFlag(tokio::sync::watch::Sender<bool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.send_replace(true);
    }
}

/// [`channel`], and a watch that turns true once the body itself has been dropped.
pub fn probed_channel() -> (
    tokio::sync::mpsc::Sender<Bytes>,
    Body,
    tokio::sync::watch::Receiver<bool>,
) {
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
    let (flag, dropped) = tokio::sync::watch::channel(false);
    let guard = DropFlag(flag);
    let stream = futures_util::stream::unfold((rx, guard), |(mut rx, guard)| async move {
        rx.recv().await.map(|chunk| {
            (
                Ok::<_, BoxError>(http_body::Frame::data(chunk)),
                (rx, guard),
            )
        })
    });
    (tx, StreamBody::new(stream).boxed(), dropped)
}

/// What a [`FaultyConnector`] does with one connect.
#[derive(Clone, Copy, Debug)]
pub enum Connect {
    /// Connect normally.
    Ok,
    /// Fail at once as a refused connection.
    Refuse,
    /// Connect to a port on 127.0.0.1 where nothing listens: the kernel refuses it.
    Closed,
    /// Connect after this delay.
    Delay(Duration),
}

/// An `HttpConnector` whose connects follow a script (then connect normally): faults
/// that happen before any byte of a request is written.
#[derive(Clone)]
pub struct FaultyConnector {
    inner: HttpConnector,
    script: std::sync::Arc<std::sync::Mutex<std::collections::VecDeque<Connect>>>,
    decide: Option<std::sync::Arc<dyn Fn() -> Connect + Send + Sync>>,
}

impl FaultyConnector {
    pub fn new(script: impl IntoIterator<Item = Connect>) -> Self {
        let mut inner = HttpConnector::new();
        inner.set_nodelay(true);
        FaultyConnector {
            inner,
            script: std::sync::Arc::new(std::sync::Mutex::new(script.into_iter().collect())),
            decide: None,
        }
    }

    /// Decides each connect with `decide` once the script is used up.
    pub fn then(mut self, decide: impl Fn() -> Connect + Send + Sync + 'static) -> Self {
        self.decide = Some(std::sync::Arc::new(decide));
        self
    }
}

impl tower::Service<http::Uri> for FaultyConnector {
    type Response = <HttpConnector as tower::Service<http::Uri>>::Response;
    type Error = BoxError;
    type Future = std::pin::Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), BoxError>> {
        tower::Service::poll_ready(&mut self.inner, cx).map_err(Into::into)
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let next = self.script.lock().unwrap().pop_front();
        let fault = next.unwrap_or_else(|| self.decide.as_ref().map_or(Connect::Ok, |d| d()));
        let uri = match fault {
            Connect::Closed => closed_port(),
            _ => uri,
        };
        let connecting = tower::Service::call(&mut self.inner, uri);
        Box::pin(async move {
            match fault {
                Connect::Ok | Connect::Closed => {}
                Connect::Refuse => {
                    return Err(std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into())
                }
                Connect::Delay(d) => tokio::time::sleep(d).await,
            }
            connecting.await.map_err(Into::into)
        })
    }
}

/// The address of a port on 127.0.0.1 that was just free: nothing listens there.
fn closed_port() -> http::Uri {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    format!("http://127.0.0.1:{port}/").parse().expect("a uri")
}

/// A hyper-util client over a [`FaultyConnector`], declared for backstop's replay body.
pub fn faulty_transport(
    protocol: Protocol,
    connector: FaultyConnector,
    pooled: bool,
) -> Client<FaultyConnector, ReplayBody<Body>> {
    let mut builder = Client::builder(TokioExecutor::new());
    if protocol == Protocol::Http2 {
        builder.http2_only(true);
    }
    if !pooled {
        builder.pool_max_idle_per_host(0);
    }
    builder.build(connector)
}
