//! The retry budget's settings, with a validating builder.

use std::time::Duration;

use super::account::{Account, UNIT};
use super::OriginAccount;
use crate::fleet::Fleet;
use crate::origin::Partition;
use crate::policy::{FirstError, InvalidConfig};

/// The largest ratio a budget accepts: a thousand retries per first attempt.
const MAX_RATIO: f64 = 1000.0;
/// The largest floor rate, in retries per second.
const MAX_MIN_PER_SECOND: f64 = 1_000_000.0;
/// The longest pause a budget accepts as its cap.
const MAX_MAX_PAUSE: Duration = Duration::from_secs(3600);
/// The longest release spread and minimum attempt time a budget accepts.
const MAX_PAUSE_SPREAD: Duration = Duration::from_secs(60);

/// The default cap on an origin's pause: the retry layer's default
/// `max_retry_after`, so the pause and the retry's own wait end together.
pub(crate) const DEFAULT_MAX_PAUSE: Duration = Duration::from_secs(10);
/// The default release spread: callers that waited for a pause go at its end plus
/// a uniform share of 200 ms.
pub(crate) const DEFAULT_PAUSE_SPREAD: Duration = Duration::from_millis(200);
/// The default least time a call must have left after a pause to wait for it: the
/// retry layer's default `min_attempt_time`.
pub(crate) const DEFAULT_PAUSE_MIN_ATTEMPT: Duration = Duration::from_millis(10);

/// What a call that reaches a paused origin does. See [`BudgetPolicy`]'s
/// "Pause" section.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum PauseMode {
    /// Wait for the pause to end when the call's deadline leaves room for it plus
    /// the minimum attempt time, then go; otherwise fail at once (the default).
    #[default]
    Wait,
    /// Fail at once with an error that says the origin is paused and until when
    /// ([`Error::is_paused`](crate::Error::is_paused)).
    FailFast,
    /// Never pause: a hint is honoured only by the call that received it.
    Off,
}

/// The pause settings of a budget.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PauseSettings {
    pub(crate) mode: PauseMode,
    pub(crate) max: Duration,
    pub(crate) spread: Duration,
    pub(crate) min_attempt_time: Duration,
}

impl Default for PauseSettings {
    fn default() -> Self {
        PauseSettings {
            mode: PauseMode::Wait,
            max: DEFAULT_MAX_PAUSE,
            spread: DEFAULT_PAUSE_SPREAD,
            min_attempt_time: DEFAULT_PAUSE_MIN_ATTEMPT,
        }
    }
}

/// How many retries a [`BudgetLayer`](crate::BudgetLayer) allows.
///
/// Over the last `window`, retries (and hedges) may add at most `ratio` of the
/// first attempts, plus a floor of `min_per_second · window` so that a quiet client
/// can still retry.
///
/// | setting | default | why |
/// |---|---|---|
/// | `ratio` | 0.2 | Finagle's and tower's `TpsBudget`'s: a dead upstream sees ≈1.2× the normal load, not 3–4× |
/// | `min_per_second` | 10 | the same anchors' floor: a client sending a few calls a second still gets its retries |
/// | `window` | 10 s | the same anchors' window: long enough to smooth bursts, short enough to forget an outage |
/// | partition | per origin | one bad upstream cannot spend the retries of another |
/// | `pause_mode` | [`PauseMode::Wait`] | a call that can wait for a paused origin waits rather than fails |
/// | `max_pause` | 10 s | the retry layer's default `max_retry_after`: the pause and the retry's own wait end together |
/// | `pause_spread` | 200 ms | a few round trips: callers released after a pause arrive as a ramp, not a burst, and still well inside a one-second hint's granularity |
/// | `pause_min_attempt_time` | 10 ms | the retry layer's default `min_attempt_time` |
/// | `fleet` | none | each process on its own; with a [`Fleet`](crate::fleet::Fleet), replicas share pauses and lease one budget ([`crate::fleet`]) |
///
/// The arithmetic is exact: the ratio is kept in millionths and every first attempt
/// deposits `ratio · 1 000 000` units, every retry withdraws `1 000 000`, so a ratio
/// of 0.3 gives exactly 3 retries per 10 first attempts (tower's `TpsBudget` turns
/// 0.3 into 1/3 and 0.6 into 1, tower#857). Ratios finer than a millionth are
/// rounded to the nearest millionth.
///
/// The window is cut into ten slots; the events of a slot expire together, one
/// `window` after the slot began, so an event counts for between 90 % and 100 % of
/// the window.
///
/// # Pause
///
/// A 429 or 503 with a wait hint (`retry-after-ms`, or `Retry-After` as seconds
/// or a date) pauses its origin's account until the hint ends, capped at
/// `max_pause` (a longer hint pauses for the cap, never past what the server
/// said). While the origin is paused no attempt reaches it: a call's first attempt
/// waits in the [`Budget`](crate::budget::Budget) service, each retry in the retry layer,
/// each hedge is not sent. A call waits when its deadline leaves room for the
/// rest of the pause plus `pause_min_attempt_time`, and fails at once otherwise
/// (or always, with [`PauseMode::FailFast`]) with an error that says the origin
/// is paused and until when; a retry also stops rather than wait for a pause
/// longer than its policy's `max_retry_after`. Calls that waited are released at the pause's end
/// plus a uniform share of `pause_spread` (full jitter), so the origin does not
/// meet them all at once; a retry whose own wait ends after the pause's end goes
/// at the end of its own wait, so a retry waiting for the same hint goes when the
/// pause ends. One pause per account: the partition decides what an origin is.
///
/// The deadline the budget layer sees is the call's own
/// ([`Deadline`](crate::policy::Deadline) or one an outer layer set in the
/// [`CallContext`](crate::policy::CallContext)); a retry policy's total timeout
/// starts when the retry layer inside gets the call, after a first attempt's wait.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use backstop::budget::BudgetPolicy;
///
/// let budget = BudgetPolicy::builder()
///     .ratio(0.1)
///     .min_per_second(1.0)
///     .window(Duration::from_secs(30))
///     .build()?;
/// assert_eq!(budget.ratio(), 0.1);
/// assert_eq!(budget.floor(), 30.0);
///
/// // Bad numbers are refused, never a panic.
/// assert!(BudgetPolicy::builder().ratio(f64::NAN).build().is_err());
/// assert!(BudgetPolicy::builder().window(Duration::ZERO).build().is_err());
/// # Ok::<(), backstop::policy::InvalidConfig>(())
/// ```
#[derive(Clone, Debug)]
pub struct BudgetPolicy {
    /// Units a first attempt deposits.
    pub(crate) deposit_units: i64,
    /// The floor, in units.
    pub(crate) floor_units: i64,
    pub(crate) window: Duration,
    min_per_second: f64,
    pub(crate) partition: Partition,
    pub(crate) pause: PauseSettings,
    /// The fleet the accounts share with, if any.
    pub(crate) fleet: Option<Fleet>,
}

impl Default for BudgetPolicy {
    fn default() -> Self {
        BudgetPolicy {
            deposit_units: UNIT / 5,
            floor_units: 100 * UNIT,
            window: Duration::from_secs(10),
            min_per_second: 10.0,
            partition: Partition::origin(),
            pause: PauseSettings::default(),
            fleet: None,
        }
    }
}

impl BudgetPolicy {
    /// A builder starting from the defaults.
    pub fn builder() -> BudgetPolicyBuilder {
        BudgetPolicyBuilder {
            ratio: 0.2,
            min_per_second: 10.0,
            window: Duration::from_secs(10),
            partition: Partition::origin(),
            pause: PauseSettings::default(),
            fleet: None,
        }
    }

    /// Retries allowed per first attempt, as kept (to a millionth).
    pub fn ratio(&self) -> f64 {
        self.deposit_units as f64 / UNIT as f64
    }

    /// The floor's rate, in retries per second.
    pub fn min_per_second(&self) -> f64 {
        self.min_per_second
    }

    /// The retries allowed per window whatever the traffic: `min_per_second ·
    /// window`, as kept (to a millionth).
    pub fn floor(&self) -> f64 {
        self.floor_units as f64 / UNIT as f64
    }

    /// The window over which first attempts and retries are counted.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// Which calls share an account.
    pub fn partition(&self) -> &Partition {
        &self.partition
    }

    /// What a call that reaches a paused origin does.
    pub fn pause_mode(&self) -> PauseMode {
        self.pause.mode
    }

    /// The longest an origin is paused for one hint.
    pub fn max_pause(&self) -> Duration {
        self.pause.max
    }

    /// Over how long calls that waited for a pause are released after its end.
    pub fn pause_spread(&self) -> Duration {
        self.pause.spread
    }

    /// The least time a call must have left after a pause to wait for it.
    pub fn pause_min_attempt_time(&self) -> Duration {
        self.pause.min_attempt_time
    }

    /// The fleet the accounts share pauses and a leased budget with, if any
    /// ([`crate::fleet`]).
    pub fn fleet(&self) -> Option<&Fleet> {
        self.fleet.as_ref()
    }

    /// A new account with these numbers, on its own: not shared with any layer
    /// (with a fleet, shared with the fleet under the key `"account"`).
    ///
    /// Its window starts now (on tokio's clock, so paused-clock tests control it).
    pub fn account(&self) -> OriginAccount {
        OriginAccount(Account::new(self, "account"))
    }
}

/// Builds a [`BudgetPolicy`], checking every number.
///
/// Setters never fail, and each sets its own setting only;
/// [`build`](BudgetPolicyBuilder::build) checks them in one fixed order and reports
/// the first invalid one, so the result does not depend on the order of the calls.
/// A setter called twice keeps its last value.
#[derive(Clone, Debug)]
pub struct BudgetPolicyBuilder {
    ratio: f64,
    min_per_second: f64,
    window: Duration,
    partition: Partition,
    pause: PauseSettings,
    fleet: Option<Fleet>,
}

impl BudgetPolicyBuilder {
    /// Retries allowed per first attempt, from 0 to 1000 (default 0.2: one retry
    /// per five first attempts). Kept to a millionth.
    pub fn ratio(mut self, ratio: f64) -> Self {
        self.ratio = ratio;
        self
    }

    /// The floor's rate in retries per second, from 0 to 1 000 000 (default 10):
    /// `min_per_second · window` retries are allowed per window whatever the
    /// traffic. 0 means no floor.
    pub fn min_per_second(mut self, rate: f64) -> Self {
        self.min_per_second = rate;
        self
    }

    /// The window over which first attempts and retries are counted, from 10 ms to
    /// one hour (default 10 s).
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// Which calls share an account (default: one per origin).
    pub fn partition(mut self, partition: Partition) -> Self {
        self.partition = partition;
        self
    }

    /// What a call that reaches a paused origin does (default
    /// [`PauseMode::Wait`]; [`PauseMode::Off`] never pauses an origin).
    pub fn pause_mode(mut self, mode: PauseMode) -> Self {
        self.pause.mode = mode;
        self
    }

    /// The longest an origin is paused for one hint, from 1 ms to one hour
    /// (default 10 s, the retry layer's default `max_retry_after`). A longer hint
    /// pauses the origin for this long.
    pub fn max_pause(mut self, max: Duration) -> Self {
        self.pause.max = max;
        self
    }

    /// Over how long the calls that waited for a pause are released after its end,
    /// from 0 to 60 s (default 200 ms): each goes at the end plus a uniform share
    /// of it.
    pub fn pause_spread(mut self, spread: Duration) -> Self {
        self.pause.spread = spread;
        self
    }

    /// The least time a call must have left after a pause to wait for it, from 0
    /// to 60 s (default 10 ms, the retry layer's default `min_attempt_time`).
    pub fn pause_min_attempt_time(mut self, min: Duration) -> Self {
        self.pause.min_attempt_time = min;
        self
    }

    /// Shares each origin's pause and one leased budget with the replicas of
    /// `fleet` (default: none, every process on its own, at no extra cost). See
    /// [`crate::fleet`]; breakers stay local.
    pub fn fleet(mut self, fleet: Fleet) -> Self {
        self.fleet = Some(fleet);
        self
    }

    /// Each number on its own, in the order of the setters above.
    fn check(&self) -> Result<(), InvalidConfig> {
        let mut error = FirstError::default();
        if !(0.0..=MAX_RATIO).contains(&self.ratio) {
            error.fail(
                "ratio",
                format!("must be a number from 0 to {MAX_RATIO}, got {}", self.ratio),
            );
        }
        if !(0.0..=MAX_MIN_PER_SECOND).contains(&self.min_per_second) {
            error.fail(
                "min_per_second",
                format!(
                    "must be a number from 0 to {MAX_MIN_PER_SECOND}, got {}",
                    self.min_per_second
                ),
            );
        }
        error.window(self.window);
        let pause = &self.pause;
        if !(Duration::from_millis(1)..=MAX_MAX_PAUSE).contains(&pause.max) {
            error.fail(
                "max_pause",
                format!("must be from 1ms to 1h, got {:?}", pause.max),
            );
        }
        for (setting, d) in [
            ("pause_spread", pause.spread),
            ("pause_min_attempt_time", pause.min_attempt_time),
        ] {
            if d > MAX_PAUSE_SPREAD {
                error.fail(setting, format!("must be from 0 to 60s, got {d:?}"));
            }
        }
        error.check()
    }

    /// The budget, or the first invalid setting.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] names the setting and what is wrong with it; the settings
    /// are checked in the order of the setters above, whatever the order of the
    /// calls.
    pub fn build(self) -> Result<BudgetPolicy, InvalidConfig> {
        self.check()?;
        // Both products are bounded (1e9 and 3.6e15 units), far inside an i64.
        let deposit_units = (self.ratio * UNIT as f64).round() as i64;
        let floor = (self.min_per_second * self.window.as_secs_f64() * UNIT as f64).round() as i64;
        Ok(BudgetPolicy {
            deposit_units,
            floor_units: floor,
            window: self.window,
            min_per_second: self.min_per_second,
            partition: self.partition,
            pause: self.pause,
            fleet: self.fleet,
        })
    }
}

#[cfg(test)]
mod tests;
