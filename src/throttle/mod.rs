//! Middleware that sheds calls to an origin that rejects them for overload, on the
//! client, before they reach the network: adaptive throttling (Google SRE book,
//! ch. 21 "Handling Overload").
//!
//! A retry budget bounds what retries add; a circuit breaker stops everything once
//! an origin looks dead. Between the two, an origin that is overloaded but alive
//! still gets every first attempt, and spends what capacity it has left on
//! refusing them. [`Throttle`] counts, per origin over a sliding window, the calls
//! made (**requests**) and those the origin did not reject for overload
//! (**accepts**), and sheds a new call locally with probability
//! `max(0, (requests − k · accepts) / (requests + 1))`, `k` = 2 by default: the
//! client keeps sending up to about twice what the origin accepts, and drops the
//! rest before the network. [`ThrottlePolicy`] says what a rejection is (429, 503,
//! gRPC `RESOURCE_EXHAUSTED` and `UNAVAILABLE`, connection refused, timeouts), the
//! defaults against failsafe-go's and the book's, and the order in which the
//! breaker, the throttle and the budget decide.
//!
//! A shed call ends at once with a [`backstop::Error`](crate::Error) whose
//! [`is_throttled()`](crate::Error::is_throttled) is true and whose
//! [`stop_reason()`](crate::Error::stop_reason) is
//! [`StopReason::Throttled`](crate::policy::StopReason::Throttled); its source is a
//! [`Throttled`] with the counts that decided. An observer is told a
//! [`CallRefused`](crate::observe::CallRefused) with
//! [`Refusal::Throttled`](crate::observe::Refusal::Throttled), and
//! `MetricsObserver` counts it in `backstop.throttle.rejections`; a `tracing`
//! debug event says so with the counts only.
//!
//! Off by default. The [`Backstop`](crate::Backstop) stack runs the same code
//! inside its retry layer's future
//! ([`BackstopBuilder::throttle`](crate::stack::BackstopBuilder::throttle));
//! [`ThrottleLayer`] is the throttle alone, for a stack composed by hand, outside
//! the retry layer:
//!
//! ```text
//! CircuitBreakerLayer → ThrottleLayer → BudgetLayer → RetryLayer → transport
//! ```
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use backstop::throttle::{ThrottleLayer, ThrottlePolicy};
//! use bytes::Bytes;
//! use http_body_util::Full;
//! use tower::{Service, ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! // An overloaded upstream: every answer is a 429.
//! let transport = tower::service_fn(|_req: http::Request<Full<Bytes>>| async {
//!     let mut res = http::Response::new(Full::<Bytes>::default());
//!     *res.status_mut() = http::StatusCode::TOO_MANY_REQUESTS;
//!     Ok::<_, std::io::Error>(res)
//! });
//! // Seeded, so that this example sheds the same calls every run.
//! let throttle = ThrottlePolicy::builder().seed(1).build()?;
//! let layer = ThrottleLayer::new(throttle);
//! let mut client = ServiceBuilder::new().layer(layer.clone()).service(transport);
//!
//! let get = || http::Request::get("http://upstream.test/").body(Full::default());
//! let (mut sent, mut shed) = (0, 0);
//! for _ in 0..100 {
//!     match client.ready().await?.call(get()?).await {
//!         Ok(res) => { assert_eq!(res.status(), 429); sent += 1 }
//!         Err(err) => { assert!(err.is_throttled()); shed += 1 }
//!     }
//! }
//! // Nothing is accepted: after the first rejection, nearly every call is shed.
//! assert!(sent < 10 && shed > 90, "{sent} sent, {shed} shed");
//! let head = http::Request::get("http://upstream.test/").body(())?.into_parts().0;
//! assert!(layer.probability(&head) > 0.95);
//! # Ok(()) }
//! ```

mod layer;

use std::fmt;
use std::sync::Arc;

pub use crate::admit::throttle::{ThrottlePolicy, ThrottlePolicyBuilder, Throttled};
pub use layer::ThrottleLayer;

use crate::admit::Admission;

/// Sheds calls to an origin that rejects them for overload. See the
/// [module docs](self).
#[derive(Clone)]
pub struct Throttle<S> {
    inner: S,
    admission: Arc<Admission>,
}

impl<S> Throttle<S> {
    /// Wraps `inner` with throttles of its own (not shared with any layer).
    pub fn new(inner: S, policy: ThrottlePolicy) -> Self {
        ThrottleLayer::new(policy).wrap(inner)
    }

    crate::inner_accessors!();
}

impl<S: fmt::Debug> fmt::Debug for Throttle<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let policy = self.admission.throttle();
        f.debug_struct("Throttle")
            .field("inner", &self.inner)
            .field("policy", &policy)
            .finish()
    }
}

// The throttle's part of admission never holds a call: the breaker's future.
crate::circuit_breaker::unheld_service!(Throttle);
