//! The stack's builder and layer.

use std::fmt;
use std::sync::Arc;

use tower_layer::Layer;

use super::{Backstop, HedgeMode, NoHedge, WithHedge};
use crate::admit::breaker::CircuitBreakerPolicy;
use crate::admit::budget::BudgetPolicy;
use crate::admit::throttle::ThrottlePolicy;
use crate::admit::Admission;
use crate::hedge::HedgePolicy;
use crate::idempotency_key::IdempotencyKeyLayer;
use crate::observe::Observer;
use crate::policy::{InvalidConfig, Rules};
use crate::retry::RetryPolicy;
use crate::retry::{RetryLayer, Routes};

/// Builds a [`BackstopLayer`]: every policy of the stack, given once. See
/// [`Backstop::builder`] and the [module docs](super).
///
/// Each setter sets one thing; [`build`](BackstopBuilder::build) checks the
/// combination, so the result does not depend on the order of the calls.
///
/// `H` says whether the stack hedges: [`NoHedge`] until
/// [`hedge`](BackstopBuilder::hedge) is called, [`WithHedge`] after.
///
/// # Examples
///
/// Every setter that combines with the others, once (`retry`, `no_budget` and
/// `shared_observer` are alternatives to `routes`, `budget` and `observer`):
///
/// ```
/// use std::time::Duration;
/// use backstop::observe::Event;
/// use backstop::policy::Rules;
/// use backstop::retry::{Route, RoutePolicy, Routes};
/// use backstop::{
///     Backstop, BudgetPolicy, CircuitBreakerPolicy, HedgePolicy, IdempotencyKeyLayer,
///     RetryPolicy, ThrottlePolicy,
/// };
///
/// // Payments are retried once more, within 2 s; everything else by the default.
/// let payments = RetryPolicy::builder()
///     .max_attempts(4)
///     .timeout(Duration::from_secs(2))
///     .build()?;
/// let routes = Routes::new(RetryPolicy::default())
///     .route(Route::path_prefix("/pay"), RoutePolicy::new(payments));
/// let layer = Backstop::builder()
///     .routes(routes)
///     .hedge(HedgePolicy::after(Duration::from_millis(50)))
///     .budget(BudgetPolicy::default())
///     .circuit_breaker(CircuitBreakerPolicy::default())
///     .throttle(ThrottlePolicy::default())
///     .idempotency_key(IdempotencyKeyLayer::new())
///     .rules(Rules::default())
///     .observer(|event: &Event<'_>| tracing::debug!(?event, "backstop"))
///     .build()?;
/// # let _ = layer;
/// # Ok::<(), backstop::policy::InvalidConfig>(())
/// ```
#[derive(Clone, Default)]
#[must_use]
pub struct BackstopBuilder<H: HedgeMode = NoHedge> {
    retry: Option<RetryPolicy>,
    routes: Option<Routes>,
    hedge: H,
    budget: Option<BudgetPolicy>,
    no_budget: bool,
    breaker: Option<CircuitBreakerPolicy>,
    throttle: Option<ThrottlePolicy>,
    key: Option<IdempotencyKeyLayer>,
    rules: Option<Rules>,
    observer: Option<Arc<dyn Observer>>,
    shared: Shared,
}

/// The parts of admission whose state is a standalone layer's (`circuit_breaker_of`,
/// `budget_of`, `throttle_of`).
#[derive(Clone, Default)]
struct Shared {
    breaker: Option<Arc<Admission>>,
    budget: Option<Arc<Admission>>,
    throttle: Option<Arc<Admission>>,
}

impl<H: HedgeMode> BackstopBuilder<H> {
    /// The retry policy of every call (default [`RetryPolicy::default()`]). Give
    /// either this or [`routes`](BackstopBuilder::routes).
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = Some(policy);
        self
    }

    /// Policies by route: each route picks its retry policy and its hedging
    /// together. Give either this or [`retry`](BackstopBuilder::retry).
    pub fn routes(mut self, routes: Routes) -> Self {
        self.routes = Some(routes);
        self
    }

    /// Hedges slow idempotent (or keyed) calls as `policy` says; a route's own
    /// hedging (or its `no_hedging()`) wins for its calls. Every hedge spends the
    /// call's budget and asks its breaker. A stack without it has no hedge layer,
    /// refuses routes that hedge, and hands no budget or breaker to a `HedgeLayer`
    /// composed beneath it by hand (unless the call carries a context already).
    pub fn hedge(self, policy: HedgePolicy) -> BackstopBuilder<WithHedge> {
        BackstopBuilder {
            retry: self.retry,
            routes: self.routes,
            hedge: WithHedge { policy },
            budget: self.budget,
            no_budget: self.no_budget,
            breaker: self.breaker,
            throttle: self.throttle,
            key: self.key,
            rules: self.rules,
            observer: self.observer,
            shared: self.shared,
        }
    }

    /// The retry budget of each origin (default [`BudgetPolicy::default()`]: 20 % of
    /// first attempts plus 10 retries a second, over 10 s). Retries and hedges
    /// spend it; a paused origin holds (or refuses) a call's first attempt.
    pub fn budget(mut self, policy: BudgetPolicy) -> Self {
        self.budget = Some(policy);
        self
    }

    /// No retry budget: retries are limited by the retry policy alone, and no
    /// origin is paused by a server's `Retry-After`. Giving both this and
    /// [`budget`](BackstopBuilder::budget) is refused by [`build`](BackstopBuilder::build).
    pub fn no_budget(mut self) -> Self {
        self.no_budget = true;
        self
    }

    /// A circuit breaker per origin (none by default): a call to an origin whose
    /// breaker is open is refused before anything is sent, and retries and hedges
    /// ask it.
    pub fn circuit_breaker(mut self, policy: CircuitBreakerPolicy) -> Self {
        self.breaker = Some(policy);
        self
    }

    /// Adaptive throttling per origin (none by default): a call to an origin that
    /// has been rejecting calls for overload is shed locally, before its first
    /// attempt, with the probability of the SRE book's formula (see
    /// [`ThrottlePolicy`]). The breaker decides first, then the throttle, then
    /// the budget.
    pub fn throttle(mut self, policy: ThrottlePolicy) -> Self {
        self.throttle = Some(policy);
        self
    }

    /// Stamps an idempotency key on each call `keys` covers (none by default: only
    /// against a server that honours keys; see
    /// [`idempotency_key`](crate::idempotency_key)).
    pub fn idempotency_key(mut self, keys: IdempotencyKeyLayer) -> Self {
        self.key = Some(keys);
        self
    }

    /// The rules that decide for every policy in the stack: the retry policy (and
    /// each route's), the hedge policy (and each route's) and the breaker. They
    /// replace the rules those policies were built with, so a rule (gRPC's, or a
    /// classifier of your own) is given once.
    pub fn rules(mut self, rules: Rules) -> Self {
        self.rules = Some(rules);
        self
    }

    /// Tells `observer` what the stack decides for each call (see
    /// [`observe`](crate::observe)); an observer a call carries in its context wins.
    pub fn observer(self, observer: impl Observer) -> Self {
        self.shared_observer(Arc::new(observer))
    }

    /// [`observer`](BackstopBuilder::observer), for an observer you keep a handle
    /// on (the metrics you also read, or one shared by several stacks).
    pub fn shared_observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = Some(observer);
        self
    }

    #[cfg(feature = "reqwest-middleware")]
    /// The breakers of `layer` instead of a breaker of the stack's own: calls
    /// through the stack and through the layer (or its clones, or other stacks given
    /// it) count in the same breakers. Its settings and rules are the layer's: the
    /// stack's [`rules`](BackstopBuilder::rules) do not reach it (the reqwest
    /// adapter builds the layer of a breaker of its own with them).
    ///
    /// Crate-private: it keeps the reqwest adapter's `with_circuit_breaker_layer`.
    pub(crate) fn circuit_breaker_of(mut self, layer: &crate::CircuitBreakerLayer) -> Self {
        self.shared.breaker = Some(layer.admission.clone());
        self
    }

    #[cfg(feature = "reqwest-middleware")]
    /// The accounts of `layer` instead of a budget of the stack's own: calls through
    /// the stack and through the layer (or its clones, or other stacks given it)
    /// spend from the same accounts.
    ///
    /// Crate-private: it keeps the reqwest adapter's `with_budget_layer`.
    pub(crate) fn budget_of(mut self, layer: &crate::BudgetLayer) -> Self {
        self.shared.budget = Some(layer.admission.clone());
        self
    }

    #[cfg(feature = "reqwest-middleware")]
    /// The throttles of `layer` instead of a throttle of the stack's own: calls
    /// through the stack and through the layer (or its clones, or other stacks
    /// given it) count in the same windows.
    ///
    /// Crate-private: it keeps the reqwest adapter's `with_throttle_layer`.
    pub(crate) fn throttle_of(mut self, layer: &crate::ThrottleLayer) -> Self {
        self.shared.throttle = Some(layer.admission.clone());
        self
    }

    /// The stack's layer.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] when both [`retry`](BackstopBuilder::retry) and
    /// [`routes`](BackstopBuilder::routes) were given, or both
    /// [`budget`](BackstopBuilder::budget) and
    /// [`no_budget`](BackstopBuilder::no_budget), or when a route hedges and the
    /// stack was given no [`hedge`](BackstopBuilder::hedge) policy.
    ///
    /// # Examples
    ///
    /// ```
    /// use backstop::{Backstop, BudgetPolicy};
    ///
    /// // A budget given and turned off is refused, in either order.
    /// let err = Backstop::builder()
    ///     .no_budget()
    ///     .budget(BudgetPolicy::default())
    ///     .build()
    ///     .unwrap_err();
    /// assert_eq!(err.setting(), "budget");
    /// assert!(Backstop::builder().budget(BudgetPolicy::default()).no_budget().build().is_err());
    /// ```
    pub fn build(self) -> Result<BackstopLayer<H>, InvalidConfig> {
        let routes = match (self.retry, self.routes) {
            (Some(_), Some(_)) => {
                return Err(InvalidConfig::new(
                    "routes",
                    "give either one retry policy or routes (whose default is the policy \
                     of the calls no route covers), not both"
                        .to_owned(),
                ))
            }
            (Some(retry), None) => Routes::new(retry),
            (None, Some(routes)) => routes,
            (None, None) => Routes::new(RetryPolicy::default()),
        };
        let budget = match (self.budget, self.no_budget, &self.shared.budget) {
            (Some(_), true, _) => {
                return Err(InvalidConfig::new(
                    "budget",
                    "a budget was given and turned off; give one or the other".to_owned(),
                ))
            }
            (Some(_), _, Some(_)) | (_, true, Some(_)) => {
                return Err(InvalidConfig::new(
                    "budget",
                    "a layer's accounts were given with a budget of the stack's own, or \
                     with no budget; give one or the other"
                        .to_owned(),
                ))
            }
            (budget, true, None) => budget,
            (_, false, Some(_)) => None,
            (budget, false, None) => Some(budget.unwrap_or_default()),
        };
        if self.shared.breaker.is_some() && self.breaker.is_some() {
            return Err(InvalidConfig::new(
                "circuit_breaker",
                "a layer's breakers were given with a breaker of the stack's own; give \
                 one or the other"
                    .to_owned(),
            ));
        }
        let (hedge, breaker) = match &self.rules {
            Some(rules) => (
                self.hedge.with_rules(rules),
                self.breaker.map(|b| b.with_rules(rules.clone())),
            ),
            None => (self.hedge, self.breaker),
        };
        if self.shared.throttle.is_some() && self.throttle.is_some() {
            return Err(InvalidConfig::new(
                "throttle",
                "a layer's throttles were given with a throttle of the stack's own; give \
                 one or the other"
                    .to_owned(),
            ));
        }
        // The hedge layer reads the breaker and the account from the call's context:
        // admission leaves them there whenever a hedge may go.
        let key = self.key.map(|k| k.config());
        let mut admission = Admission::new(key, breaker, budget, self.throttle, false);
        let shared = [
            &self.shared.breaker,
            &self.shared.budget,
            &self.shared.throttle,
        ];
        for shared in shared.into_iter().flatten() {
            admission.adopt(shared);
        }
        let layer = BackstopLayer {
            retry: RetryLayer::default().admitting(admission),
            hedge,
            rules: self.rules,
            observer: self.observer,
        };
        layer.routes(routes)
    }
}

impl<H: HedgeMode + fmt::Debug> fmt::Debug for BackstopBuilder<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BackstopBuilder")
            .field("retry", &self.retry)
            .field("routes", &self.routes)
            .field("hedge", &self.hedge)
            .field("budget", &self.budget)
            .field("no_budget", &self.no_budget)
            .field("breaker", &self.breaker)
            .field("throttle", &self.throttle)
            .field("key", &self.key)
            .field("rules", &self.rules)
            .field("observer", &self.observer.is_some())
            .field("shared_breaker", &self.shared.breaker.is_some())
            .field("shared_budget", &self.shared.budget.is_some())
            .field("shared_throttle", &self.shared.throttle.is_some())
            .finish()
    }
}

/// Applies [`Backstop`] to a transport: the whole stack, configured once by
/// [`Backstop::builder`].
///
/// Clones of the layer, and every service it makes, share the breakers and budget
/// accounts (and the hedge policy's latency estimates).
#[derive(Clone)]
pub struct BackstopLayer<H: HedgeMode = NoHedge> {
    pub(super) retry: RetryLayer,
    pub(super) hedge: H,
    pub(super) rules: Option<Rules>,
    observer: Option<Arc<dyn Observer>>,
}

impl<H: HedgeMode> BackstopLayer<H> {
    /// This layer with `policy` for every call instead of its policies, sharing
    /// the breakers and budget accounts of this one (and of its clones): reads
    /// that retry more, say, from the same budget. The stack's
    /// [rules](BackstopBuilder::rules) decide for it too.
    ///
    /// # Examples
    ///
    /// ```
    /// use backstop::{Backstop, RetryPolicy};
    ///
    /// let writes = Backstop::builder().build()?;
    /// let reads = writes.clone().retry(RetryPolicy::builder().max_attempts(5).build()?);
    /// let head = http::Request::get("http://upstream.test/").body(())?.into_parts().0;
    /// writes.budget_account(&head).unwrap().deposit();
    /// assert_eq!(reads.origins(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn retry(self, policy: RetryPolicy) -> Self {
        match self.routes(Routes::new(policy)) {
            Ok(layer) => layer,
            // One policy for every call chooses no hedging of its own.
            Err(_) => unreachable!("a single retry policy never hedges on its own"),
        }
    }

    /// This layer with policies by route instead of its own, sharing the breakers
    /// and budget accounts (see [`retry`](BackstopLayer::retry)).
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] when a route hedges and the stack has no hedge layer
    /// (it was built without [`hedge`](BackstopBuilder::hedge)).
    pub fn routes(mut self, routes: Routes) -> Result<Self, InvalidConfig> {
        let routes = match &self.rules {
            Some(rules) => routes.with_rules(rules),
            None => routes,
        };
        if routes.hedges() && !self.hedge.hedges() {
            return Err(InvalidConfig::new(
                "routes",
                "a route hedges, and the stack has no hedge layer: give the stack a hedge \
                 policy (`hedge`), which routes may override or turn off"
                    .to_owned(),
            ));
        }
        // The hedge layer reads the breaker and the account from the call's
        // context: admission leaves them there whenever a hedge may go.
        let mut admission = self.admission().clone();
        admission.hand_down_always(self.hedge.hedges());
        self.retry = self.retry.routes(routes).admitting(admission);
        Ok(self)
    }

    #[cfg(feature = "reqwest-middleware")]
    /// The retry policy of a call (its route's, or the stack's), before any policy
    /// the call carries itself.
    pub(crate) fn policy_for<B>(&self, req: &http::Request<B>) -> &RetryPolicy {
        self.retry.settings.routes.policy_for(req)
    }

    super::inspection!(self => self.retry.settings.admission.as_ref());
}

impl<S, H: HedgeMode> Layer<S> for BackstopLayer<H> {
    type Service = Backstop<S, H>;

    fn layer(&self, inner: S) -> Backstop<S, H> {
        Backstop {
            inner: self.retry.layer(self.hedge.over(inner)),
            observer: self.observer.clone(),
        }
    }
}

impl<H: HedgeMode + fmt::Debug> fmt::Debug for BackstopLayer<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BackstopLayer")
            .field("retry", &self.retry)
            .field("hedge", &self.hedge)
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, feature = "reqwest-middleware"))]
mod tests {
    use super::*;
    use crate::policy::circuit::State;
    use crate::{BudgetLayer, CircuitBreakerLayer};
    use http::request::Parts;

    fn head() -> Parts {
        http::Request::get("http://a.test/")
            .body(())
            .unwrap()
            .into_parts()
            .0
    }

    #[tokio::test]
    async fn a_stack_given_layers_keeps_their_breakers_and_accounts() {
        let budget = BudgetLayer::new(BudgetPolicy::default());
        let breaker = CircuitBreakerLayer::new(CircuitBreakerPolicy::default());
        let stack = Backstop::builder()
            .budget_of(&budget)
            .circuit_breaker_of(&breaker)
            .build()
            .unwrap();
        // An account the layer made is the stack's, and a withdrawal shows in both.
        let before = budget.account(&head()).available();
        assert_eq!(stack.origins(), 1);
        assert!(stack.budget_account(&head()).unwrap().try_withdraw());
        assert_eq!(budget.account(&head()).available(), before - 1);
        // A breaker the stack made is the layer's.
        assert_eq!(stack.breaker_state(&head()), Some(State::Closed));
        assert_eq!((breaker.origins(), stack.origins()), (1, 2));
    }

    #[test]
    fn a_layer_s_part_and_the_stack_s_own_are_refused_together() {
        let budget = BudgetLayer::new(BudgetPolicy::default());
        let breaker = CircuitBreakerLayer::new(CircuitBreakerPolicy::default());
        let refused = [
            Backstop::builder()
                .budget(BudgetPolicy::default())
                .budget_of(&budget),
            Backstop::builder().no_budget().budget_of(&budget),
            Backstop::builder()
                .circuit_breaker(CircuitBreakerPolicy::default())
                .circuit_breaker_of(&breaker),
            Backstop::builder()
                .throttle(ThrottlePolicy::default())
                .throttle_of(&crate::ThrottleLayer::new(ThrottlePolicy::default())),
        ];
        for builder in refused {
            assert!(builder.build().is_err());
        }
    }
}
