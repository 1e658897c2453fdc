//! gRPC's status on the wire (feature `grpc`): the code a response carries and the
//! pushback it asks for.
//!
//! Here, with the `Retry-After` parser, because every layer that pauses an origin
//! reads a pushback the way it reads a 429's hint, whatever its rules (the budget
//! layer runs none). gRPC's [rules](crate::grpc) build on it; `backstop::grpc::Code`
//! is the code's public home.

use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

pub(crate) const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
pub(crate) const PUSHBACK: HeaderName = HeaderName::from_static("grpc-retry-pushback-ms");
/// The header a trailers-only gRPC answer that ends a call with a history carries
/// it in: a gRPC client (tonic's `Status`) keeps the head's headers as its
/// metadata, and nothing else of the response.
pub(crate) const HISTORY: HeaderName = HeaderName::from_static("backstop-history");

/// Writes `history` into the head of a trailers-only gRPC answer (one with
/// `grpc-status` in its head), one line, its lines joined by `; `. Any other
/// answer is left as it is: its history rides on its extensions only.
pub(crate) fn tell_history(headers: &mut HeaderMap, history: &super::History) {
    if !headers.contains_key(&GRPC_STATUS) {
        return;
    }
    let mut line = String::new();
    for c in history.to_string().chars() {
        match c {
            '\n' => line.push_str("; "),
            // A route's name is the only text not of backstop's making; it is
            // already quoted and escaped, and what a header cannot carry is escaped too.
            ' '..='~' => line.push(c),
            _ => line.extend(c.escape_unicode()),
        }
    }
    if let Ok(value) = HeaderValue::try_from(line) {
        headers.insert(HISTORY, value);
    }
}

/// A gRPC status code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[allow(missing_docs)]
pub enum Code {
    Ok = 0,
    Cancelled = 1,
    Unknown = 2,
    InvalidArgument = 3,
    DeadlineExceeded = 4,
    NotFound = 5,
    AlreadyExists = 6,
    PermissionDenied = 7,
    ResourceExhausted = 8,
    FailedPrecondition = 9,
    Aborted = 10,
    OutOfRange = 11,
    Unimplemented = 12,
    Internal = 13,
    Unavailable = 14,
    DataLoss = 15,
    Unauthenticated = 16,
}

impl Code {
    const ALL: [Code; 17] = [
        Code::Ok,
        Code::Cancelled,
        Code::Unknown,
        Code::InvalidArgument,
        Code::DeadlineExceeded,
        Code::NotFound,
        Code::AlreadyExists,
        Code::PermissionDenied,
        Code::ResourceExhausted,
        Code::FailedPrecondition,
        Code::Aborted,
        Code::OutOfRange,
        Code::Unimplemented,
        Code::Internal,
        Code::Unavailable,
        Code::DataLoss,
        Code::Unauthenticated,
    ];

    /// The code with this number; an unknown number is [`Code::Unknown`], as gRPC
    /// reads it.
    pub fn from_u32(n: u32) -> Code {
        Code::ALL.get(n as usize).copied().unwrap_or(Code::Unknown)
    }

    /// The code of a `grpc-status` header value; an unparsable one is
    /// [`Code::Unknown`].
    pub fn from_header(value: &HeaderValue) -> Code {
        // A number past `u32` is unknown too, never cut to one that is known.
        parse_digits(value.as_bytes(), 10)
            .and_then(|n| u32::try_from(n).ok())
            .map_or(Code::Unknown, Code::from_u32)
    }

    /// The code a gRPC client reads from an HTTP status other than 200 (a proxy's
    /// answer): gRPC's HTTP-to-gRPC status mapping.
    pub fn from_http(status: StatusCode) -> Code {
        match status.as_u16() {
            200 => Code::Ok,
            400 => Code::Internal,
            401 => Code::Unauthenticated,
            403 => Code::PermissionDenied,
            404 => Code::Unimplemented,
            429 | 502 | 503 | 504 => Code::Unavailable,
            _ => Code::Unknown,
        }
    }

    pub(crate) fn bit(self) -> u32 {
        1 << self as u32
    }

    /// The code's name as gRPC writes it (`UNAVAILABLE`, `RESOURCE_EXHAUSTED`).
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Ok => "OK",
            Code::Cancelled => "CANCELLED",
            Code::Unknown => "UNKNOWN",
            Code::InvalidArgument => "INVALID_ARGUMENT",
            Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
            Code::NotFound => "NOT_FOUND",
            Code::AlreadyExists => "ALREADY_EXISTS",
            Code::PermissionDenied => "PERMISSION_DENIED",
            Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
            Code::FailedPrecondition => "FAILED_PRECONDITION",
            Code::Aborted => "ABORTED",
            Code::OutOfRange => "OUT_OF_RANGE",
            Code::Unimplemented => "UNIMPLEMENTED",
            Code::Internal => "INTERNAL",
            Code::Unavailable => "UNAVAILABLE",
            Code::DataLoss => "DATA_LOSS",
            Code::Unauthenticated => "UNAUTHENTICATED",
        }
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Reads a code by its name, as gRPC configs write it, without regard to case,
/// `_` or `-` (`UNAVAILABLE`, `unavailable`, `ResourceExhausted`), or by its number
/// (`14`).
///
/// # Examples
///
/// ```
/// use backstop::grpc::Code;
///
/// assert_eq!("UNAVAILABLE".parse(), Ok(Code::Unavailable));
/// assert_eq!("resource_exhausted".parse(), Ok(Code::ResourceExhausted));
/// assert_eq!("14".parse(), Ok(Code::Unavailable));
/// assert!("99".parse::<Code>().is_err());
/// assert!("SLOW".parse::<Code>().is_err());
/// ```
impl std::str::FromStr for Code {
    type Err = super::UnknownName;

    fn from_str(text: &str) -> Result<Self, super::UnknownName> {
        let by_number = parse_digits(text.as_bytes(), 2)
            .and_then(|n| Code::ALL.get(usize::try_from(n).ok()?).copied());
        by_number
            .or_else(|| {
                Code::ALL
                    .into_iter()
                    .find(|code| super::error_kind::same_name(code.as_str(), text))
            })
            .ok_or(super::UnknownName("gRPC status code"))
    }
}

/// The pause a gRPC response asks of its whole origin: a trailers-only response
/// (HTTP 200, `content-type: application/grpc…`) whose `grpc-status` is
/// `UNAVAILABLE` or `RESOURCE_EXHAUSTED` and whose `grpc-retry-pushback-ms` is a
/// valid value above zero. It is read by [`pause_hint`](super::pause_hint), so the retry and
/// budget layers pause the origin on it as on a 429's `Retry-After` (capped by
/// the budget's `max_pause` the same way).
pub(crate) fn pushback_pause(headers: &HeaderMap) -> Option<Duration> {
    if !is_overloaded(headers) {
        return None;
    }
    let ms = parse_digits(headers.get(&PUSHBACK)?.as_bytes(), 19)?;
    Some(Duration::from_millis(ms)).filter(|d| !d.is_zero())
}

/// Whether a trailers-only gRPC response (HTTP 200, `content-type:
/// application/grpc…`) says its server refuses for overload: its `grpc-status` is
/// `UNAVAILABLE` or `RESOURCE_EXHAUSTED`.
pub(crate) fn is_overloaded(headers: &HeaderMap) -> bool {
    let Some(status) = headers.get(&GRPC_STATUS) else {
        return false;
    };
    matches!(
        Code::from_header(status),
        Code::Unavailable | Code::ResourceExhausted
    ) && super::call_info::is_grpc(headers)
}

/// The digits of `bytes` as a number, when they are 1 to `max_len` ASCII digits.
pub(crate) fn parse_digits(bytes: &[u8], max_len: usize) -> Option<u64> {
    if bytes.is_empty() || bytes.len() > max_len || !bytes.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(bytes.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0')))
}
