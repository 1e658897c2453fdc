use std::time::Duration;

use http::{Response, StatusCode};
use tokio::time::Instant;

use super::state::{Core, Counts};
use super::ThrottlePolicy;
use crate::policy::error::Error;
use crate::policy::{ErrorKind, StopReason};

fn policy() -> ThrottlePolicy {
    ThrottlePolicy::builder()
        .window(Duration::from_secs(10))
        .seed(7)
        .build()
        .unwrap()
}

fn answer(status: u16) -> Response<()> {
    let mut res = Response::new(());
    *res.status_mut() = StatusCode::from_u16(status).unwrap();
    res
}

#[test]
fn the_formula_is_the_sre_book_s() {
    let p = ThrottlePolicy::default();
    let cases: [(u64, u64, f64); 7] = [
        (0, 0, 0.0),
        (1, 0, 1.0 / 2.0),
        (10, 0, 10.0 / 11.0),
        (10, 5, 0.0),
        (10, 4, 2.0 / 11.0),
        (100, 25, 50.0 / 101.0),
        (100, 100, 0.0),
    ];
    for (requests, accepts, want) in cases {
        assert_eq!(
            p.rejection_probability(requests, accepts),
            want,
            "{requests}/{accepts}"
        );
    }
    let k1 = ThrottlePolicy::builder().k(1.0).build().unwrap();
    assert_eq!(k1.rejection_probability(10, 9), 1.0 / 11.0);
    let capped = ThrottlePolicy::builder()
        .max_rejection(0.5)
        .build()
        .unwrap();
    assert_eq!(capped.rejection_probability(10, 0), 0.5);
    assert_eq!(capped.rejection_probability(10, 4), 2.0 / 11.0);
}

#[test]
fn bad_settings_are_refused_by_name() {
    let refused = [
        (ThrottlePolicy::builder().k(0.99), "k"),
        (ThrottlePolicy::builder().k(f64::NAN), "k"),
        (ThrottlePolicy::builder().k(1001.0), "k"),
        (
            ThrottlePolicy::builder().window(Duration::from_millis(9)),
            "window",
        ),
        (
            ThrottlePolicy::builder().window(Duration::from_secs(3601)),
            "window",
        ),
        (
            ThrottlePolicy::builder().max_rejection(0.0),
            "max_rejection",
        ),
        (
            ThrottlePolicy::builder().max_rejection(1.01),
            "max_rejection",
        ),
        (
            ThrottlePolicy::builder().max_rejection(f64::NAN),
            "max_rejection",
        ),
    ];
    for (builder, setting) in refused {
        assert_eq!(builder.build().unwrap_err().setting(), setting);
    }
    let first = ThrottlePolicy::builder().max_rejection(2.0).k(0.0).build();
    assert_eq!(
        first.unwrap_err().setting(),
        "k",
        "checked in one fixed order"
    );
}

#[tokio::test(start_paused = true)]
async fn answers_and_errors_count_as_the_docs_say() {
    let core = Core::new(&policy());
    for status in [200, 404, 500, 408] {
        core.answered(&answer(status));
    }
    for status in [429, 503] {
        core.answered(&answer(status));
    }
    for kind in [
        ErrorKind::Closed,
        ErrorKind::Other,
        ErrorKind::InvalidResponse,
    ] {
        core.failed(&Error::new(kind, None));
    }
    for kind in [
        ErrorKind::Connect,
        ErrorKind::ConnectTimeout,
        ErrorKind::RefusedStream,
        ErrorKind::Timeout,
    ] {
        core.failed(&Error::new(kind, None));
    }
    // Refused before sending anything: neither way.
    core.failed(&Error::refused(
        StopReason::CircuitOpen,
        "open".into(),
        None,
    ));
    assert_eq!(
        core.counts(Instant::now()),
        Counts {
            requests: 4 + 2 + 3 + 4,
            accepts: 4 + 3,
        }
    );
}

#[tokio::test(start_paused = true)]
async fn the_probability_follows_the_window_and_old_counts_expire() {
    let core = Core::new(&policy());
    // 10 rejections at t = 0.
    for _ in 0..10 {
        core.count(false, Instant::now());
    }
    assert_eq!(core.probability(Instant::now()), 10.0 / 11.0);
    // 6 s later: 4 accepted calls, each a request too. (14 − 2·4) / 15.
    tokio::time::advance(Duration::from_secs(6)).await;
    for _ in 0..4 {
        core.count(true, Instant::now());
    }
    assert_eq!(core.probability(Instant::now()), 6.0 / 15.0);
    // At 10 s the first slot leaves the window: 4 requests, 4 accepts, 4 − 8 < 0.
    tokio::time::advance(Duration::from_millis(3_999)).await;
    assert_eq!(core.probability(Instant::now()), 6.0 / 15.0);
    tokio::time::advance(Duration::from_millis(1)).await;
    assert_eq!(
        core.counts(Instant::now()),
        Counts {
            requests: 4,
            accepts: 4
        }
    );
    assert_eq!(core.probability(Instant::now()), 0.0);
    // At 16 s the accepts leave too.
    tokio::time::advance(Duration::from_secs(6)).await;
    assert_eq!(core.counts(Instant::now()), Counts::default());
}

#[tokio::test(start_paused = true)]
async fn shedding_draws_deterministically_and_counts_the_shed_call() {
    let run = || {
        let core = Core::new(&policy());
        for _ in 0..10 {
            core.count(false, Instant::now());
        }
        (0..200)
            .map(|_| core.admit(Instant::now()).is_err())
            .collect::<Vec<bool>>()
    };
    let first = run();
    assert_eq!(first, run(), "one seed, one sequence of draws");
    let shed = first.iter().filter(|s| **s).count();
    // Each shed call is a request without an accept: p climbs from 10/11 towards 1.
    assert!(shed > 180, "{shed}");
    assert!(shed < 200, "{shed}");
    let core = Core::new(&policy());
    for _ in 0..10 {
        core.count(false, Instant::now());
    }
    let mut requests = 10;
    for _ in 0..50 {
        let before = core.counts(Instant::now());
        assert_eq!(before.requests, requests);
        if let Err(shed) = core.admit(Instant::now()) {
            assert_eq!(shed.counts, before);
            assert_eq!(shed.probability, requests as f64 / (requests + 1) as f64);
            requests += 1;
        }
    }
    // No rejection in the window: nothing is ever shed (and nothing drawn).
    let healthy = Core::new(&policy());
    for _ in 0..1000 {
        assert!(healthy.admit(Instant::now()).is_ok());
    }
    assert_eq!(healthy.counts(Instant::now()), Counts::default());
}
