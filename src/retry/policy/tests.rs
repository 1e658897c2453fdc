use super::*;
use crate::policy::{same_in_every_order, InvalidConfig, Jitter};

#[test]
fn defaults_retry_the_transient_statuses() {
    let p = RetryPolicy::default();
    for code in [408, 429, 502, 503, 504] {
        assert!(
            p.is_retryable_status(StatusCode::from_u16(code).unwrap()),
            "{code}"
        );
    }
    for code in [200, 400, 404, 500, 501, 599] {
        assert!(
            !p.is_retryable_status(StatusCode::from_u16(code).unwrap()),
            "{code}"
        );
    }
}

#[test]
fn bad_numbers_are_refused() {
    let cases: Vec<(RetryPolicyBuilder, &str)> = vec![
        (RetryPolicy::builder().max_attempts(0), "max_attempts"),
        (RetryPolicy::builder().max_attempts(101), "max_attempts"),
        (
            RetryPolicy::builder().backoff(Duration::from_secs(2), Duration::from_secs(1)),
            "backoff",
        ),
        (RetryPolicy::builder().retry_on(200), "retry_on"),
        (RetryPolicy::builder().retry_on(600), "retry_on"),
        (
            RetryPolicy::builder().retryable_statuses([503, 99]),
            "retry_on",
        ),
        (
            RetryPolicy::builder().max_retry_after(Duration::from_secs(90_000)),
            "max_retry_after",
        ),
        (
            RetryPolicy::builder().attempt_timeout(Duration::ZERO),
            "attempt_timeout",
        ),
        (RetryPolicy::builder().timeout(Duration::ZERO), "timeout"),
        (RetryPolicy::builder().timeout(Duration::MAX), "timeout"),
        (
            RetryPolicy::builder().attempt_timeout(Duration::MAX),
            "attempt_timeout",
        ),
        (
            RetryPolicy::builder().backoff(Duration::ZERO, Duration::MAX),
            "backoff",
        ),
        (
            RetryPolicy::builder().min_attempt_time(Duration::MAX),
            "min_attempt_time",
        ),
        (RetryPolicy::builder().replay_cap(usize::MAX), "replay_cap"),
        (
            RetryPolicy::builder().drain(usize::MAX, Duration::ZERO),
            "drain",
        ),
        (
            RetryPolicy::builder()
                .timeout(Duration::from_millis(5))
                .min_attempt_time(Duration::from_millis(10)),
            "min_attempt_time",
        ),
    ];
    for (builder, setting) in cases {
        let err = builder.build().unwrap_err();
        assert_eq!(err.setting(), setting, "{err}");
        assert!(err.to_string().starts_with("invalid "), "{err}");
    }
}

#[test]
fn statuses_can_be_replaced_and_extended() {
    let p = RetryPolicy::builder()
        .retryable_statuses([503])
        .retry_on(500)
        .build()
        .unwrap();
    assert!(p.is_retryable_status(StatusCode::INTERNAL_SERVER_ERROR));
    assert!(p.is_retryable_status(StatusCode::SERVICE_UNAVAILABLE));
    assert!(!p.is_retryable_status(StatusCode::TOO_MANY_REQUESTS));
}

#[test]
fn none_is_one_attempt() {
    assert_eq!(RetryPolicy::none().max_attempts(), 1);
}

#[test]
fn idempotent_methods_can_be_replaced() {
    let p = RetryPolicy::builder()
        .idempotent_methods([Method::GET])
        .build()
        .unwrap();
    assert!(p.is_idempotent_method(&Method::GET));
    assert!(!p.is_idempotent_method(&Method::PUT));
}

type Step<'a> = dyn Fn(RetryPolicyBuilder) -> RetryPolicyBuilder + 'a;

fn built(b: RetryPolicyBuilder) -> Result<String, InvalidConfig> {
    b.build().map(|p| format!("{p:?}"))
}

/// The policy of every step, in order.
fn all(steps: &[&Step<'_>]) -> RetryPolicy {
    steps
        .iter()
        .fold(RetryPolicy::builder(), |b, step| step(b))
        .build()
        .unwrap()
}

/// Rules with a classifier, a status list, error kinds and methods of their own.
fn own_rules() -> Rules {
    Rules::builder()
        .retryable_statuses([500])
        .retryable_errors([ErrorKind::Connect])
        .idempotent_methods([Method::GET, Method::POST])
        .classifier(crate::policy::classify_fn(
            |_: crate::policy::Observed<'_>| crate::policy::Verdict::NoOpinion,
        ))
        .build()
        .unwrap()
}

#[test]
fn the_rule_settings_apply_on_top_of_the_rules_whichever_came_first() {
    // The case: `rules` no longer replaces a status set before it.
    let a = RetryPolicy::builder().rules(own_rules()).retry_on(418);
    let b = RetryPolicy::builder().retry_on(418).rules(own_rules());
    assert_eq!(built(a).unwrap(), built(b).unwrap());
    let steps: [&Step<'_>; 6] = [
        &|b| b.rules(own_rules()),
        &|b| b.retry_on(418),
        &|b| b.retryable_errors([ErrorKind::Dns, ErrorKind::Timeout]),
        &|b| b.idempotent_methods([Method::GET, Method::PUT]),
        &|b| b.idempotency_header(HeaderName::from_static("x-key")),
        &|b| b.max_attempts(5),
    ];
    same_in_every_order(&RetryPolicy::builder(), &steps, built).unwrap();
    let p = all(&steps);
    // The rules' own statuses, classifier and header are kept; the settings win.
    assert!(p.is_retryable_status(StatusCode::INTERNAL_SERVER_ERROR));
    assert!(p.is_retryable_status(StatusCode::IM_A_TEAPOT));
    assert!(!p.is_retryable_status(StatusCode::SERVICE_UNAVAILABLE));
    assert!(p.rules().has_classifier());
    assert!(p.is_retryable_error(ErrorKind::Dns));
    assert!(!p.is_retryable_error(ErrorKind::Connect));
    assert!(p.is_idempotent_method(&Method::PUT));
    assert!(!p.is_idempotent_method(&Method::POST));
    assert_eq!(p.idempotency_header(), "x-key");
    // `retryable_statuses` replaces the rules' list, before or after them.
    let steps: [&Step<'_>; 3] = [
        &|b| b.rules(own_rules()),
        &|b| b.retryable_statuses([502]),
        &|b| b.retry_on(418),
    ];
    same_in_every_order(&RetryPolicy::builder(), &steps, built).unwrap();
}

#[test]
fn limits_and_timing_do_not_depend_on_the_order_of_the_calls() {
    let steps: [&Step<'_>; 7] = [
        &|b| b.max_attempts(5),
        &|b| b.backoff(Duration::from_millis(10), Duration::from_secs(1)),
        &|b| b.timeout(Duration::from_secs(2)),
        &|b| b.min_attempt_time(Duration::from_millis(50)),
        &|b| b.attempt_timeout(Duration::from_millis(500)),
        &|b| b.replay_cap(1024),
        &|b| b.drain(10, Duration::from_millis(50)),
    ];
    same_in_every_order(&RetryPolicy::builder(), &steps, built).unwrap();
}

#[test]
fn the_first_invalid_setting_does_not_depend_on_the_order_of_the_calls() {
    let steps: [&Step<'_>; 6] = [
        &|b| b.min_attempt_time(Duration::from_millis(10)),
        &|b| b.timeout(Duration::from_millis(5)),
        &|b| b.retry_on(200),
        &|b| b.drain(usize::MAX, Duration::ZERO),
        &|b| b.backoff(Duration::from_secs(2), Duration::from_secs(1)),
        &|b| b.max_attempts(0),
    ];
    // Limits and timing in the order of the setters, then the rules, then the
    // minimum attempt time against the timeout: the last steps left out one by one.
    for (from, setting) in [
        (0, "max_attempts"),
        (1, "backoff"),
        (2, "drain"),
        (3, "retry_on"),
        (4, "min_attempt_time"),
    ] {
        let steps: Vec<&Step<'_>> = steps[..steps.len() - from].to_vec();
        let err = same_in_every_order(&RetryPolicy::builder(), &steps, built).unwrap_err();
        assert_eq!(err.setting(), setting, "{err}");
    }
}

#[test]
fn a_setter_given_twice_keeps_its_last_value() {
    let p = RetryPolicy::builder()
        .max_attempts(0)
        .max_attempts(4)
        .build()
        .unwrap();
    assert_eq!(p.max_attempts(), 4);
}

#[test]
fn the_backoff_shape_does_not_depend_on_the_order_of_the_calls() {
    let steps: [&Step<'_>; 4] = [
        &|b| b.backoff(Duration::from_millis(500), Duration::from_secs(4)),
        &|b| b.jitter(Jitter::Proportional(0.25)),
        &|b| b.backoff_multiplier(3.0),
        &|b| b.max_attempts(5),
    ];
    same_in_every_order(&RetryPolicy::builder(), &steps, built).unwrap();
    let p = all(&steps);
    let backoff = p.backoff();
    assert_eq!(
        (backoff.base(), backoff.max()),
        (Duration::from_millis(500), Duration::from_secs(4))
    );
    assert_eq!(backoff.jitter(), Jitter::Proportional(0.25));
    assert_eq!(backoff.multiplier(), 3.0);
    // `backoff(base, max)` alone means what it always meant: full jitter, doubling.
    let plain = RetryPolicy::builder()
        .backoff(Duration::from_millis(50), Duration::from_secs(2))
        .build()
        .unwrap()
        .backoff();
    assert_eq!(
        plain,
        crate::policy::Backoff::new(Duration::from_millis(50), Duration::from_secs(2))
    );
}

#[test]
fn bad_backoff_shapes_are_refused_not_a_panic() {
    for (b, setting) in [
        (
            RetryPolicy::builder().backoff_multiplier(0.9),
            "backoff_multiplier",
        ),
        (
            RetryPolicy::builder().backoff_multiplier(11.0),
            "backoff_multiplier",
        ),
        (
            RetryPolicy::builder().backoff_multiplier(f64::NAN),
            "backoff_multiplier",
        ),
        (
            RetryPolicy::builder().jitter(Jitter::Proportional(-1.0)),
            "jitter",
        ),
        (
            RetryPolicy::builder().jitter(Jitter::Proportional(f64::INFINITY)),
            "jitter",
        ),
        (
            RetryPolicy::builder()
                .jitter(Jitter::Decorrelated)
                .backoff_multiplier(1.5),
            "backoff_multiplier",
        ),
    ] {
        assert_eq!(b.build().unwrap_err().setting(), setting);
    }
    for jitter in [
        Jitter::Full,
        Jitter::Equal,
        Jitter::Decorrelated,
        Jitter::None,
    ] {
        assert!(RetryPolicy::builder().jitter(jitter).build().is_ok());
    }
}
