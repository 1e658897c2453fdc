//! Middleware that lets one observer see what every backstop layer of a stack
//! decides: calls, attempts, retries scheduled and skipped, refusals, hedges,
//! breaker state changes and budgets running dry.
//!
//! When a retry you expected did not happen, the [`Event`]s say why, per origin
//! and per route: a [`RetrySkipped`] names the gate that refused, a [`CallRefused`]
//! the open breaker and when it lets the next probe through. Each event names its
//! [call](CallInfo) by origin (scheme, host and port, never user information,
//! path or query), route name and method, so they make bounded metric labels.
//!
//! # Setting the observer once
//!
//! Put an [`ObserveLayer`] **outermost**. It leaves the observer in each call's
//! [`CallContext`], which every backstop layer inside reads (the retry layer
//! copies the context into each attempt, so the hedge layer beneath sees it
//! too); a layer that finds none tells nothing and pays one branch for it. An
//! observer set for one call with [`CallContext::set_observer`] wins over the
//! layer's.
//!
//! ```text
//! ObserveLayer → CircuitBreakerLayer → BudgetLayer → RetryLayer → HedgeLayer → transport
//! ```
//!
//! | layer | tells |
//! |---|---|
//! | retry | [`CallFinished`], [`AttemptFinished`], [`RetryScheduled`], [`RetrySkipped`], [`CallRefused`] (deadline), [`BudgetRanDry`] |
//! | circuit breaker | [`CallRefused`] (circuit open), [`BreakerStateChanged`] |
//! | adaptive throttle | [`CallRefused`] (throttled) |
//! | hedge | [`HedgeSent`], [`HedgeWon`], [`LoserCancelled`], [`BudgetRanDry`] |
//! | budget (origin pause) | [`OriginPaused`], [`OriginPauseExtended`], [`OriginResumed`], [`CallWaited`], [`CallRefused`] (paused) |
//!
//! An origin's pause is told by whichever layer moves it, with the call that
//! did: the retry layer pauses on an answer it retries after and waits for a
//! pause before a retry ([`CallWaited`]; a retry the pause forbids is a
//! [`RetrySkipped`] with gate `paused`), the budget layer pauses on a call's final
//! answer and holds or refuses a first attempt; the first call to find a pause
//! over tells [`OriginResumed`].
//!
//! A call the breaker, the throttle or the pause refuses never reaches the retry
//! layer, so it is told as a [`CallRefused`] alone; every call the retry layer
//! runs ends with one [`CallFinished`]. With feature `metrics`, `MetricsObserver`
//! records the events through the `metrics` facade, with a table of every metric,
//! its type, unit and labels.
//!
//! # Examples
//!
//! ```
//! use std::sync::atomic::{AtomicU32, Ordering};
//! use std::sync::Arc;
//! use backstop::observe::{Event, ObserveLayer, Observer};
//! use backstop::{ReplayBody, RetryLayer, RetryPolicy};
//! use bytes::Bytes;
//! use http_body_util::Full;
//! use tower::{Service, ServiceBuilder, ServiceExt};
//!
//! #[derive(Default)]
//! struct Retries(AtomicU32);
//!
//! impl Observer for Retries {
//!     fn on_event(&self, event: &Event<'_>) {
//!         if let Event::RetryScheduled(retry) = event {
//!             assert_eq!(retry.call.origin().to_string(), "http://example.com");
//!             self.0.fetch_add(1, Ordering::Relaxed);
//!         }
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() -> Result<(), backstop::Error> {
//! // A transport that fails once with a 503, then answers.
//! let calls = Arc::new(AtomicU32::new(0));
//! let transport = tower::service_fn(move |_req: http::Request<ReplayBody<Full<Bytes>>>| {
//!     let n = calls.fetch_add(1, Ordering::Relaxed);
//!     async move {
//!         let mut res = http::Response::new(Full::<Bytes>::default());
//!         if n == 0 {
//!             *res.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
//!         }
//!         Ok::<_, std::io::Error>(res)
//!     }
//! });
//! let retries = Arc::new(Retries::default());
//! let mut client = ServiceBuilder::new()
//!     .layer(ObserveLayer::from_arc(retries.clone()))
//!     .layer(RetryLayer::new(RetryPolicy::default()))
//!     .service(transport);
//!
//! let req = http::Request::get("http://example.com/items?id=7").body(Full::default()).unwrap();
//! let res = client.ready().await?.call(req).await?;
//! assert_eq!(res.status(), http::StatusCode::OK);
//! assert_eq!(retries.0.load(Ordering::Relaxed), 1);
//! # Ok(())
//! # }
//! ```
//!
//! # Cost
//!
//! Without an observer the layers read one more field of the context they
//! already read; nothing is allocated or timed for it (`cargo bench --bench
//! overhead -- added`). With one, each event is a call through a `dyn Observer`
//! with borrowed data: an observer that must do slow work should hand it off.

#[cfg(feature = "metrics")]
mod grpc_metrics;
mod many;
#[cfg(feature = "metrics")]
mod metrics;
pub(crate) mod otel;

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::Request;
use tower_layer::Layer;
use tower_service::Service;

// The observer and its events are the shared vocabulary's (the call's context
// carries the observer); this is their public home.
pub use crate::policy::event::{
    outcome_label, reason_label, AttemptFinished, BreakerStateChanged, BudgetRanDry, CallFinished,
    CallInfo, CallRefused, CallWaited, Event, HedgeSent, HedgeWon, LoserCancelled, Observer,
    Origin, OriginPauseExtended, OriginPaused, OriginResumed, Refusal, RetryScheduled,
    RetrySkipped,
};
pub use many::Observers;
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub use metrics::MetricsObserver;

use std::time::Duration;

use tokio::time::Instant;

use crate::policy::{AttemptOutcome, BudgetAccount, CallContext, Pause, PauseChange, Progress};

/// Applies [`Observe`] to a service: leaves the observer in each call's
/// [`CallContext`] for the backstop layers inside. Put it outermost.
///
/// Clones share the observer.
#[derive(Clone)]
pub struct ObserveLayer {
    observer: Arc<dyn Observer>,
}

impl ObserveLayer {
    /// A layer telling `observer`.
    pub fn new(observer: impl Observer) -> Self {
        ObserveLayer::from_arc(Arc::new(observer))
    }

    /// A layer telling an observer you keep a handle on.
    pub fn from_arc(observer: Arc<dyn Observer>) -> Self {
        ObserveLayer { observer }
    }
}

impl<S> Layer<S> for ObserveLayer {
    type Service = Observe<S>;

    fn layer(&self, inner: S) -> Observe<S> {
        Observe {
            inner,
            observer: self.observer.clone(),
        }
    }
}

impl fmt::Debug for ObserveLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObserveLayer").finish_non_exhaustive()
    }
}

/// Leaves an observer in each call's [`CallContext`]. Its response, error and
/// future are the inner service's. See the [module docs](self).
#[derive(Clone)]
pub struct Observe<S> {
    inner: S,
    observer: Arc<dyn Observer>,
}

impl<S> Observe<S> {
    /// Wraps `inner`, telling `observer`.
    pub fn new(inner: S, observer: Arc<dyn Observer>) -> Self {
        Observe { inner, observer }
    }

    crate::inner_accessors!();
}

impl<S: fmt::Debug> fmt::Debug for Observe<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observe")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, B> Service<Request<B>> for Observe<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> S::Future {
        observe(req.extensions_mut(), &self.observer);
        self.inner.call(req)
    }
}

/// Leaves `observer` in the call's context, unless the call carries one of its own:
/// what an [`ObserveLayer`] and a stack given an observer do to each call.
#[inline]
pub(crate) fn observe(extensions: &mut http::Extensions, observer: &Arc<dyn Observer>) {
    let context = CallContext::of_mut(extensions);
    if context.observer().is_none() {
        context.set_observer(observer.clone());
    }
}

/// A call's observer and what its events say of the call, read once where a layer
/// first needs it.
#[derive(Clone)]
pub(crate) struct Observed {
    observer: Arc<dyn Observer>,
    call: CallInfo,
}

impl Observed {
    /// The observer of `req`'s call, if one was set.
    #[inline]
    pub(crate) fn of<B>(req: &Request<B>) -> Option<Self> {
        let observer = CallContext::of(req.extensions())?.observer()?.clone();
        Some(Observed::new(observer, req))
    }

    /// `observer`, for `req`'s call.
    #[cold]
    pub(crate) fn new<B>(observer: Arc<dyn Observer>, req: &Request<B>) -> Self {
        Observed {
            observer,
            call: CallInfo::of(req),
        }
    }

    /// `observer`, for the call whose request head is `parts`.
    #[cold]
    pub(crate) fn of_head(observer: Arc<dyn Observer>, parts: &http::request::Parts) -> Self {
        Observed {
            observer,
            call: CallInfo::of_head(parts),
        }
    }

    /// The observer of the call whose request head is `parts`, if one was set.
    pub(crate) fn of_parts(parts: &http::request::Parts) -> Option<Self> {
        let observer = CallContext::of(&parts.extensions)?.observer()?.clone();
        Some(Observed::of_head(observer, parts))
    }

    /// Tells the observer the event `make` builds for the call.
    pub(crate) fn tell<'a>(&'a self, make: impl FnOnce(&'a CallInfo) -> Event<'a>) {
        self.observer.on_event(&make(&self.call));
    }

    /// Tells the end of a request sent: an attempt, or one send of a hedged one.
    pub(crate) fn attempt_finished(
        &self,
        attempt: u32,
        copy: u32,
        outcome: AttemptOutcome,
        progress: Option<Progress>,
        elapsed: Duration,
    ) {
        self.tell(|call| {
            Event::AttemptFinished(AttemptFinished {
                call,
                attempt,
                copy,
                outcome,
                progress,
                elapsed,
            })
        });
    }

    /// Tells what a pause changed in the call's origin's pause.
    pub(crate) fn pause_changed(&self, change: PauseChange) {
        self.tell(|call| match change {
            PauseChange::Paused { pause } => Event::OriginPaused(OriginPaused { call, pause }),
            PauseChange::Extended { by } => {
                Event::OriginPauseExtended(OriginPauseExtended { call, by })
            }
            PauseChange::Resumed => Event::OriginResumed(OriginResumed { call }),
        });
    }

    /// After a withdrawal from `budget`: tells that it ran dry if that took its
    /// last whole retry.
    pub(crate) fn ran_dry_if(&self, budget: &dyn BudgetAccount) {
        if budget.available() == Some(0) {
            self.tell(|call| Event::BudgetRanDry(BudgetRanDry { call }));
        }
    }
}

/// Pauses `budget`'s origin until `until`, telling the call's observer what
/// changed.
pub(crate) fn pause_told(
    budget: &(impl BudgetAccount + ?Sized),
    until: Instant,
    observed: Option<&Observed>,
) {
    if let (Some(change), Some(observed)) = (budget.pause_reporting(until), observed) {
        observed.pause_changed(change);
    }
}

/// `budget`'s pause at `now`, telling the call's observer when this look resumed
/// it.
pub(crate) fn paused_told(
    budget: &(impl BudgetAccount + ?Sized),
    now: Instant,
    observed: Option<&Observed>,
) -> Option<Pause> {
    let (pause, change) = budget.paused_reporting(now);
    if let (Some(change), Some(observed)) = (change, observed) {
        observed.pause_changed(change);
    }
    pause
}
