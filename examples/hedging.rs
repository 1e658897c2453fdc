//! Hedging against a long latency tail, measured.
//!
//! `cargo run --release --example hedging`
//!
//! A loopback HTTP/2 upstream answers 97 % of requests after about 1 ms and 3 %
//! after 100 ms, decided per request by a seeded generator, so a copy of a slow
//! request is usually fast. The same GET calls (16 at a time) go through four
//! clients: no hedging, tower's `hedge` (p95), and backstop's stack
//! (`Backstop::builder()` with the default retry policy and budget, over the client
//! wrapped in `ProgressTrackingLayer`) hedging after a fixed 10 ms delay, and
//! adaptively (after the origin's p95). Each client first warms up for
//! 1.2 s (tower's histogram needs one full period before it hedges), then the
//! measured calls run. The table shows latency percentiles and the extra requests
//! the upstream received, as a share of the calls.
//!
//! The last line is for scripts:
//! `hedging p99_none_ms=<a> p99_backstop_ms=<b> extra_load_pct=<c>` (backstop
//! adaptive).
//!
//! Given `--chart <path>`, it also writes an SVG chart there: the latency
//! distribution (CDF) of each client from its 90th percentile up, on a log scale.
//! The README's is `cargo run --release --example hedging -- --chart docs/hedging.svg`;
//! without `--chart` it writes no file.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use backstop::hedge::HedgePolicy;
use backstop::progress::ProgressTracking;
use backstop::stack::WithHedge;
use backstop::{Backstop, BoxError, ProgressTrackingLayer, ReplayBody, RetryPolicy};
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use tower::{Service, ServiceBuilder, ServiceExt};

const CALLS: usize = 10_000;
const CONCURRENCY: usize = 16;
const WARM_UP: Duration = Duration::from_millis(1_200);
const SEED: u64 = 0x5eed_f00d;
/// Per 10 000 requests, how many are slow.
const SLOW_PER_10K: u64 = 300;
const FAST: Duration = Duration::from_millis(1);
const SLOW: Duration = Duration::from_millis(100);
/// The chart shows the CDF from this quantile up: the tail hedging is about.
const TAIL: f64 = 0.9;

/// SplitMix64: a tiny seeded generator, one draw per request.
fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

struct Upstream {
    addr: SocketAddr,
    requests: Arc<AtomicUsize>,
}

/// The upstream: HTTP/2 over cleartext, TCP_NODELAY, each request slow or fast
/// independently of the others.
async fn upstream() -> std::io::Result<Upstream> {
    let requests = Arc::new(AtomicUsize::new(0));
    let counter = requests.clone();
    let addr = common::serve(true, move |_req: Request<Incoming>| {
        let n = counter.fetch_add(1, Ordering::Relaxed) as u64;
        let slow = splitmix(SEED ^ n) % 10_000 < SLOW_PER_10K;
        async move {
            tokio::time::sleep(if slow { SLOW } else { FAST }).await;
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
        }
    })
    .await?;
    Ok(Upstream { addr, requests })
}

/// The clients: HTTP/2, like the upstream.
fn client<B>() -> Client<HttpConnector, B>
where
    B: http_body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    common::client(true)
}

/// backstop's stack over a client declared once for the replay body.
type Stack = Backstop<ProgressTracking<Client<HttpConnector, ReplayBody<Full<Bytes>>>>, WithHedge>;

/// backstop's stack hedging as `hedge` says; every hedge spends from its budget.
fn backstop(hedge: HedgePolicy) -> Result<Stack, BoxError> {
    let layer = Backstop::builder()
        .retry(RetryPolicy::default())
        .hedge(hedge)
        .build()?;
    Ok(ServiceBuilder::new()
        .layer(layer)
        .layer(ProgressTrackingLayer::new())
        .service(client()))
}

/// tower's hedge clones the request up front; every GET here can be.
#[derive(Clone)]
struct CloneGets;

impl tower::hedge::Policy<Request<Full<Bytes>>> for CloneGets {
    fn clone_request(&self, req: &Request<Full<Bytes>>) -> Option<Request<Full<Bytes>>> {
        let mut copy = Request::new(req.body().clone());
        *copy.method_mut() = req.method().clone();
        *copy.uri_mut() = req.uri().clone();
        *copy.headers_mut() = req.headers().clone();
        Some(copy)
    }

    fn can_retry(&self, _: &Request<Full<Bytes>>) -> bool {
        true
    }
}

struct Tally {
    latencies: Vec<Duration>,
    failed: usize,
    extra: usize,
}

impl Tally {
    fn percentile(&self, q: f64) -> f64 {
        let n = self.latencies.len();
        let i = ((q * n as f64).ceil() as usize).clamp(1, n) - 1;
        self.latencies[i].as_secs_f64() * 1e3
    }

    fn extra_pct(&self) -> f64 {
        100.0 * self.extra as f64 / self.latencies.len().max(1) as f64
    }
}

/// Sends `calls` GETs, `CONCURRENCY` at a time, or keeps sending for `for_at_least`.
async fn load<S>(
    client: &S,
    base: &str,
    calls: usize,
    for_at_least: Duration,
) -> (Vec<Duration>, usize)
where
    S: Service<Request<Full<Bytes>>, Response = Response<Incoming>> + Clone + Send + 'static,
    S::Error: std::fmt::Debug + Send,
    S::Future: Send,
{
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..CONCURRENCY {
        let (client, next) = (client.clone(), next.clone());
        let uri = format!("{base}/item");
        workers.spawn(async move {
            let mut latencies = Vec::new();
            let mut failed = 0;
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= calls && started.elapsed() >= for_at_least {
                    break;
                }
                let req = Request::get(&uri).body(Full::default()).unwrap();
                let t = Instant::now();
                match client.clone().oneshot(req).await {
                    Ok(res) if res.status().is_success() => {
                        let _ = res.into_body().collect().await;
                        latencies.push(t.elapsed());
                    }
                    _ => failed += 1,
                }
            }
            (latencies, failed)
        });
    }
    let mut all = Vec::with_capacity(calls);
    let mut failed = 0;
    while let Some(done) = workers.join_next().await {
        let (latencies, f) = done.expect("a worker panicked");
        all.extend(latencies);
        failed += f;
    }
    (all, failed)
}

/// Warms `client` up, then measures `CALLS` calls.
async fn measure<S>(client: S, up: &Upstream) -> Tally
where
    S: Service<Request<Full<Bytes>>, Response = Response<Incoming>> + Clone + Send + 'static,
    S::Error: std::fmt::Debug + Send,
    S::Future: Send,
{
    let base = format!("http://{}", up.addr);
    load(&client, &base, 0, WARM_UP).await;
    let before = up.requests.load(Ordering::SeqCst);
    let (mut latencies, failed) = load(&client, &base, CALLS, Duration::ZERO).await;
    let received = up.requests.load(Ordering::SeqCst) - before;
    latencies.sort();
    let calls = latencies.len() + failed;
    Tally {
        latencies,
        failed,
        extra: received.saturating_sub(calls),
    }
}

fn row(name: &str, t: &Tally) {
    println!(
        "{name:<28} {:>7.2} {:>8.2} {:>9.2} {:>8.2}% {:>7}",
        t.percentile(0.50),
        t.percentile(0.99),
        t.percentile(0.999),
        t.extra_pct(),
        t.failed,
    );
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let chart = common::chart::requested()?;
    let up = upstream().await?;
    println!(
        "hedging: {CALLS} GETs, {CONCURRENCY} at a time, to an HTTP/2 upstream on {} that",
        up.addr
    );
    println!(
        "answers {:.0} % of requests after {} ms and {:.0} % after {} ms (independently).\n",
        100.0 - SLOW_PER_10K as f64 / 100.0,
        FAST.as_millis(),
        SLOW_PER_10K as f64 / 100.0,
        SLOW.as_millis()
    );
    println!(
        "{:<28} {:>7} {:>8} {:>9} {:>9} {:>7}",
        "client", "p50 ms", "p99 ms", "p99.9 ms", "extra", "failed"
    );

    let none = measure(client::<Full<Bytes>>(), &up).await;
    row("no hedging", &none);

    // tower's hedge is not Clone: a buffer shares it between the callers.
    let tower_hedge = tower::hedge::Hedge::new(
        client::<Full<Bytes>>(),
        CloneGets,
        50,
        0.95,
        Duration::from_secs(1),
    );
    let tower_hedge = tower::buffer::Buffer::new(tower_hedge, 1_024);
    let tower = measure(tower_hedge, &up).await;
    row("tower hedge (p95)", &tower);

    let fixed = backstop(HedgePolicy::after(Duration::from_millis(10)))?;
    let fixed = measure(fixed, &up).await;
    row("backstop fixed 10 ms", &fixed);

    let adaptive = backstop(HedgePolicy::adaptive(Duration::from_millis(10)))?;
    let adaptive = measure(adaptive, &up).await;
    row("backstop adaptive (p95)", &adaptive);

    let (p99_none, p99_backstop) = (none.percentile(0.99), adaptive.percentile(0.99));
    println!(
        "\nbackstop adaptive: p99 {:.1}× lower than without hedging, for {:.2} % more requests.",
        p99_none / p99_backstop,
        adaptive.extra_pct()
    );
    println!(
        "hedging p99_none_ms={p99_none:.2} p99_backstop_ms={p99_backstop:.2} extra_load_pct={:.2}",
        adaptive.extra_pct()
    );

    let Some(path) = chart else {
        return Ok(());
    };
    use common::chart::{cdf, lines, Look, Series, COLORS};
    use plotters::prelude::IntoLogRange;
    let clients = [
        ("no hedging", &none),
        ("tower hedge (p95)", &tower),
        ("backstop fixed 10 ms", &fixed),
        ("backstop adaptive (p95)", &adaptive),
    ];
    let series: Vec<Series> = clients
        .iter()
        .enumerate()
        .map(|(i, (name, t))| {
            let ms: Vec<f64> = t.latencies.iter().map(|d| d.as_secs_f64() * 1e3).collect();
            Series {
                name: format!("{name}: p99 {:.1} ms", t.percentile(0.99)),
                points: cdf(&ms, 2_000, TAIL),
                color: COLORS[i],
            }
        })
        .collect();
    let slowest = clients
        .iter()
        .filter_map(|(_, t)| t.latencies.last())
        .max()
        .map_or(1.0, |d| d.as_secs_f64() * 1e3);
    let title = format!(
        "Latency CDF, the slowest 10 % of calls ({:.0} % of requests take {} ms, not {} ms)",
        SLOW_PER_10K as f64 / 100.0,
        SLOW.as_millis(),
        FAST.as_millis()
    );
    let look = Look {
        title: &title,
        x_desc: "latency, ms (log scale)",
        y_desc: "share of calls answered",
        y_format: |v| format!("{v:.2}"),
        legend: plotters::prelude::SeriesLabelPosition::LowerRight,
    };
    lines(
        &path,
        look,
        (1.0..slowest * 1.5).log_scale(),
        TAIL..1.005,
        &series,
    )?;
    println!("chart: {}", path.display());
    Ok(())
}
