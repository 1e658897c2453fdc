//! The race of a hedged request: each send's outcome judged, the copies that are
//! due sent through the gates, and the race ended with its record.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use http::request::Parts;
use http::{Request, Response};
use tokio::time::Instant;
use tower_service::Service;
use tracing::Span;

use super::{Failure, InFlight, Race, RaceProj, Verdict};
use crate::hedge::{HedgeBody, Judging};
use crate::observe::otel::{request_ended, request_span, AttemptSpan};
use crate::observe::{
    pause_told, paused_told, Event, HedgeSent, HedgeWon, LoserCancelled, Observed,
};
use crate::policy::error::{BoxError, Error};
use crate::policy::{
    classify_error, ladder, later, pause_hint, AttemptLog, AttemptOutcome, Classification,
    ErrorKind, Given, Hedged, HintTaken, NotHedged, Outcome, Sent,
};

impl<S, B, RB> Race<S, B>
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Error: Into<BoxError>,
    B: HedgeBody,
{
    /// Judges one send's outcome: the first acceptable answer wins; a retryable
    /// failure leaves the others running.
    pub(super) fn judge(
        self: Pin<&mut Self>,
        copy: u32,
        result: Result<Response<RB>, S::Error>,
    ) -> Verdict<Result<Response<RB>, Error>> {
        let this = self.project();
        let at = Instant::now();
        let now = at.saturating_duration_since(*this.started);
        let (idempotent, keyed) = (*this.idempotent, *this.keyed);
        let (outcome, class, result) = match result {
            Ok(res) => {
                let (class, _) = ladder(
                    &this.policy.rules,
                    idempotent,
                    keyed,
                    Outcome::Response {
                        status: res.status(),
                        headers: res.headers(),
                    },
                    None,
                    None,
                );
                (AttemptOutcome::Status(res.status()), class, Ok(res))
            }
            Err(err) => {
                let err: BoxError = err.into();
                let kind = classify_error(&*err);
                let outcome = Outcome::Error(kind);
                let rules = &this.policy.rules;
                let (class, _) = ladder(rules, idempotent, keyed, outcome, Some(&*err), None);
                (AttemptOutcome::Error(kind), class, Err((kind, err)))
            }
        };
        if copy == 0 {
            *this.original = Some((outcome, now));
            if let (AttemptOutcome::Status(_), Some(estimator)) = (outcome, this.estimator.as_ref())
            {
                estimator.record_at(now, at);
            }
        } else if let Some(c) = this.copies.get_mut(copy as usize - 1) {
            c.ended = Some((outcome, now));
            c.future = None;
            if let Some(span) = c.span.take() {
                request_ended(&span, outcome);
            }
        }
        if let Classification::Retryable(_) = class {
            let mut result = result;
            // A server that asks its whole origin to come back later says so
            // whichever send wins: the origin is paused now, and the answer marked
            // so that the layers above, if it reaches them, do not pause it again.
            if let (Ok(res), Some(budget)) =
                (&mut result, Given::new(&this.parts.extensions).budget())
            {
                if let Some(hint) = pause_hint(res.status(), res.headers(), SystemTime::now) {
                    pause_told(budget.account(), later(at, hint), this.observed.as_ref());
                    res.extensions_mut().insert(HintTaken);
                }
            }
            // A losing failure is dropped unread; the latest is kept.
            *this.last_failure = Some(result);
            return Verdict::Wait;
        }
        // An answer, or a failure that must not be sent again (it would fail the
        // same way on every copy): it ends the race.
        Verdict::Return(finish(this, Some(copy), result))
    }

    /// Whether a send is still in flight (the original's state is passed in).
    pub(super) fn any_live(&self, original_live: bool) -> bool {
        original_live || self.copies.iter().any(|c| c.future.is_some())
    }

    /// Every send failed: the latest failure.
    pub(super) fn all_failed(self: Pin<&mut Self>) -> Result<Response<RB>, Error> {
        let this = self.project();
        let result = this
            .last_failure
            .take()
            .unwrap_or_else(|| Err((ErrorKind::Other, Box::new(NoSend) as BoxError)));
        finish(this, None, result)
    }

    /// Sends the copies that are due; `Ready(())` when one was sent (poll it).
    pub(super) fn poll_hedge(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut this = self.project();
        if this.service.is_none() {
            return Poll::Pending;
        }
        if this.next_body.is_none() {
            if this.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            *this.due = true;
            // The gates that cost nothing come first.
            let refused =
                closed_gate(this.parts, this.policy, this.observed.as_ref()).or_else(|| match this
                    .body
                    .hedge_copy()
                {
                    Some(body) => {
                        *this.next_body = Some(body);
                        None
                    }
                    None => Some(NotHedged::Body),
                });
            if let Some(why) = refused {
                refuse(this.parts, this.service, this.not_sent, why);
                return Poll::Pending;
            }
        }
        let Some(service) = this.service.as_mut() else {
            return Poll::Pending;
        };
        let ready = match service.poll_ready(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(ready) => ready,
        };
        // The wait for readiness can be long (a buffer or a concurrency limit
        // beneath): the gates are asked again once the copy could go, and the
        // budget last, right before it goes. A copy that does not go lets go of the
        // service, and of the readiness it reserved.
        let refused = match ready {
            Err(_) => Some(NotHedged::Unavailable),
            Ok(()) => closed_gate(this.parts, this.policy, this.observed.as_ref()).or_else(|| {
                let budget = Given::new(&this.parts.extensions).budget()?;
                if !budget.try_withdraw() {
                    return Some(NotHedged::Budget);
                }
                if let Some(observed) = this.observed.as_ref() {
                    observed.ran_dry_if(budget.account());
                }
                None
            }),
        };
        let body = this.next_body.take();
        if let Some(why) = refused {
            refuse(this.parts, this.service, this.not_sent, why);
            return Poll::Pending;
        }
        let (Some(body), Some(service)) = (body, this.service.as_mut()) else {
            return Poll::Pending;
        };
        let copy = this.copies.len() as u32 + 1;
        tracing::debug!(
            copy,
            delay_ms = this.delay.as_secs_f64() * 1e3,
            route = Given::new(&this.parts.extensions).route().map(|r| &**r),
            "hedge sent"
        );
        if let Some(observed) = this.observed.as_ref() {
            let after = this.started.elapsed();
            observed.tell(|call| Event::HedgeSent(HedgeSent { call, copy, after }));
        }
        // The copy's own span, beside the attempt's, when the retry layer above
        // traces the call.
        let span = this.parts.extensions.get::<AttemptSpan>().map(|a| {
            let parts = &*this.parts;
            request_span(
                Some(a.parent.clone()),
                &parts.method,
                &parts.uri,
                a.attempt,
                Some(copy),
            )
        });
        let future = {
            let _entered = span.as_ref().map(Span::enter);
            service.call(Request::from_parts(this.parts.clone(), body))
        };
        this.copies.push(InFlight {
            future: Some(Box::pin(future)),
            started: this.started.elapsed(),
            ended: None,
            span,
        });
        if copy >= *this.max_extra {
            *this.service = None;
        } else {
            this.timer
                .as_mut()
                .reset(later(Instant::now(), *this.delay));
        }
        Poll::Ready(())
    }
}

/// The gates a copy must pass that cost nothing: room left before the call's
/// deadline, the origin's breaker closed, the origin not paused (a server asked the
/// whole origin to come back later). The refusing one, if any.
fn closed_gate(parts: &Parts, policy: &Judging, observed: Option<&Observed>) -> Option<NotHedged> {
    let given = Given::new(&parts.extensions);
    let now = Instant::now();
    if given
        .deadline()
        .is_some_and(|d| d.saturating_duration_since(now) < policy.min_attempt_time())
    {
        Some(NotHedged::Deadline)
    } else if given.breaker().is_some_and(|b| !b.allows_retry()) {
        Some(NotHedged::CircuitOpen)
    } else if given
        .budget()
        .is_some_and(|b| paused_told(b.account(), now, observed).is_some())
    {
        Some(NotHedged::Paused)
    } else {
        None
    }
}

/// Sends no further copy, because of `why`: the service is let go.
fn refuse<S>(
    parts: &Parts,
    service: &mut Option<S>,
    not_sent: &mut Option<NotHedged>,
    why: NotHedged,
) {
    let route = Given::new(&parts.extensions).route().map(|r| &**r);
    tracing::debug!(gate = why.as_str(), route, "hedge not sent");
    *service = None;
    *not_sent = Some(why);
}

/// Ends the race with `result`: the losers still in flight are canceled (their
/// futures dropped), and the record rides on the result when a copy was due.
fn finish<S, B, RB>(
    this: RaceProj<'_, S, B>,
    winner: Option<u32>,
    result: Result<Response<RB>, Failure>,
) -> Result<Response<RB>, Error>
where
    S: Service<Request<B>>,
{
    let at = Instant::now();
    let now = at.saturating_duration_since(*this.started);
    let observed = this.observed.as_ref();
    if this.original.is_none() {
        // The original loses. It had run this long: a lower bound that still
        // counts it as slow, being past the hedge delay.
        if let Some(estimator) = this.estimator.as_ref().filter(|_| now >= *this.delay) {
            estimator.record_at(now, at);
        }
        *this.original = Some((AttemptOutcome::Canceled, now));
        cancelled(observed, 0);
    }
    // Dropping a loser's future cancels its request: hyper resets an HTTP/2
    // stream and closes an HTTP/1.1 connection.
    for (i, c) in this.copies.iter_mut().enumerate() {
        if c.future.take().is_some() {
            c.ended = Some((AttemptOutcome::Canceled, now));
            cancelled(observed, i as u32 + 1);
            // Cancelled on purpose: its span ends with neither status nor error.
            c.span = None;
        }
    }
    if let (Some(observed), Some(copy @ 1..)) = (observed, winner) {
        observed.tell(|call| {
            Event::HedgeWon(HedgeWon {
                call,
                copy,
                elapsed: now,
            })
        });
    }
    *this.next_body = None;
    *this.service = None;
    // A losing failure that arrived is dropped without reading its body.
    if winner.is_some() {
        *this.last_failure = None;
    }
    if !*this.due {
        return result.map_err(|(kind, err)| Error::wrap(kind, err));
    }
    let mut sent = Vec::with_capacity(1 + this.copies.len());
    let (outcome, ended) = this.original.unwrap_or((AttemptOutcome::Canceled, now));
    sent.push(Sent {
        copy: 0,
        outcome,
        started: Duration::ZERO,
        ended,
    });
    for (i, c) in this.copies.iter().enumerate() {
        let (outcome, ended) = c.ended.unwrap_or((AttemptOutcome::Canceled, now));
        sent.push(Sent {
            copy: i as u32 + 1,
            outcome,
            started: c.started,
            ended,
        });
    }
    let log = AttemptLog::new();
    log.record_hedged(Hedged {
        sent,
        winner,
        not_sent: *this.not_sent,
    });
    match result {
        Ok(mut res) => {
            res.extensions_mut().insert(log);
            Ok(res)
        }
        Err((kind, err)) => Err(Error::wrap(kind, err).with_attempt(log)),
    }
}

/// Tells the observer, if any, that a loser was cancelled.
fn cancelled(observed: Option<&Observed>, copy: u32) {
    if let Some(observed) = observed {
        observed.tell(|call| Event::LoserCancelled(LoserCancelled { call, copy }));
    }
}

/// Stands in for a failure when none was kept (it cannot happen: a race ends
/// with every send failed only after one failed).
#[derive(Debug)]
struct NoSend;

impl fmt::Display for NoSend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("no send completed")
    }
}

impl std::error::Error for NoSend {}
