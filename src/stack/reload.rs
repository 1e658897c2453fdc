//! A stack whose routes and policies change while it runs.

use std::fmt;
use std::sync::Arc;

use super::{BackstopLayer, HedgeMode};
use crate::policy::{InvalidConfig, Rules};
use crate::retry::route::LiveRoutes;
use crate::retry::Routes;

/// Swaps the routes (each route's retry policy and hedging, and the default's) of
/// a [reloadable](BackstopLayer::reloadable) stack, in every service it made and
/// will make, at once.
///
/// A call reads the table when it starts and keeps what it picked to its end: the
/// calls in flight finish under the policies they started with. Breakers, budget
/// accounts and latency estimates are kept; the stack's
/// [rules](super::BackstopBuilder::rules) decide for the new routes as for the old.
///
/// # Examples
///
/// ```
/// use backstop::retry::{Route, Routes};
/// use backstop::{Backstop, RetryPolicy};
///
/// let layer = Backstop::builder().build()?.reloadable();
/// let reload = layer.reload_handle().expect("a reloadable layer");
/// let req = http::Request::post("http://api.test/payments").body(())?;
/// assert_eq!(reload.routes().policy_for(&req).max_attempts(), 3);
///
/// // From now on payments are sent once, by every service of the layer.
/// reload.swap(Routes::new(RetryPolicy::default())
///     .route(Route::path_prefix("/payments"), RetryPolicy::none()))?;
/// assert_eq!(reload.routes().policy_for(&req).max_attempts(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct ReloadHandle {
    live: Arc<LiveRoutes>,
    rules: Option<Rules>,
    hedges: bool,
}

impl ReloadHandle {
    /// The routes every call that starts now picks its policy from.
    pub fn routes(&self) -> Arc<Routes> {
        self.live.current()
    }

    /// Puts `routes` in place for every call that starts from now on.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] when a route hedges and the stack has no hedge layer; the
    /// routes in place stay.
    pub fn swap(&self, routes: Routes) -> Result<(), InvalidConfig> {
        let routes = match &self.rules {
            Some(rules) => routes.with_rules(rules),
            None => routes,
        };
        if routes.hedges() && !self.hedges {
            return Err(InvalidConfig::new(
                "routes",
                "a route hedges, and the stack has no hedge layer: reload it with one \
                 (build the stack with a hedge policy)"
                    .to_owned(),
            ));
        }
        self.live.swap(routes);
        Ok(())
    }
}

impl fmt::Debug for ReloadHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReloadHandle")
            .field("routes", &self.live.current())
            .finish_non_exhaustive()
    }
}

impl<H: HedgeMode> BackstopLayer<H> {
    /// This layer with routes that a [`ReloadHandle`] swaps while it runs (see
    /// [`reload_handle`](BackstopLayer::reload_handle)), in every service it makes.
    ///
    /// Each call then reads the table once more when it starts (a lock taken for
    /// reading and a reference count); a layer that is not reloadable does not.
    pub fn reloadable(mut self) -> Self {
        let (retry, _) = self.retry.live();
        self.retry = retry;
        self
    }

    /// The handle that swaps this layer's routes, if it is
    /// [reloadable](BackstopLayer::reloadable).
    pub fn reload_handle(&self) -> Option<ReloadHandle> {
        let live = self.retry.settings.live.clone()?;
        Some(ReloadHandle {
            live,
            rules: self.rules.clone(),
            hedges: self.hedge.hedges(),
        })
    }
}
