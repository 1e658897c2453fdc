//! Full-jitter exponential backoff.

use std::time::Duration;

use rand::Rng;

/// Full-jitter exponential backoff: the wait before retry `n` (1 for the first
/// retry) is drawn uniformly from `[0, min(max, base · 2^(n−1)))`.
///
/// Full jitter spreads clients that failed together over the whole interval, so they
/// do not come back in lock-step; AWS measured it to cut the total work of 100
/// contending clients by more than half against plain exponential backoff. The
/// random numbers come from a thread-local generator seeded by the operating system,
/// which applications cannot seed into lock-step.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use backstop::policy::Backoff;
///
/// let backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
/// assert_eq!(backoff.ceiling(3), Duration::from_millis(400));
/// assert!(backoff.wait(3) < Duration::from_millis(400));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    base: Duration,
    max: Duration,
}

impl Backoff {
    /// A backoff of `base` for the first retry, doubling up to `max`.
    ///
    /// The retry policy's builder validates these; here a `max` below `base` simply
    /// caps every wait at `max`.
    pub const fn new(base: Duration, max: Duration) -> Self {
        Backoff { base, max }
    }

    /// The first retry's ceiling.
    pub fn base(&self) -> Duration {
        self.base
    }

    /// The largest ceiling.
    pub fn max(&self) -> Duration {
        self.max
    }

    /// The upper bound (exclusive) of the wait before retry `retry` (1-based):
    /// `min(max, base · 2^(retry−1))`, without overflow.
    pub fn ceiling(&self, retry: u32) -> Duration {
        let shift = retry.saturating_sub(1).min(63);
        let factor = 1u64 << shift;
        let nanos = self.base.as_nanos().saturating_mul(u128::from(factor));
        let ceiling = if nanos > self.max.as_nanos() {
            self.max
        } else {
            // nanos <= max, which fits in a Duration.
            Duration::new(
                (nanos / 1_000_000_000) as u64,
                (nanos % 1_000_000_000) as u32,
            )
        };
        ceiling.min(self.max)
    }

    /// A random wait before retry `retry` (1-based), uniform in `[0, ceiling)`.
    pub fn wait(&self, retry: u32) -> Duration {
        let ceiling = self.ceiling(retry);
        let nanos = ceiling.as_nanos().min(u128::from(u64::MAX)) as u64;
        if nanos == 0 {
            return Duration::ZERO;
        }
        Duration::from_nanos(rand::rng().random_range(0..nanos))
    }
}

impl Default for Backoff {
    /// 100 ms for the first retry, doubling up to 5 s.
    fn default() -> Self {
        Backoff::new(Duration::from_millis(100), Duration::from_secs(5))
    }
}

#[cfg(test)]
mod tests {
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
}
