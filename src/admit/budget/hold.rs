//! A call's first attempt held until its share of the end of its origin's pause.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::time::{sleep_until, Instant, Sleep};

use super::account::Account;
use super::events::{emit, PauseEvent};
use crate::observe::{paused_told, CallRefused, CallWaited, Event, Observed, Refusal};
use crate::policy::error::Error;
use crate::policy::{meet, Pause};

/// A call's first attempt held until its share of the end of its origin's pause.
pub(crate) struct Hold {
    deadline: Option<Instant>,
    release: Pin<Box<Sleep>>,
}

impl Hold {
    /// The call's deadline, which bounds the hold.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Meets the pause at `now` for a call whose deadline is `deadline`: a hold
    /// until the call's release, or the error that refuses the call.
    pub(crate) fn meet(
        pause: Pause,
        now: Instant,
        deadline: Option<Instant>,
        account: &Account,
        observed: Option<&Observed>,
    ) -> Result<Hold, Error> {
        match meet(&pause, now, deadline, account.pause_min_attempt_time()) {
            Ok(release) => {
                waited(observed, release.saturating_duration_since(now));
                Ok(Hold {
                    deadline,
                    release: Box::pin(sleep_until(release)),
                })
            }
            Err(()) => Err(refuse(pause, now, observed)),
        }
    }

    /// Waits out the hold: ready when the attempt may go, or with the error that
    /// refuses the call when a later hint moved the pause's end past what the
    /// call may wait.
    pub(crate) fn poll(
        &mut self,
        cx: &mut Context<'_>,
        account: &Account,
        observed: Option<&Observed>,
    ) -> Poll<Result<(), Error>> {
        loop {
            ready!(self.release.as_mut().poll(cx));
            let now = Instant::now();
            let Some(pause) = paused_told(account, now, observed) else {
                return Poll::Ready(Ok(()));
            };
            match meet(&pause, now, self.deadline, account.pause_min_attempt_time()) {
                Ok(release) => {
                    waited(observed, release.saturating_duration_since(now));
                    self.release.as_mut().reset(release);
                }
                Err(()) => return Poll::Ready(Err(refuse(pause, now, observed))),
            }
        }
    }
}

/// Tells that a call waits `wait` for its origin's pause before its attempt.
fn waited(observed: Option<&Observed>, wait: Duration) {
    emit(PauseEvent::Waited { wait });
    if let Some(observed) = observed {
        observed.tell(|call| Event::CallWaited(CallWaited { call, wait }));
    }
}

fn refuse(pause: Pause, now: Instant, observed: Option<&Observed>) -> Error {
    emit(PauseEvent::Refused {
        left: pause.until().saturating_duration_since(now),
    });
    if let Some(observed) = observed {
        let refusal = Refusal::Paused {
            until: pause.until(),
        };
        observed.tell(|call| Event::CallRefused(CallRefused { call, refusal }));
    }
    Error::paused(pause.until(), now)
}
