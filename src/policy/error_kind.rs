//! Reading an attempt's error: its kind, from its type and source chain.

use std::error::Error as StdError;
use std::fmt;
use std::io;

/// What kind of failure an attempt ended with, read from the error's type and its
/// source chain. It never holds a message, so it is safe to record and log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Connecting failed (refused, reset, unreachable, the TLS handshake cut off):
    /// nothing was sent.
    Connect,
    /// Connecting took longer than the connector allowed: nothing was sent.
    ConnectTimeout,
    /// The host name did not resolve: nothing was sent.
    Dns,
    /// A local mistake or a setting the same request would hit again: an invalid
    /// request or URI, an unsupported scheme or version, a certificate or another
    /// TLS configuration failure.
    Config,
    /// The transport canceled the request before it started.
    Canceled,
    /// An HTTP/2 server refused the stream (`REFUSED_STREAM`): not processed.
    RefusedStream,
    /// An HTTP/2 server's `GOAWAY` excluded the stream: not processed.
    GoAway,
    /// The attempt timed out.
    Timeout,
    /// The connection closed or was reset before a complete answer.
    Closed,
    /// The request body failed while it was being sent.
    BodyWrite,
    /// The server's response head could not be read: too large, an invalid status
    /// line or header (a hyper parse error). The same server would send it again,
    /// so it is never re-sent: a client must not download a huge header block once
    /// per attempt.
    InvalidResponse,
    /// A circuit breaker refused the call: nothing was sent. The error's
    /// [`retry_after`](crate::Error::retry_after) says when its next probe is due.
    /// An outer retry layer treats it as it treats [`Other`](ErrorKind::Other):
    /// sending again at once would meet the same open breaker.
    CircuitOpen,
    /// Any other failure.
    Other,
}

impl ErrorKind {
    /// Every kind, in the order of the enum.
    pub const ALL: [ErrorKind; 13] = [
        ErrorKind::Connect,
        ErrorKind::ConnectTimeout,
        ErrorKind::Dns,
        ErrorKind::Config,
        ErrorKind::Canceled,
        ErrorKind::RefusedStream,
        ErrorKind::GoAway,
        ErrorKind::Timeout,
        ErrorKind::Closed,
        ErrorKind::BodyWrite,
        ErrorKind::InvalidResponse,
        ErrorKind::CircuitOpen,
        ErrorKind::Other,
    ];

    /// A short `snake_case` name, for metrics labels and configuration files
    /// (read back by [`FromStr`](std::str::FromStr)).
    pub fn as_str(&self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect",
            ErrorKind::ConnectTimeout => "connect_timeout",
            ErrorKind::Dns => "dns",
            ErrorKind::Config => "config",
            ErrorKind::Canceled => "canceled",
            ErrorKind::RefusedStream => "refused_stream",
            ErrorKind::GoAway => "goaway",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Closed => "closed",
            ErrorKind::BodyWrite => "body_write",
            ErrorKind::InvalidResponse => "invalid_response",
            ErrorKind::CircuitOpen => "circuit_open",
            ErrorKind::Other => "other",
        }
    }

    /// Whether the server certainly did not process the request.
    pub fn is_not_processed(&self) -> bool {
        matches!(
            self,
            ErrorKind::Connect
                | ErrorKind::ConnectTimeout
                | ErrorKind::Dns
                | ErrorKind::Canceled
                | ErrorKind::RefusedStream
                | ErrorKind::GoAway
        )
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.description())
    }
}

impl ErrorKind {
    /// The text `Display` writes.
    fn description(&self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect error",
            ErrorKind::ConnectTimeout => "connect timed out",
            ErrorKind::Dns => "dns error",
            ErrorKind::Config => "invalid request or configuration",
            ErrorKind::Canceled => "canceled before sending",
            ErrorKind::RefusedStream => "stream refused",
            ErrorKind::GoAway => "stream refused by goaway",
            ErrorKind::Timeout => "timed out",
            ErrorKind::Closed => "connection closed",
            ErrorKind::BodyWrite => "request body error",
            ErrorKind::InvalidResponse => "invalid response head",
            ErrorKind::CircuitOpen => "circuit open",
            ErrorKind::Other => "transport error",
        }
    }
}

/// Reads a kind by its [name](ErrorKind::as_str), as configuration files write
/// it: without regard to case, `_` or `-` (`refused_stream`, `REFUSED_STREAM`,
/// `RefusedStream`, `go-away`); or by the text its `Display` writes (`stream
/// refused`), so what is displayed reads back.
///
/// # Examples
///
/// ```
/// use backstop::policy::ErrorKind;
///
/// assert_eq!("REFUSED_STREAM".parse(), Ok(ErrorKind::RefusedStream));
/// assert_eq!("ConnectTimeout".parse(), Ok(ErrorKind::ConnectTimeout));
/// for kind in ErrorKind::ALL {
///     assert_eq!(kind.to_string().parse(), Ok(kind));
/// }
/// assert!("flaky".parse::<ErrorKind>().is_err());
/// ```
impl std::str::FromStr for ErrorKind {
    type Err = UnknownName;

    fn from_str(text: &str) -> Result<Self, UnknownName> {
        ErrorKind::ALL
            .into_iter()
            .find(|kind| {
                same_name(kind.as_str(), text) || kind.description().eq_ignore_ascii_case(text)
            })
            .ok_or(UnknownName("error kind"))
    }
}

/// Whether `text` is `name` without regard to ASCII case, `_` or `-`.
pub(crate) fn same_name(name: &str, text: &str) -> bool {
    fn letters(s: &str) -> impl Iterator<Item = u8> + '_ {
        s.bytes()
            .filter(|b| *b != b'_' && *b != b'-')
            .map(|b| b.to_ascii_lowercase())
    }
    letters(name).eq(letters(text))
}

/// A name that names nothing of its kind (an error kind, a gRPC code). It does not
/// repeat the text it was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnknownName(pub(crate) &'static str);

impl fmt::Display for UnknownName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown {}", self.0)
    }
}

impl StdError for UnknownName {}

/// Reads the kind of an attempt's error from its type and source chain.
///
/// It recognises backstop's own errors, hyper-util's legacy client errors, hyper
/// and h2 errors (with the `hyper` feature), reqwest errors (with the
/// `reqwest-middleware` feature), `std::io::Error` kinds, tokio's and tower's
/// `Elapsed`, and `http`'s invalid-request errors. See the crate docs for the
/// table.
///
/// tower's `timeout::error::Elapsed` is recognised without a dependency on tower:
/// by its fingerprint, an error without a source whose `Debug` is `Elapsed(())`
/// and whose `Display` is `request timed out` (tower 0.4 and 0.5).
///
/// # Examples
///
/// ```
/// use std::io;
/// use backstop::policy::{classify_error, ErrorKind};
///
/// let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
/// assert_eq!(classify_error(&refused), ErrorKind::Connect);
/// let reset = io::Error::from(io::ErrorKind::ConnectionReset);
/// assert_eq!(classify_error(&reset), ErrorKind::Closed);
/// ```
pub fn classify_error(err: &(dyn StdError + 'static)) -> ErrorKind {
    chain_kind(err).unwrap_or(ErrorKind::Other)
}

/// `err` and then each error along its source chain.
///
/// An `io::Error` that wraps another error is followed into that error: its own
/// `source()` skips the wrapped error and answers that error's source, so an io
/// error wrapped in another (hyper-rustls wraps the TLS handshake's in
/// `io::Error::other`) would not be seen.
pub(crate) fn chain<'a>(
    err: &'a (dyn StdError + 'static),
) -> impl Iterator<Item = &'a (dyn StdError + 'static)> {
    std::iter::successors(Some(err), |&e| match e.downcast_ref::<io::Error>() {
        Some(io) => io.get_ref().map(|inner| inner as &(dyn StdError + 'static)),
        None => e.source(),
    })
}

/// The first recognised kind along `err`'s source chain.
fn chain_kind(err: &(dyn StdError + 'static)) -> Option<ErrorKind> {
    chain(err).find_map(kind_of)
}

fn kind_of(e: &(dyn StdError + 'static)) -> Option<ErrorKind> {
    if let Some(kind) = super::error::recognise(e) {
        return Some(kind);
    }
    if e.is::<tokio::time::error::Elapsed>() {
        return Some(ErrorKind::Timeout);
    }
    if let Some(e) = e.downcast_ref::<io::Error>() {
        return Some(io_kind(e));
    }
    if is_tower_elapsed(e) {
        return Some(ErrorKind::Timeout);
    }
    if e.is::<http::Error>()
        || e.is::<http::uri::InvalidUri>()
        || e.is::<http::uri::InvalidUriParts>()
        || e.is::<http::header::InvalidHeaderValue>()
        || e.is::<http::header::InvalidHeaderName>()
        || e.is::<http::method::InvalidMethod>()
    {
        return Some(ErrorKind::Config);
    }
    #[cfg(feature = "reqwest-middleware")]
    if let Some(kind) = reqwest_kind(e) {
        return Some(kind);
    }
    #[cfg(feature = "hyper")]
    if let Some(kind) = hyper_kind(e) {
        return Some(kind);
    }
    None
}

fn io_kind(e: &io::Error) -> ErrorKind {
    use io::ErrorKind as K;
    // A custom io error may wrap a more telling one (h2 and TLS do this).
    if let Some(kind) = e.get_ref().and_then(|inner| chain_kind(inner)) {
        return kind;
    }
    match e.kind() {
        K::ConnectionRefused => ErrorKind::Connect,
        K::TimedOut | K::WouldBlock => ErrorKind::Timeout,
        K::ConnectionReset
        | K::ConnectionAborted
        | K::BrokenPipe
        | K::UnexpectedEof
        | K::NotConnected => ErrorKind::Closed,
        K::InvalidInput | K::Unsupported | K::PermissionDenied => ErrorKind::Config,
        _ if is_unreachable(e.kind()) => ErrorKind::Connect,
        _ => ErrorKind::Other,
    }
}

/// Whether an io error kind says the network or host cannot be reached (a
/// connect-phase failure: nothing was sent). The kinds are named by their `Debug`
/// text, as they are newer than the crate's minimum Rust version.
fn is_unreachable(kind: io::ErrorKind) -> bool {
    ["NetworkUnreachable", "HostUnreachable", "NetworkDown"]
        .iter()
        .any(|name| debug_is(&kind, name))
}

/// tower's `timeout::error::Elapsed`, by its fingerprint: no source, `Debug`
/// `Elapsed(())`, `Display` `request timed out`.
fn is_tower_elapsed(e: &(dyn StdError + 'static)) -> bool {
    e.source().is_none() && display_is(e, "request timed out") && debug_is(e, "Elapsed(())")
}

/// Whether `value`'s `Display` text is exactly `text`, compared as it is written
/// (no allocation).
pub(crate) fn display_is(value: &(impl fmt::Display + ?Sized), text: &str) -> bool {
    let mut m = Matches { rest: text };
    fmt::write(&mut m, format_args!("{value}")).is_ok() && m.rest.is_empty()
}

/// Whether `value`'s `Debug` text is exactly `text`.
fn debug_is(value: &(impl fmt::Debug + ?Sized), text: &str) -> bool {
    let mut m = Matches { rest: text };
    fmt::write(&mut m, format_args!("{value:?}")).is_ok() && m.rest.is_empty()
}

/// A writer that checks what is written against a text, failing at the first
/// difference.
struct Matches<'a> {
    rest: &'a str,
}

impl fmt::Write for Matches<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        match self.rest.strip_prefix(s) {
            Some(rest) => {
                self.rest = rest;
                Ok(())
            }
            None => Err(fmt::Error),
        }
    }
}

/// The kind of a failure to connect: transient (nothing was sent) when the name
/// did not resolve, the connection was refused, reset, timed out or unreachable, or
/// the TLS handshake was cut off (`UnexpectedEof`); a configuration error
/// otherwise (a certificate, an invalid URL, an unsupported scheme).
#[cfg(any(feature = "hyper", feature = "reqwest-middleware"))]
fn connect_kind(e: &(dyn StdError + 'static)) -> ErrorKind {
    use io::ErrorKind as K;
    // hyper-util's `HttpConnector` names a resolver failure `dns error`.
    if e.source()
        .is_some_and(|cause| display_is(cause, "dns error"))
    {
        return ErrorKind::Dns;
    }
    // The innermost io error tells what happened; one wrapping it (kind `Other`)
    // only carries it.
    let io = chain(e)
        .skip(1)
        .filter_map(|e| e.downcast_ref::<io::Error>())
        .last();
    let Some(io) = io else {
        return ErrorKind::Config;
    };
    match io.kind() {
        K::TimedOut => ErrorKind::ConnectTimeout,
        K::ConnectionRefused
        | K::ConnectionReset
        | K::ConnectionAborted
        | K::NotConnected
        | K::AddrNotAvailable
        | K::Interrupted
        | K::UnexpectedEof => ErrorKind::Connect,
        kind if is_unreachable(kind) => ErrorKind::Connect,
        _ => ErrorKind::Config,
    }
}

/// A reqwest error: reqwest hides the connection, so its own predicates say what
/// phase failed. A connect-phase failure (refused, reset, timed out while
/// connecting) was not processed; one that another try cannot cure (name
/// resolution, TLS) is `Config`; a builder error is `Config`. Anything else is read
/// further down the chain (hyper, h2, io), where the attempt's real cause sits.
#[cfg(feature = "reqwest-middleware")]
fn reqwest_kind(e: &(dyn StdError + 'static)) -> Option<ErrorKind> {
    let e = e.downcast_ref::<reqwest::Error>()?;
    if e.is_builder() {
        return Some(ErrorKind::Config);
    }
    if e.is_connect() {
        // reqwest's own connect timeout is a `TimedOut` of its own, not an io error.
        return Some(if e.is_timeout() {
            ErrorKind::ConnectTimeout
        } else {
            connect_kind(e)
        });
    }
    if e.is_timeout() {
        return Some(ErrorKind::Timeout);
    }
    None
}

#[cfg(feature = "hyper")]
fn hyper_kind(e: &(dyn StdError + 'static)) -> Option<ErrorKind> {
    if let Some(e) = e.downcast_ref::<hyper_util::client::legacy::Error>() {
        if e.is_connect() {
            return Some(connect_kind(e));
        }
        // hyper-util's own refusals (unsupported method or version, a URI that is
        // not absolute) carry no source; the others wrap a hyper error.
        if e.source().is_none() {
            return Some(ErrorKind::Config);
        }
        return None;
    }
    if let Some(e) = e.downcast_ref::<h2::Error>() {
        return Some(h2_kind(e));
    }
    if let Some(he) = e.downcast_ref::<hyper::Error>() {
        if he.is_canceled() {
            return Some(ErrorKind::Canceled);
        }
        if he.is_user() {
            // A user error with a cause is the request body's own failure.
            return Some(if he.source().is_some() {
                ErrorKind::BodyWrite
            } else {
                ErrorKind::Config
            });
        }
        if he.is_timeout() {
            return Some(ErrorKind::Timeout);
        }
        // A head too large or malformed: what the same server sends again.
        if he.is_parse() {
            return Some(ErrorKind::InvalidResponse);
        }
        // An HTTP/2 or io cause tells more than hyper's own kind.
        if let Some(kind) = he.source().and_then(chain_kind) {
            return Some(kind);
        }
        if he.is_incomplete_message() || he.is_closed() || he.is_shutdown() {
            return Some(ErrorKind::Closed);
        }
        return Some(ErrorKind::Other);
    }
    None
}

#[cfg(feature = "hyper")]
fn h2_kind(e: &h2::Error) -> ErrorKind {
    if e.is_remote() {
        if e.is_reset() && e.reason() == Some(h2::Reason::REFUSED_STREAM) {
            return ErrorKind::RefusedStream;
        }
        if e.is_go_away() {
            return ErrorKind::GoAway;
        }
    }
    if e.is_io() {
        if let Some(io) = e.get_io() {
            return io_kind(io);
        }
    }
    ErrorKind::Closed
}
