//! The circuit breaker's settings, with a validating builder.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::origin::Partition;
use crate::policy::{ErrorKind, FirstError, InvalidConfig, Observed, Outcome, Rules, Verdict};

type FailureFn = dyn Fn(Outcome<'_>) -> bool + Send + Sync;

const MIN_COOLDOWN: Duration = Duration::from_millis(1);
const MAX_COOLDOWN: Duration = Duration::from_secs(86_400);
/// The most probes a half-open breaker may let through at once.
pub(crate) const MAX_PROBES: u32 = 1000;

/// When a [`CircuitBreakerLayer`](crate::CircuitBreakerLayer) opens, how long it
/// stays open, and how it probes.
///
/// A breaker trips open on either of two signals about the calls of the last
/// `window`: a failure ratio of at least `failure_ratio` once `min_calls` calls were
/// seen, or `consecutive_failures` failed calls in a row (which also catches a quiet
/// client that never reaches `min_calls`). It refuses calls for a `cooldown`, then
/// lets `probes` calls through; if they all succeed it closes, and if one fails it
/// opens again for twice the previous cooldown, up to `max_cooldown`.
///
/// The window is a span of time (cut into ten slots that expire one at a time),
/// not a count of calls (tower-resilience judges the last 100 calls): a
/// count-based window keeps a failure from an hour ago in a quiet client, and
/// forgets within milliseconds in a busy one. `min_calls` keeps the ratio from
/// being judged on too few calls.
///
/// | setting | default | why, against the anchors |
/// |---|---|---|
/// | `failure_ratio` | 0.5 | Polly trips at 10 %, Finagle below 80 % success. Here a call fails only once its whole retry sequence failed, which is much stronger evidence than one failed request, and a client-side breaker has no other host to send the work to: it should open on a clear majority, not on a blip |
/// | `min_calls` | 20 | Polly asks for 100 calls in its window, which a client sending under 3 calls a second never reaches; 20 calls at 50 % are 10 failed call sequences |
/// | `window` | 30 s | Polly's and Finagle's sampling window |
/// | `consecutive_failures` | 5 | Finagle's and Envoy's outlier detection (linkerd: 7) |
/// | `cooldown` | 5 s | Polly's break duration. Envoy ejects for 30 s, but it balances over other hosts; a single origin's callers wait for the breaker |
/// | `max_cooldown` | 60 s | linkerd's longest penalty: a failed probe doubles the cooldown up to this |
/// | `jitter` | 0.2 | each cooldown is multiplied by a random factor in `[0.8, 1.2]` (gRPC's backoff jitter), so clients that opened together do not probe together |
/// | `probes` | 1 | Polly's single trial call: a recovering upstream gets one request per cooldown |
/// | failure | an error, or a 5xx status | see below |
///
/// # What counts as a failure
///
/// By default a call fails when it ends with an error (any transport failure or
/// timeout; a failure of the caller's own request body,
/// [`ErrorKind::BodyWrite`], is not the origin's fault and does not count) or with
/// a 5xx status. A 4xx never counts, not even 408 or 429: the server answered, and
/// a 429 asks the client to slow down (which the retry budget does), not to stop.
/// [`failure_if`](CircuitBreakerPolicyBuilder::failure_if) replaces the rule.
///
/// Given the [`Rules`] the retry layer decides by
/// ([`rules`](CircuitBreakerPolicyBuilder::rules)), the breaker asks their
/// classifier first, so a rule written once (a gRPC `UNAVAILABLE` in a 200, an
/// application's own "busy" signal) is a failure here too: a classifier's
/// [`Answer`](Verdict::Answer) is a success, any other opinion a failure, and no
/// opinion leaves it to the rule above.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use backstop::circuit_breaker::CircuitBreakerPolicy;
/// use backstop::policy::Outcome;
///
/// let breaker = CircuitBreakerPolicy::builder()
///     .consecutive_failures(3)
///     .cooldown(Duration::from_secs(2))
///     .probes(2)
///     // A 429 counts too.
///     .failure_if(|outcome| match outcome {
///         Outcome::Response { status, .. } => status == 429 || status.is_server_error(),
///         Outcome::Error(_) => true,
///     })
///     .build()?;
/// assert_eq!(breaker.probes(), 2);
///
/// // Bad numbers are refused, never a panic.
/// assert!(CircuitBreakerPolicy::builder().failure_ratio(1.5).build().is_err());
/// assert!(CircuitBreakerPolicy::builder().probes(0).build().is_err());
/// # Ok::<(), backstop::policy::InvalidConfig>(())
/// ```
#[derive(Clone)]
pub struct CircuitBreakerPolicy {
    /// The failure ratio that trips the breaker, in millionths.
    pub(crate) ratio_ppm: u64,
    pub(crate) min_calls: u32,
    pub(crate) window: Duration,
    pub(crate) consecutive_failures: u32,
    pub(crate) cooldown: Duration,
    pub(crate) max_cooldown: Duration,
    pub(crate) jitter: f64,
    pub(crate) probes: u32,
    /// `None`: the default failure rule.
    pub(crate) failure_if: Option<Arc<FailureFn>>,
    pub(crate) rules: Option<Rules>,
    pub(crate) partition: Partition,
}

/// The default failure rule: an error other than the caller's own body failing,
/// or a 5xx status.
#[inline]
fn default_failure(outcome: Outcome<'_>) -> bool {
    match outcome {
        Outcome::Response { status, .. } => status.is_server_error(),
        Outcome::Error(kind) => kind != ErrorKind::BodyWrite,
    }
}

impl CircuitBreakerPolicy {
    /// This policy asking `rules` first what a failure is: a stack's rules, given
    /// once for every policy in it.
    pub(crate) fn with_rules(mut self, rules: Rules) -> Self {
        self.rules = Some(rules);
        self
    }
}

impl Default for CircuitBreakerPolicy {
    fn default() -> Self {
        CircuitBreakerPolicy {
            ratio_ppm: 500_000,
            min_calls: 20,
            window: Duration::from_secs(30),
            consecutive_failures: 5,
            cooldown: Duration::from_secs(5),
            max_cooldown: Duration::from_secs(60),
            jitter: 0.2,
            probes: 1,
            failure_if: None,
            rules: None,
            partition: Partition::origin(),
        }
    }
}

impl CircuitBreakerPolicy {
    /// A builder starting from the defaults.
    pub fn builder() -> CircuitBreakerPolicyBuilder {
        CircuitBreakerPolicyBuilder {
            config: CircuitBreakerPolicy::default(),
            ratio: 0.5,
            max_set: false,
        }
    }

    /// The failure ratio that trips the breaker (to a millionth).
    pub fn failure_ratio(&self) -> f64 {
        self.ratio_ppm as f64 / 1e6
    }

    /// The calls the window must hold before the failure ratio is judged.
    pub fn min_calls(&self) -> u32 {
        self.min_calls
    }

    /// The window over which calls are counted.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// Failed calls in a row that trip the breaker; 0 when that signal is off.
    pub fn consecutive_failures(&self) -> u32 {
        self.consecutive_failures
    }

    /// How long the breaker first stays open, before jitter.
    pub fn cooldown(&self) -> Duration {
        self.cooldown
    }

    /// The longest cooldown, which repeated failed probes double up to (before
    /// jitter).
    pub fn max_cooldown(&self) -> Duration {
        self.max_cooldown
    }

    /// The random spread of a cooldown: it is multiplied by a factor in
    /// `[1 − jitter, 1 + jitter]`.
    pub fn jitter(&self) -> f64 {
        self.jitter
    }

    /// How many calls a half-open breaker lets through; all must succeed to close.
    pub fn probes(&self) -> u32 {
        self.probes
    }

    /// Which calls share a breaker.
    pub fn partition(&self) -> &Partition {
        &self.partition
    }

    /// Whether the breaker counts `outcome` as a failure: the rules' classifier
    /// first, when [rules](CircuitBreakerPolicyBuilder::rules) were given, then the
    /// failure rule.
    pub fn is_failure(&self, outcome: Outcome<'_>) -> bool {
        self.fails(outcome, None)
    }

    /// As `is_failure`, with the error for the classifier to read.
    #[inline]
    pub(crate) fn fails(
        &self,
        outcome: Outcome<'_>,
        error: Option<&(dyn std::error::Error + 'static)>,
    ) -> bool {
        if let Some(rules) = self.rules.as_ref().filter(|r| r.has_classifier()) {
            let observed = match outcome {
                Outcome::Response { status, headers } => Observed::Response { status, headers },
                Outcome::Error(kind) => Observed::Error { kind, error },
            };
            match rules.decide(observed).verdict {
                Verdict::NoOpinion => {}
                Verdict::Answer => return false,
                _ => return true,
            }
        }
        match &self.failure_if {
            Some(failure) => failure(outcome),
            None => default_failure(outcome),
        }
    }

    /// The cooldown after `level` failed probes in a row, before jitter.
    pub(crate) fn cooldown_at(&self, level: u32) -> Duration {
        let factor = 1u32 << level.min(20);
        self.cooldown
            .checked_mul(factor)
            .unwrap_or(self.max_cooldown)
            .min(self.max_cooldown)
    }
}

impl fmt::Debug for CircuitBreakerPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreakerPolicy")
            .field("failure_ratio", &self.failure_ratio())
            .field("min_calls", &self.min_calls)
            .field("window", &self.window)
            .field("consecutive_failures", &self.consecutive_failures)
            .field("cooldown", &self.cooldown)
            .field("max_cooldown", &self.max_cooldown)
            .field("jitter", &self.jitter)
            .field("probes", &self.probes)
            .field("partition", &self.partition)
            .finish_non_exhaustive()
    }
}

/// Builds a [`CircuitBreakerPolicy`], checking every number.
///
/// Setters never fail, and each sets its own setting only;
/// [`build`](CircuitBreakerPolicyBuilder::build) checks them in one fixed order and
/// reports the first invalid one, so the result does not depend on the order of
/// the calls. A setter called twice keeps its last value.
/// [`rules`](CircuitBreakerPolicyBuilder::rules) and
/// [`failure_if`](CircuitBreakerPolicyBuilder::failure_if) set different things
/// and combine: the rules' classifier is asked first, the failure rule after.
#[derive(Clone, Debug)]
pub struct CircuitBreakerPolicyBuilder {
    /// The settings as given: `build` checks them.
    config: CircuitBreakerPolicy,
    /// The failure ratio as given; `build` keeps it to a millionth.
    ratio: f64,
    /// Whether `max_cooldown` was set, or is the default.
    max_set: bool,
}

impl CircuitBreakerPolicyBuilder {
    /// The share of failed calls in the window that trips the breaker: more than 0,
    /// at most 1 (default 0.5). Kept to a millionth.
    pub fn failure_ratio(mut self, ratio: f64) -> Self {
        self.ratio = ratio;
        self
    }

    /// The calls the window must hold before the ratio is judged: at least 1
    /// (default 20). A large number leaves only the consecutive-failures signal.
    pub fn min_calls(mut self, calls: u32) -> Self {
        self.config.min_calls = calls;
        self
    }

    /// The window over which calls are counted, from 10 ms to one hour (default
    /// 30 s). It is cut into ten slots that expire one at a time.
    pub fn window(mut self, window: Duration) -> Self {
        self.config.window = window;
        self
    }

    /// Failed calls in a row that trip the breaker whatever the ratio (default 5);
    /// 0 turns this signal off.
    pub fn consecutive_failures(mut self, failures: u32) -> Self {
        self.config.consecutive_failures = failures;
        self
    }

    /// How long the breaker stays open the first time, from 1 ms to one day
    /// (default 5 s). When `max_cooldown` is not set and its default is shorter,
    /// it is raised to this; a `max_cooldown` set shorter is refused, whichever
    /// came first.
    pub fn cooldown(mut self, cooldown: Duration) -> Self {
        self.config.cooldown = cooldown;
        self
    }

    /// The longest cooldown, from 1 ms to one day (default 60 s): each failed probe
    /// doubles the cooldown up to this. Set it to the cooldown to keep it fixed.
    pub fn max_cooldown(mut self, max: Duration) -> Self {
        self.config.max_cooldown = max;
        self.max_set = true;
        self
    }

    /// The random spread of each cooldown, from 0 to 0.9 (default 0.2): the
    /// cooldown is multiplied by a factor drawn from `[1 − jitter, 1 + jitter]`.
    pub fn jitter(mut self, jitter: f64) -> Self {
        self.config.jitter = jitter;
        self
    }

    /// How many calls a half-open breaker lets through, from 1 to 1000 (default 1).
    /// All must succeed for the breaker to close; one failure opens it again.
    pub fn probes(mut self, probes: u32) -> Self {
        self.config.probes = probes;
        self
    }

    /// What counts as a failed call: `failure` gets the call's final outcome (its
    /// response head, or its error's kind) and returns `true` for a failure.
    pub fn failure_if<F>(mut self, failure: F) -> Self
    where
        F: Fn(Outcome<'_>) -> bool + Send + Sync + 'static,
    {
        self.config.failure_if = Some(Arc::new(failure));
        self
    }

    /// The rules whose classifier says first what a failure is (the same rules as
    /// the retry layer's, so a rule is written once): its
    /// [`Answer`](Verdict::Answer) is a success, any other opinion a failure, and
    /// no opinion leaves it to the failure rule.
    pub fn rules(mut self, rules: Rules) -> Self {
        self.config.rules = Some(rules);
        self
    }

    /// Which calls share a breaker (default: one per origin).
    pub fn partition(mut self, partition: Partition) -> Self {
        self.config.partition = partition;
        self
    }

    /// Each number on its own, in the order of the setters' documentation.
    fn check(&self) -> Result<(), InvalidConfig> {
        let (c, mut error) = (&self.config, FirstError::default());
        if !(self.ratio > 0.0 && self.ratio <= 1.0) {
            error.fail(
                "failure_ratio",
                format!("must be more than 0 and at most 1, got {}", self.ratio),
            );
        }
        if c.min_calls == 0 {
            error.fail("min_calls", "must be at least 1".to_owned());
        }
        error.window(c.window);
        let cooldowns = MIN_COOLDOWN..=MAX_COOLDOWN;
        for (setting, d) in [("cooldown", c.cooldown), ("max_cooldown", c.max_cooldown)] {
            if !cooldowns.contains(&d) {
                error.fail(setting, format!("must be from 1ms to 1 day, got {d:?}"));
            }
        }
        if !(0.0..=0.9).contains(&c.jitter) {
            error.fail("jitter", format!("must be from 0 to 0.9, got {}", c.jitter));
        }
        if !(1..=MAX_PROBES).contains(&c.probes) {
            error.fail(
                "probes",
                format!("must be from 1 to {MAX_PROBES}, got {}", c.probes),
            );
        }
        error.check()
    }

    /// The breaker settings, or the first invalid one.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] names the setting and what is wrong with it: a number out
    /// of range (checked in the order of the setters above), then a `max_cooldown`
    /// shorter than the `cooldown`, whatever the order of the calls.
    pub fn build(self) -> Result<CircuitBreakerPolicy, InvalidConfig> {
        self.check()?;
        let mut config = self.config;
        config.ratio_ppm = ((self.ratio * 1e6).round() as u64).max(1);
        if config.cooldown > config.max_cooldown {
            if self.max_set {
                return Err(InvalidConfig::new(
                    "max_cooldown",
                    format!(
                        "{:?} is shorter than the cooldown {:?}",
                        config.max_cooldown, config.cooldown
                    ),
                ));
            }
            config.max_cooldown = config.cooldown;
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests;
