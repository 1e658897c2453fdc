use std::sync::Arc;

use tower_layer::Layer;

use super::RetryPolicy;
use super::{Retry, Routes, Settings};
use crate::admit::Admission;

/// Applies [`Retry`] to a service: re-sends a request when that is safe and
/// worthwhile.
///
/// Clones share the policies.
///
/// The [`Backstop`](crate::Backstop) stack runs the key's, the breaker's and the
/// budget's work (admission) inside this layer's own future; a `RetryLayer` alone
/// has none, and reads the handles the separate layers above it leave in the call's
/// [context](crate::policy::CallContext).
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

    /// This layer with `policy` for every call instead of its own.
    ///
    /// # Examples
    ///
    /// ```
    /// use backstop::{RetryLayer, RetryPolicy};
    ///
    /// let writes = RetryLayer::new(RetryPolicy::default());
    /// let reads = writes.clone().policy(RetryPolicy::builder().max_attempts(5).build()?);
    /// # let _ = reads;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn policy(self, policy: RetryPolicy) -> Self {
        self.routes(Routes::new(policy))
    }

    /// This layer with policies by route instead of its own (see
    /// [`policy`](RetryLayer::policy)).
    pub fn routes(mut self, routes: Routes) -> Self {
        Arc::make_mut(&mut self.settings).routes = routes;
        self
    }
}

impl RetryLayer {
    /// This layer running `admission` in its own future, before each call's first
    /// attempt: the stack's retry layer.
    pub(crate) fn admitting(mut self, admission: Admission) -> Self {
        Arc::make_mut(&mut self.settings).admission = Some(admission);
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
