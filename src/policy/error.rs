//! The error a backstop layer returns, and its predicates.
//!
//! It is part of the shared vocabulary: reading a call's result needs it
//! ([`classify_error`](super::classify_error) recognises it along a source chain,
//! [`Report`](super::Report) and [`Hedged::find`](super::Hedged::find) read it), and
//! it is made of the vocabulary's kinds, history and attempt record. The crate root
//! re-exports it (`backstop::Error`); this module is its only home.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use tokio::time::Instant;

use super::{AttemptLog, ErrorKind, History, StopReason};

/// A type-erased error, as tower uses.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A failed call: the last attempt's failure, the attempt history, and why the
/// sequence stopped.
///
/// The inner service's error is kept as the [`source`](StdError::source), so its
/// own predicates stay reachable by downcasting. The `Display` text names the error
/// kind, the number of attempts and the stop reason only: never a URL, header value
/// or body, so it is safe to log.
///
/// # Examples
///
/// ```
/// # async fn demo(err: backstop::Error) {
/// if err.is_retryable() {
///     // The policy would have re-sent this outcome; a gate stopped it.
///     if let Some(after) = err.retry_after() {
///         // Reschedule the work after the server's hint.
///         let _ = after;
///     }
/// }
/// println!("{err}: {}", err.attempts());
/// # }
/// ```
pub struct Error {
    inner: Box<Inner>,
}

struct Inner {
    kind: ErrorKind,
    source: Option<BoxError>,
    history: Option<History>,
    retryable: bool,
    /// Why a layer refused the call before any attempt (an open circuit breaker).
    refused: Option<StopReason>,
    /// The status of the last answer, when the call ended after its body was drained.
    status: Option<http::StatusCode>,
    /// When the circuit breaker that refused the call lets a probe through, and
    /// how long that was when the error was made.
    next_probe_at: Option<(Instant, Duration)>,
    /// The failed attempt's record, when a layer beneath the retry layer (a hedge
    /// layer) filled one in.
    attempt: Option<AttemptLog>,
    /// The origin's pause that stopped the call: until when, and how long that
    /// was when the error was made.
    paused: Option<(Instant, Duration)>,
}

impl Error {
    /// What a layer's response future answers when it is polled again after it
    /// completed (`future` names the layer): an error, never `Pending` for ever.
    #[cold]
    pub(crate) fn polled_after_completion(future: &'static str) -> Self {
        Error::new(
            ErrorKind::Other,
            Some(format!("{future} future polled after completion").into()),
        )
    }

    pub(crate) fn new(kind: ErrorKind, source: Option<BoxError>) -> Self {
        Error {
            inner: Box::new(Inner {
                kind,
                source,
                history: None,
                retryable: false,
                refused: None,
                status: None,
                next_probe_at: None,
                attempt: None,
                paused: None,
            }),
        }
    }

    /// A call a layer refused before sending anything; `source` says why, and
    /// `next_probe_at` when an open breaker lets a probe through.
    pub(crate) fn refused(
        reason: StopReason,
        source: BoxError,
        next_probe_at: Option<Instant>,
    ) -> Self {
        let kind = match reason {
            StopReason::CircuitOpen => ErrorKind::CircuitOpen,
            _ => ErrorKind::Other,
        };
        let mut err = Error::new(kind, Some(source));
        err.inner.refused = Some(reason);
        err.inner.next_probe_at =
            next_probe_at.map(|at| (at, at.saturating_duration_since(Instant::now())));
        err
    }

    /// A call refused before any attempt because its origin is paused until
    /// `until` and it may not wait (the deadline ends inside the pause, or the
    /// budget fails fast). It is retryable once the pause is over.
    pub(crate) fn paused(until: Instant, now: Instant) -> Self {
        let err = Error::refused(StopReason::Paused, Box::new(OriginPaused { until }), None);
        let mut err = err.with_pause(until, now);
        err.inner.retryable = true;
        err
    }

    /// Notes the origin's pause that stopped the call, as seen at `now`.
    pub(crate) fn with_pause(mut self, until: Instant, now: Instant) -> Self {
        self.inner.paused = Some((until, until.saturating_duration_since(now)));
        self
    }

    /// Attaches the failed attempt's record.
    pub(crate) fn with_attempt(mut self, attempt: AttemptLog) -> Self {
        self.inner.attempt = Some(attempt);
        self
    }

    /// The failed attempt's record, when a layer beneath the retry layer filled
    /// one in (a hedge layer's sends).
    pub(crate) fn attempt_log(&self) -> Option<&AttemptLog> {
        self.inner.attempt.as_ref()
    }

    /// The first backstop `Error` along `err`'s source chain, `err` included:
    /// the one inside another library's error, such as the `tonic::Status` of a
    /// gRPC call that failed without an answer (tonic keeps the error it was
    /// made from as its source).
    ///
    /// ```
    /// use backstop::{RetryLayer, RetryPolicy};
    /// use tower::{Service, ServiceBuilder, ServiceExt};
    ///
    /// /// Another library's error, made from backstop's.
    /// #[derive(Debug)]
    /// struct Wrapper(backstop::Error);
    /// impl std::fmt::Display for Wrapper {
    ///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    ///         f.write_str("the call failed")
    ///     }
    /// }
    /// impl std::error::Error for Wrapper {
    ///     fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
    ///         Some(&self.0)
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// // A transport whose connections are all refused.
    /// let transport = tower::service_fn(|_req: http::Request<backstop::ReplayBody<String>>| async {
    ///     Err::<http::Response<String>, _>(std::io::Error::from(std::io::ErrorKind::ConnectionRefused))
    /// });
    /// let mut client = ServiceBuilder::new()
    ///     .layer(RetryLayer::new(RetryPolicy::default()))
    ///     .service(transport);
    /// let req = http::Request::get("http://example.com/").body(String::new()).unwrap();
    /// let err = client.ready().await.unwrap().call(req).await.unwrap_err();
    ///
    /// let wrapped = Wrapper(err);
    /// let found = backstop::Error::find(&wrapped).expect("found along the chain");
    /// assert_eq!(found.attempts(), 3);
    /// # }
    /// ```
    pub fn find<'a>(err: &'a (dyn StdError + 'static)) -> Option<&'a Error> {
        super::chain(err).find_map(|e| e.downcast_ref::<Error>())
    }

    /// The call ended on a gate after a failed answer whose body was already read and
    /// dropped (to free its connection), so the answer itself cannot be returned.
    pub(crate) fn answered(status: http::StatusCode) -> Self {
        let mut err = Error::new(ErrorKind::Other, None);
        err.inner.status = Some(status);
        err
    }

    /// Wraps an inner service's error, reading its kind from its source chain.
    pub(crate) fn from_inner(err: BoxError) -> Self {
        let kind = super::classify_error(&*err);
        Error::wrap(kind, err)
    }

    /// Wraps an inner service's error whose kind is known; an inner backstop
    /// layer's error is kept as it is, with its own source.
    pub(crate) fn wrap(kind: ErrorKind, err: BoxError) -> Self {
        match err.downcast::<Error>() {
            Ok(err) => *err,
            Err(err) => Error::new(kind, Some(err)),
        }
    }

    pub(crate) fn with_history(mut self, history: History, retryable: bool) -> Self {
        self.inner.history = Some(history);
        self.inner.retryable = retryable;
        self
    }

    /// The kind of the last attempt's failure.
    pub fn kind(&self) -> ErrorKind {
        self.inner.kind
    }

    /// The status of the last answer when the call ended with an error after it: a
    /// gate (the breaker opening, the deadline passing, the inner service failing to
    /// get ready) refused the next attempt once the answer's body had been read and
    /// dropped to free its connection.
    pub fn status(&self) -> Option<http::StatusCode> {
        self.inner.status
    }

    /// Whether the policy judged the last outcome worth sending again. A gate
    /// (attempts, body, deadline, Retry-After, budget, breaker) then stopped it; see
    /// [`stop_reason`](Error::stop_reason).
    pub fn is_retryable(&self) -> bool {
        self.inner.retryable
    }

    /// The attempt history, when the error comes from the retry layer.
    pub fn history(&self) -> Option<&History> {
        self.inner.history.as_ref()
    }

    /// How many attempts the call made (0 when none was sent).
    pub fn attempts(&self) -> usize {
        self.history().map_or(0, History::len)
    }

    /// Why the attempt sequence stopped, or why the call was refused before any
    /// attempt ([`StopReason::CircuitOpen`] from a circuit breaker).
    pub fn stop_reason(&self) -> Option<StopReason> {
        self.history()
            .and_then(History::stop_reason)
            .or(self.inner.refused)
    }

    /// When to come back: for a call its origin's pause stopped
    /// ([`is_paused`](Error::is_paused)), what was left of the pause when the call
    /// was refused; for a call an open circuit breaker refused
    /// ([`is_circuit_open`](Error::is_circuit_open)), the time until its next probe
    /// when the call was refused (`None` while it is half-open with probes in
    /// flight); otherwise the server's last Retry-After hint, including one longer
    /// than the policy allowed, so the caller can reschedule.
    pub fn retry_after(&self) -> Option<Duration> {
        self.inner
            .paused
            .or(self.inner.next_probe_at)
            .map(|(_, left)| left)
            .or_else(|| self.history().and_then(History::retry_after))
    }

    /// Whether the call's origin was paused (a server asked the client to come
    /// back later) and the call could not wait for the pause to end: its deadline
    /// ended inside it, or the budget fails fast. Nothing was sent for the
    /// attempt it stopped; [`retry_after`](Error::retry_after) says when the pause
    /// ends, and the call is [retryable](Error::is_retryable) after it.
    pub fn is_paused(&self) -> bool {
        self.stop_reason() == Some(StopReason::Paused)
    }

    /// Until when the call's origin is paused, when its pause stopped the call.
    ///
    /// See [`OriginPaused`].
    pub fn paused_until(&self) -> Option<Instant> {
        self.inner.paused.map(|(until, _)| until)
    }

    /// Whether the adaptive throttle shed the call before its first attempt: its
    /// origin has been rejecting calls for overload. Nothing was sent; the error's
    /// source is a [`Throttled`](crate::throttle::Throttled) with the counts that
    /// decided.
    pub fn is_throttled(&self) -> bool {
        self.stop_reason() == Some(StopReason::Throttled)
    }

    /// Whether an attempt timed out or the call's deadline passed.
    pub fn is_timeout(&self) -> bool {
        self.inner.kind == ErrorKind::Timeout
    }

    /// Whether the call's deadline stopped it.
    pub fn is_deadline(&self) -> bool {
        self.stop_reason() == Some(StopReason::Deadline)
    }

    /// Whether the call ended before it sent anything: a layer refused it (an open
    /// breaker, its origin's pause) or its deadline left no time for an attempt.
    pub(crate) fn sent_nothing(&self) -> bool {
        // A history tells what was sent, whatever refused the last retry.
        match self.history() {
            Some(history) => history.is_empty(),
            None => self.inner.refused.is_some(),
        }
    }

    /// Whether an open circuit breaker refused the call or its retry.
    pub fn is_circuit_open(&self) -> bool {
        self.stop_reason() == Some(StopReason::CircuitOpen)
    }

    /// When the circuit breaker that refused this call will next let a probe
    /// through; `None` when the call was not refused by a breaker, or when the
    /// breaker is half-open and its probes are in flight (the next call may pass
    /// as soon as they succeed).
    ///
    /// See [`CircuitOpen`](crate::circuit_breaker::CircuitOpen).
    pub fn next_probe_at(&self) -> Option<Instant> {
        self.inner.next_probe_at.map(|(at, _)| at)
    }

    /// Whether the server certainly did not process the request.
    pub fn is_not_processed(&self) -> bool {
        self.inner.kind.is_not_processed() || self.inner.refused.is_some()
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("backstop::Error");
        d.field("kind", &self.inner.kind);
        d.field("retryable", &self.inner.retryable);
        if let Some(refused) = &self.inner.refused {
            d.field("refused", refused);
        }
        if let Some(h) = &self.inner.history {
            d.field("attempts", &h.len());
            d.field("stop", &h.stop_reason());
        }
        // The source's own Debug may name a URL or an address: only say it is there;
        // walk `source()` to read it.
        d.field("source", &self.inner.source.as_ref().map(|_| ".."));
        d.finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let (Some(refused), None) = (self.inner.refused, &self.inner.history) {
            return write!(f, "call refused ({refused})");
        }
        match self.inner.status {
            // A status the policy counts as a failure worth a retry is transient;
            // any other is the upstream's answer.
            Some(status) => {
                f.write_str(if self.inner.retryable {
                    "transient "
                } else {
                    "upstream "
                })?;
                fmt::Display::fmt(&super::AttemptOutcome::Status(status), f)?
            }
            None => fmt::Display::fmt(&self.inner.kind, f)?,
        }
        if let Some(h) = &self.inner.history {
            let n = h.len();
            write!(f, " after {n} attempt{}", if n == 1 { "" } else { "s" })?;
            if let Some(stop) = h.stop_reason() {
                write!(f, " ({stop})")?;
            }
        }
        Ok(())
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.inner
            .source
            .as_deref()
            .map(|e| e as &(dyn StdError + 'static))
    }
}

/// The kind of one of backstop's own errors, when `e` is one: this is where a
/// backstop error is recognised along a source chain.
pub(crate) fn recognise(e: &(dyn StdError + 'static)) -> Option<ErrorKind> {
    if let Some(e) = e.downcast_ref::<Error>() {
        return Some(e.kind());
    }
    if e.is::<TimedOut>() {
        return Some(ErrorKind::Timeout);
    }
    None
}

/// An attempt ran out of time (its own timeout, or the call's deadline).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct TimedOut {
    /// The call's deadline cut the attempt short.
    pub deadline: bool,
}

impl fmt::Display for TimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.deadline {
            "deadline passed"
        } else {
            "attempt timed out"
        })
    }
}

impl StdError for TimedOut {}

/// The call's origin is paused: a server answered 429 or 503 with a wait hint, and
/// the budget layer keeps every call away from the origin until the hint ends.
///
/// It is the [`source`](StdError::source) of the [`backstop::Error`](crate::Error)
/// a [`Budget`](crate::budget::Budget) returns for a call it refused before
/// sending it; [`Error::is_paused`](crate::Error::is_paused) recognises it and
/// [`Error::retry_after`](crate::Error::retry_after) says how long was left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct OriginPaused {
    until: Instant,
}

impl OriginPaused {
    /// When the pause ends (its release may be spread a little after).
    pub fn until(&self) -> Instant {
        self.until
    }
}

impl fmt::Display for OriginPaused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("origin paused")
    }
}

impl StdError for OriginPaused {}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync + 'static>() {}

    #[test]
    fn error_is_send_sync_static() {
        assert_send_sync::<Error>();
        assert_send_sync::<TimedOut>();
        assert_send_sync::<OriginPaused>();
    }

    #[tokio::test(start_paused = true)]
    async fn a_paused_refusal_says_until_when_and_is_retryable() {
        let now = Instant::now();
        let until = now + Duration::from_secs(2);
        let err = Error::paused(until, now);
        assert!(err.is_paused() && err.is_retryable() && err.is_not_processed());
        assert_eq!(err.retry_after(), Some(Duration::from_secs(2)));
        assert_eq!(err.paused_until(), Some(until));
        assert_eq!(err.stop_reason(), Some(StopReason::Paused));
        assert_eq!(err.to_string(), "call refused (origin paused)");
        let source = StdError::source(&err).unwrap();
        assert_eq!(
            source.downcast_ref::<OriginPaused>().unwrap().until(),
            until
        );
    }

    #[test]
    fn a_status_is_transient_or_the_upstreams() {
        let mut history = History::new(3);
        history.stop(StopReason::AttemptsExhausted);
        let err = Error::answered(http::StatusCode::SERVICE_UNAVAILABLE)
            .with_history(history.clone(), true);
        assert_eq!(
            err.to_string(),
            "transient 503 Service Unavailable after 0 attempts (attempts exhausted)"
        );
        let err = Error::answered(http::StatusCode::NOT_IMPLEMENTED).with_history(history, false);
        assert!(
            err.to_string().starts_with("upstream 501 Not Implemented"),
            "{err}"
        );
    }

    #[test]
    fn from_inner_keeps_a_backstop_error() {
        let err = Error::new(ErrorKind::GoAway, None);
        let again = Error::from_inner(Box::new(err));
        assert_eq!(again.kind(), ErrorKind::GoAway);
    }
}
