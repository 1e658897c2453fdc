use super::*;

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
