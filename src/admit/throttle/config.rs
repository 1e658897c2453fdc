//! The adaptive throttle's settings, with a validating builder.

use std::time::Duration;

use crate::policy::{FirstError, InvalidConfig};

/// The largest `k`: past it the throttle would shed only once nearly every call
/// of the window was rejected, which a breaker says sooner.
const MAX_K: f64 = 1000.0;

/// Client-side adaptive throttling, per origin (Google SRE book, ch. 21 "Handling
/// Overload"): each client sheds a share of its calls to an origin that rejects
/// them for overload, locally, before they reach the network.
///
/// Over the last `window`, each origin counts its **requests** (the calls that
/// reached the throttle, those it shed included) and its **accepts** (the calls the
/// origin did not reject for overload). A new call is shed with probability
///
/// ```text
/// p = min(max_rejection, max(0, (requests − k · accepts) / (requests + 1)))
/// ```
///
/// While the origin accepts more than one call in `k`, `p` is 0 and the throttle
/// costs one read of the window. As rejections mount, the client sheds more of its
/// own load, so the origin spends less on refusing calls it cannot serve; as soon
/// as it accepts again, `p` falls with the accepts.
///
/// | setting | default | why |
/// |---|---|---|
/// | `k` | 2 | the SRE book's multiplier: the client sends up to twice what the origin accepts. A lower `k` sheds sooner (at 1, about the share of calls rejected); a higher one lets more through to an origin whose rejections are cheap |
/// | `window` | 2 min | the SRE book's two minutes of history. It is cut into ten slots that expire one at a time |
/// | `max_rejection` | 1 (no cap) | the book's formula, which never reaches 1 on its own. failsafe-go's adaptive throttler caps its rejection rate (`WithMaxRejectionRate`); a cap of 0.9 keeps a tenth of the calls reaching the origin whatever it answers |
///
/// # Rejections and accepts
///
/// One outcome per call, when it ends, as the breaker counts (a call that needed a
/// retry to succeed was accepted). A call is **rejected** when its final outcome
/// is the origin refusing for overload, the answers that also pause an origin:
///
/// - a 429 (Too Many Requests) or 503 (Service Unavailable), and with feature
///   `grpc` a trailers-only gRPC `RESOURCE_EXHAUSTED` or `UNAVAILABLE`;
/// - an error of kind [`Connect`](crate::policy::ErrorKind::Connect) (connection
///   refused or reset while connecting),
///   [`ConnectTimeout`](crate::policy::ErrorKind::ConnectTimeout),
///   [`RefusedStream`](crate::policy::ErrorKind::RefusedStream) or
///   [`Timeout`](crate::policy::ErrorKind::Timeout) (the origin did not answer in
///   time).
///
/// Every other answer is an **accept**, a 4xx or a 500 included: the origin did
/// the work of answering. A call that ended before it sent anything (refused by the
/// breaker, its origin's pause, or its deadline), or that was dropped before its
/// end, counts neither way; a call the throttle **sheds counts as a request**
/// without an accept, as in the book, so a client that sheds keeps its rate of
/// shedding until the origin accepts again.
///
/// # Order
///
/// Admission decides in a fixed order: the circuit breaker first (an open breaker
/// refuses a call before the throttle counts it), then the throttle, then the
/// budget (a shed call sent nothing and deposits nothing). The throttle sheds first
/// attempts only: retries and hedges are the budget's to limit.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use backstop::throttle::ThrottlePolicy;
///
/// let throttle = ThrottlePolicy::builder()
///     .k(2.0)
///     .window(Duration::from_secs(120))
///     .max_rejection(0.9)
///     .build()?;
/// assert_eq!(throttle.k(), 2.0);
///
/// // Bad numbers are refused, never a panic.
/// assert!(ThrottlePolicy::builder().k(0.5).build().is_err());
/// assert!(ThrottlePolicy::builder().max_rejection(0.0).build().is_err());
/// # Ok::<(), backstop::policy::InvalidConfig>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct ThrottlePolicy {
    pub(crate) k: f64,
    pub(crate) window: Duration,
    pub(crate) max_rejection: f64,
    /// The seed of each origin's draws, when given.
    pub(crate) seed: Option<u64>,
}

impl Default for ThrottlePolicy {
    fn default() -> Self {
        ThrottlePolicy {
            k: 2.0,
            window: Duration::from_secs(120),
            max_rejection: 1.0,
            seed: None,
        }
    }
}

impl ThrottlePolicy {
    /// A builder starting from the defaults.
    pub fn builder() -> ThrottlePolicyBuilder {
        ThrottlePolicyBuilder {
            config: ThrottlePolicy::default(),
        }
    }

    /// The multiplier `k`: a call is shed only once the origin accepted fewer than
    /// one call in `k` over the window.
    pub fn k(&self) -> f64 {
        self.k
    }

    /// The window over which requests and accepts are counted.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// The largest probability of shedding a call.
    pub fn max_rejection(&self) -> f64 {
        self.max_rejection
    }

    /// The seed of the draws, when one was given
    /// ([`ThrottlePolicyBuilder::seed`]).
    pub fn seed(&self) -> Option<u64> {
        self.seed
    }

    /// The probability that a call is shed after `requests` and `accepts` in the
    /// window: `min(max_rejection, max(0, (requests − k · accepts) / (requests +
    /// 1)))`.
    ///
    /// # Examples
    ///
    /// ```
    /// use backstop::throttle::ThrottlePolicy;
    ///
    /// let throttle = ThrottlePolicy::default();
    /// // Half the calls accepted: 2 · 50 = 100 requests, nothing shed.
    /// assert_eq!(throttle.rejection_probability(100, 50), 0.0);
    /// // A quarter accepted: (100 − 2 · 25) / 101.
    /// assert_eq!(throttle.rejection_probability(100, 25), 50.0 / 101.0);
    /// ```
    pub fn rejection_probability(&self, requests: u64, accepts: u64) -> f64 {
        let excess = requests as f64 - self.k * accepts as f64;
        if excess <= 0.0 {
            return 0.0;
        }
        (excess / (requests as f64 + 1.0)).min(self.max_rejection)
    }
}

/// Builds a [`ThrottlePolicy`], checking every number.
///
/// Setters never fail, and each sets its own setting only;
/// [`build`](ThrottlePolicyBuilder::build) checks them in one fixed order and
/// reports the first invalid one. A setter called twice keeps its last value.
#[derive(Clone, Debug)]
#[must_use]
pub struct ThrottlePolicyBuilder {
    config: ThrottlePolicy,
}

impl ThrottlePolicyBuilder {
    /// The multiplier `k`, from 1 to 1000 (default 2, the SRE book's): a call is
    /// shed only once the origin accepted fewer than one call in `k` over the
    /// window.
    pub fn k(mut self, k: f64) -> Self {
        self.config.k = k;
        self
    }

    /// The window over which requests and accepts are counted, from 10 ms to one
    /// hour (default 2 min). It is cut into ten slots that expire one at a time.
    pub fn window(mut self, window: Duration) -> Self {
        self.config.window = window;
        self
    }

    /// The largest probability of shedding a call, more than 0 and at most 1
    /// (default 1: no cap beyond the formula's own).
    pub fn max_rejection(mut self, max: f64) -> Self {
        self.config.max_rejection = max;
        self
    }

    /// Draws from a generator seeded with `seed` (each origin's from the same seed)
    /// instead of the thread's, so a run on tokio's paused clock sheds the same
    /// calls every time: for simulations and tests. Leave it unset in production:
    /// clients seeded alike shed in lock-step.
    pub fn seed(mut self, seed: u64) -> Self {
        self.config.seed = Some(seed);
        self
    }

    /// The throttle's settings, or the first invalid one.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] names the setting and what is wrong with it, checked in
    /// the order of the setters above.
    pub fn build(self) -> Result<ThrottlePolicy, InvalidConfig> {
        let (c, mut error) = (&self.config, FirstError::default());
        if !(1.0..=MAX_K).contains(&c.k) {
            error.fail("k", format!("must be from 1 to {MAX_K}, got {}", c.k));
        }
        error.window(c.window);
        if !(c.max_rejection > 0.0 && c.max_rejection <= 1.0) {
            error.fail(
                "max_rejection",
                format!("must be more than 0 and at most 1, got {}", c.max_rejection),
            );
        }
        error.check()?;
        Ok(self.config)
    }
}
