//! The circuit breaker: its state machine against a model, probe slots under
//! cancellation and heavy concurrency, one outcome per call under the retry layer,
//! and real loopback upstreams that die, recover, or fail beside a healthy one.

use crate::support::shape::CircuitBreakerLayer;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use crate::support::requests::{call, get, head, paused};
use crate::support::script::{status, status_with, Reply, Script};
use crate::support::shape::Stack;
use backstop::circuit_breaker::{CircuitBreaker, CircuitBreakerPolicy, CircuitOpen, State};
use backstop::policy::{BreakerHandle, CallContext, StopReason};
use backstop::{Partition, RetryPolicy};
use bytes::Bytes;
use futures_util::FutureExt;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use proptest::prelude::*;
use tokio::sync::oneshot;
use tokio::time::{advance, Instant};
use tower::util::BoxCloneService;
use tower::{Layer, Service, ServiceExt};

type Res = Response<Full<Bytes>>;
type Client = BoxCloneService<Request<Full<Bytes>>, Response<Reply>, backstop::Error>;
/// A breaker over an upstream generic in its request body, boxed to name the body.
type Boxed = BoxCloneService<Request<Full<Bytes>>, Res, backstop::Error>;

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

fn response(code: u16) -> Res {
    let mut res = Response::new(Full::default());
    *res.status_mut() = StatusCode::from_u16(code).unwrap();
    res
}

/// A breaker that trips on `consecutive` failures (the ratio signal off), with a
/// fixed cooldown of `cooldown_ms` and no jitter.
fn breaker(consecutive: u32, cooldown_ms: u64) -> CircuitBreakerPolicy {
    crate::support::policies::breaker(consecutive, Duration::from_millis(cooldown_ms))
}

// ---------------------------------------------------------------------------------
// Tripping, refusing, probing

#[tokio::test(start_paused = true)]
async fn consecutive_failures_open_it_and_it_refuses_without_calling() {
    let upstream = Script::codes([503, 500, 0, 503]);
    let layer = CircuitBreakerLayer::new(breaker(3, 5_000));
    let mut svc = layer.layer(upstream.clone());
    assert_eq!(
        call(&mut svc, "http://a.test/").await.unwrap().status(),
        503
    );
    assert_eq!(
        call(&mut svc, "http://a.test/").await.unwrap().status(),
        500
    );
    let tripped_at = Instant::now();
    let err = call(&mut svc, "http://a.test/").await.unwrap_err();
    assert!(
        !err.is_circuit_open(),
        "a transport error passes through: {err}"
    );
    assert_eq!(layer.state(&head("http://a.test/")), State::Open);

    for _ in 0..100 {
        let err = call(&mut svc, "http://a.test/?token=s3cret")
            .await
            .unwrap_err();
        assert!(err.is_circuit_open());
        assert_eq!(err.stop_reason(), Some(StopReason::CircuitOpen));
        assert!(err.is_not_processed());
        assert_eq!(err.attempts(), 0);
        assert_eq!(
            err.next_probe_at(),
            Some(tripped_at + Duration::from_secs(5))
        );
        let text = err.to_string();
        assert_eq!(text, "call refused (circuit open)");
        let open = std::error::Error::source(&err)
            .unwrap()
            .downcast_ref::<CircuitOpen>()
            .unwrap();
        assert_eq!(open.state(), State::Open);
        assert_eq!(open.to_string(), "circuit open");
    }
    assert_eq!(
        upstream.calls(),
        3,
        "refused calls never reach the upstream"
    );
    assert_eq!(
        layer.next_probe_at(&head("http://a.test/")),
        Some(tripped_at + Duration::from_secs(5))
    );
}

#[tokio::test(start_paused = true)]
async fn a_success_breaks_the_run() {
    let upstream = Script::codes([503, 503, 200, 503, 503, 404, 503, 503]);
    let layer = CircuitBreakerLayer::new(breaker(3, 5_000));
    let mut svc = layer.layer(upstream.clone());
    for _ in 0..8 {
        call(&mut svc, "http://a.test/").await.unwrap();
    }
    assert_eq!(layer.state(&head("http://a.test/")), State::Closed);
    call(&mut svc, "http://a.test/").await.unwrap(); // 200
    assert_eq!(upstream.calls(), 9);
}

#[tokio::test(start_paused = true)]
async fn the_failure_ratio_opens_it_once_there_are_enough_calls() {
    // 50 % over at least 10 calls; the consecutive signal is off.
    let cfg = CircuitBreakerPolicy::builder()
        .failure_ratio(0.5)
        .min_calls(10)
        .consecutive_failures(0)
        .build()
        .unwrap();
    let upstream = Script::codes([200, 503, 200, 503, 200, 503, 200, 503, 200, 503]);
    let layer = CircuitBreakerLayer::new(cfg);
    let mut svc = layer.layer(upstream.clone());
    for i in 0..9 {
        call(&mut svc, "http://a.test/").await.unwrap();
        assert_eq!(
            layer.state(&head("http://a.test/")),
            State::Closed,
            "call {i}"
        );
    }
    // The tenth call: 5 failures out of 10.
    call(&mut svc, "http://a.test/").await.unwrap();
    assert_eq!(layer.state(&head("http://a.test/")), State::Open);
}

#[tokio::test(start_paused = true)]
async fn old_outcomes_leave_the_window() {
    let cfg = CircuitBreakerPolicy::builder()
        .failure_ratio(0.5)
        .min_calls(4)
        .consecutive_failures(0)
        .window(Duration::from_secs(10))
        .build()
        .unwrap();
    let upstream = Script::codes([503, 503, 503, 200, 503]);
    let layer = CircuitBreakerLayer::new(cfg);
    let mut svc = layer.layer(upstream);
    for _ in 0..3 {
        call(&mut svc, "http://a.test/").await.unwrap();
    }
    advance(Duration::from_secs(10)).await;
    // The three failures expired: 1 failure in 2 calls is below min_calls.
    call(&mut svc, "http://a.test/").await.unwrap();
    call(&mut svc, "http://a.test/").await.unwrap();
    assert_eq!(layer.state(&head("http://a.test/")), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn four_xx_never_counts() {
    let upstream = Script::codes((0..50).map(|i| [400, 404, 408, 409, 429][i % 5]));
    let layer = CircuitBreakerLayer::new(breaker(2, 1_000));
    let mut svc = layer.layer(upstream.clone());
    for _ in 0..50 {
        call(&mut svc, "http://a.test/").await.unwrap();
    }
    assert_eq!(layer.state(&head("http://a.test/")), State::Closed);
    assert_eq!(upstream.calls(), 50);
}

#[tokio::test(start_paused = true)]
async fn a_successful_probe_closes_it() {
    let upstream = Script::codes([503, 503]);
    let layer = CircuitBreakerLayer::new(breaker(2, 1_000));
    let mut svc = layer.layer(upstream.clone());
    call(&mut svc, "http://a.test/").await.unwrap();
    call(&mut svc, "http://a.test/").await.unwrap();
    let err = call(&mut svc, "http://a.test/").await.unwrap_err();
    tokio::time::sleep_until(err.next_probe_at().unwrap()).await;
    // The cooldown is over: the next call is the probe, and it succeeds.
    assert_eq!(
        call(&mut svc, "http://a.test/").await.unwrap().status(),
        200
    );
    assert_eq!(layer.state(&head("http://a.test/")), State::Closed);
    for _ in 0..10 {
        call(&mut svc, "http://a.test/").await.unwrap();
    }
    assert_eq!(upstream.calls(), 13);
}

#[tokio::test(start_paused = true)]
async fn a_failed_probe_reopens_it_for_twice_as_long() {
    let cfg = CircuitBreakerPolicy::builder()
        .consecutive_failures(1)
        .cooldown(Duration::from_secs(1))
        .max_cooldown(Duration::from_secs(3))
        .jitter(0.0)
        .build()
        .unwrap();
    let upstream = Script::codes([503; 5]);
    let layer = CircuitBreakerLayer::new(cfg);
    let mut svc = layer.layer(upstream.clone());
    call(&mut svc, "http://a.test/").await.unwrap();
    let mut cooldowns = Vec::new();
    for _ in 0..4 {
        let opened = Instant::now();
        let next = layer.next_probe_at(&head("http://a.test/")).unwrap();
        cooldowns.push((next - opened).as_millis());
        tokio::time::sleep_until(next - Duration::from_millis(1)).await;
        assert!(call(&mut svc, "http://a.test/")
            .await
            .unwrap_err()
            .is_circuit_open());
        advance(Duration::from_millis(1)).await;
        // The probe fails.
        assert_eq!(
            call(&mut svc, "http://a.test/").await.unwrap().status(),
            503
        );
    }
    assert_eq!(cooldowns, [1000, 2000, 3000, 3000]);
    assert_eq!(upstream.calls(), 5, "one probe per cooldown");
}

#[tokio::test(start_paused = true)]
async fn several_probes_must_all_succeed() {
    let cfg = CircuitBreakerPolicy::builder()
        .consecutive_failures(1)
        .cooldown(Duration::from_secs(1))
        .jitter(0.0)
        .probes(3)
        .build()
        .unwrap();
    let upstream = Script::codes([503, 200, 200, 503]);
    let layer = CircuitBreakerLayer::new(cfg);
    let mut svc = layer.layer(upstream.clone());
    call(&mut svc, "http://a.test/").await.unwrap();
    advance(Duration::from_secs(1)).await;
    call(&mut svc, "http://a.test/").await.unwrap();
    call(&mut svc, "http://a.test/").await.unwrap();
    assert_eq!(layer.state(&head("http://a.test/")), State::HalfOpen);
    // The third probe fails: open again.
    call(&mut svc, "http://a.test/").await.unwrap();
    assert_eq!(layer.state(&head("http://a.test/")), State::Open);
}

#[tokio::test(start_paused = true)]
async fn cooldowns_have_jitter() {
    let cfg = CircuitBreakerPolicy::builder()
        .consecutive_failures(1)
        .cooldown(Duration::from_secs(10))
        .jitter(0.2)
        .build()
        .unwrap();
    let layer = CircuitBreakerLayer::new(cfg);
    let mut svc = layer.layer(Script::codes([503; 200]));
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..200 {
        let uri = format!("http://h{i}.test/");
        call(&mut svc, &uri).await.unwrap();
        let wait = layer.next_probe_at(&head(&uri)).unwrap() - Instant::now();
        assert!(
            (Duration::from_secs(8)..=Duration::from_millis(12_001)).contains(&wait),
            "{wait:?}"
        );
        seen.insert(wait.as_millis());
    }
    assert!(seen.len() > 50, "cooldowns spread: {}", seen.len());
}

#[tokio::test(start_paused = true)]
async fn each_origin_has_its_own_breaker() {
    let upstream = Script::codes([503, 503]);
    let layer = CircuitBreakerLayer::new(breaker(2, 1_000));
    let mut svc = layer.layer(upstream.clone());
    call(&mut svc, "http://bad.test/").await.unwrap();
    call(&mut svc, "http://bad.test/").await.unwrap();
    assert!(call(&mut svc, "http://bad.test/")
        .await
        .unwrap_err()
        .is_circuit_open());
    for _ in 0..10 {
        call(&mut svc, "http://good.test/").await.unwrap();
    }
    assert_eq!(layer.state(&head("http://good.test/")), State::Closed);
    assert_eq!(layer.state(&head("https://bad.test/")), State::Closed);

    // A global breaker refuses every origin.
    let cfg = CircuitBreakerPolicy::builder()
        .consecutive_failures(2)
        .partition(Partition::global())
        .build()
        .unwrap();
    let mut svc = CircuitBreakerLayer::new(cfg).layer(Script::codes([503, 503]));
    call(&mut svc, "http://bad.test/").await.unwrap();
    call(&mut svc, "http://bad.test/").await.unwrap();
    assert!(call(&mut svc, "http://good.test/")
        .await
        .unwrap_err()
        .is_circuit_open());
}

#[tokio::test(start_paused = true)]
async fn the_handle_allows_retries_only_while_closed() {
    // Each call's inner service sees the handle; we keep the last one.
    let seen: Arc<Mutex<Option<BreakerHandle>>> = Arc::default();
    let statuses = Arc::new(Mutex::new(vec![503u16, 200, 503]));
    let inner = {
        let seen = seen.clone();
        tower::service_fn(move |req: Request<Full<Bytes>>| {
            let handle = CallContext::of(req.extensions())
                .and_then(CallContext::breaker)
                .cloned();
            *seen.lock().unwrap() = handle;
            let code = statuses.lock().unwrap().remove(0);
            async move { Ok::<_, std::io::Error>(response(code)) }
        })
    };
    let mut svc = CircuitBreakerLayer::new(breaker(1, 1_000)).layer(inner);
    call(&mut svc, "http://a.test/").await.unwrap();
    let handle = seen.lock().unwrap().take().unwrap();
    assert!(!handle.allows_retry(), "open");
    advance(Duration::from_secs(1)).await;
    // The probe: half-open, so its own retries are refused.
    let probe = svc.ready().await.unwrap().call(get("http://a.test/"));
    assert!(!seen.lock().unwrap().take().unwrap().allows_retry());
    probe.await.unwrap();
    assert!(handle.allows_retry(), "closed again");
}

// ---------------------------------------------------------------------------------
// Probe slots: cancellation and concurrency

/// An upstream whose calls wait for the test to answer them.
#[derive(Clone, Default)]
struct Held {
    pending: Arc<Mutex<Vec<oneshot::Sender<u16>>>>,
}

impl Held {
    fn answer_all(&self, code: u16) {
        for tx in self.pending.lock().unwrap().drain(..) {
            let _ = tx.send(code);
        }
    }

    fn take_last(&self) -> Option<oneshot::Sender<u16>> {
        self.pending.lock().unwrap().pop()
    }
}

impl<B> Service<Request<B>> for Held {
    type Response = Res;
    type Error = std::io::Error;
    type Future = BoxFuture<Result<Res, std::io::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<B>) -> Self::Future {
        let (tx, rx) = oneshot::channel();
        self.pending.lock().unwrap().push(tx);
        Box::pin(async move {
            match rx.await {
                Ok(code) => Ok(response(code)),
                Err(_) => Err(std::io::Error::from(std::io::ErrorKind::ConnectionReset)),
            }
        })
    }
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_probe_gives_its_slot_back() {
    let held = Held::default();
    let layer = CircuitBreakerLayer::new(breaker(1, 1_000));
    let mut svc: Boxed = BoxCloneService::new(layer.layer(held.clone()));
    let first = svc.ready().await.unwrap().call(get("http://a.test/"));
    held.answer_all(503);
    first.await.unwrap();
    advance(Duration::from_secs(1)).await;

    let probe = svc.ready().await.unwrap().call(get("http://a.test/"));
    assert_eq!(
        held.pending.lock().unwrap().len(),
        1,
        "the probe went through"
    );
    // The slot is taken: the next call is refused at once, with no time to give.
    let err = svc
        .ready()
        .await
        .unwrap()
        .call(get("http://a.test/"))
        .now_or_never()
        .expect("refused at once")
        .unwrap_err();
    assert!(err.is_circuit_open());
    assert_eq!(err.next_probe_at(), None);
    let open = std::error::Error::source(&err)
        .unwrap()
        .downcast_ref::<CircuitOpen>()
        .unwrap();
    assert_eq!(open.state(), State::HalfOpen);

    // The caller gives up on the probe: its slot is free again.
    drop(probe);
    assert_eq!(layer.state(&head("http://a.test/")), State::HalfOpen);
    let probe = svc.ready().await.unwrap().call(get("http://a.test/"));
    let tx = held.take_last().expect("a new probe went through");
    tx.send(200).unwrap();
    let res = probe.now_or_never().expect("answered").unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(layer.state(&head("http://a.test/")), State::Closed);
}

#[test]
fn ten_thousand_concurrent_calls_let_only_the_probes_through() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(8)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(30), async {
            const PROBES: u32 = 3;
            const CALLS: usize = 10_000;
            let cfg = CircuitBreakerPolicy::builder()
                .consecutive_failures(1)
                .cooldown(Duration::from_millis(20))
                .jitter(0.0)
                .probes(PROBES)
                .build()
                .unwrap();
            let held = Held::default();
            let layer = CircuitBreakerLayer::new(cfg);
            let mut svc: Boxed = BoxCloneService::new(layer.layer(held.clone()));
            let first = ServiceExt::<Request<Full<Bytes>>>::ready(&mut svc)
                .await
                .unwrap()
                .call(get("http://a.test/"));
            held.answer_all(503);
            let _ = first.await;
            let next = layer.next_probe_at(&head("http://a.test/")).unwrap();
            tokio::time::sleep_until(next).await;

            let barrier = Arc::new(tokio::sync::Barrier::new(CALLS));
            let called = Arc::new(AtomicUsize::new(0));
            let all_called = Arc::new(tokio::sync::Notify::new());
            let mut tasks = Vec::new();
            for _ in 0..CALLS {
                let mut svc = svc.clone();
                let (barrier, called, all_called) =
                    (barrier.clone(), called.clone(), all_called.clone());
                tasks.push(tokio::spawn(async move {
                    barrier.wait().await;
                    let future = ServiceExt::<Request<Full<Bytes>>>::ready(&mut svc)
                        .await
                        .unwrap()
                        .call(get("http://a.test/"));
                    if called.fetch_add(1, Ordering::SeqCst) + 1 == CALLS {
                        all_called.notify_one();
                    }
                    future.await
                }));
            }
            all_called.notified().await;
            // Every call has been made: only the probes reached the upstream.
            assert_eq!(held.pending.lock().unwrap().len(), PROBES as usize);
            held.answer_all(200);
            let (mut ok, mut refused) = (0, 0);
            for t in tasks {
                match t.await.unwrap() {
                    Ok(_) => ok += 1,
                    Err(e) if e.is_circuit_open() => refused += 1,
                    Err(e) => panic!("{e}"),
                }
            }
            assert_eq!((ok, refused), (PROBES as usize, CALLS - PROBES as usize));
            assert_eq!(layer.state(&head("http://a.test/")), State::Closed);
        })
        .await
        .expect("bounded");
    });
}

/// An upstream that counts the sends in flight: a request with `x-trip` is
/// answered 503 at once, any other never.
#[derive(Clone)]
struct Counting {
    in_flight: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
    admitted: Arc<AtomicUsize>,
}

/// Takes one off the count of sends in flight when dropped.
struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl<B> Service<Request<B>> for Counting {
    type Response = Res;
    type Error = std::io::Error;
    type Future = BoxFuture<Result<Res, std::io::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let trip = req.headers().contains_key("x-trip");
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        self.admitted.fetch_add(1, Ordering::SeqCst);
        let guard = InFlight(self.in_flight.clone());
        Box::pin(async move {
            let _guard = guard;
            if trip {
                return Ok(response(503));
            }
            std::future::pending().await
        })
    }
}

#[test]
fn probes_cancelled_while_others_arrive_never_exceed_the_slots() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(8)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(30), async {
            const PROBES: usize = 2;
            let in_flight = Arc::new(AtomicUsize::new(0));
            let most = Arc::new(AtomicUsize::new(0));
            let admitted = Arc::new(AtomicUsize::new(0));
            let inner = Counting {
                in_flight: in_flight.clone(),
                most: most.clone(),
                admitted: admitted.clone(),
            };
            let cfg = CircuitBreakerPolicy::builder()
                .consecutive_failures(1)
                .cooldown(Duration::from_millis(10))
                .jitter(0.0)
                .probes(PROBES as u32)
                .build()
                .unwrap();
            let layer = CircuitBreakerLayer::new(cfg);
            let mut svc: Boxed = BoxCloneService::new(layer.layer(inner.clone()));
            let trip = Request::get("http://a.test/")
                .header("x-trip", "1")
                .body(Full::default())
                .unwrap();
            ServiceExt::<Request<Full<Bytes>>>::ready(&mut svc)
                .await
                .unwrap()
                .call(trip)
                .await
                .unwrap();
            most.store(0, Ordering::SeqCst);
            admitted.store(0, Ordering::SeqCst);
            tokio::time::sleep_until(layer.next_probe_at(&head("http://a.test/")).unwrap()).await;

            let mut tasks = Vec::new();
            for i in 0..10_000usize {
                let mut svc = svc.clone();
                tasks.push(tokio::spawn(async move {
                    let fut = svc.ready().await.unwrap().call(get("http://a.test/"));
                    // Poll it a few times, then give up on it: a dropped probe.
                    let mut fut = std::pin::pin!(fut);
                    for _ in 0..(i % 4) {
                        if (&mut fut).now_or_never().is_some() {
                            return;
                        }
                        tokio::task::yield_now().await;
                    }
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
            assert!(most.load(Ordering::SeqCst) <= PROBES, "{most:?}");
            assert!(admitted.load(Ordering::SeqCst) >= PROBES, "{admitted:?}");
            assert_eq!(in_flight.load(Ordering::SeqCst), 0);
            assert_eq!(layer.state(&head("http://a.test/")), State::HalfOpen);
        })
        .await
        .expect("bounded");
    });
}

// ---------------------------------------------------------------------------------
// The state machine against a model

#[derive(Clone, Copy, Debug)]
enum Op {
    Start,
    Finish(usize, bool),
    Drop(usize),
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Start),
        3 => (any::<usize>(), any::<bool>()).prop_map(|(k, f)| Op::Finish(k, f)),
        1 => any::<usize>().prop_map(Op::Drop),
        2 => (0u64..2500).prop_map(Op::Advance),
        1 => (2500u64..12_000).prop_map(Op::Advance),
    ]
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Model {
    Closed,
    Open {
        until: u64,
        level: u32,
    },
    HalfOpen {
        level: u32,
        in_flight: u32,
        succeeded: u32,
    },
}

struct Machine {
    state: Model,
    gen: u64,
    /// (slot, failed) of the calls counted while closed.
    events: Vec<(u64, bool)>,
    run: u32,
    consecutive: u32,
    ratio_ppm: u64,
    min_calls: u64,
    probes: u32,
}

const COOLDOWN_MS: u64 = 1000;
const MAX_COOLDOWN_MS: u64 = 4000;

impl Machine {
    fn cooldown(level: u32) -> u64 {
        (COOLDOWN_MS << level.min(20)).min(MAX_COOLDOWN_MS)
    }

    /// Admits a call at `t` ms: `Ok((gen, probe))`, or the refusal's next probe time.
    fn admit(&mut self, t: u64) -> Result<(u64, bool), Option<u64>> {
        match self.state {
            Model::Closed => Ok((self.gen, false)),
            Model::Open { until, level } => {
                if t < until {
                    return Err(Some(until));
                }
                self.gen += 1;
                self.state = Model::HalfOpen {
                    level,
                    in_flight: 1,
                    succeeded: 0,
                };
                Ok((self.gen, true))
            }
            Model::HalfOpen {
                level,
                in_flight,
                succeeded,
            } => {
                if in_flight + succeeded >= self.probes {
                    return Err(None);
                }
                self.state = Model::HalfOpen {
                    level,
                    in_flight: in_flight + 1,
                    succeeded,
                };
                Ok((self.gen, true))
            }
        }
    }

    fn record(&mut self, t: u64, gen: u64, probe: bool, failed: bool) {
        if gen != self.gen {
            return;
        }
        match (self.state, probe) {
            (Model::Closed, false) => {
                let slot = t / 1000;
                self.events.push((slot, failed));
                if !failed {
                    self.run = 0;
                    return;
                }
                self.run += 1;
                let live: Vec<bool> = self
                    .events
                    .iter()
                    .filter(|(s, _)| s + 10 > slot)
                    .map(|&(_, f)| f)
                    .collect();
                let calls = live.len() as u64;
                let failures = live.iter().filter(|f| **f).count() as u64;
                let trip = (self.consecutive != 0 && self.run >= self.consecutive)
                    || (calls >= self.min_calls && failures * 1_000_000 >= self.ratio_ppm * calls);
                if trip {
                    self.gen += 1;
                    self.state = Model::Open {
                        until: t + Machine::cooldown(0),
                        level: 0,
                    };
                }
            }
            (
                Model::HalfOpen {
                    level,
                    in_flight,
                    succeeded,
                },
                true,
            ) => {
                self.gen += 1;
                if failed {
                    let level = (level + 1).min(15);
                    self.state = Model::Open {
                        until: t + Machine::cooldown(level),
                        level,
                    };
                } else if succeeded + 1 >= self.probes {
                    self.state = Model::Closed;
                    self.events.clear();
                    self.run = 0;
                } else {
                    self.gen -= 1;
                    self.state = Model::HalfOpen {
                        level,
                        in_flight: in_flight - 1,
                        succeeded: succeeded + 1,
                    };
                }
            }
            _ => {}
        }
    }

    fn release(&mut self, gen: u64, probe: bool) {
        if let (
            Model::HalfOpen {
                level,
                in_flight,
                succeeded,
            },
            true,
        ) = (self.state, probe)
        {
            if gen == self.gen {
                self.state = Model::HalfOpen {
                    level,
                    in_flight: in_flight - 1,
                    succeeded,
                };
            }
        }
    }

    fn kind(&self) -> State {
        match self.state {
            Model::Closed => State::Closed,
            Model::Open { .. } => State::Open,
            Model::HalfOpen { .. } => State::HalfOpen,
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn the_state_machine_matches_a_model(
        consecutive in 0u32..5,
        ratio_tenths in 1u64..=10,
        min_calls in 1u32..8,
        probes in 1u32..4,
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        let cfg = CircuitBreakerPolicy::builder()
            .consecutive_failures(consecutive)
            .failure_ratio(ratio_tenths as f64 / 10.0)
            .min_calls(min_calls)
            .window(Duration::from_secs(10))
            .cooldown(Duration::from_millis(COOLDOWN_MS))
            .max_cooldown(Duration::from_millis(MAX_COOLDOWN_MS))
            .jitter(0.0)
            .probes(probes)
            .build()
            .unwrap();
        paused(async move {
            let held = Held::default();
            let layer = CircuitBreakerLayer::new(cfg);
            let start = Instant::now();
            // Create the breaker at t = 0, as the model's clock starts.
            prop_assert_eq!(layer.state(&head("http://a.test/")), State::Closed);
            let mut svc: CircuitBreaker<Held> = layer.layer(held.clone());
            let mut model = Machine {
                state: Model::Closed,
                gen: 0,
                events: Vec::new(),
                run: 0,
                consecutive,
                ratio_ppm: ratio_tenths * 100_000,
                min_calls: u64::from(min_calls),
                probes,
            };
            type Call = (BoxFuture<Result<Res, backstop::Error>>, oneshot::Sender<u16>, u64, bool);
            let mut calls: Vec<Call> = Vec::new();
            for op in ops {
                let t = (Instant::now() - start).as_millis() as u64;
                match op {
                    Op::Start => {
                        let expected = model.admit(t);
                        let mut fut: BoxFuture<_> =
                            Box::pin(ServiceExt::<Request<Full<Bytes>>>::ready(&mut svc).await.unwrap().call(get("http://a.test/")));
                        match (expected, held.take_last()) {
                            (Ok((gen, probe)), Some(tx)) => calls.push((fut, tx, gen, probe)),
                            (Err(next), None) => {
                                let err = (&mut fut).now_or_never().unwrap().unwrap_err();
                                prop_assert!(err.is_circuit_open());
                                prop_assert_eq!(
                                    err.next_probe_at(),
                                    next.map(|ms| start + Duration::from_millis(ms))
                                );
                            }
                            (expected, tx) => prop_assert!(
                                false,
                                "model {:?}, breaker admitted: {}",
                                expected,
                                tx.is_some()
                            ),
                        }
                    }
                    Op::Finish(k, failed) if !calls.is_empty() => {
                        let (fut, tx, gen, probe) = calls.remove(k % calls.len());
                        tx.send(if failed { 503 } else { 200 }).unwrap();
                        fut.await.unwrap();
                        model.record(t, gen, probe, failed);
                    }
                    Op::Drop(k) if !calls.is_empty() => {
                        let (_, _, gen, probe) = calls.remove(k % calls.len());
                        model.release(gen, probe);
                    }
                    Op::Advance(ms) => advance(Duration::from_millis(ms)).await,
                    _ => {}
                }
                prop_assert_eq!(layer.state(&head("http://a.test/")), model.kind(), "after {:?}", op);
                if let Model::Open { until, .. } = model.state {
                    prop_assert_eq!(
                        layer.next_probe_at(&head("http://a.test/")),
                        Some(start + Duration::from_millis(until))
                    );
                }
            }
            Ok(())
        })?;
    }
}

// ---------------------------------------------------------------------------------
// Under the retry layer

fn fast_retries() -> RetryPolicy {
    RetryPolicy::builder()
        .max_attempts(3)
        .backoff(Duration::from_millis(10), Duration::from_millis(50))
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_whole_retry_sequence_counts_once() {
    let mock = Script::new(
        [503, 503, 503, 503, 200, 503, 503, 503, 503, 503, 503]
            .into_iter()
            .map(status),
    );
    let layer = CircuitBreakerLayer::new(breaker(2, 1_000));
    let stack = Stack::new(fast_retries()).breaker(&layer);
    let mut client: Client = crate::stacked!(stack, mock.clone());
    // Three failed attempts: one failed call.
    let res = call(&mut client, "http://a.test/").await.unwrap();
    assert_eq!(res.status(), 503);
    assert_eq!(mock.calls(), 3);
    assert_eq!(layer.state(&head("http://a.test/")), State::Closed);
    // 503 then 200: a retry cured it, a success that breaks the run.
    assert_eq!(
        call(&mut client, "http://a.test/").await.unwrap().status(),
        200
    );
    assert_eq!(mock.calls(), 5);
    call(&mut client, "http://a.test/").await.unwrap();
    assert_eq!(layer.state(&head("http://a.test/")), State::Closed);
    call(&mut client, "http://a.test/").await.unwrap();
    assert_eq!(mock.calls(), 11);
    assert_eq!(layer.state(&head("http://a.test/")), State::Open);
    let err = call(&mut client, "http://a.test/").await.unwrap_err();
    assert!(err.is_circuit_open());
    assert_eq!(mock.calls(), 11);
}

#[tokio::test(start_paused = true)]
async fn retries_stop_when_the_breaker_opens_during_the_wait() {
    // Call A gets a 503 asking for a 1 s wait; meanwhile call B fails (a 500, not
    // retried) and opens the breaker; A stops after its wait instead of retrying.
    let mock = Script::new([status_with(503, &[("retry-after", "1")]), status(500)]);
    let layer = CircuitBreakerLayer::new(breaker(1, 60_000));
    let policy = RetryPolicy::builder().max_attempts(2).build().unwrap();
    let stack = Stack::new(policy).breaker(&layer);
    let client: Client = crate::stacked!(stack, mock.clone());
    let mut a = client.clone();
    let mut b = client.clone();
    let call_a = async { call(&mut a, "http://a.test/").await };
    let call_b = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        call(&mut b, "http://a.test/").await
    };
    let (a, b) = tokio::join!(call_a, call_b);
    assert_eq!(b.unwrap().status(), 500);
    // The 503's body was drained before the wait, so A ends with an error that
    // names it.
    let a = a.unwrap_err();
    assert_eq!(a.status().map(|s| s.as_u16()), Some(503));
    assert!(a.is_circuit_open());
    let h = a.history().unwrap();
    assert_eq!(h.stop_reason(), Some(StopReason::CircuitOpen));
    assert_eq!(mock.calls(), 2);
}

#[test]
fn services_are_clone_send_and_sync() {
    fn check<T: Clone + Send + Sync + 'static>() {}
    check::<CircuitBreakerLayer>();
    check::<CircuitBreakerPolicy>();
    check::<CircuitBreaker<Script>>();
    fn error<T: std::error::Error + Send + Sync + 'static>() {}
    error::<CircuitOpen>();
}

// ---------------------------------------------------------------------------------
// Over real loopback upstreams

#[cfg(feature = "test-util")]
mod wire {
    use super::*;
    use crate::support::wire::{client as transport, within_10s, BOTH};
    use backstop::test_util::{Protocol, Reply, Upstream};
    use backstop::ReplayBody;
    use hyper_util::client::legacy::{connect::HttpConnector, Client};

    type Transport = Client<HttpConnector, ReplayBody<Full<Bytes>>>;

    fn client(
        layer: &CircuitBreakerLayer,
        protocol: Protocol,
    ) -> BoxCloneService<Request<Full<Bytes>>, Response<hyper::body::Incoming>, backstop::Error>
    {
        let stack = Stack::new(fast_retries()).breaker(layer);
        let transport: Transport = transport(protocol);
        crate::stacked!(stack, transport)
    }

    async fn send<S>(svc: &mut S, uri: http::Uri) -> Result<StatusCode, backstop::Error>
    where
        S: Service<
            Request<Full<Bytes>>,
            Response = Response<hyper::body::Incoming>,
            Error = backstop::Error,
        >,
    {
        let req = Request::get(uri).body(Full::default()).unwrap();
        svc.ready().await?.call(req).await.map(|r| r.status())
    }

    #[tokio::test]
    async fn a_dead_upstream_is_refused_without_a_connection() {
        within_10s(async {
            // A port nothing listens on: every connect is refused.
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            drop(listener);
            let uri: http::Uri = format!("http://{addr}/").parse().unwrap();
            let layer = CircuitBreakerLayer::new(breaker(3, 60_000));
            let mut svc = client(&layer, Protocol::Http1);
            for _ in 0..3 {
                let err = send(&mut svc, uri.clone()).await.unwrap_err();
                assert!(!err.is_circuit_open());
                assert_eq!(err.kind(), backstop::policy::ErrorKind::Connect);
            }
            let started = std::time::Instant::now();
            for _ in 0..1000 {
                let err = send(&mut svc, uri.clone()).await.unwrap_err();
                assert!(err.is_circuit_open());
                assert!(err.next_probe_at().unwrap() > Instant::now());
            }
            // A thousand refusals, no socket touched: far under a millisecond each.
            assert!(started.elapsed() < Duration::from_secs(1));
        })
        .await;
    }

    #[tokio::test]
    async fn a_failing_upstream_sees_no_request_while_open() {
        within_10s(async {
            for protocol in BOTH {
                let upstream = Upstream::builder()
                    .protocol(protocol)
                    .then(Reply::status(503))
                    .start()
                    .await
                    .unwrap();
                let layer = CircuitBreakerLayer::new(breaker(2, 60_000));
                let mut svc = client(&layer, protocol);
                for _ in 0..2 {
                    assert_eq!(send(&mut svc, upstream.uri("/")).await.unwrap(), 503);
                }
                let seen = upstream.requests().len();
                assert_eq!(seen, 6, "{protocol:?}: two calls of three attempts");
                for _ in 0..100 {
                    assert!(send(&mut svc, upstream.uri("/"))
                        .await
                        .unwrap_err()
                        .is_circuit_open());
                }
                assert_eq!(upstream.requests().len(), seen, "{protocol:?}");
            }
        })
        .await;
    }

    #[tokio::test]
    async fn a_recovering_upstream_is_probed_back_to_closed() {
        within_10s(async {
            for protocol in BOTH {
                // Down for six requests (two calls of three attempts), then up.
                let upstream = Upstream::builder()
                    .protocol(protocol)
                    .script((0..6).map(|_| Reply::status(503)))
                    .then(Reply::ok().body("ok"))
                    .start()
                    .await
                    .unwrap();
                let layer = CircuitBreakerLayer::new(breaker(2, 100));
                let mut svc = client(&layer, protocol);
                for _ in 0..2 {
                    assert_eq!(send(&mut svc, upstream.uri("/")).await.unwrap(), 503);
                }
                let err = send(&mut svc, upstream.uri("/")).await.unwrap_err();
                let next = err.next_probe_at().expect("open");
                tokio::time::sleep_until(next).await;
                // The probe reaches the recovered upstream and closes the breaker.
                assert_eq!(send(&mut svc, upstream.uri("/")).await.unwrap(), 200);
                assert_eq!(
                    layer.state(&head(&upstream.uri("/").to_string())),
                    State::Closed
                );
                for _ in 0..10 {
                    assert_eq!(send(&mut svc, upstream.uri("/")).await.unwrap(), 200);
                }
                assert_eq!(upstream.requests().len(), 6 + 1 + 10, "{protocol:?}");
            }
        })
        .await;
    }

    #[tokio::test]
    async fn a_bad_origin_beside_a_healthy_one() {
        within_10s(async {
            for protocol in BOTH {
                let bad = Upstream::builder()
                    .protocol(protocol)
                    .then(Reply::status(502))
                    .start()
                    .await
                    .unwrap();
                let good = Upstream::builder()
                    .protocol(protocol)
                    .then(Reply::ok())
                    .start()
                    .await
                    .unwrap();
                let layer = CircuitBreakerLayer::new(breaker(3, 60_000));
                // One client, one transport, both origins, calls interleaved.
                let mut svc = client(&layer, protocol);
                let mut refused_bad = 0;
                for _ in 0..100 {
                    match send(&mut svc, bad.uri("/")).await {
                        Err(e) if e.is_circuit_open() => refused_bad += 1,
                        Ok(status) => assert_eq!(status, 502),
                        Err(e) => panic!("{protocol:?}: {e}"),
                    }
                    assert_eq!(
                        send(&mut svc, good.uri("/")).await.unwrap(),
                        200,
                        "{protocol:?}"
                    );
                }
                // Three calls of three attempts opened the bad origin's breaker.
                assert_eq!(refused_bad, 97, "{protocol:?}");
                assert_eq!(bad.requests().len(), 9, "{protocol:?}");
                assert_eq!(good.requests().len(), 100, "{protocol:?}");
                assert_eq!(
                    layer.state(&head(&good.uri("/").to_string())),
                    State::Closed
                );
                assert_eq!(layer.state(&head(&bad.uri("/").to_string())), State::Open);
            }
        })
        .await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_future_polled_after_it_ended_answers_an_error_not_pending_forever() {
    let mock = Script::new([status(200)]);
    let mut svc = CircuitBreakerLayer::new(breaker(3, 1_000)).layer(mock.clone());
    let mut future = Box::pin(
        ServiceExt::<Request<Full<Bytes>>>::ready(&mut svc)
            .await
            .unwrap()
            .call(get("http://a.test/")),
    );
    let waker = futures_util::task::noop_waker();
    let mut cx = Context::from_waker(&waker);
    assert!(matches!(future.as_mut().poll(&mut cx), Poll::Ready(Ok(_))));
    match future.as_mut().poll(&mut cx) {
        Poll::Ready(Err(err)) => assert!(!err.is_circuit_open(), "{err}"),
        other => panic!("expected an error, got {:?}", other.map(|r| r.map(|_| ()))),
    }
}

#[tokio::test(start_paused = true)]
async fn a_call_refused_before_it_sent_anything_counts_neither_way() {
    use crate::support::shape::BudgetLayer;
    use backstop::policy::Deadline;
    let mock = Script::new([status_with(429, &[("retry-after", "2")]), status(200)]);
    let breakers = CircuitBreakerLayer::new(breaker(1, 1_000));
    let budget = BudgetLayer::default();
    let stack = Stack::new(RetryPolicy::none())
        .breaker(&breakers)
        .budget(&budget);
    let mut client: Client = crate::stacked!(stack, mock.clone());
    // A 429 is not a failure; its hint pauses the origin for 2 s.
    let res = call(&mut client, "http://a.test/").await.unwrap();
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    // A call whose deadline ends inside the pause is refused, sending nothing.
    let mut req = get("http://a.test/");
    req.extensions_mut()
        .insert(Deadline::after(std::time::Duration::from_secs(1)));
    let err = client.ready().await.unwrap().call(req).await.unwrap_err();
    assert!(err.is_paused(), "{err}");
    assert_eq!(mock.calls(), 1);
    // The breaker learned nothing from it: one failure would have opened it.
    assert_eq!(breakers.state(&head("http://a.test/")), State::Closed);
    // Nor from a call whose deadline had passed before it began.
    let mut req = get("http://a.test/");
    req.extensions_mut().insert(Deadline::at(Instant::now()));
    let err = client.ready().await.unwrap().call(req).await.unwrap_err();
    assert_eq!(err.attempts(), 0);
    assert_eq!(breakers.state(&head("http://a.test/")), State::Closed);
    advance(std::time::Duration::from_secs(3)).await;
    assert_eq!(
        call(&mut client, "http://a.test/").await.unwrap().status(),
        200
    );
}

/// A call that reached the origin and whose retry a layer beneath refused still
/// counts: only a call that sent nothing says nothing of the origin.
#[tokio::test(start_paused = true)]
async fn a_call_whose_retry_was_refused_beneath_still_counts() {
    let outer = CircuitBreakerLayer::new(breaker(1, 1_000));
    let inner = CircuitBreakerLayer::new(breaker(1, 1_000));
    let mock = Script::new([status(503), status(503)]);
    let retry = backstop::RetryLayer::new(fast_retries());
    let mut client: Client =
        BoxCloneService::new(outer.layer(retry.layer(inner.layer(mock.clone()))));
    let res = call(&mut client, "http://a.test/").await;
    // The 503 opened the inner breaker, which refused both retries.
    let err = res.unwrap_err();
    assert_eq!(err.attempts(), 3, "{err}");
    assert_eq!(mock.calls(), 1);
    assert_eq!(inner.state(&head("http://a.test/")), State::Open);
    assert_eq!(outer.state(&head("http://a.test/")), State::Open);
}
