//! A floor for the success path: hand-written layers that do only the work any
//! correct implementation of backstop's design must do on a GET answered 200 at once,
//! so that what backstop's stack adds can be set against what such a stack cannot
//! avoid adding.
//!
//! The design being floored: separate `tower::Service` layers, each with its own
//! response future (pin-project-lite, no `async` blocks, no boxed futures), that talk
//! only through ONE value in the request's `http::Extensions` ([`Ctx`]). The stack is
//! [`stack`]: key -> breaker -> budget -> retry -> progress -> the trivial inner
//! service; [`retry`] is the retry layer alone.
//!
//! What every layer keeps, because a correct layer must:
//! - the retry layer copies the request head before the first attempt (it cannot know
//!   the answer will be a 200) into ONE flat heap buffer holding the real bytes, keeps
//!   the ready inner service and its configuration for a later attempt, and classifies
//!   the answer (is it a 5xx?);
//! - in the stack, the retry layer also keeps a copy of the call's context (one `Box`,
//!   its `Arc` handles cloned), since a later attempt's request needs it;
//! - the breaker and the budget each find the call's origin in a shared registry (one
//!   read lock, one hash lookup, a compare of the origin bytes, one `Arc` clone), and
//!   leave their handle in the one context (one `get_or_insert_default`: the first
//!   allocates the extensions map and the context, the second finds it); the breaker
//!   keeps a second handle in its future, for the answer;
//! - the breaker admits with one atomic load, and on the answer reads the clock once
//!   and counts the outcome with one relaxed `fetch_add` in a window slot;
//! - the budget reads the clock once and deposits with one relaxed `fetch_add`;
//! - the key layer checks the method is idempotent; the progress layer reads the
//!   context and, finding no per-attempt record for a GET, passes through.
//!
//! What is left out, so that a reader can judge it is a floor and not a straw man:
//! - no replay wrapper around the body: `Full<Bytes>` goes straight to the inner
//!   service, and the retry layer keeps a clone of it (an `Option<Bytes>` clone, free for
//!   the GET's empty body). backstop's `ReplayBody` works for any body and puts a shared
//!   replay state behind every attempt's body; the floor pays none of that;
//! - no sliding-window rotation: the window is eight counters indexed by the second,
//!   never cleared when a second comes round again (a real window also compares the
//!   slot's epoch: one more load per answer); no half-open probing (an open breaker
//!   simply refuses); no bounded registry (origins are never forgotten); a hash
//!   collision gets an unshared entry instead of a chain;
//! - one clock read each in the budget and in the breaker, as in backstop (whose retry
//!   layer shares the budget's read through the context), no deadline, no route, no observer, no policy lookup in
//!   the extensions, no `Retry-After` parsing, no error classification beyond `5xx`;
//! - the retry path is sketched so that the kept head and context are really used (the
//!   request is rebuilt from the flat head, checked idempotent or keyed, a token is
//!   withdrawn from the budget), but there is no backoff timer, no deadline and no
//!   history: none of it is on the success path;
//! - no error type of backstop's: [`Error`] has two variants and no source chain;
//! - the cheapest plausible lookup: a word-at-a-time hash the map uses as it is (not
//!   hashed again, not keyed against flooding), and no per-thread or per-clone cache in
//!   front of the lock (the one-tier registry the design asks for).
//!
//! What remains is, by construction, the price of the design itself (separate layers,
//! one context in the extensions, a head copied before the first attempt): going below
//! it takes another design (fewer layers, a fused guard, no extensions), not a leaner
//! layer. `benches/instructions.rs` (`floor_check`) checks that the floor does the work
//! it claims: the head comes back byte for byte and a 5xx is retried. The floor of a
//! fused guard is `benches/common/floor_fused.rs`, built from this file's pieces.

use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::hash::{BuildHasherDefault, Hasher};
use std::mem;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, PoisonError, RwLock};
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{Method, Request, Response, Uri, Version};
use http_body_util::Full;
use pin_project_lite::pin_project;
use tokio::time::Instant;
use tower::{Layer, Service};

use super::{Res, Trivial};

type Req = Request<Full<Bytes>>;

/// The retry layer alone over the trivial inner service.
pub fn retry() -> impl Service<Req, Response = Res, Error = Error> + Clone {
    RetryLayer::new(2).layer(Trivial)
}

/// The whole floor stack: key -> breaker -> budget -> retry -> progress -> trivial.
pub fn stack() -> impl Service<Req, Response = Res, Error = Error> + Clone {
    tower::ServiceBuilder::new()
        .layer(KeyLayer)
        .layer(BreakerLayer::new())
        .layer(BudgetLayer::new())
        .layer(RetryLayer::new(2))
        .layer(ProgressLayer)
        .service(Trivial)
}

/// The stack without the key layer, then without the breaker, then without the
/// budget: what each layer adds, from the instruction driver.
#[allow(clippy::type_complexity)]
pub fn partial() -> (
    impl Service<Req, Response = Res, Error = Error> + Clone,
    impl Service<Req, Response = Res, Error = Error> + Clone,
    impl Service<Req, Response = Res, Error = Error> + Clone,
) {
    let retry = RetryLayer::new(2).layer(ProgressLayer.layer(Trivial));
    let budget = BudgetLayer::new().layer(retry.clone());
    let breaker = BreakerLayer::new().layer(budget.clone());
    (retry, budget, breaker)
}

/// What the floor's layers refuse with. The inner service's error (here
/// `Infallible`) converts into it for free.
#[derive(Debug)]
pub enum Error {
    /// The breaker of the call's origin is open.
    Open,
    /// The inner service failed to get ready for a later attempt.
    Inner,
}

impl From<Infallible> for Error {
    fn from(never: Infallible) -> Self {
        match never {}
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Open => f.write_str("circuit open"),
            Error::Inner => f.write_str("inner service failed"),
        }
    }
}

impl std::error::Error for Error {}

/// The ONE value the layers share through the request's extensions: what the outer
/// layers give the inner ones.
#[derive(Clone, Default)]
pub struct Ctx {
    breaker: Option<Arc<Entry>>,
    budget: Option<Arc<Entry>>,
    /// The idempotency key layer gave the request a key.
    keyed: bool,
    /// The per-attempt wire record, only where write safety depends on it (never for a
    /// GET); the progress layer fills it in.
    attempt: Option<Arc<AtomicU64>>,
}

pub(super) fn idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

// ---------------------------------------------------------------------------------
// The per-origin registry, one per breaker layer and one per budget layer.

/// One origin's state: the origin's bytes (to confirm a hash hit), a state word (the
/// breaker's open mark, the budget's withdrawals) and a window of eight one-second
/// counters.
pub struct Entry {
    origin: Box<[u8]>,
    pub(super) state: AtomicU64,
    pub(super) window: [AtomicU64; 8],
}

/// A failure counts in the high half of a window slot, an outcome in the low half.
pub(super) const FAILURE: u64 = 1 << 32;

impl Entry {
    pub(super) fn new(scheme: &[u8], authority: &[u8]) -> Self {
        let mut origin = Vec::with_capacity(scheme.len() + 3 + authority.len());
        origin.extend_from_slice(scheme);
        origin.extend_from_slice(b"://");
        origin.extend_from_slice(authority);
        Entry {
            origin: origin.into_boxed_slice(),
            state: AtomicU64::new(0),
            window: Default::default(),
        }
    }

    /// An entry that keeps no origin bytes (no allocation), for a part of a larger
    /// entry that keeps them once (the fused floor's).
    pub(super) fn unnamed() -> Self {
        Entry {
            origin: Box::default(),
            state: AtomicU64::new(0),
            window: Default::default(),
        }
    }

    pub(super) fn is(&self, scheme: &[u8], authority: &[u8]) -> bool {
        let o = &self.origin[..];
        o.len() == scheme.len() + 3 + authority.len()
            && &o[..scheme.len()] == scheme
            && &o[scheme.len() + 3..] == authority
    }

    /// The window slot of `now`: one add, relaxed.
    pub(super) fn count(&self, born: Instant, now: Instant, add: u64) {
        let slot = now.saturating_duration_since(born).as_secs() as usize % 8;
        self.window[slot].fetch_add(add, Relaxed);
    }

    /// A retry's withdrawal from the budget: one token per ten deposits.
    pub(super) fn withdraw(&self) -> bool {
        let deposits: u64 = self
            .window
            .iter()
            .map(|s| s.load(Relaxed) & 0xffff_ffff)
            .sum();
        self.state.fetch_add(10, Relaxed) < deposits
    }
}

/// What a registry keeps per origin: made from the origin's bytes, and able to
/// confirm a hash hit against them.
pub trait Keyed {
    fn new(scheme: &[u8], authority: &[u8]) -> Self;
    fn is(&self, scheme: &[u8], authority: &[u8]) -> bool;
}

impl Keyed for Entry {
    fn new(scheme: &[u8], authority: &[u8]) -> Self {
        Entry::new(scheme, authority)
    }
    fn is(&self, scheme: &[u8], authority: &[u8]) -> bool {
        Entry::is(self, scheme, authority)
    }
}

/// The origins a layer has seen, keyed by a cheap hash of scheme and authority (the
/// map does not hash the hash again). The floor stack's layers keep an [`Entry`] per
/// origin; the fused floor keeps one entry holding both the breaker's and the budget's.
pub struct Registry<E = Entry> {
    pub(super) born: Instant,
    map: RwLock<HashMap<u64, Arc<E>, BuildHasherDefault<Prehashed>>>,
}

impl<E: Keyed> Registry<E> {
    pub(super) fn new() -> Self {
        Registry {
            born: Instant::now(),
            map: RwLock::new(HashMap::default()),
        }
    }

    /// One read lock, one lookup, one compare, one `Arc` clone on a hit; the first call
    /// to an origin takes the write lock once.
    pub(super) fn lookup(&self, uri: &Uri) -> Arc<E> {
        let scheme = uri.scheme_str().unwrap_or("").as_bytes();
        let authority = uri.authority().map_or("", |a| a.as_str()).as_bytes();
        let key = hash(scheme, authority);
        let hit = self
            .map
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
            .cloned();
        let entry = match hit {
            Some(entry) => entry,
            None => self
                .map
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(key)
                .or_insert_with(|| Arc::new(E::new(scheme, authority)))
                .clone(),
        };
        if entry.is(scheme, authority) {
            entry
        } else {
            // A collision: correct, unshared.
            Arc::new(E::new(scheme, authority))
        }
    }
}

/// A cheap hash of the scheme and the authority, eight bytes at a time (a multiply
/// and a rotate per word).
fn hash(scheme: &[u8], authority: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut h = (scheme.len() as u64) << 32 | authority.len() as u64;
    for part in [scheme, authority] {
        let mut chunks = part.chunks_exact(8);
        for word in &mut chunks {
            let word = u64::from_le_bytes(word.try_into().unwrap_or_default());
            h = (h ^ word).wrapping_mul(K).rotate_left(29);
        }
        let mut tail = [0u8; 8];
        tail[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
        h = (h ^ u64::from_le_bytes(tail))
            .wrapping_mul(K)
            .rotate_left(29);
    }
    h
}

/// The registry's keys are already hashes: the map uses them as they are.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only `u64` keys are hashed here; anything else still spreads.
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

// ---------------------------------------------------------------------------------
// The idempotency key layer.

/// The key layer: checks the method is idempotent and, on the success path of a GET,
/// does nothing else. A non-idempotent request gets a key header and the context's
/// `keyed` mark (off the floor's path, written so the check has a consequence).
#[derive(Clone, Copy)]
pub struct KeyLayer;

impl<S> Layer<S> for KeyLayer {
    type Service = Key<S>;
    fn layer(&self, inner: S) -> Key<S> {
        Key { inner }
    }
}

#[derive(Clone)]
pub struct Key<S> {
    inner: S,
}

static NEXT_KEY: AtomicU64 = AtomicU64::new(1);

impl<S> Service<Req> for Key<S>
where
    S: Service<Req, Response = Res>,
    S::Error: Into<Error>,
{
    type Response = Res;
    type Error = Error;
    type Future = Passthrough<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut req: Req) -> Self::Future {
        if !idempotent(req.method()) {
            let key = HeaderValue::from(NEXT_KEY.fetch_add(1, Relaxed));
            req.headers_mut().insert("idempotency-key", key);
            req.extensions_mut().get_or_insert_default::<Ctx>().keyed = true;
        }
        Passthrough {
            inner: self.inner.call(req),
        }
    }
}

pin_project! {
    /// The key layer's and the budget layer's response future: the inner future, its
    /// error converted.
    pub struct Passthrough<F> {
        #[pin]
        inner: F,
    }
}

impl<F, E> Future for Passthrough<F>
where
    F: Future<Output = Result<Res, E>>,
    E: Into<Error>,
{
    type Output = Result<Res, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().inner.poll(cx).map_err(Into::into)
    }
}

// ---------------------------------------------------------------------------------
// The circuit breaker layer.

/// The breaker: per call, finds the origin's entry, admits with one atomic load, and
/// leaves an `Arc` handle to the entry in the context; its future, on the answer,
/// reads the clock once and counts the outcome with one relaxed `fetch_add`.
#[derive(Clone)]
pub struct BreakerLayer {
    shared: Arc<Registry>,
}

impl BreakerLayer {
    pub fn new() -> Self {
        BreakerLayer {
            shared: Arc::new(Registry::new()),
        }
    }
}

impl<S> Layer<S> for BreakerLayer {
    type Service = Breaker<S>;
    fn layer(&self, inner: S) -> Breaker<S> {
        Breaker {
            shared: self.shared.clone(),
            inner,
        }
    }
}

#[derive(Clone)]
pub struct Breaker<S> {
    shared: Arc<Registry>,
    inner: S,
}

/// The breaker entry's state word: 0 is closed.
pub(super) const CLOSED: u64 = 0;

impl<S> Service<Req> for Breaker<S>
where
    S: Service<Req, Response = Res>,
    S::Error: Into<Error>,
{
    type Response = Res;
    type Error = Error;
    type Future = BreakerFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut req: Req) -> Self::Future {
        let entry = self.shared.lookup(req.uri());
        if entry.state.load(Relaxed) != CLOSED {
            return BreakerFuture::Refused;
        }
        req.extensions_mut().get_or_insert_default::<Ctx>().breaker = Some(entry.clone());
        BreakerFuture::Called {
            inner: self.inner.call(req),
            entry,
            born: self.shared.born,
        }
    }
}

pin_project! {
    /// The breaker's response future.
    #[project = BreakerProj]
    pub enum BreakerFuture<F> {
        // Waits for the answer, then counts it in the origin's window.
        Called { #[pin] inner: F, entry: Arc<Entry>, born: Instant },
        // The breaker is open: the call was never made.
        Refused,
    }
}

impl<F, E> Future for BreakerFuture<F>
where
    F: Future<Output = Result<Res, E>>,
    E: Into<Error>,
{
    type Output = Result<Res, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            BreakerProj::Called { inner, entry, born } => {
                let res = ready!(inner.poll(cx)).map_err(Into::into);
                let failed = match &res {
                    Ok(res) => res.status().is_server_error(),
                    Err(_) => true,
                };
                entry.count(*born, Instant::now(), 1 + u64::from(failed) * FAILURE);
                Poll::Ready(res)
            }
            BreakerProj::Refused => Poll::Ready(Err(Error::Open)),
        }
    }
}

// ---------------------------------------------------------------------------------
// The budget layer.

/// The budget: per call, finds the origin's entry in its own registry, reads the clock
/// once, deposits with one relaxed `fetch_add`, and leaves its `Arc` handle in the
/// context for the retry layer to withdraw from. Its future passes through.
#[derive(Clone)]
pub struct BudgetLayer {
    shared: Arc<Registry>,
}

impl BudgetLayer {
    pub fn new() -> Self {
        BudgetLayer {
            shared: Arc::new(Registry::new()),
        }
    }
}

impl<S> Layer<S> for BudgetLayer {
    type Service = Budget<S>;
    fn layer(&self, inner: S) -> Budget<S> {
        Budget {
            shared: self.shared.clone(),
            inner,
        }
    }
}

#[derive(Clone)]
pub struct Budget<S> {
    shared: Arc<Registry>,
    inner: S,
}

impl<S> Service<Req> for Budget<S>
where
    S: Service<Req, Response = Res>,
    S::Error: Into<Error>,
{
    type Response = Res;
    type Error = Error;
    type Future = Passthrough<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut req: Req) -> Self::Future {
        let entry = self.shared.lookup(req.uri());
        entry.count(self.shared.born, Instant::now(), 1);
        req.extensions_mut().get_or_insert_default::<Ctx>().budget = Some(entry);
        Passthrough {
            inner: self.inner.call(req),
        }
    }
}

// ---------------------------------------------------------------------------------
// The retry layer.

/// The retry layer's configuration, behind an `Arc` in the service as backstop's is.
pub struct Config {
    retries: u32,
    /// A head larger than this is not kept, and the call is not retried.
    head_limit: usize,
}

/// The retry layer: keeps the request head as one flat buffer, the body (`Full<Bytes>`
/// passes straight, a clone kept), the ready inner service with its configuration, and
/// in a stack a boxed copy of the call's context; its future classifies the answer
/// (5xx or not) and drops what it kept.
#[derive(Clone)]
pub struct RetryLayer {
    config: Arc<Config>,
}

impl RetryLayer {
    pub fn new(retries: u32) -> Self {
        RetryLayer {
            config: Arc::new(Config {
                retries,
                head_limit: 4096,
            }),
        }
    }
}

impl<S> Layer<S> for RetryLayer {
    type Service = Retry<S>;
    fn layer(&self, inner: S) -> Retry<S> {
        Retry {
            config: self.config.clone(),
            inner,
        }
    }
}

#[derive(Clone)]
pub struct Retry<S> {
    config: Arc<Config>,
    inner: S,
}

impl<S> Service<Req> for Retry<S>
where
    S: Service<Req, Response = Res> + Clone,
    S::Error: Into<Error>,
{
    type Response = Res;
    type Error = Error;
    type Future = RetryFuture<S, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let head = FlatHead::copy(&req, self.config.head_limit);
        let body = req.body().clone();
        let ctx = req.extensions().get::<Ctx>().map(|c| Box::new(c.clone()));
        // The service driven to readiness serves the first attempt; the future keeps it
        // (and the configuration) for a later one.
        let clone = self.clone();
        let mut svc = mem::replace(self, clone);
        let attempt = svc.inner.call(req);
        RetryFuture {
            state: State::Attempt { attempt },
            left: svc.config.retries,
            svc,
            head,
            body,
            ctx,
        }
    }
}

pin_project! {
    /// The retry layer's response future.
    pub struct RetryFuture<S, F> {
        #[pin]
        state: State<F>,
        svc: Retry<S>,
        head: Option<FlatHead>,
        body: Full<Bytes>,
        ctx: Option<Box<Ctx>>,
        left: u32,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F> {
        // Waits for an attempt's answer.
        Attempt { #[pin] attempt: F },
        // Waits for the inner service to be ready for the next attempt, whose request
        // is then rebuilt from the head (not kept here: the future stays small).
        Readying,
    }
}

impl<S> Future for RetryFuture<S, S::Future>
where
    S: Service<Req, Response = Res>,
    S::Error: Into<Error>,
{
    type Output = Result<Res, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Attempt { attempt } => {
                    let res = ready!(attempt.poll(cx)).map_err(Into::into);
                    // The minimal classification: only a 5xx is worth another attempt.
                    let again = match &res {
                        Ok(res) if res.status().is_server_error() && *this.left > 0 => {
                            may_retry(this.head, this.ctx)
                        }
                        _ => false,
                    };
                    if !again {
                        *this.head = None;
                        *this.ctx = None;
                        return Poll::Ready(res);
                    }
                    *this.left -= 1;
                    this.state.set(State::Readying);
                }
                StateProj::Readying => {
                    if ready!(this.svc.inner.poll_ready(cx)).is_err() {
                        return Poll::Ready(Err(Error::Inner));
                    }
                    // The head came from a request, so it parses again.
                    let Some(mut req) = this
                        .head
                        .as_ref()
                        .and_then(|h| h.rebuild(this.body.clone()))
                    else {
                        return Poll::Ready(Err(Error::Inner));
                    };
                    if let Some(ctx) = this.ctx {
                        req.extensions_mut().insert(Ctx::clone(ctx));
                    }
                    let attempt = this.svc.inner.call(req);
                    this.state.set(State::Attempt { attempt });
                }
            }
        }
    }
}

/// Whether the call may be retried: a head was kept, the method is idempotent or the
/// request keyed, and the budget (if any) has a token.
fn may_retry(head: &Option<FlatHead>, ctx: &Option<Box<Ctx>>) -> bool {
    let Some(head) = head else { return false };
    let keyed = ctx.as_ref().is_some_and(|c| c.keyed);
    if !keyed && !head.method().is_some_and(|m| idempotent(&m)) {
        return false;
    }
    let budget = ctx.as_ref().and_then(|c| c.budget.as_ref());
    budget.is_none_or(|b| b.withdraw())
}

/// A replayable copy of a request head in ONE heap buffer of its exact size:
/// `[version u8][method len u32][method][uri len u32][uri][count u32]` then, per header
/// value, `[sensitive u8][name len u32][name][value len u32][value]`, lengths
/// little-endian. Two passes over the headers: the exact size, then the bytes.
///
/// Left out against backstop's head: no check that the URI's text reads back equal
/// (backstop keeps odd URIs, a capitalised scheme say, as a clone instead), no stack
/// buffer (on this machine a zeroed 4 KiB array cost more than the second pass), and
/// the rebuilt head copies its bytes rather than sharing the buffer.
pub struct FlatHead(Vec<u8>);

impl FlatHead {
    /// The copy, or `None` if it would be longer than `limit`.
    pub fn copy<B>(req: &Request<B>, limit: usize) -> Option<FlatHead> {
        let uri = req.uri();
        let scheme = uri.scheme_str().unwrap_or("");
        let sep = if scheme.is_empty() { "" } else { "://" };
        let authority = uri.authority().map_or("", |a| a.as_str());
        let pq = uri.path_and_query().map_or("", |p| p.as_str());
        let uri_len = scheme.len() + sep.len() + authority.len() + pq.len();
        let method = req.method().as_str();
        let mut len = 1 + 4 + method.len() + 4 + uri_len + 4;
        for (name, value) in req.headers() {
            len += 9 + name.as_str().len() + value.len();
        }
        if len > limit {
            return None;
        }
        let mut buf = Vec::with_capacity(len);
        buf.push(match req.version() {
            Version::HTTP_09 => 0,
            Version::HTTP_10 => 1,
            Version::HTTP_2 => 3,
            Version::HTTP_3 => 4,
            _ => 2,
        });
        put(&mut buf, method.as_bytes());
        buf.extend_from_slice(&(uri_len as u32).to_le_bytes());
        for part in [scheme, sep, authority, pq] {
            buf.extend_from_slice(part.as_bytes());
        }
        buf.extend_from_slice(&(req.headers().len() as u32).to_le_bytes());
        for (name, value) in req.headers() {
            buf.push(u8::from(value.is_sensitive()));
            put(&mut buf, name.as_str().as_bytes());
            put(&mut buf, value.as_bytes());
        }
        debug_assert_eq!(buf.len(), len);
        Some(FlatHead(buf))
    }

    /// The request again, with `body`; `None` if the bytes do not parse (they always
    /// do, having come from a request).
    pub fn rebuild(&self, body: Full<Bytes>) -> Option<Req> {
        let (&version, mut rest) = self.0.split_first()?;
        let method = Method::from_bytes(take(&mut rest)?).ok()?;
        let uri = Uri::try_from(take(&mut rest)?).ok()?;
        let count = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
        rest = &rest[4..];
        let mut req = Request::new(body);
        *req.method_mut() = method;
        *req.uri_mut() = uri;
        *req.version_mut() = match version {
            0 => Version::HTTP_09,
            1 => Version::HTTP_10,
            3 => Version::HTTP_2,
            4 => Version::HTTP_3,
            _ => Version::HTTP_11,
        };
        let headers = req.headers_mut();
        headers.reserve(count);
        for _ in 0..count {
            let (&sensitive, tail) = rest.split_first()?;
            rest = tail;
            let name = HeaderName::from_bytes(take(&mut rest)?).ok()?;
            let mut value = HeaderValue::from_bytes(take(&mut rest)?).ok()?;
            value.set_sensitive(sensitive != 0);
            headers.append(name, value);
        }
        Some(req)
    }

    /// The kept method.
    pub fn method(&self) -> Option<Method> {
        let mut rest = self.0.get(1..)?;
        Method::from_bytes(take(&mut rest)?).ok()
    }

    /// The buffer's length in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }
}

fn put(buf: &mut Vec<u8>, bytes: &[u8]) {
    buf.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    buf.extend_from_slice(bytes);
}

fn take<'a>(rest: &mut &'a [u8]) -> Option<&'a [u8]> {
    let len = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
    let bytes = rest.get(4..4 + len)?;
    *rest = &rest[4 + len..];
    Some(bytes)
}

// ---------------------------------------------------------------------------------
// The progress layer.

/// The progress layer: reads the context for the attempt's wire record; a GET has
/// none, so it passes through. With a record, its future marks the attempt answered.
#[derive(Clone, Copy)]
pub struct ProgressLayer;

impl<S> Layer<S> for ProgressLayer {
    type Service = Progress<S>;
    fn layer(&self, inner: S) -> Progress<S> {
        Progress { inner }
    }
}

#[derive(Clone)]
pub struct Progress<S> {
    inner: S,
}

/// The attempt record's bit for "the head of an answer came back".
const ANSWERED: u64 = 1;

impl<S> Service<Req> for Progress<S>
where
    S: Service<Req, Response = Res>,
    S::Error: Into<Error>,
{
    type Response = Res;
    type Error = Error;
    type Future = ProgressFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let record = req
            .extensions()
            .get::<Ctx>()
            .and_then(|c| c.attempt.clone());
        ProgressFuture {
            inner: self.inner.call(req),
            record,
        }
    }
}

pin_project! {
    /// The progress layer's response future.
    pub struct ProgressFuture<F> {
        #[pin]
        inner: F,
        record: Option<Arc<AtomicU64>>,
    }
}

impl<F, E> Future for ProgressFuture<F>
where
    F: Future<Output = Result<Res, E>>,
    E: Into<Error>,
{
    type Output = Result<Res, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let res = ready!(this.inner.poll(cx)).map_err(Into::into);
        if let Some(record) = this.record {
            record.fetch_or(ANSWERED, Relaxed);
        }
        Poll::Ready(res)
    }
}

/// Checks that the floor does what it claims: the flat head gives back the request
/// byte for byte, and the stack retries a 5xx with the rebuilt request (context
/// included) and returns the 200 that follows. Panics if not.
pub fn check() {
    let req = super::request();
    let head = FlatHead::copy(&req, 4096).expect("the bench request fits");
    let again = head.rebuild(Full::default()).expect("the head parses");
    assert_eq!(again.method(), req.method());
    assert_eq!(again.uri(), req.uri());
    assert_eq!(again.version(), req.version());
    assert_eq!(again.headers(), req.headers());
    assert!(FlatHead::copy(&req, head.len() - 1).is_none());
    let mut secret = super::request();
    let mut token = HeaderValue::from_static("Bearer x");
    token.set_sensitive(true);
    secret.headers_mut().insert("authorization", token);
    let back = FlatHead::copy(&secret, 4096)
        .and_then(|h| h.rebuild(Full::default()))
        .expect("the head parses");
    assert_eq!(back.headers(), secret.headers());
    assert!(back.headers()["authorization"].is_sensitive());
    assert!(!back.headers()["accept"].is_sensitive());

    // An inner service that answers 503 once, then 200, and sees the context.
    #[derive(Clone)]
    struct Flaky(Arc<AtomicU64>);
    impl Service<Req> for Flaky {
        type Response = Res;
        type Error = Infallible;
        type Future = std::future::Ready<Result<Res, Infallible>>;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, req: Req) -> Self::Future {
            let ctx = req.extensions().get::<Ctx>().expect("the context");
            assert!(ctx.breaker.is_some() && ctx.budget.is_some());
            assert_eq!(req.headers().len(), 2);
            let mut res = Response::new(Full::default());
            if self.0.fetch_add(1, Relaxed) == 0 {
                *res.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
            }
            std::future::ready(Ok(res))
        }
    }
    let calls = Arc::new(AtomicU64::new(0));
    let mut svc = tower::ServiceBuilder::new()
        .layer(KeyLayer)
        .layer(BreakerLayer::new())
        .layer(BudgetLayer::new())
        .layer(RetryLayer::new(2))
        .layer(ProgressLayer)
        .service(Flaky(calls.clone()));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        use tower::ServiceExt;
        // The first call's deposit lets the budget pay for its one retry.
        for _ in 0..10 {
            let res = svc.ready().await.unwrap().call(super::request()).await;
            assert_eq!(res.unwrap().status(), 200);
        }
    });
    assert_eq!(calls.load(Relaxed), 11, "one 503 retried, then ten 200s");
    println!("floor check: ok (head {} bytes)", head.len());
}
