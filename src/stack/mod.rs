//! Middleware that runs the whole of backstop as one service: admission (the
//! idempotency key, the circuit breaker, the adaptive throttle, the retry budget and
//! the origin pause), the attempt loop, and hedging, configured once.
//!
//! [`Backstop::builder`] takes every policy once (retry or routes, hedging, budget,
//! breaker, throttle, keys, rules, observer) and builds a [`BackstopLayer`]; its service,
//! [`Backstop<S>`], is one nameable `Clone + Send + Sync` type over any transport,
//! whatever was configured (`Backstop<S, WithHedge>` when it hedges: a stack that
//! does not hedge has no hedge layer to pass through). Inside, a call meets:
//!
//! ```text
//!  caller
//!    │   admission   key stamped; breaker asked; throttle asked; budget counted,
//!    │               origin pause met
//!    ▼   retry       the attempt loop: classify, gates, wait, re-send
//!        hedge       extra copies of a slow idempotent attempt
//!        transport   S (wrap a hyper-util client in ProgressTrackingLayer)
//! ```
//!
//! Admission runs inside the retry layer's own future, with one origin lookup for
//! the breaker, the throttle and the budget (one per partition when they partition
//! calls differently). It is the same code the separate
//! [`IdempotencyKeyLayer`](crate::IdempotencyKeyLayer),
//! [`CircuitBreakerLayer`](crate::CircuitBreakerLayer),
//! [`ThrottleLayer`](crate::ThrottleLayer) and [`BudgetLayer`](crate::BudgetLayer)
//! run. One thing only the stack can do, because the separate layers above a retry
//! layer cannot see its route: its observer events name the route the call
//! matched. (A held call is bounded alike in both: a `BudgetLayer` above a
//! `RetryLayer` hands the hold down to it, and the retry layer meets it within its
//! policy's total timeout, as the stack does. A new budget service learns that a
//! retry layer is beneath from the first call it sends; a call held before then is
//! held by the budget layer to the pause's end, and refused unsent by the retry
//! layer if its timeout ended meanwhile: see
//! [`budget`](crate::budget#the-origin-pause).)
//!
//! What the stack guarantees by construction:
//!
//! - **Rules given once** ([`BackstopBuilder::rules`]) decide for the retry policy
//!   (and every route's), the hedge policy and the breaker. A policy a caller puts
//!   in one request's extensions is used as given.
//! - **A hedge always spends the call's budget and asks its breaker**: a stack that
//!   hedges ([`BackstopBuilder::hedge`]) leaves the call's breaker and account in
//!   its [`CallContext`](crate::policy::CallContext) for its hedge layer; no
//!   setting turns that off. (A `HedgeLayer` composed by hand beneath a stack that does not hedge finds them
//!   only in a call that carries a context already: give the stack the hedge policy
//!   instead.)
//! - **A held call is bounded** by its deadline and by its retry policy's total
//!   [`timeout`](crate::retry::RetryPolicyBuilder::timeout), which counts the hold.
//! - **The builder's result does not depend on the order of its calls**: each
//!   setter sets one thing, and the combination is checked in
//!   [`build`](BackstopBuilder::build).
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use backstop::{Backstop, BudgetPolicy, CircuitBreakerPolicy, ReplayBody, RetryPolicy};
//! use backstop::circuit_breaker::State;
//! use bytes::Bytes;
//! use http_body_util::Full;
//! use tower::{Layer, Service, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let transport = tower::service_fn(|req: http::Request<ReplayBody<Full<Bytes>>>| async move {
//!     // The stack stamped the POST's idempotency key.
//!     assert!(req.headers().contains_key("idempotency-key"));
//!     Ok::<_, std::io::Error>(http::Response::new(Full::<Bytes>::default()))
//! });
//! let layer = Backstop::builder()
//!     .retry(RetryPolicy::builder().max_attempts(3).timeout(Duration::from_secs(5)).build()?)
//!     .circuit_breaker(CircuitBreakerPolicy::default())
//!     .budget(BudgetPolicy::default())
//!     .idempotency_key(backstop::IdempotencyKeyLayer::new())
//!     .build()?;
//! let mut client = layer.layer(transport);
//!
//! let req = http::Request::post("http://upstream.test/orders").body(Full::default())?;
//! client.ready().await?.call(req).await?;
//!
//! // The stack's breakers and accounts can be read.
//! let head = http::Request::get("http://upstream.test/").body(())?.into_parts().0;
//! assert_eq!(client.breaker_state(&head), Some(State::Closed));
//! assert!(client.budget_account(&head).is_some());
//! # Ok(()) }
//! ```

/// The stack's inspection methods, on the service and on its layer alike: each
/// reads the admission `$admission` gives (written once for both).
macro_rules! inspection {
    ($this:ident => $admission:expr) => {
        /// The admission the stack runs.
        fn admission(&$this) -> &crate::admit::Admission {
            match $admission {
                Some(admission) => admission,
                None => unreachable!("a stack's retry layer runs its admission"),
            }
        }

        /// The state of the breaker that a call with this request head goes
        /// through, created if it is new; `None` without a breaker.
        pub fn breaker_state(&self, head: &http::request::Parts) -> Option<crate::policy::circuit::State> {
            self.admission().breaker_state(head)
        }

        /// When the breaker that a call with this request head goes through lets
        /// its next probe through: `None` while it is closed, and without a breaker.
        pub fn next_probe_at(&self, head: &http::request::Parts) -> Option<tokio::time::Instant> {
            self.admission().next_probe_at(head)
        }

        /// The probability that the adaptive throttle sheds a call with this
        /// request head now (its origin's window as it stands); `None` without a
        /// throttle.
        pub fn throttle_probability(&self, head: &http::request::Parts) -> Option<f64> {
            self.admission().throttle_probability(head)
        }

        /// The budget account that a call with this request head spends from,
        /// created if it is new (for metrics and tests); `None` without a budget.
        pub fn budget_account(
            &self,
            head: &http::request::Parts,
        ) -> Option<crate::admit::budget::OriginAccount> {
            self.admission().account(head)
        }

        /// How many origins (or keys) the stack keeps a breaker, an account or a
        /// throttle for now, after forgetting the idle ones: those used within the
        /// breaker's, the budget's or the throttle's window, or that a call still
        /// holds. When they partition calls differently, the entries of each
        /// partition are counted.
        /// Counting sweeps under a lock the calls share, so it suits a metrics
        /// scrape, not every call.
        pub fn origins(&self) -> usize {
            self.admission().origins()
        }
    };
}
use inspection;

mod builder;
mod hedging;
mod reload;

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::Request;
use tower_service::Service;

pub use builder::{BackstopBuilder, BackstopLayer};
pub use hedging::{HedgeMode, NoHedge, WithHedge};
pub use reload::{ReloadHandle, Reloadable, ReloadableLayer};

use crate::observe::Observer;
use crate::policy::error::Error;
use crate::retry::Retry;

/// The whole stack over a transport `S`: admission, the attempt loop and, when the
/// stack hedges (`H` is [`WithHedge`]), hedging, in one service. Build it with
/// [`Backstop::builder`]; see the [module docs](self).
///
/// A stack that does not hedge has no hedge layer at all (`H` defaults to
/// [`NoHedge`]), so it costs nothing for a capability it does not use.
///
/// # Examples
///
/// A gateway keeps one client in its state, named once, whatever the stack holds:
///
/// ```
/// use backstop::progress::ProgressTracking;
/// use backstop::stack::WithHedge;
/// use backstop::{Backstop, CircuitBreakerPolicy, HedgePolicy, ProgressTrackingLayer, ReplayBody};
/// use bytes::Bytes;
/// use http_body_util::Full;
/// use hyper_util::client::legacy::{connect::HttpConnector, Client};
/// use hyper_util::rt::TokioExecutor;
/// use std::time::Duration;
/// use tower::Layer;
///
/// type Transport = ProgressTracking<Client<HttpConnector, ReplayBody<Full<Bytes>>>>;
///
/// #[derive(Clone)]
/// struct AppState {
///     client: Backstop<Transport>,
///     // A stack that hedges says so in its type.
///     hedged: Backstop<Transport, WithHedge>,
/// }
///
/// # fn main() -> Result<(), backstop::policy::InvalidConfig> {
/// let transport = ProgressTrackingLayer::new()
///     .layer(Client::builder(TokioExecutor::new()).build_http());
/// let state = AppState {
///     client: Backstop::builder()
///         .circuit_breaker(CircuitBreakerPolicy::default())
///         .build()?
///         .layer(transport.clone()),
///     hedged: Backstop::builder()
///         .hedge(HedgePolicy::after(Duration::from_millis(50)))
///         .build()?
///         .layer(transport),
/// };
/// # let _ = state;
/// # Ok(())
/// # }
/// ```
pub struct Backstop<S, H: HedgeMode = NoHedge> {
    inner: Retry<H::Over<S>>,
    observer: Option<Arc<dyn Observer>>,
}

impl Backstop<()> {
    /// A builder for the stack, with working defaults: [`RetryPolicy::default()`],
    /// [`BudgetPolicy::default()`], no breaker, no throttle, no keys, no hedging.
    ///
    /// [`RetryPolicy::default()`]: crate::RetryPolicy::default
    /// [`BudgetPolicy::default()`]: crate::BudgetPolicy::default
    pub fn builder() -> BackstopBuilder {
        BackstopBuilder::default()
    }
}

impl<S, H: HedgeMode> Backstop<S, H> {
    inspection!(self => self.inner.admission());

    /// The transport.
    pub fn get_ref(&self) -> &S {
        H::inner_ref(self.inner.get_ref())
    }

    /// The transport, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        H::inner_mut(self.inner.get_mut())
    }

    /// The transport.
    pub fn into_inner(self) -> S {
        H::into_inner(self.inner.into_inner())
    }
}

impl<S, H> Clone for Backstop<S, H>
where
    H: HedgeMode,
    H::Over<S>: Clone,
{
    fn clone(&self) -> Self {
        Backstop {
            inner: self.inner.clone(),
            observer: self.observer.clone(),
        }
    }
}

impl<S, H> fmt::Debug for Backstop<S, H>
where
    H: HedgeMode,
    H::Over<S>: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Backstop")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, H, B> Service<Request<B>> for Backstop<S, H>
where
    H: HedgeMode,
    Retry<H::Over<S>>: Service<Request<B>, Error = Error>,
{
    type Response = <Retry<H::Over<S>> as Service<Request<B>>>::Response;
    type Error = Error;
    type Future = <Retry<H::Over<S>> as Service<Request<B>>>::Future;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        self.inner.poll_ready(cx)
    }

    #[inline]
    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        if let Some(observer) = &self.observer {
            crate::observe::observe(req.extensions_mut(), observer);
        }
        self.inner.call(req)
    }
}
