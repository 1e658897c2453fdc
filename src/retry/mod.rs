//! Middleware that re-sends a request when that is safe and worthwhile.
//!
//! [`Retry`] runs the attempt loop of one call: it sends the request, classifies
//! the outcome with the [decision ladder](crate::policy::classify), passes a
//! retryable outcome through the gates (attempts left, a replayable body, the
//! `Retry-After` cap, the deadline, the circuit breaker, the retry budget), reads
//! and drops the head of a failed response's body so its connection is reused,
//! waits (the policy's [backoff](crate::policy::Jitter), full jitter unless set, or
//! exactly the server's `Retry-After`), and sends again.
//!
//! The transport receives the request body wrapped in a [`ReplayBody`], which
//! streams the first attempt straight through while keeping its chunks (up to the
//! policy's replay cap) for a later attempt. What the failed attempt read decides
//! whether the body can be sent again, never its size: a body it did not read is
//! sent whole, one it read no further than the cap is sent from the kept chunks and
//! then the rest of the original, and one it read past the cap is not sent again.
//!
//! # Examples
//!
//! ```
//! use backstop::{RetryLayer, RetryPolicy, ReplayBody};
//! use bytes::Bytes;
//! use http_body_util::Full;
//! use tower::{Service, ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), backstop::Error> {
//! // Any service of `Request<ReplayBody<B>>` works; here a stand-in for a client.
//! let transport = tower::service_fn(|req: http::Request<ReplayBody<Full<Bytes>>>| async move {
//!     let _ = req;
//!     Ok::<_, std::io::Error>(http::Response::new(Full::new(Bytes::from_static(b"hello"))))
//! });
//! let mut client = ServiceBuilder::new()
//!     .layer(RetryLayer::new(RetryPolicy::default()))
//!     .service(transport);
//!
//! let req = http::Request::get("http://example.com/").body(Full::default()).unwrap();
//! let res = client.ready().await?.call(req).await?;
//! assert_eq!(res.status(), http::StatusCode::OK);
//! // A first-attempt answer carries no history: there was nothing to tell.
//! assert!(res.extensions().get::<backstop::policy::History>().is_none());
//! # Ok(())
//! # }
//! ```
//!
//! # Overrides
//!
//! - Per call: a [`RetryPolicy`] in the request's extensions overrides the layer's
//!   for that call; a [`Deadline`](crate::policy::Deadline) there ends the call by
//!   then when it is earlier than the policy's total timeout (the earlier of the two
//!   holds); a [`OneShot`](crate::OneShot) marker forbids re-sending its body.
//! - Per route: [`Routes`] maps path prefixes, methods and hosts to a
//!   [`RoutePolicy`]: a retry policy and the route's hedging, which a
//!   [`HedgeLayer`](crate::HedgeLayer) beneath follows. A route can be named; the
//!   name is in the call's [`History`](crate::policy::History) and in tracing.
//!
//! # What differs from `tower::retry`
//!
//! `tower::retry` clones every request before the first attempt and needs a
//! cloneable body; a request that cannot be cloned silently loses its retries. Here
//! the body is kept as it streams and "not replayable" is a recorded stop reason;
//! a POST is never re-sent after it may have been processed; `Retry-After` is
//! honoured; the deadline covers every attempt and wait; the history of attempts
//! rides on the response and the error.
//!
//! # Cost on the success path
//!
//! Any retry layer must keep a copy of the request head, because the transport takes
//! the request. Here a head with up to 4 KiB of headers is kept as flat bytes (the
//! method and version as tags, the URI's and the headers' bytes: no reference
//! counts), turned back into a header map only when a retry is sent; larger heads
//! are cloned. The usual head (up to 256 bytes) is written in place into the one
//! allocation a call keeps for its later attempts, beside the clone of the inner
//! service that will send them, so the future that the layers above move stays a
//! few words over the transport's (160 bytes over hyper-util's client, whose own
//! size is 304). Everything only a timed, failed or hedged call needs is allocated
//! when it is needed, and the future is built in place around the first attempt's,
//! so a first answer costs the head copy and little else: less than what
//! `tower::retry`'s request clone costs: four fifths of its instructions, and from
//! half of its time on a quiet machine to about four fifths on a loaded one, where
//! time follows the instructions. `cargo bench --bench overhead -- ratios` measures
//! it beside tower's retry and beside a floor (`benches/common/floor.rs`): a retry
//! layer that does nothing but copy the head.

mod call;
mod future;
mod head;
mod layer;
mod policy;
mod route;
mod spans;

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Buf;
use http::{Request, Response};
use http_body::Body;
use tower_service::Service;

pub use future::ResponseFuture;
pub use layer::RetryLayer;
pub use policy::{RetryPolicy, RetryPolicyBuilder};
pub use route::{PathMatch, Route, RoutePolicy, Routes};

use crate::admit::{Admission, Admitted, Entered, Note};
use crate::body::ReplayBody;
use crate::policy::error::{BoxError, Error};

/// Re-sends a request when that is safe and worthwhile. See the [module
/// docs](self).
#[derive(Clone, Debug)]
pub struct Retry<S> {
    inner: S,
    settings: Arc<Settings>,
}

/// What a retry layer and all its services share, behind one reference count.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) routes: Routes,
    /// The admission the retry layer runs in its own future, when a stack gave it
    /// one ([`Backstop`](crate::Backstop)); a `RetryLayer` alone has none.
    pub(crate) admission: Option<Admission>,
}

impl Settings {
    pub(crate) fn new(routes: Routes) -> Self {
        Settings {
            routes,
            admission: None,
        }
    }
}

impl<S> Retry<S> {
    /// Wraps `inner` with one policy for every call.
    pub fn new(inner: S, policy: RetryPolicy) -> Self {
        Retry::with_routes(inner, Routes::new(policy))
    }

    /// Wraps `inner` with policies by route.
    pub fn with_routes(inner: S, routes: Routes) -> Self {
        Retry::from_settings(inner, Arc::new(Settings::new(routes)))
    }

    pub(crate) fn from_settings(inner: S, settings: Arc<Settings>) -> Self {
        Retry { inner, settings }
    }

    /// The settings the next call starts under, to swap (a reloadable stack's).
    pub(crate) fn settings_mut(&mut self) -> &mut Arc<Settings> {
        &mut self.settings
    }

    crate::inner_accessors!();

    /// The admission the layer runs, in a stack.
    pub(crate) fn admission(&self) -> Option<&Admission> {
        self.settings.admission.as_ref()
    }

    /// A call whose extensions carry a budget layer's note: this layer tells the
    /// budget layer that it is here, runs its own admission, if any, and takes the
    /// hold the budget layer handed down, if any (unless its own admission held or
    /// refused the call: then the budget layer holds it after all). Takes the
    /// request by reference: a request passed by value out of line is copied.
    #[cold]
    #[inline(never)]
    fn noted<B>(&self, req: &mut Request<B>, timeout: Option<Duration>) -> Entered {
        let note = Note::take(req);
        let entered = match &self.settings.admission {
            None => Entered::Go(Admitted::default()),
            Some(admission) => admission.enter_call(req, timeout),
        };
        let Some((note, hold)) = note.as_deref().and_then(|n| Some((n, n.hold()?))) else {
            return entered;
        };
        match entered {
            // The hold is met here, within the policy's timeout; the call is
            // counted here too, unless the budget layer counted it first (a
            // layer between called this one after the budget layer's hold).
            Entered::Go(admitted) => {
                let counts = note.claim();
                let tells = !note.is_held_above();
                match hold.meet_for(admitted, timeout, counts, tells) {
                    Ok((admitted, paused)) => Entered::Held {
                        admitted,
                        paused: Box::new(paused),
                    },
                    Err((pass, error)) => Entered::Refused { pass, error },
                }
            }
            // Its own admission held the call (its own pause governs it) or
            // refused it (it sends nothing): the budget layer neither holds nor
            // counts it.
            other => {
                note.settle_taken();
                other
            }
        }
    }
}

impl<S, B, RB> Service<Request<B>> for Retry<S>
where
    S: Service<Request<ReplayBody<B>>, Response = Response<RB>> + Clone,
    S::Error: Into<BoxError>,
    B: Body,
    B::Data: Buf,
    B::Error: Into<BoxError>,
    RB: Body,
{
    type Response = Response<RB>;
    type Error = Error;
    type Future = ResponseFuture<S, B, RB>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        self.inner
            .poll_ready(cx)
            .map_err(|e| Error::from_inner(e.into()))
    }

    #[inline]
    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        // The route gives the policy (unless the call brings its own), and leaves its
        // name and hedging in the call's context for the layers beneath.
        // Only the context in the extensions (the usual stack): no policy to look for.
        // A budget layer above may have left a note beside the context.
        let (given, noted) = if crate::policy::Given::new(req.extensions()).has_others() {
            let noted = Note::is_left(req.extensions());
            (req.extensions_mut().remove::<RetryPolicy>(), noted)
        } else {
            (None, false)
        };
        let policy = self.settings.routes.choose(&mut req, given);
        // The inner service that was driven to readiness serves the first attempt; a
        // call that may retry keeps a clone, which drives its own readiness. Without
        // admission (a retry layer alone) the call starts at once.
        let entered = if noted {
            // A budget layer above left a note: this layer meets the hold it
            // handed down.
            self.noted(&mut req, policy.timeout())
        } else {
            let Some(admission) = &self.settings.admission else {
                let span = spans::Spans::for_call(&req);
                return call::Call::start(&mut self.inner, policy, req, span, None);
            };
            admission.enter_call(&mut req, policy.timeout())
        };
        // Matched here rather than in a helper: a request passed on by value is
        // copied, even into a function that is always inlined.
        match entered {
            Entered::Go(admitted) => {
                let span = spans::Spans::for_call(&req);
                call::Call::start(&mut self.inner, policy, req, span, Some(admitted))
            }
            Entered::Held { admitted, paused } => {
                let service = self.inner.clone();
                ResponseFuture::held(service, policy, req, admitted, *paused)
            }
            Entered::Deferred { admitted, hold } => {
                match hold.meet_for(admitted, policy.timeout(), true, true) {
                    Ok((admitted, paused)) => {
                        let service = self.inner.clone();
                        ResponseFuture::held(service, policy, req, admitted, paused)
                    }
                    Err((pass, error)) => ResponseFuture::refused(policy, pass, error),
                }
            }
            Entered::Refused { pass, error } => ResponseFuture::refused(policy, pass, error),
        }
    }
}
