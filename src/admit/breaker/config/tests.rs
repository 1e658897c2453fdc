use super::*;
use http::{HeaderMap, StatusCode};

#[test]
fn the_default_failure_rule() {
    let b = CircuitBreakerPolicy::default();
    let headers = HeaderMap::new();
    let status = |code: u16| Outcome::Response {
        status: StatusCode::from_u16(code).unwrap(),
        headers: &headers,
    };
    for code in [500, 501, 502, 503, 504, 599] {
        assert!(b.is_failure(status(code)), "{code}");
    }
    for code in [200, 204, 301, 400, 404, 408, 409, 425, 429] {
        assert!(!b.is_failure(status(code)), "{code}");
    }
    for kind in [
        ErrorKind::Connect,
        ErrorKind::Timeout,
        ErrorKind::Closed,
        ErrorKind::Config,
        ErrorKind::Other,
    ] {
        assert!(b.is_failure(Outcome::Error(kind)), "{kind:?}");
    }
    assert!(!b.is_failure(Outcome::Error(ErrorKind::BodyWrite)));
}

#[test]
fn bad_numbers_are_refused() {
    let cases = [
        (
            CircuitBreakerPolicy::builder().failure_ratio(0.0),
            "failure_ratio",
        ),
        (
            CircuitBreakerPolicy::builder().failure_ratio(f64::NAN),
            "failure_ratio",
        ),
        (
            CircuitBreakerPolicy::builder().failure_ratio(1.01),
            "failure_ratio",
        ),
        (CircuitBreakerPolicy::builder().min_calls(0), "min_calls"),
        (
            CircuitBreakerPolicy::builder().window(Duration::ZERO),
            "window",
        ),
        (
            CircuitBreakerPolicy::builder().window(Duration::MAX),
            "window",
        ),
        (
            CircuitBreakerPolicy::builder().cooldown(Duration::ZERO),
            "cooldown",
        ),
        (
            CircuitBreakerPolicy::builder().cooldown(Duration::MAX),
            "cooldown",
        ),
        (
            CircuitBreakerPolicy::builder().max_cooldown(Duration::ZERO),
            "max_cooldown",
        ),
        (CircuitBreakerPolicy::builder().jitter(-0.1), "jitter"),
        (CircuitBreakerPolicy::builder().jitter(f64::NAN), "jitter"),
        (CircuitBreakerPolicy::builder().jitter(1.0), "jitter"),
        (CircuitBreakerPolicy::builder().probes(0), "probes"),
        (CircuitBreakerPolicy::builder().probes(1001), "probes"),
    ];
    for (builder, setting) in cases {
        let err = builder.build().unwrap_err();
        assert_eq!(err.setting(), setting, "{err}");
    }
}

#[test]
fn cooldowns_double_up_to_the_maximum() {
    let b = CircuitBreakerPolicy::builder()
        .cooldown(Duration::from_secs(5))
        .max_cooldown(Duration::from_secs(60))
        .build()
        .unwrap();
    let seen: Vec<u64> = (0..6).map(|l| b.cooldown_at(l).as_secs()).collect();
    assert_eq!(seen, [5, 10, 20, 40, 60, 60]);
    assert_eq!(b.cooldown_at(40), Duration::from_secs(60));
}

#[test]
fn a_long_cooldown_raises_the_default_maximum() {
    let b = CircuitBreakerPolicy::builder()
        .cooldown(Duration::from_secs(120))
        .build()
        .unwrap();
    assert_eq!(b.max_cooldown(), Duration::from_secs(120));
    let err = CircuitBreakerPolicy::builder()
        .cooldown(Duration::from_secs(10))
        .max_cooldown(Duration::from_secs(1))
        .build()
        .unwrap_err();
    assert_eq!(err.setting(), "max_cooldown");
}
