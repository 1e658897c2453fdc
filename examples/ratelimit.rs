//! What one "come back later" does to a client with many callers, with and
//! without the origin pause.
//!
//! `cargo run --release --example ratelimit`
//!
//! A real upstream on 127.0.0.1 lets through `LIMIT` requests per second (fixed
//! one-second windows) and answers everything above that with `429 Too Many
//! Requests` and `Retry-After: 1`. Two hundred callers, each in a closed loop (a
//! call, then the next), call it for five seconds through one `Backstop` stack
//! (`Backstop::builder()`) over a hyper-util client wrapped in
//! `ProgressTrackingLayer`, with the default budget and retry policy (three
//! attempts, hints up to 10 s waited) and a 3 s deadline per call.
//! The same load runs twice:
//!
//! - **without the pause** (`PauseMode::Off`): each call honours the hint it got,
//!   and only that call; the other callers keep sending, and a caller whose call
//!   ended (attempts or budget spent) sends its next call at once;
//! - **with the pause** (the default, `PauseMode::Wait`): the first 429 pauses the
//!   origin for its hint; until then no call reaches it, and the calls that waited
//!   are released over the 200 ms spread.
//!
//! The table shows, per run: requests the upstream got, 429s the client received
//! (counted beneath the retry layer, one per attempt), the calls made and the
//! calls that succeeded, the most 429s one caller received within one pause
//! window (1 s), calls refused because the origin was paused (how many before
//! their first attempt) and those among them whose deadline would have left room
//! to wait (the goal is none), and the p99 latency of all calls. The last line is for scripts:
//!
//! ```text
//! ratelimit without_pause_429s=<n> with_pause_429s=<n> with_pause_ok=<n> calls=<n>
//! ```
//!
//! where `calls` is the number of calls made in the run with the pause.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backstop::budget::{BudgetPolicy, PauseMode};
use backstop::policy::{AttemptOutcome, Deadline, History};
use backstop::{Backstop, BoxError, ProgressTrackingLayer, ReplayBody, RetryPolicy};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use tokio::time::Instant;
use tower::util::BoxCloneService;
use tower::{Service, ServiceBuilder, ServiceExt};

const CALLERS: usize = 200;
const RUN: Duration = Duration::from_secs(5);
/// Requests per second the upstream lets through.
const LIMIT: u64 = 100;
const DEADLINE: Duration = Duration::from_secs(3);
/// The hint the upstream sends, and so the pause window.
const WINDOW: Duration = Duration::from_secs(1);
/// The least time a call must have left after a pause to wait for it (the
/// budget's default).
const MIN_ATTEMPT: Duration = Duration::from_millis(10);

/// The upstream: a fixed-window rate limit of `LIMIT` per second.
struct Upstream {
    start: Instant,
    /// The current window's number and the requests counted in it.
    window: Mutex<(u64, u64)>,
    requests: AtomicU64,
}

async fn start_upstream(state: Arc<Upstream>) -> std::io::Result<SocketAddr> {
    common::serve(false, move |_req: Request<Incoming>| {
        state.requests.fetch_add(1, Ordering::Relaxed);
        let now = (Instant::now() - state.start).as_secs();
        let allowed = {
            let mut window = state.window.lock().unwrap();
            if window.0 != now {
                *window = (now, 0);
            }
            window.1 += 1;
            window.1 <= LIMIT
        };
        let mut res = Response::new(Full::<Bytes>::default());
        if !allowed {
            *res.status_mut() = StatusCode::TOO_MANY_REQUESTS;
            res.headers_mut().insert(
                http::header::RETRY_AFTER,
                http::HeaderValue::from_static("1"),
            );
        }
        async move { Ok::<_, Infallible>(res) }
    })
    .await
}

type Transport = Client<HttpConnector, ReplayBody<Full<Bytes>>>;
type Stack = BoxCloneService<Request<Full<Bytes>>, Response<Incoming>, BoxError>;

fn stack(pause: bool, received_429s: Arc<AtomicU64>) -> Stack {
    let client: Transport = common::client(false);
    let mode = if pause {
        PauseMode::Wait
    } else {
        PauseMode::Off
    };
    let budget = BudgetPolicy::builder()
        .pause_mode(mode)
        .build()
        .expect("valid budget");
    let layer = Backstop::builder()
        .retry(RetryPolicy::default())
        .budget(budget)
        .build()
        .expect("valid stack");
    BoxCloneService::new(
        ServiceBuilder::new()
            .layer(layer)
            // Beneath the stack: every attempt's answer.
            .map_response(move |res: Response<Incoming>| {
                if res.status() == StatusCode::TOO_MANY_REQUESTS {
                    received_429s.fetch_add(1, Ordering::Relaxed);
                }
                res
            })
            .layer(ProgressTrackingLayer::new())
            .service(client)
            .map_err(BoxError::from),
    )
}

/// What one caller saw.
#[derive(Default)]
struct Caller {
    calls: u64,
    ok: u64,
    /// Calls refused because the origin was paused, and those among them whose
    /// deadline had room for the rest of the pause plus the minimum attempt time.
    refused: u64,
    refused_first: u64,
    refused_with_room: u64,
    latencies: Vec<Duration>,
    /// When each 429 this caller's attempts received arrived.
    limited_at: Vec<Instant>,
}

impl Caller {
    /// Notes the 429s of a call that started at `started`, from its history.
    fn note(&mut self, started: Instant, history: Option<&History>) {
        for a in history.map(History::attempts).unwrap_or_default() {
            if a.outcome == AttemptOutcome::Status(StatusCode::TOO_MANY_REQUESTS) {
                self.limited_at.push(started + a.elapsed);
            }
        }
    }
}

struct Report {
    requests: u64,
    received_429s: u64,
    calls: u64,
    ok: u64,
    most_429s_per_window: usize,
    refused: u64,
    refused_first: u64,
    refused_with_room: u64,
    p99: Duration,
}

async fn run(pause: bool) -> Result<Report, BoxError> {
    let upstream = Arc::new(Upstream {
        start: Instant::now(),
        window: Mutex::new((0, 0)),
        requests: AtomicU64::new(0),
    });
    let addr = start_upstream(upstream.clone()).await?;
    let uri: http::Uri = format!("http://{addr}/items").parse()?;
    let received_429s = Arc::new(AtomicU64::new(0));
    let stack = stack(pause, received_429s.clone());
    let end = Instant::now() + RUN;
    let mut callers = Vec::new();
    for _ in 0..CALLERS {
        let (mut stack, uri) = (stack.clone(), uri.clone());
        callers.push(tokio::spawn(async move {
            let mut me = Caller::default();
            while Instant::now() < end {
                let mut req = Request::get(uri.clone())
                    .body(Full::default())
                    .expect("valid request");
                let deadline = Deadline::after(DEADLINE);
                req.extensions_mut().insert(deadline);
                let started = Instant::now();
                me.calls += 1;
                let result = match stack.ready().await {
                    Ok(svc) => svc.call(req).await,
                    Err(e) => Err(e),
                };
                match result {
                    Ok(res) => {
                        me.note(started, res.extensions().get::<History>());
                        if res.status() == StatusCode::OK {
                            me.ok += 1;
                        }
                        let _ = res.into_body().collect().await;
                    }
                    Err(e) => {
                        if let Some(e) = e.downcast_ref::<backstop::Error>() {
                            me.note(started, e.history());
                            if e.is_paused() {
                                me.refused += 1;
                                if e.attempts() == 0 {
                                    me.refused_first += 1;
                                }
                                let left =
                                    deadline.instant().saturating_duration_since(Instant::now());
                                let needed = e.retry_after().unwrap_or_default() + MIN_ATTEMPT;
                                if left >= needed {
                                    me.refused_with_room += 1;
                                }
                            }
                        }
                    }
                }
                me.latencies.push(started.elapsed());
            }
            me
        }));
    }
    let mut report = Report {
        requests: 0,
        received_429s: 0,
        calls: 0,
        ok: 0,
        most_429s_per_window: 0,
        refused: 0,
        refused_first: 0,
        refused_with_room: 0,
        p99: Duration::ZERO,
    };
    let mut latencies = Vec::new();
    for caller in callers {
        let mut me = caller.await?;
        report.calls += me.calls;
        report.ok += me.ok;
        report.refused += me.refused;
        report.refused_first += me.refused_first;
        report.refused_with_room += me.refused_with_room;
        latencies.append(&mut me.latencies);
        me.limited_at.sort();
        report.most_429s_per_window = report
            .most_429s_per_window
            .max(most_within(&me.limited_at, WINDOW));
    }
    latencies.sort();
    if !latencies.is_empty() {
        report.p99 = latencies[(latencies.len() * 99).div_ceil(100) - 1];
    }
    report.requests = upstream.requests.load(Ordering::Relaxed);
    report.received_429s = received_429s.load(Ordering::Relaxed);
    Ok(report)
}

/// The most of the sorted instants `times` within one `span`.
fn most_within(times: &[Instant], span: Duration) -> usize {
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
    println!(
        "upstream: {LIMIT} requests/s, then 429 + Retry-After: 1; {CALLERS} callers in closed loops for {:.0}s, {:.0}s deadline per call\n",
        RUN.as_secs_f64(),
        DEADLINE.as_secs_f64(),
    );
    println!(
        "{:<15} {:>9} {:>9} {:>7} {:>7} {:>13} {:>8} {:>6} {:>10} {:>9}",
        "run",
        "upstream",
        "429s",
        "calls",
        "ok",
        "429s/caller/w",
        "refused",
        "1st",
        "with room",
        "p99"
    );
    let mut without = 0;
    let mut with = None;
    for pause in [false, true] {
        let r = run(pause).await?;
        println!(
            "{:<15} {:>9} {:>9} {:>7} {:>7} {:>13} {:>8} {:>6} {:>10} {:>7.0}ms",
            if pause { "with pause" } else { "without pause" },
            r.requests,
            r.received_429s,
            r.calls,
            r.ok,
            r.most_429s_per_window,
            r.refused,
            r.refused_first,
            r.refused_with_room,
            r.p99.as_secs_f64() * 1e3,
        );
        if pause {
            with = Some(r);
        } else {
            without = r.received_429s;
        }
    }
    let with = with.expect("the run with the pause");
    println!(
        "\nupstream: requests the upstream got; 429s: 429s the client received (every attempt);\n\
         429s/caller/w: the most 429s one caller received within one pause window ({} s);\n\
         refused: calls refused because the origin was paused (1st: before their first\n\
         attempt, held through pauses until the deadline had no room left; the others on\n\
         a retry); with room: those whose deadline had room to wait for the pause (the\n\
         goal is none); p99: of every call\n",
        WINDOW.as_secs()
    );
    println!(
        "ratelimit without_pause_429s={without} with_pause_429s={} with_pause_ok={} calls={}",
        with.received_429s, with.ok, with.calls
    );
    Ok(())
}
