//! The per-call context: what the outer layers of a stack give the inner ones.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::Extensions;
use tokio::time::Instant;

use super::event::Observer;
use super::{AttemptLog, BreakerHandle, BudgetHandle, Deadline, Keyed};

/// What the context keeps of a call's hedging: the hedge layer's
/// [`HedgeChoice`](crate::hedge::HedgeChoice), held without naming it, since this
/// vocabulary sits below every layer. The hedge module reads it back (it writes
/// [`CallContext::hedge`] and [`CallContext::set_hedge`]).
pub(crate) trait HedgeSlot: Any + fmt::Debug + Send + Sync {}

impl<T: Any + fmt::Debug + Send + Sync> HedgeSlot for T {}

/// What the outer layers of a stack give the inner ones for one call, carried in
/// the request's extensions as one value.
///
/// The outermost backstop layer that sees a call puts it there and every other
/// layer fills in its part: the idempotency-key layer marks the call
/// [keyed](CallContext::is_keyed), the circuit-breaker and budget layers leave
/// their origin's [breaker](CallContext::breaker) and [budget
/// account](CallContext::budget), the retry layer the call's
/// [deadline](CallContext::deadline), its route's [name](CallContext::route) and
/// [hedging](CallContext::hedge) and, on each attempt whose write safety depends
/// on it, the attempt's [record](CallContext::attempt); an
/// [`ObserveLayer`](crate::observe::ObserveLayer) the call's
/// [observer](CallContext::observer). One insert serves
/// the whole stack, and the retry layer copies this one value into each attempt
/// instead of cloning every extension.
///
/// It is the one channel by which a handle reaches a layer: a [`BudgetHandle`],
/// [`BreakerHandle`] or [`AttemptLog`] inserted into the extensions on its own is
/// not read. Code of your own can fill in the handles (a per-call budget of your
/// own [`BudgetAccount`](super::BudgetAccount), say) and the per-call choices
/// (deadline, hedging, observer); the per-attempt record and the route's name are
/// the retry layer's to set. Per-call settings a caller states ([`Deadline`],
/// [`Keyed`], a [`RetryPolicy`](crate::RetryPolicy), [`OneShot`](crate::OneShot))
/// may still be inserted into the extensions directly.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use backstop::policy::{CallContext, Deadline};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let mut req = http::Request::post("http://example.com/orders").body(()).unwrap();
/// let context = CallContext::of_mut(req.extensions_mut());
/// context.mark_keyed();
/// context.set_deadline(Deadline::after(Duration::from_secs(2)));
///
/// let context = CallContext::of(req.extensions()).unwrap();
/// assert!(context.is_keyed());
/// assert!(context.deadline().is_some());
/// # }
/// ```
#[derive(Default)]
pub struct CallContext {
    budget: Option<BudgetHandle>,
    breaker: Option<BreakerHandle>,
    keyed: bool,
    deadline: Option<Instant>,
    route: Option<Arc<str>>,
    /// Shared with the route table that chose it, so a call copies one pointer.
    hedge: Option<Arc<dyn HedgeSlot>>,
    attempt: Option<AttemptLog>,
    observer: Option<Arc<dyn Observer>>,
    /// When the call entered the stack, read once by the first layer that dates
    /// something and shared by the others; not carried by a clone, so a context
    /// copied into another call never dates it.
    entered: Option<Instant>,
    /// How long admission held the call while its origin was paused; not carried
    /// by a clone either.
    held: Option<Duration>,
}

impl Clone for CallContext {
    fn clone(&self) -> Self {
        CallContext {
            budget: self.budget.clone(),
            breaker: self.breaker.clone(),
            keyed: self.keyed,
            deadline: self.deadline,
            route: self.route.clone(),
            hedge: self.hedge.clone(),
            attempt: self.attempt.clone(),
            observer: self.observer.clone(),
            entered: None,
            held: None,
        }
    }
}

impl CallContext {
    /// The context in `extensions`, if a layer (or the caller) put one there.
    #[inline]
    pub fn of(extensions: &Extensions) -> Option<&CallContext> {
        extensions.get::<CallContext>()
    }

    /// The context in `extensions`, put there empty if there is none yet.
    #[inline]
    pub fn of_mut(extensions: &mut Extensions) -> &mut CallContext {
        extensions.get_or_insert_default::<CallContext>()
    }

    /// The retry budget account of the call's origin.
    #[inline]
    pub fn budget(&self) -> Option<&BudgetHandle> {
        self.budget.as_ref()
    }

    /// Sets the retry budget account that retries and hedges spend from.
    #[inline]
    pub fn set_budget(&mut self, budget: BudgetHandle) {
        self.budget = Some(budget);
    }

    /// The circuit breaker of the call's origin.
    #[inline]
    pub fn breaker(&self) -> Option<&BreakerHandle> {
        self.breaker.as_ref()
    }

    /// Sets the circuit breaker that retries and hedges ask first.
    #[inline]
    pub fn set_breaker(&mut self, breaker: BreakerHandle) {
        self.breaker = Some(breaker);
    }

    /// Whether the call carries an idempotency key (stamped by the
    /// idempotency-key layer or by the caller), so repeating it is harmless.
    #[inline]
    pub fn is_keyed(&self) -> bool {
        self.keyed
    }

    /// Marks the call as carrying an idempotency key.
    #[inline]
    pub fn mark_keyed(&mut self) {
        self.keyed = true;
    }

    /// The instant by which the whole call must end.
    #[inline]
    pub fn deadline(&self) -> Option<Deadline> {
        self.deadline.map(Deadline::at)
    }

    /// Sets the call's deadline; an earlier one already set is kept.
    #[inline]
    pub fn set_deadline(&mut self, deadline: Deadline) {
        let at = deadline.instant();
        self.deadline = Some(self.deadline.map_or(at, |d| d.min(at)));
    }

    /// The name of the route the call matched, when a route table named it.
    #[inline]
    pub fn route(&self) -> Option<&str> {
        self.route.as_deref()
    }

    /// Names the route the call matched (for the history and tracing): the route
    /// table's to set.
    #[inline]
    pub(crate) fn set_route(&mut self, name: Arc<str>) {
        self.route = Some(name);
    }

    // `hedge`, `set_hedge` and `share_hedge` are written beside `HedgeChoice`, in
    // the hedge module, over these two.

    /// The call's hedging, as the hedge module reads it.
    #[inline]
    pub(crate) fn hedge_slot(&self) -> Option<&dyn HedgeSlot> {
        self.hedge.as_deref()
    }

    /// Sets the call's hedging, as the hedge module writes it.
    #[inline]
    pub(crate) fn set_hedge_slot(&mut self, choice: Arc<dyn HedgeSlot>) {
        self.hedge = Some(choice);
    }

    /// The current attempt's record, when the retry layer keeps one for it.
    #[inline]
    pub fn attempt(&self) -> Option<&AttemptLog> {
        self.attempt.as_ref()
    }

    /// Sets (or clears) the current attempt's record: the retry layer's to set.
    #[inline]
    pub(crate) fn set_attempt(&mut self, attempt: Option<AttemptLog>) {
        self.attempt = attempt;
    }

    /// The observer the layers tell what they decide for this call (see
    /// [`observe`](crate::observe)).
    #[inline]
    pub fn observer(&self) -> Option<&Arc<dyn Observer>> {
        self.observer.as_ref()
    }

    /// Sets the observer of this call; an
    /// [`ObserveLayer`](crate::observe::ObserveLayer) outside keeps it.
    #[inline]
    pub fn set_observer(&mut self, observer: Arc<dyn Observer>) {
        self.observer = Some(observer);
    }

    /// When the call entered the stack: the clock is read by the first layer
    /// that asks and the others share it, so a stack reads it once per call. It
    /// dates the sliding windows of the budget and breaker, where a call counts in
    /// the slot it started in.
    #[inline]
    pub(crate) fn entered(&mut self) -> Instant {
        *self.entered.get_or_insert_with(Instant::now)
    }

    /// Notes that admission held the call for `held` while its origin was
    /// paused, for the history of its response.
    #[cold]
    pub(crate) fn set_held(&mut self, held: Duration) {
        self.held = Some(held);
    }
}

impl fmt::Debug for CallContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallContext")
            .field("budget", &self.budget.is_some())
            .field("breaker", &self.breaker.is_some())
            .field("keyed", &self.keyed)
            .field("deadline", &self.deadline)
            .field("route", &self.route)
            .field("hedge", &self.hedge)
            .field("attempt", &self.attempt.is_some())
            .field("observer", &self.observer.is_some())
            .finish_non_exhaustive()
    }
}

/// What a layer reads of a call: the context first, then the handle types
/// inserted directly.
pub(crate) struct Given<'a> {
    extensions: Option<&'a Extensions>,
    context: Option<&'a CallContext>,
}

impl<'a> Given<'a> {
    /// What `extensions` give. When they hold the context alone (the usual
    /// stack), the handle types inserted directly are not looked for.
    #[inline]
    pub(crate) fn new(extensions: &'a Extensions) -> Self {
        let context = CallContext::of(extensions);
        let others = extensions.len() > usize::from(context.is_some());
        Given {
            extensions: others.then_some(extensions),
            context,
        }
    }

    /// Nothing given.
    #[inline]
    pub(crate) fn none() -> Self {
        Given {
            extensions: None,
            context: None,
        }
    }

    /// A context alone.
    #[inline]
    pub(crate) fn context(context: &'a CallContext) -> Self {
        Given {
            extensions: None,
            context: Some(context),
        }
    }

    /// A value of type `T` inserted into the extensions directly.
    #[inline]
    pub(crate) fn get<T: Send + Sync + 'static>(&self) -> Option<&'a T> {
        self.extensions?.get::<T>()
    }

    /// Whether the extensions hold anything besides the context.
    #[inline]
    pub(crate) fn has_others(&self) -> bool {
        self.extensions.is_some()
    }

    /// All the extensions, when they hold more than the context; else the context
    /// alone, if there is one.
    #[inline]
    pub(crate) fn parts(&self) -> (Option<&'a Extensions>, Option<&'a CallContext>) {
        (self.extensions, self.context)
    }

    #[inline]
    pub(crate) fn budget(&self) -> Option<&'a BudgetHandle> {
        self.context.and_then(CallContext::budget)
    }

    #[inline]
    pub(crate) fn breaker(&self) -> Option<&'a BreakerHandle> {
        self.context.and_then(CallContext::breaker)
    }

    #[inline]
    pub(crate) fn keyed(&self) -> bool {
        self.context.is_some_and(CallContext::is_keyed) || self.get::<Keyed>().is_some()
    }

    #[inline]
    pub(crate) fn deadline(&self) -> Option<Instant> {
        let own = self.context.and_then(|c| c.deadline);
        let given = self.get::<Deadline>().map(Deadline::instant);
        match (own, given) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The name of the route the call matched.
    #[inline]
    pub(crate) fn route(&self) -> Option<&'a Arc<str>> {
        self.context.and_then(|c| c.route.as_ref())
    }

    /// The hedging a route or the caller chose, as the hedge module reads it.
    #[inline]
    pub(crate) fn hedge_slot(&self) -> Option<&'a dyn HedgeSlot> {
        self.context.and_then(CallContext::hedge_slot)
    }

    #[inline]
    pub(crate) fn observer(&self) -> Option<&'a Arc<dyn Observer>> {
        self.context.and_then(CallContext::observer)
    }

    /// When the call entered the stack, if a layer above dated it.
    #[inline]
    pub(crate) fn entered(&self) -> Option<Instant> {
        self.context.and_then(|c| c.entered)
    }

    /// How long admission held the call while its origin was paused.
    #[inline]
    pub(crate) fn held(&self) -> Option<Duration> {
        self.context.and_then(|c| c.held)
    }

    #[inline]
    pub(crate) fn attempt(&self) -> Option<&'a AttemptLog> {
        self.context.and_then(CallContext::attempt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_context_is_the_one_channel_for_handles() {
        let mut ext = Extensions::new();
        // A caller's per-call setting, stated in the extensions, is read.
        ext.insert(Keyed);
        // A handle inserted on its own is not: only the context carries handles.
        ext.insert(AttemptLog::new());
        let given = Given::new(&ext);
        assert!(given.keyed());
        assert!(given.attempt().is_none());
        let log = AttemptLog::new();
        CallContext::of_mut(&mut ext).set_attempt(Some(log));
        assert!(Given::new(&ext).attempt().is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn the_earlier_deadline_wins() {
        let now = Instant::now();
        let mut ext = Extensions::new();
        ext.insert(Deadline::at(now + std::time::Duration::from_secs(5)));
        let ctx = CallContext::of_mut(&mut ext);
        ctx.set_deadline(Deadline::at(now + std::time::Duration::from_secs(3)));
        ctx.set_deadline(Deadline::at(now + std::time::Duration::from_secs(4)));
        assert_eq!(
            Given::new(&ext).deadline(),
            Some(now + std::time::Duration::from_secs(3))
        );
    }
}
