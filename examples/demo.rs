//! What backstop does, against a real upstream on 127.0.0.1 with faults.
//!
//! `cargo run --example demo`
//!
//! The upstream answers a scripted mix: 503s with and without `Retry-After`, 429s,
//! connections closed without an answer, and slow answers. The same calls go
//! through a bare hyper-util client and through backstop's stack (`Backstop`, built
//! with `Backstop::builder()` over the same client wrapped in
//! `ProgressTrackingLayer`; here retries alone, without a budget), and a table shows
//! what each made of them. Then three POSTs show which writes are sent again and
//! which are refused, with the reason; an outage shows the budget and the circuit
//! breaker keeping retries from piling onto a dead upstream
//! (`cargo run --release --example outage` measures it at scale). Last, a slow
//! tail: the same GETs with and without a hedge policy, which sends a copy of a
//! request still unanswered after 20 ms (`cargo run --release --example hedging`
//! measures it at scale). It ends with a summary of its own run, counted by an
//! observer (`backstop::observe`) that every backstop stack here shares.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use backstop::hedge::{HedgePolicy, Hedged};
use backstop::observe::{reason_label, Event, Observer, Refusal};
use backstop::policy::{classify_error, History};
use backstop::progress::ProgressTracking;
use backstop::stack::{BackstopBuilder, HedgeMode, NoHedge};
use backstop::{
    Backstop, BackstopLayer, BoxError, IdempotencyKeyLayer, ProgressTrackingLayer, ReplayBody,
    RetryPolicy,
};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use tower::{Service, ServiceBuilder, ServiceExt};

/// Counts what the backstop stacks of this demo decided, by kind of event.
struct Counts(Mutex<BTreeMap<String, u64>>);

impl Observer for Counts {
    fn on_event(&self, event: &Event<'_>) {
        let key = match event {
            Event::CallFinished(_) => "calls finished".to_owned(),
            Event::AttemptFinished(_) => "attempts".to_owned(),
            Event::RetryScheduled(e) => format!("retries scheduled: {}", reason_label(e.reason)),
            Event::RetrySkipped(e) => format!("retries skipped: {}", e.gate.as_str()),
            Event::CallRefused(e) => match e.refusal {
                Refusal::CircuitOpen { .. } => "calls refused: circuit open".to_owned(),
                other => format!("calls refused: {}", other.as_str()),
            },
            Event::HedgeSent(_) => "hedges sent".to_owned(),
            Event::HedgeWon(_) => "hedges won".to_owned(),
            Event::LoserCancelled(_) => "hedge losers cancelled".to_owned(),
            Event::BreakerStateChanged(e) => format!("breaker became {}", e.to),
            Event::BudgetRanDry(_) => "budget ran dry".to_owned(),
            _ => return,
        };
        *self.0.lock().unwrap().entry(key).or_default() += 1;
    }
}

/// The one observer every backstop stack of the demo shares.
static COUNTS: Counts = Counts(Mutex::new(BTreeMap::new()));

/// A stack's builder, telling the demo's observer.
fn builder() -> BackstopBuilder {
    Backstop::builder().observer(|event: &Event<'_>| COUNTS.on_event(event))
}

/// The demo's client: the stack `layer` builds, over a hyper-util client whose
/// attempts `ProgressTrackingLayer` records (how far a write got decides whether
/// it may be sent again). One nameable type, whatever the stack holds.
/// (`Backstop<…, WithHedge>` for a stack that hedges.)
type Stack<H = NoHedge> =
    Backstop<ProgressTracking<Client<HttpConnector, ReplayBody<Full<Bytes>>>>, H>;

fn stack<H: HedgeMode>(layer: BackstopLayer<H>) -> Stack<H> {
    ServiceBuilder::new()
        .layer(layer)
        .layer(ProgressTrackingLayer::new())
        .service(common::client(false))
}

/// What the upstream does with its n-th request: a fixed cycle of ten.
fn fault(n: usize) -> &'static str {
    match n % 10 {
        0 => "503",
        3 => "503 + Retry-After: 0.05",
        5 => "close",
        7 => "slow",
        8 => "429 + retry-after-ms: 30",
        _ => "200",
    }
}

struct Upstream {
    addr: SocketAddr,
    requests: Arc<AtomicUsize>,
}

async fn upstream() -> std::io::Result<Upstream> {
    let requests = Arc::new(AtomicUsize::new(0));
    let counter = requests.clone();
    let addr = common::serve(false, move |_req: Request<Incoming>| {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        answer(fault(n))
    })
    .await?;
    Ok(Upstream { addr, requests })
}

/// A payments upstream: it charges once per request it reads, deduplicates by
/// idempotency key, and misbehaves once per path: `/charges` reads the request and
/// then loses the answer (the connection closes), `/orders` answers 425 Too Early
/// (it did not process the request).
#[derive(Default)]
struct Payments {
    charged: AtomicUsize,
    seen_keys: std::sync::Mutex<Vec<String>>,
    first_charge: std::sync::atomic::AtomicBool,
    first_order: std::sync::atomic::AtomicBool,
}

async fn payments() -> std::io::Result<(SocketAddr, Arc<Payments>)> {
    let state = Arc::new(Payments::default());
    let shared = state.clone();
    let addr = common::serve(false, move |req: Request<Incoming>| {
        let state = shared.clone();
        async move { charge(&state, req).await }
    })
    .await?;
    Ok((addr, state))
}

async fn charge(
    state: &Payments,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, std::io::Error> {
    use http_body_util::BodyExt;
    let path = req.uri().path().to_owned();
    let key = req
        .headers()
        .get("idempotency-key")
        .and_then(|k| k.to_str().ok())
        .map(str::to_owned);
    if path == "/orders" && !state.first_order.swap(true, Ordering::SeqCst) {
        let mut res = Response::new(Full::default());
        *res.status_mut() = StatusCode::TOO_EARLY;
        return Ok(res);
    }
    // Read the whole request: from here on, it is processed.
    let _ = req.into_body().collect().await;
    let repeat = match &key {
        Some(key) => {
            let mut seen = state.seen_keys.lock().unwrap();
            let repeat = seen.contains(key);
            seen.push(key.clone());
            repeat
        }
        None => false,
    };
    if !repeat {
        state.charged.fetch_add(1, Ordering::SeqCst);
    }
    if path == "/charges" && !state.first_charge.swap(true, Ordering::SeqCst) {
        return Err(std::io::Error::other("the answer is lost"));
    }
    let mut res = Response::new(Full::default());
    *res.status_mut() = StatusCode::CREATED;
    Ok(res)
}

async fn answer(fault: &'static str) -> Result<Response<Full<Bytes>>, std::io::Error> {
    let mut res = Response::new(Full::new(Bytes::from_static(b"ok")));
    match fault {
        "503" => *res.status_mut() = StatusCode::SERVICE_UNAVAILABLE,
        "503 + Retry-After: 0.05" => {
            *res.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            res.headers_mut()
                .insert("retry-after", "0.05".parse().unwrap());
        }
        "429 + retry-after-ms: 30" => {
            *res.status_mut() = StatusCode::TOO_MANY_REQUESTS;
            res.headers_mut()
                .insert("retry-after-ms", "30".parse().unwrap());
        }
        // An error from the service makes hyper close the connection unanswered.
        "close" => return Err(std::io::Error::other("closing without an answer")),
        "slow" => tokio::time::sleep(Duration::from_millis(400)).await,
        _ => {}
    }
    Ok(res)
}

#[derive(Default)]
struct Tally {
    calls: usize,
    ok: usize,
    failed: BTreeMap<String, usize>,
    retries: usize,
    upstream: usize,
    took: Duration,
}

fn row(name: &str, t: &Tally) {
    let failed: Vec<String> = t.failed.iter().map(|(k, v)| format!("{v} {k}")).collect();
    println!(
        "{name:<22} {:>5} {:>9} {:>5} {:>8}  {:<7} {}",
        t.calls,
        t.upstream,
        t.ok,
        t.retries,
        format!("{:.2}s", t.took.as_secs_f64()),
        if failed.is_empty() {
            "-".to_owned()
        } else {
            failed.join(", ")
        },
    );
}

/// Sends `calls` GETs, eight at a time, through `client`.
async fn run<S>(client: S, base: &str, calls: usize, requests: &AtomicUsize) -> Tally
where
    S: Service<Request<Full<Bytes>>, Response = Response<Incoming>> + Clone + Send + 'static,
    S::Error: std::error::Error + Send + Sync + 'static,
    S::Future: Send,
{
    let before = requests.load(Ordering::SeqCst);
    let started = Instant::now();
    let mut tally = Tally::default();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..calls {
        let client = client.clone();
        let uri = format!("{base}/items/{i}");
        tasks.spawn(async move {
            let req = Request::get(uri).body(Full::default()).unwrap();
            // Every call is bounded: a bare client has no timeout of its own.
            let call = client.oneshot(req);
            match tokio::time::timeout(Duration::from_millis(300), call).await {
                Ok(Ok(res)) => Ok(res),
                Ok(Err(err)) => Err(describe(&err)),
                Err(_) => Err("timed out (caller)".to_owned()),
            }
        });
        if tasks.len() == 8 {
            record(&mut tally, tasks.join_next().await);
        }
    }
    while let Some(done) = tasks.join_next().await {
        record(&mut tally, Some(done));
    }
    tally.took = started.elapsed();
    tally.upstream = requests.load(Ordering::SeqCst) - before;
    tally
}

fn record(
    tally: &mut Tally,
    done: Option<Result<Result<Response<Incoming>, String>, tokio::task::JoinError>>,
) {
    let Some(Ok(outcome)) = done else { return };
    tally.calls += 1;
    match outcome {
        Ok(res) => {
            if let Some(h) = res.extensions().get::<History>() {
                tally.retries += h.retries();
            }
            if res.status().is_success() {
                tally.ok += 1;
            } else {
                *tally
                    .failed
                    .entry(res.status().as_u16().to_string())
                    .or_default() += 1;
            }
        }
        Err(reason) => *tally.failed.entry(reason).or_default() += 1,
    }
}

/// An error as its kind, never its message (which could name the URL).
fn describe(err: &(dyn std::error::Error + 'static)) -> String {
    match err.downcast_ref::<backstop::Error>() {
        Some(e) => match e.stop_reason() {
            Some(stop) if stop.is_gate() => format!("{} ({})", e.kind(), stop),
            _ => e.kind().to_string(),
        },
        None => classify_error(err).to_string(),
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let upstream = upstream().await?;
    let base = format!("http://{}", upstream.addr);
    let calls = 100;

    println!(
        "backstop demo: an upstream on {} that, per 10 requests, answers",
        upstream.addr
    );
    println!("  2× 503 (one with Retry-After: 0.05), 1× 429 (retry-after-ms: 30),");
    println!("  1× closes the connection unanswered, 1× answers after 400 ms, 5× 200.");
    println!("Each client makes {calls} GET calls, 8 at a time, each bounded to 300 ms.\n");

    let transport: Client<HttpConnector, Full<Bytes>> = common::client(false);
    let bare = run(transport, &base, calls, &upstream.requests).await;

    let policy = RetryPolicy::builder()
        .max_attempts(4)
        .backoff(Duration::from_millis(10), Duration::from_millis(100))
        .attempt_timeout(Duration::from_millis(100))
        .timeout(Duration::from_millis(290))
        .build()?;
    // Retries alone: no budget, so no origin pause either. This upstream asks for a
    // pause on one answer in five, and a stack with the default budget would hold
    // (or refuse) every call to it meanwhile; the outage below shows the budget.
    let with_backstop = stack(builder().retry(policy).no_budget().build()?);
    let retried = run(with_backstop, &base, calls, &upstream.requests).await;

    println!(
        "{:<22} {:>5} {:>9} {:>5} {:>8}  {:<7} failures",
        "client", "calls", "upstream", "ok", "retries", "time"
    );
    row("bare hyper-util", &bare);
    row("backstop (no budget)", &retried);
    println!(
        "\nbackstop turned {} of {} failed calls into successes, for {} extra upstream requests.",
        retried.ok.saturating_sub(bare.ok),
        calls - bare.ok,
        retried.upstream.saturating_sub(retried.calls),
    );
    writes().await?;
    outage().await?;
    slow_tail().await?;
    summary();
    Ok(())
}

/// What the observer counted over the whole run.
fn summary() {
    println!("\nWhat backstop decided in this run, as its observer counted it:");
    for (what, n) in COUNTS.0.lock().unwrap().iter() {
        println!("  {what:<40} {n:>6}");
    }
    println!("(feature `metrics`: backstop::observe::MetricsObserver records the same events)");
}

/// Writes: which POSTs are safe to send again.
async fn writes() -> Result<(), BoxError> {
    println!("\nWrites. A POST is sent again only when that cannot charge twice:");
    let policy = RetryPolicy::builder()
        .backoff(Duration::from_millis(5), Duration::from_millis(20))
        .build()?;
    let client = |keys: bool| -> Result<Stack, BoxError> {
        let builder = builder().retry(policy.clone());
        let builder = if keys {
            builder.idempotency_key(IdempotencyKeyLayer::new())
        } else {
            builder
        };
        Ok(stack(builder.build()?))
    };
    let cases = [
        (
            "/charges",
            false,
            "the server read it, then the answer was lost",
        ),
        ("/charges", true, "the same, with an idempotency key"),
        ("/orders", false, "the server answered 425 Too Early"),
    ];
    for (path, keys, what) in cases {
        let (addr, state) = payments().await?;
        let req = Request::post(format!("http://{addr}{path}"))
            .body(Full::new(Bytes::from_static(b"amount=42")))?;
        let outcome = match client(keys)?.oneshot(req).await {
            Ok(res) => {
                let attempts = res.extensions().get::<History>().map_or(1, History::len);
                format!("{} after {attempts} attempt(s)", res.status())
            }
            Err(err) => format!("not sent again: {err}"),
        };
        println!(
            "  POST {path:<9} {:<8} {what}:\n      {outcome}; the server charged {} time(s)",
            if keys { "(key)" } else { "(no key)" },
            state.charged.load(Ordering::SeqCst),
        );
    }
    Ok(())
}

/// A slow-tail upstream: the first request for one item in ten lands on a stuck
/// replica and answers after 200 ms; any other request answers at once.
async fn stalling() -> std::io::Result<Upstream> {
    let requests = Arc::new(AtomicUsize::new(0));
    let counter = requests.clone();
    let seen = Arc::new(std::sync::Mutex::new(std::collections::HashSet::new()));
    let addr = common::serve(false, move |req: Request<Incoming>| {
        counter.fetch_add(1, Ordering::SeqCst);
        let path = req.uri().path().to_owned();
        let first = seen.lock().unwrap().insert(path.clone());
        let stuck = first && path.ends_with('3');
        async move {
            if stuck {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Ok::<_, std::io::Error>(Response::new(Full::new(Bytes::from_static(b"ok"))))
        }
    })
    .await?;
    Ok(Upstream { addr, requests })
}

/// Sends `calls` GETs, eight at a time: the latency of each, and the hedges sent.
async fn timed<S>(client: S, base: &str, calls: usize) -> (Vec<Duration>, usize, Duration)
where
    S: Service<Request<Full<Bytes>>, Response = Response<Incoming>> + Clone + Send + 'static,
    S::Error: std::error::Error + Send + Sync + 'static,
    S::Future: Send,
{
    let started = Instant::now();
    let mut latencies = Vec::with_capacity(calls);
    let mut hedges = 0;
    let mut tasks = tokio::task::JoinSet::new();
    let mut done = |out: Option<Result<(Duration, usize), tokio::task::JoinError>>| {
        if let Some(Ok((latency, copies))) = out {
            latencies.push(latency);
            hedges += copies;
        }
    };
    for i in 0..calls {
        let client = client.clone();
        let uri = format!("{base}/items/{i}");
        tasks.spawn(async move {
            let req = Request::get(uri).body(Full::default()).unwrap();
            let t = Instant::now();
            let res = client.oneshot(req).await;
            let copies = res
                .ok()
                .and_then(|res| Hedged::of(&res).map(Hedged::copies))
                .unwrap_or(0);
            (t.elapsed(), copies)
        });
        if tasks.len() == 8 {
            done(tasks.join_next().await);
        }
    }
    while let Some(out) = tasks.join_next().await {
        done(Some(out));
    }
    latencies.sort();
    (latencies, hedges, started.elapsed())
}

/// Slow tail: a hedge goes around a stuck request instead of waiting for it.
async fn slow_tail() -> Result<(), BoxError> {
    let calls = 200;
    println!(
        "\nSlow tail. The first request for one item in ten is stuck for 200 ms; {calls} GETs,"
    );
    println!("8 at a time, through backstop, then with a hedge after 20 ms as well:");
    println!(
        "{:<30} {:>7} {:>8} {:>8} {:>9} {:>7}  time",
        "client", "p50", "p99", "max", "upstream", "hedges"
    );
    for hedge in [false, true] {
        let upstream = stalling().await?;
        let base = format!("http://{}", upstream.addr);
        let builder = builder().retry(RetryPolicy::default());
        let (name, (latencies, hedges, took)) = if hedge {
            let after = HedgePolicy::after(Duration::from_millis(20));
            let client = stack(builder.hedge(after).build()?);
            (
                "backstop, hedge after 20 ms",
                timed(client, &base, calls).await,
            )
        } else {
            (
                "backstop",
                timed(stack(builder.build()?), &base, calls).await,
            )
        };
        let at = |q: f64| {
            let i = ((q * latencies.len() as f64).ceil() as usize).clamp(1, latencies.len());
            format!("{:.1}ms", latencies[i - 1].as_secs_f64() * 1e3)
        };
        println!(
            "{name:<30} {:>7} {:>8} {:>8} {:>9} {:>7}  {:.2}s",
            at(0.5),
            at(0.99),
            at(1.0),
            upstream.requests.load(Ordering::SeqCst),
            hedges,
            took.as_secs_f64(),
        );
    }
    println!("A stuck request costs one extra request, not 200 ms; the stuck copy is canceled.");
    Ok(())
}

/// An upstream that answers 503 to everything while `down` is set, 200 after.
async fn flaky(down: Arc<std::sync::atomic::AtomicBool>) -> std::io::Result<Upstream> {
    let requests = Arc::new(AtomicUsize::new(0));
    let counter = requests.clone();
    let addr = common::serve(false, move |_req: Request<Incoming>| {
        counter.fetch_add(1, Ordering::SeqCst);
        let mut res = Response::new(Full::<Bytes>::default());
        if down.load(Ordering::SeqCst) {
            *res.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        }
        async move { Ok::<_, std::io::Error>(res) }
    })
    .await?;
    Ok(Upstream { addr, requests })
}

/// Outage: what retries do to an upstream that is down, with and without load control.
async fn outage() -> Result<(), BoxError> {
    const CALLERS: usize = 20;
    const TICK: Duration = Duration::from_millis(10);
    const DOWN: Duration = Duration::from_millis(400);
    println!("\nOutage. An upstream answers 503 to everything for 400 ms; {CALLERS} callers each");
    println!("make a call every 10 ms (or when their last one ends), 4 attempts per call:");
    println!(
        "{:<34} {:>6} {:>9} {:>9} {:>8}",
        "client", "calls", "upstream", "per call", "refused"
    );
    for protected in [false, true] {
        let down = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let up = flaky(down.clone()).await?;
        let policy = RetryPolicy::builder()
            .max_attempts(4)
            .backoff(Duration::from_millis(5), Duration::from_millis(40))
            .build()?;
        let breaker = backstop::CircuitBreakerPolicy::builder()
            .consecutive_failures(5)
            .cooldown(Duration::from_millis(100))
            .max_cooldown(Duration::from_millis(100))
            .build()?;
        let builder = builder().retry(policy);
        let builder = if protected {
            builder
                .circuit_breaker(breaker)
                .budget(backstop::BudgetPolicy::default())
        } else {
            builder.no_budget()
        };
        let client = stack(builder.build()?);
        let started = Instant::now();
        let mut callers = tokio::task::JoinSet::new();
        for _ in 0..CALLERS {
            let client = client.clone();
            let uri = format!("http://{}/status", up.addr);
            callers.spawn(async move {
                let (mut calls, mut refused) = (0, 0);
                let mut tick = tokio::time::interval(TICK);
                while started.elapsed() < DOWN {
                    tick.tick().await;
                    let req = Request::get(uri.as_str()).body(Full::default()).unwrap();
                    calls += 1;
                    if let Err(err) = client.clone().oneshot(req).await {
                        refused += usize::from(err.is_circuit_open());
                    }
                }
                (calls, refused)
            });
        }
        let (mut calls, mut refused) = (0, 0);
        while let Some(done) = callers.join_next().await {
            let (c, r) = done?;
            calls += c;
            refused += r;
        }
        let during = up.requests.load(Ordering::SeqCst);
        down.store(false, Ordering::SeqCst);
        println!(
            "{:<34} {calls:>6} {during:>9} {:>9.2} {refused:>8}",
            if protected {
                "backstop: breaker + budget + retry"
            } else {
                "naive: retry, no budget or breaker"
            },
            during as f64 / calls.max(1) as f64,
        );
    }
    println!("(per call: upstream requests per call made during the outage; refused: calls the");
    println!(" open breaker turned away at once, without touching the network)");
    Ok(())
}
