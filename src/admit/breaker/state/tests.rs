use super::*;

fn core(config: CircuitBreakerPolicy) -> Core {
    Core::new(Arc::new(config), "test".to_owned())
}

#[test]
fn words_round_trip() {
    let w = Word::open(GEN_MASK as u32, 15, UNTIL_MAX);
    assert_eq!(
        (w.kind(), w.gen(), w.level(), w.until_ms()),
        (OPEN, GEN_MASK as u32, 15, UNTIL_MAX)
    );
    assert_eq!(w.next_gen(), 0);
    let w = Word::half_open(7, 3, 1000, 999);
    assert_eq!(
        (w.kind(), w.gen(), w.level(), w.in_flight(), w.succeeded()),
        (HALF_OPEN, 7, 3, 1000, 999)
    );
    assert_eq!(Word::closed(5).state(), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn trips_on_consecutive_failures_then_probes() {
    let b = core(
        CircuitBreakerPolicy::builder()
            .consecutive_failures(3)
            .jitter(0.0)
            .cooldown(Duration::from_secs(1))
            .build()
            .unwrap(),
    );
    for _ in 0..3 {
        let t = b.admit().unwrap();
        b.record(t, true);
    }
    assert_eq!(b.state(), State::Open);
    let at = b.admit().unwrap_err().unwrap();
    assert_eq!(at, b.origin + Duration::from_secs(1));
    tokio::time::advance(Duration::from_secs(1)).await;
    let probe = b.admit().unwrap();
    assert!(probe.probe);
    assert_eq!(b.admit(), Err(None));
    assert!(!b.allows_retry());
    b.record(probe, false);
    assert_eq!(b.state(), State::Closed);
    assert!(b.allows_retry());
}

#[tokio::test(start_paused = true)]
async fn only_a_run_of_failures_or_an_open_breaker_is_kept_past_the_window() {
    let policy = |consecutive| {
        CircuitBreakerPolicy::builder()
            .consecutive_failures(consecutive)
            .window(Duration::from_millis(100))
            .jitter(0.0)
            .cooldown(Duration::from_secs(1))
            .max_cooldown(Duration::from_secs(4))
            .build()
            .unwrap()
    };
    // Nine 10 ms slots after the last one used, the window holds nothing.
    let counts_only = Duration::from_millis(90);
    let b = core(policy(2));
    assert_eq!(b.keeps_for(), counts_only);
    let t = b.admit().unwrap();
    b.record(t, true);
    assert_eq!(
        b.keeps_for(),
        Duration::from_secs(4),
        "a run of one failure"
    );
    let t = b.admit().unwrap();
    b.record(t, false);
    assert_eq!(
        b.keeps_for(),
        counts_only,
        "a failure in the window, no run"
    );
    for _ in 0..2 {
        let t = b.admit().unwrap();
        b.record(t, true);
    }
    assert_eq!(b.state(), State::Open);
    assert_eq!(b.keeps_for(), Duration::from_secs(4));
    tokio::time::advance(Duration::from_secs(1)).await;
    let probe = b.admit().unwrap();
    assert_eq!(b.keeps_for(), Duration::from_secs(4), "half-open");
    b.record(probe, false);
    assert_eq!((b.state(), b.keeps_for()), (State::Closed, counts_only));

    // Without a limit on failures in a row, a run says nothing.
    let b = core(policy(0));
    let t = b.admit().unwrap();
    b.record(t, true);
    assert_eq!((b.state(), b.keeps_for()), (State::Closed, counts_only));
}

#[tokio::test(start_paused = true)]
async fn last_use_is_the_latest_outcome_cooldown_end_or_probe() {
    let b = core(
        CircuitBreakerPolicy::builder()
            .consecutive_failures(1)
            .window(Duration::from_millis(100))
            .jitter(0.0)
            .cooldown(Duration::from_secs(1))
            .max_cooldown(Duration::from_secs(4))
            .build()
            .unwrap(),
    );
    let ms = |ms| b.origin + Duration::from_millis(ms);
    tokio::time::advance(Duration::from_millis(205)).await;
    let t = b.admit().unwrap();
    b.record(t, true);
    // Opened at 205 ms: the cooldown's end is later than the outcome's slot end.
    assert_eq!(b.last_used(), ms(1_205));
    tokio::time::advance(Duration::from_secs(5)).await;
    // Refused calls cannot come after the cooldown's end without becoming probes.
    assert_eq!(b.last_used(), ms(1_205));
    let probe = b.admit().unwrap();
    assert_eq!(b.last_used(), ms(5_205));
    tokio::time::advance(Duration::from_millis(300)).await;
    b.release(probe);
    assert_eq!((b.state(), b.last_used()), (State::HalfOpen, ms(5_505)));
    tokio::time::advance(Duration::from_millis(300)).await;
    let probe = b.admit().unwrap();
    b.record(probe, false);
    assert_eq!((b.state(), b.last_used()), (State::Closed, ms(5_805)));
    // Closed outcomes are dated by the end of their window slot (10 ms).
    tokio::time::advance(Duration::from_millis(1_001)).await;
    let t = b.admit().unwrap();
    b.record(t, false);
    assert_eq!(b.last_used(), ms(6_810));
}
