//! What the call's observer is told.

use super::*;

impl<S, B> Call<S, B> {
    /// Tells the call's observer, if any, the event `make` builds from the call
    /// and the current attempt's number.
    #[inline]
    pub(super) fn tell(&self, make: impl for<'a> FnOnce(&'a observe::CallInfo, u32) -> Event<'a>) {
        if let Some(observed) = self.observed.as_deref() {
            let attempt = self.attempt;
            observed.tell(|call| make(call, attempt));
        }
    }

    /// Whether an observer is told of this call.
    #[inline]
    pub(in crate::retry) fn is_observed(&self) -> bool {
        self.observed.is_some()
    }

    /// Tells the observer, once, how the call ended.
    #[inline]
    pub(in crate::retry) fn ended<RB>(&mut self, result: &CallResult<RB>) {
        if let Some(observed) = self.observed.take() {
            self.tell_finished(&observed, result);
        }
        if let Some(pass) = self.pass_mut() {
            pass.finish(result);
        }
    }

    #[cold]
    pub(super) fn tell_finished<RB>(&self, observed: &Observed, result: &CallResult<RB>) {
        let (outcome, history) = match result {
            Ok(res) => (
                AttemptOutcome::Status(res.status()),
                res.extensions().get::<History>(),
            ),
            Err(err) => (
                err.status()
                    .map_or(AttemptOutcome::Error(err.kind()), AttemptOutcome::Status),
                err.history(),
            ),
        };
        let attempts = history.map_or(1, |h| h.len() as u32);
        let stop = history
            .and_then(History::stop_reason)
            .unwrap_or(StopReason::Answered);
        let elapsed = self.started.map_or(Duration::ZERO, |s| s.elapsed());
        // Read only for a call that may retry (a budget layer above leaves its
        // account in the head kept for the retries), admission's account too.
        let budget_available = self.head().and(self.budget()).and_then(|b| b.available());
        observed.tell(|call| {
            Event::CallFinished(observe::CallFinished {
                call,
                outcome,
                attempts,
                elapsed,
                stop,
                budget_available,
                history,
            })
        });
    }
}
