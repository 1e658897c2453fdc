//! What a hedge layer did with one attempt: its sends.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use super::{AttemptOutcome, AttemptRecord};

/// Why a copy that was due was not sent. After such a refusal no further copy is
/// sent for the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NotHedged {
    /// The body could not be read by a second reader yet (still being sent, so not
    /// fully kept, as a body that goes on past the chunk crossing the replay cap
    /// never is) or any more (it was read past the replay cap).
    Body,
    /// Less than the policy's minimum attempt time was left before the call's
    /// [`Deadline`](crate::policy::Deadline).
    Deadline,
    /// The origin's circuit breaker refused an extra attempt.
    CircuitOpen,
    /// The retry budget was spent.
    Budget,
    /// The origin is paused: a server asked the client to come back later.
    Paused,
    /// The inner service failed to become ready for the copy.
    Unavailable,
}

impl NotHedged {
    /// A short `snake_case` name, for metrics labels.
    pub fn as_str(&self) -> &'static str {
        match self {
            NotHedged::Body => "body",
            NotHedged::Deadline => "deadline",
            NotHedged::CircuitOpen => "circuit_open",
            NotHedged::Budget => "budget",
            NotHedged::Paused => "paused",
            NotHedged::Unavailable => "unavailable",
        }
    }
}

impl fmt::Display for NotHedged {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NotHedged::Body => "body not fully kept",
            NotHedged::Deadline => "deadline",
            NotHedged::CircuitOpen => "circuit open",
            NotHedged::Budget => "retry budget spent",
            NotHedged::Paused => "origin paused",
            NotHedged::Unavailable => "service not ready",
        })
    }
}

/// One send of a hedged request: the original or a copy.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Sent {
    /// 0 for the original, 1 for the first hedge, and so on.
    pub copy: u32,
    /// What it ended with: a status, an error kind, or
    /// [`Canceled`](AttemptOutcome::Canceled) for a loser that was cut short.
    pub outcome: AttemptOutcome,
    /// When it was sent, after the request reached the hedge layer.
    pub started: Duration,
    /// When it ended (answered, failed or was canceled), after the request reached
    /// the hedge layer.
    pub ended: Duration,
}

impl Sent {
    /// Whether this send was a hedge (not the original).
    pub fn is_hedge(&self) -> bool {
        self.copy > 0
    }
}

/// What the hedge layer did with one request: the sends, which one won, and why a
/// due copy was not sent.
///
/// It is part of the attempt's record ([`AttemptLog::hedged`](super::AttemptLog::hedged)),
/// which rides on the response's extensions ([`Hedged::of`]) or in the returned
/// [`Error`](crate::Error) ([`Hedged::find`]) whenever a hedge was due: the request
/// was still unanswered after the hedge delay. A request answered before that carries none,
/// so the common path allocates nothing for it. Like the retry layer's
/// [`History`](crate::policy::History), it names statuses and error kinds only.
///
/// # Examples
///
/// ```
/// use backstop::policy::Hedged;
///
/// fn report<B>(res: &http::Response<B>) {
///     if let Some(hedged) = Hedged::of(res) {
///         println!("{hedged}");
///         println!("{} extra copies, winner: {:?}", hedged.copies(), hedged.winner());
///     }
/// }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hedged {
    pub(crate) sent: Vec<Sent>,
    pub(crate) winner: Option<u32>,
    pub(crate) not_sent: Option<NotHedged>,
}

impl Hedged {
    /// Every send, the original first, in the order they were sent.
    pub fn sent(&self) -> &[Sent] {
        &self.sent
    }

    /// How many copies were sent beside the original.
    pub fn copies(&self) -> usize {
        self.sent.len().saturating_sub(1)
    }

    /// The send whose outcome was returned at once (0 for the original): an
    /// answer, or a failure no copy could cure. `None` when every send failed with
    /// a retryable failure and the latest one was returned.
    pub fn winner(&self) -> Option<u32> {
        self.winner
    }

    /// Why a copy that was due was not sent, if one was refused.
    pub fn not_sent(&self) -> Option<NotHedged> {
        self.not_sent
    }

    /// The `Hedged` record of a backstop [`Error`](crate::Error) in `err`'s source
    /// chain, when a hedge layer returned the error after a hedge was due.
    pub fn find<'a>(err: &'a (dyn StdError + 'static)) -> Option<&'a Hedged> {
        super::error::Error::find(err)?.attempt_log()?.hedged()
    }

    /// The `Hedged` record on a response, when a hedge was due for it.
    pub fn of<B>(res: &http::Response<B>) -> Option<&Hedged> {
        res.extensions().get::<super::AttemptLog>()?.hedged()
    }

    /// The sends as attempt records, for a layer that keeps an attempt
    /// [`History`](crate::policy::History): every send of the attempt carries the
    /// attempt's `number` (so hedges do not look like retries, nor count against
    /// the attempts allowed), copies are marked [`hedge`](AttemptRecord::hedge),
    /// and `offset` is the time from the start of the call to the moment this
    /// attempt reached the hedge layer.
    pub fn attempt_records(&self, number: u32, offset: Duration) -> Vec<AttemptRecord> {
        self.sent
            .iter()
            .map(|s| AttemptRecord {
                number,
                outcome: s.outcome,
                retry_after: None,
                #[cfg(feature = "grpc")]
                grpc_status: None,
                wait: None,
                retry_reason: None,
                progress: None,
                hedge: s.is_hedge(),
                elapsed: offset.saturating_add(s.ended),
            })
            .collect()
    }
}

impl fmt::Display for Hedged {
    /// One line per send, then the verdict:
    ///
    /// ```text
    /// send 0: canceled after 0.12s
    /// send 1 (hedge at 0.05s): 200 OK after 0.07s
    /// returned: send 1
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for s in &self.sent {
            write!(f, "send {}", s.copy)?;
            if s.is_hedge() {
                write!(f, " (hedge at {:.2}s)", s.started.as_secs_f64())?;
            }
            writeln!(f, ": {} after {:.2}s", s.outcome, s.ended.as_secs_f64())?;
        }
        if let Some(why) = self.not_sent {
            writeln!(f, "copy not sent: {why}")?;
        }
        match self.winner {
            Some(w) => write!(f, "returned: send {w}"),
            None => f.write_str("every send failed"),
        }
    }
}
