use super::*;
use crate::policy::same_in_every_order;

#[test]
fn defaults() {
    let built = BudgetPolicy::builder().build().unwrap();
    let b = BudgetPolicy::default();
    assert_eq!(b.deposit_units, built.deposit_units);
    assert_eq!(b.floor_units, built.floor_units);
    assert_eq!(b.ratio(), 0.2);
    assert_eq!(b.min_per_second(), 10.0);
    assert_eq!(b.window(), Duration::from_secs(10));
    assert_eq!(b.floor(), 100.0);
    assert_eq!(b.pause_mode(), PauseMode::Wait);
    assert_eq!(b.max_pause(), Duration::from_secs(10));
    assert_eq!(b.pause_spread(), Duration::from_millis(200));
    assert_eq!(b.pause_min_attempt_time(), Duration::from_millis(10));
    assert_eq!(built.max_pause(), b.max_pause());
    // The cap and minimum attempt time follow the retry layer's defaults.
    let retry = crate::RetryPolicy::default();
    assert_eq!(b.max_pause(), retry.max_retry_after());
    assert_eq!(b.pause_min_attempt_time(), retry.min_attempt_time());
}

#[test]
fn ratios_are_kept_exactly() {
    for (ratio, units) in [
        (0.1, 100_000),
        (0.3, 300_000),
        (0.6, 600_000),
        (0.2, 200_000),
    ] {
        let b = BudgetPolicy::builder().ratio(ratio).build().unwrap();
        assert_eq!(b.deposit_units, units, "{ratio}");
        assert_eq!(b.ratio(), ratio);
    }
}

#[test]
fn bad_numbers_are_refused() {
    let cases = [
        (BudgetPolicy::builder().ratio(f64::NAN), "ratio"),
        (BudgetPolicy::builder().ratio(-0.1), "ratio"),
        (BudgetPolicy::builder().ratio(1000.5), "ratio"),
        (BudgetPolicy::builder().ratio(f64::INFINITY), "ratio"),
        (
            BudgetPolicy::builder().min_per_second(f64::NAN),
            "min_per_second",
        ),
        (
            BudgetPolicy::builder().min_per_second(-1.0),
            "min_per_second",
        ),
        (
            BudgetPolicy::builder().min_per_second(1e300),
            "min_per_second",
        ),
        (BudgetPolicy::builder().window(Duration::ZERO), "window"),
        (
            BudgetPolicy::builder().window(Duration::from_millis(9)),
            "window",
        ),
        (BudgetPolicy::builder().window(Duration::MAX), "window"),
        (
            BudgetPolicy::builder().max_pause(Duration::ZERO),
            "max_pause",
        ),
        (
            BudgetPolicy::builder().max_pause(Duration::from_secs(3601)),
            "max_pause",
        ),
        (
            BudgetPolicy::builder().pause_spread(Duration::MAX),
            "pause_spread",
        ),
        (
            BudgetPolicy::builder().pause_min_attempt_time(Duration::from_secs(61)),
            "pause_min_attempt_time",
        ),
    ];
    for (builder, setting) in cases {
        let err = builder.build().unwrap_err();
        assert_eq!(err.setting(), setting, "{err}");
    }
}

#[test]
fn the_extremes_are_accepted() {
    let b = BudgetPolicy::builder()
        .ratio(1000.0)
        .min_per_second(1_000_000.0)
        .window(Duration::from_secs(3600))
        .build()
        .unwrap();
    assert_eq!(b.floor(), 3.6e9);
    let b = BudgetPolicy::builder()
        .ratio(0.0)
        .min_per_second(0.0)
        .window(Duration::from_millis(10))
        .build()
        .unwrap();
    assert_eq!(b.floor(), 0.0);
}

type Step<'a> = dyn Fn(BudgetPolicyBuilder) -> BudgetPolicyBuilder + 'a;

fn built(b: BudgetPolicyBuilder) -> Result<String, InvalidConfig> {
    b.build().map(|p| format!("{p:?}"))
}

#[test]
fn the_budget_does_not_depend_on_the_order_of_the_calls() {
    let steps: [&Step<'_>; 7] = [
        &|b| b.ratio(0.1),
        &|b| b.min_per_second(2.5),
        &|b| b.window(Duration::from_secs(30)),
        &|b| b.pause_mode(PauseMode::FailFast),
        &|b| b.max_pause(Duration::from_secs(3)),
        &|b| b.pause_spread(Duration::from_millis(50)),
        &|b| b.pause_min_attempt_time(Duration::from_millis(5)),
    ];
    let b = same_in_every_order(&BudgetPolicy::builder(), &steps, built).unwrap();
    // The floor is the rate times the window, whichever was given first.
    assert!(b.contains("floor_units: 75000000"), "{b}");
    let steps: [&Step<'_>; 2] = [&|b| b.partition(Partition::origin()), &|b| b.ratio(0.5)];
    same_in_every_order(&BudgetPolicy::builder(), &steps, built).unwrap();
}

#[test]
fn the_first_invalid_setting_does_not_depend_on_the_order_of_the_calls() {
    let steps: [&Step<'_>; 4] = [
        &|b| b.pause_min_attempt_time(Duration::from_secs(61)),
        &|b| b.max_pause(Duration::ZERO),
        &|b| b.window(Duration::ZERO),
        &|b| b.ratio(-1.0),
    ];
    for (from, setting) in [
        (0, "ratio"),
        (1, "window"),
        (2, "max_pause"),
        (3, "pause_min_attempt_time"),
    ] {
        let steps: Vec<&Step<'_>> = steps[..steps.len() - from].to_vec();
        let err = same_in_every_order(&BudgetPolicy::builder(), &steps, built).unwrap_err();
        assert_eq!(err.setting(), setting, "{err}");
    }
    // A setter given twice keeps its last value.
    let b = BudgetPolicy::builder()
        .ratio(-1.0)
        .ratio(0.5)
        .build()
        .unwrap();
    assert_eq!(b.ratio(), 0.5);
}
