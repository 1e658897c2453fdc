use super::*;
use proptest::prelude::*;

#[test]
fn ceilings_double_then_cap() {
    let b = Backoff::new(Duration::from_millis(100), Duration::from_millis(500));
    let got: Vec<_> = (1..=5).map(|n| b.ceiling(n).as_millis()).collect();
    assert_eq!(got, [100, 200, 400, 500, 500]);
    assert_eq!(b.ceiling(0), Duration::from_millis(100));
    assert_eq!(b.ceiling(u32::MAX), Duration::from_millis(500));
}

#[test]
fn zero_base_never_waits() {
    let b = Backoff::new(Duration::ZERO, Duration::from_secs(1));
    assert_eq!(b.wait(4), Duration::ZERO);
}

#[test]
fn waits_spread_over_the_interval() {
    let b = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
    let waits: Vec<_> = (0..2000).map(|_| b.wait(1)).collect();
    assert!(waits.iter().all(|w| *w < Duration::from_millis(100)));
    let low = waits
        .iter()
        .filter(|w| **w < Duration::from_millis(50))
        .count();
    // Uniform: about half below the middle; 2000 draws keep this far from flaky.
    assert!((800..1200).contains(&low), "{low} of 2000 below the middle");
}

proptest! {
    #[test]
    fn wait_is_below_ceiling(base in 0u64..10_000_000_000, max in 0u64..100_000_000_000, n in 0u32..200) {
        let b = Backoff::new(Duration::from_nanos(base), Duration::from_nanos(max));
        let c = b.ceiling(n);
        prop_assert!(c <= Duration::from_nanos(max));
        let w = b.wait(n);
        prop_assert!(w < c || (c.is_zero() && w.is_zero()));
    }
}

const DRAWS: usize = 2000;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// AWS's full jitter (base 5 ms, cap 2 s, as in the 2015 article): every draw in
/// `[0, min(cap, base · 2^(n−1)))`, and spread over the whole interval.
#[test]
fn aws_full_jitter() {
    let b = Backoff::new(ms(5), Duration::from_secs(2));
    assert_eq!(b.jitter(), Jitter::Full);
    for n in 1..=12 {
        let term = ms(5 * (1 << (n - 1))).min(Duration::from_secs(2));
        assert_eq!(b.ceiling(n), term);
        let waits: Vec<_> = (0..DRAWS).map(|_| b.wait(n)).collect();
        assert!(waits.iter().all(|w| *w < term), "retry {n}");
        assert!(waits.iter().any(|w| *w < term / 4), "retry {n}: none low");
        assert!(
            waits.iter().any(|w| *w > term * 3 / 4),
            "retry {n}: none high"
        );
    }
}

/// AWS's equal jitter: `t/2 + uniform[0, t/2)`, so never below half the term.
#[test]
fn aws_equal_jitter() {
    let b = Backoff::new(ms(5), Duration::from_secs(2)).with_jitter(Jitter::Equal);
    for n in 1..=12 {
        let term = b.ceiling(n);
        let waits: Vec<_> = (0..DRAWS).map(|_| b.wait(n)).collect();
        assert!(
            waits.iter().all(|w| term / 2 <= *w && *w < term),
            "retry {n}"
        );
        let low = waits.iter().filter(|w| **w < term * 3 / 4).count();
        // Uniform over the upper half: about half below its middle.
        assert!((800..1200).contains(&low), "retry {n}: {low} of {DRAWS}");
    }
    // A zero term waits nothing; an odd one keeps below it.
    assert_eq!(
        Backoff::new(Duration::ZERO, ms(1))
            .with_jitter(Jitter::Equal)
            .wait(3),
        Duration::ZERO
    );
    let odd =
        Backoff::new(Duration::from_nanos(3), Duration::from_nanos(3)).with_jitter(Jitter::Equal);
    assert!(
        (0..100).all(|_| (Duration::from_nanos(1)..Duration::from_nanos(3)).contains(&odd.wait(1)))
    );
}

/// AWS's decorrelated jitter: `min(cap, uniform[base, previous · 3))`, the previous
/// wait starting at base.
#[test]
fn aws_decorrelated_jitter() {
    let (base, cap) = (ms(5), Duration::from_secs(2));
    let b = Backoff::new(base, cap).with_jitter(Jitter::Decorrelated);
    for _ in 0..50 {
        let mut previous = base;
        for wait in b.waits().take(40) {
            assert!(base <= wait && wait <= cap, "{wait:?}");
            assert!(
                wait < previous * 3 || wait == cap,
                "{wait:?} after {previous:?}"
            );
            previous = wait;
        }
        // Forty draws reach the cap: each grows by 1.5 on average.
        assert!(b.waits().take(200).any(|w| w == cap));
    }
    // The draw depends on the previous wait, not on the retry's number.
    let after = |previous| {
        (0..DRAWS)
            .map(|_| b.next_wait(7, Some(previous)))
            .collect::<Vec<_>>()
    };
    assert!(after(ms(10)).iter().all(|w| (base..ms(30)).contains(w)));
    assert!(after(ms(100)).iter().any(|w| *w >= ms(30)));
    assert!(after(cap).iter().all(|w| *w <= cap));
    // The first draw is from [base, 3 · base).
    assert!((0..DRAWS).all(|_| (base..ms(15)).contains(&b.wait(1))));
    assert_eq!(
        Backoff::new(Duration::ZERO, cap)
            .with_jitter(Jitter::Decorrelated)
            .waits()
            .nth(5),
        Some(Duration::ZERO)
    );
}

/// clientwright: `initial_backoff 0.1 s`, `multiplier 2.0`, `max_backoff 10 s`,
/// `jitter 0.2`: every wait within ±20 % of 0.1, 0.2, 0.4 … capped at 10 s.
#[test]
fn clientwright_proportional_jitter() {
    let b = Backoff::new(ms(100), Duration::from_secs(10))
        .with_multiplier(2.0)
        .with_jitter(Jitter::Proportional(0.2));
    let centres: Vec<_> = (1..=10).map(|n| b.ceiling(n).as_secs_f64()).collect();
    assert_eq!(
        centres,
        [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 10.0, 10.0, 10.0]
    );
    for n in 1..=10 {
        let centre = b.ceiling(n);
        let (low, high) = (centre.mul_f64(0.8), centre.mul_f64(1.2));
        let waits: Vec<_> = (0..DRAWS).map(|_| b.wait(n)).collect();
        assert!(waits.iter().all(|w| low <= *w && *w <= high), "retry {n}");
        assert!(
            waits.iter().any(|w| *w < centre.mul_f64(0.85)),
            "retry {n}: none low"
        );
        assert!(
            waits.iter().any(|w| *w > centre.mul_f64(1.15)),
            "retry {n}: none high"
        );
    }
    // ±0 is no jitter; another multiplier moves the centres.
    let exact = b.with_jitter(Jitter::Proportional(0.0));
    assert_eq!(exact.wait(4), ms(800));
    let slower = b.with_multiplier(1.5);
    assert_eq!(slower.ceiling(3), ms(225));
}

/// ahttp_client: `backoff_factor · 2^(n−1)` capped by `max_delay`; with 0.5 and
/// 4.0 the waits are exactly 0.5, 1, 2, 4, 4 s.
#[test]
fn ahttp_client_no_jitter() {
    let b = Backoff::new(ms(500), Duration::from_secs(4)).with_jitter(Jitter::None);
    let waits: Vec<_> = b.waits().take(5).collect();
    assert_eq!(waits, [ms(500), ms(1000), ms(2000), ms(4000), ms(4000)]);
    assert_eq!(b.wait(u32::MAX), Duration::from_secs(4));
    // Every draw the same.
    assert!((0..100).all(|_| b.wait(2) == ms(1000)));
}

#[test]
fn multipliers_grow_the_term() {
    let b = |m| Backoff::new(ms(100), Duration::from_secs(60)).with_multiplier(m);
    assert_eq!(b(1.0).ceiling(9), ms(100));
    assert_eq!(b(3.0).ceiling(3), ms(900));
    assert_eq!(b(10.0).ceiling(3), Duration::from_secs(10));
    assert_eq!(b(10.0).ceiling(4), Duration::from_secs(60));
    assert_eq!(b(10.0).ceiling(u32::MAX), Duration::from_secs(60));
    // Unchecked nonsense caps or floors rather than panicking.
    assert_eq!(b(f64::NAN).ceiling(2), Duration::from_secs(60));
    assert_eq!(b(f64::INFINITY).ceiling(2), Duration::from_secs(60));
    assert_eq!(b(-3.0).ceiling(2), Duration::ZERO);
    let wild = Backoff::new(ms(1), Duration::MAX).with_jitter(Jitter::Proportional(f64::NAN));
    assert_eq!(wild.wait(1), ms(1));
}

#[test]
fn check_refuses_each_bad_setting() {
    let day = Duration::from_secs(86_400);
    let checked = |b: Backoff| {
        let mut error = FirstError::default();
        b.check(&mut error, day);
        error.check().map_err(|e| e.setting())
    };
    let ok = Backoff::new(ms(100), Duration::from_secs(10));
    for good in [
        ok,
        ok.with_multiplier(1.0),
        ok.with_multiplier(10.0),
        ok.with_jitter(Jitter::Equal),
        ok.with_jitter(Jitter::Decorrelated),
        ok.with_jitter(Jitter::Proportional(0.0)),
        ok.with_jitter(Jitter::Proportional(1.0)),
        ok.with_jitter(Jitter::None).with_multiplier(1.5),
    ] {
        assert_eq!(checked(good), Ok(()), "{good:?}");
    }
    for (bad, setting) in [
        (Backoff::new(ms(2), ms(1)), "backoff"),
        (Backoff::new(ms(1), day + ms(1)), "backoff"),
        (ok.with_multiplier(0.5), "backoff_multiplier"),
        (ok.with_multiplier(10.5), "backoff_multiplier"),
        (ok.with_multiplier(f64::NAN), "backoff_multiplier"),
        (ok.with_multiplier(f64::INFINITY), "backoff_multiplier"),
        (ok.with_jitter(Jitter::Proportional(-0.1)), "jitter"),
        (ok.with_jitter(Jitter::Proportional(1.5)), "jitter"),
        (ok.with_jitter(Jitter::Proportional(f64::NAN)), "jitter"),
        (
            ok.with_jitter(Jitter::Decorrelated).with_multiplier(3.0),
            "backoff_multiplier",
        ),
    ] {
        assert_eq!(checked(bad), Err(setting), "{bad:?}");
    }
}

proptest! {
    #[test]
    fn every_shape_stays_in_its_bounds(
        base in 0u64..10_000_000_000,
        extra in 0u64..100_000_000_000,
        n in 1u32..80,
        m in 1.0f64..=10.0,
        x in 0.0f64..=1.0,
        previous in proptest::option::of(0u64..200_000_000_000),
    ) {
        let (base, max) = (Duration::from_nanos(base), Duration::from_nanos(base + extra));
        let b = Backoff::new(base, max).with_multiplier(m);
        let term = b.ceiling(n);
        prop_assert!(term <= max);
        prop_assert!(term >= base);
        let w = b.with_jitter(Jitter::Equal).wait(n);
        prop_assert!(term / 2 <= w && (w < term || term.is_zero()));
        let w = b.with_jitter(Jitter::None).wait(n);
        prop_assert_eq!(w, term);
        let w = b.with_jitter(Jitter::Proportional(x)).wait(n);
        prop_assert!(term.mul_f64(1.0 - x).saturating_sub(Duration::from_nanos(1)) <= w);
        prop_assert!(w <= term.mul_f64(1.0 + x) + Duration::from_nanos(1));
        let d = Backoff::new(base, max).with_jitter(Jitter::Decorrelated);
        let w = d.next_wait(n, previous.map(Duration::from_nanos));
        prop_assert!(base <= w && w <= max);
    }
}

/// Every shape, for the tests that draw from a seeded generator.
fn every_shape() -> [Jitter; 5] {
    [
        Jitter::Full,
        Jitter::Equal,
        Jitter::Decorrelated,
        Jitter::Proportional(0.2),
        Jitter::None,
    ]
}

#[test]
fn a_seed_repeats_its_waits() {
    use rand::{rngs::StdRng, SeedableRng};
    for jitter in every_shape() {
        let b = Backoff::new(ms(5), Duration::from_secs(2)).with_jitter(jitter);
        let run = |seed| -> Vec<Duration> {
            b.waits_with(StdRng::seed_from_u64(seed)).take(12).collect()
        };
        assert_eq!(run(42), run(42), "{jitter:?}");
        if jitter != Jitter::None {
            assert_ne!(run(42), run(43), "{jitter:?}: another seed, other waits");
        }
        // One wait at a time, from a borrowed generator: the same draws.
        let mut rng = StdRng::seed_from_u64(42);
        let mut previous = None;
        let one_by_one: Vec<_> = (1..=12)
            .map(|retry| {
                let wait = b.next_wait_with(retry, previous, &mut rng);
                previous = Some(wait);
                wait
            })
            .collect();
        assert_eq!(one_by_one, run(42), "{jitter:?}");
    }
}

#[test]
fn seeded_waits_keep_each_shape_bounds() {
    use rand::{rngs::StdRng, SeedableRng};
    let mut rng = StdRng::seed_from_u64(7);
    let b = Backoff::new(ms(100), Duration::from_secs(5));
    for retry in 1..=8 {
        let term = b.ceiling(retry);
        let full = b.next_wait_with(retry, None, &mut rng);
        assert!(full < term);
        let equal = b
            .with_jitter(Jitter::Equal)
            .next_wait_with(retry, None, &mut rng);
        assert!(term / 2 <= equal && equal < term);
        let none = b
            .with_jitter(Jitter::None)
            .next_wait_with(retry, None, &mut rng);
        assert_eq!(none, term);
    }
}
