//! Middleware that stamps one idempotency key on each POST and PATCH call.
//!
//! A POST that times out after the server processed it cannot be re-sent safely:
//! the server would process it twice. With an idempotency key, a server that keeps
//! the keys it has seen answers a repeat with the first answer instead of acting
//! again (the IETF httpapi draft `draft-ietf-httpapi-idempotency-key-header`, and
//! Stripe-style APIs). [`IdempotencyKeyLayer`] stamps a fresh key on every call
//! that needs one, **once per call**: placed outside the retry layer, every attempt
//! (and every hedge) of the call carries the same key. It also marks the request
//! with [`policy::Keyed`](crate::policy::Keyed), so the retry
//! layer treats it like an idempotent request. The retry layer can stamp the keys
//! itself: [`RetryLayer::idempotency_key`](crate::RetryLayer::idempotency_key).
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

mod key;
mod layer;

use std::sync::Arc;
use std::task::{Context, Poll};

use http::header::{HeaderName, HeaderValue};
use http::Request;
use tower_service::Service;

pub use key::{new_key, new_key_string};
pub use layer::IdempotencyKeyLayer;

use crate::policy::{CallContext, MethodSet};

/// A key a caller gives for one call, put into its request's extensions: the layer
/// sends it instead of a fresh one (a key already in the headers wins over both).
///
/// # Examples
///
/// ```
/// use backstop::idempotency_key::CallKey;
/// use http::HeaderValue;
///
/// let mut req = http::Request::post("http://example.com/orders").body(()).unwrap();
/// req.extensions_mut()
///     .insert(CallKey(HeaderValue::from_static("order-7f3a")));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallKey(pub HeaderValue);

pub(crate) type Generator = Arc<dyn Fn() -> HeaderValue + Send + Sync>;

/// The layer's settings, shared by its services.
#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) header: HeaderName,
    pub(crate) methods: MethodSet,
    pub(crate) generator: Option<Generator>,
}

/// Stamps an idempotency key on each call that needs one. See the [module
/// docs](self).
#[derive(Clone)]
pub struct IdempotencyKey<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S> IdempotencyKey<S> {
    pub(crate) fn new(inner: S, config: Arc<Config>) -> Self {
        IdempotencyKey { inner, config }
    }

    crate::inner_accessors!();
}

impl<S> std::fmt::Debug for IdempotencyKey<S>
where
    S: std::fmt::Debug,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotencyKey")
            .field("inner", &self.inner)
            .field("header", &self.config.header)
            .field("methods", &self.config.methods)
            .finish()
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

    #[inline]
    fn call(&mut self, mut req: Request<B>) -> S::Future {
        if self.config.stamp(&mut req) {
            CallContext::of_mut(req.extensions_mut()).mark_keyed();
        }
        self.inner.call(req)
    }
}

impl Config {
    /// Stamps a key on `req` when its method gets one and it has none (the
    /// caller's [`CallKey`], else a fresh one); whether the call is keyed.
    #[inline]
    pub(crate) fn stamp<B>(&self, req: &mut Request<B>) -> bool {
        if !self.methods.contains(req.method()) {
            return false;
        }
        if !req.headers().contains_key(&self.header) {
            let key = match req.extensions_mut().remove::<CallKey>() {
                Some(CallKey(key)) => key,
                None => match &self.generator {
                    Some(generate) => generate(),
                    None => new_key(),
                },
            };
            req.headers_mut().insert(self.header.clone(), key);
        }
        true
    }
}
