//! Middleware that sends extra copies of a slow idempotent request and returns the
//! first acceptable answer.
//!
//! A request that has not answered after a delay is usually stuck behind
//! something that has nothing to do with it: a garbage collection, a slow disk, a
//! queue on one replica. Waiting for its timeout and retrying costs the whole
//! timeout; sending a *hedge* (a second copy) beside it after a short delay costs
//! one extra request for the few requests that are that slow. Hedging after the
//! 95th percentile of latency sends about 5 % more requests and cuts the tail by
//! an order of magnitude (Dean and Barroso, *The Tail at Scale*, 2013).
//!
//! [`Hedge`] (applied by [`HedgeLayer`]) does this within one attempt:
//!
//! - **When**: after a delay that is fixed ([`HedgePolicy::after`]) or adaptive
//!   ([`HedgePolicy::adaptive`]): a latency percentile (p95 by default) of the request's
//!   origin (scheme and authority) over the last 10 to 20 seconds, with a fixed
//!   fallback until the origin has enough samples. Up to
//!   [`max_extra`](HedgePolicyBuilder::max_extra) copies, each one delay after the one
//!   before.
//! - **What**: only a request whose method is idempotent, or that carries an
//!   idempotency key (the [`Keyed`](crate::policy::Keyed)
//!   marker or the `idempotency-key` header), and whose body can be read twice at
//!   once ([`HedgeBody`]). Any other request passes straight through, for the cost
//!   of a check. A configuration that would hedge POST or PATCH without a key is
//!   refused when built.
//! - **Which answer**: the first *acceptable* one. Each send's outcome goes
//!   through the [decision ladder](crate::policy::classify), with the
//!   [rules](HedgePolicyBuilder::rules) you give it (a classifier of your own
//!   included): an answer (or a
//!   failure no copy could cure) wins at once; a retryable failure (a 503, a reset
//!   connection) leaves the other sends running. Only when every send has failed
//!   is a failure returned: the latest one, so that a `Retry-After` or the
//!   origin's state is as fresh as possible.
//! - **The losers** are canceled: their futures are dropped, which makes hyper
//!   reset an HTTP/2 stream or close an HTTP/1.1 connection, and a losing response
//!   that had arrived is dropped without reading its body.
//! - **Each hedge is an attempt**: before a copy is sent, the call's
//!   [`Deadline`](crate::policy::Deadline) must leave the policy's minimum attempt
//!   time, the origin's [circuit breaker](crate::policy::BreakerHandle) must allow
//!   an extra attempt, and the [retry budget](crate::policy::BudgetHandle) must
//!   pay for it; the first refusal ends hedging for that request
//!   ([`NotHedged`]). The breaker and the budget are read from the call's
//!   [context](crate::policy::CallContext), where the budget and breaker layers above
//!   leave them, and where the [`Backstop`](crate::Backstop) stack's admission
//!   leaves them whenever it hedges. When a copy was due, a [`Hedged`] record of every send is
//!   part of the attempt's [record](crate::policy::AttemptLog), which rides on the
//!   response's extensions ([`Hedged::of`]) or in the error ([`Hedged::find`]).
//!
//! A tracing event (debug level) tells each hedge sent, with its copy number and
//! delay, and each hedge not sent, with the gate that refused it. Neither names a
//! URL or a header value.
//!
//! # Beneath the retry layer
//!
//! The stack puts the hedge layer beneath [`RetryLayer`](crate::RetryLayer), so the
//! retry layer's attempt timeout and deadline cover every copy, and its
//! [`ReplayBody`](crate::ReplayBody) is the body the copies share: the transport is
//! declared once, for `ReplayBody<B>`, as without hedging. A copy is made from the
//! replay body only once the original body has ended with every chunk kept (an
//! empty body always is), so a large upload still being sent when the hedge is due
//! is not hedged. A [`OneShot`] body is never hedged either, nor is a call whose
//! retry policy allows one attempt ([`RetryPolicy::none()`](crate::RetryPolicy::none)):
//! "never retry" means the request is sent once.
//!
//! # Per route
//!
//! A gateway chooses hedging per route in the retry layer's route table
//! (`retry::Routes`, with a `retry::RoutePolicy`
//! per route): the layer's own policy, another [`HedgePolicy`] (its own delay,
//! copies and methods), or no hedging. The retry layer leaves the route's
//! [`HedgeChoice`] in the call's [`CallContext`](crate::policy::CallContext), and
//! this layer follows it; a caller can set one there too. The route's name, when it
//! has one, is in this layer's tracing events as `route`.
//!
//! A failure the hedge layer returns is a [`backstop::Error`](crate::Error) of
//! the failure's own kind, so the retry layer above classifies it as if no hedge
//! had been sent.
//!
//! # Examples
//!
//! On its own, over any service of `http::Request<Full<Bytes>>`:
//!
//! ```
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use backstop::hedge::{HedgePolicy, HedgeLayer, Hedged};
//! use bytes::Bytes;
//! use http_body_util::Full;
//! use tower::{Service, ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), backstop::Error> {
//! // A stand-in for a client whose first request is stuck.
//! let sends = Arc::new(AtomicUsize::new(0));
//! let counter = sends.clone();
//! let transport = tower::service_fn(move |_req: http::Request<Full<Bytes>>| {
//!     let n = counter.fetch_add(1, Ordering::SeqCst);
//!     async move {
//!         if n == 0 {
//!             tokio::time::sleep(Duration::from_secs(5)).await;
//!         }
//!         Ok::<_, std::io::Error>(http::Response::new(Full::new(Bytes::from("hello"))))
//!     }
//! });
//!
//! let mut client = ServiceBuilder::new()
//!     .layer(HedgeLayer::new(HedgePolicy::after(Duration::from_millis(20))))
//!     .service(transport);
//!
//! let req = http::Request::get("http://example.com/").body(Full::default()).unwrap();
//! let res = client.ready().await?.call(req).await?;
//! // The hedge answered; the stuck original was canceled.
//! let hedged = Hedged::of(&res).unwrap();
//! assert_eq!(hedged.winner(), Some(1));
//! assert_eq!(sends.load(Ordering::SeqCst), 2);
//! # Ok(())
//! # }
//! ```
//!
//! In a full stack, beneath the retry layer, with an adaptive delay:
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use backstop::hedge::{HedgePolicy, HedgeLayer};
//! use backstop::{ReplayBody, RetryLayer, RetryPolicy};
//! use bytes::Bytes;
//! use http_body_util::Full;
//! use hyper_util::client::legacy::{connect::HttpConnector, Client};
//! use hyper_util::rt::TokioExecutor;
//! use tower::ServiceBuilder;
//!
//! # fn main() -> Result<(), backstop::policy::InvalidConfig> {
//! let transport: Client<HttpConnector, ReplayBody<Full<Bytes>>> =
//!     Client::builder(TokioExecutor::new()).build_http();
//! let hedge = HedgePolicy::builder()
//!     .adaptive(Duration::from_millis(100)) // until the p95 is known
//!     .max_extra(2)
//!     .build()?;
//! let client = ServiceBuilder::new()
//!     .layer(RetryLayer::new(RetryPolicy::default()))
//!     .layer(HedgeLayer::new(hedge))
//!     .service(transport);
//! # let _ = client;
//! # Ok(())
//! # }
//! ```
//!
//! # What differs from `tower::hedge`
//!
//! - tower returns the first *completion*, so a fast error beats a slower
//!   success; here a retryable failure leaves the other sends running.
//! - tower sends at most one copy; here up to `max_extra`.
//! - tower's hedges spend no budget and ignore deadlines and breakers; here each
//!   copy passes the same gates as a retry, and the gate that refused is recorded.
//! - tower hedges any request its policy can clone, up front, for every request;
//!   here only idempotent or keyed requests are hedged, the body is shared (not
//!   cloned) through the replay body, and a request that is not hedged costs a
//!   check.
//! - tower keeps one latency histogram for the whole service, behind a mutex, in
//!   whole milliseconds; here there is one per origin, of atomic counters at
//!   microsecond resolution, and the percentile is computed every few samples
//!   rather than on every request. An original canceled because a copy won is
//!   counted as slow, so the percentile does not drift down as hedging succeeds.
//!
//! # Runtime
//!
//! The hedge timer is a Tokio timer: the futures must run inside a Tokio runtime
//! with the time driver enabled.

mod body;
mod estimate;
mod future;
mod layer;
mod policy;

use std::task::{Context, Poll};

use http::{Request, Response};
use tokio::time::Instant;
use tower_service::Service;

pub use crate::policy::{Hedged, NotHedged, Sent};
pub use body::HedgeBody;
pub use future::ResponseFuture;
pub use layer::HedgeLayer;
pub use policy::{HedgeChoice, HedgePolicy, HedgePolicyBuilder};

/// The old name of [`HedgePolicyBuilder`].
#[deprecated(since = "0.1.0", note = "renamed `HedgePolicyBuilder`")]
pub type HedgeBuilder = HedgePolicyBuilder;

/// The old name of [`Hedge`] (the service).
#[deprecated(since = "0.1.0", note = "renamed `Hedge`")]
pub type Hedging<S> = Hedge<S>;

use estimate::Estimator;
use future::Plan;
use policy::{Delay, Judging};

use crate::body::OneShot;
use crate::policy::error::{BoxError, Error};
use crate::policy::Given;

/// Sends extra copies of a slow idempotent request and returns the first
/// acceptable answer. See the [module docs](self).
#[derive(Clone, Debug)]
pub struct Hedge<S> {
    inner: S,
    hedge: HedgePolicy,
}

impl<S> Hedge<S> {
    /// Wraps `inner`, hedging as `hedge` says.
    pub fn new(inner: S, hedge: HedgePolicy) -> Self {
        Hedge { inner, hedge }
    }

    crate::inner_accessors!();

    /// What a hedged request needs, or `None` when it is not hedged.
    fn plan<B: HedgeBody>(&self, req: &Request<B>) -> Option<Plan<B>> {
        let ext = req.extensions();
        let given = Given::new(ext);
        // A choice above (a route of the retry layer, or the caller) replaces the
        // layer's own policy for this call.
        let hedge = match given.hedge() {
            Some(HedgeChoice::Off) => return None,
            Some(HedgeChoice::With(policy)) => policy,
            None => &self.hedge,
        };
        let keyed = hedge
            .policy
            .is_keyed(req.method(), req.uri(), req.headers(), ext);
        if !(keyed || hedge.hedges(req.method(), req.uri())) || given.get::<OneShot>().is_some() {
            return None;
        }
        // The retry layer above leaves a progress record exactly on the attempts of a
        // request its own policy finds neither idempotent nor keyed: never hedged.
        if given.attempt().is_some() {
            return None;
        }
        let body = req.body().hedge_handle()?;
        // The race starts now: one clock read serves the delay and the latencies.
        let started = Instant::now();
        let (delay, estimator) = match &hedge.delay {
            Delay::Fixed(delay) => (*delay, None),
            Delay::Adaptive(estimators) => {
                let e = estimators.get(req.uri());
                (e.delay_at(started), Some(e))
            }
        };
        Some(Plan {
            started,
            body,
            policy: hedge.policy.clone(),
            keyed,
            delay,
            max_extra: hedge.max_extra,
            estimator,
        })
    }
}

impl<S, B, RB> Service<Request<B>> for Hedge<S>
where
    S: Service<Request<B>, Response = Response<RB>> + Clone,
    S::Error: Into<BoxError>,
    B: HedgeBody,
{
    type Response = Response<RB>;
    type Error = Error;
    type Future = ResponseFuture<S, B>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        self.inner
            .poll_ready(cx)
            .map_err(|e| Error::from_inner(e.into()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let Some(plan) = self.plan(&req) else {
            return ResponseFuture::passthrough(self.inner.call(req));
        };
        let (parts, body) = req.into_parts();
        let template = parts.clone();
        let future = self.inner.call(Request::from_parts(parts, body));
        // The service that was driven ready serves the original; copies drive a
        // clone's readiness themselves.
        ResponseFuture::race(self.inner.clone(), template, future, plan)
    }
}
