use std::error::Error as StdError;
use std::fmt;

use tokio::time::Instant;

use crate::policy::circuit::State;

/// A circuit breaker refused the call without sending it.
///
/// It is the [`source`](StdError::source) of the [`backstop::Error`](crate::Error)
/// a [`CircuitBreaker`](crate::circuit_breaker::CircuitBreaker) returns for a refused
/// call; [`Error::is_circuit_open`](crate::Error::is_circuit_open) recognises it and
/// [`Error::next_probe_at`](crate::Error::next_probe_at) reads when to come back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CircuitOpen {
    /// `None` while half-open, with probes in flight.
    next_probe_at: Option<Instant>,
}

impl CircuitOpen {
    pub(crate) fn new(next_probe_at: Option<Instant>) -> Self {
        CircuitOpen { next_probe_at }
    }

    /// The breaker's state when it refused: [`State::Open`] during the cooldown,
    /// [`State::HalfOpen`] while its probes are in flight.
    pub fn state(&self) -> State {
        match self.next_probe_at {
            Some(_) => State::Open,
            None => State::HalfOpen,
        }
    }

    /// When the breaker will let the next probe through: the end of its cooldown.
    /// `None` when it is half-open and its probes are in flight; it closes (and
    /// lets every call through) as soon as they succeed.
    pub fn next_probe_at(&self) -> Option<Instant> {
        self.next_probe_at
    }
}

impl fmt::Display for CircuitOpen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.state() {
            State::HalfOpen => "circuit half-open, probes in flight",
            _ => "circuit open",
        })
    }
}

impl StdError for CircuitOpen {}
