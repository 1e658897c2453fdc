//! The origin pause: a server's "come back later" (a 429 or 503 with a wait hint),
//! honoured by every call to that origin, not only by the one that received it.
//!
//! The budget layer keeps the pause in the origin's account; the types here are how
//! the layers see it ([`Pause`]), the one function that reads the hint that pauses
//! an origin (`pause_hint`), and the one rule of whether a call waits for a pause or
//! is refused (`meet`).

use std::time::{Duration, SystemTime};

use http::{HeaderMap, StatusCode};
use tokio::time::Instant;

/// An origin's pause, as its account reports it to a call that meets it: until
/// when the server asked the client to stay away, when this call may go, and
/// whether it may wait at all.
///
/// [`BudgetAccount::paused`](crate::policy::BudgetAccount::paused) returns one. The
/// release instant is drawn per call (the budget layer spreads it with full jitter
/// after the pause's end), so callers that waited do not all arrive at once.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use backstop::policy::Pause;
/// use tokio::time::Instant;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let until = Instant::now() + Duration::from_secs(2);
/// let pause = Pause::new(until).with_release(until + Duration::from_millis(50));
/// assert_eq!(pause.until(), until);
/// assert_eq!(pause.release_at() - until, Duration::from_millis(50));
/// assert!(!pause.is_fail_fast());
/// // A release before the end of the pause is moved to its end.
/// assert_eq!(Pause::new(until).with_release(Instant::now()).release_at(), until);
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pause {
    until: Instant,
    release_at: Instant,
    fail_fast: bool,
}

impl Pause {
    /// A pause that ends at `until`; a call meeting it waits and is released then.
    pub fn new(until: Instant) -> Self {
        Pause {
            until,
            release_at: until,
            fail_fast: false,
        }
    }

    /// When the call meeting the pause may go: its end plus this call's share of
    /// the release spread. A release before the end is moved to the end.
    pub fn with_release(mut self, at: Instant) -> Self {
        self.release_at = at.max(self.until);
        self
    }

    /// Whether a call meeting the pause fails at once instead of waiting.
    pub fn fail_fast(mut self, fail_fast: bool) -> Self {
        self.fail_fast = fail_fast;
        self
    }

    /// When the pause ends: the server's hint, capped by the account.
    pub fn until(&self) -> Instant {
        self.until
    }

    /// When the call meeting the pause may go (never before [`until`](Pause::until)).
    pub fn release_at(&self) -> Instant {
        self.release_at
    }

    /// Whether a call meeting the pause fails at once instead of waiting.
    pub fn is_fail_fast(&self) -> bool {
        self.fail_fast
    }
}

/// What a pause or a look at one changed in an origin's pause: what
/// [`BudgetAccount::pause_reporting`](crate::policy::BudgetAccount::pause_reporting)
/// and [`paused_reporting`](crate::policy::BudgetAccount::paused_reporting) return,
/// for the layers to tell the call's observer.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use backstop::budget::BudgetPolicy;
/// use backstop::policy::PauseChange;
/// use tokio::time::Instant;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// let handle = BudgetPolicy::default().account().handle();
/// let s = Duration::from_secs;
/// assert_eq!(handle.pause_reporting(Instant::now() + s(2)), Some(PauseChange::Paused { pause: s(2) }));
/// assert_eq!(handle.pause_reporting(Instant::now() + s(3)), Some(PauseChange::Extended { by: s(1) }));
/// // A pause that ends sooner changes nothing.
/// assert_eq!(handle.pause_reporting(Instant::now() + s(1)), None);
/// tokio::time::advance(s(3)).await;
/// // The first look after its end ends it.
/// assert_eq!(handle.paused_reporting(Instant::now()), (None, Some(PauseChange::Resumed)));
/// assert_eq!(handle.paused_reporting(Instant::now()), (None, None));
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PauseChange {
    /// The origin was not paused and now is, for `pause` from now.
    Paused {
        /// From now to the pause's end.
        pause: Duration,
    },
    /// An ongoing pause now ends `by` later.
    Extended {
        /// How much later the pause ends.
        by: Duration,
    },
    /// A pause was over and this look ended it: the origin is resumed.
    Resumed,
}

/// The wait a response asks of its whole origin, if any: the hint of a 429 (Too
/// Many Requests) or a 503 (Service Unavailable), read as the retry layer reads it
/// (`retry-after-ms`, then `Retry-After` as seconds or an HTTP-date); with feature
/// `grpc`, the `grpc-retry-pushback-ms` of a gRPC `UNAVAILABLE` or
/// `RESOURCE_EXHAUSTED` (`grpc_status::pushback_pause`).
///
/// This is the one place where a hint that pauses an origin is read: every layer
/// that pauses an origin (the retry layer on an answer it retries after, the
/// budget layer on a call's final answer) picks up each source of such hints.
/// The wall clock (`now`, for an HTTP-date) is read only for a status that can
/// carry one, so the success path reads no clock here.
pub(crate) fn pause_hint(
    status: StatusCode,
    headers: &HeaderMap,
    now: impl FnOnce() -> SystemTime,
) -> Option<Duration> {
    match hint_source(status)? {
        HintSource::RetryAfter => super::parse_retry_after(headers, now()).filter(|h| !h.is_zero()),
        #[cfg(feature = "grpc")]
        HintSource::Pushback => super::grpc_status::pushback_pause(headers),
    }
}

/// Where an answer with a given status carries its pause hint, if it may carry one.
enum HintSource {
    /// `retry-after-ms` or `Retry-After`, on a 429 or a 503.
    RetryAfter,
    /// gRPC's `grpc-retry-pushback-ms`, on a trailers-only answer (status 200).
    #[cfg(feature = "grpc")]
    Pushback,
}

/// The statuses whose answers may carry a pause hint, and where: the one list
/// [`pause_hint`] reads and [`may_hint_pause`] checks.
#[inline]
fn hint_source(status: StatusCode) -> Option<HintSource> {
    match status {
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => {
            Some(HintSource::RetryAfter)
        }
        #[cfg(feature = "grpc")]
        StatusCode::OK => Some(HintSource::Pushback),
        _ => None,
    }
}

/// Whether an answer with `status` may carry a pause hint at all (a status
/// [`pause_hint`] reads headers for): a cheap check before looking for one.
#[inline]
pub(crate) fn may_hint_pause(status: StatusCode) -> bool {
    hint_source(status).is_some()
}

/// Whether an answer is its origin refusing for overload: a 429 (Too Many
/// Requests) or a 503 (Service Unavailable); with feature `grpc`, a trailers-only
/// gRPC `UNAVAILABLE` or `RESOURCE_EXHAUSTED`. These are the answers whose hint
/// pauses an origin ([`pause_hint`]), and the ones adaptive throttling counts as
/// rejections.
pub(crate) fn is_overloaded(status: StatusCode, headers: &HeaderMap) -> bool {
    match status {
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => true,
        #[cfg(feature = "grpc")]
        StatusCode::OK => super::grpc_status::is_overloaded(headers),
        _ => {
            let _ = headers;
            false
        }
    }
}

/// Marks a response whose pause hint a layer beneath already set on its origin: a
/// hedge layer pauses the origin on the hint of a send that lost (or may yet lose)
/// the race, and the answer may still reach the layers above as the call's. They
/// do not pause the origin a second time for one answer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HintTaken;

/// The pause hint of `res` (see [`pause_hint`]) that no layer beneath has set on
/// its origin yet.
#[inline]
pub(crate) fn untaken_pause_hint<B>(res: &http::Response<B>) -> Option<Duration> {
    pause_hint(res.status(), res.headers(), SystemTime::now)
        .filter(|_| res.extensions().get::<HintTaken>().is_none())
}

/// Until when `res`'s origin should be paused, by its untaken hint received at
/// `now` (the clock is read only when there is a hint, if `now` is `None`).
#[inline]
pub(crate) fn pause_until<B>(res: &http::Response<B>, now: Option<Instant>) -> Option<Instant> {
    let hint = untaken_pause_hint(res)?;
    Some(super::later(now.unwrap_or_else(Instant::now), hint))
}

/// How a call that is about to send an attempt at `now` meets `pause`: `Ok(at)`
/// to wait until `at` and then go, `Err(())` when it must fail at once — the
/// account fails fast, or the deadline leaves no room for the pause plus
/// `min_attempt` (the release is cut to the deadline's last useful moment, never
/// before the pause's end).
pub(crate) fn meet(
    pause: &Pause,
    now: Instant,
    deadline: Option<Instant>,
    min_attempt: Duration,
) -> Result<Instant, ()> {
    if pause.is_fail_fast() {
        return Err(());
    }
    let Some(deadline) = deadline else {
        return Ok(pause.release_at());
    };
    let needed = pause
        .until()
        .saturating_duration_since(now)
        .saturating_add(min_attempt);
    if deadline.saturating_duration_since(now) < needed {
        return Err(());
    }
    let latest = deadline.checked_sub(min_attempt).unwrap_or(deadline);
    Ok(pause.release_at().min(latest).max(pause.until()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::RETRY_AFTER;
    use http::HeaderValue;

    #[test]
    fn a_hint_a_layer_beneath_already_took_is_not_taken_again() {
        let mut res = http::Response::new(());
        *res.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        res.headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from_static("2"));
        assert_eq!(untaken_pause_hint(&res), Some(Duration::from_secs(2)));
        res.extensions_mut().insert(HintTaken);
        assert_eq!(untaken_pause_hint(&res), None);
    }

    #[test]
    fn only_429_and_503_pause() {
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, HeaderValue::from_static("2"));
        let now = SystemTime::now();
        for (status, paused) in [(429, true), (503, true), (500, false), (200, false)] {
            let status = StatusCode::from_u16(status).unwrap();
            assert_eq!(
                pause_hint(status, &headers, || now).is_some(),
                paused,
                "{status}"
            );
        }
        headers.insert(RETRY_AFTER, HeaderValue::from_static("0"));
        assert_eq!(
            pause_hint(StatusCode::TOO_MANY_REQUESTS, &headers, || now),
            None
        );
    }

    #[cfg(feature = "grpc")]
    #[test]
    fn a_grpc_pushback_on_unavailable_or_resource_exhausted_pauses() {
        let now = SystemTime::now();
        let hint = |pairs: &[(&'static str, &'static str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.insert(*k, HeaderValue::from_static(v));
            }
            pause_hint(StatusCode::OK, &h, || now)
        };
        let grpc = ("content-type", "application/grpc+proto");
        let push = ("grpc-retry-pushback-ms", "1500");
        let s15 = Some(Duration::from_millis(1500));
        assert_eq!(hint(&[grpc, ("grpc-status", "14"), push]), s15);
        assert_eq!(hint(&[grpc, ("grpc-status", "8"), push]), s15);
        // Another code, no pushback, a zero, negative or junk one: no pause.
        assert_eq!(hint(&[grpc, ("grpc-status", "13"), push]), None);
        assert_eq!(hint(&[grpc, ("grpc-status", "0"), push]), None);
        assert_eq!(hint(&[grpc, ("grpc-status", "14")]), None);
        for bad in ["0", "-1", "soon", "", "99999999999999999999"] {
            let push = ("grpc-retry-pushback-ms", bad);
            assert_eq!(hint(&[grpc, ("grpc-status", "14"), push]), None, "{bad}");
        }
        // Not a gRPC response: its headers mean nothing.
        assert_eq!(hint(&[("grpc-status", "14"), push]), None);
        let json = ("content-type", "application/json");
        assert_eq!(hint(&[json, ("grpc-status", "14"), push]), None);
        // A trailers-only response is an HTTP 200; another status is not read so.
        let mut h = HeaderMap::new();
        h.insert("content-type", HeaderValue::from_static("application/grpc"));
        h.insert("grpc-status", HeaderValue::from_static("14"));
        h.insert("grpc-retry-pushback-ms", HeaderValue::from_static("1500"));
        assert_eq!(
            pause_hint(StatusCode::INTERNAL_SERVER_ERROR, &h, || now),
            None
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_waits_only_when_the_deadline_leaves_room() {
        let now = Instant::now();
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        let pause = Pause::new(now + s(2)).with_release(now + s(2) + ms(80));
        let min = ms(10);
        assert_eq!(meet(&pause, now, None, min), Ok(now + s(2) + ms(80)));
        assert_eq!(
            meet(&pause, now, Some(now + s(3)), min),
            Ok(now + s(2) + ms(80))
        );
        // The release is cut so that the minimum attempt time is left...
        assert_eq!(
            meet(&pause, now, Some(now + s(2) + ms(50)), min),
            Ok(now + s(2) + ms(40))
        );
        // ...and a deadline inside the pause (or too close after it) refuses.
        assert_eq!(meet(&pause, now, Some(now + s(2) + ms(9)), min), Err(()));
        assert_eq!(meet(&pause, now, Some(now + s(1)), min), Err(()));
        assert_eq!(meet(&pause.fail_fast(true), now, None, min), Err(()));
    }
}
