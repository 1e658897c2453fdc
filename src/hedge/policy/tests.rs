use super::*;
use crate::RetryPolicy;

#[test]
fn bad_settings_are_refused() {
    let cases: Vec<(HedgePolicyBuilder, &str)> = vec![
        (HedgePolicy::builder().max_extra(0), "max_extra"),
        (HedgePolicy::builder().max_extra(9), "max_extra"),
        (HedgePolicy::builder().percentile(0.2), "percentile"),
        (HedgePolicy::builder().percentile(1.0), "percentile"),
        (HedgePolicy::builder().percentile(f64::NAN), "percentile"),
        (HedgePolicy::builder().min_samples(0), "min_samples"),
        (HedgePolicy::builder().window(Duration::ZERO), "window"),
        (
            HedgePolicy::builder()
                .after(Duration::from_millis(5))
                .percentile(0.9),
            "percentile",
        ),
        (
            HedgePolicy::builder().percentile(0.99).min_samples(50),
            "min_samples",
        ),
        (HedgePolicy::builder().methods([Method::POST]), "methods"),
        (
            HedgePolicy::builder().methods([Method::GET, Method::PATCH]),
            "methods",
        ),
        (
            HedgePolicy::builder().methods([Method::from_bytes(b"PURGE").unwrap()]),
            "methods",
        ),
    ];
    for (builder, setting) in cases {
        let err = builder.build().unwrap_err();
        assert_eq!(err.setting(), setting, "{err}");
    }
}

#[test]
fn the_methods_hedged_follow_the_policy() {
    let reads_only = RetryPolicy::builder()
        .idempotent_methods([Method::GET])
        .build()
        .unwrap();
    let hedge = HedgePolicy::builder()
        .policy(reads_only.clone())
        .build()
        .unwrap();
    assert!(hedge.hedges_method(&Method::GET));
    assert!(!hedge.hedges_method(&Method::PUT));
    // A list is checked against the policy, whichever was set last.
    let err = HedgePolicy::builder()
        .methods([Method::PUT])
        .policy(reads_only)
        .build()
        .unwrap_err();
    assert_eq!(err.setting(), "methods");
    assert!(HedgePolicy::builder()
        .build()
        .unwrap()
        .hedges_method(&Method::PUT));
}

#[test]
fn defaults_hedge_idempotent_methods() {
    let h = HedgePolicy::default();
    assert_eq!(h.max_extra(), 1);
    for m in [Method::GET, Method::HEAD, Method::PUT, Method::DELETE] {
        assert!(h.hedges_method(&m), "{m}");
    }
    assert!(!h.hedges_method(&Method::POST));
    assert!(!h.hedges_method(&Method::PATCH));
    let reads = HedgePolicy::builder()
        .methods([Method::GET])
        .build()
        .unwrap();
    assert!(!reads.hedges_method(&Method::PUT));
}
