//! The origin pause on tokio's paused clock: a 429 or 503 with a hint keeps every
//! call away from its origin until the hint ends, then releases them spread out.

use crate::support::shape::BudgetLayer;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::support::requests::{call, get, head};
use crate::support::script::{slow, status, status_with, Reply, Script, Step};
use crate::support::shape::{Shape, Stack};
use backstop::budget::{BudgetPolicy, PauseMode};
use backstop::policy::{BudgetAccount, BudgetHandle, Deadline, History, StopReason};
use backstop::RetryPolicy;
use http::StatusCode;
use tokio::time::{sleep, Instant};
use tower::util::BoxCloneService;
use tower::{Service, ServiceBuilder, ServiceExt};

type Client = BoxCloneService<
    http::Request<http_body_util::Full<bytes::Bytes>>,
    http::Response<Reply>,
    backstop::Error,
>;

const A: &str = "http://a.test/";

fn retries() -> RetryPolicy {
    RetryPolicy::builder()
        .max_attempts(3)
        .backoff(Duration::from_millis(10), Duration::from_millis(50))
        .build()
        .unwrap()
}

/// The stack: budget and retry over `mock`.
fn client(layer: &BudgetLayer, retry: RetryPolicy, mock: &Script) -> Client {
    let stack = Stack::new(retry).budget(layer);
    crate::stacked!(stack, mock.clone())
}

/// The separate layers: `BudgetLayer → RetryLayer → mock`.
fn layered(layer: &BudgetLayer, retry: RetryPolicy, mock: &Script) -> Client {
    let stack = Stack::new(retry).budget(layer);
    crate::shaped!(Shape::Layers, stack, mock.clone())
}

/// The stack: budget, retry and hedge (a copy after 100 ms) over `mock`.
fn hedged_client(layer: &BudgetLayer, mock: &Script) -> Client {
    let stack = Stack::new(retries())
        .budget(layer)
        .hedge(backstop::hedge::HedgePolicy::after(ms(100)));
    crate::stacked!(stack, mock.clone())
}

fn spawn_call(
    mut client: Client,
    uri: &'static str,
) -> tokio::task::JoinHandle<Result<http::Response<Reply>, backstop::Error>> {
    tokio::spawn(async move { call(&mut client, uri).await })
}

/// Calls `uri` with a deadline `after` from now.
async fn call_within(
    client: &mut Client,
    uri: &str,
    after: Duration,
) -> Result<http::Response<Reply>, backstop::Error> {
    let mut req = get(uri);
    req.extensions_mut().insert(Deadline::after(after));
    client.ready().await?.call(req).await
}

/// Pauses `a.test` with one call that is not retried: its 429's hint reaches the
/// budget layer as the final answer.
async fn pause_with(layer: &BudgetLayer, headers: &[(&'static str, &'static str)]) {
    let mock = Script::new([status_with(429, headers)]);
    let mut once = client(layer, RetryPolicy::none(), &mock);
    let res = call(&mut once, A).await.unwrap();
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
}

/// Pauses `a.test` for 2 s through a service of `layer` over the pausing answer
/// alone (no retry layer: the 429 is the call's final answer).
async fn pause_through(layer: &BudgetLayer) {
    let pausing = Script::new([status_with(429, &[("retry-after", "2")])]);
    let mut direct = ServiceBuilder::new().layer(layer.clone()).service(pausing);
    assert_eq!(call(&mut direct, A).await.unwrap().status(), 429);
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test(start_paused = true)]
async fn a_429_with_retry_after_2_pauses_the_origin_and_other_calls_wait() {
    let layer = BudgetLayer::default();
    let mock = Script::new([status_with(429, &[("retry-after", "2")])]);
    let c = client(&layer, retries(), &mock);
    let t0 = Instant::now();
    let first = spawn_call(c.clone(), A);
    // On the paused clock this runs once the first call's 429 is in and its retry
    // is waiting out the hint.
    sleep(ms(1)).await;
    let account = layer.account(&head(A));
    assert_eq!(account.paused_until(), Some(t0 + Duration::from_secs(2)));
    assert_eq!(mock.calls(), 1);
    let others: Vec<_> = (0..5).map(|_| spawn_call(c.clone(), A)).collect();
    sleep(ms(1998)).await;
    // t0 + 1999 ms: nothing else reached the origin.
    assert_eq!(mock.calls(), 1);
    assert!(account.paused_until().is_some());

    let res = first.await.unwrap().unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    for other in others {
        let res = other.await.unwrap().unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        // Held before its first attempt, not retried: one attempt, and a history
        // that tells the hold (from t0 + 1 ms to the end of the pause and a share
        // of the release spread).
        let history = res.extensions().get::<History>().expect("history");
        assert_eq!(history.len(), 1);
        let hold = history.held().expect("held");
        assert!(ms(1_999) <= hold && hold <= ms(2_200), "{hold:?}");
    }
    let seen = mock.seen();
    assert_eq!(seen.len(), 7);
    // The retry waiting for the same hint goes when the pause ends, not later...
    assert_eq!(seen[1].at, t0 + Duration::from_secs(2));
    // ...and the calls that waited go within the release spread after it.
    for s in &seen[2..] {
        assert!(s.at >= t0 + Duration::from_secs(2), "{:?}", s.at - t0);
        // Tokio's timer fires on whole milliseconds, rounding up.
        assert!(s.at <= t0 + ms(2200), "{:?}", s.at - t0);
    }
    assert_eq!(account.paused_until(), None);
}

#[tokio::test(start_paused = true)]
async fn a_call_whose_deadline_ends_inside_the_pause_fails_at_once_with_the_hint() {
    let layer = BudgetLayer::default();
    pause_with(&layer, &[("retry-after", "2")]).await;
    let mock = Script::new([]);
    let mut c = client(&layer, retries(), &mock);
    let t0 = Instant::now();

    for deadline in [ms(500), ms(1999), ms(2009)] {
        let err = call_within(&mut c, A, deadline).await.unwrap_err();
        assert_eq!(Instant::now(), t0, "refused at once");
        assert!(err.is_paused(), "{err}");
        assert!(err.is_retryable() && err.is_not_processed());
        assert_eq!(err.stop_reason(), Some(StopReason::Paused));
        assert_eq!(err.retry_after(), Some(Duration::from_secs(2)));
        assert_eq!(err.paused_until(), Some(t0 + Duration::from_secs(2)));
        let paused = std::error::Error::source(&err)
            .and_then(|e| e.downcast_ref::<backstop::OriginPaused>())
            .unwrap();
        assert_eq!(paused.until(), t0 + Duration::from_secs(2));
    }
    assert_eq!(mock.calls(), 0, "a refused call never touches the network");

    // Room for the pause plus the minimum attempt time: it waits, then goes,
    // released no later than its deadline allows.
    let res = call_within(&mut c, A, ms(2050)).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let at = mock.seen()[0].at - t0;
    assert!((ms(2000)..=ms(2040)).contains(&at), "{at:?}");
}

use crate::support::policies::three_within as within;

#[tokio::test(start_paused = true)]
async fn a_call_behind_a_budget_layer_is_held_within_its_retry_policys_total_timeout() {
    let layer = BudgetLayer::default();
    pause_with(&layer, &[("retry-after", "2")]).await;
    let t0 = Instant::now();

    // A total timeout that ends inside the pause: refused at once.
    let mock = Script::new([]);
    let mut c = client(&layer, within(ms(500)), &mock);
    let err = call(&mut c, A).await.unwrap_err();
    assert_eq!(Instant::now(), t0, "refused at once");
    assert!(err.is_paused(), "{err}");
    assert_eq!(err.paused_until(), Some(t0 + Duration::from_secs(2)));
    assert_eq!(mock.calls(), 0);

    // Room for the pause: held, then sent, and the hold counts in the call's
    // time, so a first attempt that hangs is cut at the timeout from the call's
    // start, not from its release.
    let mock = Script::new([Step::Hang]);
    let mut c = client(&layer, within(Duration::from_secs(3)), &mock);
    let err = call(&mut c, A).await.unwrap_err();
    assert!(err.is_deadline(), "{err}");
    assert_eq!(mock.calls(), 1);
    assert!(mock.seen()[0].at >= t0 + Duration::from_secs(2), "held");
    assert_eq!(Instant::now(), t0 + Duration::from_secs(3));
}

#[tokio::test(start_paused = true)]
async fn a_held_call_its_deadline_refuses_on_release_is_not_counted() {
    // Released at the pause's end with 100 ms of its timeout left: enough for the
    // budget's minimum, less than the policy's own minimum attempt time. Alike in
    // both shapes: behind a budget layer (whose service learned from its first
    // call that a retry layer is beneath it), the retry layer holds the call.
    for shape in [Shape::Stack, Shape::Layers] {
        let budget = BudgetPolicy::builder()
            .ratio(1.0)
            .min_per_second(0.0)
            .pause_spread(Duration::ZERO)
            .pause_min_attempt_time(ms(50))
            .build()
            .unwrap();
        let layer = BudgetLayer::new(budget);
        let policy = RetryPolicy::builder()
            .max_attempts(3)
            .timeout(ms(2_100))
            .min_attempt_time(ms(200))
            .build()
            .unwrap();
        let mock = Script::new([status(200)]);
        let stack = Stack::new(policy).budget(&layer);
        let mut c = crate::shaped!(shape, stack, mock.clone());
        assert_eq!(call(&mut c, A).await.unwrap().status(), StatusCode::OK);
        let pausing = Script::new([status_with(429, &[("retry-after", "2")])]);
        let stack = Stack::new(RetryPolicy::none()).budget(&layer);
        let res = call(&mut crate::shaped!(shape, stack, pausing), A).await;
        assert_eq!(res.unwrap().status(), StatusCode::TOO_MANY_REQUESTS);
        let account = || layer.account(&head(A));
        let before = account().available();
        let err = call(&mut c, A).await.unwrap_err();
        assert!(err.is_deadline(), "{shape:?}: {err}");
        assert_eq!(mock.calls(), 1, "{shape:?}");
        assert_eq!(
            account().available(),
            before,
            "{shape:?}: a call that sent nothing bought nothing"
        );
    }
}

/// A budget layer's service over `inner`.
fn budgeted<S>(layer: &BudgetLayer, inner: S) -> backstop::budget::Budget<S> {
    ServiceBuilder::new().layer(layer.clone()).service(inner)
}

#[tokio::test(start_paused = true)]
async fn behind_a_buffer_no_attempt_goes_during_the_pause() {
    // BudgetLayer -> Buffer -> RetryLayer: the Buffer's worker calls the retry layer
    // after the budget layer's call returned, so the budget layer starts holding the
    // call itself; the retry layer, taking the note later, claims the hold and meets
    // it within its policy's timeout (it wakes the budget layer, which stops
    // holding): refused at once, nothing sent, nothing counted, as in the stack.
    let layer = BudgetLayer::new(
        BudgetPolicy::builder()
            .ratio(1.0)
            .min_per_second(0.0)
            .build()
            .unwrap(),
    );
    let mock = Script::new([status(200)]);
    // A client within `timeout` that has made a call (its budget service knows a
    // retry layer is beneath), and the origin paused for 2 s.
    let paused_client = |timeout: Duration| {
        let (layer, mock) = (layer.clone(), mock.clone());
        async move {
            let mut c = budgeted(
                &layer,
                ServiceBuilder::new()
                    .buffer::<http::Request<http_body_util::Full<bytes::Bytes>>>(8)
                    .layer(backstop::RetryLayer::new(within(timeout)))
                    .service(mock),
            );
            assert_eq!(call(&mut c, A).await.unwrap().status(), StatusCode::OK);
            let pausing = Script::new([status_with(429, &[("retry-after", "2")])]);
            let res = call(&mut layered(&layer, RetryPolicy::none(), &pausing), A).await;
            assert_eq!(res.unwrap().status(), StatusCode::TOO_MANY_REQUESTS);
            c
        }
    };
    let available = || layer.account(&head(A)).available();
    let mut c = paused_client(ms(500)).await;
    let (t0, before) = (Instant::now(), available());
    let err = call(&mut c, A).await.unwrap_err();
    assert!(err.is_paused(), "{err}");
    assert_eq!(mock.calls(), 1, "nothing sent during the pause");
    assert_eq!(Instant::now(), t0, "refused at once");
    assert_eq!(available(), before, "nothing counted");
    // Room for the pause: held by the retry layer, then sent, and counted once.
    let mut c = paused_client(ms(5000)).await;
    let (t1, before) = (Instant::now(), available());
    assert_eq!(call(&mut c, A).await.unwrap().status(), StatusCode::OK);
    let sent = mock.seen().last().unwrap().at - t1;
    assert!((ms(2000)..=ms(2200)).contains(&sent), "{sent:?}");
    assert_eq!(available(), before + 1, "counted once");
}

#[tokio::test(start_paused = true)]
async fn a_stack_beneath_a_budget_layer_that_refuses_a_call_settles_its_hold() {
    // BudgetLayer -> Backstop stack with a budget of its own: the stack's admission
    // refuses the call at once (its timeout ends inside the pause), and the budget
    // layer neither holds nor counts it.
    let budget = || {
        BudgetPolicy::builder()
            .ratio(1.0)
            .min_per_second(0.0)
            .pause_spread(Duration::ZERO)
            .build()
            .unwrap()
    };
    let layer = BudgetLayer::new(budget());
    let stack = backstop::Backstop::builder()
        .retry(within(ms(500)))
        .budget(budget())
        .build()
        .unwrap();
    let mock = Script::new([status_with(429, &[("retry-after", "2")])]);
    let mut c = budgeted(&layer, tower::Layer::layer(&stack, mock.clone()));
    // Its first call teaches the budget layer a retry layer is beneath; its 429
    // pauses both accounts.
    assert_eq!(call(&mut c, A).await.unwrap().status(), 429);
    let available = layer.account(&head(A)).available();
    let t0 = Instant::now();
    let err = call(&mut c, A).await.unwrap_err();
    assert!(err.is_paused(), "{err}");
    assert_eq!(Instant::now(), t0, "refused at once");
    assert_eq!(mock.calls(), 1);
    assert_eq!(
        layer.account(&head(A)).available(),
        available,
        "nothing counted"
    );
}

#[tokio::test(start_paused = true)]
async fn a_new_budget_service_holds_a_call_before_calling_its_inner_service() {
    // Another service of a layer that learned a retry layer is beneath it: a new
    // service knows nothing yet, so it holds its first held call itself, and its
    // transport (which sends as its `call` runs) is called once the pause is over.
    let layer = BudgetLayer::default();
    let pausing = Script::new([status_with(429, &[("retry-after", "2")])]);
    let res = call(&mut layered(&layer, RetryPolicy::none(), &pausing), A).await;
    assert_eq!(res.unwrap().status(), StatusCode::TOO_MANY_REQUESTS);
    let t0 = Instant::now();
    let mock = Script::new([]);
    let mut direct = budgeted(&layer, mock.clone());
    assert_eq!(call(&mut direct, A).await.unwrap().status(), StatusCode::OK);
    assert!(
        mock.seen()[0].at >= t0 + Duration::from_secs(2),
        "sent during the pause"
    );
}

#[tokio::test(start_paused = true)]
async fn a_retry_whose_deadline_ends_inside_the_pause_stops_with_paused() {
    let layer = BudgetLayer::default();
    let mock = Script::new([status(503)]);
    let mut c = client(&layer, retries(), &mock);
    let t0 = Instant::now();
    // The first attempt goes before the pause; another call's answer then pauses
    // the origin for 2 s while this one's backoff runs.
    let mut req = get(A);
    req.extensions_mut()
        .insert(Deadline::after(Duration::from_secs(1)));
    let call = tokio::spawn(async move { c.ready().await?.call(req).await });
    tokio::task::yield_now().await;
    layer.account(&head(A)).pause(t0 + Duration::from_secs(2));
    let err = call.await.unwrap().unwrap_err();
    let elapsed = Instant::now() - t0;
    assert!(
        elapsed <= ms(50),
        "stopped at the end of its backoff: {elapsed:?}"
    );
    // The 503's body was drained for the retry, so the error names its status.
    assert_eq!(err.status(), Some(StatusCode::SERVICE_UNAVAILABLE));
    assert!(err.is_paused() && err.is_retryable(), "{err}");
    assert_eq!(err.retry_after(), Some(Duration::from_secs(2) - elapsed));
    assert_eq!(err.paused_until(), Some(t0 + Duration::from_secs(2)));
    assert_eq!(err.attempts(), 1);
    assert_eq!(mock.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_retry_in_its_backoff_waits_for_a_pause_set_meanwhile() {
    let layer = BudgetLayer::default();
    let mock = Script::new([status(503)]);
    let c = client(&layer, retries(), &mock);
    let t0 = Instant::now();
    let call = spawn_call(c, A);
    tokio::task::yield_now().await;
    // Another call's 429 pauses the origin while this call's backoff (≤ 50 ms) runs.
    pause_with(&layer, &[("retry-after", "2")]).await;
    let res = call.await.unwrap().unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let seen = mock.seen();
    assert_eq!(seen.len(), 2);
    let retried = seen[1].at - t0;
    assert!((ms(2000)..=ms(2200)).contains(&retried), "{retried:?}");
    let h = res.extensions().get::<History>().unwrap();
    assert!(h.attempts()[0].wait.unwrap() >= ms(1950));
}

#[tokio::test(start_paused = true)]
async fn fail_fast_refuses_every_call_until_the_pause_ends() {
    let policy = BudgetPolicy::builder()
        .pause_mode(PauseMode::FailFast)
        .build()
        .unwrap();
    let layer = BudgetLayer::new(policy);
    pause_with(&layer, &[("retry-after", "2")]).await;
    let mock = Script::new([]);
    let mut c = client(&layer, retries(), &mock);
    // No deadline at all: still refused.
    let err = call(&mut c, A).await.unwrap_err();
    assert!(err.is_paused() && err.is_retryable());
    assert_eq!(err.retry_after(), Some(Duration::from_secs(2)));
    sleep(ms(1500)).await;
    let err = call(&mut c, A).await.unwrap_err();
    assert_eq!(err.retry_after(), Some(ms(500)));
    assert_eq!(mock.calls(), 0);
    sleep(ms(500)).await;
    assert_eq!(call(&mut c, A).await.unwrap().status(), StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn a_call_refused_for_the_pause_is_not_counted_as_a_first_attempt() {
    // Each first attempt buys half a retry; there is no floor.
    let policy = BudgetPolicy::builder()
        .ratio(0.5)
        .min_per_second(0.0)
        .pause_mode(PauseMode::FailFast)
        .build()
        .unwrap();
    let layer = BudgetLayer::new(policy);
    pause_with(&layer, &[("retry-after", "2")]).await;
    let account = || layer.account(&head(A));
    assert_eq!(account().available(), 0, "half a retry");
    let mock = Script::new([]);
    let mut c = client(&layer, retries(), &mock);
    for _ in 0..10 {
        assert!(call(&mut c, A).await.unwrap_err().is_paused());
    }
    // Ten calls that sent nothing bought no retries for after the pause.
    assert_eq!(account().available(), 0);
    sleep(Duration::from_secs(2)).await;
    assert_eq!(call(&mut c, A).await.unwrap().status(), StatusCode::OK);
    assert_eq!(account().available(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_held_call_is_counted_once_when_it_goes() {
    let policy = BudgetPolicy::builder()
        .ratio(0.5)
        .min_per_second(0.0)
        .build()
        .unwrap();
    let layer = BudgetLayer::new(policy);
    pause_with(&layer, &[("retry-after", "2")]).await;
    let account = || layer.account(&head(A));
    let mock = Script::new([]);
    let c = client(&layer, retries(), &mock);
    let held: Vec<_> = (0..3).map(|_| spawn_call(c.clone(), A)).collect();
    sleep(ms(1_000)).await;
    assert_eq!(account().available(), 0, "held calls have sent nothing yet");
    for call in held {
        let res = call.await.unwrap().unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        // The hold is on the answer's history, though its first attempt answered:
        // the 2 s pause and its share of the release spread.
        let history = res.extensions().get::<History>().expect("history");
        let hold = history.held().expect("held");
        assert!(ms(2_000) <= hold && hold <= ms(2_200), "{hold:?}");
        assert_eq!(history.len(), 1);
        assert!(history.to_string().starts_with("held 2."), "{history}");
    }
    // The call that paused the origin and the three held ones: two retries.
    assert_eq!(mock.calls(), 3);
    assert_eq!(account().available(), 2);
}

#[tokio::test(start_paused = true)]
async fn release_is_spread_over_the_spread() {
    let layer = BudgetLayer::default();
    pause_with(&layer, &[("retry-after", "2")]).await;
    let mock = Script::new([]);
    let c = client(&layer, retries(), &mock);
    let t0 = Instant::now();
    let calls: Vec<_> = (0..50).map(|_| spawn_call(c.clone(), A)).collect();
    for call in calls {
        assert_eq!(call.await.unwrap().unwrap().status(), StatusCode::OK);
    }
    let mut at: Vec<Duration> = mock.seen().iter().map(|s| s.at - t0).collect();
    at.sort();
    assert_eq!(at.len(), 50);
    // Each is released at the end plus a uniform share of 200 ms (tokio's timer
    // fires on whole milliseconds, rounding up)...
    assert!(at[0] >= ms(2000) && at[49] <= ms(2200), "{at:?}");
    // ...so they arrive as a ramp, not a burst.
    assert!(at[49] - at[0] >= ms(100), "{at:?}");
    // Every quarter of the spread gets some (all 50 missing one: p ≈ 2e-6), and
    // few share a millisecond (fewer than 30 distinct of 200: p < 1e-12).
    for q in 0..4u64 {
        let quarter = ms(2000 + 50 * q)..ms(2050 + 50 * q + u64::from(q == 3));
        assert!(at.iter().any(|a| quarter.contains(a)), "{q}: {at:?}");
    }
    at.dedup();
    assert!(at.len() >= 30, "{at:?}");
}

#[tokio::test(start_paused = true)]
async fn a_zero_spread_releases_at_the_end_exactly() {
    let policy = BudgetPolicy::builder()
        .pause_spread(Duration::ZERO)
        .build()
        .unwrap();
    let layer = BudgetLayer::new(policy);
    pause_with(&layer, &[("retry-after", "1")]).await;
    let mock = Script::new([]);
    let c = client(&layer, retries(), &mock);
    let t0 = Instant::now();
    let calls: Vec<_> = (0..5).map(|_| spawn_call(c.clone(), A)).collect();
    for call in calls {
        call.await.unwrap().unwrap();
    }
    assert!(mock
        .seen()
        .iter()
        .all(|s| s.at == t0 + Duration::from_secs(1)));
}

#[tokio::test(start_paused = true)]
async fn another_origin_is_never_paused() {
    let layer = BudgetLayer::default();
    pause_with(&layer, &[("retry-after", "2")]).await;
    let mock = Script::new([]);
    let mut c = client(&layer, retries(), &mock);
    let t0 = Instant::now();
    for uri in ["http://b.test/", "https://a.test/", "http://a.test:8080/"] {
        assert_eq!(call(&mut c, uri).await.unwrap().status(), StatusCode::OK);
        assert_eq!(layer.account(&head(uri)).paused_until(), None);
    }
    assert!(mock.seen().iter().all(|s| s.at == t0));
    assert!(layer.account(&head(A)).paused_until().is_some());
}

#[tokio::test(start_paused = true)]
async fn every_form_of_the_hint_pauses_and_the_cap_holds() {
    let t0 = Instant::now();
    let date = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(5));
    let date: &'static str = Box::leak(date.into_boxed_str());
    type Headers<'a> = &'a [(&'static str, &'static str)];
    let cases: [(Headers<'_>, Duration, Duration); 5] = [
        (&[("retry-after", "2")], ms(2000), ms(2000)),
        (&[("retry-after", "1.5")], ms(1500), ms(1500)),
        (&[("retry-after-ms", "750")], ms(750), ms(750)),
        // A date has whole seconds: 4 to 5 s from now.
        (&[("retry-after", date)], ms(4000), ms(5000)),
        // Over the cap: the cap (10 s by default), never more.
        (&[("retry-after", "3600")], ms(10_000), ms(10_000)),
    ];
    for (headers, low, high) in cases {
        let layer = BudgetLayer::default();
        pause_with(&layer, headers).await;
        let until = layer.account(&head(A)).paused_until().unwrap();
        assert!(
            (low..=high).contains(&(until - t0)),
            "{headers:?}: {:?}",
            until - t0
        );
    }
    // No hint, a zero hint, or a status that does not pause: no pause.
    for (code, headers) in [
        (429, &[][..]),
        (429, &[("retry-after", "0")][..]),
        (500, &[("retry-after", "2")][..]),
        (200, &[("retry-after", "2")][..]),
    ] {
        let layer = BudgetLayer::default();
        let mock = Script::new([status_with(code, headers)]);
        call(&mut client(&layer, RetryPolicy::none(), &mock), A)
            .await
            .unwrap();
        assert_eq!(layer.account(&head(A)).paused_until(), None, "{code}");
    }
    // A 503's hint pauses too, and a shorter later hint does not shorten it.
    let layer = BudgetLayer::default();
    let mock = Script::new([
        status_with(503, &[("retry-after", "3")]),
        status_with(429, &[("retry-after", "1")]),
    ]);
    let mut c = client(&layer, RetryPolicy::none(), &mock);
    call(&mut c, A).await.unwrap();
    assert_eq!(
        layer.account(&head(A)).paused_until(),
        Some(t0 + Duration::from_secs(3))
    );
    let account = layer.account(&head(A));
    account.pause(t0 + Duration::from_secs(1));
    assert_eq!(account.paused_until(), Some(t0 + Duration::from_secs(3)));
}

#[tokio::test(start_paused = true)]
async fn the_retry_layer_pauses_the_origin_on_an_answer_it_retries_after() {
    // The budget's cap (5 s) is shorter than the retry's own (10 s): the retry
    // waits out its 8 s hint, the origin is paused for 5 s only.
    let policy = BudgetPolicy::builder()
        .max_pause(Duration::from_secs(5))
        .build()
        .unwrap();
    let layer = BudgetLayer::new(policy);
    let mock = Script::new([status_with(503, &[("retry-after", "8")])]);
    let c = client(&layer, retries(), &mock);
    let t0 = Instant::now();
    let first = spawn_call(c.clone(), A);
    sleep(ms(1)).await;
    assert_eq!(
        layer.account(&head(A)).paused_until(),
        Some(t0 + Duration::from_secs(5))
    );
    let second = spawn_call(c, A);
    assert_eq!(second.await.unwrap().unwrap().status(), StatusCode::OK);
    let at = Instant::now() - t0;
    assert!((ms(5000)..=ms(5200)).contains(&at), "{at:?}");
    first.await.unwrap().unwrap();
    assert_eq!(mock.seen()[2].at, t0 + Duration::from_secs(8));
}

#[tokio::test(start_paused = true)]
async fn with_the_pause_off_only_the_call_that_got_the_hint_waits() {
    let policy = BudgetPolicy::builder()
        .pause_mode(PauseMode::Off)
        .build()
        .unwrap();
    let layer = BudgetLayer::new(policy);
    pause_with(&layer, &[("retry-after", "2")]).await;
    assert_eq!(layer.account(&head(A)).paused_until(), None);
    let mock = Script::new([]);
    let mut c = client(&layer, retries(), &mock);
    let t0 = Instant::now();
    call(&mut c, A).await.unwrap();
    assert_eq!(mock.seen()[0].at, t0);
}

#[tokio::test(start_paused = true)]
async fn a_budget_layer_learns_that_a_retry_layer_is_beneath_from_a_call_it_held() {
    // A new budget service over a retry layer holds its first held call itself;
    // the call teaches it, as it goes, that a retry layer is beneath, and from then
    // on the retry layer holds its calls, within its policy's timeout.
    let layer = counting();
    let available = || layer.account(&head(A)).available();
    pause_through(&layer).await;
    let (t0, before) = (Instant::now(), available());
    let mock = Script::new([]);
    let mut retried = layered(&layer, within(ms(500)), &mock);
    // Held by the budget layer, which knows no timeout, to the pause's end; the
    // rest of the hold goes down with the call, and the retry layer, whose timeout
    // counts from the call's date, refuses it: nothing sent, nothing counted.
    let err = call(&mut retried, A).await.unwrap_err();
    assert!(err.is_paused(), "{err}");
    assert_eq!(Instant::now() - t0, Duration::from_secs(2));
    assert_eq!(mock.calls(), 0);
    assert_eq!(
        available(),
        before,
        "a call that sent nothing bought nothing"
    );
    // Paused again: the retry layer beneath refuses the call at once.
    pause_through(&layer).await;
    let t1 = Instant::now();
    let err = call(&mut retried, A).await.unwrap_err();
    assert!(err.is_paused(), "{err}");
    assert_eq!(Instant::now(), t1, "refused at once");
    assert_eq!(mock.calls(), 0);
    // A new service with room for the pause: held by the budget layer, then met
    // again by the retry layer beneath (the pause is over), sent, counted once.
    let (t2, before) = (Instant::now(), available());
    let mut roomy = layered(&layer, within(ms(5000)), &mock);
    assert_eq!(call(&mut roomy, A).await.unwrap().status(), StatusCode::OK);
    assert_eq!(mock.seen()[0].at - t2, Duration::from_secs(2));
    assert_eq!(available(), before + 1, "counted once");
}

#[tokio::test(start_paused = true)]
async fn the_budget_alone_holds_a_paused_call() {
    // No retry layer: the budget layer pauses on the answer and holds the next call.
    let layer = BudgetLayer::default();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    let transport = tower::service_fn(
        move |_req: http::Request<http_body_util::Full<bytes::Bytes>>| {
            let mut seen = record.lock().unwrap();
            seen.push(Instant::now());
            let mut res = http::Response::new(http_body_util::Full::<bytes::Bytes>::default());
            if seen.len() == 1 {
                *res.status_mut() = StatusCode::TOO_MANY_REQUESTS;
                res.headers_mut()
                    .insert("retry-after", http::HeaderValue::from_static("1"));
            }
            async move { Ok::<_, std::io::Error>(res) }
        },
    );
    let mut svc = ServiceBuilder::new().layer(layer).service(transport);
    let t0 = Instant::now();
    let res = call(&mut svc, A).await.unwrap();
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    let res = call(&mut svc, A).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    assert!((Duration::from_secs(1)..=ms(1200)).contains(&(seen[1] - t0)));
}

#[tokio::test(start_paused = true)]
async fn a_custom_account_never_pauses() {
    // An account of one's own keeps compiling: the pause methods have defaults.
    struct Unlimited;
    impl BudgetAccount for Unlimited {
        fn try_withdraw(&self) -> bool {
            true
        }
    }
    let handle = BudgetHandle::new(Arc::new(Unlimited));
    handle.pause(Instant::now() + Duration::from_secs(5));
    assert_eq!(handle.paused(Instant::now()), None);
    assert_eq!(handle.paused_until(), None);
}

#[tokio::test(start_paused = true)]
async fn no_hedge_is_sent_to_a_paused_origin() {
    use backstop::hedge::{Hedged, NotHedged};
    let layer = BudgetLayer::default();
    let mock = Script::new([slow(ms(300), 200)]);
    let mut c = hedged_client(&layer, &mock);
    let t0 = Instant::now();
    // Another call's answer pauses the origin while the first attempt is out.
    let account = layer.account(&head(A));
    tokio::spawn(async move {
        sleep(ms(50)).await;
        account.pause(t0 + Duration::from_secs(2));
    });
    let res = call(&mut c, A).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(Instant::now() - t0, ms(300));
    assert_eq!(mock.calls(), 1);
    let hedged = Hedged::of(&res).unwrap();
    assert_eq!(hedged.not_sent(), Some(NotHedged::Paused));
    assert_eq!(hedged.copies(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_retry_does_not_wait_for_a_pause_longer_than_its_max_retry_after() {
    let layer = BudgetLayer::default();
    let mock = Script::new([status(503)]);
    let policy = RetryPolicy::builder()
        .max_attempts(3)
        .backoff(ms(10), ms(50))
        .max_retry_after(Duration::from_secs(1))
        .build()
        .unwrap();
    let c = client(&layer, policy, &mock);
    let t0 = Instant::now();
    let call = spawn_call(c, A);
    tokio::task::yield_now().await;
    // Another call's answer pauses the origin for 2 s during this call's backoff.
    layer.account(&head(A)).pause(t0 + Duration::from_secs(2));
    let err = call.await.unwrap().unwrap_err();
    assert!(Instant::now() - t0 <= ms(50));
    assert!(err.is_paused(), "{err}");
    assert_eq!(err.status(), Some(StatusCode::SERVICE_UNAVAILABLE));
    assert_eq!(mock.calls(), 1);
}

// gRPC's pushback pauses the origin as a 429's `Retry-After` does: on the
// answer the retry layer retries after, and on a final answer the budget layer
// sees; capped by `max_pause` the same way.
#[cfg(feature = "grpc")]
#[tokio::test(start_paused = true)]
async fn a_grpc_pushback_pauses_the_origin_like_a_retry_after() {
    use backstop::grpc::{self, Code};

    let trailers_only = |code: &'static str, pushback: &'static str| {
        status_with(
            200,
            &[
                ("content-type", "application/grpc"),
                ("grpc-status", code),
                ("grpc-retry-pushback-ms", pushback),
            ],
        )
    };
    let rules = grpc::rules()
        .retryable_codes([Code::Unavailable])
        .all_idempotent()
        .build()
        .unwrap();
    let grpc_retries = RetryPolicy::builder()
        .rules(rules)
        .max_attempts(2)
        .build()
        .unwrap();

    // UNAVAILABLE, retried after its pushback: other calls wait for it too.
    let layer = BudgetLayer::new(
        BudgetPolicy::builder()
            .pause_spread(Duration::ZERO)
            .build()
            .unwrap(),
    );
    let mock = Script::new([trailers_only("14", "2000")]);
    let c = client(&layer, grpc_retries.clone(), &mock);
    let t0 = Instant::now();
    let first = spawn_call(c.clone(), A);
    sleep(ms(1)).await;
    let account = layer.account(&head(A));
    assert_eq!(account.paused_until(), Some(t0 + Duration::from_secs(2)));
    let other = spawn_call(c.clone(), A);
    sleep(ms(1998)).await;
    assert_eq!(mock.calls(), 1);
    assert_eq!(first.await.unwrap().unwrap().status(), StatusCode::OK);
    assert_eq!(other.await.unwrap().unwrap().status(), StatusCode::OK);
    let seen = mock.seen();
    assert_eq!(seen.len(), 3);
    assert!(seen[1..]
        .iter()
        .all(|s| s.at == t0 + Duration::from_secs(2)));

    // RESOURCE_EXHAUSTED, not retryable here: the final answer's pushback pauses
    // the origin, capped by max_pause (5 s) as a Retry-After is.
    let layer = BudgetLayer::new(
        BudgetPolicy::builder()
            .max_pause(Duration::from_secs(5))
            .build()
            .unwrap(),
    );
    let mock = Script::new([trailers_only("8", "60000")]);
    let mut c = client(&layer, grpc_retries.clone(), &mock);
    let t1 = Instant::now();
    let res = call(&mut c, A).await.unwrap();
    assert_eq!(res.headers()["grpc-status"], "8");
    assert_eq!(
        layer.account(&head(A)).paused_until(),
        Some(t1 + Duration::from_secs(5))
    );

    // Another code, or a response that is not gRPC, pauses nothing.
    for headers in [
        &[
            ("content-type", "application/grpc"),
            ("grpc-status", "13"),
            ("grpc-retry-pushback-ms", "2000"),
        ][..],
        &[("grpc-status", "14"), ("grpc-retry-pushback-ms", "2000")][..],
    ] {
        let layer = BudgetLayer::default();
        let mock = Script::new([status_with(200, headers)]);
        let mut c = client(&layer, RetryPolicy::none(), &mock);
        call(&mut c, A).await.unwrap();
        assert_eq!(layer.account(&head(A)).paused_until(), None, "{headers:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn the_hint_of_a_hedge_that_loses_still_pauses_the_origin() {
    use crate::support::script::Step;
    use backstop::hedge::Hedged;
    let layer = BudgetLayer::default();
    // The original answers 200 after 300 ms; the copy sent at 100 ms is told to
    // come back in 2 s at 110 ms, and loses the race.
    let mock = Script::new([
        slow(ms(300), 200),
        Step::Answer(ms(10), 429, vec![("retry-after", "2")]),
    ]);
    let mut c = hedged_client(&layer, &mock);
    let t0 = Instant::now();
    let res = call(&mut c, A).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let hedged = Hedged::of(&res).unwrap();
    assert_eq!((hedged.copies(), hedged.winner()), (1, Some(0)));
    assert_eq!(
        layer.account(&head(A)).paused_until(),
        Some(t0 + ms(110) + Duration::from_secs(2))
    );
    // The next call waits for the pause.
    let mut next = client(&layer, RetryPolicy::none(), &Script::new([status(200)]));
    call(&mut next, A).await.unwrap();
    assert!(Instant::now() - t0 >= ms(2110), "{:?}", Instant::now() - t0);
}

/// A budget that counts each first attempt as one whole retry, no floor, no spread.
fn counting() -> BudgetLayer {
    BudgetLayer::new(
        BudgetPolicy::builder()
            .ratio(1.0)
            .min_per_second(0.0)
            .pause_spread(Duration::ZERO)
            .build()
            .unwrap(),
    )
}

#[tokio::test(start_paused = true)]
async fn under_a_second_budget_layer_the_outer_one_learns_the_retry_beneath() {
    // BudgetLayer(outer) -> BudgetLayer(inner) -> RetryLayer(timeout 500 ms): both
    // services' first call asks; the retry layer takes both notes, so the outer
    // service learns a retry layer is beneath it too, and hands its hold down: a
    // call whose timeout ends inside the outer account's pause is refused at once.
    let outer = counting();
    let inner = counting();
    let mock = Script::new([status(200)]);
    let mut c = ServiceBuilder::new()
        .layer(outer.clone())
        .layer(inner.clone())
        .layer(backstop::RetryLayer::new(within(ms(500))))
        .service(mock.clone());
    assert_eq!(call(&mut c, A).await.unwrap().status(), StatusCode::OK);
    // Pauses the outer layer's account only.
    pause_through(&outer).await;
    let t0 = Instant::now();
    let err = call(&mut c, A).await.unwrap_err();
    assert!(err.is_paused(), "{err}");
    assert_eq!(Instant::now(), t0, "refused at once");
    assert_eq!(mock.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn behind_a_buffer_a_paused_call_tells_one_wait_or_one_refusal() {
    // ObserveLayer -> BudgetLayer -> Buffer -> RetryLayer(timeout 500 ms): the budget
    // layer starts holding the call (it tells the wait); the retry layer, taking the
    // note later, claims the hold and refuses the call, telling nothing more: one
    // decision, told once.
    use backstop::observe::{Event, ObserveLayer};
    let events = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let record = events.clone();
    let observer = move |event: &Event<'_>| {
        let name = format!("{event:?}");
        record
            .lock()
            .unwrap()
            .push(name.split(['(', ' ', '{']).next().unwrap().to_owned());
    };
    let layer = counting();
    let mock = Script::new([status(200)]);
    let mut c = ServiceBuilder::new()
        .layer(ObserveLayer::new(observer))
        .layer(layer.clone())
        .buffer::<http::Request<http_body_util::Full<bytes::Bytes>>>(8)
        .layer(backstop::RetryLayer::new(within(ms(500))))
        .service(mock.clone());
    assert_eq!(call(&mut c, A).await.unwrap().status(), StatusCode::OK);
    pause_through(&layer).await;
    events.lock().unwrap().clear();
    let err = call(&mut c, A).await.unwrap_err();
    assert!(err.is_paused(), "{err}");
    let events = events.lock().unwrap().clone();
    let told = events
        .iter()
        .filter(|e| e.contains("Waited") || e.contains("Refused"))
        .collect::<Vec<_>>();
    assert_eq!(told.len(), 1, "{events:?}");
}
