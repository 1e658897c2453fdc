//! OpenTelemetry's HTTP client conventions, written once: the values of their
//! attributes (shared by the spans and by `MetricsObserver`) and the span of each
//! request sent.
//!
//! One span per request sent, a child of the call's `backstop.retry` span: each
//! attempt (made by the retry layer) and each hedged copy (made by the hedge layer,
//! which finds the call's span in an [`AttemptSpan`] the retry layer leaves on the
//! attempt's request). Through `tracing-opentelemetry`, `otel.name` is the span's
//! name (the method, `HTTP` for `_OTHER`), `otel.kind` its kind (`client`) and
//! `otel.status_code` its status (`error` for a failure and a 4xx or 5xx answer,
//! unset otherwise). The convention's `url.full` is left out on purpose: nothing
//! backstop records holds a URL, a header value or a body. Integers are recorded as
//! `i64`, which `tracing-opentelemetry` turns into the convention's `int` (it
//! records a `u64` as a string).
//!
//! When a hedge layer beneath races copies, the attempt's span is the original
//! send's: it records the original's own outcome (none when it lost and was
//! cancelled), and ends with the race, which may be later than the original's
//! answer when that answer was a retryable failure and a copy won afterwards.

use http::{Method, StatusCode};
use tracing::field::Empty;
use tracing::Span;

use crate::policy::AttemptOutcome;

/// `method` as the convention's `http.request.method`: the method, or `_OTHER` for
/// one outside RFC 9110 and RFC 5789.
pub(crate) fn method_name(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::CONNECT => "CONNECT",
        Method::OPTIONS => "OPTIONS",
        Method::TRACE => "TRACE",
        Method::PATCH => "PATCH",
        _ => "_OTHER",
    }
}

/// The port of `server.port`: the URI's, or its scheme's (80, 443) when it names none.
pub(crate) fn server_port(port: Option<u16>, scheme: Option<&str>) -> Option<u16> {
    port.or(match scheme {
        Some("https") => Some(443),
        Some("http") => Some(80),
        _ => None,
    })
}

/// Every status code's three digits, made once, so a status reads as a
/// `&'static str` without allocating.
static STATUS_DIGITS: [[u8; 3]; 900] = {
    let mut all = [[0u8; 3]; 900];
    let mut i = 0;
    while i < 900 {
        let code = i + 100;
        all[i] = [
            b'0' + (code / 100) as u8,
            b'0' + (code / 10 % 10) as u8,
            b'0' + (code % 10) as u8,
        ];
        i += 1;
    }
    all
};

/// `status`'s three digits (`"503"`).
pub(crate) fn status_str(status: StatusCode) -> &'static str {
    let digits = STATUS_DIGITS
        .get(usize::from(status.as_u16()).wrapping_sub(100))
        .map(|d| std::str::from_utf8(d));
    match digits {
        Some(Ok(digits)) => digits,
        // A `StatusCode` is always 100 to 999.
        _ => "_OTHER",
    }
}

/// The convention's `error.type` for an outcome: the error kind
/// ([`ErrorKind::as_str`](crate::policy::ErrorKind::as_str)) for a failure, the
/// status code for a 4xx or 5xx answer (as it asks of a client); none for any other
/// answer, nor for a send cancelled on purpose (a hedge's loser), which the
/// convention does not count as an error.
pub(crate) fn error_type(outcome: AttemptOutcome) -> Option<&'static str> {
    match outcome {
        AttemptOutcome::Status(status) if status.is_client_error() || status.is_server_error() => {
            Some(status_str(status))
        }
        AttemptOutcome::Error(kind) => Some(kind.as_str()),
        _ => None,
    }
}

/// Left by the retry layer on each attempt's request while the call has a span: that
/// span, the parent of every request the attempt sends, and the attempt's number. A
/// hedge layer beneath makes its copies' spans from it; without it (no retry layer
/// above, or no subscriber taking the call's span) it makes none.
#[derive(Clone, Debug)]
pub(crate) struct AttemptSpan {
    pub(crate) parent: tracing::Id,
    pub(crate) attempt: u32,
}

/// The span of one request sent, a child of the call's span `parent`: attempt
/// `attempt` (from 1), and `copy`, when it is a hedged copy (from 1).
#[cold]
#[inline(never)]
pub(crate) fn request_span(
    parent: Option<tracing::Id>,
    method: &Method,
    uri: &http::Uri,
    attempt: u32,
    copy: Option<u32>,
) -> Span {
    let method = method_name(method);
    let name = match method {
        "_OTHER" => "HTTP",
        known => known,
    };
    let span = tracing::debug_span!(
        parent: parent,
        "backstop.request",
        otel.name = name,
        otel.kind = "client",
        otel.status_code = Empty,
        http.request.method = method,
        server.address = Empty,
        server.port = Empty,
        url.scheme = Empty,
        http.response.status_code = Empty,
        error.type = Empty,
        http.request.resend_count = Empty,
        backstop.hedge.copy = Empty,
    );
    if span.is_disabled() {
        return span;
    }
    if let Some(host) = uri.host() {
        span.record("server.address", host);
    }
    if let Some(port) = server_port(uri.port_u16(), uri.scheme_str()) {
        span.record("server.port", i64::from(port));
    }
    if let Some(scheme) = uri.scheme_str() {
        span.record("url.scheme", scheme);
    }
    if attempt > 1 {
        span.record("http.request.resend_count", i64::from(attempt - 1));
    }
    if let Some(copy) = copy {
        span.record("backstop.hedge.copy", i64::from(copy));
    }
    span
}

/// Records how a request sent ended on its span: `http.response.status_code` when an
/// answer came, `error.type` and an error status when it failed or the answer is a
/// 4xx or 5xx.
#[cold]
#[inline(never)]
pub(crate) fn request_ended(span: &Span, outcome: AttemptOutcome) {
    if let AttemptOutcome::Status(status) = outcome {
        span.record("http.response.status_code", i64::from(status.as_u16()));
    }
    if let Some(error) = error_type(outcome) {
        span.record("error.type", error);
        span.record("otel.status_code", "error");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_reads_as_its_digits() {
        for code in [100, 200, 404, 503, 599, 999] {
            let status = StatusCode::from_u16(code).unwrap();
            assert_eq!(status_str(status), code.to_string());
        }
    }

    #[test]
    fn error_type_follows_the_convention() {
        use crate::policy::ErrorKind;
        let of = |code| error_type(AttemptOutcome::Status(StatusCode::from_u16(code).unwrap()));
        assert_eq!(of(200), None);
        assert_eq!(of(304), None);
        assert_eq!(of(404), Some("404"));
        assert_eq!(of(503), Some("503"));
        assert_eq!(
            error_type(AttemptOutcome::Error(ErrorKind::Timeout)),
            Some("timeout")
        );
        assert_eq!(error_type(AttemptOutcome::Canceled), None);
    }
}
