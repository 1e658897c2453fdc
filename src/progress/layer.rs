use tower_layer::Layer;

use super::ProgressTracking;

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

impl<S> Layer<S> for ProgressTrackingLayer {
    type Service = ProgressTracking<S>;

    fn layer(&self, inner: S) -> ProgressTracking<S> {
        ProgressTracking::new(inner)
    }
}
