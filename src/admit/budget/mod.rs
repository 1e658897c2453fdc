//! The retry budget's part of admission: its numbers, each origin's account, and
//! the hold of a call whose origin is paused.

mod account;
mod config;
mod events;
mod hold;

pub(crate) use account::Account;
pub use account::OriginAccount;
pub use config::{BudgetPolicy, BudgetPolicyBuilder, PauseMode};
pub(crate) use hold::Hold;
