//! Middleware that makes a reqwest client's retries safe and worthwhile: backstop
//! as a [`reqwest_middleware`] middleware, and reqwest's native retry configured
//! from a backstop policy.
//!
//! [`BackstopMiddleware`] runs one [`Backstop`](crate::Backstop) stack for each
//! call (admission: the idempotency key, the circuit breaker and the budget; then
//! retry and hedge) over a service that sends each attempt down the rest of the
//! middleware chain. There is one attempt loop, one budget, one breaker and one
//! history, configured with the same [`RetryPolicy`](crate::RetryPolicy),
//! [`BudgetPolicy`](crate::BudgetPolicy),
//! [`CircuitBreakerPolicy`](crate::CircuitBreakerPolicy),
//! [`HedgePolicy`](crate::HedgePolicy) and
//! [`IdempotencyKeyLayer`](crate::IdempotencyKeyLayer) as a tower stack.
//!
//! Build the reqwest client under it with [`client_builder`] (or the whole client
//! with [`BackstopMiddleware::into_client`]): reqwest 0.13 re-sends some failures
//! by itself, below every middleware, which would multiply backstop's attempts
//! unseen; that builder turns reqwest's own retry off.
//!
//! # Examples
//!
//! ```no_run
//! use backstop::reqwest::{BackstopMiddleware, ErrorExt};
//! use backstop::policy::History;
//! use backstop::{BudgetPolicy, CircuitBreakerPolicy, RetryPolicy};
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! // reqwest's own retry off: every attempt is backstop's.
//! let reqwest = backstop::reqwest::client_builder().build()?;
//! let client = reqwest_middleware::ClientBuilder::new(reqwest)
//!     .with(
//!         BackstopMiddleware::new(RetryPolicy::default())
//!             .with_budget(BudgetPolicy::default())
//!             .with_circuit_breaker(CircuitBreakerPolicy::default())
//!             .with_idempotency_keys(),
//!     )
//!     .build();
//!
//! match client.get("http://127.0.0.1:8080/orders").send().await {
//!     Ok(res) => {
//!         // The response reqwest would give, with the history after a retry.
//!         println!("{} from {}", res.status(), res.url());
//!         if let Some(history) = res.extensions().get::<History>() {
//!             println!("{history}");
//!         }
//!     }
//!     Err(err) => {
//!         // reqwest's own predicates on the last attempt's error...
//!         let connect = err.reqwest().is_some_and(reqwest::Error::is_connect);
//!         // ... and backstop's history, stop reason and verdict.
//!         if let Some(failed) = err.backstop() {
//!             println!("{failed} (connect: {connect}, retryable: {})", failed.is_retryable());
//!         }
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! # Requests and responses
//!
//! - **Bodies.** A buffered body (bytes, a string, JSON) is re-sent whatever its
//!   size: it is in memory already, and keeping it costs nothing. Each attempt
//!   hands it to reqwest as a buffered body again, so reqwest still follows a 307
//!   or 308 with it. A streamed body
//!   (`Body::wrap_stream`, `Body::wrap`) goes through backstop's
//!   [`ReplayBody`](crate::ReplayBody): the first attempt streams straight through
//!   while its chunks are kept up to the policy's replay cap, and a retry replays
//!   them, so a streamed request is re-sent without the "request is not cloneable"
//!   refusal. A stream an attempt read past the cap is not sent again (one that was
//!   not read, or read no further than the cap, is); the stop reason says why
//!   ([`StopReason::NotReplayable`](crate::policy::StopReason)).
//! - **Responses** are the ones reqwest gives: URL (after redirects), status,
//!   headers, version and extensions intact, with the
//!   [`History`](crate::policy::History) in the extensions after a retry.
//! - **Errors** come back as `reqwest_middleware::Error::Middleware` holding one
//!   [`backstop::Error`](crate::Error), whose source is the last attempt's
//!   `reqwest::Error` (not a second `reqwest_middleware::Error`). [`ErrorExt`]
//!   reaches both: `err.backstop()` for the history, the stop reason and the
//!   verdict (`is_retryable`, `retry_after`, `kind`), `err.reqwest()` for
//!   reqwest's predicates (`is_timeout()`, `is_connect()`). The reqwest error is
//!   kept without its URL (`reqwest::Error::without_url`): reqwest prints the URL,
//!   path and query included, in its `Display` and `Debug`; nothing along the
//!   error's chain shows a path, query, user information, header value or body.
//!   reqwest-middleware carries a middleware's error in an `anyhow::Error`, which
//!   captures a backtrace when it is made if library backtraces are on
//!   (`RUST_BACKTRACE=1` without `RUST_LIB_BACKTRACE=0`): one per failed call,
//!   never per attempt, and none through the tower stack.
//! - **Per call**, a [`RetryPolicy`](crate::RetryPolicy),
//!   [`Deadline`](crate::policy::Deadline), [`OneShot`](crate::OneShot) or
//!   [`Keyed`](crate::policy::Keyed) given with
//!   `reqwest_middleware::RequestBuilder::with_extension` overrides the
//!   middleware's for that call. Middlewares after this one see each attempt, with a
//!   copy of the chain's extensions; the copy of the attempt that answered is
//!   what the caller's extensions hold afterwards.
//!
//! - **reqwest's own retry.** A reqwest 0.13 client re-sends protocol NACKs (an
//!   HTTP/2 `REFUSED_STREAM` or graceful `GOAWAY`, twice more per request) by
//!   itself, below the middleware, where backstop's attempt count, budget and
//!   history do not see them. [`client_builder`] starts from a builder with it off
//!   (`.retry(reqwest::retry::never())`), so every attempt is backstop's.
//!
//! # Write safety without a connection to look at
//!
//! reqwest hides its connections, so backstop cannot record how far an attempt got
//! onto the wire. A POST or PATCH without an idempotency key is therefore judged by
//! its error's type alone ([`policy::classify_error`](crate::policy::classify_error)
//! reads `reqwest::Error`'s `is_connect()` and `is_timeout()`): it is re-sent only
//! after a connect-phase failure (refused, reset or timed out while connecting) or
//! a not-processed signal (425, HTTP/2 `REFUSED_STREAM` or `GOAWAY`). A reset or a
//! timeout after the connection was made may have reached the server, so it is not
//! re-sent. Give such requests a key ([`with_idempotency_keys`](BackstopMiddleware::with_idempotency_keys))
//! to make them retryable.
//!
//! Where the recorded progress matters (a POST that failed on a pooled connection
//! before a byte was written can then be re-sent), use the same stack as a tower
//! service over hyper-util's client, with
//! [`ProgressTrackingLayer`](crate::ProgressTrackingLayer) around the client:
//!
//! ```no_run
//! use backstop::{Backstop, ProgressTrackingLayer, ReplayBody, RetryPolicy};
//! use bytes::Bytes;
//! use http_body_util::Full;
//! use hyper_util::client::legacy::{connect::HttpConnector, Client};
//! use hyper_util::rt::TokioExecutor;
//! use tower::ServiceBuilder;
//!
//! # fn main() -> Result<(), backstop::policy::InvalidConfig> {
//! let transport: Client<HttpConnector, ReplayBody<Full<Bytes>>> =
//!     Client::builder(TokioExecutor::new()).build_http();
//! let client = ServiceBuilder::new()
//!     .layer(Backstop::builder().retry(RetryPolicy::default()).build()?)
//!     .layer(ProgressTrackingLayer::new())
//!     .service(transport);
//! # let _ = client;
//! # Ok(()) }
//! ```
//!
//! # Delegated mode
//!
//! [`native_retry`] builds reqwest 0.13's own `reqwest::retry` policy from a
//! [`RetryPolicy`](crate::RetryPolicy): backstop's ladder as its classifier, the
//! attempts and the host scope translated. The attempts then happen inside reqwest,
//! below the seam: no waits, no write progress, no deadline, no history (see its
//! docs for the whole list).
//!
//! # What differs from reqwest-retry
//!
//! reqwest-retry re-sends any request after a reset, a POST included (a possible
//! duplicate), does not read `Retry-After`, refuses streamed bodies, and has no
//! budget, breaker or hedging. `examples/reqwest.rs` runs the same faults through
//! both and counts the duplicates.

mod client;
mod delegated;
mod middleware;
mod send;

pub use client::client_builder;
pub use delegated::native_retry;
pub use middleware::BackstopMiddleware;

/// Reaches the two errors inside a failed call: backstop's (history, stop reason,
/// verdict) and the last attempt's `reqwest::Error` (reqwest's predicates).
///
/// Implemented for `reqwest_middleware::Error` and for [`backstop::Error`](crate::Error).
///
/// # Examples
///
/// ```
/// use backstop::reqwest::ErrorExt;
///
/// fn describe(err: &reqwest_middleware::Error) -> String {
///     let timeout = err.reqwest().is_some_and(reqwest::Error::is_timeout);
///     match err.backstop() {
///         Some(e) => format!("{e}; timeout: {timeout}; stop: {:?}", e.stop_reason()),
///         None => format!("not from backstop; timeout: {timeout}"),
///     }
/// }
/// # let _ = describe;
/// ```
pub trait ErrorExt {
    /// backstop's error: the history, the stop reason and the verdict; `None` when
    /// the error did not come through a backstop middleware.
    fn backstop(&self) -> Option<&crate::Error>;

    /// The reqwest error the last attempt failed with, when it failed with one
    /// (not when a gate refused the call, or a failed answer ended it), without its
    /// URL (`url()` is `None`): the request's URL is the caller's own.
    fn reqwest(&self) -> Option<&reqwest::Error>;
}

impl ErrorExt for reqwest_middleware::Error {
    fn backstop(&self) -> Option<&crate::Error> {
        match self {
            reqwest_middleware::Error::Middleware(e) => e.downcast_ref::<crate::Error>(),
            reqwest_middleware::Error::Reqwest(_) => None,
        }
    }

    fn reqwest(&self) -> Option<&reqwest::Error> {
        match self {
            reqwest_middleware::Error::Reqwest(e) => Some(e),
            reqwest_middleware::Error::Middleware(e) => match e.downcast_ref::<crate::Error>() {
                Some(e) => e.reqwest(),
                None => crate::policy::chain(e.as_ref()).find_map(|e| e.downcast_ref()),
            },
        }
    }
}

impl ErrorExt for crate::Error {
    fn backstop(&self) -> Option<&crate::Error> {
        Some(self)
    }

    fn reqwest(&self) -> Option<&reqwest::Error> {
        crate::policy::chain(self).find_map(|e| e.downcast_ref())
    }
}
