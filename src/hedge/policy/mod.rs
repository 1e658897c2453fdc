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
        HedgePolicyBuilder {
            delay: BuilderDelay::Adaptive(default_adaptive(DEFAULT_FALLBACK)),
            max_extra: 1,
            methods: None,
            rules: Rules::default(),
            min_attempt_time: MIN_ATTEMPT_TIME,
            min_samples_set: false,
            error: FirstError::default(),
        }
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

#[derive(Clone, Debug)]
enum BuilderDelay {
    Fixed(Duration),
    Adaptive(Adaptive),
}

/// Builds a [`HedgePolicy`], checking every setting.
///
/// Setters never fail; the first invalid value is reported by
/// [`build`](HedgePolicyBuilder::build).
#[derive(Clone, Debug)]
pub struct HedgePolicyBuilder {
    delay: BuilderDelay,
    max_extra: u32,
    methods: Option<Vec<Method>>,
    rules: Rules,
    min_attempt_time: Duration,
    /// `min_samples` was set, so it is not raised to suit the percentile.
    min_samples_set: bool,
    error: FirstError,
}

impl HedgePolicyBuilder {
    fn adaptive_mut(&mut self, setting: &'static str) -> Option<&mut Adaptive> {
        if let BuilderDelay::Fixed(_) = self.delay {
            self.error.fail(
                setting,
                "applies to an adaptive delay, and the delay is fixed".to_owned(),
            );
        }
        match &mut self.delay {
            BuilderDelay::Adaptive(a) => Some(a),
            BuilderDelay::Fixed(_) => None,
        }
    }

    /// A fixed delay: a copy is sent when the request is still unanswered after
    /// `delay`, the next one `delay` later.
    pub fn after(mut self, delay: Duration) -> Self {
        self.delay = BuilderDelay::Fixed(delay);
        self
    }

    /// An adaptive delay (the default): a latency percentile of the request's
    /// origin, and `fallback` until the origin has enough recent samples.
    pub fn adaptive(mut self, fallback: Duration) -> Self {
        match &mut self.delay {
            BuilderDelay::Adaptive(a) => a.fallback = fallback,
            BuilderDelay::Fixed(_) => {
                self.delay = BuilderDelay::Adaptive(default_adaptive(fallback));
            }
        }
        self
    }

    /// The latency percentile of an adaptive delay, from 0.5 to 0.999 (default
    /// 0.95). A request slower than this fraction of its origin's recent requests
    /// is hedged, so about `1 - percentile` of the requests are sent again.
    pub fn percentile(mut self, percentile: f64) -> Self {
        if !(0.5..=0.999).contains(&percentile) {
            self.error.fail(
                "percentile",
                format!("must be between 0.5 and 0.999, got {percentile}"),
            );
        }
        if let Some(a) = self.adaptive_mut("percentile") {
            a.percentile = percentile;
        }
        self
    }

    /// Recent samples an origin needs before its percentile replaces the fallback
    /// delay: at most 100 000, and at least `1 / (1 - percentile)` so that some
    /// samples lie above the percentile. The default is 50, or that least number
    /// when it is larger (100 for a p99).
    pub fn min_samples(mut self, n: u32) -> Self {
        self.min_samples_set = true;
        self.error.count("min_samples", n, 100_000);
        if let Some(a) = self.adaptive_mut("min_samples") {
            a.min_samples = n;
        }
        self
    }

    /// How long a window of samples lasts (from 100 ms to one hour; default 10 s).
    /// The percentile is read over the current window and the one before it.
    pub fn window(mut self, window: Duration) -> Self {
        if window < Duration::from_millis(100) || window > Duration::from_secs(3600) {
            self.error.fail(
                "window",
                format!("must be between 100 ms and one hour, got {window:?}"),
            );
        }
        if let Some(a) = self.adaptive_mut("window") {
            a.window = window;
        }
        self
    }

    /// The most extra copies per request, 1 to 8 (default 1). Each is sent one
    /// delay after the one before.
    pub fn max_extra(mut self, n: u32) -> Self {
        self.error.count("max_extra", n, MAX_EXTRA_LIMIT);
        self.max_extra = n;
        self
    }

    /// Replaces the methods hedged without an idempotency key (the
    /// [rules](HedgePolicyBuilder::rules)' idempotent methods by default, RFC 9110's
    /// unless they say otherwise), for example to hedge only reads. Every method must
    /// be idempotent under the rules: a POST or PATCH is hedged only when it
    /// carries an idempotency key, whatever this says.
    pub fn methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.methods = Some(methods.into_iter().collect());
        self
    }

    /// The rules whose decision ladder classifies each copy's outcome: which
    /// failures leave the other copies running (a classifier of your own
    /// included), the idempotent methods and the idempotency-key header. Give the
    /// retry layer the same rules.
    pub fn rules(mut self, rules: Rules) -> Self {
        self.rules = rules;
        self
    }

    /// The least time before the call's deadline worth sending a copy with (at
    /// most one day; default 10 ms).
    pub fn min_attempt_time(mut self, min: Duration) -> Self {
        if min > Duration::from_secs(86_400) {
            self.error.fail(
                "min_attempt_time",
                format!("must be at most one day, got {min:?}"),
            );
        }
        self.min_attempt_time = min;
        self
    }

    /// The configuration, or the first invalid setting.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] names the setting and what is wrong with it: a number out
    /// of range, a non-idempotent method in [`methods`](HedgePolicyBuilder::methods),
    /// or too few `min_samples` for the percentile.
    pub fn build(self) -> Result<HedgePolicy, InvalidConfig> {
        self.error.check()?;
        // Checked here, against the policy whichever setter came last.
        let mut methods = self.methods.iter().flatten();
        if let Some(m) = methods.find(|m| !self.rules.is_idempotent_method(m)) {
            return Err(InvalidConfig::new(
                "methods",
                format!(
                    "{m} is not idempotent: a copy could be processed twice; \
                     it is hedged only when it carries an idempotency key"
                ),
            ));
        }
        let delay = match self.delay {
            BuilderDelay::Fixed(d) => Delay::Fixed(d),
            BuilderDelay::Adaptive(mut a) => {
                let needed = (1.0 / (1.0 - a.percentile)).round() as u32;
                if !self.min_samples_set {
                    a.min_samples = a.min_samples.max(needed);
                }
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
            max_extra: self.max_extra,
            methods: self.methods.map(MethodSet::from_iter),
            policy: Arc::new(Judging {
                rules: self.rules,
                min_attempt_time: self.min_attempt_time,
            }),
        })
    }
}

#[cfg(test)]
mod tests;
