use std::sync::Arc;

use tower_layer::Layer;

use http::request::Parts;

use super::{Retry, Routes, Settings};
use crate::budget::{BudgetPolicy, OriginAccount};
use crate::circuit_breaker::{CircuitBreakerPolicy, State};
use crate::idempotency_key::IdempotencyKeyLayer;
use crate::policy::RetryPolicy;

/// Applies [`Retry`] to a service: re-sends a request when that is safe and
/// worthwhile.
///
/// Clones share the policies, and the breakers and budget accounts of a guard.
///
/// # One layer for the whole guard
///
/// The retry layer can do the work of the layers that usually stand around it
/// itself: [`idempotency_key`](RetryLayer::idempotency_key),
/// [`circuit_breaker`](RetryLayer::circuit_breaker) and
/// [`budget`](RetryLayer::budget). A call then goes through one layer and one
/// future instead of four, finds its origin's breaker and budget account with one
/// lookup (they are kept side by side; two lookups when the two policies partition
/// calls differently), and keeps them in its own state instead of
/// in the request's extensions, so the whole guard costs little more than the
/// retry layer alone. What a call meets is what it meets in the stack of four:
///
/// ```text
/// IdempotencyKeyLayer → CircuitBreakerLayer → BudgetLayer → RetryLayer → transport
/// ```
///
/// the key stamped once per call; the breaker asked once per call (and before every
/// retry) and told the call's final outcome; each call counted once in its origin's
/// budget account and every retry withdrawn from it; a paused origin holding (or
/// refusing) the first attempt; the same errors, tracing events and observer
/// events (except that the guard's events name the route the call matched, which
/// the layers outside the retry layer cannot know). A call that ended before it
/// sent anything counts neither way for the breaker, in both shapes.
///
/// The guard's breakers and accounts are its own. [`circuit_breaker`] and
/// [`budget`] start them empty; clones of the layer made afterwards, their
/// services, and layers made from it by [`policy`](RetryLayer::policy) or
/// [`routes`](RetryLayer::routes) share them: [`breaker_state`](RetryLayer::breaker_state),
/// [`budget_account`](RetryLayer::budget_account) and
/// [`origins`](RetryLayer::origins) read them, as
/// [`CircuitBreakerLayer::state`] and [`BudgetLayer::account`] read a layer's.
///
/// A [`HedgeLayer`](crate::HedgeLayer) beneath reads the breaker, the budget and
/// the keyed mark from the call's context: the guard leaves them there when the
/// call carries a context already (a route that hedges or is named, an
/// [`ObserveLayer`](crate::observe::ObserveLayer) above, a caller's), and in every
/// call after [`share_handles`](RetryLayer::share_handles).
///
/// ```
/// use backstop::circuit_breaker::State;
/// use backstop::{
///     BudgetPolicy, CircuitBreakerPolicy, IdempotencyKeyLayer, ReplayBody, RetryLayer,
///     RetryPolicy,
/// };
/// use bytes::Bytes;
/// use http_body_util::Full;
/// use tower::{Service, ServiceBuilder, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let transport = tower::service_fn(|req: http::Request<ReplayBody<Full<Bytes>>>| async move {
///     // The guard stamped the call's key.
///     assert!(req.headers().contains_key("idempotency-key"));
///     Ok::<_, std::io::Error>(http::Response::new(Full::<Bytes>::default()))
/// });
/// let guard = RetryLayer::new(RetryPolicy::default())
///     .idempotency_key(IdempotencyKeyLayer::new())
///     .circuit_breaker(CircuitBreakerPolicy::default())
///     .budget(BudgetPolicy::default());
/// let mut client = ServiceBuilder::new().layer(guard.clone()).service(transport);
///
/// let req = http::Request::post("http://upstream.test/orders").body(Full::default())?;
/// client.ready().await?.call(req).await?;
///
/// // The call counted in its origin's breaker and account.
/// let head = http::Request::get("http://upstream.test/").body(())?.into_parts().0;
/// assert_eq!(guard.breaker_state(&head), Some(State::Closed));
/// assert!(guard.budget_account(&head).is_some());
/// assert_eq!(guard.origins(), 1);
/// # Ok(()) }
/// ```
///
/// [`circuit_breaker`]: RetryLayer::circuit_breaker
/// [`budget`]: RetryLayer::budget
/// [`CircuitBreakerLayer::state`]: crate::CircuitBreakerLayer::state
/// [`BudgetLayer::account`]: crate::BudgetLayer::account
#[derive(Clone, Debug)]
pub struct RetryLayer {
    settings: Arc<Settings>,
}

impl RetryLayer {
    /// A layer with one policy for every call.
    pub fn new(policy: RetryPolicy) -> Self {
        RetryLayer::with_routes(Routes::new(policy))
    }

    /// A layer with policies by route.
    pub fn with_routes(routes: Routes) -> Self {
        RetryLayer {
            settings: Arc::new(Settings::new(routes)),
        }
    }

    /// This layer with `policy` for every call instead of its own, and the same
    /// guard: a layer made so shares the breakers and budget accounts of this one
    /// (and of its clones).
    ///
    /// # Examples
    ///
    /// ```
    /// use backstop::{BudgetPolicy, RetryLayer, RetryPolicy};
    ///
    /// let writes = RetryLayer::new(RetryPolicy::default()).budget(BudgetPolicy::default());
    /// // Reads retry more, from the same budget.
    /// let reads = writes.clone().policy(RetryPolicy::builder().max_attempts(5).build()?);
    /// let head = http::Request::get("http://upstream.test/").body(())?.into_parts().0;
    /// writes.budget_account(&head).unwrap().deposit();
    /// assert_eq!(reads.origins(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn policy(self, policy: RetryPolicy) -> Self {
        self.routes(Routes::new(policy))
    }

    /// This layer with policies by route instead of its own, and the same guard
    /// (see [`policy`](RetryLayer::policy)).
    pub fn routes(mut self, routes: Routes) -> Self {
        Arc::make_mut(&mut self.settings).routes = routes;
        self
    }

    fn guard_mut(&mut self) -> &mut super::guard::Guard {
        Arc::make_mut(&mut self.settings).guard_mut()
    }

    /// Stamps each call's idempotency key as `keys` would outside this layer (see
    /// [`idempotency_key`](crate::idempotency_key)): once per call, before the
    /// breaker is asked. See [one layer for the whole
    /// guard](RetryLayer#one-layer-for-the-whole-guard).
    pub fn idempotency_key(mut self, keys: IdempotencyKeyLayer) -> Self {
        self.guard_mut().key = Some(keys);
        self
    }

    /// Guards each call with a circuit breaker per origin, as a
    /// [`CircuitBreakerLayer`](crate::CircuitBreakerLayer) of `policy` outside this
    /// layer would (see [`circuit_breaker`](crate::circuit_breaker)): a call to an
    /// origin whose breaker is open is refused before anything is sent, retries ask
    /// the breaker, and the breaker records each call's final outcome. See [one
    /// layer for the whole guard](RetryLayer#one-layer-for-the-whole-guard).
    ///
    /// The guard's breakers (and accounts) start afresh: a layer this is called on
    /// no longer shares them with layers it was cloned from.
    pub fn circuit_breaker(mut self, policy: CircuitBreakerPolicy) -> Self {
        self.guard_mut().set_breaker(policy);
        self
    }

    /// Counts each call in its origin's retry budget account, as a
    /// [`BudgetLayer`](crate::BudgetLayer) of `policy` outside this layer would
    /// (see [`budget`](crate::budget)): retries withdraw from it, and a paused
    /// origin holds (or refuses) the call's first attempt. See [one layer for the
    /// whole guard](RetryLayer#one-layer-for-the-whole-guard).
    ///
    /// The guard's accounts (and breakers) start afresh, as with
    /// [`circuit_breaker`](RetryLayer::circuit_breaker).
    pub fn budget(mut self, policy: BudgetPolicy) -> Self {
        self.guard_mut().set_budget(policy);
        self
    }

    /// Leaves the guard's breaker and budget account, and the keyed mark of a call
    /// whose key it stamped, in every call's
    /// [context](crate::policy::CallContext), for the layers beneath that read them:
    /// a [`HedgeLayer`](crate::HedgeLayer) spends its hedges from the budget, asks
    /// the breaker, and hedges a keyed call. Without it they go only into a context
    /// the call already carries, which saves the success path an insert into the
    /// extensions.
    pub fn share_handles(mut self) -> Self {
        self.guard_mut().hand_down = true;
        self
    }

    /// The state of the guard's breaker that a call with this request head goes
    /// through, created if it is new; `None` without a
    /// [`circuit_breaker`](RetryLayer::circuit_breaker).
    pub fn breaker_state(&self, head: &Parts) -> Option<State> {
        self.settings.guard.as_ref()?.breaker_state(head)
    }

    /// When the guard's breaker that a call with this request head goes through lets
    /// its next probe through: `None` while it is closed, and without a
    /// [`circuit_breaker`](RetryLayer::circuit_breaker) (see
    /// [`CircuitBreakerLayer::next_probe_at`](crate::CircuitBreakerLayer::next_probe_at)).
    pub fn next_probe_at(&self, head: &Parts) -> Option<tokio::time::Instant> {
        self.settings.guard.as_ref()?.next_probe_at(head)
    }

    /// The guard's budget account that a call with this request head spends from,
    /// created if it is new (for metrics and tests); `None` without a
    /// [`budget`](RetryLayer::budget).
    pub fn budget_account(&self, head: &Parts) -> Option<OriginAccount> {
        self.settings.guard.as_ref()?.account(head)
    }

    /// How many origins (or keys) the guard keeps a breaker or an account for
    /// now, after forgetting the idle ones: those used within the breaker's or the
    /// budget's window, or that a call still holds. When the breaker and the
    /// budget partition calls differently, the entries of both are counted. Zero
    /// without a guard. Counting sweeps under a lock the calls share, so it suits
    /// a metrics scrape, not every call.
    pub fn origins(&self) -> usize {
        self.settings.guard.as_ref().map_or(0, |g| g.origins())
    }
}

impl Default for RetryLayer {
    /// [`RetryPolicy::default()`] for every call.
    fn default() -> Self {
        RetryLayer::new(RetryPolicy::default())
    }
}

impl<S> Layer<S> for RetryLayer {
    type Service = Retry<S>;

    fn layer(&self, inner: S) -> Retry<S> {
        Retry::from_settings(inner, self.settings.clone())
    }
}
