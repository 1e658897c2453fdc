//! The total time a call may take.

use std::time::Duration;

use tokio::time::Instant;

/// The least time worth starting an attempt (or a wait) with, unless a policy
/// says otherwise: the retry and hedge policies' default.
pub(crate) const MIN_ATTEMPT_TIME: Duration = Duration::from_millis(10);

/// The instant by which a whole call (every attempt and every wait) must end.
///
/// Put it in a request's extensions to give that call a deadline; it overrides the
/// policy's total timeout when it is earlier. Each attempt's timeout is cut to the
/// time left, and no attempt or wait starts with less than the policy's minimum
/// attempt time left.
///
/// It uses `tokio::time::Instant`, so tests on tokio's paused clock control it.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use backstop::policy::Deadline;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let mut req = http::Request::get("http://example.com/").body(()).unwrap();
/// req.extensions_mut().insert(Deadline::after(Duration::from_secs(2)));
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Deadline(Instant);

impl Deadline {
    /// A deadline at `instant`.
    pub fn at(instant: Instant) -> Self {
        Deadline(instant)
    }

    /// A deadline `duration` from now. A duration too large to represent means
    /// no practical deadline (about 30 years from now).
    pub fn after(duration: Duration) -> Self {
        Deadline(later(Instant::now(), duration))
    }

    /// The instant.
    pub fn instant(&self) -> Instant {
        self.0
    }

    /// The time left from `now`, zero once passed.
    pub fn remaining(&self, now: Instant) -> Duration {
        self.0.saturating_duration_since(now)
    }
}

/// A call's deadline: the one it was `given`, or its total `timeout` counted from
/// `dated`, whichever is earlier; `None` when it has neither.
pub(crate) fn call_deadline(
    given: Option<Instant>,
    timeout: Option<Duration>,
    dated: Instant,
) -> Option<Instant> {
    let own = timeout.map(|t| later(dated, t));
    match (given, own) {
        (Some(given), Some(own)) => Some(given.min(own)),
        (given, own) => given.or(own),
    }
}

/// `from + duration`, or about 30 years from `from` when that cannot be
/// represented: "no practical limit", never an overflow panic.
pub(crate) fn later(from: Instant, duration: Duration) -> Instant {
    from.checked_add(duration)
        .or_else(|| from.checked_add(Duration::from_secs(60 * 60 * 24 * 365 * 30)))
        .unwrap_or(from)
}
