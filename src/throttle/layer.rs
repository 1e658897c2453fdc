use std::fmt;
use std::sync::Arc;

use http::request::Parts;
use tower_layer::Layer;

use super::{Throttle, ThrottlePolicy};
use crate::admit::Admission;

/// Applies [`Throttle`] to a service: sheds calls to an origin that rejects them
/// for overload, and counts one outcome per call.
///
/// Clones of the layer, and every service it makes, share the origins' windows.
#[derive(Clone)]
pub struct ThrottleLayer {
    pub(crate) admission: Arc<Admission>,
}

impl ThrottleLayer {
    /// A layer with these settings; each origin's window is created as its first
    /// call arrives.
    pub fn new(policy: ThrottlePolicy) -> Self {
        // The throttle's part of admission alone; it has no handle to hand down.
        let admission = Admission::new(None, None, None, Some(policy), false);
        ThrottleLayer {
            admission: Arc::new(admission),
        }
    }

    /// The settings the layer applies.
    pub fn policy(&self) -> &ThrottlePolicy {
        match self.admission.throttle() {
            Some(policy) => policy,
            None => unreachable!("a throttle layer's admission has a throttle"),
        }
    }

    /// The probability that a call with this request head is shed now: its
    /// origin's window as it stands (created, empty, if it is new).
    pub fn probability(&self, head: &Parts) -> f64 {
        self.admission.throttle_probability(head).unwrap_or(0.0)
    }

    /// How many origins the layer (with its clones and services) keeps a window
    /// for now, after forgetting those unused for a window. Counting sweeps under
    /// a lock the calls share, so it suits a metrics scrape, not every call.
    pub fn origins(&self) -> usize {
        self.admission.origins()
    }

    pub(super) fn wrap<S>(&self, inner: S) -> Throttle<S> {
        Throttle {
            inner,
            admission: self.admission.clone(),
        }
    }
}

impl<S> Layer<S> for ThrottleLayer {
    type Service = Throttle<S>;

    fn layer(&self, inner: S) -> Throttle<S> {
        self.wrap(inner)
    }
}

impl fmt::Debug for ThrottleLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let policy = self.policy();
        f.debug_struct("ThrottleLayer")
            .field("policy", policy)
            .finish()
    }
}
