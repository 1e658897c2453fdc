//! Middleware that refuses calls to an origin that keeps failing, then probes it
//! back to health.
//!
//! Retries cure transient failures; they make a dead upstream worse. A circuit
//! breaker watches the outcomes of whole calls per origin and, once the origin
//! looks dead, refuses calls at once without touching the network, so callers fail
//! fast, the upstream gets room to recover, and nothing waits on timeouts to learn
//! what the breaker already knows.
//!
//! [`CircuitBreaker`] has three states per origin ([`State`]):
//!
//! - **`Closed`**: calls flow and their final outcomes are counted over a sliding
//!   window. It opens when the failure ratio reaches
//!   [`failure_ratio`](CircuitBreakerPolicyBuilder::failure_ratio) over at least
//!   [`min_calls`](CircuitBreakerPolicyBuilder::min_calls) calls, or after
//!   [`consecutive_failures`](CircuitBreakerPolicyBuilder::consecutive_failures) failed
//!   calls in a row.
//! - **`Open`**: every call is refused at once with a [`backstop::Error`](crate::Error)
//!   whose [`is_circuit_open()`](crate::Error::is_circuit_open) is true and whose
//!   [`next_probe_at()`](crate::Error::next_probe_at) says when the cooldown ends.
//!   The cooldown has jitter and doubles after each failed probe, up to a maximum.
//! - **`HalfOpen`**: after the cooldown, the next
//!   [`probes`](CircuitBreakerPolicyBuilder::probes) calls go through as probes and the
//!   others are refused. If every probe succeeds the breaker closes; if one fails
//!   it opens again. Probe slots are reserved atomically, and a probe whose future
//!   is dropped before it finishes gives its slot back. A probe has no time limit
//!   of its own: while it is in flight the other calls are refused, so give calls a
//!   bound ([`RetryPolicy`](crate::RetryPolicy)'s `timeout` or `attempt_timeout`,
//!   a [`Deadline`](crate::policy::Deadline), or the transport's own timeouts), or
//!   a probe sent to a black-holed connection keeps the origin refused until the
//!   connection gives up.
//!
//! The breaker sits **outside** the retry layer and records **one outcome per
//! call**: a call that needed three attempts to fail counts as one failure, and a
//! call that a retry cured counts as a success. A call that ended before it sent
//! anything (refused while its origin is paused, or out of time before its first
//! attempt) says nothing of the origin and counts neither way. It also leaves a
//! [`BreakerHandle`](crate::policy::BreakerHandle) in the request extensions; the
//! [`RetryLayer`](crate::RetryLayer) asks it before every retry and after every wait,
//! and stops with [`StopReason::CircuitOpen`](crate::policy::StopReason::CircuitOpen)
//! unless the breaker is closed, so a call in flight stops retrying as soon as
//! its origin's breaker opens, and a half-open probe is never retried.
//!
//! ```text
//! CircuitBreakerLayer → BudgetLayer → RetryLayer → transport
//! ```
//!
//! The service's error is [`backstop::Error`](crate::Error); an inner service's
//! error is wrapped (a `backstop::Error` from the retry layer is kept as it is).
//!
//! The [`Backstop`](crate::Backstop) stack runs this layer's work (the same code)
//! inside its retry layer's own future:
//! [`BackstopBuilder::circuit_breaker`](crate::stack::BackstopBuilder::circuit_breaker).
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use backstop::circuit_breaker::{CircuitBreakerPolicy, CircuitBreakerLayer};
//! use bytes::Bytes;
//! use http_body_util::Full;
//! use tower::{Service, ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! // An upstream that is down: every answer is a 503.
//! let transport = tower::service_fn(|_req: http::Request<Full<Bytes>>| async {
//!     let mut res = http::Response::new(Full::<Bytes>::default());
//!     *res.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
//!     Ok::<_, std::io::Error>(res)
//! });
//! let breaker = CircuitBreakerPolicy::builder()
//!     .consecutive_failures(3)
//!     .cooldown(Duration::from_secs(5))
//!     .build()?;
//! let mut client = ServiceBuilder::new()
//!     .layer(CircuitBreakerLayer::new(breaker))
//!     .service(transport);
//!
//! let get = || http::Request::get("http://upstream.test/").body(Full::default());
//! for _ in 0..3 {
//!     let res = client.ready().await?.call(get()?).await?;
//!     assert_eq!(res.status(), 503);
//! }
//! // Three failures in a row: the breaker is open and refuses at once.
//! let err = client.ready().await?.call(get()?).await.unwrap_err();
//! assert!(err.is_circuit_open());
//! let wait = err.next_probe_at().unwrap() - tokio::time::Instant::now();
//! assert!(wait >= Duration::from_secs(4) && wait <= Duration::from_secs(6));
//! # Ok(()) }
//! ```
//!
//! # Breakers
//!
//! Each origin (scheme and authority) has its own breaker by default, so one dead
//! upstream never gets a healthy one refused; [`Partition`](crate::Partition) sets
//! one global breaker or breakers by a key of yours. Clones of a
//! [`CircuitBreakerLayer`] and of its services share the breakers. A breaker's
//! state is one atomic word moved by compare-and-swap; while it is closed a call
//! costs one atomic load on the way in and two relaxed atomic additions on the way
//! out, and finds its origin's breaker under a read lock, without allocating. A
//! closed breaker whose last call did not fail is forgotten once unused for its
//! window; one that is open or whose last call failed, once unused for its window
//! and its longest cooldown. So a client meeting many origins (a crawler, a webhook
//! sender) does not grow without bound, and holds a healthy origin no longer than
//! its calls count;
//! [`CircuitBreakerLayer::origins`] counts the breakers held.
//!
//! # What differs from other breakers
//!
//! tower has no circuit breaker. Compared with Polly, Finagle, Envoy's outlier
//! detection and linkerd (see [`CircuitBreakerPolicy`] for the defaults against theirs):
//! the unit is a whole call after its retries rather than one request; a refusal
//! says when the next probe is due; the cooldown has jitter so that clients that
//! opened together do not probe together; a cancelled probe gives its slot back
//! instead of leaving the breaker half-open forever; and retries stop as soon as
//! the breaker opens, not only new calls.

mod future;
mod layer;

use std::sync::Arc;

pub use crate::admit::breaker::{CircuitBreakerPolicy, CircuitBreakerPolicyBuilder, CircuitOpen};
pub use crate::policy::circuit::State;
pub(crate) use future::unheld_service;
pub use future::ResponseFuture;
pub use layer::CircuitBreakerLayer;

/// The old name of [`CircuitBreakerPolicyBuilder`].
#[deprecated(since = "0.1.0", note = "renamed `CircuitBreakerPolicyBuilder`")]
pub type CircuitBreakerBuilder = CircuitBreakerPolicyBuilder;

/// The old name of [`CircuitBreaker`] (the service).
#[deprecated(since = "0.1.0", note = "renamed `CircuitBreaker`")]
pub type CircuitBreakerService<S> = CircuitBreaker<S>;

use crate::admit::Admission;

/// Refuses calls to an origin whose breaker is open and records one outcome per
/// call. See the [module docs](self).
pub struct CircuitBreaker<S> {
    inner: S,
    admission: Arc<Admission>,
}

impl<S> CircuitBreaker<S> {
    /// Wraps `inner` with breakers of its own (not shared with any layer).
    pub fn new(inner: S, config: CircuitBreakerPolicy) -> Self {
        CircuitBreaker::from_shared(inner, CircuitBreakerLayer::new(config).admission)
    }

    pub(crate) fn from_shared(inner: S, admission: Arc<Admission>) -> Self {
        CircuitBreaker { inner, admission }
    }

    crate::inner_accessors!();
}

impl<S: Clone> Clone for CircuitBreaker<S> {
    fn clone(&self) -> Self {
        CircuitBreaker {
            inner: self.inner.clone(),
            admission: self.admission.clone(),
        }
    }
}

impl<S: std::fmt::Debug> std::fmt::Debug for CircuitBreaker<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CircuitBreaker")
            .field("inner", &self.inner)
            .field("config", &self.admission.breaker())
            .finish()
    }
}

// The breaker's part of admission never holds a call.
future::unheld_service!(CircuitBreaker);
