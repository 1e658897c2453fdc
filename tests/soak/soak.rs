#![cfg(feature = "test-util")]
//! A seeded soak of POST calls without keys against an upstream that fails at random
//! points: the server processes no request twice, and every call whose failure
//! happened before any byte was written is recovered.
//!
//! `cargo test --all-features --test soak -- --nocapture` prints the counts.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::wire::{faulty_transport, full, Connect, FaultyConnector};
use backstop::policy::{AttemptOutcome, AttemptRecord, ErrorKind, History};
use backstop::test_util::{Protocol, Reply, Step, Upstream};
use backstop::{ProgressTrackingLayer, RetryLayer, RetryPolicy};
use http::{Method, Request};
use tower::{ServiceBuilder, ServiceExt};

/// A small seeded generator (xorshift64*), so the soak is the same on every run.
#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..100`.
    fn percent(&mut self) -> u64 {
        self.next() % 100
    }
}

/// The upstream's script: mostly answers, and faults at every point of an exchange.
fn script(rng: &mut Rng, protocol: Protocol, len: usize) -> Vec<Step> {
    (0..len)
        .map(|_| match rng.percent() {
            0..=3 => Step::CloseOnHead,
            4..=7 => Step::CloseAfterBodyBytes(3),
            8..=11 => Step::CloseAfterBody,
            12..=14 if protocol == Protocol::Http2 => Step::RefusedStream,
            15..=17 if protocol == Protocol::Http2 => Step::GoAway,
            _ => Reply::ok().into(),
        })
        .collect()
}

/// Whether an attempt failed before any byte of the request was written (or, for
/// HTTP/2 refusals, was certainly not processed).
fn before_any_write(a: &AttemptRecord) -> bool {
    match a.outcome {
        AttemptOutcome::Error(kind) => {
            kind.is_not_processed()
                || (kind == ErrorKind::Timeout && a.progress.is_some_and(|p| !p.connected))
        }
        _ => false,
    }
}

#[derive(Debug, Default)]
struct Counts {
    calls: usize,
    succeeded: usize,
    failed: usize,
    processed: usize,
    duplicates: usize,
    pre_write_failures: usize,
    recovered: usize,
    lost_pre_write: usize,
}

async fn soak(protocol: Protocol, calls: usize, seed: u64) -> Counts {
    let mut rng = Rng(seed);
    let upstream = Upstream::builder()
        .protocol(protocol)
        .script(script(&mut rng, protocol, calls * 2))
        .start()
        .await
        .unwrap();
    // Connect faults: refused connections, and connects that hang past the attempt
    // timeout. Pooling is off so that every attempt connects.
    let connect_rng = Arc::new(Mutex::new(Rng(seed ^ 0x9e37_79b9_7f4a_7c15)));
    let connector =
        FaultyConnector::new([]).then(move || match connect_rng.lock().unwrap().percent() {
            0..=3 => Connect::Refuse,
            4..=5 => Connect::Delay(Duration::from_millis(400)),
            _ => Connect::Ok,
        });
    let policy = RetryPolicy::builder()
        .max_attempts(8)
        .backoff(Duration::from_millis(1), Duration::from_millis(4))
        .attempt_timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    let client = ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .layer(ProgressTrackingLayer::new())
        .service(faulty_transport(protocol, connector, false));

    let mut counts = Counts {
        calls,
        ..Counts::default()
    };
    let mut tasks = tokio::task::JoinSet::new();
    let mut next = 0;
    while next < calls || !tasks.is_empty() {
        while next < calls && tasks.len() < 32 {
            let client = client.clone();
            let req = Request::builder()
                .method(Method::POST)
                .uri(upstream.uri("/charges"))
                .header("x-call", next.to_string())
                .body(full(format!("charge {next}")))
                .unwrap();
            tasks.spawn(client.oneshot(req));
            next += 1;
        }
        let Some(done) = tasks.join_next().await else {
            break;
        };
        let (ok, history) = match done.unwrap() {
            Ok(res) => (
                res.status().is_success(),
                res.extensions().get::<History>().cloned(),
            ),
            Err(err) => (false, err.history().cloned()),
        };
        let attempts = history.as_ref().map_or(&[][..], |h| h.attempts());
        let pre_write = attempts.iter().filter(|a| before_any_write(a)).count();
        counts.pre_write_failures += pre_write;
        if ok {
            counts.succeeded += 1;
            if pre_write > 0 {
                counts.recovered += 1;
            }
        } else {
            counts.failed += 1;
            // A failed call must have failed after something was written.
            if attempts.last().is_some_and(before_any_write) {
                counts.lost_pre_write += 1;
            }
        }
    }

    let mut processed: HashMap<String, usize> = HashMap::new();
    for r in upstream.requests().iter().filter(|r| r.processed()) {
        let call = r.headers["x-call"].to_str().unwrap().to_owned();
        *processed.entry(call).or_default() += 1;
    }
    counts.processed = processed.values().sum();
    counts.duplicates = processed.values().map(|n| n - 1).sum();
    counts
}

async fn check(protocol: Protocol, calls: usize, seed: u64) {
    let counts = tokio::time::timeout(Duration::from_secs(240), soak(protocol, calls, seed))
        .await
        .expect("soak timed out");
    eprintln!("soak {protocol:?}: {counts:?}");
    assert_eq!(counts.calls, calls);
    assert_eq!(counts.succeeded + counts.failed, calls);
    assert_eq!(counts.duplicates, 0, "a request was processed twice");
    assert_eq!(
        counts.lost_pre_write, 0,
        "a call that failed before writing was not recovered"
    );
    assert!(
        counts.pre_write_failures > calls / 20,
        "the soak injected pre-write faults"
    );
    assert!(counts.recovered > 0);
    assert!(
        counts.failed > 0,
        "writes that may have been processed were not re-sent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_http1_ten_thousand_posts() {
    check(Protocol::Http1, 10_000, 0x5eed_0001).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_http2_posts() {
    check(Protocol::Http2, 3_000, 0x5eed_0002).await;
}
