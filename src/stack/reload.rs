//! A stack whose routes and policies change while it runs.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::task::{Context, Poll};

use http::Request;
use tower_layer::Layer;
use tower_service::Service;

use super::{Backstop, BackstopLayer, HedgeMode, NoHedge};
use crate::policy::{InvalidConfig, Rules};
use crate::retry::{Routes, Settings};

/// The current settings (route table and admission) of a reloadable stack, shared
/// by all its services, and how many times they were swapped: a service compares
/// the count it last saw with one atomic load, and takes the lock only after a
/// reload.
#[derive(Debug)]
struct LiveSettings {
    settings: RwLock<Arc<Settings>>,
    generation: AtomicU64,
}

impl LiveSettings {
    fn new(settings: Arc<Settings>) -> Self {
        LiveSettings {
            settings: RwLock::new(settings),
            generation: AtomicU64::new(0),
        }
    }

    fn current(&self) -> Arc<Settings> {
        self.settings
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Makes `settings` the current ones when a reload came after `seen` (the
    /// generation they are of), and `seen` the current generation.
    #[inline]
    fn refresh(&self, settings: &mut Arc<Settings>, seen: &mut u64) {
        let generation = self.generation.load(Ordering::Acquire);
        if generation != *seen {
            self.take(settings, seen, generation);
        }
    }

    #[cold]
    #[inline(never)]
    fn take(&self, settings: &mut Arc<Settings>, seen: &mut u64, generation: u64) {
        *settings = self.current();
        *seen = generation;
    }
}

/// Swaps the routes (each route's retry policy and hedging, and the default's) of
/// a [reloadable](BackstopLayer::reloadable) stack, in every service it made and
/// will make, at once.
///
/// A call takes the table when it starts and keeps what it picked to its end: the
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
/// let reload = layer.reload_handle();
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
    live: Arc<LiveSettings>,
    rules: Option<Rules>,
    hedges: bool,
}

impl ReloadHandle {
    /// The routes every call that starts now picks its policy from.
    pub fn routes(&self) -> Routes {
        self.live.current().routes.clone()
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
        let mut lock = self
            .live
            .settings
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        // The admission stays: breakers and accounts are kept.
        let mut settings = Settings::clone(&lock);
        settings.routes = routes;
        *lock = Arc::new(settings);
        // Counted under the lock: a service that sees the new count reads these
        // settings or later ones.
        self.live.generation.fetch_add(1, Ordering::Release);
        Ok(())
    }
}

impl fmt::Debug for ReloadHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReloadHandle")
            .field("routes", &self.live.current().routes)
            .finish_non_exhaustive()
    }
}

impl<H: HedgeMode> BackstopLayer<H> {
    /// This layer with routes that its [`ReloadHandle`] swaps while it runs, in
    /// every service it makes ([`Reloadable`]).
    ///
    /// A call through a reloadable stack checks, when it starts, whether a reload
    /// came (one atomic load; the settings are read under a lock only after one);
    /// a stack that is not reloadable pays nothing for reloads.
    pub fn reloadable(self) -> ReloadableLayer<H> {
        let live = Arc::new(LiveSettings::new(self.retry.settings.clone()));
        ReloadableLayer { layer: self, live }
    }
}

/// A [`BackstopLayer`] whose routes a [`ReloadHandle`] swaps while it runs; see
/// [`BackstopLayer::reloadable`].
#[derive(Clone)]
pub struct ReloadableLayer<H: HedgeMode = NoHedge> {
    layer: BackstopLayer<H>,
    live: Arc<LiveSettings>,
}

impl<H: HedgeMode> ReloadableLayer<H> {
    /// The handle that swaps the routes of this layer's services.
    pub fn reload_handle(&self) -> ReloadHandle {
        ReloadHandle {
            live: self.live.clone(),
            rules: self.layer.rules.clone(),
            hedges: self.layer.hedge.hedges(),
        }
    }

    /// The stack's layer as it was built (its services do not follow reloads).
    pub fn get_ref(&self) -> &BackstopLayer<H> {
        &self.layer
    }
}

impl<S, H: HedgeMode> Layer<S> for ReloadableLayer<H> {
    type Service = Reloadable<S, H>;

    fn layer(&self, inner: S) -> Reloadable<S, H> {
        let mut stack = self.layer.layer(inner);
        // The settings in place now, whatever the layer was built with.
        let mut seen = u64::MAX;
        self.live.refresh(stack.inner.settings_mut(), &mut seen);
        Reloadable {
            stack,
            live: self.live.clone(),
            seen,
        }
    }
}

impl<H: HedgeMode + fmt::Debug> fmt::Debug for ReloadableLayer<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReloadableLayer")
            .field("layer", &self.layer)
            .finish_non_exhaustive()
    }
}

/// The [`Backstop`] stack, taking the routes in place when each call starts; see
/// [`BackstopLayer::reloadable`].
pub struct Reloadable<S, H: HedgeMode = NoHedge> {
    stack: Backstop<S, H>,
    live: Arc<LiveSettings>,
    /// The generation of the settings the stack holds.
    seen: u64,
}

impl<S, H: HedgeMode> Reloadable<S, H> {
    /// The stack, with the routes of its last call.
    pub fn get_ref(&self) -> &Backstop<S, H> {
        &self.stack
    }

    /// The transport.
    pub fn into_inner(self) -> S {
        self.stack.into_inner()
    }
}

impl<S, H> Clone for Reloadable<S, H>
where
    H: HedgeMode,
    Backstop<S, H>: Clone,
{
    fn clone(&self) -> Self {
        Reloadable {
            stack: self.stack.clone(),
            live: self.live.clone(),
            seen: self.seen,
        }
    }
}

impl<S, H> fmt::Debug for Reloadable<S, H>
where
    H: HedgeMode,
    Backstop<S, H>: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reloadable")
            .field("stack", &self.stack)
            .finish_non_exhaustive()
    }
}

impl<S, H, B> Service<Request<B>> for Reloadable<S, H>
where
    H: HedgeMode,
    Backstop<S, H>: Service<Request<B>>,
{
    type Response = <Backstop<S, H> as Service<Request<B>>>::Response;
    type Error = <Backstop<S, H> as Service<Request<B>>>::Error;
    type Future = <Backstop<S, H> as Service<Request<B>>>::Future;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.stack.poll_ready(cx)
    }

    #[inline]
    fn call(&mut self, req: Request<B>) -> Self::Future {
        // The call starts under the settings in place now, and keeps the policy it
        // picks from them.
        self.live
            .refresh(self.stack.inner.settings_mut(), &mut self.seen);
        self.stack.call(req)
    }
}
