//! A classifier of your own, consulted before the built-in rules, and the words it
//! answers in: a [`Verdict`] on one [`Observed`] outcome, with an optional wait.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use http::{HeaderMap, Method, StatusCode, Uri};

use crate::policy::ErrorKind;

/// What a [`Classifier`] says about one outcome, in the decision ladder's own
/// words.
///
/// Whatever the verdict, backstop's write-safety rule stands: a verdict of
/// [`IfIdempotent`](Verdict::IfIdempotent) on a POST without an idempotency key
/// still falls to [`IfNothingWritten`](Verdict::IfNothingWritten), which a
/// response never meets (a response proves the request was written).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Verdict {
    /// No opinion: the built-in rules decide.
    NoOpinion,
    /// An answer to return as it is: never sent again, and not a failure.
    Answer,
    /// A failure that sending again cannot cure.
    NeverCurable,
    /// The server said not to send it again (like `x-should-retry: false`).
    Declined,
    /// The server did not process the request: it may be sent again whatever its
    /// method.
    NotProcessed,
    /// A transient failure: it may be sent again when the request is idempotent or
    /// keyed, and otherwise only when nothing of it was written.
    IfIdempotent,
    /// It may be sent again only when nothing of the request was written, whatever
    /// its method.
    IfNothingWritten,
}

impl Verdict {
    /// The verdict with a wait hint: the next attempt waits exactly `wait` instead
    /// of the backoff, as for `Retry-After` (a hint over the policy's
    /// [`max_retry_after`](crate::RetryPolicy::max_retry_after) ends the call, and
    /// so does one the deadline leaves no time for).
    pub fn after(self, wait: Duration) -> Decision {
        Decision {
            verdict: self,
            wait: Some(wait),
        }
    }
}

/// A [`Verdict`] and an optional wait hint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Decision {
    /// The verdict.
    pub verdict: Verdict,
    /// How long to wait before the next attempt, replacing the backoff; read only
    /// when the outcome turns out retryable.
    pub wait: Option<Duration>,
}

impl Decision {
    /// No opinion, no hint.
    pub const NO_OPINION: Decision = Decision {
        verdict: Verdict::NoOpinion,
        wait: None,
    };
}

impl From<Verdict> for Decision {
    fn from(verdict: Verdict) -> Self {
        Decision {
            verdict,
            wait: None,
        }
    }
}

/// One attempt's outcome, as a [`Classifier`] sees it.
#[derive(Clone, Copy, Debug)]
pub enum Observed<'a> {
    /// A response head arrived.
    Response {
        /// Its status.
        status: StatusCode,
        /// Its headers.
        headers: &'a HeaderMap,
    },
    /// The attempt failed.
    Error {
        /// The kind backstop read from the error.
        kind: ErrorKind,
        /// The error itself, to walk its source chain; `None` when only the kind is
        /// known (a call of [`classify`](crate::policy::classify)).
        error: Option<&'a (dyn StdError + 'static)>,
    },
}

/// Your own rules of what a failure is, consulted before the built-in ones.
///
/// The same classifier serves the retry layer (what to send again), the hedge
/// layer (what is an acceptable answer) and, when given to it, the circuit breaker
/// (what is a failure). A closure is enough: see [`classify_fn`].
///
/// # Examples
///
/// ```
/// use backstop::policy::{Classifier, Decision, Observed, Verdict};
///
/// /// An application that answers "try again" with a 200 and a header.
/// struct Busy;
///
/// impl Classifier for Busy {
///     fn classify(&self, outcome: Observed<'_>) -> Decision {
///         match outcome {
///             Observed::Response { headers, .. } if headers.contains_key("x-busy") => {
///                 Verdict::IfIdempotent.into()
///             }
///             _ => Decision::NO_OPINION,
///         }
///     }
/// }
///
/// let rules = backstop::policy::Rules::builder().classifier(Busy).build()?;
/// # Ok::<(), backstop::policy::InvalidConfig>(())
/// ```
pub trait Classifier: Send + Sync + 'static {
    /// The verdict on one outcome, with an optional wait hint.
    fn classify(&self, outcome: Observed<'_>) -> Decision;

    /// Whether a request is idempotent, when the classifier knows better than the
    /// HTTP method (gRPC's method paths); `None` leaves it to the method.
    fn is_idempotent(&self, method: &Method, uri: &Uri) -> Option<bool> {
        let _ = (method, uri);
        None
    }
}

/// A [`Classifier`] made of a closure; see [`classify_fn`].
#[derive(Clone, Copy)]
pub struct ClassifyFn<F>(F);

/// A [`Classifier`] from a closure that returns a [`Verdict`] or a [`Decision`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use backstop::policy::{classify_fn, Observed, Rules, Verdict};
///
/// let rules = Rules::builder()
///     .classifier(classify_fn(|outcome: Observed<'_>| match outcome {
///         // A 409 from this service means a lock was held: safe to send again
///         // after a second, whatever the method.
///         Observed::Response { status, .. } if status == 409 => {
///             Verdict::NotProcessed.after(Duration::from_secs(1))
///         }
///         _ => Verdict::NoOpinion.into(),
///     }))
///     .build()?;
/// assert!(rules.has_classifier());
/// # Ok::<(), backstop::policy::InvalidConfig>(())
/// ```
pub fn classify_fn<F, R>(f: F) -> ClassifyFn<F>
where
    F: Fn(Observed<'_>) -> R + Send + Sync + 'static,
    R: Into<Decision>,
{
    ClassifyFn(f)
}

impl<F, R> Classifier for ClassifyFn<F>
where
    F: Fn(Observed<'_>) -> R + Send + Sync + 'static,
    R: Into<Decision>,
{
    fn classify(&self, outcome: Observed<'_>) -> Decision {
        (self.0)(outcome).into()
    }
}

impl<F> fmt::Debug for ClassifyFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClassifyFn")
    }
}
