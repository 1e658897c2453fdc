use tower_layer::Layer;

use super::{CapturesConnection, ProgressTracking};

/// Applies [`ProgressTracking`] around a hyper-util legacy `Client`.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProgressTrackingLayer {
    _priv: (),
}

impl ProgressTrackingLayer {
    /// A progress-tracking layer.
    pub fn new() -> Self {
        ProgressTrackingLayer { _priv: () }
    }
}

/// Only around a transport that fills hyper-util's connection capture: a layer
/// between it and the client (tower-http's `TraceLayer`, say) goes above it, where
/// it sees each attempt as well.
impl<S: CapturesConnection> Layer<S> for ProgressTrackingLayer {
    type Service = ProgressTracking<S>;

    fn layer(&self, inner: S) -> ProgressTracking<S> {
        ProgressTracking::new(inner)
    }
}
