//! Replicas in separate processes sharing one origin pause and one leased retry
//! budget through a real `redis-server` on 127.0.0.1, with and without sharing.
//!
//! `cargo run --example fleet --features redis,test-util` starts its own
//! `redis-server` (install it first: `apt-get install redis-server`), a loopback
//! origin, and 20 replica processes (this example re-running itself with
//! `--replica`), and prints one line per run:
//!
//! - `fleet replicas=20 shared=<on|off> origin_429s=<n> calls=<n> ok=<n>`: each
//!   replica makes 10 calls a second for 12 s; the origin takes 300 requests per
//!   5 s for the whole fleet and answers `429` with `Retry-After: 5` once they are
//!   spent. Shared, the first 429 pauses every replica; not shared, each replica
//!   must meet a 429 of its own.
//! - `fleet outage shared=<on|off> amplification=<x>`: each replica makes 2 calls
//!   a second; the origin is down (`503`) for 10 s. Amplification: the origin's
//!   requests during the outage over the calls made in it. Shared, the fleet
//!   leases one budget (the ratio of its first attempts plus one floor); not
//!   shared, every replica has its own floor.
//! - `fleet store_down failed_calls=<n> waited_calls=<n>`: a healthy origin, 10
//!   calls a second per replica for 8 s; `redis-server` is killed at 3 s and
//!   restarted at 5 s. A call fails if it is not a `200`, waits if it takes over
//!   100 ms. The example also checks that every replica saw its fleet view go
//!   stale and come back (sharing resumed), and fails otherwise.
//!
//! The durations are the issue's, scaled where it leaves them open so that the
//! whole example takes about a minute in a debug build. Given `--chart <path>` it
//! writes an SVG of the origin's 429s over time, shared and not
//! (`docs/fleet.svg`); without it, it writes no file.

mod common;

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use backstop::budget::BudgetPolicy;
use backstop::fleet::{Fleet, FleetEvent, RedisStore};
use backstop::test_util::RedisServer;
use backstop::{Backstop, BoxError, RetryPolicy};
use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;
use tokio::io::AsyncReadExt;
use tokio::time::{sleep, sleep_until, timeout, Instant};
use tower::{ServiceBuilder, ServiceExt};

const REPLICAS: usize = 20;
/// How long the replicas take to start before the first call.
const LEAD: Duration = Duration::from_millis(1500);
/// The chart's time resolution.
const BUCKET: Duration = Duration::from_millis(250);

/// What the origin does.
#[derive(Clone, Copy)]
enum Origin {
    /// `quota` requests per `window` for the whole fleet, then 429 with
    /// `Retry-After: 5` until the window ends.
    Limited { quota: u32, window: Duration },
    /// 503 from `from` to `to` (after the start), 200 otherwise.
    Down { from: Duration, to: Duration },
    /// 200 always.
    Healthy,
}

/// What the origin saw.
#[derive(Default)]
struct Seen {
    requests: u64,
    /// When each 429 was sent, after the start.
    too_many: Vec<Duration>,
    /// Requests while down.
    while_down: u64,
    /// Requests in the current window (of `Limited`), and its index.
    window: (u64, u32),
}

/// One run: what the replicas do, what the origin does, and what to do midway.
struct Run {
    shared: bool,
    origin: Origin,
    rate: u32,
    secs: u64,
    /// Kill redis-server at the first, restart it at the second.
    store_down: Option<(Duration, Duration)>,
}

/// What a replica reports.
#[derive(Default, Debug)]
struct Report {
    calls: u64,
    ok: u64,
    failed: u64,
    waited: u64,
    /// Calls started while the origin was down.
    in_outage: u64,
    stale: u64,
    fresh: u64,
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

/// `unix` (milliseconds) as a tokio instant.
fn instant_at(unix: u64) -> Instant {
    Instant::now() + Duration::from_millis(unix.saturating_sub(unix_ms()))
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--replica") {
        return replica(&args[1..]).await;
    }
    let chart = common::chart::requested()?;
    let mut redis = RedisServer::start()?;
    let limited = Origin::Limited {
        quota: 300,
        window: Duration::from_secs(5),
    };
    let mut series = Vec::new();
    for (i, shared) in [true, false].into_iter().enumerate() {
        let run = Run {
            shared,
            origin: limited,
            rate: 10,
            secs: 12,
            store_down: None,
        };
        let (seen, reports) = run_fleet(&run, &mut redis).await?;
        let sum = total(&reports);
        println!(
            "fleet replicas={REPLICAS} shared={} origin_429s={} calls={} ok={}",
            on(shared),
            seen.too_many.len(),
            sum.calls,
            sum.ok
        );
        series.push(common::chart::Series {
            name: format!("shared={}", on(shared)),
            points: per_bucket(&seen.too_many, run.secs),
            color: common::chart::COLORS[i],
        });
    }
    for shared in [true, false] {
        let run = Run {
            shared,
            origin: Origin::Down {
                from: Duration::from_secs(1),
                to: Duration::from_secs(11),
            },
            rate: 2,
            secs: 12,
            store_down: None,
        };
        let (seen, reports) = run_fleet(&run, &mut redis).await?;
        let calls = total(&reports).in_outage.max(1);
        println!(
            "fleet outage shared={} amplification={:.2}",
            on(shared),
            seen.while_down as f64 / calls as f64
        );
    }
    let run = Run {
        shared: true,
        origin: Origin::Healthy,
        rate: 10,
        secs: 8,
        store_down: Some((Duration::from_secs(3), Duration::from_secs(5))),
    };
    let (_, reports) = run_fleet(&run, &mut redis).await?;
    let sum = total(&reports);
    println!(
        "fleet store_down failed_calls={} waited_calls={}",
        sum.failed, sum.waited
    );
    if reports.iter().any(|r| r.stale == 0 || r.fresh == 0) {
        return Err("a replica did not see its fleet view go stale and come back".into());
    }

    let Some(path) = chart else {
        return Ok(());
    };
    let top = common::chart::top(&series);
    let look = common::chart::Look {
        title: "Origin 429s per 250 ms: 20 replicas, Retry-After: 5",
        x_desc: "seconds since the start",
        y_desc: "429s / 250 ms",
        y_format: |v| format!("{v:.0}"),
        legend: plotters::prelude::SeriesLabelPosition::UpperRight,
    };
    common::chart::lines(&path, look, 0.0..12.0, 0.0..(top * 1.1).max(1.0), &series)?;
    println!("chart: {}", path.display());
    Ok(())
}

fn on(shared: bool) -> &'static str {
    if shared {
        "on"
    } else {
        "off"
    }
}

fn total(reports: &[Report]) -> Report {
    let mut sum = Report::default();
    for r in reports {
        sum.calls += r.calls;
        sum.ok += r.ok;
        sum.failed += r.failed;
        sum.waited += r.waited;
        sum.in_outage += r.in_outage;
    }
    sum
}

fn per_bucket(at: &[Duration], secs: u64) -> Vec<(f64, f64)> {
    let buckets = (Duration::from_secs(secs).as_millis() / BUCKET.as_millis()) as usize;
    let mut counts = vec![0u32; buckets];
    for t in at {
        let i = (t.as_millis() / BUCKET.as_millis()) as usize;
        if let Some(c) = counts.get_mut(i) {
            *c += 1;
        }
    }
    counts
        .iter()
        .enumerate()
        .map(|(i, &c)| (i as f64 * BUCKET.as_secs_f64(), f64::from(c)))
        .collect()
}

/// Starts the origin and the replicas, runs the store's outage if asked, and
/// collects what the origin saw and what each replica reports.
async fn run_fleet(run: &Run, redis: &mut RedisServer) -> Result<(Seen, Vec<Report>), BoxError> {
    let start_ms = unix_ms() + LEAD.as_millis() as u64;
    let start = instant_at(start_ms);
    let seen = Arc::new(Mutex::new(Seen::default()));
    let addr = origin(run.origin, start, seen.clone()).await?;
    let prefix = format!("fleet-{start_ms}");
    let (from, to) = match run.origin {
        Origin::Down { from, to } => (from.as_millis() as u64, to.as_millis() as u64),
        _ => (0, 0),
    };
    let mut children = Vec::new();
    for index in 0..REPLICAS {
        let store = if run.shared {
            redis.url()
        } else {
            "-".to_owned()
        };
        let child = tokio::process::Command::new(std::env::current_exe()?)
            .arg("--replica")
            .args([store, prefix.clone(), addr.to_string()])
            .args([run.rate, run.secs as u32, index as u32].map(|n| n.to_string()))
            .args([start_ms, from, to].map(|n| n.to_string()))
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        children.push(child);
    }
    if let Some((kill, restart)) = run.store_down {
        sleep_until(start + kill).await;
        redis.kill();
        sleep_until(start + restart).await;
        redis.restart()?;
    }
    let mut reports = Vec::new();
    for mut child in children {
        let mut out = String::new();
        if let Some(mut stdout) = child.stdout.take() {
            stdout.read_to_string(&mut out).await?;
        }
        let status = timeout(Duration::from_secs(60), child.wait()).await??;
        if !status.success() {
            return Err(format!("a replica failed: {status}").into());
        }
        reports.push(parse(&out)?);
    }
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    Ok((seen, reports))
}

/// The origin on 127.0.0.1.
async fn origin(
    origin: Origin,
    start: Instant,
    seen: Arc<Mutex<Seen>>,
) -> Result<SocketAddr, BoxError> {
    let addr = common::serve(false, move |_req| {
        let seen = seen.clone();
        async move {
            let since = Instant::now().saturating_duration_since(start);
            let mut seen = seen.lock().unwrap();
            seen.requests += 1;
            let status = match origin {
                Origin::Limited { quota, window } => {
                    let index = (since.as_millis() / window.as_millis()) as u32;
                    if seen.window.1 != index {
                        seen.window = (0, index);
                    }
                    seen.window.0 += 1;
                    if seen.window.0 > u64::from(quota) {
                        seen.too_many.push(since);
                        StatusCode::TOO_MANY_REQUESTS
                    } else {
                        StatusCode::OK
                    }
                }
                Origin::Down { from, to } if since >= from && since < to => {
                    seen.while_down += 1;
                    StatusCode::SERVICE_UNAVAILABLE
                }
                _ => StatusCode::OK,
            };
            let mut res = Response::new(Full::new(Bytes::new()));
            *res.status_mut() = status;
            if status == StatusCode::TOO_MANY_REQUESTS {
                res.headers_mut()
                    .insert("retry-after", http::HeaderValue::from_static("5"));
            }
            Ok::<_, BoxError>(res)
        }
    })
    .await?;
    Ok(addr)
}

fn parse(line: &str) -> Result<Report, BoxError> {
    let mut report = Report::default();
    for field in line.split_whitespace() {
        let Some((name, value)) = field.split_once('=') else {
            continue;
        };
        let value: u64 = value.parse()?;
        match name {
            "calls" => report.calls = value,
            "ok" => report.ok = value,
            "failed" => report.failed = value,
            "waited" => report.waited = value,
            "in_outage" => report.in_outage = value,
            "stale" => report.stale = value,
            "fresh" => report.fresh = value,
            _ => {}
        }
    }
    Ok(report)
}

/// One replica: `store prefix origin rate secs index start_ms down_from down_to`.
async fn replica(args: &[String]) -> Result<(), BoxError> {
    let [store, prefix, origin, rest @ ..] = args else {
        return Err("replica: missing arguments".into());
    };
    let n: Vec<u64> = rest.iter().map(|a| a.parse()).collect::<Result<_, _>>()?;
    let [rate, secs, index, start_ms, down_from, down_to] = n[..] else {
        return Err("replica: missing numbers".into());
    };
    let events = Arc::new(Mutex::new((0u64, 0u64)));
    let mut budget = BudgetPolicy::builder();
    if store != "-" {
        let told = events.clone();
        let fleet = Fleet::builder(RedisStore::new(store)?.prefix(prefix.as_str()))
            .refresh(Duration::from_millis(20))
            .on_event(move |e: &FleetEvent| {
                let mut told = told.lock().unwrap();
                match e {
                    FleetEvent::Stale { .. } => told.0 += 1,
                    _ => told.1 += 1,
                }
            })
            .build()?;
        budget = budget.fleet(fleet);
    }
    let retry = RetryPolicy::builder()
        .timeout(Duration::from_secs(1))
        .build()?;
    let layer = Backstop::builder()
        .retry(retry)
        .budget(budget.build()?)
        .build()?;
    let client = ServiceBuilder::new()
        .layer(layer)
        .service(common::client::<backstop::ReplayBody<Full<Bytes>>>(false));
    let uri: http::Uri = format!("http://{origin}/").parse()?;
    let start = instant_at(start_ms);
    let period = Duration::from_secs(1) / rate as u32;
    // The replicas' calls are spread over the period, not all at once.
    let offset = period * index as u32 / REPLICAS as u32;
    let outage = Duration::from_millis(down_from)..Duration::from_millis(down_to);
    let mut calls = Vec::new();
    for k in 0..rate * secs {
        let at = start + offset + period * k as u32;
        sleep_until(at).await;
        let req = http::Request::get(uri.clone()).body(Full::new(Bytes::new()))?;
        let in_outage = outage.contains(&(at - start));
        let client = client.clone();
        calls.push(tokio::spawn(async move {
            let began = Instant::now();
            let res = client.oneshot(req).await;
            let ok = matches!(res, Ok(ref r) if r.status() == StatusCode::OK);
            (ok, began.elapsed(), in_outage)
        }));
    }
    let mut report = Report::default();
    for call in calls {
        let (ok, took, in_outage) = call.await?;
        report.calls += 1;
        report.ok += u64::from(ok);
        report.failed += u64::from(!ok);
        report.waited += u64::from(took > Duration::from_millis(100));
        report.in_outage += u64::from(in_outage);
    }
    // The fleet view's last word comes within a refresh or two.
    sleep(Duration::from_millis(100)).await;
    let (stale, fresh) = *events.lock().unwrap();
    println!(
        "calls={} ok={} failed={} waited={} in_outage={} stale={stale} fresh={fresh}",
        report.calls, report.ok, report.failed, report.waited, report.in_outage
    );
    Ok(())
}
