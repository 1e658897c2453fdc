//! Middleware that stamps one idempotency key on each POST and PATCH call.
//!
//! A POST that times out after the server processed it cannot be re-sent safely:
//! the server would process it twice. With an idempotency key, a server that keeps
//! the keys it has seen answers a repeat with the first answer instead of acting
//! again (the IETF httpapi draft `draft-ietf-httpapi-idempotency-key-header`, and
//! Stripe-style APIs). [`IdempotencyKeyLayer`] stamps a fresh key on every call
//! that needs one, **once per call**: placed outside the retry layer, every attempt
//! (and every hedge) of the call carries the same key. It also marks the call keyed
//! in its [`CallContext`](crate::policy::CallContext), so the retry and hedge layers
//! treat it like an idempotent request. The [`Backstop`](crate::Backstop)
//! stack stamps keys with the same code:
//! [`BackstopBuilder::idempotency_key`](crate::stack::BackstopBuilder::idempotency_key).
//!
//! # When to use keys
//!
//! Only against a server that honours them. The server must store each key with
//! the outcome of its first request for as long as clients may retry (a day is
//! common), answer a repeat with that stored outcome, answer `409 Conflict` while
//! the first request is still being processed, and `422` when a key is reused with
//! another payload. Against a server that ignores the header, a key changes
//! nothing on the server, and a retry of a processed POST still acts twice: leave
//! the layer out and let the retry layer refuse such re-sends.
//!
//! # Examples
//!
//! ```
//! use backstop::idempotency_key::IdempotencyKeyLayer;
//! use backstop::{ReplayBody, RetryLayer, RetryPolicy};
//! use bytes::Bytes;
//! use http_body_util::Full;
//! use tower::{Service, ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), backstop::Error> {
//! let transport = tower::service_fn(|req: http::Request<ReplayBody<Full<Bytes>>>| async move {
//!     // Every attempt of the call carries the same key.
//!     assert_eq!(req.headers()["idempotency-key"].len(), 36);
//!     Ok::<_, std::io::Error>(http::Response::new(Full::<Bytes>::default()))
//! });
//! let mut client = ServiceBuilder::new()
//!     .layer(IdempotencyKeyLayer::new())
//!     .layer(RetryLayer::new(RetryPolicy::default()))
//!     .service(transport);
//!
//! let req = http::Request::post("http://example.com/charges")
//!     .body(Full::new(Bytes::from_static(b"amount=42")))
//!     .unwrap();
//! client.ready().await?.call(req).await?;
//! # Ok(())
//! # }
//! ```

mod layer;

use std::sync::Arc;
use std::task::{Context, Poll};

use http::Request;
use tower_service::Service;

pub use crate::admit::key::{new_key, new_key_string, CallKey};
pub use layer::IdempotencyKeyLayer;

/// The old name of [`IdempotencyKey`].
#[deprecated(since = "0.1.0", note = "renamed `IdempotencyKey`")]
pub type IdempotencyKeys<S> = IdempotencyKey<S>;

use crate::admit::Admission;

/// Stamps an idempotency key on each call that needs one. See the [module
/// docs](self).
#[derive(Clone)]
pub struct IdempotencyKey<S> {
    inner: S,
    admission: Arc<Admission>,
}

impl<S> IdempotencyKey<S> {
    pub(crate) fn new(inner: S, admission: Arc<Admission>) -> Self {
        IdempotencyKey { inner, admission }
    }

    crate::inner_accessors!();
}

impl<S> std::fmt::Debug for IdempotencyKey<S>
where
    S: std::fmt::Debug,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("IdempotencyKey");
        d.field("inner", &self.inner);
        if let Some(key) = self.admission.key() {
            d.field("header", &key.header)
                .field("methods", &key.methods);
        }
        d.finish()
    }
}

impl<S, B> Service<Request<B>> for IdempotencyKey<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    // Written into the caller, as the other front-ends' calls are, so the inner
    // future is built where it stays rather than copied out of this layer.
    #[inline(always)]
    fn call(&mut self, mut req: Request<B>) -> S::Future {
        // The key's part of admission lets every call go: it stamps and marks.
        self.admission.stamp(&mut req);
        self.inner.call(req)
    }
}
