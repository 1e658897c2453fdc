//! Several observers as one: each event is told to each, in the order given.

use std::fmt;
use std::sync::Arc;

use crate::policy::event::{Event, Observer};

/// Several observers as one, for an [`ObserveLayer`](super::ObserveLayer) or a
/// stack ([`BackstopBuilder::observer`](crate::stack::BackstopBuilder::observer)): each
/// event is told to each observer, in the order they were added. Keep the
/// metrics and count something of your own, without a forwarding closure.
///
/// # Examples
///
/// ```
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use std::sync::Arc;
/// use backstop::observe::{Event, ObserveLayer, Observers};
///
/// // Say, the metrics observer, and a count of one's own.
/// let events = Arc::new(AtomicU32::new(0));
/// let counted = events.clone();
/// let observers = Observers::new()
///     .with(|event: &Event<'_>| {
///         if let Event::RetryScheduled(retry) = event {
///             eprintln!("retrying a call to {}", retry.call.origin());
///         }
///     })
///     .with(move |_: &Event<'_>| {
///         counted.fetch_add(1, Ordering::Relaxed);
///     });
/// assert_eq!(observers.len(), 2);
/// let layer = ObserveLayer::new(observers);
/// # let _ = (layer, events.load(Ordering::Relaxed));
/// ```
#[derive(Clone, Default)]
pub struct Observers(Vec<Arc<dyn Observer>>);

impl Observers {
    /// No observer yet.
    pub fn new() -> Self {
        Observers::default()
    }

    /// These observers and `observer`, told after them.
    pub fn with(self, observer: impl Observer) -> Self {
        self.with_arc(Arc::new(observer))
    }

    /// These observers and one you keep a handle on, told after them.
    pub fn with_arc(mut self, observer: Arc<dyn Observer>) -> Self {
        self.0.push(observer);
        self
    }

    /// How many observers are told.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no observer is told.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Observer for Observers {
    fn on_event(&self, event: &Event<'_>) {
        for observer in &self.0 {
            observer.on_event(event);
        }
    }
}

impl fmt::Debug for Observers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observers")
            .field("len", &self.0.len())
            .finish()
    }
}
