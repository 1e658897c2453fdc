//! The circuit breaker's part of admission: its settings, the state machine of each
//! origin's breaker, and the permit a call it admits holds until its outcome.

mod config;
mod error;
mod permit;
mod state;

pub use config::{CircuitBreakerPolicy, CircuitBreakerPolicyBuilder};
pub use error::CircuitOpen;
pub(crate) use permit::{refusal, BreakerOwner, Permit};
pub(crate) use state::Core;
