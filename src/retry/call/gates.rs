//! The gates a retryable outcome must pass, and the shared state they consult: the
//! origin's budget, breaker and pause.

use std::time::Duration;

use bytes::Buf;
use http::Response;
use http_body::Body;
use tokio::time::Instant;

use super::*;

impl<S, B> Call<S, B>
where
    B: Body,
    B::Data: Buf,
    B::Error: Into<BoxError>,
{
    /// The gates a retryable outcome must pass; the wait before the next attempt, or
    /// the gate that refused.
    pub(super) fn gates(
        &mut self,
        hint: Option<Duration>,
        now: Instant,
    ) -> Result<Duration, StopReason> {
        let attempt = self.attempt;
        let sent = self.ledger().history.len().max(attempt as usize);
        let policy = &*self.policy;
        // Hedges a layer beneath sent count as attempts too.
        if sent >= policy.max_attempts() as usize {
            return Err(StopReason::AttemptsExhausted);
        }
        if let Some(body) = &self.body {
            body.replayable().map_err(StopReason::BodyNotReplayable)?;
        }
        let wait = match hint {
            Some(hint) if hint > policy.max_retry_after() => {
                return Err(StopReason::RetryAfterTooLong)
            }
            Some(hint) => hint,
            None => {
                // Decorrelated jitter draws from the call's previous backoff wait.
                let ledger = self.ledger.as_deref_mut();
                let previous = ledger.as_ref().and_then(|l| l.last_backoff);
                let wait = policy.backoff().next_wait(self.attempt, previous);
                if let Some(ledger) = ledger {
                    ledger.last_backoff = Some(wait);
                }
                wait
            }
        };
        if let Some(deadline) = self.deadline() {
            let needed = wait.saturating_add(policy.min_attempt_time());
            if deadline.saturating_duration_since(now) < needed {
                return Err(StopReason::Deadline);
            }
        }
        // A paused origin: the retry waits for the pause when its own wait ends
        // first (a retry waiting for the hint that set the pause goes with it).
        let wait = match self.meet_pause(now, later(now, wait))? {
            Some(release) => release.saturating_duration_since(now),
            None => wait,
        };
        if !self.breaker_allows_retry() {
            return Err(StopReason::CircuitOpen);
        }
        let withdrawn = match self.budget() {
            Some(budget) if !budget.try_withdraw() => return Err(StopReason::Budget),
            Some(budget) => {
                if let Some(observed) = self.observed.as_deref() {
                    observed.ran_dry_if(budget);
                }
                Some(now)
            }
            None => None,
        };
        self.ledger().withdrawn = withdrawn;
        Ok(wait)
    }
}

impl<S, B> Call<S, B> {
    /// The budget account of the call's origin. Only a call that may retry reads
    /// it, from its request head kept for the next attempt.
    pub(super) fn budget(&self) -> Option<&dyn BudgetAccount> {
        match self.pass().and_then(Pass::budget) {
            Some(budget) => Some(budget),
            None => self
                .head()
                .and_then(|h| h.given().budget())
                .map(BudgetHandle::account),
        }
    }

    /// Pauses the call's origin on the hint of an answer the call will retry
    /// after (the budget layer pauses it on the call's final answer).
    pub(super) fn pause_origin<RB>(&self, res: &Response<RB>, now: Instant) {
        if let (Some(budget), Some(until)) = (self.budget(), pause_until(res, Some(now))) {
            pause_told(budget, until, self.observed.as_deref());
        }
    }

    /// Meets the origin's pause before an attempt whose own wait ends at `own_end`:
    /// `Ok(None)` when the pause does not hold it (none, or over by then),
    /// `Ok(Some(at))` to wait until `at` (the pause's end plus this call's share of
    /// the release spread, within the deadline), `Err(Paused)` when it may not wait
    /// (the deadline ends inside the pause, the budget fails fast, or the pause
    /// lasts longer than the policy's `max_retry_after`: waiting for a pause is
    /// waiting for another call's hint, and no hint is waited longer than that).
    pub(in crate::retry) fn meet_pause(
        &mut self,
        now: Instant,
        own_end: Instant,
    ) -> Result<Option<Instant>, StopReason> {
        let observed = self.observed.as_deref();
        let Some(pause) = self.budget().and_then(|b| paused_told(b, now, observed)) else {
            return Ok(None);
        };
        if pause.until() <= own_end {
            return Ok(None);
        }
        let too_long = pause.until().saturating_duration_since(now) > self.policy.max_retry_after();
        let met = if too_long {
            Err(())
        } else {
            meet(&pause, now, self.deadline(), self.policy.min_attempt_time())
        };
        match met {
            Ok(release) => {
                tracing::debug!(
                    attempt = self.attempt,
                    wait_ms = release.saturating_duration_since(now).as_millis() as u64,
                    "retry waits for origin pause"
                );
                if let Some(observed) = self.observed.as_deref() {
                    let wait = release.saturating_duration_since(now);
                    observed.tell(|call| Event::CallWaited(observe::CallWaited { call, wait }));
                }
                Ok(Some(release))
            }
            Err(()) => {
                self.ledger().paused = Some(pause.until());
                Err(StopReason::Paused)
            }
        }
    }

    /// Adds a wait for the origin's pause, found after the call's own wait, to the
    /// wait recorded before the next attempt.
    pub(in crate::retry) fn waits_longer(&mut self, extra: Duration) {
        if let Some(last) = self.ledger().history.last_mut() {
            last.wait = Some(last.wait.unwrap_or_default().saturating_add(extra));
        }
    }

    /// Gives the budget back a retry it paid for that will not be sent. Only a call
    /// that failed, stopped or was dropped mid-wait gets here.
    #[cold]
    #[inline(never)]
    pub(super) fn refund(&mut self) {
        if let Some(withdrawn) = self.ledger.as_mut().and_then(|r| r.withdrawn.take()) {
            if let Some(budget) = self.budget() {
                budget.refund_withdrawal(withdrawn);
            }
        }
    }

    /// Whether the origin's breaker, when there is one, lets a retry through. Only a
    /// call that may retry reads it, from its request head kept for the next
    /// attempt, so the success path neither looks it up nor clones it.
    pub(in crate::retry) fn breaker_allows_retry(&self) -> bool {
        if let Some(allows) = self.pass().and_then(Pass::allows_retry) {
            return allows;
        }
        self.head()
            .and_then(|h| h.given().breaker())
            .is_none_or(|b| b.allows_retry())
    }
}
