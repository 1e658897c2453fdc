//! A floor for the success path of a FUSED design: one hand-written tower layer
//! ([`Guard`]) that does, for a call, all the work the floor stack's key, breaker,
//! budget and retry layers do (`benches/common/floor.rs`), in one response future, so
//! that what a single fused guard must cost can be set against the separate layers'
//! floor and against tower's retry.
//!
//! The design being floored: one `tower::Service` in place of four, whose state for a
//! call lives in its own response future (pin-project-lite, no `async` block, no boxed
//! future) and never in the request's extensions. [`fused`] is the guard over the
//! floor's progress layer over the trivial inner service (guard -> progress ->
//! trivial): the progress layer finds no context in the extensions and passes through,
//! as it does for a GET in the floor stack.
//!
//! What the guard keeps, because a correct fused guard must (the same work as the
//! floor stack on the success path):
//! - the key layer's check that the method is idempotent (a request that is not gets a
//!   key header and the call a `keyed` mark, kept in the future);
//! - ONE registry lookup per call for the origin (one read lock, one hash lookup, a
//!   compare of the origin bytes, one `Arc` clone), whose entry ([`Origin`]) holds
//!   both the breaker's state and window and the budget's withdrawals and window; the
//!   `Arc` is kept in the future, for the answer and for a retry's withdrawal;
//! - the breaker's admission with one atomic load;
//! - TWO clock reads, as in the floor stack: one at the call's start for the budget's
//!   deposit (one relaxed `fetch_add`), one when the answer arrives for the breaker's
//!   outcome (one relaxed `fetch_add`). One read would not be equivalent: a deposit
//!   made at the answer's time lets in-flight calls pay for no retry, and an outcome
//!   counted at the call's start lands a long call in a second that may already have
//!   left the window. So the fused guard saves no clock read;
//! - the same head copy ([`FlatHead`]: ONE flat heap buffer holding the real bytes)
//!   before the first attempt, a clone of the body (`Full<Bytes>`, an `Option<Bytes>`
//!   clone), and the ready inner service kept in the future for a later attempt (the
//!   service driven to readiness serves the first attempt, a clone stays in the guard);
//! - the same classification (is it a 5xx?) and the same retry sketch: the request is
//!   rebuilt from the flat head, checked idempotent or keyed, and a token is withdrawn
//!   from the origin's budget; the breaker, as in the floor stack where it sits above
//!   the retry layer, admits once per call and counts only the call's last answer.
//!
//! What the fused design no longer has to do, and so the floor does not do: no
//! extensions insert at all (no extensions map allocated, no context), no second
//! registry lookup, no boxed copy of a context for a later attempt, no `Arc` clone
//! of the retry configuration into the future (the number of retries left and the
//! registry's start instant are copied into it), three layers' `poll_ready` and
//! futures folded into one.
//!
//! What is left out, as in the floor (see `floor.rs` for each): no replay wrapper
//! around the body, no window rotation (eight counters indexed by the second), no
//! half-open probing, no bounded registry, no deadline, route, observer, policy lookup,
//! `Retry-After` or backoff timer, no error type of backstop's ([`Error`] is the
//! floor's), the floor's cheap hash and one-tier registry.
//!
//! Why it is a floor for the fused design: every item kept is something a correct
//! fused guard cannot skip on a GET answered 200 at once (it cannot know the answer
//! will be a 200, so it copies the head; it must find the origin's state to admit and
//! deposit; it must count the outcome), and each is done the cheapest way the floor
//! stack does it. `benches/instructions.rs` (`fused_check`) checks the guard does that
//! work: the head comes back byte for byte on a retried 5xx, a 5xx is retried, a
//! non-idempotent request is keyed and retried with the same key, the counts land in
//! the one entry, an open breaker refuses, and nothing is put in the extensions.

use std::convert::Infallible;
use std::future::Future;
use std::mem;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http::header::HeaderValue;
use http::{Request, Response};
use http_body_util::Full;
use pin_project_lite::pin_project;
use tokio::time::Instant;
use tower::{Layer, Service};

use super::floor::{
    idempotent, Ctx, Entry, Error, FlatHead, Keyed, ProgressLayer, Registry, CLOSED, FAILURE,
};
use super::{Res, Trivial};

type Req = Request<Full<Bytes>>;

/// The fused guard over the floor's progress layer over the trivial inner service.
pub fn fused() -> impl Service<Req, Response = Res, Error = Error> + Clone {
    tower::ServiceBuilder::new()
        .layer(GuardLayer::new(2))
        .layer(ProgressLayer)
        .service(Trivial)
}

/// One origin's state for the fused guard: the breaker's part (the origin's bytes, the
/// open mark, the window of outcomes) and the budget's (withdrawals, the window of
/// deposits), in ONE allocation found by ONE lookup.
pub struct Origin {
    breaker: Entry,
    budget: Entry,
}

impl Keyed for Origin {
    fn new(scheme: &[u8], authority: &[u8]) -> Self {
        Origin {
            breaker: Entry::new(scheme, authority),
            budget: Entry::unnamed(),
        }
    }
    fn is(&self, scheme: &[u8], authority: &[u8]) -> bool {
        self.breaker.is(scheme, authority)
    }
}

/// What every clone of a guard shares: the registry and the configuration.
struct Shared {
    registry: Registry<Origin>,
    retries: u32,
    /// A head larger than this is not kept, and the call is not retried.
    head_limit: usize,
}

/// The fused guard's layer.
#[derive(Clone)]
pub struct GuardLayer {
    shared: Arc<Shared>,
}

impl GuardLayer {
    pub fn new(retries: u32) -> Self {
        GuardLayer {
            shared: Arc::new(Shared {
                registry: Registry::new(),
                retries,
                head_limit: 4096,
            }),
        }
    }
}

impl<S> Layer<S> for GuardLayer {
    type Service = Guard<S>;
    fn layer(&self, inner: S) -> Guard<S> {
        Guard {
            shared: self.shared.clone(),
            inner,
        }
    }
}

/// The fused guard: key check, breaker admission, budget deposit and the head copy at
/// the call; classification, breaker outcome and the retry sketch in its one future.
#[derive(Clone)]
pub struct Guard<S> {
    shared: Arc<Shared>,
    inner: S,
}

static NEXT_KEY: AtomicU64 = AtomicU64::new(1);

impl<S> Service<Req> for Guard<S>
where
    S: Service<Req, Response = Res> + Clone,
    S::Error: Into<Error>,
{
    type Response = Res;
    type Error = Error;
    type Future = GuardFuture<S, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut req: Req) -> Self::Future {
        // The key layer's work: a request that is not idempotent gets a key, before the
        // head is copied so that a retry sends the same key.
        let keyed = !idempotent(req.method());
        if keyed {
            let key = HeaderValue::from(NEXT_KEY.fetch_add(1, Relaxed));
            req.headers_mut().insert("idempotency-key", key);
        }
        // The breaker's and the budget's work: one lookup, one load to admit, one clock
        // read and one add to deposit.
        let shared = &*self.shared;
        let origin = shared.registry.lookup(req.uri());
        if origin.breaker.state.load(Relaxed) != CLOSED {
            return GuardFuture::Refused;
        }
        let born = shared.registry.born;
        origin.budget.count(born, Instant::now(), 1);
        // The retry layer's work: the head and the body kept, and the service driven
        // to readiness serves the first attempt; the future keeps it for a later one.
        let head = FlatHead::copy(&req, shared.head_limit);
        let body = req.body().clone();
        let clone = self.inner.clone();
        let mut inner = mem::replace(&mut self.inner, clone);
        let attempt = inner.call(req);
        GuardFuture::Called {
            state: State::Attempt { attempt },
            kept: Kept {
                inner,
                head,
                body,
                origin,
                born,
                left: shared.retries,
                keyed,
            },
        }
    }
}

/// What the guard's future keeps for the answer and for a later attempt.
pub struct Kept<S> {
    inner: S,
    head: Option<FlatHead>,
    body: Full<Bytes>,
    origin: Arc<Origin>,
    born: Instant,
    left: u32,
    keyed: bool,
}

pin_project! {
    /// The fused guard's response future.
    #[project = GuardProj]
    pub enum GuardFuture<S, F> {
        // The call was admitted.
        Called { #[pin] state: State<F>, kept: Kept<S> },
        // The breaker is open: the call was never made.
        Refused,
    }
}

pin_project! {
    #[project = StateProj]
    pub enum State<F> {
        // Waits for an attempt's answer.
        Attempt { #[pin] attempt: F },
        // Waits for the inner service to be ready for the next attempt, whose request
        // is then rebuilt from the head.
        Readying,
    }
}

impl<S> Future for GuardFuture<S, S::Future>
where
    S: Service<Req, Response = Res>,
    S::Error: Into<Error>,
{
    type Output = Result<Res, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let (mut state, kept) = match self.project() {
            GuardProj::Called { state, kept } => (state, kept),
            GuardProj::Refused => return Poll::Ready(Err(Error::Open)),
        };
        loop {
            match state.as_mut().project() {
                StateProj::Attempt { attempt } => {
                    let res = ready!(attempt.poll(cx)).map_err(Into::into);
                    // The minimal classification: only a 5xx is worth another attempt.
                    let failed = match &res {
                        Ok(res) => res.status().is_server_error(),
                        Err(_) => true,
                    };
                    if failed && res.is_ok() && kept.left > 0 && may_retry(kept) {
                        kept.left -= 1;
                        state.set(State::Readying);
                        continue;
                    }
                    // The call's last answer: the breaker counts it.
                    let add = 1 + u64::from(failed) * FAILURE;
                    kept.origin.breaker.count(kept.born, Instant::now(), add);
                    kept.head = None;
                    return Poll::Ready(res);
                }
                StateProj::Readying => {
                    if ready!(kept.inner.poll_ready(cx)).is_err() {
                        return Poll::Ready(Err(Error::Inner));
                    }
                    // The head came from a request, so it parses again.
                    let Some(req) = kept
                        .head
                        .as_ref()
                        .and_then(|h| h.rebuild(kept.body.clone()))
                    else {
                        return Poll::Ready(Err(Error::Inner));
                    };
                    let attempt = kept.inner.call(req);
                    state.set(State::Attempt { attempt });
                }
            }
        }
    }
}

/// Whether the call may be retried: a head was kept, the method is idempotent or the
/// request keyed, and the origin's budget has a token.
fn may_retry<S>(kept: &Kept<S>) -> bool {
    let Some(head) = &kept.head else { return false };
    if !kept.keyed && !head.method().is_some_and(|m| idempotent(&m)) {
        return false;
    }
    kept.origin.budget.withdraw()
}

/// Checks that the fused guard does the work it claims, panicking if not: a 5xx is
/// retried and the retried request's head is the original's byte for byte; a POST is
/// keyed and retried with the same key; nothing goes into the extensions; the
/// deposits, the withdrawals and the outcomes land in the one entry of the origin; an
/// open breaker refuses without calling the inner service.
pub fn check() {
    // An inner service that answers 503 to the first request of each method, then 200,
    // and keeps the heads it saw.
    type Seen = Arc<Mutex<Vec<http::request::Parts>>>;
    #[derive(Clone)]
    struct Flaky(Seen);
    impl Service<Req> for Flaky {
        type Response = Res;
        type Error = Infallible;
        type Future = std::future::Ready<Result<Res, Infallible>>;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, req: Req) -> Self::Future {
            assert!(req.extensions().is_empty(), "the guard inserts nothing");
            assert!(req.extensions().get::<Ctx>().is_none());
            let (parts, _) = req.into_parts();
            let mut seen = self.0.lock().unwrap();
            let first = !seen.iter().any(|p| p.method == parts.method);
            seen.push(parts);
            let mut res = Response::new(Full::default());
            if first {
                *res.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
            }
            std::future::ready(Ok(res))
        }
    }
    let seen: Seen = Arc::default();
    let layer = GuardLayer::new(2);
    let mut svc = tower::ServiceBuilder::new()
        .layer(layer.clone())
        .layer(ProgressLayer)
        .service(Flaky(seen.clone()));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    use tower::ServiceExt;
    rt.block_on(async {
        // The first call's deposit lets the budget pay for its one retry.
        for _ in 0..10 {
            let res = svc.ready().await.unwrap().call(super::request()).await;
            assert_eq!(res.unwrap().status(), 200);
        }
    });
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 11, "one 503 retried, then ten 200s");
        let want = super::request();
        for head in &seen[..2] {
            assert_eq!(head.method, *want.method());
            assert_eq!(head.uri, *want.uri());
            assert_eq!(head.version, want.version());
            assert_eq!(head.headers, *want.headers());
        }
    }
    let origin = layer.shared.registry.lookup(super::request().uri());
    let sum = |e: &Entry| -> u64 { e.window.iter().map(|s| s.load(Relaxed)).sum() };
    assert_eq!(sum(&origin.budget), 10, "ten deposits, one per call");
    assert_eq!(origin.budget.state.load(Relaxed), 10, "one withdrawal");
    assert_eq!(sum(&origin.breaker), 10, "ten last answers, none failed");

    // A POST: keyed, retried with the same key (and the same head).
    let post = || {
        let mut req = super::request();
        *req.method_mut() = http::Method::POST;
        req
    };
    rt.block_on(async {
        for _ in 0..2 {
            let res = svc.ready().await.unwrap().call(post()).await;
            assert_eq!(res.unwrap().status(), 200);
        }
    });
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 14, "the POST's 503 retried, then a 200");
        let (a, b) = (&seen[11], &seen[12]);
        assert_eq!(a.method, http::Method::POST);
        assert!(a.headers.contains_key("idempotency-key"));
        assert_eq!(a.headers, b.headers, "the retry carries the same key");
        assert_eq!(a.uri, b.uri);
        assert_ne!(
            seen[13].headers["idempotency-key"], a.headers["idempotency-key"],
            "a new call, a new key"
        );
    }

    // An open breaker refuses, and the inner service is not called.
    origin.breaker.state.store(CLOSED + 1, Relaxed);
    rt.block_on(async {
        let res = svc.ready().await.unwrap().call(super::request()).await;
        assert!(matches!(res, Err(Error::Open)));
    });
    assert_eq!(
        seen.lock().unwrap().len(),
        14,
        "refused before the inner service"
    );
    println!("fused check: ok");
}
