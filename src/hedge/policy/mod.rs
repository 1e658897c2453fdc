//! The hedge layer's policy: what to hedge and when, and the choice a call
//! carries in its context.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::Method;

mod choice;

use super::estimate::{Adaptive, Estimators};
use crate::policy::{FirstError, InvalidConfig, MethodSet, Rules, MIN_ATTEMPT_TIME};
pub use choice::HedgeChoice;

/// Hedges at most this many extra copies per request.
const MAX_EXTRA_LIMIT: u32 = 8;

/// What to hedge and when: the hedge layer's configuration.
///
/// | setting | default | why |
/// |---|---|---|
/// | delay | adaptive: the p95 latency of the origin | hedging the slowest 5 % of requests costs about 5 % more load (Tail at Scale) |
/// | fallback delay | 100 ms | used until an origin has `min_samples` recent latencies |
/// | `min_samples` | 50 | a p95 over fewer samples moves with every slow one; 50 puts at least two above it |
/// | `window` | 10 s | the percentile covers the last 10 to 20 s, so it follows a change of load within seconds |
/// | `max_extra` | 1 | one extra copy removes most of a tail whose slow requests are independent |
/// | methods | the policy's idempotent methods (RFC 9110's: GET, HEAD, OPTIONS, TRACE, PUT, DELETE) | a copy must be harmless to process twice; any request with an idempotency key is hedged too |
/// | rules | [`Rules::default()`] | which failures leave the other copies running (a classifier of your own included), the idempotent methods and the idempotency-key header |
/// | `min_attempt_time` | 10 ms, as [`RetryPolicy`](crate::RetryPolicy)'s | the least time before the call's deadline worth starting a copy with |
///
/// Clones share the latency estimates, so one `HedgePolicy` given to several layers or
/// services learns from all their requests.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use backstop::hedge::HedgePolicy;
/// use http::Method;
///
/// // A second copy of any idempotent request still unanswered after 50 ms.
/// let fixed = HedgePolicy::after(Duration::from_millis(50));
///
/// // Up to two copies, each after the origin's p99, only for reads.
/// let adaptive = HedgePolicy::builder()
///     .adaptive(Duration::from_millis(80))
///     .percentile(0.99)
///     .max_extra(2)
///     .methods([Method::GET, Method::HEAD])
///     .build()?;
///
/// // Hedging a POST without an idempotency key is refused.
/// assert!(HedgePolicy::builder().methods([Method::GET, Method::POST]).build().is_err());
/// # Ok::<(), backstop::policy::InvalidConfig>(())
/// ```
#[derive(Clone)]
pub struct HedgePolicy {
    pub(crate) delay: Delay,
    pub(crate) max_extra: u32,
    /// The methods hedged without a key; all idempotent.
    methods: Option<MethodSet>,
    pub(crate) policy: Arc<Judging>,
}

/// What the hedge layer takes of the rules and timing: the ladder's rules, and the
/// least time worth starting a copy with.
#[derive(Debug)]
pub(crate) struct Judging {
    pub(crate) rules: Rules,
    min_attempt_time: Duration,
}

impl Judging {
    pub(crate) fn min_attempt_time(&self) -> Duration {
        self.min_attempt_time
    }

    pub(crate) fn is_keyed(
        &self,
        req_method: &Method,
        uri: &http::Uri,
        headers: &http::HeaderMap,
        ext: &http::Extensions,
    ) -> bool {
        !self.rules.is_idempotent(req_method, uri)
            && crate::policy::carries_key(&self.rules, headers, ext)
    }
}

#[derive(Clone)]
pub(crate) enum Delay {
    Fixed(Duration),
    Adaptive(Arc<Estimators>),
}

const DEFAULT_FALLBACK: Duration = Duration::from_millis(100);

fn default_adaptive(fallback: Duration) -> Adaptive {
    Adaptive {
        percentile: 0.95,
        fallback,
        min_samples: 50,
        window: Duration::from_secs(10),
    }
}

impl HedgePolicy {
    /// This policy judging copies by `rules` instead of its own: a stack's rules,
    /// given once for every policy in it.
    pub(crate) fn with_rules(mut self, rules: Rules) -> Self {
        self.policy = Arc::new(Judging {
            rules,
            min_attempt_time: self.policy.min_attempt_time,
        });
        self
    }
}

impl Default for HedgePolicy {
    /// The adaptive default: the origin's p95, 100 ms until it is known.
    fn default() -> Self {
        HedgePolicy::adaptive(DEFAULT_FALLBACK)
    }
}

impl HedgePolicy {
    /// Hedges a request still unanswered after `delay`, with the other defaults.
    ///
    /// A zero delay sends every copy at once, doubling the load; the retry budget,
    /// when there is one, still limits it.
    pub fn after(delay: Duration) -> Self {
        HedgePolicy {
            delay: Delay::Fixed(delay),
            ..HedgePolicy::default()
        }
    }

    /// Hedges a request still unanswered after the p95 latency of its origin,
    /// measured over the last 10 to 20 s; until an origin has 50 recent
    /// samples, after `fallback`.
    pub fn adaptive(fallback: Duration) -> Self {
        HedgePolicy {
            delay: Delay::Adaptive(Arc::new(Estimators::new(default_adaptive(fallback)))),
            max_extra: 1,
            methods: None,
            policy: Arc::new(Judging {
                rules: Rules::default(),
                min_attempt_time: MIN_ATTEMPT_TIME,
            }),
        }
    }

    /// A builder starting from the [defaults](HedgePolicy#impl-Default-for-HedgePolicy).
    pub fn builder() -> HedgePolicyBuilder {
        HedgePolicyBuilder::default()
    }

    /// The most extra copies sent per request.
    pub fn max_extra(&self) -> u32 {
        self.max_extra
    }

    /// The rules whose ladder classifies each copy's outcome.
    pub fn rules(&self) -> &Rules {
        &self.policy.rules
    }

    /// The least time before the call's deadline worth sending a copy with.
    pub fn min_attempt_time(&self) -> Duration {
        self.policy.min_attempt_time
    }

    /// The delay as a file writes it: a fixed delay, or an adaptive delay's
    /// fallback, percentile, least samples and window.
    #[cfg(feature = "serde")]
    pub(crate) fn delay_setting(&self) -> Result<Duration, (Duration, f64, u32, Duration)> {
        match &self.delay {
            Delay::Fixed(delay) => Ok(*delay),
            Delay::Adaptive(estimators) => {
                let a = estimators.settings();
                Err((a.fallback, a.percentile, a.min_samples, a.window))
            }
        }
    }

    /// The methods given to the builder; `None` for the rules' idempotent ones.
    #[cfg(feature = "serde")]
    pub(crate) fn method_setting(&self) -> Option<Vec<Method>> {
        self.methods.as_ref().map(|m| m.iter().collect())
    }

    /// Whether `method` is hedged without an idempotency key.
    pub fn hedges_method(&self, method: &Method) -> bool {
        match &self.methods {
            None => self.policy.rules.is_idempotent_method(method),
            Some(list) => list.contains(method),
        }
    }

    /// Whether a request is hedged without an idempotency key: its method, or the
    /// rules' classifier when it knows (a gRPC method path).
    pub(crate) fn hedges(&self, method: &Method, uri: &http::Uri) -> bool {
        match &self.methods {
            None => self.policy.rules.is_idempotent(method, uri),
            Some(list) => list.contains(method) && self.policy.rules.is_idempotent(method, uri),
        }
    }
}

impl fmt::Debug for HedgePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("HedgePolicy");
        match &self.delay {
            Delay::Fixed(delay) => d.field("delay", delay),
            Delay::Adaptive(estimators) => d.field("delay", estimators),
        };
        d.field("max_extra", &self.max_extra)
            .field("methods", &self.methods)
            .finish_non_exhaustive()
    }
}

/// Builds a [`HedgePolicy`], checking every setting.
///
/// Setters never fail, and each sets its own setting only;
/// [`build`](HedgePolicyBuilder::build) checks them in one fixed order and reports
/// the first invalid one, so the result does not depend on the order of the calls.
/// A setter called twice keeps its last value. Setters that set the same thing are
/// refused together, whichever came first: [`after`](HedgePolicyBuilder::after)
/// with [`adaptive`](HedgePolicyBuilder::adaptive) (the delay), `after` with an
/// adaptive delay's [`percentile`](HedgePolicyBuilder::percentile),
/// [`min_samples`](HedgePolicyBuilder::min_samples) or
/// [`window`](HedgePolicyBuilder::window), and
/// [`policy`](HedgePolicyBuilder::policy) with
/// [`rules`](HedgePolicyBuilder::rules) or
/// [`min_attempt_time`](HedgePolicyBuilder::min_attempt_time).
#[derive(Clone, Debug, Default)]
pub struct HedgePolicyBuilder {
    /// `after`: a fixed delay.
    after: Option<Duration>,
    /// `adaptive`: an adaptive delay's fallback.
    fallback: Option<Duration>,
    percentile: Option<f64>,
    min_samples: Option<u32>,
    window: Option<Duration>,
    max_extra: Option<u32>,
    methods: Option<Vec<Method>>,
    rules: Option<Rules>,
    min_attempt_time: Option<Duration>,
    /// `policy`: a retry policy's rules and minimum attempt time.
    policy: Option<(Rules, Duration)>,
}

impl HedgePolicyBuilder {
    /// A fixed delay: a copy is sent when the request is still unanswered after
    /// `delay`, the next one `delay` later. Giving it with
    /// [`adaptive`](HedgePolicyBuilder::adaptive), or with a setting of an adaptive
    /// delay ([`percentile`](HedgePolicyBuilder::percentile),
    /// [`min_samples`](HedgePolicyBuilder::min_samples),
    /// [`window`](HedgePolicyBuilder::window)), is refused.
    pub fn after(mut self, delay: Duration) -> Self {
        self.after = Some(delay);
        self
    }

    /// An adaptive delay (the default): a latency percentile of the request's
    /// origin, and `fallback` until the origin has enough recent samples (100 ms by
    /// default). Giving it with [`after`](HedgePolicyBuilder::after) is refused.
    pub fn adaptive(mut self, fallback: Duration) -> Self {
        self.fallback = Some(fallback);
        self
    }

    /// The latency percentile of an adaptive delay, from 0.5 to 0.999 (default
    /// 0.95). A request slower than this fraction of its origin's recent requests
    /// is hedged, so about `1 - percentile` of the requests are sent again.
    pub fn percentile(mut self, percentile: f64) -> Self {
        self.percentile = Some(percentile);
        self
    }

    /// Recent samples an origin needs before its percentile replaces the fallback
    /// delay: at most 100 000, and at least `1 / (1 - percentile)` so that some
    /// samples lie above the percentile. The default is 50, or that least number
    /// when it is larger (100 for a p99).
    pub fn min_samples(mut self, n: u32) -> Self {
        self.min_samples = Some(n);
        self
    }

    /// How long a window of samples lasts (from 100 ms to one hour; default 10 s).
    /// The percentile is read over the current window and the one before it.
    pub fn window(mut self, window: Duration) -> Self {
        self.window = Some(window);
        self
    }

    /// The most extra copies per request, 1 to 8 (default 1). Each is sent one
    /// delay after the one before.
    pub fn max_extra(mut self, n: u32) -> Self {
        self.max_extra = Some(n);
        self
    }

    /// Replaces the methods hedged without an idempotency key (the
    /// [rules](HedgePolicyBuilder::rules)' idempotent methods by default, RFC 9110's
    /// unless they say otherwise), for example to hedge only reads. Every method must
    /// be idempotent under the rules (given by `rules` or `policy`, before or after
    /// this call): a POST or PATCH is hedged only when it carries an idempotency key,
    /// whatever this says.
    pub fn methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.methods = Some(methods.into_iter().collect());
        self
    }

    /// The rules whose decision ladder classifies each copy's outcome: which
    /// failures leave the other copies running (a classifier of your own
    /// included), the idempotent methods and the idempotency-key header. Give the
    /// retry layer the same rules. Giving it with
    /// [`policy`](HedgePolicyBuilder::policy), which gives a retry policy's rules,
    /// is refused.
    pub fn rules(mut self, rules: Rules) -> Self {
        self.rules = Some(rules);
        self
    }

    /// The least time before the call's deadline worth sending a copy with (at
    /// most one day; default 10 ms). Giving it with
    /// [`policy`](HedgePolicyBuilder::policy), which gives a retry policy's, is
    /// refused.
    pub fn min_attempt_time(mut self, min: Duration) -> Self {
        self.min_attempt_time = Some(min);
        self
    }

    /// What [`policy`](HedgePolicyBuilder::policy) sets: a retry policy's rules
    /// and minimum attempt time.
    pub(crate) fn retry_policy_parts(mut self, rules: Rules, min_attempt_time: Duration) -> Self {
        self.policy = Some((rules, min_attempt_time));
        self
    }

    /// Each setting on its own, then the pairs that set the same thing.
    fn check(&self) -> Result<(), InvalidConfig> {
        let mut error = FirstError::default();
        if let Some(p) = self.percentile.filter(|p| !(0.5..=0.999).contains(p)) {
            error.fail(
                "percentile",
                format!("must be between 0.5 and 0.999, got {p}"),
            );
        }
        if let Some(n) = self.min_samples {
            error.count("min_samples", n, 100_000);
        }
        let windows = Duration::from_millis(100)..=Duration::from_secs(3600);
        if let Some(w) = self.window.filter(|w| !windows.contains(w)) {
            error.fail(
                "window",
                format!("must be between 100 ms and one hour, got {w:?}"),
            );
        }
        if let Some(n) = self.max_extra {
            error.count("max_extra", n, MAX_EXTRA_LIMIT);
        }
        if let Some(min) = self
            .min_attempt_time
            .filter(|m| *m > Duration::from_secs(86_400))
        {
            error.fail(
                "min_attempt_time",
                format!("must be at most one day, got {min:?}"),
            );
        }
        if self.after.is_some() {
            if self.fallback.is_some() {
                error.fail(
                    "adaptive",
                    "`after` sets a fixed delay and `adaptive` an adaptive one; give one"
                        .to_owned(),
                );
            }
            let adaptive = [
                ("percentile", self.percentile.is_some()),
                ("min_samples", self.min_samples.is_some()),
                ("window", self.window.is_some()),
            ];
            for (setting, _) in adaptive.into_iter().filter(|(_, given)| *given) {
                error.fail(
                    setting,
                    "applies to an adaptive delay, and the delay is fixed (`after`)".to_owned(),
                );
            }
        }
        if self.policy.is_some() {
            for (setting, given) in [
                ("rules", self.rules.is_some()),
                ("min_attempt_time", self.min_attempt_time.is_some()),
            ] {
                if given {
                    error.fail(
                        "policy",
                        format!(
                            "`policy` gives the retry policy's {setting}, and `{setting}` \
                             was given too; give one"
                        ),
                    );
                }
            }
        }
        error.check()
    }

    /// The configuration, or the first invalid setting.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] names the setting and what is wrong with it: a number out
    /// of range, two setters that set the same thing (see [`HedgePolicyBuilder`]),
    /// a non-idempotent method in [`methods`](HedgePolicyBuilder::methods), or too
    /// few `min_samples` for the percentile. They are checked in that order,
    /// whatever the order of the calls.
    pub fn build(self) -> Result<HedgePolicy, InvalidConfig> {
        self.check()?;
        let (rules, min_attempt_time) = match self.policy {
            Some(parts) => parts,
            None => (
                self.rules.unwrap_or_default(),
                self.min_attempt_time.unwrap_or(MIN_ATTEMPT_TIME),
            ),
        };
        let mut methods = self.methods.iter().flatten();
        if let Some(m) = methods.find(|m| !rules.is_idempotent_method(m)) {
            return Err(InvalidConfig::new(
                "methods",
                format!(
                    "{m} is not idempotent: a copy could be processed twice; \
                     it is hedged only when it carries an idempotency key"
                ),
            ));
        }
        let delay = match self.after {
            Some(d) => Delay::Fixed(d),
            None => {
                let mut a = default_adaptive(self.fallback.unwrap_or(DEFAULT_FALLBACK));
                a.percentile = self.percentile.unwrap_or(a.percentile);
                a.window = self.window.unwrap_or(a.window);
                let needed = (1.0 / (1.0 - a.percentile)).round() as u32;
                // Unless it was set, `min_samples` is raised to suit the percentile.
                a.min_samples = self.min_samples.unwrap_or(a.min_samples.max(needed));
                if a.min_samples < needed {
                    return Err(InvalidConfig::new(
                        "min_samples",
                        format!(
                            "{} samples cannot tell a p{} apart; at least {needed} are needed",
                            a.min_samples,
                            a.percentile * 100.0
                        ),
                    ));
                }
                Delay::Adaptive(Arc::new(Estimators::new(a)))
            }
        };
        Ok(HedgePolicy {
            delay,
            max_extra: self.max_extra.unwrap_or(1),
            methods: self.methods.map(MethodSet::from_iter),
            policy: Arc::new(Judging {
                rules,
                min_attempt_time,
            }),
        })
    }
}

#[cfg(test)]
mod tests;
