//! The per-origin state that the budget, the circuit breaker and the hedge
//! estimator keep: which calls share an entry ([`Partition`]), the registry that
//! finds a call's entry and forgets idle ones ([`Registry`], [`Entry`]), and the
//! sliding window of counters the budget and the breaker count in ([`Ring`]).
//!
//! The layers import these from here and never from each other.

mod partition;
mod registry;
mod window;

pub use partition::Partition;
pub(crate) use registry::{Entry, Registry};
pub(crate) use window::{nanos, Ring};
