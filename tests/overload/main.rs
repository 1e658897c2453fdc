//! The published figures under overload, reproduced by the same models the
//! examples print (`examples/jitter.rs`, `examples/amplification.rs`): each model
//! is one file under `examples/common/`, loaded here by path.

#[path = "../../examples/common/amplification.rs"]
mod amplification;
#[path = "../../examples/common/contention.rs"]
mod contention;

mod jitter;
mod retry_amplification;
