//! Today's `RetryLayer` against the one issue 9 set its goals on (`backstop_old`,
//! commit b8d51a5), beside tower's retry and the floor of `benches/common/floor.rs`:
//! every stack interleaved in rounds in one process, each one's added time over the
//! bare service and its ratio to tower's, as `benches/overhead.rs` measures them
//! (`ratios`), over `RATIOS_PROCESSES` fresh processes. `INSTR_STACK` and
//! `INSTR_CALLS` drive one stack for callgrind instead. `run.sh` builds and runs it.

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use tower::{Layer, Service, ServiceExt};

#[allow(dead_code, unused_imports)]
#[path = "../../common/mod.rs"]
mod common;

/// The retry layer of b8d51a5 with its default policy, over the same inner service.
fn old_retry(
) -> impl Service<Request<Full<Bytes>>, Response = common::Res, Error = backstop_old::Error> + Clone
{
    backstop_old::RetryLayer::new(backstop_old::RetryPolicy::default()).layer(tower::service_fn(
        common::ok::<backstop_old::ReplayBody<Full<Bytes>>>,
    ))
}

fn send<S>(rt: &tokio::runtime::Runtime, svc: &S)
where
    S: Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>> + Clone,
    S::Error: std::fmt::Debug,
{
    let mut svc = svc.clone();
    rt.block_on(async { black_box(svc.ready().await.unwrap().call(common::request()).await) })
        .unwrap();
}

/// What `svc` adds over the bare service in `iters` calls, the two interleaved in
/// runs of 64 (`benches/overhead.rs`'s `added_over_bare`).
fn added_over_bare<S>(rt: &tokio::runtime::Runtime, iters: u64, svc: &S) -> Duration
where
    S: Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>> + Clone,
    S::Error: std::fmt::Debug,
{
    const RUN: u64 = 64;
    let bare = common::bare();
    let (mut with, mut without) = (Duration::ZERO, Duration::ZERO);
    let mut left = iters;
    while left > 0 {
        let n = left.min(RUN);
        left -= n;
        let start = Instant::now();
        for _ in 0..n {
            send(rt, &bare);
        }
        without += start.elapsed();
        let start = Instant::now();
        for _ in 0..n {
            send(rt, svc);
        }
        with += start.elapsed();
    }
    with.saturating_sub(without).max(Duration::from_nanos(1))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

/// One process's measurement: each stack's median added time over 40 rounds, and
/// its ratio to tower's.
fn once() {
    const ROUNDS: usize = 40;
    const CALLS: u64 = 8_192;
    let rt = runtime();
    let tower_retry = common::tower_retry();
    let today = common::backstop_retry(backstop::RetryPolicy::default());
    let old = old_retry();
    let floor = common::floor::retry();
    type Measure<'a> = Box<dyn Fn() -> Duration + 'a>;
    let stacks: [(&str, Measure<'_>); 4] = [
        (
            "tower_retry",
            Box::new(|| added_over_bare(&rt, CALLS, &tower_retry)),
        ),
        (
            "backstop_retry",
            Box::new(|| added_over_bare(&rt, CALLS, &today)),
        ),
        (
            "backstop_retry_b8d51a5",
            Box::new(|| added_over_bare(&rt, CALLS, &old)),
        ),
        (
            "floor_retry",
            Box::new(|| added_over_bare(&rt, CALLS, &floor)),
        ),
    ];
    let mut samples = vec![Vec::with_capacity(ROUNDS); stacks.len()];
    for round in 0..ROUNDS {
        for k in 0..stacks.len() {
            let i = (k + round) % stacks.len();
            samples[i].push(stacks[i].1().as_nanos() as f64 / CALLS as f64);
        }
    }
    let medians: Vec<f64> = samples.iter_mut().map(|s| median(s)).collect();
    for ((name, _), m) in stacks.iter().zip(&medians) {
        println!(
            "added stack={name} ns={m:.1} ratio_to_tower_retry={:.2}",
            m / medians[0]
        );
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Sends `INSTR_CALLS` requests through the stack `INSTR_STACK`, for callgrind.
fn drive(stack: &str) {
    let calls: u64 = std::env::var("INSTR_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000);
    let rt = runtime();
    fn run<S>(rt: &tokio::runtime::Runtime, calls: u64, svc: S)
    where
        S: Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>> + Clone,
        S::Error: std::fmt::Debug,
    {
        for _ in 0..calls {
            send(rt, &svc);
        }
    }
    match stack {
        "bare" => run(&rt, calls, common::bare()),
        "tower_retry" => run(&rt, calls, common::tower_retry()),
        "backstop_retry" => run(
            &rt,
            calls,
            common::backstop_retry(backstop::RetryPolicy::default()),
        ),
        "backstop_retry_b8d51a5" => run(&rt, calls, old_retry()),
        "floor_retry" => run(&rt, calls, common::floor::retry()),
        other => panic!("no stack {other:?}"),
    }
}

const CHILD: &str = "BASELINE_CHILD";

fn main() {
    if std::env::var_os(CHILD).is_some() {
        return once();
    }
    if let Ok(stack) = std::env::var("INSTR_STACK") {
        return drive(&stack);
    }
    let processes: usize = std::env::var("RATIOS_PROCESSES")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(9);
    let exe = std::env::current_exe().expect("the harness's own path");
    let mut seen: Vec<(String, Vec<f64>, Vec<f64>)> = Vec::new();
    for _ in 0..processes {
        let out = std::process::Command::new(&exe)
            .env(CHILD, "1")
            .output()
            .expect("a measuring process");
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            println!("{line}");
            let field = |key: &str| {
                line.split_whitespace()
                    .find_map(|f| f.strip_prefix(key))
                    .and_then(|v| v.parse::<f64>().ok())
            };
            let Some(stack) = line
                .split_whitespace()
                .find_map(|f| f.strip_prefix("stack="))
            else {
                continue;
            };
            let (Some(ns), Some(ratio)) = (field("ns="), field("ratio_to_tower_retry=")) else {
                continue;
            };
            match seen.iter_mut().find(|(s, _, _)| s == stack) {
                Some((_, all_ns, all_ratios)) => {
                    all_ns.push(ns);
                    all_ratios.push(ratio);
                }
                None => seen.push((stack.to_owned(), vec![ns], vec![ratio])),
            }
        }
    }
    for (stack, ns, ratios) in &mut seen {
        let n = ratios.len();
        let ns = median(ns);
        let ratio = median(ratios);
        println!(
            "ratios stack={stack} ns={ns:.1} ratio_to_tower_retry={ratio:.2} range={:.2}..{:.2} processes={n}",
            ratios[0],
            ratios[n - 1]
        );
    }
}
