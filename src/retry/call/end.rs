//! The attempt history, and every way a call ends: an answer, a failure, a gate
//! that stopped the next attempt.

use super::*;

impl<S, B> Call<S, B> {
    /// Records the attempt that just ended: one record, or one per send when a hedge
    /// layer beneath sent copies (the returned send's record gets the hint and the
    /// progress).
    pub(super) fn record(
        &mut self,
        outcome: AttemptOutcome,
        retry_after: Option<Duration>,
        grpc_status: Option<GrpcCode>,
        progress: Option<Progress>,
        hedged: Option<Hedged>,
        now: Instant,
    ) {
        #[cfg(not(feature = "grpc"))]
        let _ = grpc_status;
        let started = *self.started.get_or_insert(now);
        let attempt = self.attempt;
        let ledger = self.ledger();
        let attempt_started = ledger.attempt_started.unwrap_or(started);
        if let Some(observed) = self.observed.as_deref() {
            match hedged.as_ref() {
                // One request sent per send of the race, each with its own outcome
                // and time; the returned send carries the progress.
                Some(hedged) => {
                    let sent = hedged.sent();
                    let returned = hedged
                        .winner()
                        .or_else(|| sent.iter().max_by_key(|s| s.ended).map(|s| s.copy));
                    for s in sent {
                        observed.attempt_finished(
                            attempt,
                            s.copy,
                            s.outcome,
                            progress.filter(|_| returned == Some(s.copy)),
                            s.ended.saturating_sub(s.started),
                        );
                    }
                }
                None => observed.attempt_finished(
                    attempt,
                    0,
                    outcome,
                    progress,
                    now.saturating_duration_since(attempt_started),
                ),
            }
        }
        let ledger = self.ledger();
        match hedged {
            Some(hedged) => {
                let offset = attempt_started.saturating_duration_since(started);
                let mut records = hedged.attempt_records(attempt, offset);
                let returned = match hedged.winner() {
                    Some(w) => hedged.sent().iter().position(|s| s.copy == w),
                    None => (0..records.len()).max_by_key(|&i| records[i].elapsed),
                };
                if let Some(r) = returned.and_then(|i| records.get_mut(i)) {
                    r.retry_after = retry_after;
                    #[cfg(feature = "grpc")]
                    {
                        r.grpc_status = grpc_status;
                    }
                    r.progress = progress;
                }
                for r in records {
                    ledger.history.push(r);
                }
            }
            None => ledger.history.push(AttemptRecord {
                number: attempt,
                outcome,
                retry_after,
                #[cfg(feature = "grpc")]
                grpc_status,
                wait: None,
                retry_reason: None,
                progress,
                hedge: false,
                elapsed: now.saturating_duration_since(started),
            }),
        }
    }

    /// Ends the sequence: records why and hands the history out.
    pub(super) fn finish(&mut self, stop: StopReason) -> History {
        // A retryable outcome the ladder kept from a re-send because the request
        // may have been processed (a keyless non-idempotent one), or because the
        // server declined it (`x-should-retry: false`, a negative gRPC pushback), is
        // a skipped retry too, told as one; a plain answer never comes here with it.
        let kept = matches!(
            stop,
            StopReason::NotRetryable(NoRetry::MaybeProcessed | NoRetry::ServerDeclined)
        );
        if stop.is_gate() || kept {
            tracing::debug!(
                attempt = self.attempt,
                gate = stop.as_str(),
                "retry skipped"
            );
            let refused = self.ledger().history.is_empty();
            self.tell(|call, attempt| match refused {
                true => Event::CallRefused(observe::CallRefused {
                    call,
                    refusal: observe::Refusal::Deadline,
                }),
                false => Event::RetrySkipped(observe::RetrySkipped {
                    call,
                    attempt,
                    gate: stop,
                }),
            });
        }
        let route = self.route.clone();
        let history = &mut self.ledger().history;
        history.stop(stop);
        history.set_route(route);
        mem::replace(history, History::new(0))
    }

    /// Returns a response. Its history rides on it when there is something to tell:
    /// more than one attempt, a gate that stopped a retry, or a hold for the
    /// origin's pause. A first-attempt answer
    /// carries none, so the success path allocates nothing for it.
    pub(super) fn answer<RB>(&mut self, mut res: Response<RB>, stop: StopReason) -> CallResult<RB> {
        let history = self.finish(stop);
        if history.len() > 1 || stop != StopReason::Answered || history.held().is_some() {
            #[cfg(feature = "grpc")]
            crate::policy::grpc_status::tell_history(res.headers_mut(), &history);
            res.extensions_mut().insert(history);
        }
        Ok(res)
    }

    pub(super) fn fail<RB>(
        &mut self,
        kind: ErrorKind,
        err: BoxError,
        stop: StopReason,
        retryable: bool,
    ) -> CallResult<RB> {
        let paused = self.ledger.as_ref().and_then(|s| s.paused);
        let history = self.finish(stop);
        let err = Error::wrap(kind, err).with_history(history, retryable);
        Err(match paused {
            Some(until) => err.with_pause(until, Instant::now()),
            None => err,
        })
    }

    /// The inner service failed to get ready for the next attempt.
    pub(in crate::retry) fn unavailable<RB>(&mut self, err: BoxError) -> CallResult<RB> {
        self.refund();
        self.fail(
            ErrorKind::Other,
            err,
            StopReason::NotRetryable(NoRetry::Permanent),
            false,
        )
    }

    pub(super) fn scheduled<RB>(
        &mut self,
        wait: Duration,
        response: Option<Response<RB>>,
        reason: RetryReason,
    ) -> Next<RB> {
        if let Some(last) = self.ledger().history.last_mut() {
            last.wait = Some(wait);
            last.retry_reason = Some(reason);
        }
        tracing::debug!(
            attempt = self.attempt,
            reason = %reason,
            wait_ms = wait.as_millis() as u64,
            "retry scheduled"
        );
        self.tell(|call, attempt| {
            Event::RetryScheduled(observe::RetryScheduled {
                call,
                attempt,
                reason,
                wait,
            })
        });
        Next::Wait { wait, response }
    }

    /// Ends the sequence after a wait, on a gate that refused the next attempt: the
    /// last error as it is, or, when the last outcome was an answer whose body was
    /// already drained, an error that names its status.
    pub(in crate::retry) fn stopped<RB>(&mut self, stop: StopReason) -> CallResult<RB> {
        self.refund();
        match self.ledger().last_error.take() {
            Some((kind, err)) => self.fail(kind, err, stop, true),
            None => {
                let status =
                    self.ledger()
                        .history
                        .attempts()
                        .iter()
                        .rev()
                        .find_map(|a| match a.outcome {
                            AttemptOutcome::Status(status) => Some(status),
                            _ => None,
                        });
                let paused = self.ledger().paused;
                let history = self.finish(stop);
                let err = match status {
                    Some(status) => Error::answered(status),
                    None => Error::new(ErrorKind::Other, None),
                };
                let err = err.with_history(history, true);
                Err(match paused {
                    Some(until) => err.with_pause(until, Instant::now()),
                    None => err,
                })
            }
        }
    }
}
