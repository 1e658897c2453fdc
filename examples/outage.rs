//! What retries do to an upstream that is down, with and without load control.
//!
//! `cargo run --release --example outage`
//!
//! A real upstream on 127.0.0.1 answers every request with a 503 for 2.5 s, then
//! recovers. Fifty callers send it 2,000 calls a second in total, each on a steady
//! tick, whatever happened to their earlier calls. The same load runs four times,
//! through four `Backstop` stacks (`Backstop::builder()`, each turning more on) over
//! a hyper-util client wrapped in `ProgressTrackingLayer`:
//!
//! - **no retries**: `RetryPolicy::none()`, no budget;
//! - **naive**: four attempts per call, no budget (`no_budget()`);
//! - **budget**: the same four attempts with the default budget (20 % of first
//!   attempts, plus a floor of 10 retries a second over 10 s: at this load the floor
//!   is 100 retries per window against 5,000 first attempts in the outage, so it
//!   adds 2 % at most);
//! - **backstop**: a circuit breaker as well (5 failed calls in a row, 200 ms
//!   cooldown with 20 % jitter, one probe).
//!
//! Every stack uses a short backoff (10 ms doubling to 100 ms) so that the four
//! attempts of a call fit in the outage. Each request carries the phase in which
//! its call began, so the upstream counts the requests it got for the calls made
//! during the outage, retries included, wherever they landed in time.
//!
//! The table shows, per stack: upstream requests per call made during the outage,
//! calls the breaker refused, probes (calls the breaker let through while not
//! closed), the most probes within one cooldown, and the time from the recovery to
//! the first successful call. The last line is for scripts:
//!
//! ```text
//! outage naive_amplification=<x> budget_amplification=<y> probes_per_cooldown=<z>
//! ```
//!
//! Given `--chart <path>`, it also writes an SVG chart there: the upstream's
//! requests per second over time, per stack, in 100 ms buckets. The README's is
//! `cargo run --release --example outage -- --chart docs/outage.svg`; without
//! `--chart` it writes no file.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use backstop::budget::BudgetPolicy;
use backstop::circuit_breaker::{CircuitBreakerPolicy, State};
use backstop::{Backstop, BackstopLayer, BoxError, ProgressTrackingLayer, ReplayBody, RetryPolicy};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use tokio::time::{Instant, MissedTickBehavior};
use tower::util::BoxCloneService;
use tower::{Service, ServiceBuilder, ServiceExt};

const CALLERS: usize = 50;
/// Each caller's tick: 50 callers × 40 calls a second = 2,000 calls a second.
const TICK: Duration = Duration::from_millis(25);
const OUTAGE: Duration = Duration::from_millis(2500);
const AFTER: Duration = Duration::from_millis(1000);
const COOLDOWN: Duration = Duration::from_millis(200);
const JITTER: f64 = 0.2;
const PHASE: &str = "x-phase";
/// The chart's time resolution.
const BUCKET: Duration = Duration::from_millis(100);

/// The upstream: 503 while `down`, 200 after; counts requests by the phase their
/// call began in.
#[derive(Default)]
struct Upstream {
    down: AtomicBool,
    outage_requests: AtomicU64,
    total_requests: AtomicU64,
    /// When the callers started, and the requests that arrived in each bucket
    /// after it.
    started: OnceLock<Instant>,
    buckets: Vec<AtomicU64>,
}

async fn start_upstream(state: Arc<Upstream>) -> std::io::Result<SocketAddr> {
    common::serve(false, move |req: Request<Incoming>| {
        state.total_requests.fetch_add(1, Ordering::Relaxed);
        if let Some(started) = state.started.get() {
            let i = (started.elapsed().as_nanos() / BUCKET.as_nanos()) as usize;
            if let Some(bucket) = state.buckets.get(i) {
                bucket.fetch_add(1, Ordering::Relaxed);
            }
        }
        if req.headers().get(PHASE).is_some_and(|v| v == "outage") {
            state.outage_requests.fetch_add(1, Ordering::Relaxed);
        }
        let mut res = Response::new(Full::<Bytes>::default());
        if state.down.load(Ordering::Relaxed) {
            *res.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        }
        async move { Ok::<_, Infallible>(res) }
    })
    .await
}

type Transport = Client<HttpConnector, ReplayBody<Full<Bytes>>>;
type Stack = BoxCloneService<Request<Full<Bytes>>, Response<Incoming>, BoxError>;

fn transport() -> Transport {
    common::client(false)
}

fn retries(max_attempts: u32) -> RetryPolicy {
    RetryPolicy::builder()
        .max_attempts(max_attempts)
        .backoff(Duration::from_millis(10), Duration::from_millis(100))
        .build()
        .expect("valid policy")
}

/// What the probe counter saw: when each probe's attempt went out.
#[derive(Clone, Default)]
struct Probes(Arc<Mutex<Vec<Instant>>>);

#[derive(Clone, Copy, PartialEq)]
enum Scenario {
    NoRetries,
    Naive,
    Budget,
    Backstop,
}

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Scenario::NoRetries => "no retries",
            Scenario::Naive => "naive (4 attempts)",
            Scenario::Budget => "budget + retries",
            Scenario::Backstop => "breaker + budget + retries",
        }
    }

    /// The scenario's stack: the same builder, with more turned on.
    fn layer(self) -> BackstopLayer {
        let builder = Backstop::builder();
        let builder = match self {
            Scenario::NoRetries => builder.retry(RetryPolicy::none()).no_budget(),
            Scenario::Naive => builder.retry(retries(4)).no_budget(),
            Scenario::Budget => builder.retry(retries(4)).budget(BudgetPolicy::default()),
            Scenario::Backstop => {
                let breaker = CircuitBreakerPolicy::builder()
                    .cooldown(COOLDOWN)
                    .max_cooldown(COOLDOWN)
                    .jitter(JITTER)
                    .probes(1)
                    .build()
                    .expect("valid breaker");
                builder
                    .retry(retries(4))
                    .budget(BudgetPolicy::default())
                    .circuit_breaker(breaker)
            }
        };
        builder.build().expect("valid stack")
    }

    /// The scenario's client for calls to `uri`, counting probes in `probes`.
    fn stack(self, uri: &http::Uri, probes: &Probes) -> Stack {
        let layer = self.layer();
        let head = Request::get(uri)
            .body(())
            .expect("valid request")
            .into_parts()
            .0;
        let (breaker, probes) = (layer.clone(), probes.clone());
        BoxCloneService::new(
            ServiceBuilder::new()
                .layer(layer)
                // Beneath the stack, where each attempt goes out: while the breaker
                // is half-open it lets its one probe through and refuses every other
                // call, and every retry, so an attempt sent then is the probe's.
                .map_request(move |req: Request<ReplayBody<Full<Bytes>>>| {
                    if breaker.breaker_state(&head) == Some(State::HalfOpen) {
                        probes.0.lock().unwrap().push(Instant::now());
                    }
                    req
                })
                .layer(ProgressTrackingLayer::new())
                .service(transport())
                .map_err(BoxError::from),
        )
    }
}

#[derive(Default)]
struct Calls {
    outage: AtomicU64,
    refused: AtomicU64,
    /// Nanoseconds from the recovery to the first success, `u64::MAX` until then.
    first_success: AtomicU64,
}

struct Report {
    amplification: f64,
    outage_calls: u64,
    refused: u64,
    probes: usize,
    probes_per_cooldown: usize,
    recovery: Option<Duration>,
    /// Upstream requests per second, per bucket: (seconds since the start, rate).
    rate: Vec<(f64, f64)>,
}

async fn run(scenario: Scenario) -> Result<Report, BoxError> {
    let buckets = ((OUTAGE + AFTER).as_nanos() / BUCKET.as_nanos()) as usize;
    let upstream = Arc::new(Upstream {
        buckets: (0..buckets).map(|_| AtomicU64::new(0)).collect(),
        ..Upstream::default()
    });
    upstream.down.store(true, Ordering::Relaxed);
    let addr = start_upstream(upstream.clone()).await?;
    let uri: http::Uri = format!("http://{addr}/items").parse()?;
    let probes = Probes::default();
    let stack = scenario.stack(&uri, &probes);
    let calls = Arc::new(Calls {
        first_success: AtomicU64::new(u64::MAX),
        ..Calls::default()
    });

    let start = Instant::now();
    let _ = upstream.started.set(start);
    let recovery = start + OUTAGE;
    let end = recovery + AFTER;
    let mut callers = Vec::new();
    for i in 0..CALLERS {
        let (stack, calls, upstream, uri) =
            (stack.clone(), calls.clone(), upstream.clone(), uri.clone());
        callers.push(tokio::spawn(async move {
            // Spread the callers over one tick.
            let offset = TICK * i as u32 / CALLERS as u32;
            let mut tick = tokio::time::interval_at(start + offset, TICK);
            tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
            let mut in_flight = Vec::new();
            loop {
                let now = tick.tick().await;
                if now >= end {
                    break;
                }
                let during_outage = upstream.down.load(Ordering::Relaxed);
                if during_outage {
                    calls.outage.fetch_add(1, Ordering::Relaxed);
                }
                let req = Request::get(uri.clone())
                    .header(PHASE, if during_outage { "outage" } else { "after" })
                    .body(Full::default())
                    .expect("valid request");
                let mut stack = stack.clone();
                let calls = calls.clone();
                // Open loop: a slow call never delays the next one.
                in_flight.push(tokio::spawn(async move {
                    let result = match stack.ready().await {
                        Ok(svc) => svc.call(req).await,
                        Err(e) => Err(e),
                    };
                    match result {
                        Ok(res) => {
                            let ok = res.status() == StatusCode::OK;
                            let _ = res.into_body().collect().await;
                            let now = Instant::now();
                            if ok && now >= recovery {
                                let since = (now - recovery).as_nanos() as u64;
                                calls.first_success.fetch_min(since, Ordering::Relaxed);
                            }
                        }
                        Err(e) => {
                            let refused = e
                                .downcast_ref::<backstop::Error>()
                                .is_some_and(|e| e.is_circuit_open() && e.attempts() == 0);
                            if refused {
                                calls.refused.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                }));
            }
            for call in in_flight {
                let _ = call.await;
            }
        }));
    }
    tokio::time::sleep_until(recovery).await;
    upstream.down.store(false, Ordering::Relaxed);
    for caller in callers {
        caller.await?;
    }

    let outage_calls = calls.outage.load(Ordering::Relaxed);
    let outage_requests = upstream.outage_requests.load(Ordering::Relaxed);
    let probe_times = probes.0.lock().unwrap().clone();
    let first = calls.first_success.load(Ordering::Relaxed);
    Ok(Report {
        amplification: outage_requests as f64 / outage_calls.max(1) as f64,
        outage_calls,
        refused: calls.refused.load(Ordering::Relaxed),
        probes: probe_times.len(),
        probes_per_cooldown: most_within(&probe_times, COOLDOWN.mul_f64(1.0 - JITTER)),
        recovery: (first != u64::MAX).then(|| Duration::from_nanos(first)),
        rate: upstream
            .buckets
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let at = (i as f64 + 0.5) * BUCKET.as_secs_f64();
                (at, b.load(Ordering::Relaxed) as f64 / BUCKET.as_secs_f64())
            })
            .collect(),
    })
}

/// The most instants that fall within any span of length `span`.
fn most_within(times: &[Instant], span: Duration) -> usize {
    let mut times = times.to_vec();
    times.sort();
    let mut most = 0;
    let mut first = 0;
    for last in 0..times.len() {
        while times[last] - times[first] >= span {
            first += 1;
        }
        most = most.max(last - first + 1);
    }
    most
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let chart = common::chart::requested()?;
    println!(
        "upstream down for {:.1}s, then up for {:.1}s; {CALLERS} callers, {} calls/s in total\n",
        OUTAGE.as_secs_f64(),
        AFTER.as_secs_f64(),
        CALLERS as u128 * 1000 / TICK.as_millis(),
    );
    println!(
        "{:<28} {:>13} {:>12} {:>9} {:>7} {:>13} {:>17}",
        "stack",
        "req/call",
        "outage calls",
        "refused",
        "probes",
        "probes/cool.",
        "recovery→success"
    );
    let mut naive = 0.0;
    let mut budget = 0.0;
    let mut per_cooldown = 0;
    let mut series = Vec::new();
    for (i, scenario) in [
        Scenario::NoRetries,
        Scenario::Naive,
        Scenario::Budget,
        Scenario::Backstop,
    ]
    .into_iter()
    .enumerate()
    {
        let r = run(scenario).await?;
        series.push(common::chart::Series {
            name: scenario.name().to_owned(),
            points: r.rate.clone(),
            color: common::chart::COLORS[(i + 3) % 4],
        });
        let breaker = scenario == Scenario::Backstop;
        println!(
            "{:<28} {:>13.3} {:>12} {:>9} {:>7} {:>13} {:>17}",
            scenario.name(),
            r.amplification,
            r.outage_calls,
            if breaker {
                r.refused.to_string()
            } else {
                "-".into()
            },
            if breaker {
                r.probes.to_string()
            } else {
                "-".into()
            },
            if breaker {
                r.probes_per_cooldown.to_string()
            } else {
                "-".into()
            },
            r.recovery.map_or("none".to_owned(), |d| format!(
                "{:.1} ms",
                d.as_secs_f64() * 1e3
            )),
        );
        match scenario {
            Scenario::Naive => naive = r.amplification,
            Scenario::Budget => budget = r.amplification,
            Scenario::Backstop => per_cooldown = r.probes_per_cooldown,
            Scenario::NoRetries => {}
        }
    }
    println!(
        "\nreq/call: upstream requests per call made during the outage (retries included);\n\
         probes/cool.: the most probes within one cooldown ({} ms less {:.0} % jitter)\n",
        COOLDOWN.as_millis(),
        JITTER * 100.0
    );
    println!(
        "outage naive_amplification={naive:.2} budget_amplification={budget:.2} probes_per_cooldown={per_cooldown}"
    );

    let Some(path) = chart else {
        return Ok(());
    };
    let top = common::chart::top(&series);
    let title = format!(
        "Upstream requests per second: down for {:.1} s, then up",
        OUTAGE.as_secs_f64()
    );
    let look = common::chart::Look {
        title: &title,
        x_desc: "seconds since the start",
        y_desc: "upstream requests / s",
        y_format: |v| format!("{v:.0}"),
        legend: plotters::prelude::SeriesLabelPosition::UpperRight,
    };
    common::chart::lines(
        &path,
        look,
        0.0..(OUTAGE + AFTER).as_secs_f64(),
        0.0..(top * 1.1).max(1.0),
        &series,
    )?;
    println!("chart: {}", path.display());
    Ok(())
}
