use tower_layer::Layer;

use super::{Hedge, Hedging};

/// Applies [`Hedging`] to a service: sends extra copies of a slow idempotent
/// request and returns the first acceptable answer.
///
/// Clones share the configuration and its latency estimates.
#[derive(Clone, Debug)]
pub struct HedgeLayer {
    hedge: Hedge,
}

impl HedgeLayer {
    /// A layer hedging as `hedge` says.
    pub fn new(hedge: Hedge) -> Self {
        HedgeLayer { hedge }
    }
}

impl Default for HedgeLayer {
    /// [`Hedge::default()`]: after the origin's p95 latency, 100 ms until known.
    fn default() -> Self {
        HedgeLayer::new(Hedge::default())
    }
}

impl<S> Layer<S> for HedgeLayer {
    type Service = Hedging<S>;

    fn layer(&self, inner: S) -> Hedging<S> {
        Hedging::new(inner, self.hedge.clone())
    }
}
