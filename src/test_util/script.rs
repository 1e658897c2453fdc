//! The script's vocabulary: what the upstream does with each request ([`Step`]), and
//! the responses it sends ([`Reply`]).

use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::StatusCode;

/// What the server does with one request (or, for [`Step::RefuseConnection`], with one
/// connection). See the [module docs](super) for the table of steps.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Step {
    /// Read the whole request body, then answer with this response.
    Reply(Reply),
    /// Close the next accepted connection before reading anything from it. A request
    /// that takes this step behaves like [`Step::CloseOnHead`]. See the
    /// [module docs](super#how-steprefuseconnection-consumes-steps).
    ///
    /// What the client sees depends on whether it wrote the request before it noticed
    /// the close: hyper reports either a canceled request (never sent) or a connection
    /// closed before the response, and the two are a race.
    RefuseConnection,
    /// Close the connection as soon as the request head arrived, without reading any of
    /// the body and without answering. Not processed.
    CloseOnHead,
    /// Read this many bytes of the request body, then close the connection without
    /// answering. [`Recorded::body`](super::Recorded::body) holds at most this many bytes. If the body ends
    /// within them, the request counts as processed (as with [`Step::CloseAfterBody`]).
    CloseAfterBodyBytes(usize),
    /// Read the whole request body, then close the connection without answering: the
    /// server processed the request but the answer is lost.
    CloseAfterBody,
    /// Read the whole request body, send a `200` response head announcing a
    /// `content-length` of 64 bytes, send 32 of them, then close the connection.
    CloseAfterHead,
    /// HTTP/2: reset the stream with `REFUSED_STREAM` without reading the body (the
    /// server promises it did not process the request). HTTP/1.1: like
    /// [`Step::CloseOnHead`].
    RefusedStream,
    /// HTTP/2: send a `GOAWAY` (`NO_ERROR`) whose last-stream-id is just below this
    /// request's stream id, then close the connection, without reading the body. The
    /// client's `h2` reports `is_go_away() && is_remote()` for this request. Other streams
    /// in flight on the connection end with it. HTTP/1.1: like [`Step::CloseOnHead`].
    GoAway,
    /// HTTP/2: read the whole body, then reset the stream with `INTERNAL_ERROR` (the
    /// connection stays up). HTTP/1.1: like [`Step::CloseAfterBody`].
    ResetStream,
}

impl From<Reply> for Step {
    fn from(reply: Reply) -> Self {
        Step::Reply(reply)
    }
}

/// How a [`Reply`] sends its body after the head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stall {
    /// Right away, with the head.
    No,
    /// After this long.
    For(Duration),
    /// Never: the body stays open until the client or the [`Upstream`](super::Upstream) goes away.
    Forever,
}

/// A response for [`Step::Reply`]: status, headers, body, and optional delays.
///
/// ```
/// # use std::time::Duration;
/// # use backstop::test_util::Reply;
/// let slow_503 = Reply::status(503)
///     .header("retry-after", "2")
///     .body("busy")
///     .delay(Duration::from_millis(50));
/// # let _ = slow_503;
/// ```
///
/// An invalid status code or header is reported by [`UpstreamBuilder::start`](super::UpstreamBuilder::start) as an
/// [`std::io::ErrorKind::InvalidInput`] error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    pub(super) status: u16,
    pub(super) headers: Vec<(HeaderName, HeaderValue)>,
    pub(super) body: Bytes,
    pub(super) delay: Option<Duration>,
    pub(super) stall: Stall,
    pub(super) early: bool,
    pub(super) invalid: Option<String>,
}

impl Reply {
    /// A `200 OK` with an empty body.
    pub fn ok() -> Self {
        Self::status(200)
    }

    /// A response with this status code (200 to 999) and an empty body.
    pub fn status(code: u16) -> Self {
        let invalid = match StatusCode::from_u16(code) {
            Ok(status) if !status.is_informational() => None,
            _ => Some(format!("invalid status code {code} for a final response")),
        };
        Reply {
            status: code,
            headers: Vec::new(),
            body: Bytes::new(),
            delay: None,
            stall: Stall::No,
            early: false,
            invalid,
        }
    }

    /// Adds a response header (a name may be given several times).
    ///
    /// HTTP/2 forbids connection-specific headers (`connection`, `transfer-encoding`,
    /// …): a reply that has one resets its stream with `INTERNAL_ERROR` instead.
    pub fn header<K, V>(mut self, name: K, value: V) -> Self
    where
        HeaderName: TryFrom<K>,
        HeaderValue: TryFrom<V>,
    {
        match (HeaderName::try_from(name), HeaderValue::try_from(value)) {
            (Ok(name), Ok(value)) => self.headers.push((name, value)),
            (Err(_), _) => self.set_invalid("invalid header name".to_owned()),
            (Ok(name), Err(_)) => self.set_invalid(format!("invalid value for header {name}")),
        }
        self
    }

    /// Sets the response body.
    pub fn body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = body.into();
        self
    }

    /// Waits this long after reading the request body, before sending the response head.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// Answers as soon as the request head arrives, without reading the request body
    /// (the request is not processed). On HTTP/2 the stream is then reset with
    /// `NO_ERROR` while the client may still be sending (RFC 9113 §8.1); on HTTP/1.1
    /// the connection is closed after the response.
    pub fn before_body(mut self) -> Self {
        self.early = true;
        self
    }

    /// Sends the head, then keeps the body open forever: no body byte and no end of
    /// body is ever sent (until the client or the [`Upstream`](super::Upstream) goes away).
    ///
    /// A stalled body is sent without a `content-length` (chunked on HTTP/1.1) unless
    /// one is set with [`Reply::header`].
    pub fn stall_body(mut self) -> Self {
        self.stall = Stall::Forever;
        self
    }

    /// Sends the head, waits this long, then sends the body and ends it.
    ///
    /// A stalled body is sent without a `content-length` (chunked on HTTP/1.1) unless
    /// one is set with [`Reply::header`].
    pub fn stall_body_for(mut self, stall: Duration) -> Self {
        self.stall = Stall::For(stall);
        self
    }

    fn set_invalid(&mut self, why: String) {
        if self.invalid.is_none() {
            self.invalid = Some(why);
        }
    }

    /// The status code and headers, as validated by [`UpstreamBuilder::start`](super::UpstreamBuilder::start).
    pub(super) fn head(&self) -> http::response::Parts {
        let (mut parts, ()) = http::Response::new(()).into_parts();
        parts.status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::OK);
        for (name, value) in &self.headers {
            parts.headers.append(name.clone(), value.clone());
        }
        parts
    }
}
