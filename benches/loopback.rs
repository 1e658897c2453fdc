//! What each stack costs over a real hyper-util client and a hyper server on
//! 127.0.0.1, HTTP/1.1 and HTTP/2, 32 calls in flight.
//!
//! `cargo bench --bench loopback`
//!
//! The stacks (bare client, `tower::retry`, backstop's `RetryLayer`, the whole
//! `Backstop` stack: key, breaker, budget, retry over progress, admission run in the
//! retry layer's own future, and `backstop_layers`, the same five as separate layers) run interleaved in rounds,
//! each round in a new order, so the machine's drift falls on all of them. Each line
//! gives a stack's throughput and its p50 and p99 latency as a ratio to the bare
//! client's in the same rounds:
//!
//! ```text
//! loopback proto=h1 stack=backstop_stack throughput_ratio=0.95 p50_ratio=1.04 p99_ratio=1.06
//! ```
//!
//! It also prints the size of each layer's response future over the client's.
//! The throughput ratio is the median over rounds of the bare client's time over
//! the stack's in the same round, so a round slowed by other work on the machine is
//! set aside. `LOOPBACK_CALLS` sets the calls per stack and round (default 4000),
//! and `LOOPBACK_ROUNDS` the rounds (default 20). `LOOPBACK_ONLY=h2:backstop_stack`
//! runs one stack alone for `calls * rounds` calls and prints nothing, for a
//! profiler (`perf stat`, `perf record`).
//!
//! The instructions a stack adds per call over a real client, exact where the
//! throughput is noisy: run one stack alone under callgrind for two numbers of calls,
//! and divide the difference of the totals by the difference of the calls (the
//! connections and the runtime cost the same in both runs); do the same for `bare`.
//!
//! ```text
//! cargo bench --bench loopback --no-run
//! for n in 2000 6000; do
//!   LOOPBACK_ONLY=h2:backstop_stack LOOPBACK_CALLS=$n LOOPBACK_ROUNDS=1 valgrind \
//!     --tool=callgrind --callgrind-out-file=/dev/null target/release/deps/loopback-<hash>
//! done
//! ```
//!
//! The two worker threads make the count move by about 150 from one run to the next.

use std::convert::Infallible;
use std::future::{ready, Ready};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use backstop::{
    BudgetLayer, BudgetPolicy, CircuitBreakerLayer, CircuitBreakerPolicy, IdempotencyKeyLayer,
    ProgressTrackingLayer, ReplayBody, RetryLayer, RetryPolicy,
};
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tower::util::BoxCloneService;
use tower::{Layer, Service, ServiceBuilder, ServiceExt};

const CONCURRENCY: usize = 32;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Stack = BoxCloneService<Request<Full<Bytes>>, Response<Incoming>, BoxError>;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Proto {
    H1,
    H2,
}

impl Proto {
    fn name(self) -> &'static str {
        match self {
            Proto::H1 => "h1",
            Proto::H2 => "h2",
        }
    }
}

async fn serve(proto: Proto) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            let io = TokioIo::new(stream);
            let svc = hyper::service::service_fn(|_req: Request<Incoming>| async {
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
            });
            tokio::spawn(async move {
                let _ = match proto {
                    Proto::H1 => {
                        hyper::server::conn::http1::Builder::new()
                            .serve_connection(io, svc)
                            .await
                    }
                    Proto::H2 => {
                        hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                            .serve_connection(io, svc)
                            .await
                    }
                };
            });
        }
    });
    addr
}

fn client<B>(proto: Proto) -> Client<HttpConnector, B>
where
    B: hyper::body::Body + Send + 'static + Unpin,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let mut builder = Client::builder(TokioExecutor::new());
    if proto == Proto::H2 {
        builder.http2_only(true);
    }
    builder.build(connector)
}

/// Retries 5xx up to twice, cloning the request before each attempt.
#[derive(Clone)]
struct TowerPolicy(usize);

impl<E> tower::retry::Policy<Request<Full<Bytes>>, Response<Incoming>, E> for TowerPolicy {
    type Future = Ready<()>;

    fn retry(
        &mut self,
        _: &mut Request<Full<Bytes>>,
        result: &mut Result<Response<Incoming>, E>,
    ) -> Option<Self::Future> {
        match result {
            Ok(res) if res.status().is_server_error() && self.0 > 0 => {
                self.0 -= 1;
                Some(ready(()))
            }
            _ => None,
        }
    }

    fn clone_request(&mut self, req: &Request<Full<Bytes>>) -> Option<Request<Full<Bytes>>> {
        Some(req.clone())
    }
}

/// The whole stack: key, breaker, budget and retry in one `Backstop` layer.
fn backstop() -> backstop::BackstopLayer {
    backstop::Backstop::builder()
        .retry(RetryPolicy::default())
        .idempotency_key(IdempotencyKeyLayer::new())
        .circuit_breaker(CircuitBreakerPolicy::default())
        .budget(BudgetPolicy::default())
        .build()
        .unwrap()
}

fn stacks(proto: Proto) -> Vec<(&'static str, Stack)> {
    let bare = client::<Full<Bytes>>(proto).map_err(BoxError::from);
    let tower_retry = tower::retry::RetryLayer::new(TowerPolicy(2))
        .layer(client::<Full<Bytes>>(proto))
        .map_err(BoxError::from);
    let backstop_retry = RetryLayer::new(RetryPolicy::default())
        .layer(client::<ReplayBody<Full<Bytes>>>(proto))
        .map_err(BoxError::from);
    let backstop_stack = ServiceBuilder::new()
        .map_err(BoxError::from)
        .layer(backstop())
        .layer(ProgressTrackingLayer::new())
        .service(client::<ReplayBody<Full<Bytes>>>(proto));
    let backstop_layers = ServiceBuilder::new()
        .map_err(BoxError::from)
        .layer(IdempotencyKeyLayer::new())
        .layer(CircuitBreakerLayer::new(CircuitBreakerPolicy::default()))
        .layer(BudgetLayer::new(BudgetPolicy::default()))
        .layer(RetryLayer::new(RetryPolicy::default()))
        .layer(ProgressTrackingLayer::new())
        .service(client::<ReplayBody<Full<Bytes>>>(proto));
    vec![
        ("bare", BoxCloneService::new(bare)),
        ("tower_retry", BoxCloneService::new(tower_retry)),
        ("backstop_retry", BoxCloneService::new(backstop_retry)),
        ("backstop_stack", BoxCloneService::new(backstop_stack)),
        ("backstop_layers", BoxCloneService::new(backstop_layers)),
    ]
}

/// Sends `calls` requests through `svc`, `CONCURRENCY` at a time; the elapsed time
/// and every call's latency.
async fn run(svc: &Stack, uri: &http::Uri, calls: usize) -> (Duration, Vec<Duration>) {
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..CONCURRENCY {
        let (svc, uri, next) = (svc.clone(), uri.clone(), next.clone());
        workers.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut svc = svc;
            while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < calls {
                let req = Request::get(uri.clone())
                    .header("accept", "text/plain")
                    .body(Full::default())
                    .unwrap();
                let t = Instant::now();
                let res = svc.ready().await.unwrap().call(req).await.unwrap();
                let _ = res.into_body().collect().await.unwrap();
                latencies.push(t.elapsed());
            }
            latencies
        }));
    }
    let mut all = Vec::with_capacity(calls);
    for w in workers {
        all.extend(w.await.unwrap());
    }
    (started.elapsed(), all)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn future_sizes() {
    /// The size of `svc`'s response future for requests of type `R`.
    fn size<S: Service<R>, R>(_: &S) -> usize {
        std::mem::size_of::<S::Future>()
    }
    type Plain = Request<Full<Bytes>>;
    type Replay = Request<ReplayBody<Full<Bytes>>>;
    let transport = client::<ReplayBody<Full<Bytes>>>(Proto::H1);
    let retry = || RetryLayer::new(RetryPolicy::default()).layer(transport.clone());
    let sizes = [
        ("client", size::<_, Replay>(&transport)),
        (
            "progress",
            size::<_, Replay>(&ProgressTrackingLayer::new().layer(transport.clone())),
        ),
        (
            "hedge",
            size::<_, Replay>(
                &backstop::HedgeLayer::new(backstop::HedgePolicy::default())
                    .layer(transport.clone()),
            ),
        ),
        ("retry", size::<_, Plain>(&retry())),
        // The whole stack: admission inside the retry layer's future, and hedging.
        (
            "backstop_stack",
            size::<_, Plain>(&backstop().layer(transport.clone())),
        ),
        (
            "budget",
            size::<_, Plain>(&BudgetLayer::new(BudgetPolicy::default()).layer(retry())),
        ),
        (
            "circuit_breaker",
            size::<_, Plain>(
                &CircuitBreakerLayer::new(CircuitBreakerPolicy::default()).layer(retry()),
            ),
        ),
        (
            "idempotency_key",
            size::<_, Plain>(&IdempotencyKeyLayer::new().layer(retry())),
        ),
        (
            "tower_retry",
            size::<_, Plain>(
                &tower::retry::RetryLayer::new(TowerPolicy(2))
                    .layer(client::<Full<Bytes>>(Proto::H1)),
            ),
        ),
    ];
    for (layer, bytes) in sizes {
        println!("future_size layer={layer} bytes={bytes}");
    }
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is accepted and ignored.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let calls = env("LOOPBACK_CALLS", 4000);
    let rounds = env("LOOPBACK_ROUNDS", 20);
    rt.block_on(async {
        future_sizes();
        // `LOOPBACK_ONLY=<proto>:<stack>` runs that one stack alone, for a profiler.
        let only = std::env::var("LOOPBACK_ONLY").ok();
        for proto in [Proto::H1, Proto::H2] {
            let addr = serve(proto).await;
            let uri: http::Uri = format!("http://{addr}/items/42").parse().unwrap();
            let mut stacks = stacks(proto);
            if let Some(only) = &only {
                stacks.retain(|(name, _)| *only == format!("{}:{name}", proto.name()));
                for (_, svc) in &stacks {
                    run(svc, &uri, calls * rounds).await;
                }
                continue;
            }
            // Warm every stack's connections first.
            for (_, svc) in &stacks {
                run(svc, &uri, CONCURRENCY * 4).await;
            }
            // Each stack's time in each round: a round's stacks ran back to back, so
            // their ratio to the bare client's time in the same round shares the
            // machine's state of that moment.
            let mut elapsed = vec![Vec::with_capacity(rounds); stacks.len()];
            let mut latencies: Vec<Vec<Duration>> = vec![Vec::new(); stacks.len()];
            for round in 0..rounds {
                for k in 0..stacks.len() {
                    let i = (k + round) % stacks.len();
                    let (took, lat) = run(&stacks[i].1, &uri, calls).await;
                    elapsed[i].push(took);
                    latencies[i].extend(lat);
                }
            }
            let stats: Vec<(f64, Duration, Duration)> = (0..stacks.len())
                .map(|i| {
                    latencies[i].sort();
                    // The median over rounds of the bare client's time over this
                    // stack's: a round that a burst of other work slowed is set aside.
                    let mut ratios: Vec<f64> = (0..rounds)
                        .map(|r| elapsed[0][r].as_secs_f64() / elapsed[i][r].as_secs_f64())
                        .collect();
                    ratios.sort_by(f64::total_cmp);
                    (
                        ratios[rounds / 2],
                        percentile(&latencies[i], 0.50),
                        percentile(&latencies[i], 0.99),
                    )
                })
                .collect();
            let total: Duration = elapsed[0].iter().sum();
            let bare_tp = (calls * rounds) as f64 / total.as_secs_f64();
            let (_, bare_p50, bare_p99) = stats[0];
            println!(
                "loopback proto={} stack=bare throughput_rps={:.0} p50_us={:.1} p99_us={:.1}",
                proto.name(),
                bare_tp,
                bare_p50.as_secs_f64() * 1e6,
                bare_p99.as_secs_f64() * 1e6
            );
            for (i, (name, _)) in stacks.iter().enumerate().skip(1) {
                let (ratio, p50, p99) = stats[i];
                println!(
                    "loopback proto={} stack={} throughput_ratio={:.3} p50_ratio={:.3} p99_ratio={:.3}",
                    proto.name(),
                    name,
                    ratio,
                    p50.as_secs_f64() / bare_p50.as_secs_f64(),
                    p99.as_secs_f64() / bare_p99.as_secs_f64(),
                );
            }
        }
    });
}
