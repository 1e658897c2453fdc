//! Middleware that records how far each attempt got onto the wire.
//!
//! A POST that never reached the server should be re-sent; one that the server may
//! have processed must not be. [`ProgressTracking`] wraps a hyper-util legacy
//! `Client` directly and fills in each attempt's
//! [`AttemptLog`](crate::policy::AttemptLog) record, which the retry
//! layer leaves in the extensions of every attempt whose safety depends on it (a
//! request that is neither idempotent nor keyed):
//!
//! - whether a connection was obtained: from hyper-util's connection capture,
//!   which the client fills in when it hands the request to a connection, before
//!   a byte is written;
//! - whether the write began: hyper-util does not report its first written byte,
//!   so once a connection was obtained the request counts as written;
//! - how many body bytes the transport took and whether it took all of them: from
//!   the replay body, which counts what each attempt's reader yields;
//! - whether a response head arrived.
//!
//! With the record, the ladder's last rung re-sends a POST or PATCH without a key
//! only when nothing of it was written: the attempt failed, or timed out, before
//! any connection took it (a slow connect, a wait for a pooled connection). Without
//! this layer, such a request is judged by its error's type: connect errors only.
//!
//! # Placement
//!
//! Directly around the hyper-util client, inside the retry layer:
//!
//! ```
//! use backstop::progress::ProgressTrackingLayer;
//! use backstop::{ReplayBody, RetryLayer, RetryPolicy};
//! use bytes::Bytes;
//! use http_body_util::Full;
//! use hyper_util::client::legacy::{connect::HttpConnector, Client};
//! use hyper_util::rt::TokioExecutor;
//! use tower::ServiceBuilder;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let transport: Client<HttpConnector, ReplayBody<Full<Bytes>>> =
//!     Client::builder(TokioExecutor::new()).build_http();
//! let client = ServiceBuilder::new()
//!     .layer(RetryLayer::new(RetryPolicy::default()))
//!     .layer(ProgressTrackingLayer::new())
//!     .service(transport);
//! # let _ = client;
//! # }
//! ```
//!
//! **It must wrap a hyper-util legacy `Client`.** The absence of a captured
//! connection is read as "nothing written", which is true only of a transport that
//! fills hyper-util's capture before writing. Another transport can report its own
//! progress by filling the [`AttemptLog`](crate::policy::AttemptLog)
//! record it finds in the request's extensions.
//!
//! Requests without a record (idempotent or keyed ones) pass straight through: the
//! layer costs them one extensions lookup.

mod future;
mod layer;

use std::task::{Context, Poll};

use http::Request;
use hyper_util::client::legacy::connect::capture_connection;
use tower_service::Service;

pub use future::ResponseFuture;
pub use layer::ProgressTrackingLayer;

/// The old name of [`ProgressTrackingLayer`].
#[deprecated(since = "0.1.0", note = "renamed `ProgressTrackingLayer`")]
pub type ProgressLayer = ProgressTrackingLayer;

use crate::policy::Given;

/// Records how far each attempt got onto the wire. See the [module docs](self).
#[derive(Clone, Debug)]
pub struct ProgressTracking<S> {
    inner: S,
}

impl<S> ProgressTracking<S> {
    /// Wraps a hyper-util legacy `Client`.
    pub fn new(inner: S) -> Self {
        ProgressTracking { inner }
    }

    crate::inner_accessors!();
}

/// A transport that fills hyper-util's connection capture
/// ([`capture_connection`]) when it hands a request to a connection, before it
/// writes a byte of it.
///
/// [`ProgressTracking`] reads the absence of a captured connection as proof that
/// nothing of an attempt was written, and the retry layer then re-sends even a
/// POST. So it only wraps a transport that keeps this promise: hyper-util's legacy
/// `Client` does. Implement it for a transport of your own only if it fills the
/// capture the same way (a wrapper that forwards to a hyper-util client keeps the
/// promise; one that may write before the client fills the capture does not).
///
/// # Examples
///
/// ```
/// use backstop::progress::CapturesConnection;
///
/// /// Forwards every request to a hyper-util client, unchanged.
/// #[derive(Clone)]
/// struct Traced<C>(C);
///
/// impl<C: CapturesConnection> CapturesConnection for Traced<C> {}
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not known to fill hyper-util's connection capture",
    label = "`ProgressTrackingLayer` must wrap the hyper-util client itself",
    note = "put `ProgressTrackingLayer` directly around the hyper-util `Client`, and other layers (tower-http's `TraceLayer`, a timeout) above it: they see each attempt there too",
    note = "a wrapper of your own that forwards each request to a hyper-util client can implement `backstop::progress::CapturesConnection`"
)]
pub trait CapturesConnection {}

impl<C, B> CapturesConnection for hyper_util::client::legacy::Client<C, B> {}

impl<S, B, RB> Service<Request<B>> for ProgressTracking<S>
where
    S: Service<Request<B>, Response = http::Response<RB>> + CapturesConnection,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    #[inline(always)]
    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        let tracking = Given::new(req.extensions())
            .attempt()
            .cloned()
            .map(|progress| {
                progress.mark_tracked();
                (progress, Some(capture_connection(&mut req)))
            });
        // Built in place: the inner future is written straight into ours.
        ResponseFuture {
            inner: self.inner.call(req),
            tracking,
        }
    }
}
