use std::fmt;
use std::sync::Arc;

use http::request::Parts;
use tokio::time::Instant;
use tower_layer::Layer;

use super::{CircuitBreaker, CircuitBreakerPolicy, State};
use crate::admit::Admission;

/// Applies [`CircuitBreaker`] to a service: refuses calls to an origin whose
/// breaker is open, and records one outcome per call.
///
/// Clones of the layer, and every service it makes, share the breakers.
#[derive(Clone)]
pub struct CircuitBreakerLayer {
    pub(crate) admission: Arc<Admission>,
}

impl CircuitBreakerLayer {
    /// A layer with these settings; its breakers are created as calls arrive.
    pub fn new(config: CircuitBreakerPolicy) -> Self {
        // The breaker's part of admission, handing its breaker down to the layers
        // beneath (that is its job).
        let admission = Admission::new(None, Some(config), None, None, true);
        CircuitBreakerLayer {
            admission: Arc::new(admission),
        }
    }

    /// The settings the layer applies.
    pub fn config(&self) -> &CircuitBreakerPolicy {
        match self.admission.breaker() {
            Some(config) => config,
            None => unreachable!("a circuit breaker layer's admission has a breaker"),
        }
    }

    /// The state of the breaker that a call with this request head goes through
    /// (created, closed, if it is new): for metrics and tests.
    ///
    /// An open breaker whose cooldown has ended reads [`State::Open`] until a call
    /// arrives and becomes its probe.
    pub fn state(&self, head: &Parts) -> State {
        self.admission.breaker_state(head).unwrap_or(State::Closed)
    }

    /// When the breaker that a call with this request head goes through lets its
    /// next probe through; `None` unless it is open.
    pub fn next_probe_at(&self, head: &Parts) -> Option<Instant> {
        self.admission.next_probe_at(head)
    }

    /// How many breakers the layer (with its clones and services) holds now,
    /// after forgetting the idle ones: one per origin (or key) used within the
    /// breaker's [`window`](CircuitBreakerPolicy::window), within the longer of the
    /// window and its [`max_cooldown`](CircuitBreakerPolicy::max_cooldown) when
    /// its last call failed or it is not closed (an open breaker counts from the
    /// end of its cooldown), or that a call in flight holds. With
    /// [`Partition::global`] it is always one.
    ///
    /// Counting sweeps the breakers under a lock the calls share, so it suits a
    /// metrics scrape, not every call.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use backstop::{CircuitBreakerLayer, CircuitBreakerPolicy};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let layer = CircuitBreakerLayer::new(CircuitBreakerPolicy::default());
    /// let head = |uri| http::Request::get(uri).body(()).unwrap().into_parts().0;
    /// layer.state(&head("http://a.test/"));
    /// assert_eq!(layer.origins(), 1);
    /// // A breaker that saw no failure, unused for its window (30 s).
    /// tokio::time::advance(Duration::from_secs(30)).await;
    /// assert_eq!(layer.origins(), 0);
    /// # }
    /// ```
    ///
    /// [`Partition::global`]: crate::Partition::global
    pub fn origins(&self) -> usize {
        self.admission.origins()
    }
}

impl Default for CircuitBreakerLayer {
    /// [`CircuitBreakerPolicy::default()`], one breaker per origin.
    fn default() -> Self {
        CircuitBreakerLayer::new(CircuitBreakerPolicy::default())
    }
}

impl<S> Layer<S> for CircuitBreakerLayer {
    type Service = CircuitBreaker<S>;

    fn layer(&self, inner: S) -> CircuitBreaker<S> {
        CircuitBreaker::from_shared(inner, self.admission.clone())
    }
}

impl fmt::Debug for CircuitBreakerLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreakerLayer")
            .field("config", &self.config())
            .finish()
    }
}
