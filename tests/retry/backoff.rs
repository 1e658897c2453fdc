//! Each backoff shape as the retry layer waits it, on tokio's paused clock: a
//! scripted upstream answers 503 and the gaps between its attempts are the waits.

use std::time::Duration;

use crate::support::script::{ms, status, Script};
use backstop::policy::{History, Jitter, StopReason};
use backstop::{RetryLayer, RetryPolicy};
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use tower::{Layer, Service, ServiceExt};

/// The gaps between the attempts of one GET that `policy` retries until its
/// attempts run out, every attempt answered 503.
async fn gaps(policy: RetryPolicy) -> Vec<Duration> {
    let attempts = policy.max_attempts() as usize;
    let mock = Script::new(vec![status(503); attempts]);
    let mut svc = RetryLayer::new(policy).layer(mock.clone());
    let req = Request::get("http://upstream.test/")
        .body(Full::<Bytes>::default())
        .unwrap();
    let res = ServiceExt::<Request<Full<Bytes>>>::ready(&mut svc)
        .await
        .unwrap()
        .call(req)
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    let history = res.extensions().get::<History>().unwrap();
    assert_eq!(history.stop_reason(), Some(StopReason::AttemptsExhausted));
    assert_eq!(mock.calls(), attempts);
    mock.gaps()
}

/// ahttp_client's `backoff_factor 0.5`, `max_delay 4.0`: exactly 0.5, 1, 2, 4, 4 s.
#[tokio::test(start_paused = true)]
async fn without_jitter_the_waits_are_exact() {
    let policy = RetryPolicy::builder()
        .max_attempts(6)
        .backoff(ms(500), Duration::from_secs(4))
        .jitter(Jitter::None)
        .build()
        .unwrap();
    assert_eq!(
        gaps(policy).await,
        [ms(500), ms(1000), ms(2000), ms(4000), ms(4000)]
    );
}

/// Decorrelated jitter draws each wait from the call's previous one: every gap in
/// `[base, 3 · previous gap)` (a millisecond allowed for the timer's rounding), and
/// the waits grow past `3 · base`, which a draw from the first retry's range alone
/// never reaches.
#[tokio::test(start_paused = true)]
async fn decorrelated_jitter_follows_the_previous_wait() {
    let policy = RetryPolicy::builder()
        .max_attempts(10)
        .backoff(ms(10), Duration::from_secs(60))
        .jitter(Jitter::Decorrelated)
        .build()
        .unwrap();
    let mut longest = Duration::ZERO;
    for _ in 0..10 {
        let gaps = gaps(policy.clone()).await;
        let mut previous = ms(10);
        for gap in gaps {
            assert!(
                ms(10) <= gap && gap <= previous * 3 + ms(1),
                "{gap:?} after {previous:?}"
            );
            previous = gap;
            longest = longest.max(gap);
        }
    }
    assert!(longest > ms(31), "never past 3 · base: {longest:?}");
}

/// AWS's equal jitter: each gap from half the term to the term.
#[tokio::test(start_paused = true)]
async fn equal_jitter_waits_at_least_half_the_term() {
    let policy = RetryPolicy::builder()
        .max_attempts(6)
        .backoff(ms(100), Duration::from_secs(1))
        .jitter(Jitter::Equal)
        .build()
        .unwrap();
    for _ in 0..10 {
        let gaps = gaps(policy.clone()).await;
        for (gap, term) in gaps.into_iter().zip([100, 200, 400, 800, 1000]) {
            assert!(
                ms(term / 2) <= gap && gap <= ms(term),
                "{gap:?} for {term} ms"
            );
        }
    }
}

/// clientwright's 0.1 s, ×2, 10 s cap, ±20 %: each gap within its band.
#[tokio::test(start_paused = true)]
async fn proportional_jitter_keeps_each_wait_in_its_band() {
    let policy = RetryPolicy::builder()
        .max_attempts(10)
        .backoff(ms(100), Duration::from_secs(10))
        .backoff_multiplier(2.0)
        .jitter(Jitter::Proportional(0.2))
        .max_retry_after(Duration::from_secs(20))
        .build()
        .unwrap();
    let centres = [100, 200, 400, 800, 1600, 3200, 6400, 10_000, 10_000];
    for _ in 0..5 {
        for (gap, centre) in gaps(policy.clone()).await.into_iter().zip(centres) {
            let (low, high) = (ms(centre * 8 / 10), ms(centre * 12 / 10 + 1));
            assert!(low <= gap && gap <= high, "{gap:?} around {centre} ms");
        }
    }
}
