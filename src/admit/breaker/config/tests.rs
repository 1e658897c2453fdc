use super::*;
use crate::policy::same_in_every_order;
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

type Step<'a> = dyn Fn(CircuitBreakerPolicyBuilder) -> CircuitBreakerPolicyBuilder + 'a;

/// What a breaker policy is: its `Debug` (the numbers and partition), and what it
/// counts as a failure.
fn built(b: CircuitBreakerPolicyBuilder) -> Result<String, InvalidConfig> {
    let headers = HeaderMap::new();
    b.build().map(|p| {
        let fails: Vec<bool> = [200, 429, 500, 503]
            .map(|code| Outcome::Response {
                status: StatusCode::from_u16(code).unwrap(),
                headers: &headers,
            })
            .into_iter()
            .chain([Outcome::Error(ErrorKind::Timeout)])
            .map(|outcome| p.is_failure(outcome))
            .collect();
        format!("{p:?} {fails:?}")
    })
}

#[test]
fn the_policy_does_not_depend_on_the_order_of_the_calls() {
    let steps: [&Step<'_>; 7] = [
        &|b| b.failure_ratio(0.3),
        &|b| b.min_calls(5),
        &|b| b.window(Duration::from_secs(10)),
        &|b| b.cooldown(Duration::from_secs(2)),
        &|b| b.max_cooldown(Duration::from_secs(30)),
        &|b| b.jitter(0.1),
        &|b| b.probes(3),
    ];
    same_in_every_order(&CircuitBreakerPolicy::builder(), &steps, built).unwrap();
    // The rules' classifier is asked before the failure rule, whichever was given
    // first: a 503 is an answer here, a 429 a failure.
    let answers_503 = || {
        Rules::builder()
            .classifier(crate::policy::classify_fn(|o: Observed<'_>| match o {
                Observed::Response { status, .. } if status == 503 => Verdict::Answer,
                _ => Verdict::NoOpinion,
            }))
            .build()
            .unwrap()
    };
    let steps: [&Step<'_>; 5] = [
        &|b| b.rules(answers_503()),
        &|b| {
            b.failure_if(|o| match o {
                Outcome::Response { status, .. } => status == 429 || status.is_server_error(),
                Outcome::Error(_) => false,
            })
        },
        &|b| b.consecutive_failures(0),
        &|b| b.cooldown(Duration::from_secs(120)),
        &|b| b.partition(Partition::origin()),
    ];
    let p = same_in_every_order(&CircuitBreakerPolicy::builder(), &steps, built).unwrap();
    assert!(p.ends_with("[false, true, true, false, false]"), "{p}");
    // A cooldown longer than the default maximum raises it, in any order.
    assert!(p.contains("max_cooldown: 120s"), "{p}");
}

#[test]
fn the_first_invalid_setting_does_not_depend_on_the_order_of_the_calls() {
    let steps: [&Step<'_>; 4] = [
        &|b| b.cooldown(Duration::from_secs(10)),
        &|b| b.max_cooldown(Duration::from_secs(1)),
        &|b| b.probes(0),
        &|b| b.failure_ratio(2.0),
    ];
    for (from, setting) in [(0, "failure_ratio"), (1, "probes"), (2, "max_cooldown")] {
        let steps: Vec<&Step<'_>> = steps[..steps.len() - from].to_vec();
        let err = same_in_every_order(&CircuitBreakerPolicy::builder(), &steps, built).unwrap_err();
        assert_eq!(err.setting(), setting, "{err}");
    }
    // A setter given twice keeps its last value.
    let p = CircuitBreakerPolicy::builder()
        .failure_ratio(2.0)
        .failure_ratio(0.25)
        .build()
        .unwrap();
    assert_eq!(p.failure_ratio(), 0.25);
}
