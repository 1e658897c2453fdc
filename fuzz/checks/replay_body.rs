//! `replay_body`: a scripted original body (chunks of any size, empty chunks,
//! pending polls, trailers or an error at the end, an exact, unknown or lying size
//! hint, an honest or silent end), an arbitrary replay cap and 2 to 5 attempts
//! through the retry layer. The inner service answers 425 Too Early (retried for
//! every method) until the last attempt; each attempt reads an arbitrary number of
//! frames of its reader, and every earlier reader (a stale attempt still writing) is
//! polled again before it. Checked against a model of the documented behaviour:
//!
//! - every reader's data is a prefix of the original's; a reader that ends yields
//!   all of it, then the original's trailers, and only if the original did not fail;
//! - `replayable()` is `Ok` exactly when the body started empty, or readers were
//!   given nothing past the first chunk that crossed the cap (a chunk begun under
//!   the cap is kept whole; within the cap when no chunk crosses it) and the
//!   original did not fail, whatever its size hint announced; the layer sends the
//!   next attempt exactly then;
//! - the original is pulled once: a reader of an earlier attempt, polled after a
//!   later attempt began, errs at the front rather than pull, nor is given bytes no
//!   reader had (so it cannot take the rest of the body away from the later
//!   attempt, nor push it past the cap);
//! - with an honest exact size hint, every reader's hint is exact and counts the
//!   bytes it has left;
//! - no lost wake-up: once the original's pending poll is released (or at once,
//!   when the original woke its waker before returning `Pending`), every reader
//!   that returned `Pending` has been woken.

use std::convert::Infallible;
use std::future::{ready, Future, Ready};
use std::io;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use backstop::policy::{History, StopReason};
use backstop::{ReplayBody, RetryLayer, RetryPolicy};
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::Empty;
use tower_layer::Layer;
use tower_service::Service;

use super::input::Input;

#[derive(Clone, Debug)]
enum Event {
    Data(Bytes),
    /// `Pending` until the harness releases it, waking the waker it was given.
    Pending,
    /// `Pending` once, having woken its waker at once (a body that yields).
    Yield,
    Error,
    Trailers(HeaderMap),
}

#[derive(Clone, Copy, Debug)]
enum Hint {
    Exact,
    Unknown,
    Lying { lower: u64, upper: Option<u64> },
}

/// Everything decoded from the input.
#[derive(Debug)]
struct Plan {
    events: Vec<Event>,
    hint: Hint,
    honest_end: bool,
    cap: usize,
    attempts: u32,
    /// Per attempt: polls of each earlier reader, then frames of the new one.
    stale_polls: Vec<Vec<usize>>,
    frames: Vec<usize>,
    /// Whether each `Pending` is released at once; exhausted means yes.
    releases: Vec<bool>,
}

fn plan(data: &[u8]) -> Plan {
    let mut input = Input::new(data);
    let cap = match input.u8() {
        255 => 64 * 1024,
        n => usize::from(n),
    };
    let hint = match input.u8() % 3 {
        0 => Hint::Exact,
        1 => Hint::Unknown,
        _ => {
            let lower = u64::from(input.u16());
            let upper = input
                .bool()
                .then(|| lower.saturating_add(u64::from(input.u16())));
            Hint::Lying { lower, upper }
        }
    };
    let honest_end = input.bool();
    let attempts = 2 + input.upto(3) as u32;
    let mut events = Vec::new();
    let mut offset = 0usize;
    for _ in 0..input.upto(16) {
        match input.u8() % 10 {
            0..=3 => {
                let len = input.upto(64);
                let bytes: Vec<u8> = (offset..offset + len).map(|i| (i * 7 + 3) as u8).collect();
                offset += len;
                events.push(Event::Data(Bytes::from(bytes)));
            }
            4 => events.push(Event::Data(Bytes::new())),
            5 | 6 => events.push(Event::Pending),
            9 => events.push(Event::Yield),
            7 => {
                events.push(Event::Error);
                break;
            }
            _ => {
                let mut trailers = HeaderMap::new();
                for i in 0..input.upto(2) {
                    trailers.append(
                        HeaderName::from_static(["x-sum", "x-check", "x-more"][i]),
                        HeaderValue::from(input.u16()),
                    );
                }
                events.push(Event::Trailers(trailers));
                break;
            }
        }
    }
    let mut stale_polls = Vec::new();
    let mut frames = Vec::new();
    for attempt in 0..attempts as usize {
        stale_polls.push((0..attempt).map(|_| input.upto(4)).collect());
        frames.push(input.upto(12));
    }
    let releases = input.take(64).iter().map(|b| b & 1 == 1).collect();
    Plan {
        events,
        hint,
        honest_end,
        cap,
        attempts,
        stale_polls,
        frames,
        releases,
    }
}

/// What the harness sees of the original body.
#[derive(Default)]
struct Original {
    /// The waker of a pending poll not released yet.
    armed: Option<Waker>,
    /// The pending poll was released: the next poll moves past it.
    released: bool,
    /// Data bytes the original has yielded.
    yielded: u64,
    /// The original yielded its error.
    failed: bool,
    /// The last poll of the original woke its waker and returned `Pending`.
    self_woke: bool,
}

struct ScriptBody {
    events: Vec<Event>,
    pos: usize,
    hint: Hint,
    honest_end: bool,
    seen: Arc<Mutex<Original>>,
    /// The `Yield` at `pos` returned `Pending` already.
    yielding: bool,
}

impl ScriptBody {
    fn remaining_data(&self) -> u64 {
        self.events[self.pos..]
            .iter()
            .map(|e| match e {
                Event::Data(b) => b.len() as u64,
                _ => 0,
            })
            .sum()
    }
}

impl Body for ScriptBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = &mut *self;
        loop {
            let Some(event) = this.events.get(this.pos).cloned() else {
                return Poll::Ready(None);
            };
            let mut seen = this.seen.lock().unwrap();
            seen.self_woke = false;
            match event {
                Event::Yield => {
                    if this.yielding {
                        this.yielding = false;
                        this.pos += 1;
                        continue;
                    }
                    this.yielding = true;
                    seen.self_woke = true;
                    drop(seen);
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                Event::Pending => {
                    if seen.released {
                        seen.released = false;
                        this.pos += 1;
                        continue;
                    }
                    seen.armed = Some(cx.waker().clone());
                    return Poll::Pending;
                }
                Event::Data(bytes) => {
                    this.pos += 1;
                    seen.yielded += bytes.len() as u64;
                    return Poll::Ready(Some(Ok(Frame::data(bytes))));
                }
                Event::Error => {
                    this.pos = this.events.len();
                    seen.failed = true;
                    return Poll::Ready(Some(Err(io::Error::other("script"))));
                }
                Event::Trailers(trailers) => {
                    this.pos = this.events.len();
                    return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.honest_end && self.pos >= self.events.len()
    }

    fn size_hint(&self) -> SizeHint {
        match self.hint {
            Hint::Exact => SizeHint::with_exact(self.remaining_data()),
            Hint::Unknown => SizeHint::new(),
            Hint::Lying { lower, upper } => {
                let mut hint = SizeHint::new();
                hint.set_lower(lower);
                if let Some(upper) = upper {
                    hint.set_upper(upper);
                }
                hint
            }
        }
    }
}

/// A waker that records that it was woken.
#[derive(Default)]
struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

struct Reader {
    body: ReplayBody<ScriptBody>,
    flag: Arc<Flag>,
    data: Vec<u8>,
    trailers: Option<HeaderMap>,
    ended: bool,
    errored: bool,
    /// The last poll returned `Pending` and the reader was not polled since.
    pending: bool,
}

/// The model and the readers, shared by the inner service and the check.
struct Harness {
    plan: Plan,
    seen: Arc<Mutex<Original>>,
    /// The original's data, its trailers, whether it fails.
    full: Vec<u8>,
    trailers: Option<HeaderMap>,
    fails: bool,
    starts_empty: bool,
    /// How far readers may be given the body and it stays replayable: the end of
    /// the first chunk that crosses the cap, or the cap when none does.
    kept_up_to: u64,
    readers: Vec<Reader>,
    calls: usize,
    release_at: usize,
}

impl Harness {
    fn release_now(&mut self) -> bool {
        let r = self
            .plan
            .releases
            .get(self.release_at)
            .copied()
            .unwrap_or(true);
        self.release_at += 1;
        r
    }

    fn release(&self) {
        let waker = {
            let mut seen = self.seen.lock().unwrap();
            let Some(waker) = seen.armed.take() else {
                return;
            };
            seen.released = true;
            waker
        };
        waker.wake();
    }

    fn model_replayable(&self) -> bool {
        let seen = self.seen.lock().unwrap();
        self.starts_empty || (self.front() <= self.kept_up_to && !seen.failed)
    }

    /// The most data any reader was given: readers' data are prefixes of one body.
    fn front(&self) -> u64 {
        self.readers
            .iter()
            .map(|r| r.data.len() as u64)
            .max()
            .unwrap_or(0)
    }

    fn check_wakeups(&self) {
        if self.seen.lock().unwrap().armed.is_some() {
            return;
        }
        for (i, r) in self.readers.iter().enumerate() {
            assert!(
                !r.pending || r.flag.0.load(Ordering::SeqCst),
                "lost wake-up: reader {i} returned Pending and was never woken",
            );
        }
    }

    /// Polls reader `i` once and checks what it yields.
    fn poll(&mut self, i: usize) {
        self.check_wakeups();
        let r = &mut self.readers[i];
        if r.ended || r.errored {
            return;
        }
        r.flag.0.store(false, Ordering::SeqCst);
        r.pending = false;
        let waker = Waker::from(Arc::clone(&r.flag));
        let mut cx = Context::from_waker(&waker);
        match Pin::new(&mut r.body).poll_frame(&mut cx) {
            Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) => {
                    assert!(r.trailers.is_none(), "reader {i}: data after trailers");
                    r.data.extend_from_slice(&data);
                    assert!(
                        self.full.starts_with(&r.data),
                        "reader {i}: {} bytes that are not a prefix of the original",
                        r.data.len(),
                    );
                }
                Err(frame) => {
                    let trailers = frame.into_trailers().expect("a data or trailers frame");
                    assert!(r.trailers.is_none(), "reader {i}: trailers twice");
                    assert_eq!(r.data, self.full, "reader {i}: trailers before the end");
                    assert_eq!(Some(&trailers), self.trailers.as_ref(), "reader {i}");
                    r.trailers = Some(trailers);
                }
            },
            Poll::Ready(Some(Err(_))) => r.errored = true,
            Poll::Ready(None) => {
                assert!(!self.fails, "reader {i} ended though the original failed");
                assert_eq!(r.data, self.full, "reader {i} ended early");
                assert_eq!(r.trailers, self.trailers, "reader {i}: trailers");
                r.ended = true;
            }
            Poll::Pending => {
                r.pending = true;
                let seen = self.seen.lock().unwrap();
                assert!(
                    seen.armed.is_some() || seen.self_woke,
                    "reader {i}: Pending while the original is not pending",
                );
                drop(seen);
                if self.release_now() {
                    self.release();
                }
            }
        }
        self.check_hints();
        self.check_wakeups();
    }

    fn check_hints(&self) {
        if !matches!(self.plan.hint, Hint::Exact) || self.fails {
            return;
        }
        for (i, r) in self.readers.iter().enumerate() {
            if r.ended || r.errored {
                continue;
            }
            let left = (self.full.len() - r.data.len()) as u64;
            assert_eq!(
                r.body.size_hint().exact(),
                Some(left),
                "reader {i}: size hint"
            );
        }
    }

    /// One attempt: earlier readers polled, then the new one read.
    fn attempt(&mut self, body: ReplayBody<ScriptBody>) -> StatusCode {
        let n = self.calls;
        self.calls += 1;
        assert!(
            n < self.plan.attempts as usize,
            "more attempts than allowed"
        );
        if n > 0 {
            assert!(
                self.model_replayable(),
                "attempt {n} sent for a body that is not replayable"
            );
        }
        let stale = self.plan.stale_polls[n].clone();
        let pulled = self.seen.lock().unwrap().yielded;
        let front = self.front();
        for (i, polls) in stale.into_iter().enumerate() {
            for _ in 0..polls {
                self.poll(i);
            }
        }
        assert_eq!(
            self.seen.lock().unwrap().yielded,
            pulled,
            "a reader of an earlier attempt pulled from the original"
        );
        assert_eq!(
            self.front(),
            front,
            "a reader of an earlier attempt was given bytes no reader had"
        );
        self.readers.push(Reader {
            body,
            flag: Arc::default(),
            data: Vec::new(),
            trailers: None,
            ended: false,
            errored: false,
            pending: false,
        });
        for _ in 0..self.plan.frames[n] {
            self.poll(n);
        }
        assert_eq!(
            self.readers[n].body.replayable().is_ok(),
            self.model_replayable(),
            "replayable() after attempt {n}",
        );
        if n + 1 < self.plan.attempts as usize {
            StatusCode::TOO_EARLY
        } else {
            StatusCode::OK
        }
    }
}

#[derive(Clone)]
struct Inner(Arc<Mutex<Harness>>);

impl Service<Request<ReplayBody<ScriptBody>>> for Inner {
    type Response = Response<Empty<Bytes>>;
    type Error = Infallible;
    type Future = Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<ReplayBody<ScriptBody>>) -> Self::Future {
        let status = self.0.lock().unwrap().attempt(req.into_body());
        let mut res = Response::new(Empty::new());
        *res.status_mut() = status;
        ready(Ok(res))
    }
}

pub fn check(data: &[u8]) {
    super::in_runtime(|| check_in_runtime(data));
}

/// The model of `replay_cap`: a non-empty chunk begun with the bytes before it
/// under the cap is kept whole; the first one begun at or past the cap reads the
/// body past it. So readers may be given up to the end of the first chunk that
/// crosses the cap (past it), or up to the cap when no chunk crosses it.
fn kept_up_to(events: &[Event], cap: u64) -> u64 {
    let mut start = 0u64;
    for event in events {
        let Event::Data(b) = event else { continue };
        if b.is_empty() {
            continue;
        }
        if start >= cap {
            break;
        }
        start += b.len() as u64;
        if start > cap {
            return start;
        }
    }
    cap
}

fn check_in_runtime(data: &[u8]) {
    let plan = plan(data);
    let seen = Arc::new(Mutex::new(Original::default()));
    let body = ScriptBody {
        events: plan.events.clone(),
        pos: 0,
        hint: plan.hint,
        honest_end: plan.honest_end,
        seen: Arc::clone(&seen),
        yielding: false,
    };
    let mut full = Vec::new();
    let mut trailers = None;
    let mut fails = false;
    for event in &plan.events {
        match event {
            Event::Data(b) => full.extend_from_slice(b),
            Event::Trailers(t) => trailers = Some(t.clone()),
            Event::Error => fails = true,
            Event::Pending | Event::Yield => {}
        }
    }
    let starts_empty = body.is_end_stream();
    let kept_up_to = kept_up_to(&plan.events, plan.cap as u64);
    let policy = RetryPolicy::builder()
        .max_attempts(plan.attempts)
        .backoff(Duration::ZERO, Duration::ZERO)
        .replay_cap(plan.cap)
        .build()
        .expect("a valid policy");
    let attempts = plan.attempts as usize;
    let harness = Arc::new(Mutex::new(Harness {
        plan,
        seen,
        full,
        trailers,
        fails,
        starts_empty,
        kept_up_to,
        readers: Vec::new(),
        calls: 0,
        release_at: 0,
    }));

    let mut svc = RetryLayer::new(policy).layer(Inner(Arc::clone(&harness)));
    let flag = Arc::new(Flag::default());
    let waker = Waker::from(flag);
    let mut cx = Context::from_waker(&waker);
    assert!(svc.poll_ready(&mut cx).is_ready());
    let req = Request::post("http://127.0.0.1/upload").body(body).unwrap();
    let mut call = pin!(svc.call(req));
    // The inner service answers at once and the backoff is zero: one poll ends it.
    let Poll::Ready(result) = call.as_mut().poll(&mut cx) else {
        panic!("the call did not end at once");
    };
    let res = result.expect("the call answers");

    let mut h = harness.lock().unwrap();
    let calls = h.calls;
    if calls < attempts {
        // Stopped early: only because the body could not be replayed.
        assert!(
            !h.model_replayable(),
            "stopped after {calls} attempts, body replayable"
        );
        assert_eq!(res.status(), StatusCode::TOO_EARLY);
        let stop = res
            .extensions()
            .get::<History>()
            .and_then(History::stop_reason);
        assert!(
            matches!(stop, Some(StopReason::BodyNotReplayable(_))),
            "stop reason {stop:?}",
        );
    } else {
        assert_eq!(res.status(), StatusCode::OK);
    }

    // Every reader read on to its end, releasing the original whenever it waits.
    h.plan.releases.clear();
    for i in 0..h.readers.len() {
        for _ in 0..2 * h.plan.events.len() + 4 {
            h.poll(i);
        }
        let r = &h.readers[i];
        assert!(r.ended || r.errored, "reader {i} neither ended nor failed");
    }
}
