//! Exponential backoff, and the shapes of its jitter.

use std::time::Duration;

use rand::rngs::ThreadRng;
use rand::Rng;

use super::FirstError;

/// How the wait before a retry is drawn around the backoff's exponential term
/// `t = min(max, base · multiplier^(n−1))` (the [ceiling](Backoff::ceiling) of
/// retry `n`, 1 for the first).
///
/// Clients that failed together come back together unless their waits are drawn
/// apart; the shapes differ in how far. AWS's "Exponential Backoff And Jitter"
/// (2015) measured full and equal jitter doing about the same work for 100
/// contending clients, both well under plain exponential backoff, and decorrelated
/// jitter finishing first at a little more work. The other two shapes are the ones
/// other clients document: a band of ±x around the term, and no jitter at all.
///
/// | shape | wait before retry `n` | as |
/// |---|---|---|
/// | [`Full`](Jitter::Full) (default) | uniform in `[0, t)` | AWS's full jitter; gRPC |
/// | [`Equal`](Jitter::Equal) | `t/2` + uniform in `[0, t/2)` | AWS's equal jitter |
/// | [`Decorrelated`](Jitter::Decorrelated) | `min(max, uniform in [base, 3 · previous))`, the previous wait starting at `base` | AWS's decorrelated jitter |
/// | [`Proportional(x)`](Jitter::Proportional) | `t` · uniform in `[1 − x, 1 + x]` | a jitter of ±x (0.2 is ±20 %) |
/// | [`None`](Jitter::None) | exactly `t` | `backoff_factor · 2^(n−1)` capped by a `max_delay` |
///
/// A configuration file (feature `serde`) names a shape in the retry policy's
/// backoff: `backoff = { base = "100ms", max = "10s", jitter = "equal" }`, one of
/// `"full"`, `"equal"`, `"decorrelated"`, `"none"`, or `jitter = { proportional =
/// 0.2 }`, with an optional `multiplier = 1.5`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use backstop::policy::{Backoff, Jitter};
///
/// // 0.5 s doubling up to 4 s, without jitter: 0.5, 1, 2, 4, 4 s.
/// let backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(4))
///     .with_jitter(Jitter::None);
/// let waits: Vec<_> = backoff.waits().take(5).map(|w| w.as_secs_f64()).collect();
/// assert_eq!(waits, [0.5, 1.0, 2.0, 4.0, 4.0]);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[non_exhaustive]
pub enum Jitter {
    /// Uniform in `[0, t)`: spreads the clients over the whole interval.
    #[default]
    Full,
    /// `t/2` plus uniform in `[0, t/2)`: never less than half the term.
    Equal,
    /// `min(max, uniform in [base, 3 · previous))`, the previous wait starting at
    /// `base`: each wait grows from the one before rather than from the retry's
    /// number, so the [multiplier](Backoff::multiplier) does not apply (it must
    /// stay 2).
    Decorrelated,
    /// The term times a factor uniform in `[1 − x, 1 + x]`, `x` from 0 to 1: 0.2 is
    /// ±20 %. The band is around the capped term, so a wait may exceed `max` by
    /// `x · max`.
    Proportional(f64),
    /// Exactly the term: every client that failed together comes back together.
    None,
}

/// Exponential backoff: the wait before retry `n` (1 for the first retry) grows
/// from `base` by a [multiplier](Backoff::multiplier) (2 unless set) up to `max`,
/// and is drawn by its [`Jitter`] shape (full jitter unless set).
///
/// Full jitter spreads clients that failed together over the whole interval, so they
/// do not come back in lock-step; AWS measured it to cut the total work of 100
/// contending clients by more than half against plain exponential backoff. The
/// random numbers come from a thread-local generator seeded by the operating system,
/// which applications cannot seed into lock-step; the retry layer always draws
/// from it. A simulation draws from its own seeded generator instead, through the
/// same formula ([`next_wait_with`](Backoff::next_wait_with),
/// [`waits_with`](Backoff::waits_with)), to repeat a run.
///
/// A `Backoff` made here is not checked; the retry policy's builder refuses a bad
/// one ([`RetryPolicyBuilder::build`](crate::retry::RetryPolicyBuilder::build)).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use backstop::policy::{Backoff, Jitter};
///
/// let backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
/// assert_eq!(backoff.ceiling(3), Duration::from_millis(400));
/// assert!(backoff.wait(3) < Duration::from_millis(400));
///
/// // 0.1 s growing by 1.5 up to 10 s, each wait within ±20 % of its term.
/// let backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(10))
///     .with_multiplier(1.5)
///     .with_jitter(Jitter::Proportional(0.2));
/// assert_eq!(backoff.ceiling(3), Duration::from_millis(225));
/// let wait = backoff.wait(3);
/// assert!(Duration::from_millis(180) <= wait && wait <= Duration::from_millis(270));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    multiplier: f64,
    jitter: Jitter,
}

/// Decorrelated jitter's growth: AWS's `previous · 3`.
const DECORRELATED_GROWTH: u32 = 3;

impl Backoff {
    /// The largest [multiplier](Backoff::multiplier) the retry policy's builder
    /// takes: more is a configuration mistake (the tenth retry would wait 10⁹ times
    /// the first).
    pub const MAX_MULTIPLIER: f64 = 10.0;

    /// A full-jitter backoff of `base` for the first retry, doubling up to `max`.
    ///
    /// The retry policy's builder validates these; here a `max` below `base` simply
    /// caps every wait at `max`.
    pub const fn new(base: Duration, max: Duration) -> Self {
        Backoff {
            base,
            max,
            multiplier: 2.0,
            jitter: Jitter::Full,
        }
    }

    /// The same backoff drawing its waits by `jitter`.
    pub const fn with_jitter(self, jitter: Jitter) -> Self {
        Backoff { jitter, ..self }
    }

    /// The same backoff growing by `multiplier` each retry instead (1 to 10; 1
    /// keeps every term at `base`).
    pub const fn with_multiplier(self, multiplier: f64) -> Self {
        Backoff { multiplier, ..self }
    }

    /// The first retry's term.
    pub fn base(&self) -> Duration {
        self.base
    }

    /// The largest term.
    pub fn max(&self) -> Duration {
        self.max
    }

    /// How much the term grows each retry (2 unless set).
    pub fn multiplier(&self) -> f64 {
        self.multiplier
    }

    /// How the waits are drawn around the term (full jitter unless set).
    pub fn jitter(&self) -> Jitter {
        self.jitter
    }

    /// The term of retry `retry` (1-based): `min(max, base · multiplier^(retry−1))`,
    /// without overflow. It is the exclusive upper bound of a full- or equal-jitter
    /// wait, the centre of a proportional one and the wait itself without jitter;
    /// decorrelated jitter does not use it.
    pub fn ceiling(&self, retry: u32) -> Duration {
        let exponent = i32::try_from(retry.saturating_sub(1)).unwrap_or(i32::MAX);
        let nanos = self.base.as_nanos() as f64 * self.multiplier.powi(exponent);
        // Exact for a power-of-two multiplier below 2^53 ns (104 days); a NaN is
        // read as the cap.
        if nanos < self.max.as_nanos() as f64 {
            Duration::from_nanos(nanos.max(0.0) as u64).min(self.max)
        } else {
            self.max
        }
    }

    /// A random wait before retry `retry` (1-based), drawn by the backoff's
    /// [`Jitter`]. A decorrelated-jitter wait is drawn as the first retry's (from
    /// `[base, 3 · base)`); [`next_wait`](Backoff::next_wait) draws it from the
    /// previous one, as the retry layer does, and [`waits`](Backoff::waits) gives a
    /// whole sequence.
    pub fn wait(&self, retry: u32) -> Duration {
        self.next_wait(retry, None)
    }

    /// A random wait before retry `retry` (1-based) that follows a wait of
    /// `previous` (`None` before the first retry). Only decorrelated jitter reads
    /// `previous`. The draw comes from the thread-local generator;
    /// [`next_wait_with`](Backoff::next_wait_with) draws from the caller's.
    pub fn next_wait(&self, retry: u32, previous: Option<Duration>) -> Duration {
        self.next_wait_with(retry, previous, &mut rand::rng())
    }

    /// [`next_wait`](Backoff::next_wait) drawn from `rng` instead of the
    /// thread-local generator: the same formula, so a simulation that seeds its
    /// own generator gets the waits the retry layer would draw, and gets them
    /// again from the same seed.
    ///
    /// `rng` is any [`rand::Rng`] of rand 0.9 (`rand::rngs::StdRng` is one). Do
    /// not seed the generators of real clients alike: clients seeded alike draw
    /// alike, and come back in lock-step as if there were no jitter.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use backstop::policy::Backoff;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let backoff = Backoff::new(Duration::from_millis(5), Duration::from_secs(2));
    /// let draw = |seed| {
    ///     let mut rng = StdRng::seed_from_u64(seed);
    ///     (1..=4)
    ///         .map(|retry| backoff.next_wait_with(retry, None, &mut rng))
    ///         .collect::<Vec<_>>()
    /// };
    /// assert_eq!(draw(7), draw(7));
    /// assert!(draw(7).iter().zip(1..).all(|(w, r)| *w < backoff.ceiling(r)));
    /// ```
    pub fn next_wait_with<R: Rng + ?Sized>(
        &self,
        retry: u32,
        previous: Option<Duration>,
        rng: &mut R,
    ) -> Duration {
        let term = self.ceiling(retry);
        match self.jitter {
            Jitter::Full => below(term, rng),
            Jitter::Equal => {
                let half = term / 2;
                half + below(term - half, rng)
            }
            Jitter::Decorrelated => {
                let high = previous
                    .unwrap_or(self.base)
                    .saturating_mul(DECORRELATED_GROWTH);
                let low = self.base;
                (low + below(high.saturating_sub(low), rng)).min(self.max)
            }
            Jitter::Proportional(x) => {
                let x = if x.is_finite() {
                    x.clamp(0.0, 1.0)
                } else {
                    0.0
                };
                let factor = rng.random_range(1.0 - x..=1.0 + x);
                Duration::try_from_secs_f64(term.as_secs_f64() * factor).unwrap_or(Duration::MAX)
            }
            Jitter::None => term,
        }
    }

    /// The waits before retry 1, 2, 3 …, each drawn after the one before: what one
    /// call waits, for simulations and tests. The iterator never ends; its draws
    /// come from the thread-local generator ([`waits_with`](Backoff::waits_with)
    /// takes a generator).
    ///
    /// ```
    /// use std::time::Duration;
    /// use backstop::policy::{Backoff, Jitter};
    ///
    /// let backoff = Backoff::new(Duration::from_millis(5), Duration::from_secs(2))
    ///     .with_jitter(Jitter::Decorrelated);
    /// let mut previous = Duration::from_millis(5);
    /// for wait in backoff.waits().take(20) {
    ///     assert!(Duration::from_millis(5) <= wait && wait < previous * 3);
    ///     assert!(wait <= Duration::from_secs(2));
    ///     previous = wait;
    /// }
    /// ```
    pub fn waits(&self) -> Waits {
        self.waits_with(rand::rng())
    }

    /// [`waits`](Backoff::waits) drawn from `rng`: one call's waits, the same for
    /// the same seed. `rng` may be a generator or a `&mut` to one.
    ///
    /// ```
    /// use std::time::Duration;
    /// use backstop::policy::{Backoff, Jitter};
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let backoff = Backoff::new(Duration::from_millis(5), Duration::from_secs(2))
    ///     .with_jitter(Jitter::Decorrelated);
    /// let first: Vec<_> = backoff.waits_with(StdRng::seed_from_u64(1)).take(10).collect();
    /// let again: Vec<_> = backoff.waits_with(StdRng::seed_from_u64(1)).take(10).collect();
    /// assert_eq!(first, again);
    /// ```
    pub fn waits_with<R: Rng>(&self, rng: R) -> Waits<R> {
        Waits {
            backoff: *self,
            retry: 0,
            previous: None,
            rng,
        }
    }

    /// Checks the backoff as the retry policy's builder does, under the setting
    /// names of its methods; `longest` is the longest duration a setting may take.
    pub(crate) fn check(&self, error: &mut FirstError, longest: Duration) {
        let (base, max) = (self.base, self.max);
        if max > longest {
            error.fail(
                "backoff",
                format!("max must be at most one day, got {max:?}"),
            );
        }
        if base > max {
            error.fail(
                "backoff",
                format!("base {base:?} is larger than max {max:?}"),
            );
        }
        let m = self.multiplier;
        if !(1.0..=Self::MAX_MULTIPLIER).contains(&m) {
            error.fail(
                "backoff_multiplier",
                format!("must be from 1 to {}, got {m}", Self::MAX_MULTIPLIER),
            );
        }
        match self.jitter {
            Jitter::Proportional(x) if !(0.0..=1.0).contains(&x) => {
                error.fail("jitter", format!("must be from 0 to 1, got {x}"));
            }
            Jitter::Decorrelated if m != 2.0 => error.fail(
                "backoff_multiplier",
                format!(
                    "decorrelated jitter grows by {DECORRELATED_GROWTH} from the previous wait; \
                     the multiplier must stay 2, got {m}"
                ),
            ),
            _ => {}
        }
    }
}

/// A uniform draw from `[0, bound)` by `rng`; zero for a zero bound.
fn below<R: Rng + ?Sized>(bound: Duration, rng: &mut R) -> Duration {
    let nanos = bound.as_nanos().min(u128::from(u64::MAX)) as u64;
    if nanos == 0 {
        return Duration::ZERO;
    }
    Duration::from_nanos(rng.random_range(0..nanos))
}

impl Default for Backoff {
    /// 100 ms for the first retry, doubling up to 5 s, full jitter.
    fn default() -> Self {
        Backoff::new(Duration::from_millis(100), Duration::from_secs(5))
    }
}

/// The waits of one call's retries, in order, drawn from `R`:
/// [`Backoff::waits`] (the thread-local generator) or [`Backoff::waits_with`].
#[derive(Clone, Debug)]
pub struct Waits<R = ThreadRng> {
    backoff: Backoff,
    retry: u32,
    previous: Option<Duration>,
    rng: R,
}

impl<R: Rng> Iterator for Waits<R> {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        self.retry = self.retry.saturating_add(1);
        let wait = self
            .backoff
            .next_wait_with(self.retry, self.previous, &mut self.rng);
        self.previous = Some(wait);
        Some(wait)
    }
}

#[cfg(test)]
mod tests;
