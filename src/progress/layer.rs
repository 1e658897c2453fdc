use tower_layer::Layer;

use super::ProgressTracking;

/// Applies [`ProgressTracking`] around a hyper-util legacy `Client`.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProgressLayer {
    _priv: (),
}

impl ProgressLayer {
    /// A progress-tracking layer.
    pub fn new() -> Self {
        ProgressLayer { _priv: () }
    }
}

impl<S> Layer<S> for ProgressLayer {
    type Service = ProgressTracking<S>;

    fn layer(&self, inner: S) -> ProgressTracking<S> {
        ProgressTracking::new(inner)
    }
}
