use std::fmt;
use std::sync::Arc;

use http::header::{HeaderName, HeaderValue};
use http::Method;
use tower_layer::Layer;

use super::IdempotencyKey;
use crate::admit::key::Config;
use crate::admit::Admission;

/// Applies [`IdempotencyKey`]: a fresh key on each POST and PATCH call that has
/// none, under `Idempotency-Key`. Place it outside the retry layer.
///
/// # Examples
///
/// ```
/// use backstop::idempotency_key::IdempotencyKeyLayer;
/// use http::{HeaderName, HeaderValue, Method};
///
/// let layer = IdempotencyKeyLayer::new()
///     .header(HeaderName::from_static("x-request-key"))
///     .methods([Method::POST, Method::PATCH, Method::DELETE])
///     .generator(|| HeaderValue::from_str(&backstop::idempotency_key::new_key_string()).unwrap());
/// # let _ = layer;
/// ```
#[derive(Clone)]
pub struct IdempotencyKeyLayer {
    pub(crate) admission: Arc<Admission>,
}

impl IdempotencyKeyLayer {
    /// Keys for POST and PATCH, under `Idempotency-Key`, as random UUID v4 strings.
    pub fn new() -> Self {
        // The key's part of admission, marking keyed calls for the layers beneath.
        let admission = Admission::new(Some(Arc::new(Config::default())), None, None, None, true);
        IdempotencyKeyLayer {
            admission: Arc::new(admission),
        }
    }

    fn config_mut(&mut self) -> &mut Config {
        Arc::make_mut(&mut self.admission).key_mut()
    }

    /// The layer's settings, which a stack's admission takes over.
    pub(crate) fn config(&self) -> Arc<Config> {
        Arc::new(self.admission.key().cloned().unwrap_or_default())
    }

    /// The header the key travels in. The retry layer recognises a keyed request
    /// by the marker this layer leaves, whatever the header.
    pub fn header(mut self, name: HeaderName) -> Self {
        self.config_mut().header = name;
        self
    }

    /// The methods that get a key (POST and PATCH by default).
    pub fn methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.config_mut().methods = methods.into_iter().collect();
        self
    }

    /// Makes keys with `generate` instead of random UUIDs.
    pub fn generator<F>(mut self, generate: F) -> Self
    where
        F: Fn() -> HeaderValue + Send + Sync + 'static,
    {
        self.config_mut().generator = Some(Arc::new(generate));
        self
    }
}

impl Default for IdempotencyKeyLayer {
    fn default() -> Self {
        IdempotencyKeyLayer::new()
    }
}

impl fmt::Debug for IdempotencyKeyLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdempotencyKeyLayer")
            .field("header", &self.config().header)
            .field("methods", &self.config().methods)
            .field("custom_generator", &self.config().generator.is_some())
            .finish()
    }
}

impl<S> Layer<S> for IdempotencyKeyLayer {
    type Service = IdempotencyKey<S>;

    fn layer(&self, inner: S) -> IdempotencyKey<S> {
        IdempotencyKey::new(inner, self.admission.clone())
    }
}
