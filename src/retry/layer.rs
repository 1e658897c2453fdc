use std::sync::Arc;

use tower_layer::Layer;

use super::{Retry, Routes};
use crate::policy::RetryPolicy;

/// Applies [`Retry`] to a service: re-sends a request when that is safe and
/// worthwhile.
///
/// Clones share the policies.
#[derive(Clone, Debug)]
pub struct RetryLayer {
    routes: Arc<Routes>,
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
        }
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
        Retry::from_routes(inner, self.routes.clone())
    }
}
