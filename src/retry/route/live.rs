//! A route table that can be swapped while the service runs: each call reads the
//! table once, when it starts, and keeps the policy it picked from it.

use std::sync::{Arc, PoisonError, RwLock};

use super::Routes;

/// The current route table of a reloadable stack, shared by all its services.
#[derive(Debug)]
pub(crate) struct LiveRoutes(RwLock<Arc<Routes>>);

impl LiveRoutes {
    pub(crate) fn new(routes: Routes) -> Self {
        LiveRoutes(RwLock::new(Arc::new(routes)))
    }

    /// The table now: a call keeps it (or what it picked from it) to its end.
    #[inline]
    pub(crate) fn current(&self) -> Arc<Routes> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Puts `routes` in place for every call that starts from now on; the calls
    /// in flight keep the table they started with.
    pub(crate) fn swap(&self, routes: Routes) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(routes);
    }
}
