//! What the budget layer tells the world about an origin's pause: the one place its
//! events leave the layer. They are `tracing` events now (target `backstop::budget`,
//! fields are durations and counts only, never the origin, a URL or a header); an
//! observer is called from here when one rides in the call's context.

use std::time::Duration;

/// One thing that happened to an origin's pause.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PauseEvent {
    /// The origin was paused for `pause` (it was not paused before).
    Paused { pause: Duration },
    /// A later hint moved the end of an ongoing pause out by `by`.
    Extended { by: Duration },
    /// The pause ended; the first call after its end noticed.
    Resumed,
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
        PauseEvent::Paused { pause } => {
            tracing::debug!(pause_ms = ms(pause), "origin paused")
        }
        PauseEvent::Extended { by } => {
            tracing::debug!(by_ms = ms(by), "origin pause extended")
        }
        PauseEvent::Resumed => tracing::debug!("origin resumed"),
        PauseEvent::Waited { wait } => {
            tracing::debug!(wait_ms = ms(wait), "call waits for origin pause")
        }
        PauseEvent::Refused { left } => {
            tracing::debug!(left_ms = ms(left), "call refused: origin paused")
        }
    }
}
