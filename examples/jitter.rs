//! AWS's "Exponential Backoff And Jitter" (Marc Brooker, 2015), reproduced with
//! backstop's own backoff.
//!
//! `cargo run --example jitter`
//!
//! N clients race to update one record by optimistic concurrency (read its
//! version, write; a write conflicts if another landed since the read; a
//! conflicted client backs off and reads again), over a network whose delay per
//! message is `|normal(10 ms, 2 ms)|`. Backoff: base 5 ms, cap 2 s, with each of
//! the post's strategies as a [`Jitter`](backstop::policy::Jitter) shape: `none`
//! (plain exponential), `full`, `equal` and `decorrelated`. The model is in
//! `examples/common/contention.rs` (shared with `tests/overload`), where its
//! choices are written down; in short:
//!
//! - **calls** counts the writes the record received, conflicted or not, as the
//!   post's simulator does (reads are not counted);
//! - **completion** is the time until the last client's write is acknowledged.
//!
//! Each run is on a single-threaded tokio runtime with a paused clock, and draws
//! its network delays and backoff waits from generators seeded by the run's seed
//! (through [`Backoff::waits_with`](backstop::policy::Backoff::waits_with)), so the
//! output is the same on every run. For N = 10, 40, …, 190 and
//! each strategy it prints the mean of 20 seeds:
//!
//! ```text
//! jitter clients=<n> strategy=<none|full|equal|decorrelated> calls=<n> completion_ms=<n>
//! ```
//!
//! What the post published, and must reproduce: at 100 clients full jitter cuts
//! the calls by more than half against no jitter; full and equal jitter do about
//! the same work, both less than decorrelated; no jitter is by far the slowest to
//! complete.
//!
//! Given `--chart <path>`, it also writes an SVG chart there: calls and completion
//! time against N, per strategy. The README's is
//! `cargo run --release --example jitter -- --chart docs/jitter.svg`; without
//! `--chart` it writes no file.

mod common;
#[path = "common/contention.rs"]
mod contention;

use backstop::BoxError;
use common::chart::{side_by_side, Look, Series, COLORS};
use contention::{mean, Outcome, Strategy};
use plotters::prelude::{IntoLogRange, SeriesLabelPosition};

/// The numbers of clients: 10 to 190 by 30, so that 100 (the post's figure) is one.
const CLIENTS: [usize; 7] = [10, 40, 70, 100, 130, 160, 190];
/// The seeds each figure is the mean of (the reference re-run used 20).
const SEEDS: std::ops::Range<u64> = 0..20;

fn main() -> Result<(), BoxError> {
    let chart = common::chart::requested()?;
    let mut measured: Vec<(Strategy, Vec<(usize, Outcome)>)> =
        Strategy::ALL.iter().map(|&s| (s, Vec::new())).collect();
    for clients in CLIENTS {
        for (strategy, points) in &mut measured {
            let o = mean(clients, *strategy, SEEDS);
            println!(
                "jitter clients={clients} strategy={} calls={:.0} completion_ms={:.0}",
                strategy.name(),
                o.calls,
                o.completion_ms
            );
            points.push((clients, o));
        }
    }

    let Some(path) = chart else {
        return Ok(());
    };
    let series = |measure: fn(&Outcome) -> f64| -> Vec<Series> {
        measured
            .iter()
            .zip(COLORS)
            .map(|((strategy, points), color)| Series {
                name: strategy.name().to_owned(),
                points: points
                    .iter()
                    .map(|(n, o)| (*n as f64, measure(o)))
                    .collect(),
                color,
            })
            .collect()
    };
    let (calls, completion) = (series(|o| o.calls), series(|o| o.completion_ms));
    let top = |s: &[Series]| common::chart::top(s).max(1.0);
    let x = || CLIENTS[0] as f64..CLIENTS[CLIENTS.len() - 1] as f64;
    let calls_look = Look {
        title: "Calls (writes), mean of 20 seeds",
        x_desc: "contending clients",
        y_desc: "calls",
        y_format: |v| format!("{v:.0}"),
        legend: SeriesLabelPosition::UpperLeft,
    };
    let completion_look = Look {
        title: "Completion time, mean of 20 seeds",
        x_desc: "contending clients",
        y_desc: "ms (log scale)",
        y_format: |v| format!("{v:.0}"),
        legend: SeriesLabelPosition::LowerRight,
    };
    side_by_side(
        &path,
        (calls_look, x(), 0.0..top(&calls) * 1.1, &calls),
        (
            completion_look,
            x(),
            (100.0..top(&completion) * 1.5).log_scale(),
            &completion,
        ),
    )?;
    println!("chart: {}", path.display());
    Ok(())
}
