use super::*;
use crate::policy::same_in_every_order;
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

type Step<'a> = dyn Fn(HedgePolicyBuilder) -> HedgePolicyBuilder + 'a;

/// What a hedge policy is: its `Debug` (delay, copies, methods), rules and
/// minimum attempt time.
fn built(b: HedgePolicyBuilder) -> Result<String, InvalidConfig> {
    b.build()
        .map(|h| format!("{h:?} {:?} {:?}", h.rules(), h.min_attempt_time()))
}

fn reads_only() -> Rules {
    Rules::builder()
        .idempotent_methods([Method::GET, Method::HEAD])
        .build()
        .unwrap()
}

#[test]
fn the_policy_does_not_depend_on_the_order_of_the_calls() {
    let steps: [&Step<'_>; 7] = [
        &|b| b.adaptive(Duration::from_millis(50)),
        &|b| b.percentile(0.99),
        &|b| b.min_samples(200),
        &|b| b.max_extra(2),
        &|b| b.methods([Method::GET]),
        &|b| b.rules(reads_only()),
        &|b| b.min_attempt_time(Duration::from_millis(20)),
    ];
    let h = same_in_every_order(&HedgePolicy::builder(), &steps, built).unwrap();
    assert!(h.contains("percentile: 0.99"), "{h}");
    assert!(h.contains("fallback: 50ms"), "{h}");
    assert!(h.contains("min_samples: 200"), "{h}");
    let steps: [&Step<'_>; 4] = [
        &|b| b.after(Duration::from_millis(20)),
        &|b| b.max_extra(3),
        &|b| b.methods([Method::GET]),
        &|b| {
            b.policy(
                RetryPolicy::builder()
                    .idempotent_methods([Method::GET])
                    .min_attempt_time(Duration::from_millis(30))
                    .build()
                    .unwrap(),
            )
        },
    ];
    let h = same_in_every_order(&HedgePolicy::builder(), &steps, built).unwrap();
    assert!(h.ends_with(" 30ms"), "{h}");
    // A percentile that needs more samples raises the default, in any order.
    let steps: [&Step<'_>; 2] = [&|b| b.percentile(0.999), &|b| {
        b.adaptive(Duration::from_millis(50))
    }];
    let h = same_in_every_order(&HedgePolicy::builder(), &steps, built).unwrap();
    assert!(h.contains("min_samples: 1000"), "{h}");
}

#[test]
fn setters_that_set_the_same_thing_are_refused_together() {
    let policy = || RetryPolicy::default();
    let pairs: [(&Step<'_>, &Step<'_>, &str, &str); 6] = [
        (
            &|b| b.after(Duration::from_millis(5)),
            &|b| b.adaptive(Duration::from_millis(5)),
            "adaptive",
            "`after`",
        ),
        (
            &|b| b.after(Duration::from_millis(5)),
            &|b| b.percentile(0.9),
            "percentile",
            "`after`",
        ),
        (
            &|b| b.after(Duration::from_millis(5)),
            &|b| b.min_samples(100),
            "min_samples",
            "`after`",
        ),
        (
            &|b| b.after(Duration::from_millis(5)),
            &|b| b.window(Duration::from_secs(1)),
            "window",
            "`after`",
        ),
        (
            &|b| b.policy(policy()),
            &|b| b.rules(Rules::default()),
            "policy",
            "`rules`",
        ),
        (
            &|b| b.policy(policy()),
            &|b| b.min_attempt_time(Duration::ZERO),
            "policy",
            "`min_attempt_time`",
        ),
    ];
    for (first, second, setting, names) in pairs {
        let err =
            same_in_every_order(&HedgePolicy::builder(), &[first, second], built).unwrap_err();
        assert_eq!(err.setting(), setting, "{err}");
        assert!(err.to_string().contains(names), "{err}");
        // Each on its own is fine.
        assert!(first(HedgePolicy::builder()).build().is_ok());
        assert!(second(HedgePolicy::builder()).build().is_ok());
    }
}

#[test]
fn the_first_invalid_setting_does_not_depend_on_the_order_of_the_calls() {
    let steps: [&Step<'_>; 5] = [
        &|b| b.methods([Method::POST]),
        &|b| b.percentile(0.99),
        &|b| b.min_samples(50),
        &|b| b.after(Duration::from_millis(5)),
        &|b| b.max_extra(0),
    ];
    // Numbers, then the pairs, then the methods, then the samples for the
    // percentile: the last steps left out one by one.
    for (from, setting) in [(0, "max_extra"), (1, "percentile"), (2, "methods")] {
        let steps: Vec<&Step<'_>> = steps[..steps.len() - from].to_vec();
        let err = same_in_every_order(&HedgePolicy::builder(), &steps, built).unwrap_err();
        assert_eq!(err.setting(), setting, "{err}");
    }
    let err = same_in_every_order(&HedgePolicy::builder(), &steps[1..3], built).unwrap_err();
    assert_eq!(err.setting(), "min_samples");
}
