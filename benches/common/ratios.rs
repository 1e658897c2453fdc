//! The interleaved measurement of what a stack adds over the bare service, shared by
//! `benches/overhead.rs` (its `added` group and `ratios`) and `benches/baseline`.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use tower::Service;

use super::{bare, send};

/// Calls `svc` and the bare service `iters` times each, alternating in runs of 64
/// calls, and returns the time `svc` took beyond the bare service's. A sample that a
/// pause made come out negative counts as one nanosecond (criterion refuses zero);
/// such a sample is an outlier that the analysis sets aside.
pub fn added_over_bare<S>(rt: &tokio::runtime::Runtime, iters: u64, svc: &S) -> Duration
where
    S: Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>> + Clone,
    S::Error: std::fmt::Debug,
{
    const RUN: u64 = 64;
    let bare = bare();
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

/// One stack's measurement of [`added_over_bare`] over [`CALLS`] calls.
pub type Measure<'a> = Box<dyn Fn() -> Duration + 'a>;

/// The measurement of `svc` on `rt`, for [`interleaved`].
pub fn measure<'a, S>(rt: &'a tokio::runtime::Runtime, svc: &'a S) -> Measure<'a>
where
    S: Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>> + Clone,
    S::Error: std::fmt::Debug,
{
    Box::new(move || added_over_bare(rt, CALLS, svc))
}

/// The rounds of one process's measurement, and the calls of each stack in each.
pub const ROUNDS: usize = 40;
pub const CALLS: u64 = 8_192;

/// What each stack adds over the bare service, all of them interleaved in one
/// process: each round measures every stack once (in a new order each round) over
/// the same number of calls, so the machine's drift falls on all of them alike, and
/// each stack's figure is the median of its rounds. Prints one line per stack, with
/// its ratio to the first stack's, taken within the run:
///
/// ```text
/// added stack=backstop_stack ns=250.0 ratio_to_tower_retry=1.90
/// ```
pub fn interleaved(stacks: &[(&str, Measure<'_>)]) {
    let mut samples = vec![Vec::with_capacity(ROUNDS); stacks.len()];
    for round in 0..ROUNDS {
        for k in 0..stacks.len() {
            let i = (k + round) % stacks.len();
            samples[i].push(stacks[i].1().as_nanos() as f64 / CALLS as f64);
        }
    }
    let medians: Vec<f64> = samples.iter_mut().map(|s| median(s)).collect();
    let first = stacks.first().map_or("first", |(name, _)| *name);
    for ((name, _), m) in stacks.iter().zip(&medians) {
        println!(
            "added stack={name} ns={m:.1} ratio_to_{first}={:.2}",
            m / medians[0]
        );
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs this executable again with `args` and the variable `child` set, in
/// `RATIOS_PROCESSES` fresh processes (default 9), each of which runs
/// [`interleaved`] once: with the same binary, tower's retry's own time moves by a
/// third from one process to the next (where the allocator and the stack put
/// things), and every ratio with it. Prints each process's lines, then each stack's
/// median over the processes and their range:
///
/// ```text
/// ratios stack=backstop_stack ns=480.0 ratio_to_tower_retry=3.40 range=2.90..3.60 processes=9
/// ```
pub fn over_processes(child: &str, args: &[&str]) {
    let processes: usize = std::env::var("RATIOS_PROCESSES")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(9);
    let exe = std::env::current_exe().expect("the bench's own path");
    // (stack, ns, ratio) of every process, in the order the stacks are printed.
    let mut seen: Vec<(String, Vec<f64>, Vec<f64>)> = Vec::new();
    let mut ratio_key = String::from("ratio_to_first");
    for _ in 0..processes {
        let out = std::process::Command::new(&exe)
            .args(args)
            .env(child, "1")
            .output()
            .expect("a measuring process");
        let text = String::from_utf8_lossy(&out.stdout);
        for line in text.lines().filter(|l| l.starts_with("added stack=")) {
            println!("{line}");
            let mut fields = line.split_whitespace().skip(1);
            let stack = fields.next().and_then(|f| f.strip_prefix("stack="));
            let ns = fields.next().and_then(|f| f.strip_prefix("ns="));
            let ratio = fields.next().and_then(|f| f.split_once('='));
            let (Some(stack), Some(Ok(ns)), Some((key, Ok(ratio)))) = (
                stack,
                ns.map(str::parse::<f64>),
                ratio.map(|(k, v)| (k, v.parse::<f64>())),
            ) else {
                continue;
            };
            key.clone_into(&mut ratio_key);
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
            "ratios stack={stack} ns={ns:.1} {ratio_key}={ratio:.2} range={:.2}..{:.2} processes={n}",
            ratios[0],
            ratios[n - 1]
        );
    }
}
