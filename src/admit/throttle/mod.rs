//! The adaptive throttle's part of admission: its settings, each origin's window
//! of requests and accepts, and the refusal of a call it sheds.

mod config;
mod error;
mod state;

pub use config::{ThrottlePolicy, ThrottlePolicyBuilder};
pub(crate) use error::refusal;
pub use error::Throttled;
pub(crate) use state::{Core, Shed};

#[cfg(test)]
mod tests;
