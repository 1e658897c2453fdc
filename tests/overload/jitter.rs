//! AWS's "Exponential Backoff And Jitter" (2015): at 100 contending clients, the
//! ordering the post published.

use crate::contention::{mean, run, Outcome, Strategy};

const CLIENTS: usize = 100;
/// Ten seeds: each figure is their mean, as the example's are of twenty.
const SEEDS: std::ops::Range<u64> = 0..10;

fn at_100_clients() -> [Outcome; 4] {
    Strategy::ALL.map(|s| mean(CLIENTS, s, SEEDS))
}

#[test]
fn a_seed_gives_the_same_run() {
    for strategy in Strategy::ALL {
        let first = run(CLIENTS, strategy, 3);
        assert_eq!(first, run(CLIENTS, strategy, 3), "{strategy:?}");
        assert!(
            first.calls >= CLIENTS as f64,
            "every client writes at least once"
        );
    }
    assert_ne!(
        run(CLIENTS, Strategy::Full, 3),
        run(CLIENTS, Strategy::Full, 4),
        "another seed, another run"
    );
}

#[test]
fn the_published_ordering_reproduces_at_100_clients() {
    let [none, full, equal, decorrelated] = at_100_clients();
    let table =
        format!("none {none:?}\nfull {full:?}\nequal {equal:?}\ndecorrelated {decorrelated:?}");
    // "With 100 contending clients, we've reduced our call count by more than half."
    assert!(full.calls * 2.0 < none.calls, "{table}");
    // Full and equal jitter do about the same work ...
    let apart = (full.calls - equal.calls).abs() / full.calls;
    assert!(
        apart < 0.05,
        "full and equal {:.1} % apart\n{table}",
        apart * 100.0
    );
    // ... both less than decorrelated jitter.
    assert!(full.calls < decorrelated.calls, "{table}");
    assert!(equal.calls < decorrelated.calls, "{table}");
    // No jitter is the clear loser in completion time: several times the slowest
    // of the others.
    let slowest = [full, equal, decorrelated]
        .iter()
        .map(|o| o.completion_ms)
        .fold(0.0, f64::max);
    assert!(none.completion_ms > 5.0 * slowest, "{table}");
}
