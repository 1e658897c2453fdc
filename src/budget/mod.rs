//! Middleware that limits retries to a share of first attempts, per origin.
//!
//! A client that retries every failure sends up to `max_attempts` times its normal
//! load to an upstream that is already failing, and keeps it down. With a retry
//! budget the retries (and hedges) of the last window may add at most a ratio of
//! the first attempts (20 % by default) plus a small floor, so a dead upstream sees
//! about 1.2× the normal load, while isolated failures are still retried.
//!
//! [`Budget`] counts every call it passes as one first attempt in the
//! account of the call's origin, and leaves the account's
//! [`BudgetHandle`](crate::policy::BudgetHandle) in the request extensions. The
//! [`RetryLayer`](crate::RetryLayer) inside withdraws one retry from it before each
//! retry (and a hedge layer before each hedge); when the account is empty the call
//! stops with [`StopReason::Budget`](crate::policy::StopReason::Budget) and returns
//! its last outcome. The layer changes neither the request nor the response; its
//! error is a [`backstop::Error`](crate::Error) that keeps the inner error as its
//! source.
//!
//! Put it outside the retry layer (and inside the circuit breaker):
//!
//! ```text
//! CircuitBreakerLayer → BudgetLayer → RetryLayer → transport
//! ```
//!
//! The [`Backstop`](crate::Backstop) stack runs this layer's work (the same code)
//! inside its retry layer's own future:
//! [`BackstopBuilder::budget`](crate::stack::BackstopBuilder::budget).
//!
//! # Examples
//!
//! ```
//! use backstop::budget::{BudgetLayer, BudgetPolicy};
//! use backstop::policy::{History, StopReason};
//! use backstop::{ReplayBody, RetryLayer, RetryPolicy};
//! use bytes::Bytes;
//! use http_body_util::Full;
//! use tower::{Service, ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! // An upstream that is down: every answer is a 503.
//! let transport = tower::service_fn(|_req: http::Request<ReplayBody<Full<Bytes>>>| async {
//!     let mut res = http::Response::new(Full::<Bytes>::default());
//!     *res.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
//!     Ok::<_, std::io::Error>(res)
//! });
//!
//! // One retry per two first attempts, no floor.
//! let budget = BudgetPolicy::builder().ratio(0.5).min_per_second(0.0).build()?;
//! let mut client = ServiceBuilder::new()
//!     .layer(BudgetLayer::new(budget))
//!     .layer(RetryLayer::new(RetryPolicy::default()))
//!     .service(transport);
//!
//! let get = || http::Request::get("http://upstream.test/").body(Full::default());
//! // The first call's deposit is half a retry: not enough for one.
//! let res = client.ready().await?.call(get()?).await?;
//! let history = res.extensions().get::<History>().unwrap();
//! assert_eq!((history.len(), history.stop_reason()), (1, Some(StopReason::Budget)));
//! // The second call's completes one: it retries once, then the budget stops it.
//! let res = client.ready().await?.call(get()?).await?;
//! let history = res.extensions().get::<History>().unwrap();
//! assert_eq!((history.len(), history.stop_reason()), (2, Some(StopReason::Budget)));
//! # Ok(()) }
//! ```
//!
//! # The origin pause
//!
//! A 429 or 503 with a wait hint (`retry-after-ms`, or `Retry-After` as seconds
//! or a date) says the origin is overloaded or rate-limiting, not only for the
//! call that received it. The hint pauses the origin's account until it ends
//! (capped at [`BudgetPolicy::max_pause`], never past what the server said), and
//! while it is paused no attempt is sent to the origin: a call's first attempt is
//! held, the retry layer holds each retry (it asks the same account through the
//! [`BudgetHandle`](crate::policy::BudgetHandle) before every attempt), a hedge
//! layer sends no hedge. A call's deadline is its
//! [`Deadline`](crate::policy::Deadline), or its retry policy's total
//! [`timeout`](crate::retry::RetryPolicyBuilder::timeout) from its date, whichever is
//! earlier: above a [`RetryLayer`](crate::RetryLayer), [`Budget`] hands the hold of
//! a call's first attempt down to it (in the call's extensions), so the retry layer
//! holds the call within its own policy's timeout, exactly as the
//! [`Backstop`](crate::Backstop) stack does; over a transport, [`Budget`] holds
//! the call itself, within its `Deadline`. (Each [`Budget`] service, with its
//! clones, learns which from its first call: the call carries a note that a retry
//! layer beneath takes. A hold it hands down that nobody has taken when its inner
//! service's `call` returns (a router that sent the call elsewhere, or a layer that
//! calls the retry layer later, such as tower's `Buffer`) is held by the budget
//! layer itself, bounded by the `Deadline` alone: its inner service was called, and
//! its future is polled once the hold is over, or as soon as a retry layer beneath
//! takes the hold after all (which then holds, refuses or counts the call as the
//! stack does). A transport reached through a router that sends as its `call` runs,
//! rather than when its future is polled, would send it during the pause.)
//! A call whose deadline leaves room for the rest of the
//! pause plus [`BudgetPolicy::pause_min_attempt_time`] waits and then goes;
//! otherwise it fails at once with an error that says so
//! ([`Error::is_paused`](crate::Error::is_paused)) and when the pause ends
//! ([`Error::retry_after`](crate::Error::retry_after)). [`PauseMode`] chooses
//! waiting (the default), failing fast, or no pause at all. Calls that waited go
//! at the pause's end plus a uniform share of [`BudgetPolicy::pause_spread`]
//! (200 ms by default), so the origin meets a ramp rather than a burst; a retry
//! waiting for the same hint goes when the pause ends. A pause holds one account
//! only: other origins never wait for it.
//!
//! The budget layer emits `tracing` events at debug level when an origin is
//! paused ("origin paused", "origin pause extended"), when a call first finds
//! the pause over ("origin resumed"), and when a call waits for it ("call waits
//! for origin pause") or is refused ("call refused: origin paused"); the retry
//! layer when a retry waits for it ("retry waits for origin pause") or stops on
//! it ("retry skipped", `gate="paused"`). Their fields are durations only, never
//! the origin.
//!
//! ```
//! use std::time::Duration;
//! use backstop::budget::{BudgetLayer, BudgetPolicy};
//! use backstop::policy::Deadline;
//! use backstop::{ReplayBody, RetryLayer, RetryPolicy};
//! use bytes::Bytes;
//! use http_body_util::Full;
//! use tokio::time::Instant;
//! use tower::{Service, ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! // An upstream that rate-limits the first request: 429, come back in 2 s.
//! let first = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
//! let transport = tower::service_fn(move |_req: http::Request<ReplayBody<Full<Bytes>>>| {
//!     let mut res = http::Response::new(Full::<Bytes>::default());
//!     if first.swap(false, std::sync::atomic::Ordering::Relaxed) {
//!         *res.status_mut() = http::StatusCode::TOO_MANY_REQUESTS;
//!         res.headers_mut().insert("retry-after", http::HeaderValue::from_static("2"));
//!     }
//!     async move { Ok::<_, std::io::Error>(res) }
//! });
//! let mut client = ServiceBuilder::new()
//!     .layer(BudgetLayer::new(BudgetPolicy::default()))
//!     .layer(RetryLayer::new(RetryPolicy::none()))
//!     .service(transport);
//! let get = || http::Request::get("http://upstream.test/").body(Full::default());
//!
//! let start = Instant::now();
//! let res = client.ready().await?.call(get()?).await?;
//! assert_eq!(res.status(), http::StatusCode::TOO_MANY_REQUESTS);
//!
//! // A call whose deadline ends inside the pause fails at once, sending nothing.
//! let mut req = get()?;
//! req.extensions_mut().insert(Deadline::after(Duration::from_secs(1)));
//! let err = client.ready().await?.call(req).await.unwrap_err();
//! assert!(err.is_paused() && err.is_retryable());
//! assert_eq!(err.retry_after(), Some(Duration::from_secs(2)));
//!
//! // A call that can wait waits for the pause, then goes.
//! let res = client.ready().await?.call(get()?).await?;
//! assert_eq!(res.status(), http::StatusCode::OK);
//! assert!(start.elapsed() >= Duration::from_secs(2));
//! # Ok(()) }
//! ```
//!
//! # Accounts
//!
//! Each origin (scheme and authority) has its own account by default;
//! [`Partition`](crate::Partition) sets one global account or accounts by a key of
//! yours. Clones of a [`BudgetLayer`] and of its services share the accounts. A
//! call finds its origin's account under a read lock, without allocating; only a
//! new origin takes the write lock. Depositing is a clock read and two relaxed
//! atomic additions; withdrawing is one compare-and-swap on the account's balance,
//! so concurrent callers can never spend the same retry twice. An account unused
//! for a whole window (nothing left in it) is forgotten, so a client meeting many
//! origins does not grow without bound; [`BudgetLayer::origins`] counts the
//! accounts held. An
//! origin's pause counts as a use until it ends, and reading whether an account is
//! paused is one atomic load while it is not.

//!
//! # What differs from tower's `TpsBudget`
//!
//! - Ratios are exact: 0.3 gives 3 retries per 10 first attempts, not 1 per 3
//!   (tower#857); see [`BudgetPolicy`].
//! - Bad numbers are a [`Result`] from the builder, never a panic.
//! - Accounts are per origin, not one per policy, and the budget is a layer that
//!   counts first attempts once per call, whatever retries or hedges follow.
//! - The clock is tokio's, so budget windows can be tested on a paused clock.

mod future;
mod layer;

use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower_service::Service;

pub use crate::admit::budget::{BudgetPolicy, BudgetPolicyBuilder, OriginAccount, PauseMode};
pub use crate::policy::error::OriginPaused;
pub use future::ResponseFuture;
pub use layer::BudgetLayer;

/// The old name of [`BudgetPolicy`].
#[deprecated(since = "0.1.0", note = "renamed `BudgetPolicy`")]
pub type RetryBudget = BudgetPolicy;

/// The old name of [`BudgetPolicyBuilder`].
#[deprecated(since = "0.1.0", note = "renamed `BudgetPolicyBuilder`")]
pub type RetryBudgetBuilder = BudgetPolicyBuilder;

/// The old name of [`OriginAccount`] (an origin's account, as the layer shows it;
/// `policy::BudgetAccount` is the trait every account implements).
#[deprecated(since = "0.1.0", note = "renamed `OriginAccount`")]
pub type BudgetAccount = OriginAccount;

/// The old name of [`Budget`].
#[deprecated(since = "0.1.0", note = "renamed `Budget`")]
pub type BudgetService<S> = Budget<S>;

/// [`Partition`](crate::Partition), at its old path.
#[deprecated(since = "0.1.0", note = "moved to `backstop::Partition`")]
pub type Partition = crate::Partition;

use crate::admit::{Admission, Beneath};

/// Counts each call as a first attempt in its origin's retry budget account and
/// leaves the account's handle in the request extensions; holds a call whose
/// origin is paused, or hands its hold down to the retry layer beneath. See the
/// [module docs](self#the-origin-pause).
///
/// Its response is the inner service's; its error is a [`backstop::Error`](crate::Error)
/// that keeps the inner service's error as its source (or, for a call refused
/// because its origin is paused, says so: [`Error::is_paused`](crate::Error::is_paused)).
pub struct Budget<S> {
    inner: S,
    /// The layer's admission, and what this service and its clones learned of
    /// the layers beneath (another inner service may differ): one pointer, so a
    /// clone copies one.
    shared: Arc<Shared>,
}

/// What a budget service and its clones share.
struct Shared {
    admission: Arc<Admission>,
    /// Whether a retry layer beneath meets the holds the service hands down.
    beneath: Beneath,
}

impl<S> Budget<S> {
    /// Wraps `inner` with a budget of its own (not shared with any layer).
    pub fn new(inner: S, budget: BudgetPolicy) -> Self {
        Budget::from_shared(inner, BudgetLayer::new(budget).admission)
    }

    pub(crate) fn from_shared(inner: S, admission: Arc<Admission>) -> Self {
        let beneath = Beneath::default();
        Budget {
            inner,
            shared: Arc::new(Shared { admission, beneath }),
        }
    }

    crate::inner_accessors!();
}

impl<S: Clone> Clone for Budget<S> {
    fn clone(&self) -> Self {
        Budget {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<S: std::fmt::Debug> std::fmt::Debug for Budget<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Budget")
            .field("inner", &self.inner)
            .field("budget", &self.shared.admission.budget())
            .finish()
    }
}

impl<S, B, RB> Service<Request<B>> for Budget<S>
where
    S: Service<Request<B>, Response = Response<RB>> + Clone,
    S::Error: Into<crate::BoxError>,
{
    type Response = Response<RB>;
    type Error = crate::Error;
    type Future = ResponseFuture<S, B>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), crate::Error>> {
        self.inner
            .poll_ready(cx)
            .map_err(|e| crate::Error::from_inner(e.into()))
    }

    // Written into the caller, so the inner future is built where it stays rather
    // than copied out of each front-end (about 90 instructions a layer).
    #[inline(always)]
    fn call(&mut self, req: Request<B>) -> ResponseFuture<S, B> {
        // A paused origin: the first attempt is held (or refused) by the retry layer
        // beneath, within its policy's timeout, or here when none is beneath; its
        // retries by the retry layer, which asks the same account.
        crate::admit::ResponseFuture::admit(
            &self.shared.admission,
            &mut self.inner,
            req,
            Some(&self.shared.beneath),
        )
    }
}
