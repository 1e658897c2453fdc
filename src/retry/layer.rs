use std::sync::Arc;

use tower_layer::Layer;

use super::guard::Guard;
use super::{Retry, Routes};
use crate::budget::BudgetLayer;
use crate::circuit_breaker::CircuitBreakerLayer;
use crate::idempotency_key::IdempotencyKeyLayer;
use crate::policy::RetryPolicy;

/// Applies [`Retry`] to a service: re-sends a request when that is safe and
/// worthwhile.
///
/// Clones share the policies (and the breakers and accounts it was given).
///
/// # One layer for the whole guard
///
/// The retry layer can do the work of the layers that usually stand around it
/// itself: [`idempotency_key`](RetryLayer::idempotency_key),
/// [`circuit_breaker`](RetryLayer::circuit_breaker) and
/// [`budget`](RetryLayer::budget). The call then goes through one layer and one
/// future instead of four, finds each origin's breaker and account once, and keeps
/// them in its own state instead of in the request's extensions, so the whole guard
/// costs about what the retry layer alone costs. What a call meets is the same as
/// in the stack of four layers:
///
/// ```text
/// IdempotencyKeyLayer → CircuitBreakerLayer → BudgetLayer → RetryLayer → transport
/// ```
///
/// the key stamped once per call, the breaker asked once per call (and before every
/// retry) and told the call's final outcome, each call counted once in its origin's
/// budget account and every retry withdrawn from it, a paused origin holding (or
/// refusing) the first attempt, the same errors, tracing events and observer events.
/// Layers given here share their breakers and accounts with their clones used
/// elsewhere, and still answer [`CircuitBreakerLayer::state`] and
/// [`BudgetLayer::origins`].
///
/// A [`HedgeLayer`](crate::HedgeLayer) beneath reads the breaker, the budget and
/// the keyed mark from the call's context: the guard leaves them there when the
/// call carries a context already (a route that hedges or is named, an
/// [`ObserveLayer`](crate::observe::ObserveLayer) above, a caller's), and in every
/// call after [`share_handles`](RetryLayer::share_handles).
///
/// ```
/// use backstop::{
///     BudgetLayer, BudgetPolicy, CircuitBreakerLayer, CircuitBreakerPolicy,
///     IdempotencyKeyLayer, ReplayBody, RetryLayer, RetryPolicy,
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
/// let breakers = CircuitBreakerLayer::new(CircuitBreakerPolicy::default());
/// let budget = BudgetLayer::new(BudgetPolicy::default());
/// let mut client = ServiceBuilder::new()
///     .layer(
///         RetryLayer::new(RetryPolicy::default())
///             .idempotency_key(IdempotencyKeyLayer::new())
///             .circuit_breaker(breakers.clone())
///             .budget(budget.clone()),
///     )
///     .service(transport);
///
/// let req = http::Request::post("http://upstream.test/orders").body(Full::default())?;
/// client.ready().await?.call(req).await?;
/// // The call counted in its origin's account and breaker.
/// assert_eq!((budget.origins(), breakers.origins()), (1, 1));
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RetryLayer {
    routes: Arc<Routes>,
    guard: Option<Arc<Guard>>,
}

impl RetryLayer {
    /// A layer with one policy for every call.
    pub fn new(policy: RetryPolicy) -> Self {
        RetryLayer::with_routes(Routes::new(policy))
    }

    /// A layer with policies by route.
    pub fn with_routes(routes: Routes) -> Self {
        RetryLayer {
            routes: Arc::new(routes),
            guard: None,
        }
    }

    fn guard_mut(&mut self) -> &mut Guard {
        Arc::make_mut(self.guard.get_or_insert_with(Default::default))
    }

    /// Stamps each call's idempotency key as `keys` would outside this layer (see
    /// [`idempotency_key`](crate::idempotency_key)): once per call, before the
    /// breaker is asked. See [one layer for the whole
    /// guard](RetryLayer#one-layer-for-the-whole-guard).
    pub fn idempotency_key(mut self, keys: IdempotencyKeyLayer) -> Self {
        self.guard_mut().key = Some(keys);
        self
    }

    /// Guards each call with `breakers` as a [`CircuitBreakerLayer`] outside this
    /// layer would (see [`circuit_breaker`](crate::circuit_breaker)): a call to an
    /// origin whose breaker is open is refused before anything is sent, retries
    /// ask the breaker, and the breaker records each call's final outcome. See [one
    /// layer for the whole guard](RetryLayer#one-layer-for-the-whole-guard).
    pub fn circuit_breaker(mut self, breakers: CircuitBreakerLayer) -> Self {
        self.guard_mut().breaker = Some(breakers);
        self
    }

    /// Counts each call in its origin's account of `budget`, as a [`BudgetLayer`]
    /// outside this layer would (see [`budget`](crate::budget)): retries withdraw
    /// from it, and a paused origin holds (or refuses) the call's first attempt.
    /// See [one layer for the whole
    /// guard](RetryLayer#one-layer-for-the-whole-guard).
    pub fn budget(mut self, budget: BudgetLayer) -> Self {
        self.guard_mut().budget = Some(budget);
        self
    }

    /// Leaves the breaker and the budget given to this layer, and the keyed mark of
    /// a call whose key it stamped, in every call's
    /// [context](crate::policy::CallContext), for the layers beneath that read them:
    /// a [`HedgeLayer`](crate::HedgeLayer) spends its hedges from the budget, asks
    /// the breaker, and hedges a keyed call. Without it they go only into a context
    /// the call already carries, which saves the success path an insert into the
    /// extensions.
    pub fn share_handles(mut self) -> Self {
        self.guard_mut().hand_down = true;
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
        Retry::from_routes(inner, self.routes.clone()).guarded(self.guard.clone())
    }
}
