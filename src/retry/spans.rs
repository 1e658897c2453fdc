//! The spans of a call: the call's own, `backstop.retry`, and one of
//! OpenTelemetry's HTTP client spans for each request it sends (see
//! `observe::otel`), entered while the call's future is polled.

use http::Request;
use tracing::Span;

use crate::observe::otel;
use crate::policy::{AttemptOutcome, CallContext};

/// The call's span, `backstop.retry`, and the span of the request being sent, one
/// of OpenTelemetry's HTTP client spans (see `observe::otel`), its child.
pub(crate) struct Spans {
    call: Span,
    request: Option<Span>,
}

/// The call's span and its current request's, entered for one poll (the request's
/// inside the call's). Each holds a handle of its own; the request's is exited and
/// let go when the poll learns the request's outcome ([`Spans::sent`]), so the span
/// ends then, before the poll can open the next attempt's.
pub(super) struct EnteredSpans {
    // Exited first.
    request: Option<tracing::span::EnteredSpan>,
    _call: tracing::span::EnteredSpan,
}

impl Spans {
    /// The spans of a call about to start with `req`, when something takes
    /// them: the call's span, and room for its requests'.
    #[inline(always)]
    pub(super) fn for_call<B>(req: &http::Request<B>) -> Option<Box<Spans>> {
        // Checked first: when a subscriber is set and DEBUG is off, making a
        // disabled span and dropping it costs more than this look. Without any
        // subscriber the macro decides, as `tracing`'s `log` output may want the
        // span then.
        if tracing::dispatcher::has_been_set() && !tracing::level_enabled!(tracing::Level::DEBUG) {
            return None;
        }
        let span = tracing::debug_span!(
            "backstop.retry",
            http.request.method = %req.method(),
            http.request.resend_count = tracing::field::Empty,
            route = tracing::field::Empty,
        );
        // `Span::none()` is what the macro gives when nothing takes the span; a
        // disabled span kept for `tracing`'s `log` output is kept here too.
        if span.is_none() {
            return None;
        }
        // The route's name, when the route table named it (a name, never a URL).
        if let Some(route) = CallContext::of(req.extensions()).and_then(CallContext::route) {
            span.record("route", route);
        }
        Some(Box::new(Spans {
            call: span,
            request: None,
        }))
    }

    /// Records on the call's span, once, how many times the request was sent
    /// again, and tells that the call ended.
    #[cold]
    pub(super) fn finished(self, attempts: u32) {
        let span = &self.call;
        if attempts > 1 {
            span.record("http.request.resend_count", i64::from(attempts - 1));
        }
        span.in_scope(|| tracing::debug!(attempts, "call finished"));
    }

    /// Opens the span of attempt `attempt`'s request, to be entered while the call
    /// sends it; leaves the call's span on the request for a hedge layer beneath.
    #[cold]
    pub(super) fn open<T>(&mut self, req: &mut Request<T>, attempt: u32) {
        let parent = self.call.id();
        let span = otel::request_span(parent.clone(), req.method(), req.uri(), attempt, None);
        if let Some(parent) = parent {
            req.extensions_mut()
                .insert(otel::AttemptSpan { parent, attempt });
        }
        self.request = Some(span);
    }

    /// The current request's span, while it is being sent.
    pub(super) fn request(&self) -> Option<&Span> {
        self.request.as_ref()
    }

    /// Enters the call's span and, inside it, the current request's, for one poll.
    #[cold]
    pub(super) fn enter(&self) -> EnteredSpans {
        let mut entered = EnteredSpans {
            request: None,
            _call: self.call.clone().entered(),
        };
        self.enter_request(&mut entered);
        entered
    }

    /// Enters the current request's span inside the call's span this poll
    /// entered: at the poll's start, and for a resend opened during the poll (its
    /// first poll then runs in it).
    #[cold]
    pub(super) fn enter_request(&self, entered: &mut EnteredSpans) {
        entered.request = self.request.clone().map(Span::entered);
    }

    /// Closes the current request's span with its outcome: records it, exits the
    /// span where this poll entered it, and lets go of the last handle, so the span
    /// ends now (an attempt sent later in the same poll starts after it).
    #[cold]
    pub(super) fn sent(&mut self, entered: Option<&mut EnteredSpans>, outcome: AttemptOutcome) {
        if let Some(entered) = entered {
            entered.request = None;
        }
        if let Some(span) = self.request.take() {
            otel::request_ended(&span, outcome);
        }
    }
}
