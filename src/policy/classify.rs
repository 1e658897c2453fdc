//! The decision ladder: may this outcome be sent again?

use std::error::Error as StdError;
use std::fmt;
use std::io;

use http::{HeaderMap, HeaderName, Method, StatusCode};

use super::{NoRetry, Progress, RetryPolicy};

/// The header a server uses to say whether a request should be retried.
pub(crate) const X_SHOULD_RETRY: HeaderName = HeaderName::from_static("x-should-retry");

/// What kind of failure an attempt ended with, read from the error's type and its
/// source chain. It never holds a message, so it is safe to record and log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Connecting failed (refused, timed out, unreachable): nothing was sent.
    Connect,
    /// A local mistake or a setting the same request would hit again: an invalid
    /// request or URI, an unsupported scheme or version, a TLS, certificate or name
    /// resolution failure.
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
    /// Any other failure.
    Other,
}

impl ErrorKind {
    /// A short `snake_case` name, for metrics labels.
    pub fn as_str(&self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect",
            ErrorKind::Config => "config",
            ErrorKind::Canceled => "canceled",
            ErrorKind::RefusedStream => "refused_stream",
            ErrorKind::GoAway => "goaway",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Closed => "closed",
            ErrorKind::BodyWrite => "body_write",
            ErrorKind::InvalidResponse => "invalid_response",
            ErrorKind::Other => "other",
        }
    }

    /// Whether the server certainly did not process the request.
    pub fn is_not_processed(&self) -> bool {
        matches!(
            self,
            ErrorKind::Connect | ErrorKind::Canceled | ErrorKind::RefusedStream | ErrorKind::GoAway
        )
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ErrorKind::Connect => "connect error",
            ErrorKind::Config => "invalid request or configuration",
            ErrorKind::Canceled => "canceled before sending",
            ErrorKind::RefusedStream => "stream refused",
            ErrorKind::GoAway => "stream refused by goaway",
            ErrorKind::Timeout => "timed out",
            ErrorKind::Closed => "connection closed",
            ErrorKind::BodyWrite => "request body error",
            ErrorKind::InvalidResponse => "invalid response head",
            ErrorKind::Other => "transport error",
        })
    }
}

/// Reads the kind of an attempt's error from its type and source chain.
///
/// It recognises backstop's own errors, hyper-util's legacy client errors, hyper
/// and h2 errors (with the `hyper` feature), `std::io::Error` kinds, tokio's
/// `Elapsed`, and `http`'s invalid-request errors. See the crate docs for the table.
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
pub(crate) fn chain<'a>(
    err: &'a (dyn StdError + 'static),
) -> impl Iterator<Item = &'a (dyn StdError + 'static)> {
    std::iter::successors(Some(err), |&e| e.source())
}

/// The first recognised kind along `err`'s source chain.
fn chain_kind(err: &(dyn StdError + 'static)) -> Option<ErrorKind> {
    chain(err).find_map(kind_of)
}

fn kind_of(e: &(dyn StdError + 'static)) -> Option<ErrorKind> {
    if let Some(e) = e.downcast_ref::<crate::Error>() {
        return Some(e.kind());
    }
    if e.is::<crate::TimedOut>() || e.is::<tokio::time::error::Elapsed>() {
        return Some(ErrorKind::Timeout);
    }
    if let Some(e) = e.downcast_ref::<io::Error>() {
        return Some(io_kind(e));
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
        _ => ErrorKind::Other,
    }
}

/// Whether an io error met while connecting is worth another try.
#[cfg(feature = "hyper")]
fn connect_is_transient(e: &(dyn StdError + 'static)) -> bool {
    use io::ErrorKind as K;
    let io = chain(e).skip(1).find_map(|e| e.downcast_ref::<io::Error>());
    io.is_some_and(|io| {
        matches!(
            io.kind(),
            K::ConnectionRefused
                | K::ConnectionReset
                | K::ConnectionAborted
                | K::NotConnected
                | K::TimedOut
                | K::AddrNotAvailable
                | K::Interrupted
        )
    })
}

#[cfg(feature = "hyper")]
fn hyper_kind(e: &(dyn StdError + 'static)) -> Option<ErrorKind> {
    if let Some(e) = e.downcast_ref::<hyper_util::client::legacy::Error>() {
        if e.is_connect() {
            return Some(if connect_is_transient(e) {
                ErrorKind::Connect
            } else {
                ErrorKind::Config
            });
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

/// Why a failed outcome may be sent again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RetryReason {
    /// The server said `x-should-retry: true`.
    ServerAsked,
    /// The server did not process the request (425 Too Early, `REFUSED_STREAM`, a
    /// stream refused by `GOAWAY`, a request canceled or a connection refused
    /// before it started).
    NotProcessed,
    /// The method is idempotent.
    Idempotent,
    /// The request carries an idempotency key.
    Keyed,
    /// Nothing of the request was written.
    NothingWritten,
}

impl fmt::Display for RetryReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RetryReason::ServerAsked => "server asked for a retry",
            RetryReason::NotProcessed => "not processed",
            RetryReason::Idempotent => "idempotent method",
            RetryReason::Keyed => "idempotency key",
            RetryReason::NothingWritten => "nothing written",
        })
    }
}

/// The verdict of the decision ladder on one outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Classification {
    /// An answer to return as it is.
    Answer,
    /// A failure that may be sent again, if the gates allow.
    Retryable(RetryReason),
    /// A failure that must not be sent again.
    NotRetryable(NoRetry),
}

impl Classification {
    /// Whether the verdict allows another attempt.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Classification::Retryable(_))
    }
}

/// The outcome of one attempt, as the ladder reads it.
#[derive(Clone, Copy, Debug)]
pub enum Outcome<'a> {
    /// A response head arrived.
    Response {
        /// Its status.
        status: StatusCode,
        /// Its headers (for `x-should-retry`).
        headers: &'a HeaderMap,
    },
    /// The attempt failed with an error of this kind.
    Error(ErrorKind),
}

/// What the ladder needs to know about the request.
#[derive(Clone, Copy, Debug)]
pub struct RequestFacts<'a> {
    /// The request method.
    pub method: &'a Method,
    /// The request carries an idempotency key.
    pub keyed: bool,
}

/// Runs the decision ladder on one attempt's outcome; the first rung that matches
/// decides:
///
/// 1. a response whose status is not retryable (and without `x-should-retry:
///    true`) is an answer, returned as it is;
/// 2. a failure that re-sending cannot cure (an invalid request, configuration,
///    TLS, a failed request body, or a response head the server would send again:
///    too large or malformed) is never sent again;
/// 3. `x-should-retry: true|false` on a response decides when present;
/// 4. a request the server did not process (425, `REFUSED_STREAM`, a stream refused
///    by `GOAWAY`, canceled before it started, a connection that could not be
///    made) may be sent again whatever its method;
/// 5. an idempotent method, or a request with an idempotency key, may be sent
///    again;
/// 6. anything else (a POST or PATCH without a key) only when nothing of it was
///    written: a recorded fact when a progress-tracking transport kept `progress`,
///    and otherwise only for the connect-phase errors of rung 4.
///
/// Gates (attempts, body, deadline, Retry-After, budget, breaker) are checked after
/// this, by the layer.
///
/// # Examples
///
/// ```
/// use backstop::policy::{classify, Classification, Outcome, RequestFacts, RetryPolicy, RetryReason};
/// use http::{HeaderMap, HeaderName, Method, StatusCode};
///
/// let policy = RetryPolicy::default();
/// let headers = HeaderMap::new();
/// let get = RequestFacts { method: &Method::GET, keyed: false };
/// let unavailable = Outcome::Response { status: StatusCode::SERVICE_UNAVAILABLE, headers: &headers };
/// assert_eq!(classify(&policy, get, unavailable, None), Classification::Retryable(RetryReason::Idempotent));
///
/// let post = RequestFacts { method: &Method::POST, keyed: false };
/// assert!(!classify(&policy, post, unavailable, None).is_retryable());
/// ```
pub fn classify(
    policy: &RetryPolicy,
    request: RequestFacts<'_>,
    outcome: Outcome<'_>,
    progress: Option<Progress>,
) -> Classification {
    let idempotent = policy.is_idempotent_method(request.method);
    ladder(policy, idempotent, request.keyed, outcome, progress)
}

/// The ladder itself, for a request already known to be idempotent or keyed (the
/// retry layer works that out once per call).
pub(crate) fn ladder(
    policy: &RetryPolicy,
    idempotent: bool,
    keyed: bool,
    outcome: Outcome<'_>,
    progress: Option<Progress>,
) -> Classification {
    // Rungs 1 and 3 read the response; rung 2 reads the error.
    let not_processed;
    match outcome {
        Outcome::Response { status, headers } => {
            let should_retry = should_retry(headers);
            if is_answer(policy, status, should_retry) {
                return Classification::Answer;
            }
            match should_retry {
                Some(true) => return Classification::Retryable(RetryReason::ServerAsked),
                Some(false) => return Classification::NotRetryable(NoRetry::ServerDeclined),
                None => {}
            }
            not_processed = status == StatusCode::TOO_EARLY;
        }
        Outcome::Error(kind) => match kind {
            ErrorKind::Config => return Classification::NotRetryable(NoRetry::Permanent),
            ErrorKind::BodyWrite => return Classification::NotRetryable(NoRetry::BodyFailed),
            // The same server would send the same head again.
            ErrorKind::InvalidResponse => return Classification::NotRetryable(NoRetry::Permanent),
            _ => not_processed = kind.is_not_processed(),
        },
    }
    // Rung 4.
    if not_processed {
        return Classification::Retryable(RetryReason::NotProcessed);
    }
    // Rung 5.
    if idempotent {
        return Classification::Retryable(RetryReason::Idempotent);
    }
    if keyed {
        return Classification::Retryable(RetryReason::Keyed);
    }
    // Rung 6: a response proves the request was written; an error needs a record.
    match (outcome, progress) {
        (Outcome::Error(_), Some(p)) if p.proves_nothing_written() => {
            Classification::Retryable(RetryReason::NothingWritten)
        }
        _ => Classification::NotRetryable(NoRetry::MaybeProcessed),
    }
}

/// Rung 1: whether a response is an answer to return as it is, whatever the
/// request. This is the whole ladder for a response that is not a retryable status,
/// which lets the retry layer's success path skip the rest.
#[inline]
pub(crate) fn is_answer(
    policy: &RetryPolicy,
    status: StatusCode,
    should_retry: Option<bool>,
) -> bool {
    should_retry != Some(true)
        && status != StatusCode::TOO_EARLY
        && !policy.is_retryable_status(status)
}

/// `x-should-retry: true|false`, when present and valid.
#[inline]
pub(crate) fn should_retry(headers: &HeaderMap) -> Option<bool> {
    if headers.is_empty() {
        return None;
    }
    let value = headers.get(&X_SHOULD_RETRY)?.as_bytes();
    if value.eq_ignore_ascii_case(b"true") {
        Some(true)
    } else if value.eq_ignore_ascii_case(b"false") {
        Some(false)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::RetryPolicy;
    use http::HeaderValue;

    fn progress(tracked: bool, bytes: u64) -> Progress {
        Progress {
            tracked,
            body_bytes: bytes,
            write_began: bytes > 0,
            ..Progress::default()
        }
    }

    /// Every rung of the ladder, in order, with the verdict it must give.
    #[test]
    fn ladder_table() {
        let policy = RetryPolicy::default();
        let plain = HeaderMap::new();
        let mut yes = HeaderMap::new();
        yes.insert(X_SHOULD_RETRY, HeaderValue::from_static("true"));
        let mut no = HeaderMap::new();
        no.insert(X_SHOULD_RETRY, HeaderValue::from_static("FALSE"));
        let mut junk = HeaderMap::new();
        junk.insert(X_SHOULD_RETRY, HeaderValue::from_static("maybe"));

        let s = |code: u16| StatusCode::from_u16(code).unwrap();
        let resp = |code: u16, headers| Outcome::Response {
            status: s(code),
            headers,
        };
        use Classification::*;
        use ErrorKind as K;
        use RetryReason as R;
        let get = (Method::GET, false);
        let post = (Method::POST, false);
        let keyed_post = (Method::POST, true);
        let patch = (Method::PATCH, false);

        #[rustfmt::skip]
        type Case<'a> = (&'a str, (Method, bool), Outcome<'a>, Option<Progress>, Classification);
        let cases: Vec<Case<'_>> = vec![
            // 1. an answer
            ("200 GET", get.clone(), resp(200, &plain), None, Answer),
            ("404 GET", get.clone(), resp(404, &plain), None, Answer),
            (
                "500 GET (opt-in)",
                get.clone(),
                resp(500, &plain),
                None,
                Answer,
            ),
            ("200 POST", post.clone(), resp(200, &plain), None, Answer),
            (
                "200 with x-should-retry: false",
                get.clone(),
                resp(200, &no),
                None,
                Answer,
            ),
            // 2. never curable
            (
                "config GET",
                get.clone(),
                Outcome::Error(K::Config),
                None,
                NotRetryable(NoRetry::Permanent),
            ),
            (
                "config POST nothing written",
                post.clone(),
                Outcome::Error(K::Config),
                Some(progress(true, 0)),
                NotRetryable(NoRetry::Permanent),
            ),
            (
                "body write GET",
                get.clone(),
                Outcome::Error(K::BodyWrite),
                None,
                NotRetryable(NoRetry::BodyFailed),
            ),
            // 3. the server's word
            (
                "500 x-should-retry: true",
                get.clone(),
                resp(500, &yes),
                None,
                Retryable(R::ServerAsked),
            ),
            (
                "500 POST x-should-retry: true",
                post.clone(),
                resp(500, &yes),
                None,
                Retryable(R::ServerAsked),
            ),
            (
                "503 x-should-retry: false",
                get.clone(),
                resp(503, &no),
                None,
                NotRetryable(NoRetry::ServerDeclined),
            ),
            (
                "503 x-should-retry: junk",
                get.clone(),
                resp(503, &junk),
                None,
                Retryable(R::Idempotent),
            ),
            // 4. not processed, every method
            (
                "425 POST",
                post.clone(),
                resp(425, &plain),
                None,
                Retryable(R::NotProcessed),
            ),
            (
                "refused stream POST",
                post.clone(),
                Outcome::Error(K::RefusedStream),
                None,
                Retryable(R::NotProcessed),
            ),
            (
                "goaway PATCH",
                patch.clone(),
                Outcome::Error(K::GoAway),
                None,
                Retryable(R::NotProcessed),
            ),
            (
                "canceled POST",
                post.clone(),
                Outcome::Error(K::Canceled),
                None,
                Retryable(R::NotProcessed),
            ),
            (
                "connect POST",
                post.clone(),
                Outcome::Error(K::Connect),
                None,
                Retryable(R::NotProcessed),
            ),
            // 5. idempotent or keyed
            (
                "503 GET",
                get.clone(),
                resp(503, &plain),
                None,
                Retryable(R::Idempotent),
            ),
            (
                "429 PUT",
                (Method::PUT, false),
                resp(429, &plain),
                None,
                Retryable(R::Idempotent),
            ),
            (
                "closed DELETE",
                (Method::DELETE, false),
                Outcome::Error(K::Closed),
                None,
                Retryable(R::Idempotent),
            ),
            (
                "timeout GET",
                get.clone(),
                Outcome::Error(K::Timeout),
                None,
                Retryable(R::Idempotent),
            ),
            (
                "503 keyed POST",
                keyed_post.clone(),
                resp(503, &plain),
                None,
                Retryable(R::Keyed),
            ),
            (
                "closed keyed POST",
                keyed_post.clone(),
                Outcome::Error(K::Closed),
                Some(progress(true, 10)),
                Retryable(R::Keyed),
            ),
            // 6. anything else: only when nothing was written
            (
                "503 POST",
                post.clone(),
                resp(503, &plain),
                None,
                NotRetryable(NoRetry::MaybeProcessed),
            ),
            (
                "503 POST even with a clean record",
                post.clone(),
                resp(503, &plain),
                Some(progress(true, 0)),
                NotRetryable(NoRetry::MaybeProcessed),
            ),
            (
                "closed POST untracked",
                post.clone(),
                Outcome::Error(K::Closed),
                None,
                NotRetryable(NoRetry::MaybeProcessed),
            ),
            (
                "closed POST untracked record",
                post.clone(),
                Outcome::Error(K::Closed),
                Some(progress(false, 0)),
                NotRetryable(NoRetry::MaybeProcessed),
            ),
            (
                "closed POST tracked, nothing written",
                post.clone(),
                Outcome::Error(K::Closed),
                Some(progress(true, 0)),
                Retryable(R::NothingWritten),
            ),
            (
                "closed POST tracked, body written",
                post.clone(),
                Outcome::Error(K::Closed),
                Some(progress(true, 5)),
                NotRetryable(NoRetry::MaybeProcessed),
            ),
            (
                "timeout PATCH tracked, nothing written",
                patch.clone(),
                Outcome::Error(K::Timeout),
                Some(progress(true, 0)),
                Retryable(R::NothingWritten),
            ),
            (
                "timeout PATCH untracked",
                patch.clone(),
                Outcome::Error(K::Timeout),
                None,
                NotRetryable(NoRetry::MaybeProcessed),
            ),
            (
                "other POST untracked",
                post.clone(),
                Outcome::Error(K::Other),
                None,
                NotRetryable(NoRetry::MaybeProcessed),
            ),
        ];
        for (name, (method, keyed), outcome, progress, want) in cases {
            let facts = RequestFacts {
                method: &method,
                keyed,
            };
            assert_eq!(classify(&policy, facts, outcome, progress), want, "{name}");
        }
    }

    #[test]
    fn configured_methods_and_statuses_feed_the_ladder() {
        let policy = RetryPolicy::builder()
            .idempotent_methods([Method::GET, Method::POST])
            .retry_on(500)
            .build()
            .unwrap();
        let headers = HeaderMap::new();
        let facts = RequestFacts {
            method: &Method::POST,
            keyed: false,
        };
        let outcome = Outcome::Response {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            headers: &headers,
        };
        assert_eq!(
            classify(&policy, facts, outcome, None),
            Classification::Retryable(RetryReason::Idempotent)
        );
    }

    #[test]
    fn io_errors_by_kind() {
        use io::ErrorKind as I;
        let cases = [
            (I::ConnectionRefused, ErrorKind::Connect),
            (I::ConnectionReset, ErrorKind::Closed),
            (I::BrokenPipe, ErrorKind::Closed),
            (I::UnexpectedEof, ErrorKind::Closed),
            (I::TimedOut, ErrorKind::Timeout),
            (I::InvalidInput, ErrorKind::Config),
            (I::Other, ErrorKind::Other),
        ];
        for (io_kind, want) in cases {
            assert_eq!(
                classify_error(&io::Error::from(io_kind)),
                want,
                "{io_kind:?}"
            );
        }
    }

    #[derive(Debug)]
    struct Wrapper(Box<dyn StdError + Send + Sync>);
    impl fmt::Display for Wrapper {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("wrapper")
        }
    }
    impl StdError for Wrapper {
        fn source(&self) -> Option<&(dyn StdError + 'static)> {
            Some(&*self.0)
        }
    }

    #[test]
    fn source_chain_is_walked() {
        let err = Wrapper(Box::new(io::Error::from(io::ErrorKind::ConnectionRefused)));
        assert_eq!(classify_error(&err), ErrorKind::Connect);
        let bad_uri = "http://exa mple".parse::<http::Uri>().unwrap_err();
        assert_eq!(
            classify_error(&Wrapper(Box::new(bad_uri))),
            ErrorKind::Config
        );
        let wrapped_io = io::Error::other(Wrapper(Box::new(io::Error::from(
            io::ErrorKind::ConnectionReset,
        ))));
        assert_eq!(classify_error(&wrapped_io), ErrorKind::Closed);
        assert_eq!(
            classify_error(&Wrapper(Box::new(fmt::Error))),
            ErrorKind::Other
        );
    }

    #[cfg(feature = "hyper")]
    #[test]
    fn h2_errors() {
        let refused = h2::Error::from(h2::Reason::REFUSED_STREAM);
        // A reason built locally is not the server's word.
        assert_eq!(classify_error(&refused), ErrorKind::Closed);
    }
}
