//! What the budget layer tells the world about an origin's pause: the one place its
//! events leave the layer as `tracing` events (target `backstop::budget`; fields
//! are durations and counts only, never the origin, a URL or a header). The call's
//! observer is told the same things where the call is known: by the account's
//! callers for a [`PauseChange`], by the budget layer's future for a wait or a
//! refusal (`observe::Observed`).

use std::time::Duration;

use crate::policy::PauseChange;

/// One thing that happened to an origin's pause.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PauseEvent {
    /// The account's pause changed: paused, extended or resumed.
    Account(PauseChange),
    /// A call met the pause and waits `wait` before its attempt.
    Waited { wait: Duration },
    /// A call met the pause and was refused; `left` was left of it.
    Refused { left: Duration },
}

fn ms(d: Duration) -> u64 {
    d.as_millis().min(u128::from(u64::MAX)) as u64
}

/// Emits `event`.
pub(crate) fn emit(event: PauseEvent) {
    match event {
        PauseEvent::Account(PauseChange::Paused { pause }) => {
            tracing::debug!(pause_ms = ms(pause), "origin paused")
        }
        PauseEvent::Account(PauseChange::Extended { by }) => {
            tracing::debug!(by_ms = ms(by), "origin pause extended")
        }
        PauseEvent::Account(PauseChange::Resumed) => tracing::debug!("origin resumed"),
        PauseEvent::Waited { wait } => {
            tracing::debug!(wait_ms = ms(wait), "call waits for origin pause")
        }
        PauseEvent::Refused { left } => {
            tracing::debug!(left_ms = ms(left), "call refused: origin paused")
        }
    }
}
