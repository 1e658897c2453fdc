//! A soak of the whole stack: what a long-running client holds on to.
//!
//! 100,000 calls (GETs, and POSTs the stack keys) go through one `Backstop` stack
//! (`Backstop::builder()`: idempotency keys, circuit breaker, budget, retry and
//! hedge) with `ProgressTrackingLayer` around a hyper-util client, 64 at a time,
//! against a loopback upstream that fails about 10 % of its requests in varied
//! ways (503, 503 with `Retry-After: 0`, 429 with `retry-after-ms`, 502, a closed
//! connection, a slow answer that the hedge races). Then one call to each of 10,000
//! distinct origins (ports of 127.0.0.1 that refuse), then idle while the client's
//! pool lets its connections go.
//!
//! It prints open file descriptors, live tokio tasks, registry entries (one per
//! origin, holding its breaker and budget account) and resident memory before,
//! during (the most seen) and after each phase, and ends with one line a script can
//! read:
//!
//! ```text
//! soak calls=<n> errors=<n> fds_before=<n> fds_after=<n> tasks_after=<n> registry_after=<n>
//! ```
//!
//! Run it with `cargo run --release --example soak --all-features` (Linux: it reads
//! `/proc/self`).

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use backstop::budget::BudgetPolicy;
use backstop::circuit_breaker::CircuitBreakerPolicy;
use backstop::hedge::HedgePolicy;
use backstop::stack::WithHedge;
use backstop::{
    Backstop, BackstopLayer, BoxError, IdempotencyKeyLayer, ProgressTrackingLayer, ReplayBody,
    RetryPolicy,
};
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tower::{Service, ServiceBuilder, ServiceExt};

const CALLS: usize = 100_000;
const CONCURRENCY: usize = 64;
const ORIGINS: usize = 10_000;

/// A count from the environment (`SOAK_CALLS`, `SOAK_ORIGINS`) for a shorter run.
fn count(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
/// How long the client's pool keeps an idle connection.
const POOL_IDLE: Duration = Duration::from_secs(1);
/// The idle phase: long enough for the pool to let every connection go.
const IDLE: Duration = Duration::from_secs(4);

/// What the process holds at one moment.
#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    fds: usize,
    tasks: usize,
    registry: usize,
    rss_kib: usize,
}

impl Sample {
    /// A sample, with the registry entries `stack` (and every service it made)
    /// holds now.
    fn take(stack: &BackstopLayer<WithHedge>) -> Sample {
        Sample {
            fds: open_fds(),
            tasks: tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks(),
            registry: stack.origins(),
            rss_kib: resident_kib(),
        }
    }

    fn max(self, other: Sample) -> Sample {
        Sample {
            fds: self.fds.max(other.fds),
            tasks: self.tasks.max(other.tasks),
            registry: self.registry.max(other.registry),
            rss_kib: self.rss_kib.max(other.rss_kib),
        }
    }

    fn row(&self, stage: &str) {
        println!(
            "{stage:<28} {:>6} {:>6} {:>9} {:>10}",
            self.fds, self.tasks, self.registry, self.rss_kib
        );
    }
}

/// Open file descriptors (the listing's own included, the same in every sample).
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |dir| dir.count())
}

/// Resident memory in KiB, from `/proc/self/statm` (pages of 4 KiB).
fn resident_kib() -> usize {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<usize>().ok())
        .map_or(0, |pages| pages * 4)
}

/// A small seeded generator (xorshift64*), so every run fails the same requests.
fn mix(n: u64) -> u64 {
    let mut x = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    x.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// The upstream's answer to its n-th request: about one in ten fails.
async fn answer(n: usize) -> Result<Response<Full<Bytes>>, std::io::Error> {
    let mut res = Response::new(Full::new(Bytes::from_static(b"ok")));
    match mix(n as u64) % 100 {
        0..=2 => *res.status_mut() = StatusCode::SERVICE_UNAVAILABLE,
        3 => {
            *res.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            res.headers_mut()
                .insert("retry-after", "0".parse().unwrap());
        }
        4 => {
            *res.status_mut() = StatusCode::TOO_MANY_REQUESTS;
            res.headers_mut()
                .insert("retry-after-ms", "5".parse().unwrap());
        }
        5 => *res.status_mut() = StatusCode::BAD_GATEWAY,
        // An error from the service makes hyper close the connection unanswered.
        6 | 7 => return Err(std::io::Error::other("closing without an answer")),
        // Slower than the hedge delay: a copy races it.
        8 | 9 => tokio::time::sleep(Duration::from_millis(30)).await,
        _ => {}
    }
    Ok(res)
}

type Transport = Client<HttpConnector, ReplayBody<Full<Bytes>>>;

fn transport() -> Transport {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(POOL_IDLE)
        .pool_timer(TokioTimer::new())
        .build(connector)
}

#[derive(Default)]
struct Tally {
    calls: AtomicUsize,
    errors: AtomicUsize,
    failed_answers: AtomicUsize,
}

impl Tally {
    async fn record(&self, result: Result<Response<Incoming>, BoxError>) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        match result {
            Ok(res) => {
                let ok = res.status().is_success();
                // Read the body so the connection goes back to the pool.
                let read = res.into_body().collect().await.is_ok();
                if !ok || !read {
                    self.failed_answers.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(_) => {
                self.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Runs `calls` requests made by `request`, `CONCURRENCY` at a time.
async fn run<S>(
    svc: S,
    calls: usize,
    request: Arc<dyn Fn(usize) -> Request<Full<Bytes>> + Send + Sync>,
    tally: Arc<Tally>,
) where
    S: Service<Request<Full<Bytes>>, Response = Response<Incoming>, Error = BoxError>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..CONCURRENCY {
        let (mut svc, next, tally, request) =
            (svc.clone(), next.clone(), tally.clone(), request.clone());
        workers.spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= calls {
                    return;
                }
                let result = match svc.ready().await {
                    Ok(svc) => svc.call(request(n)).await,
                    Err(e) => Err(e),
                };
                tally.record(result).await;
            }
        });
    }
    while workers.join_next().await.is_some() {}
}

/// Ports of 127.0.0.1 that refuse: nothing listens on them (each could be bound,
/// and was let go at once), taken in order from 20000.
fn refusing_ports(n: usize) -> std::io::Result<Vec<u16>> {
    let ports: Vec<u16> = (20_000..=u16::MAX)
        .filter(|&port| std::net::TcpListener::bind(("127.0.0.1", port)).is_ok())
        .take(n)
        .collect();
    if ports.len() < n {
        return Err(std::io::Error::other("not enough free ports on 127.0.0.1"));
    }
    Ok(ports)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let served = Arc::new(AtomicUsize::new(0));
    let counter = served.clone();
    let addr = common::serve(false, move |_req: Request<Incoming>| {
        answer(counter.fetch_add(1, Ordering::Relaxed))
    })
    .await?;

    // Windows short enough that the idle phase outlasts them: an origin's entries
    // are forgotten once unused for longer than they still matter.
    let budget = BudgetPolicy::builder()
        .window(Duration::from_secs(2))
        .build()?;
    let breaker = CircuitBreakerPolicy::builder()
        .window(Duration::from_secs(2))
        .cooldown(Duration::from_millis(500))
        .max_cooldown(Duration::from_secs(2))
        .build()?;
    let policy = RetryPolicy::builder()
        .backoff(Duration::from_millis(1), Duration::from_millis(10))
        .attempt_timeout(Duration::from_millis(500))
        .timeout(Duration::from_secs(2))
        .build()?;
    // The layer, and every service it makes, share the stack's breakers and
    // accounts: the samples read them through it.
    let stack = Backstop::builder()
        .retry(policy)
        .hedge(HedgePolicy::after(Duration::from_millis(15)))
        .budget(budget)
        .circuit_breaker(breaker)
        .idempotency_key(IdempotencyKeyLayer::new())
        .build()?;
    let svc = ServiceBuilder::new()
        .map_err(Into::<BoxError>::into)
        .layer(stack.clone())
        .layer(ProgressTrackingLayer::new())
        .service(transport());

    println!(
        "{:<28} {:>6} {:>6} {:>9} {:>10}",
        "stage", "fds", "tasks", "registry", "rss_kib"
    );
    let before = Sample::take(&stack);
    before.row("before");

    // The most each phase holds, sampled every 100 ms.
    let during = Arc::new(Mutex::new(Sample::default()));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (during, sampling, stack) = (during.clone(), sampling.clone(), stack.clone());
        tokio::spawn(async move {
            while sampling.load(Ordering::Relaxed) {
                let now = Sample::take(&stack);
                {
                    let mut max = during.lock().unwrap();
                    *max = max.max(now);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    let tally = Arc::new(Tally::default());
    let started = Instant::now();
    let base = format!("http://{addr}");
    let request: Arc<dyn Fn(usize) -> Request<Full<Bytes>> + Send + Sync> = Arc::new(move |n| {
        let post = n % 5 == 0;
        Request::builder()
            .method(if post { Method::POST } else { Method::GET })
            .uri(format!("{base}/items/{}", n % 100))
            .body(Full::new(if post {
                Bytes::from_static(b"{\"item\":1}")
            } else {
                Bytes::new()
            }))
            .expect("a valid request")
    });
    run(
        svc.clone(),
        count("SOAK_CALLS", CALLS),
        request,
        tally.clone(),
    )
    .await;
    let calls_took = started.elapsed();
    let upstream_requests = served.load(Ordering::Relaxed);
    during.lock().unwrap().row("during calls (max)");
    Sample::take(&stack).row("after calls");

    *during.lock().unwrap() = Sample::default();
    let origins = count("SOAK_ORIGINS", ORIGINS);
    let ports = Arc::new(refusing_ports(origins)?);
    let origins_tally = Arc::new(Tally::default());
    let started = Instant::now();
    let request: Arc<dyn Fn(usize) -> Request<Full<Bytes>> + Send + Sync> = Arc::new(move |n| {
        Request::get(format!("http://127.0.0.1:{}/", ports[n]))
            .body(Full::new(Bytes::new()))
            .expect("a valid request")
    });
    run(svc.clone(), origins, request, origins_tally.clone()).await;
    let origins_took = started.elapsed();
    during.lock().unwrap().row("during origins (max)");
    Sample::take(&stack).row("after origins");

    sampling.store(false, Ordering::Relaxed);
    let _ = sampler.await;
    drop(svc);
    tokio::time::sleep(IDLE).await;
    let after = Sample::take(&stack);
    after.row("after idle");

    let calls = tally.calls.load(Ordering::Relaxed);
    let errors =
        tally.errors.load(Ordering::Relaxed) + tally.failed_answers.load(Ordering::Relaxed);
    println!(
        "\n{calls} calls in {:.1} s ({} upstream requests, {} failed answers, {} errors); \
         {} origins in {:.1} s ({} refused calls)",
        calls_took.as_secs_f64(),
        upstream_requests,
        tally.failed_answers.load(Ordering::Relaxed),
        tally.errors.load(Ordering::Relaxed),
        origins,
        origins_took.as_secs_f64(),
        origins_tally.errors.load(Ordering::Relaxed),
    );
    println!(
        "soak calls={calls} errors={errors} fds_before={} fds_after={} tasks_after={} registry_after={}",
        before.fds, after.fds, after.tasks, after.registry
    );
    Ok(())
}
