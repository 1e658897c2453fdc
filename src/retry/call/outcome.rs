//! What an attempt's outcome means: the decision ladder on it, and the success
//! path's plain answer.

use super::*;

impl<S, B> Call<S, B>
where
    B: Body,
    B::Data: Buf,
    B::Error: Into<BoxError>,
{
    /// Classifies an attempt's outcome and decides what comes next.
    pub(in crate::retry) fn on_outcome<RB>(
        &mut self,
        result: Result<Response<RB>, BoxError>,
    ) -> Next<RB> {
        let progress = self.log.take().map(|p| p.snapshot());
        match result {
            Ok(res) => {
                // A layer beneath may return the attempt's record with the response
                // (a hedge layer's sends); it stays on the response too.
                let hedged = hedged_of_response(&res).cloned();
                let status = res.status();
                let outcome = Outcome::Response {
                    status,
                    headers: res.headers(),
                };
                let (class, hint) = self.classify(outcome, None, progress);
                self.answered(status);
                let now = Instant::now();
                // The classifier's hint replaces the server's `Retry-After`.
                let hint = match class {
                    Classification::Retryable(_) => hint.or_else(|| {
                        crate::policy::parse_retry_after(res.headers(), SystemTime::now())
                    }),
                    _ => None,
                };
                // A trailers-only gRPC answer's code, for its history line.
                let grpc = grpc_code(res.headers());
                let outcome = AttemptOutcome::Status(status);
                self.record(outcome, hint, grpc, progress, hedged, now);
                match class {
                    Classification::Retryable(reason) => match self.gates(hint, now) {
                        Ok(wait) => {
                            self.pause_origin(&res, now);
                            self.scheduled(wait, Some(res), reason)
                        }
                        Err(stop) => Next::Return(self.answer(res, stop)),
                    },
                    Classification::NotRetryable(why) => {
                        Next::Return(self.answer(res, StopReason::NotRetryable(why)))
                    }
                    Classification::Answer => Next::Return(self.answer(res, StopReason::Answered)),
                }
            }
            Err(err) => {
                let now = Instant::now();
                let kind = classify_error(&*err);
                tracing::debug!(
                    attempt = self.attempt,
                    error = kind.as_str(),
                    "attempt failed"
                );
                let (class, hint) = self.classify(Outcome::Error(kind), Some(&*err), progress);
                let hedged = hedged_of_error(&*err).cloned();
                self.record(
                    AttemptOutcome::Error(kind),
                    hint,
                    None,
                    progress,
                    hedged,
                    now,
                );
                // An attempt whose timeout was cut to the deadline timed out: the
                // deadline ended the call, not the attempts or the method.
                if err.downcast_ref::<TimedOut>().is_some_and(|t| t.deadline) {
                    let retryable = class.is_retryable();
                    return Next::Return(self.fail(kind, err, StopReason::Deadline, retryable));
                }
                match class {
                    Classification::Retryable(reason) => match self.gates(hint, now) {
                        Ok(wait) => {
                            self.ledger().last_error = Some((kind, err));
                            self.scheduled(wait, None, reason)
                        }
                        Err(stop) => Next::Return(self.fail(kind, err, stop, true)),
                    },
                    Classification::NotRetryable(why) => {
                        // A body failure that is the replay body's own (an abandoned
                        // attempt's reader pushed it past the cap) says so.
                        let stop = match (why, self.body.as_ref().map(|b| b.replayable())) {
                            (NoRetry::BodyFailed, Some(Err(not))) => {
                                StopReason::BodyNotReplayable(not)
                            }
                            _ => StopReason::NotRetryable(why),
                        };
                        Next::Return(self.fail(kind, err, stop, false))
                    }
                    // The ladder answers only responses.
                    Classification::Answer => Next::Return(self.fail(
                        kind,
                        err,
                        StopReason::NotRetryable(NoRetry::Permanent),
                        false,
                    )),
                }
            }
        }
    }
}

/// The record of a hedge layer's sends that came back with a response.
fn hedged_of_response<RB>(res: &Response<RB>) -> Option<&Hedged> {
    res.extensions()
        .get::<AttemptLog>()
        .and_then(AttemptLog::hedged)
}

/// The record of a hedge layer's sends that came back with an error.
fn hedged_of_error<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a Hedged> {
    Error::find(err)
        .and_then(Error::attempt_log)
        .and_then(AttemptLog::hedged)
}

impl<S, B> Call<S, B> {
    /// How the attempt's own request ended: its answer or failure, or, when a hedge
    /// layer beneath raced copies of it, the original send's outcome (its copies
    /// have spans of their own).
    pub(in crate::retry) fn sent_outcome<RB>(
        result: &Result<Response<RB>, BoxError>,
    ) -> AttemptOutcome {
        let hedged = match result {
            Ok(res) => hedged_of_response(res),
            Err(err) => hedged_of_error(&**err),
        };
        let original = hedged.and_then(|h| h.sent().iter().find(|s| s.copy == 0));
        match (original, result) {
            (Some(original), _) => original.outcome,
            (None, Ok(res)) => AttemptOutcome::Status(res.status()),
            (None, Err(err)) => AttemptOutcome::Error(classify_error(&**err)),
        }
    }

    /// Runs the decision ladder on the current attempt's outcome: the verdict, and
    /// the classifier's wait hint.
    fn classify(
        &self,
        outcome: Outcome<'_>,
        error: Option<&(dyn std::error::Error + 'static)>,
        progress: Option<Progress>,
    ) -> (Classification, Option<Duration>) {
        let rules = self.policy.rules();
        ladder(rules, self.idempotent, self.keyed, outcome, error, progress)
    }

    /// Whether `res` ends the call as it is with nothing to tell: a first answer the
    /// ladder returns (rung 1) that no layer beneath returned a record with. This is
    /// the success path, so it reads only the status and `x-should-retry` (and asks
    /// the rules' classifier, when there is one).
    #[inline]
    pub(in crate::retry) fn is_plain_answer<RB>(&self, res: &Response<RB>) -> bool {
        let status = res.status();
        let plain = self
            .ledger
            .as_ref()
            .is_none_or(|r| r.history.is_empty() && r.history.held().is_none())
            && is_answer_under(self.policy.rules(), status, res.headers())
            && res.extensions().get::<AttemptLog>().is_none();
        if plain {
            self.answered(status);
            if let Some(observed) = self.observed.as_deref() {
                let elapsed = self.started.map_or(Duration::ZERO, |s| s.elapsed());
                observed.attempt_finished(1, 0, AttemptOutcome::Status(status), None, elapsed);
            }
        }
        plain
    }

    fn answered(&self, status: http::StatusCode) {
        tracing::debug!(
            attempt = self.attempt,
            status = status.as_u16(),
            "attempt answered"
        );
    }
}
