//! The states of a circuit breaker: the vocabulary a breaker, its errors and its
//! observers share.

use std::fmt;

/// The state of a circuit breaker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum State {
    /// Traffic flows; outcomes are counted.
    Closed,
    /// Calls are refused at once until the cooldown ends.
    Open,
    /// A few probe calls are let through to test the upstream; the others are
    /// refused.
    HalfOpen,
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            State::Closed => "closed",
            State::Open => "open",
            State::HalfOpen => "half-open",
        })
    }
}
