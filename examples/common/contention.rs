//! The model of AWS's "Exponential Backoff And Jitter" (Marc Brooker, 2015), run
//! with backstop's [`Backoff`] on tokio's paused clock: `examples/jitter.rs`
//! prints and charts it, `tests/overload` checks its ordering. Both load this
//! file by path, so there is one model.
//!
//! N clients each update one record once, by optimistic concurrency: a client
//! reads the record's version, then writes, and the write lands only if no other
//! write landed since that read. A client whose write conflicted backs off (its
//! [`Backoff::waits_with`], drawn from its own seeded generator) and reads again.
//! Every message between a client and the record, each way, takes a network delay
//! `|normal(10 ms, 2 ms)|`, drawn from a second seeded generator per client. All
//! clients start together.
//!
//! What is measured is what the post's simulator measures:
//! - **calls**: the writes the record received, conflicted or not (reads are not
//!   counted: the simulator counts calls in its write handler only), so at least N;
//! - **completion**: the time from the start until the last client learns its
//!   write landed.
//!
//! Backoff: base 5 ms, cap 2 s, doubling, in backstop's terms: the term of
//! retry n is `min(2 s, 5 ms · 2^(n−1))`, so the first wait's term is 5 ms (the
//! post's simulator counts from n = 1 in `base · 2^n`, a first term of 10 ms).
//!
//! Tokio's timer has a resolution of one millisecond: a sleep ends on the first
//! millisecond tick at or after its deadline, and the messages due on the same
//! tick are handled in the order the timer fires them, which is fixed for a
//! seed. The runtime is single-threaded and its clock paused, so a run is the
//! same every time for the same seed, and simulated minutes take milliseconds.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use backstop::policy::{Backoff, Jitter};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::{sleep, Instant};

/// The first retry's term.
pub const BASE: Duration = Duration::from_millis(5);
/// The longest term.
pub const CAP: Duration = Duration::from_secs(2);
/// The network delay of one message, one way: mean and standard deviation, in ms.
pub const DELAY_MEAN_MS: f64 = 10.0;
pub const DELAY_SD_MS: f64 = 2.0;

/// How a conflicted client draws its wait: the post's four strategies, as
/// backstop's [`Jitter`] shapes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// Plain exponential backoff: [`Jitter::None`].
    None,
    /// [`Jitter::Full`].
    Full,
    /// [`Jitter::Equal`].
    Equal,
    /// [`Jitter::Decorrelated`].
    Decorrelated,
}

impl Strategy {
    /// Every strategy, in the order the example prints them.
    pub const ALL: [Strategy; 4] = [
        Strategy::None,
        Strategy::Full,
        Strategy::Equal,
        Strategy::Decorrelated,
    ];

    /// The name the example prints.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::None => "none",
            Strategy::Full => "full",
            Strategy::Equal => "equal",
            Strategy::Decorrelated => "decorrelated",
        }
    }

    /// The backoff a client of this strategy uses.
    pub fn backoff(self) -> Backoff {
        let jitter = match self {
            Strategy::None => Jitter::None,
            Strategy::Full => Jitter::Full,
            Strategy::Equal => Jitter::Equal,
            Strategy::Decorrelated => Jitter::Decorrelated,
        };
        Backoff::new(BASE, CAP).with_jitter(jitter)
    }
}

/// What one run, or the mean of several, measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Outcome {
    /// Writes the record received.
    pub calls: f64,
    /// From the start until the last client's write was acknowledged, in ms.
    pub completion_ms: f64,
}

/// One run of `clients` clients with `strategy`, for `seed`, on a fresh
/// single-threaded runtime with a paused clock.
pub fn run(clients: usize, strategy: Strategy, seed: u64) -> Outcome {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    runtime.block_on(race(clients, strategy, seed))
}

/// The mean of [`run`] over `seeds`.
pub fn mean(clients: usize, strategy: Strategy, seeds: std::ops::Range<u64>) -> Outcome {
    let n = seeds.end.saturating_sub(seeds.start).max(1) as f64;
    let (calls, completion_ms) = seeds
        .map(|seed| run(clients, strategy, seed))
        .fold((0.0, 0.0), |(c, t), o| (c + o.calls, t + o.completion_ms));
    Outcome {
        calls: calls / n,
        completion_ms: completion_ms / n,
    }
}

/// The record: its version, and the writes it received.
#[derive(Default)]
struct Record {
    version: AtomicU64,
    writes: AtomicU64,
}

impl Record {
    /// A write made after reading `read`: lands when no write landed since.
    fn write(&self, read: u64) -> bool {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.version
            .compare_exchange(read, read + 1, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }
}

async fn race(clients: usize, strategy: Strategy, seed: u64) -> Outcome {
    let record = Arc::new(Record::default());
    let start = Instant::now();
    let tasks: Vec<_> = (0..clients as u64)
        .map(|i| {
            // Two generators per client, both from the run's seed and the
            // client's number: one for the network, one for the backoff.
            let net = StdRng::seed_from_u64(seed << 32 | i << 1);
            let draws = StdRng::seed_from_u64(seed << 32 | i << 1 | 1);
            tokio::spawn(client(record.clone(), strategy.backoff(), net, draws))
        })
        .collect();
    for task in tasks {
        task.await.expect("a client finishes");
    }
    Outcome {
        calls: record.writes.load(Ordering::Relaxed) as f64,
        completion_ms: (Instant::now() - start).as_secs_f64() * 1e3,
    }
}

/// One client: read, write, and on a conflict back off and start again.
///
/// Waits with nothing between them at the record are one sleep: the read's
/// answer and the write's request; the write's answer, the backoff and the next
/// read's request.
async fn client(record: Arc<Record>, backoff: Backoff, mut net: StdRng, draws: StdRng) {
    let mut waits = backoff.waits_with(draws);
    let mut to_record = delay(&mut net); // the read's request
    loop {
        sleep(to_record).await;
        let read = record.version.load(Ordering::Relaxed);
        sleep(delay(&mut net) + delay(&mut net)).await; // its answer, the write's request
        let landed = record.write(read);
        let answer = delay(&mut net);
        if landed {
            sleep(answer).await;
            return;
        }
        to_record = answer + waits.next().unwrap_or(CAP) + delay(&mut net);
    }
}

/// One message's network delay: `|normal(mean, sd)|` (Box–Muller).
fn delay(rng: &mut StdRng) -> Duration {
    let u1: f64 = 1.0 - rng.random::<f64>(); // in (0, 1]: its logarithm is finite
    let u2: f64 = rng.random();
    let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
    Duration::from_secs_f64((DELAY_MEAN_MS + DELAY_SD_MS * z).abs() / 1e3)
}
