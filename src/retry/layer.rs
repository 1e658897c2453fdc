use std::sync::Arc;

use tower_layer::Layer;

use super::{Retry, Routes, Settings};
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
/// the layers outside the retry layer cannot know, and that the guard holds a call
/// for a paused origin no longer than its policy's total
/// [`timeout`](crate::policy::RetryPolicyBuilder::timeout) allows, which counts the hold).
/// A call that ended before it sent anything counts neither way for the breaker, in
/// both shapes.
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
    pub(crate) settings: Arc<Settings>,
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
