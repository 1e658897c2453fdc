//! Policies per route, for gateways: one table for retries and hedging.

use std::sync::Arc;

use http::{Extensions, Request};

use super::RetryPolicy;
use crate::hedge::{HedgeChoice, HedgePolicy};
use crate::policy::{CallContext, InvalidConfig, Rules};

mod matches;
pub use matches::{PathMatch, Route};

/// What a route does: its retry policy, and whether and how its calls are hedged.
///
/// | made with | retries | hedging (in a [`HedgeLayer`](crate::HedgeLayer) beneath) |
/// |---|---|---|
/// | [`RoutePolicy::new(retry)`](RoutePolicy::new), or a bare [`RetryPolicy`] | as `retry` says | as the hedge layer's own policy says |
/// | [`.hedge(policy)`](RoutePolicy::hedge) | as `retry` says | as `policy` says: its own delay, copies and methods |
/// | [`.no_hedging()`](RoutePolicy::no_hedging) | as `retry` says | never |
/// | a `retry` that allows one attempt ([`RetryPolicy::none()`]) | never | never: a hedge would be a second send |
///
/// The last row holds for every call whose policy allows one attempt, a policy
/// given in the request's extensions included: "never retry" means the request
/// is sent once.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use backstop::retry::RoutePolicy;
/// use backstop::{HedgePolicy, RetryPolicy};
///
/// // Retried, and hedged after 40 ms instead of the hedge layer's own delay.
/// let catalog = RoutePolicy::new(RetryPolicy::default())
///     .hedge(HedgePolicy::after(Duration::from_millis(40)))?;
/// assert!(catalog.hedging().unwrap().policy().is_some());
///
/// // Retried, never hedged.
/// let reports = RoutePolicy::new(RetryPolicy::default()).no_hedging();
/// assert!(reports.hedging().unwrap().is_off());
///
/// // Sent once: neither retried nor hedged, and asking for a hedge is refused.
/// let payments = RoutePolicy::new(RetryPolicy::none());
/// assert!(payments.hedging().unwrap().is_off());
/// assert!(RoutePolicy::new(RetryPolicy::none())
///     .hedge(HedgePolicy::after(Duration::from_millis(40)))
///     .is_err());
/// # Ok::<(), backstop::policy::InvalidConfig>(())
/// ```
#[derive(Clone, Debug)]
pub struct RoutePolicy {
    retry: Arc<RetryPolicy>,
    /// `None`: as the hedge layer's own policy says.
    hedge: Option<Arc<HedgeChoice>>,
}

/// "Never hedged", shared by every call that is sent once.
fn off() -> Arc<HedgeChoice> {
    static OFF: std::sync::LazyLock<Arc<HedgeChoice>> =
        std::sync::LazyLock::new(|| Arc::new(HedgeChoice::Off));
    OFF.clone()
}

impl RoutePolicy {
    /// Retries as `retry` says; hedging as the hedge layer's own policy says, unless
    /// `retry` allows one attempt (then never).
    pub fn new(retry: RetryPolicy) -> Self {
        let hedge = (retry.max_attempts() <= 1).then(off);
        RoutePolicy {
            retry: Arc::new(retry),
            hedge,
        }
    }

    /// Hedges the route's calls as `hedge` says, instead of the hedge layer's own
    /// policy.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] (setting `hedge`) when the retry policy allows one
    /// attempt: a hedge would send the request a second time.
    pub fn hedge(mut self, hedge: HedgePolicy) -> Result<Self, InvalidConfig> {
        if self.retry.max_attempts() <= 1 {
            return Err(InvalidConfig::new(
                "hedge",
                "the route's retry policy allows one attempt, and a hedge would be a second; \
                 allow more attempts or leave the route unhedged"
                    .to_owned(),
            ));
        }
        self.hedge = Some(Arc::new(HedgeChoice::With(hedge)));
        Ok(self)
    }

    /// Never hedges the route's calls, whatever the hedge layer's own policy says.
    pub fn no_hedging(mut self) -> Self {
        self.hedge = Some(off());
        self
    }

    /// The route's retry policy.
    pub fn retry_policy(&self) -> &RetryPolicy {
        &self.retry
    }

    /// The route's hedging; `None` when it is the hedge layer's own.
    pub fn hedging(&self) -> Option<&HedgeChoice> {
        self.hedge.as_deref()
    }
}

impl RoutePolicy {
    /// This route's policies deciding by `rules`: its retry policy, and its own
    /// hedging when it has one.
    pub(crate) fn with_rules(self, rules: &Rules) -> Self {
        let retry = Arc::new((*self.retry).clone().with_rules(rules.clone()));
        let hedge = self.hedge.map(|choice| match &*choice {
            HedgeChoice::With(hedge) => {
                Arc::new(HedgeChoice::With(hedge.clone().with_rules(rules.clone())))
            }
            HedgeChoice::Off => choice,
        });
        RoutePolicy { retry, hedge }
    }
}

impl From<RetryPolicy> for RoutePolicy {
    /// [`RoutePolicy::new`].
    fn from(retry: RetryPolicy) -> Self {
        RoutePolicy::new(retry)
    }
}

/// Policies by route, in one place: the first route that matches a request gives
/// its retry policy and its hedging ([`RoutePolicy`]), else the default does.
///
/// The retry layer picks the route when a call starts. It runs the call under the
/// route's retry policy, and leaves the route's name and hedging in the call's
/// [`CallContext`], where a [`HedgeLayer`](crate::HedgeLayer) beneath reads them:
/// the hedge layer needs no table of its own, and knows nothing of the retry layer.
///
/// A [`RetryPolicy`] in a request's extensions overrides the route's retry policy
/// for that call (its name and hedging still apply, and a policy of one attempt
/// still means no hedge); a name or a [`HedgeChoice`] already in the call's context
/// is kept.
///
/// # Examples
///
/// A gateway's table: payments sent once, the catalog retried and hedged, orders
/// (keyed POSTs) retried and never hedged, everything else as the layers say.
///
/// ```
/// use std::time::Duration;
/// use backstop::retry::{Route, RoutePolicy, Routes};
/// use backstop::{HedgeLayer, HedgePolicy, RetryLayer, RetryPolicy};
/// use http::Method;
///
/// let routes = Routes::new(RetryPolicy::default())
///     // Never repeat a payment, whatever its method: no retry, no hedge.
///     .route(Route::path_prefix("/payments").named("payments"), RetryPolicy::none())
///     // Reads of the catalog try harder, and are hedged after 30 ms.
///     .route(
///         Route::path_prefix("/catalog").method(Method::GET).named("catalog"),
///         RoutePolicy::new(RetryPolicy::builder().max_attempts(4).build()?)
///             .hedge(HedgePolicy::after(Duration::from_millis(30)))?,
///     )
///     // Orders carry an idempotency key: retried, never hedged.
///     .route(
///         Route::path_prefix("/orders").method(Method::POST).named("orders"),
///         RoutePolicy::new(RetryPolicy::default()).no_hedging(),
///     );
///
/// let req = http::Request::get("http://shop.test/catalog/42").body(()).unwrap();
/// assert_eq!(routes.route_for(&req).and_then(|r| r.name()), Some("catalog"));
/// assert_eq!(routes.policy_for(&req).max_attempts(), 4);
///
/// // The retry layer picks the route; the hedge layer beneath follows it.
/// let stack = tower::ServiceBuilder::new()
///     .layer(RetryLayer::with_routes(routes))
///     .layer(HedgeLayer::new(HedgePolicy::after(Duration::from_millis(100))));
/// # let _ = stack;
/// # Ok::<(), backstop::policy::InvalidConfig>(())
/// ```
#[derive(Clone, Debug)]
pub struct Routes {
    default: RoutePolicy,
    routes: Vec<(Route, RoutePolicy)>,
}

impl Routes {
    /// Every route's policies (and the default's) deciding by `rules`.
    pub(crate) fn with_rules(self, rules: &Rules) -> Self {
        Routes {
            default: self.default.with_rules(rules),
            routes: self
                .routes
                .into_iter()
                .map(|(route, policy)| (route, policy.with_rules(rules)))
                .collect(),
        }
    }

    /// The same routes, each that chooses no hedging of its own (and the default)
    /// never hedged: for a hedge layer that only the routes that chose it use.
    #[cfg(feature = "reqwest-middleware")]
    pub(crate) fn unhedged_unless_chosen(self) -> Self {
        let unless_chosen = |mut policy: RoutePolicy| {
            policy.hedge.get_or_insert_with(off);
            policy
        };
        Routes {
            default: unless_chosen(self.default),
            routes: self
                .routes
                .into_iter()
                .map(|(route, policy)| (route, unless_chosen(policy)))
                .collect(),
        }
    }

    /// Whether any route (or the default) chooses hedging of its own.
    pub(crate) fn hedges(&self) -> bool {
        std::iter::once(&self.default)
            .chain(self.routes.iter().map(|(_, p)| p))
            .any(|p| p.hedging().is_some_and(|h| !h.is_off()))
    }
}

impl Routes {
    /// Routes with `default` (a [`RetryPolicy`] or a [`RoutePolicy`]) for every
    /// request no route covers.
    pub fn new(default: impl Into<RoutePolicy>) -> Self {
        Routes {
            default: default.into(),
            routes: Vec::new(),
        }
    }

    /// Adds a route with its policy (a [`RetryPolicy`] or a [`RoutePolicy`]); routes
    /// are tried in the order they were added.
    pub fn route(mut self, route: Route, policy: impl Into<RoutePolicy>) -> Self {
        self.routes.push((route, policy.into()));
        self
    }

    /// The policy for every request no route covers.
    pub fn default_policy(&self) -> &RoutePolicy {
        &self.default
    }

    /// The routes with their policies, in the order they are tried.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&Route, &RoutePolicy)> {
        self.routes.iter().map(|(route, policy)| (route, policy))
    }

    /// The first route that covers `req`; `None` when the default applies.
    pub fn route_for<B>(&self, req: &Request<B>) -> Option<&Route> {
        self.pick(req).0
    }

    /// The route policy for `req`: the first matching route's, or the default.
    pub fn route_policy_for<B>(&self, req: &Request<B>) -> &RoutePolicy {
        self.pick(req).1
    }

    /// The retry policy for `req`.
    #[inline]
    pub fn policy_for<B>(&self, req: &Request<B>) -> &Arc<RetryPolicy> {
        &self.pick(req).1.retry
    }

    #[inline]
    fn pick<B>(&self, req: &Request<B>) -> (Option<&Route>, &RoutePolicy) {
        self.routes
            .iter()
            .find(|(route, _)| route.matches(req))
            .map_or((None, &self.default), |(route, policy)| {
                (Some(route), policy)
            })
    }

    /// Picks the route of a call: its retry policy (unless `given` overrides it),
    /// with its name and hedging left in the call's context.
    #[inline(always)]
    pub(crate) fn choose<B>(
        &self,
        req: &mut Request<B>,
        given: Option<RetryPolicy>,
    ) -> Arc<RetryPolicy> {
        let (route, chosen) = self.pick(req);
        let name = route.and_then(Route::shared_name);
        let policy = given.map_or_else(|| chosen.retry.clone(), Arc::new);
        // One attempt means one send, whatever the route says of hedging.
        let hedge = match (policy.max_attempts() <= 1, &chosen.hedge) {
            (true, _) => Some(off()),
            (false, hedge) => hedge.clone(),
        };
        if name.is_some() || hedge.is_some() {
            tell(req.extensions_mut(), name, hedge);
        }
        policy
    }
}

/// Leaves a route's name and hedging in the call's context, keeping what the caller
/// put there already (but a single attempt is never hedged).
fn tell(ext: &mut Extensions, name: Option<&Arc<str>>, hedge: Option<Arc<HedgeChoice>>) {
    let context = CallContext::of_mut(ext);
    if let Some(name) = name.filter(|_| context.route().is_none()) {
        context.set_route(name.clone());
    }
    match hedge {
        Some(hedge) if hedge.is_off() || context.hedge().is_none() => context.share_hedge(hedge),
        _ => {}
    }
}

#[cfg(test)]
mod tests;
