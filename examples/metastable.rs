//! Metastable recovery: whether retries keep an upstream overloaded after the
//! trigger that overloaded it has passed.
//!
//! `cargo run --release --example metastable` (about 3½ minutes; `--quick` runs a
//! shorter timeline, for a look, in about a minute)
//!
//! Retries are a main sustaining effect of metastable failures (Bronson et al.,
//! HotOS '21; Huang et al., OSDI '22): a trigger overloads a system, the trigger
//! passes, and the retries it caused keep the system overloaded.
//!
//! **The upstream** is a real HTTP/2 server on 127.0.0.1 with a fixed capacity:
//! workers that get through 1,000 requests a second between them, first come first
//! served, from a queue of at most 500 requests (a deadline's worth of work at full
//! capacity). A request that finds the queue full is refused at once with a 503,
//! which costs the workers nothing. A request in the queue is processed when its
//! turn comes, whether or not its caller is still waiting: a caller that gave up
//! (and reset its stream) has still cost a worker its turn. That is wasted work.
//!
//! **The load** is open: calls start on a fixed schedule, 800 a second (80 % of
//! capacity), whatever happened to the earlier ones. Each call has a deadline of
//! 500 ms; it is *good* when it is answered 200 within it. **The trigger** drops
//! the capacity to 40 % (400 requests a second) for 10 s, then restores it.
//!
//! **The stacks** all run the same load, one after the other, each against a fresh
//! upstream, over one hyper-util HTTP/2 client (one connection: a timed-out
//! request resets its stream, not the connection). Every stack that retries makes
//! up to 3 attempts, each with a timeout of a third of the deadline (so the three
//! fit in it; an attempt timeout is where retries come from here, as a full queue
//! makes every attempt wait longer than that), and waits between them as
//! backstop's backoff draws (10 ms doubling to 100 ms, full jitter). They differ
//! only in what limits the retries:
//!
//! - `none`: no retries; the call's one attempt may take the whole deadline;
//! - `naive`: `tower::retry` with a policy that retries every error and 5xx up to
//!   the 3 attempts, no budget;
//! - `tower`: the same policy with `tower::retry::budget::TpsBudget` at its
//!   defaults (10 s, 10 retries a second, 20 %), used as its documentation shows: a
//!   deposit for each success, a withdrawal for each retry;
//! - `backstop`: `Backstop::builder()` with the same retry policy and its default
//!   budget (retries may add 20 % of the first attempts of the last 10 s, plus 10 a
//!   second);
//! - `backstop+breaker`: the same with a circuit breaker as well: the default one,
//!   tripping on its failure ratio only (see `breaker`);
//! - `backstop+breaker+throttle`: the same with client-side adaptive throttling
//!   (`ThrottlePolicy::default()`: the SRE book's K = 2 over two minutes).
//!
//! Adding a stack is one entry in [`STACKS`].
//!
//! **What it prints.** Per stack, the goodput (good calls ÷ calls started) before,
//! during and after the trigger, the upstream's requests per call and the share of
//! its work that was wasted after the restore, then one line per stack for scripts:
//!
//! ```text
//! metastable stack=<name> recovered_after_s=<x|never> goodput_after=<ratio>
//! ```
//!
//! - `recovered_after_s`: seconds from the restore to the start of the first
//!   one-second interval from which every interval to the end of the run has a
//!   goodput of at least 90 % of the calls offered in it (calls are counted in the
//!   second they start in); `never` when the last second of the run is below that.
//! - `goodput_after`: good calls ÷ calls started, over the calls started from the
//!   restore to the end of the run (25 s): the time it took to recover counts in it.
//!
//! Given `--chart <path>`, it also writes an SVG chart there: good calls per
//! second over time, per stack, beside the upstream's capacity. The README's is
//! `cargo run --release --example metastable -- --chart docs/metastable.svg`;
//! without `--chart` it writes no file.
//!
//! **The arithmetic.** At full capacity the queue's 500 requests take 500 ms: while
//! it is full, every attempt waits longer than its 167 ms timeout, fails and is
//! retried, and the workers spend their turns on requests nobody waits for.
//! Without retries the load (800 a second) is below the capacity: the queue drains
//! at 200 a second and the calls are on time again within a second. With 3 attempts
//! and every attempt failing, the load is 2,400 a second, more than twice the
//! capacity: the queue stays full and nothing succeeds again, although the trigger
//! is gone (the metastable state). A budget of 20 % of the first attempts of the
//! last 10 s (plus 100) keeps the load at 970 a second on average, under the
//! capacity by only 30; it is spent as failures come: a burst when they start
//! (the allowance saved before), 160 a second until the window's allowance is
//! gone, then none until the burst leaves the window. The seconds without retries
//! drain the queue at 200 a second, and that is when the budgeted stack recovers.
//! tower's budget, fed by successes only, allows no more than its reserve while
//! nothing succeeds. The breaker refuses every call while open, so the queue
//! empties; it recovers at the first probe after the restore (one cooldown, 5 s by
//! default, after it last opened).

mod common;

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backstop::budget::BudgetPolicy;
use backstop::circuit_breaker::CircuitBreakerPolicy;
use backstop::policy::Backoff;
use backstop::stack::BackstopBuilder;
use backstop::ThrottlePolicy;
use backstop::{Backstop, BoxError, ProgressTrackingLayer, ReplayBody, RetryPolicy};
use bytes::Bytes;
use http::{Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use tokio::sync::oneshot;
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};
use tower::retry::budget::{Budget, TpsBudget};
use tower::timeout::TimeoutLayer;
use tower::util::BoxCloneService;
use tower::{ServiceBuilder, ServiceExt};

/// Requests a second the upstream's workers get through at full capacity.
const CAPACITY: f64 = 1000.0;
/// The share of the capacity left during the trigger.
const TRIGGER_CAPACITY: f64 = 0.4;
/// Calls a second the clients start, as a share of the capacity.
const LOAD: f64 = 0.8;
/// Each call's deadline.
const DEADLINE: Duration = Duration::from_millis(500);
/// The longest the upstream's queue grows: a deadline's worth of work at full
/// capacity.
const QUEUE: usize = 500;
/// Attempts per call, the first included, for every stack that retries.
const ATTEMPTS: u32 = 3;
/// How far past its deadline the caller lets a stack run before it drops the
/// call: every stack ends its calls by the deadline itself, and a call answered
/// after it is lost anyway.
const GRACE: Duration = Duration::from_millis(100);
/// The time resolution of goodput.
const SECOND: Duration = Duration::from_secs(1);
/// Goodput, as a share of the offered load, that counts as recovered.
const RECOVERED: f64 = 0.9;

/// The run: so long before the trigger, the trigger, so long after it.
#[derive(Clone, Copy)]
struct Timeline {
    before: Duration,
    trigger: Duration,
    after: Duration,
}

impl Timeline {
    const FULL: Timeline = Timeline {
        before: Duration::from_secs(5),
        trigger: Duration::from_secs(10),
        after: Duration::from_secs(25),
    };
    /// `--quick`: the same shape, shorter; too short for the 2× goal to mean much.
    const QUICK: Timeline = Timeline {
        before: Duration::from_secs(2),
        trigger: Duration::from_secs(4),
        after: Duration::from_secs(8),
    };

    fn restore(&self) -> Duration {
        self.before + self.trigger
    }

    fn total(&self) -> Duration {
        self.restore() + self.after
    }

    /// The one-second intervals of the run.
    fn seconds(&self) -> usize {
        self.total().as_secs() as usize
    }
}

type Stack = BoxCloneService<Request<Full<Bytes>>, Response<Incoming>, BoxError>;

/// One stack the load runs through.
struct Entry {
    name: &'static str,
    build: fn() -> Result<Stack, BoxError>,
}

/// The stacks compared, in the order they run. Adding one is adding an entry.
const STACKS: &[Entry] = &[
    Entry {
        name: "none",
        build: no_retries,
    },
    Entry {
        name: "naive",
        build: || tower_retry(None),
    },
    Entry {
        name: "tower",
        build: || tower_retry(Some(Arc::new(TpsBudget::default()))),
    },
    Entry {
        name: "backstop",
        build: || backstop(Backstop::builder().budget(BudgetPolicy::default())),
    },
    Entry {
        name: "backstop+breaker",
        build: || {
            backstop(
                Backstop::builder()
                    .budget(BudgetPolicy::default())
                    .circuit_breaker(breaker()?),
            )
        },
    },
    Entry {
        name: "backstop+breaker+throttle",
        build: || {
            backstop(
                Backstop::builder()
                    .budget(BudgetPolicy::default())
                    .circuit_breaker(breaker()?)
                    .throttle(ThrottlePolicy::default()),
            )
        },
    },
];

/// The retries of every stack that retries: attempts, backoff, the attempt
/// timeout, and the call's deadline. backstop takes it as it is; the tower stacks
/// read the same numbers from it.
fn retries() -> Result<RetryPolicy, BoxError> {
    Ok(RetryPolicy::builder()
        .max_attempts(ATTEMPTS)
        .backoff(Duration::from_millis(10), Duration::from_millis(100))
        .attempt_timeout(DEADLINE / ATTEMPTS)
        .timeout(DEADLINE)
        .build()?)
}

/// The default breaker (opens at 50 % failed calls of the last 30 s, then 5 s
/// before a probe), tripping on that ratio only: at 800 calls a second its other
/// signal, 5 failed calls in a row, is a few milliseconds of trouble, and a stall
/// of a busy machine tripped it before the trigger.
fn breaker() -> Result<CircuitBreakerPolicy, BoxError> {
    Ok(CircuitBreakerPolicy::builder()
        .consecutive_failures(0)
        .build()?)
}

fn no_retries() -> Result<Stack, BoxError> {
    Ok(BoxCloneService::new(
        ServiceBuilder::new()
            .layer(TimeoutLayer::new(DEADLINE))
            .service(common::client::<Full<Bytes>>(true)),
    ))
}

/// `tower::retry` over a timeout per attempt, under a timeout per call; a budget
/// when given one.
fn tower_retry(budget: Option<Arc<TpsBudget>>) -> Result<Stack, BoxError> {
    let policy = retries()?;
    let attempts = TowerPolicy {
        retries_left: policy.max_attempts() - 1,
        retries_made: 0,
        backoff: policy.backoff(),
        budget,
    };
    let attempt_timeout = policy.attempt_timeout().ok_or("an attempt timeout")?;
    Ok(BoxCloneService::new(
        ServiceBuilder::new()
            .layer(TimeoutLayer::new(DEADLINE))
            .layer(tower::retry::RetryLayer::new(attempts))
            .layer(TimeoutLayer::new(attempt_timeout))
            .service(common::client::<Full<Bytes>>(true)),
    ))
}

/// A `tower::retry` policy: retry an error or a 5xx while attempts are left (and,
/// with a budget, while it allows), after backstop's backoff. With a budget, it
/// is used as tower's documentation shows: a deposit for each success, a
/// withdrawal for each retry.
#[derive(Clone)]
struct TowerPolicy {
    retries_left: u32,
    retries_made: u32,
    backoff: Backoff,
    budget: Option<Arc<TpsBudget>>,
}

impl tower::retry::Policy<Request<Full<Bytes>>, Response<Incoming>, BoxError> for TowerPolicy {
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        _req: &mut Request<Full<Bytes>>,
        result: &mut Result<Response<Incoming>, BoxError>,
    ) -> Option<Self::Future> {
        let failed = match result {
            Ok(res) => res.status().is_server_error(),
            Err(_) => true,
        };
        if !failed {
            if let Some(budget) = &self.budget {
                budget.deposit();
            }
            return None;
        }
        if self.retries_left == 0 {
            return None;
        }
        if let Some(budget) = &self.budget {
            if !budget.withdraw() {
                return None;
            }
        }
        self.retries_left -= 1;
        self.retries_made += 1;
        Some(tokio::time::sleep(self.backoff.wait(self.retries_made)))
    }

    fn clone_request(&mut self, req: &Request<Full<Bytes>>) -> Option<Request<Full<Bytes>>> {
        let mut copy = Request::new(req.body().clone());
        *copy.method_mut() = req.method().clone();
        *copy.uri_mut() = req.uri().clone();
        *copy.headers_mut() = req.headers().clone();
        Some(copy)
    }
}

/// A backstop stack from `builder` (which sets what limits the retries) with the
/// shared retry policy.
fn backstop(builder: BackstopBuilder) -> Result<Stack, BoxError> {
    let layer = builder.retry(retries()?).build()?;
    Ok(BoxCloneService::new(
        ServiceBuilder::new()
            .layer(layer)
            .layer(ProgressTrackingLayer::new())
            .service(common::client::<ReplayBody<Full<Bytes>>>(true))
            .map_err(BoxError::from),
    ))
}

/// Counts per one-second interval of the run.
struct Seconds {
    start: Instant,
    counts: Vec<AtomicU64>,
}

impl Seconds {
    fn new(start: Instant, seconds: usize) -> Self {
        Seconds {
            start,
            counts: (0..seconds).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Counts one at `at` (nothing outside the run).
    fn add(&self, at: Instant) {
        let Some(since) = at.checked_duration_since(self.start) else {
            return;
        };
        let i = (since.as_nanos() / SECOND.as_nanos()) as usize;
        if let Some(count) = self.counts.get(i) {
            count.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn get(&self) -> Vec<f64> {
        self.counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed) as f64)
            .collect()
    }
}

/// The upstream: a queue and the workers' capacity, and what they did each second.
struct Upstream {
    /// Requests a second the workers get through now, as `f64` bits.
    capacity: AtomicU64,
    /// Each waiting request's answer.
    queue: Mutex<VecDeque<oneshot::Sender<()>>>,
    /// Requests that arrived, and requests processed for a caller who had gone.
    arrived: Seconds,
    wasted: Seconds,
    processed: Seconds,
}

impl Upstream {
    fn new(start: Instant, seconds: usize) -> Self {
        Upstream {
            capacity: AtomicU64::new(CAPACITY.to_bits()),
            queue: Mutex::new(VecDeque::with_capacity(QUEUE)),
            arrived: Seconds::new(start, seconds),
            wasted: Seconds::new(start, seconds),
            processed: Seconds::new(start, seconds),
        }
    }

    fn set_capacity(&self, share: f64) {
        self.capacity
            .store((CAPACITY * share).to_bits(), Ordering::Relaxed);
    }

    /// A request: refused at once when the queue is full, else answered when the
    /// workers get to it.
    async fn handle(self: Arc<Self>) -> Result<Response<Full<Bytes>>, Infallible> {
        self.arrived.add(Instant::now());
        let (answer, answered) = oneshot::channel();
        let queued = {
            let mut queue = self.queue.lock().unwrap();
            let room = queue.len() < QUEUE;
            if room {
                queue.push_back(answer);
            }
            room
        };
        let mut res = Response::new(Full::default());
        if !queued || answered.await.is_err() {
            *res.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        }
        Ok(res)
    }

    /// The workers: every millisecond (or as soon after as the machine allows),
    /// as many requests as the capacity allows for the time since the last round,
    /// oldest first. Idle workers bank no time.
    async fn work(self: Arc<Self>) {
        let mut tick = tokio::time::interval(Duration::from_millis(1));
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut last = Instant::now();
        let mut credit = 0.0;
        loop {
            let now = tick.tick().await;
            let capacity = f64::from_bits(self.capacity.load(Ordering::Relaxed));
            credit += capacity * (now - last).as_secs_f64();
            last = now;
            let mut queue = self.queue.lock().unwrap();
            while credit >= 1.0 {
                let Some(answer) = queue.pop_front() else {
                    break;
                };
                credit -= 1.0;
                self.processed.add(now);
                // The caller may have gone: its turn is spent all the same.
                if answer.send(()).is_err() {
                    self.wasted.add(now);
                }
            }
            if queue.is_empty() {
                credit = credit.min(1.0);
            }
        }
    }
}

async fn start_upstream(upstream: Arc<Upstream>) -> std::io::Result<SocketAddr> {
    common::serve(true, move |_req: Request<Incoming>| {
        upstream.clone().handle()
    })
    .await
}

/// What one stack did, per second of the run.
struct Report {
    offered: Vec<f64>,
    good: Vec<f64>,
    arrived: Vec<f64>,
    wasted: Vec<f64>,
    processed: Vec<f64>,
}

/// One call: good when answered 200 within its deadline.
async fn call(stack: Stack, uri: Uri) -> bool {
    let begun = Instant::now();
    let req = Request::get(uri)
        .body(Full::default())
        .expect("valid request");
    let answered = tokio::time::timeout(DEADLINE + GRACE, async {
        let res = stack.oneshot(req).await?;
        let ok = res.status() == StatusCode::OK;
        res.into_body().collect().await?;
        Ok::<_, BoxError>(ok)
    })
    .await;
    matches!(answered, Ok(Ok(true))) && begun.elapsed() <= DEADLINE
}

async fn run(entry: &Entry, timeline: Timeline) -> Result<Report, BoxError> {
    let stack = (entry.build)()?;
    // The clock starts once the upstream and the stack are ready: the one
    // connection is opened by a first call, before it.
    let start = Instant::now() + Duration::from_millis(100);
    let seconds = timeline.seconds();
    let upstream = Arc::new(Upstream::new(start, seconds));
    let addr = start_upstream(upstream.clone()).await?;
    let uri: Uri = format!("http://{addr}/").parse()?;
    let workers = tokio::spawn(upstream.clone().work());
    call(stack.clone(), uri.clone()).await;

    let offered = Arc::new(Seconds::new(start, seconds));
    let good = Arc::new(Seconds::new(start, seconds));
    let rate = CAPACITY * LOAD;
    let end = start + timeline.total();
    let mut calls = JoinSet::new();
    let mut tick = tokio::time::interval_at(start, Duration::from_millis(1));
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut started = 0u64;
    let mut capacity = 1.0;
    loop {
        let now = tick.tick().await;
        if now >= end {
            break;
        }
        let since = now - start;
        let share = if since < timeline.before || since >= timeline.restore() {
            1.0
        } else {
            TRIGGER_CAPACITY
        };
        if share != capacity {
            upstream.set_capacity(share);
            capacity = share;
        }
        // Open loop: the calls due by now start now, whatever the earlier ones do.
        let due = (since.as_secs_f64() * rate) as u64;
        for _ in started..due {
            let (stack, uri, offered, good) =
                (stack.clone(), uri.clone(), offered.clone(), good.clone());
            calls.spawn(async move {
                offered.add(now);
                if call(stack, uri).await {
                    good.add(now);
                }
            });
        }
        started = due;
        while calls.try_join_next().is_some() {}
    }
    while calls.join_next().await.is_some() {}
    workers.abort();
    Ok(Report {
        offered: offered.get(),
        good: good.get(),
        arrived: upstream.arrived.get(),
        wasted: upstream.wasted.get(),
        processed: upstream.processed.get(),
    })
}

/// The sum of `values` over the seconds `from..`.
fn sum_from(values: &[f64], from: usize) -> f64 {
    values.iter().skip(from).sum()
}

impl Report {
    /// Good calls ÷ calls started, over the seconds `range`.
    fn goodput(&self, range: std::ops::Range<usize>) -> f64 {
        let good: f64 = self.good[range.clone()].iter().sum();
        let offered: f64 = self.offered[range].iter().sum();
        good / offered.max(1.0)
    }

    /// Whole seconds from the restore (second `restore`) to the first second from
    /// which every second to the end has a goodput of at least [`RECOVERED`];
    /// `None` when the last one has not.
    fn recovered_after(&self, restore: usize) -> Option<usize> {
        let good = |i: usize| self.good[i] >= RECOVERED * self.offered[i];
        let n = self.good.len();
        let first = (restore..n).rev().take_while(|&i| good(i)).last()?;
        Some(first - restore)
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = common::chart::args(&["--quick"])?;
    let timeline = if args.has("--quick") {
        Timeline::QUICK
    } else {
        Timeline::FULL
    };
    let restore = timeline.restore().as_secs() as usize;
    println!(
        "upstream: {CAPACITY:.0} requests/s, queue {QUEUE}; {:.0} calls/s, deadline {} ms; \
         capacity {:.0} % from {} s to {} s; {} s in all\n",
        CAPACITY * LOAD,
        DEADLINE.as_millis(),
        TRIGGER_CAPACITY * 100.0,
        timeline.before.as_secs(),
        restore,
        timeline.total().as_secs(),
    );
    println!(
        "{:<26} {:>8} {:>8} {:>8} {:>10} {:>9} {:>8}",
        "stack", "before", "during", "after", "recovered", "req/call", "wasted"
    );
    let mut lines = Vec::new();
    let mut series = Vec::new();
    for (i, entry) in STACKS.iter().enumerate() {
        let r = run(entry, timeline).await?;
        let before = timeline.before.as_secs() as usize;
        let recovered = r.recovered_after(restore);
        let after = r.goodput(restore..r.good.len());
        println!(
            "{:<26} {:>8.3} {:>8.3} {:>8.3} {:>10} {:>9.2} {:>7.0} %",
            entry.name,
            r.goodput(0..before),
            r.goodput(before..restore),
            after,
            recovered.map_or("never".to_owned(), |s| format!("{s} s")),
            sum_from(&r.arrived, restore) / sum_from(&r.offered, restore).max(1.0),
            100.0 * sum_from(&r.wasted, restore) / sum_from(&r.processed, restore).max(1.0),
        );
        lines.push(format!(
            "metastable stack={} recovered_after_s={} goodput_after={after:.3}",
            entry.name,
            recovered.map_or("never".to_owned(), |s| s.to_string()),
        ));
        series.push(common::chart::Series {
            name: entry.name.to_owned(),
            points: r
                .good
                .iter()
                .enumerate()
                .map(|(i, &good)| (i as f64 + 0.5, good))
                .collect(),
            color: common::chart::COLORS[i % common::chart::COLORS.len()],
        });
    }
    println!(
        "\nbefore, during, after: good calls ÷ calls started in each phase (good: a 200 \
         within the deadline);\nrecovered: from the restore to the first second from which \
         every second has ≥ {:.0} % good;\nreq/call: requests the upstream got per call, and \
         wasted: the share of its work done for callers who had given up, after the restore\n",
        RECOVERED * 100.0
    );
    for line in lines {
        println!("{line}");
    }

    let Some(path) = args.chart else {
        return Ok(());
    };
    let (down, up) = (timeline.before.as_secs_f64(), restore as f64);
    let low = CAPACITY * TRIGGER_CAPACITY;
    series.push(common::chart::Series {
        name: "upstream capacity".to_owned(),
        points: vec![
            (0.0, CAPACITY),
            (down, CAPACITY),
            (down, low),
            (up, low),
            (up, CAPACITY),
            (timeline.total().as_secs_f64(), CAPACITY),
        ],
        color: common::chart::GREY,
    });
    let title = format!(
        "Calls answered within {} ms, per second: capacity {:.0} % for {} s",
        DEADLINE.as_millis(),
        TRIGGER_CAPACITY * 100.0,
        timeline.trigger.as_secs()
    );
    let look = common::chart::Look {
        title: &title,
        x_desc: "seconds since the start",
        y_desc: "good calls / s",
        y_format: |v| format!("{v:.0}"),
        legend: plotters::prelude::SeriesLabelPosition::MiddleRight,
    };
    common::chart::lines(
        &path,
        look,
        0.0..timeline.total().as_secs_f64(),
        0.0..CAPACITY * 1.1,
        &series,
    )?;
    println!("chart: {}", path.display());
    Ok(())
}
