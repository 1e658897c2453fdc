//! Handles that the budget and circuit-breaker layers leave in request extensions.

use std::fmt;
use std::sync::Arc;

use tokio::time::Instant;

use super::{Pause, PauseChange};

/// A retry budget account: the retry and hedge layers withdraw from it before each
/// extra attempt.
///
/// The budget layer implements it; any other shared limit (a process-wide or
/// distributed budget) can too. Implementations must be cheap and must not block:
/// they run on the request path.
pub trait BudgetAccount: Send + Sync + 'static {
    /// Spends one extra attempt if the account allows it; `false` means the budget
    /// is spent and the extra attempt must not be sent.
    fn try_withdraw(&self) -> bool;

    /// Gives back one withdrawal whose extra attempt was not sent after all (a gate
    /// refused it after the wait). Does nothing by default.
    fn refund(&self) {}

    /// Gives back one withdrawal made at `withdrawn` (a time read before
    /// [`try_withdraw`](BudgetAccount::try_withdraw)) whose extra attempt was not
    /// sent after all: the retry layer's call, which knows when it withdrew. An
    /// account that keeps its withdrawals in a sliding window gives this one back
    /// where it was taken, so that the two leave the window together, and not at
    /// all once it has left the window. Calls [`refund`](BudgetAccount::refund) by
    /// default.
    fn refund_withdrawal(&self, withdrawn: Instant) {
        let _ = withdrawn;
        self.refund();
    }

    /// Pauses the account's origin until `until`: a server answered 429 or 503
    /// with a wait hint, and no attempt should reach it before then. An account
    /// may shorten a pause (cap it), never lengthen it; a later call with an
    /// earlier `until` does not shorten a pause already set. Does nothing by
    /// default, so an account of your own keeps compiling and never pauses.
    ///
    /// The retry layer calls it with the hint of each answer it retries after;
    /// the budget layer with the hint of a call's final answer.
    fn pause(&self, until: Instant) {
        let _ = until;
    }

    /// The origin's pause, when it is paused at `now`: when it ends, when the
    /// calling attempt may go, and whether it may wait. `None` (the default) when
    /// it is not paused.
    ///
    /// The budget layer asks before a call's first attempt, the retry layer before
    /// each retry, a hedge layer before each hedge. Each call draws its own
    /// release instant, so it may be asked once per attempt.
    fn paused(&self, now: Instant) -> Option<Pause> {
        let _ = now;
        None
    }

    /// How many extra attempts the account would allow now, when it can tell: for
    /// observers and metrics. `None` by default.
    fn available(&self) -> Option<u64> {
        None
    }

    /// [`pause`](BudgetAccount::pause), saying what it changed: the origin paused,
    /// its pause extended, or nothing (`None`). The layers call this one, to tell
    /// the call's observer; by default it calls `pause` and says nothing.
    fn pause_reporting(&self, until: Instant) -> Option<PauseChange> {
        self.pause(until);
        None
    }

    /// [`paused`](BudgetAccount::paused), saying
    /// [`PauseChange::Resumed`] when this look found the pause over and ended it
    /// (once per pause). The layers call this one, to tell the call's observer; by
    /// default it calls `paused` and says nothing.
    fn paused_reporting(&self, now: Instant) -> (Option<Pause>, Option<PauseChange>) {
        (self.paused(now), None)
    }
}

/// The budget account of a call, found in its [`CallContext`](super::CallContext).
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use backstop::policy::{BudgetAccount, BudgetHandle};
///
/// struct Tokens(AtomicU32);
/// impl BudgetAccount for Tokens {
///     fn try_withdraw(&self) -> bool {
///         self.0.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1)).is_ok()
///     }
/// }
///
/// let handle = BudgetHandle::new(Arc::new(Tokens(AtomicU32::new(1))));
/// let mut req = http::Request::get("http://example.com/").body(()).unwrap();
/// // The call's context is how a handle reaches the layers.
/// backstop::policy::CallContext::of_mut(req.extensions_mut()).set_budget(handle.clone());
/// assert!(handle.try_withdraw());
/// assert!(!handle.try_withdraw());
/// ```
#[derive(Clone)]
pub struct BudgetHandle(Arc<dyn BudgetAccount>);

impl BudgetHandle {
    /// Wraps a budget account.
    #[inline]
    pub fn new(budget: Arc<dyn BudgetAccount>) -> Self {
        BudgetHandle(budget)
    }

    /// Spends one extra attempt if the account allows it.
    pub fn try_withdraw(&self) -> bool {
        self.0.try_withdraw()
    }

    /// Gives back one withdrawal whose extra attempt was not sent.
    pub fn refund(&self) {
        self.0.refund()
    }

    /// Gives back one withdrawal made at `withdrawn` whose extra attempt was not
    /// sent (see [`BudgetAccount::refund_withdrawal`]).
    pub fn refund_withdrawal(&self, withdrawn: Instant) {
        self.0.refund_withdrawal(withdrawn)
    }

    /// Pauses the origin until `until` (see [`BudgetAccount::pause`]).
    pub fn pause(&self, until: Instant) {
        self.0.pause(until)
    }

    /// The origin's pause at `now`, if it is paused (see
    /// [`BudgetAccount::paused`]).
    pub fn paused(&self, now: Instant) -> Option<Pause> {
        self.0.paused(now)
    }

    /// Pauses the origin until `until`, saying what changed (see
    /// [`BudgetAccount::pause_reporting`]).
    pub fn pause_reporting(&self, until: Instant) -> Option<PauseChange> {
        self.0.pause_reporting(until)
    }

    /// The origin's pause at `now`, and whether this look resumed it (see
    /// [`BudgetAccount::paused_reporting`]).
    pub fn paused_reporting(&self, now: Instant) -> (Option<Pause>, Option<PauseChange>) {
        self.0.paused_reporting(now)
    }

    /// The account behind the handle.
    #[inline]
    pub(crate) fn account(&self) -> &dyn BudgetAccount {
        &*self.0
    }

    /// Until when the origin is paused, if it is paused now.
    pub fn paused_until(&self) -> Option<Instant> {
        self.0.paused(Instant::now()).map(|p| p.until())
    }

    /// How many extra attempts the account would allow now, when it can tell.
    pub fn available(&self) -> Option<u64> {
        self.0.available()
    }
}

impl fmt::Debug for BudgetHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BudgetHandle").finish_non_exhaustive()
    }
}

/// An origin's circuit breaker, as the retry and hedge layers see it: they ask it
/// before every extra attempt and after every wait.
pub trait BreakerGate: Send + Sync + 'static {
    /// Whether an extra attempt may be sent now; `false` while the breaker refuses
    /// traffic to the origin.
    fn allows_retry(&self) -> bool;
}

/// The circuit breaker of a call's origin, found in its [`CallContext`](super::CallContext).
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use backstop::policy::{BreakerGate, BreakerHandle};
///
/// struct AlwaysOpen;
/// impl BreakerGate for AlwaysOpen {
///     fn allows_retry(&self) -> bool { false }
/// }
///
/// let handle = BreakerHandle::new(Arc::new(AlwaysOpen));
/// assert!(!handle.allows_retry());
/// ```
#[derive(Clone)]
pub struct BreakerHandle(Arc<dyn BreakerGate>);

impl BreakerHandle {
    /// Wraps a breaker.
    #[inline]
    pub fn new(breaker: Arc<dyn BreakerGate>) -> Self {
        BreakerHandle(breaker)
    }

    /// Whether an extra attempt may be sent now.
    pub fn allows_retry(&self) -> bool {
        self.0.allows_retry()
    }
}

impl fmt::Debug for BreakerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BreakerHandle").finish_non_exhaustive()
    }
}
