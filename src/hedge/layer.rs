use tower_layer::Layer;

use super::{Hedge, HedgePolicy};

/// Applies [`Hedge`] to a service: sends extra copies of a slow idempotent
/// request and returns the first acceptable answer.
///
/// Clones share the configuration and its latency estimates.
#[derive(Clone, Debug)]
pub struct HedgeLayer {
    hedge: HedgePolicy,
}

impl HedgeLayer {
    /// A layer hedging as `hedge` says.
    pub fn new(hedge: HedgePolicy) -> Self {
        HedgeLayer { hedge }
    }
}

impl Default for HedgeLayer {
    /// [`HedgePolicy::default()`]: after the origin's p95 latency, 100 ms until known.
    fn default() -> Self {
        HedgeLayer::new(HedgePolicy::default())
    }
}

impl<S> Layer<S> for HedgeLayer {
    type Service = Hedge<S>;

    fn layer(&self, inner: S) -> Hedge<S> {
        Hedge::new(inner, self.hedge.clone())
    }
}
