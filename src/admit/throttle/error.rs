//! The refusal of a call the throttle shed.

use std::error::Error as StdError;
use std::fmt;

use http::Request;

use super::state::Shed;
use crate::observe::{CallRefused, Event, Observed, Refusal};
use crate::policy::error::Error;
use crate::policy::StopReason;

/// The adaptive throttle shed the call without sending it: its origin has been
/// rejecting calls for overload (see [`ThrottlePolicy`](super::ThrottlePolicy)).
///
/// It is the [`source`](StdError::source) of the [`backstop::Error`](crate::Error)
/// a throttled call ends with; [`Error::is_throttled`](crate::Error::is_throttled)
/// recognises it.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct Throttled {
    requests: u64,
    accepts: u64,
    probability: f64,
}

impl Throttled {
    /// The requests counted in the origin's window before this call.
    pub fn requests(&self) -> u64 {
        self.requests
    }

    /// The accepts counted in the origin's window before this call.
    pub fn accepts(&self) -> u64 {
        self.accepts
    }

    /// The probability with which the call was shed.
    pub fn probability(&self) -> f64 {
        self.probability
    }
}

impl fmt::Display for Throttled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("throttled by the client: the origin rejects calls for overload")
    }
}

impl StdError for Throttled {}

/// A call the throttle shed: traced, told to the call's observer, and answered
/// with an error of its own.
#[cold]
pub(crate) fn refusal<B>(req: &Request<B>, shed: Shed) -> Error {
    let Shed {
        counts,
        probability,
    } = shed;
    tracing::debug!(
        requests = counts.requests,
        accepts = counts.accepts,
        probability,
        "call refused: throttled"
    );
    if let Some(observed) = Observed::of(req) {
        observed.tell(|call| {
            Event::CallRefused(CallRefused {
                call,
                refusal: Refusal::Throttled {
                    requests: counts.requests,
                    accepts: counts.accepts,
                },
            })
        });
    }
    let source = Throttled {
        requests: counts.requests,
        accepts: counts.accepts,
        probability,
    };
    Error::refused(StopReason::Throttled, Box::new(source), None)
}
