//! The hedge layer: its timing on tokio's paused clock over a scripted in-process
//! transport, then cancellation over real loopback servers (HTTP/1.1 and HTTP/2).

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::support::gates::{Switch, Tokens};
use crate::support::requests::call_with;
use crate::support::script::{code, ms, slow, Fate, Reply, Script, Step};
use crate::support::shape::Stack;
use backstop::hedge::{HedgeLayer, HedgePolicy, Hedged, NotHedged};
use backstop::policy::{AttemptOutcome, Deadline, ErrorKind, History};
use backstop::{BoxError, IdempotencyKeyLayer, OneShot, RetryLayer, RetryPolicy};
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Full};
use tokio::time::Instant;
use tower::{Layer, Service, ServiceBuilder, ServiceExt};

fn get() -> Request<Full<Bytes>> {
    Request::get("http://upstream.test/items?token=s3cret")
        .body(Full::default())
        .unwrap()
}

fn with_body(method: Method, body: &'static str) -> Request<Full<Bytes>> {
    Request::builder()
        .method(method)
        .uri("http://upstream.test/charges")
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .unwrap()
}

async fn send_alone(
    script: &Script,
    hedge: HedgePolicy,
    req: Request<Full<Bytes>>,
) -> Result<Response<Reply>, backstop::Error> {
    HedgeLayer::new(hedge)
        .layer(script.clone())
        .oneshot(req)
        .await
}

fn hedged<B>(res: &Response<B>) -> &Hedged {
    Hedged::of(res).expect("a hedged record on the response")
}

// ---------------------------------------------------------------------------
// Timing, on the paused clock.
// ---------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn the_hedge_fires_exactly_at_the_delay() {
    let script = Script::new([slow(ms(1_000), 200), slow(ms(10), 200)]);
    let started = Instant::now();
    let res = send_alone(&script, HedgePolicy::after(ms(100)), get())
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(script.starts(), [Duration::ZERO, ms(100)]);
    // The copy answered 10 ms after it was sent; the original was canceled then.
    assert_eq!(started.elapsed(), ms(110));
    assert_eq!(script.fates(), [Fate::Dropped, Fate::Answered]);
    let h = hedged(&res);
    assert_eq!(h.winner(), Some(1));
    assert_eq!(h.copies(), 1);
    assert_eq!(h.sent()[0].outcome, AttemptOutcome::Canceled);
    assert_eq!(h.sent()[1].outcome, AttemptOutcome::Status(StatusCode::OK));
    assert_eq!(h.sent()[1].started, ms(100));
    assert_eq!(h.sent()[1].ended, ms(110));
    assert!(h.sent()[1].is_hedge());
    // As a retry layer's history would show them: attempt 2, begun 500 ms into
    // the call.
    let records = h.attempt_records(2, ms(500));
    assert_eq!(records.len(), 2);
    assert!(records.iter().all(|r| r.number == 2));
    assert_eq!(
        records.iter().map(|r| r.hedge).collect::<Vec<_>>(),
        [false, true]
    );
    assert_eq!(records[1].elapsed, ms(610));
    assert_eq!(
        h.to_string(),
        "send 0: canceled after 0.11s\nsend 1 (hedge at 0.10s): 200 OK after 0.11s\nreturned: send 1"
    );
}

#[tokio::test(start_paused = true)]
async fn no_hedge_when_the_answer_comes_first() {
    let script = Script::new([slow(ms(99), 200)]);
    let res = send_alone(&script, HedgePolicy::after(ms(100)), get())
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    // Nothing is left behind to fire later.
    tokio::time::sleep(ms(1_000)).await;
    assert_eq!(script.calls(), 1);
    assert!(Hedged::of(&res).is_none());
}

#[tokio::test(start_paused = true)]
async fn a_delay_too_long_to_represent_never_fires() {
    let script = Script::new([slow(ms(10), 200)]);
    let res = send_alone(&script, HedgePolicy::after(Duration::MAX), get())
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(script.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn max_extra_is_respected() {
    let script = Script::new([Step::Hang, Step::Hang, Step::Hang, Step::Hang]);
    let hedge = HedgePolicy::builder()
        .after(ms(100))
        .max_extra(2)
        .build()
        .unwrap();
    let call = send_alone(&script, hedge, get());
    assert!(tokio::time::timeout(ms(5_000), call).await.is_err());
    // The original, then one copy every 100 ms, two at most.
    assert_eq!(script.starts(), [Duration::ZERO, ms(100), ms(200)]);
    // The caller gave up: every send was canceled.
    assert_eq!(script.fates(), [Fate::Dropped; 3]);
}

#[tokio::test(start_paused = true)]
async fn the_third_copy_can_win() {
    let script = Script::new([Step::Hang, Step::Hang, slow(ms(5), 200)]);
    let hedge = HedgePolicy::builder()
        .after(ms(100))
        .max_extra(2)
        .build()
        .unwrap();
    let res = send_alone(&script, hedge, get()).await.unwrap();
    assert_eq!(script.starts(), [Duration::ZERO, ms(100), ms(200)]);
    assert_eq!(
        script.fates(),
        [Fate::Dropped, Fate::Dropped, Fate::Answered]
    );
    assert_eq!(hedged(&res).winner(), Some(2));
}

#[tokio::test(start_paused = true)]
async fn a_fast_error_does_not_beat_a_slower_success() {
    for fast_failure in [
        slow(ms(10), 503),
        Step::Fail(ms(10), io::ErrorKind::ConnectionReset),
    ] {
        let script = Script::new([slow(ms(300), 200), fast_failure.clone()]);
        let started = Instant::now();
        let res = send_alone(&script, HedgePolicy::after(ms(100)), get())
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK, "{fast_failure:?}");
        assert_eq!(started.elapsed(), ms(300));
        let h = hedged(&res);
        assert_eq!(h.winner(), Some(0));
        let expected = match fast_failure {
            Step::Answer(..) => AttemptOutcome::Status(StatusCode::SERVICE_UNAVAILABLE),
            _ => AttemptOutcome::Error(ErrorKind::Closed),
        };
        assert_eq!(h.sent()[1].outcome, expected);
        assert_eq!(h.sent()[1].ended, ms(110));
        // The losing 503 was closed without its body being read.
        script.with(|seen| {
            if let Some(probe) = &seen[1].response {
                assert!(!probe.polled.load(Ordering::SeqCst));
                assert!(probe.dropped.load(Ordering::SeqCst));
            }
        });
    }
}

#[tokio::test(start_paused = true)]
async fn an_answer_that_is_not_retryable_wins_at_once() {
    // 404 is an answer, not a failure to wait out.
    let script = Script::new([slow(ms(300), 200), slow(ms(10), 404)]);
    let res = send_alone(&script, HedgePolicy::after(ms(100)), get())
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
    assert_eq!(hedged(&res).winner(), Some(1));
    assert_eq!(script.fates(), [Fate::Dropped, Fate::Answered]);
}

#[tokio::test(start_paused = true)]
async fn when_every_send_fails_the_latest_failure_is_returned() {
    // Responses: the latest (the original's 502, at 150 ms) is returned.
    let script = Script::new([slow(ms(150), 502), slow(ms(10), 503)]);
    let res = send_alone(&script, HedgePolicy::after(ms(100)), get())
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::BAD_GATEWAY);
    let h = hedged(&res);
    assert_eq!(h.winner(), None);
    assert_eq!(h.copies(), 1);

    // Errors: a backstop::Error of the latest failure's kind, with the record.
    let script = Script::new([
        slow(ms(150), 503),
        Step::Fail(ms(100), io::ErrorKind::ConnectionReset),
    ]);
    let err = send_alone(&script, HedgePolicy::after(ms(100)), get())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Closed);
    let h = Hedged::find(&err).expect("the record in the error's chain");
    assert_eq!(h.winner(), None);
    assert_eq!(
        h.sent()
            .iter()
            .map(|s| s.outcome)
            .collect::<Vec<AttemptOutcome>>(),
        [
            AttemptOutcome::Status(StatusCode::SERVICE_UNAVAILABLE),
            AttemptOutcome::Error(ErrorKind::Closed)
        ]
    );
    // The io error is still reachable through the source chain.
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(&err);
    let mut found = false;
    while let Some(e) = cur {
        found |= e.downcast_ref::<io::Error>().is_some();
        cur = e.source();
    }
    assert!(found);
}

#[tokio::test(start_paused = true)]
async fn a_failure_before_the_delay_is_returned_at_once() {
    // Hedging is not retrying: a 503 before the delay goes back to the caller.
    let script = Script::new([slow(ms(20), 503)]);
    let started = Instant::now();
    let res = send_alone(&script, HedgePolicy::after(ms(100)), get())
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(started.elapsed(), ms(20));
    assert_eq!(script.calls(), 1);
    assert!(Hedged::of(&res).is_none());
}

#[tokio::test(start_paused = true)]
async fn an_exhausted_budget_prevents_the_hedge() {
    let script = Script::new([slow(ms(300), 200)]);
    let (budget, tokens) = Tokens::handle(0);
    let mut req = get();
    backstop::policy::CallContext::of_mut(req.extensions_mut()).set_budget(budget);
    let res = send_alone(&script, HedgePolicy::after(ms(100)), req)
        .await
        .unwrap();
    assert_eq!(script.calls(), 1);
    assert_eq!(tokens.asked(), 1);
    let h = hedged(&res);
    assert_eq!(h.not_sent(), Some(NotHedged::Budget));
    assert_eq!(h.copies(), 0);
    assert_eq!(h.winner(), Some(0));
}

#[tokio::test(start_paused = true)]
async fn each_hedge_spends_the_budget() {
    let script = Script::new([Step::Hang, Step::Hang, slow(ms(500), 200)]);
    let (budget, tokens) = Tokens::handle(1);
    let mut req = get();
    backstop::policy::CallContext::of_mut(req.extensions_mut()).set_budget(budget);
    let hedge = HedgePolicy::builder()
        .after(ms(100))
        .max_extra(3)
        .build()
        .unwrap();
    let call = send_alone(&script, hedge, req);
    assert!(tokio::time::timeout(ms(5_000), call).await.is_err());
    // One token, one copy; the second copy found the budget spent and none after
    // it was asked for.
    assert_eq!(script.starts(), [Duration::ZERO, ms(100)]);
    assert_eq!(tokens.asked(), 2);
}

#[tokio::test(start_paused = true)]
async fn an_open_breaker_prevents_the_hedge() {
    let script = Script::new([slow(ms(300), 200)]);
    let (budget, tokens) = Tokens::handle(10);
    let mut req = get();
    backstop::policy::CallContext::of_mut(req.extensions_mut()).set_budget(budget);
    backstop::policy::CallContext::of_mut(req.extensions_mut())
        .set_breaker(Switch::open().handle());
    let res = send_alone(&script, HedgePolicy::after(ms(100)), req)
        .await
        .unwrap();
    assert_eq!(script.calls(), 1);
    assert_eq!(hedged(&res).not_sent(), Some(NotHedged::CircuitOpen));
    // Nothing was spent for a copy that was not sent.
    assert_eq!(tokens.asked(), 0);
}

/// `inner`, whose readiness waits until `at` once a call has gone through any of
/// its clones: a copy's service that is slow to be ready, as behind a buffer.
struct ReadyAt<S> {
    inner: S,
    at: Instant,
    calls: Arc<AtomicUsize>,
    wait: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S: Clone> Clone for ReadyAt<S> {
    fn clone(&self) -> Self {
        ReadyAt {
            inner: self.inner.clone(),
            at: self.at,
            calls: self.calls.clone(),
            wait: None,
        }
    }
}

impl<S: Service<R>, R> Service<R> for ReadyAt<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        if self.calls.load(Ordering::SeqCst) > 0 {
            let at = self.at;
            let wait = self
                .wait
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
            std::task::ready!(std::future::Future::poll(wait.as_mut(), cx));
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> S::Future {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.wait = None;
        self.inner.call(req)
    }
}

#[tokio::test(start_paused = true)]
async fn the_gates_are_asked_again_once_the_copy_could_go() {
    // The copy is due at 100 ms, when the breaker is closed, but its service is
    // ready only at 300 ms; the breaker opened at 200 ms meanwhile.
    let script = Script::new([slow(ms(1_000), 200)]);
    let (budget, tokens) = Tokens::handle(10);
    let switch = Switch::closed();
    let mut req = get();
    backstop::policy::CallContext::of_mut(req.extensions_mut()).set_budget(budget);
    backstop::policy::CallContext::of_mut(req.extensions_mut()).set_breaker(switch.handle());
    let t0 = Instant::now();
    let inner = ReadyAt {
        inner: script.clone(),
        at: t0 + ms(300),
        calls: Arc::default(),
        wait: None,
    };
    let call = HedgeLayer::new(HedgePolicy::after(ms(100)))
        .layer(inner)
        .oneshot(req);
    let open = async {
        tokio::time::sleep(ms(200)).await;
        switch.set_open(true);
    };
    let (res, ()) = tokio::join!(call, open);
    let res = res.unwrap();
    assert_eq!(
        script.calls(),
        1,
        "no copy went to an origin whose breaker opened"
    );
    assert_eq!(hedged(&res).not_sent(), Some(NotHedged::CircuitOpen));
    assert_eq!(tokens.asked(), 0, "nothing was spent for it");
}

#[tokio::test(start_paused = true)]
async fn a_copy_the_budget_refuses_lets_go_of_the_readiness_it_reserved() {
    // Two sends at a time beneath the hedge layer. The original holds one; the copy's
    // service reserves the other, then the budget refuses the copy.
    let script = Script::new([slow(ms(1_000), 200), code(200)]);
    let limited = tower::limit::ConcurrencyLimitLayer::new(2).layer(script.clone());
    let (budget, tokens) = Tokens::handle(0);
    let mut req = get();
    backstop::policy::CallContext::of_mut(req.extensions_mut()).set_budget(budget);
    let call = HedgeLayer::new(HedgePolicy::after(ms(100)))
        .layer(limited.clone())
        .oneshot(req);
    let other = async {
        tokio::time::sleep(ms(150)).await;
        let started = Instant::now();
        let res = limited.clone().oneshot(get()).await.unwrap();
        (res.status(), started.elapsed())
    };
    let (res, (status, waited)) = tokio::join!(call, other);
    assert_eq!(hedged(&res.unwrap()).not_sent(), Some(NotHedged::Budget));
    assert_eq!(tokens.asked(), 1);
    // Another call got the second send at once, not when the hedged call ended.
    assert_eq!(status, StatusCode::OK);
    assert_eq!(waited, Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn the_deadline_prevents_a_hedge_too_late_to_help() {
    // At 100 ms, 5 ms are left: less than the policy's 10 ms minimum attempt time.
    let script = Script::new([slow(ms(104), 200)]);
    let mut req = get();
    req.extensions_mut().insert(Deadline::after(ms(105)));
    let res = send_alone(&script, HedgePolicy::after(ms(100)), req)
        .await
        .unwrap();
    assert_eq!(script.calls(), 1);
    assert_eq!(hedged(&res).not_sent(), Some(NotHedged::Deadline));

    // With 50 ms left, the copy goes.
    let script = Script::new([slow(ms(140), 200), slow(ms(1), 200)]);
    let mut req = get();
    req.extensions_mut().insert(Deadline::after(ms(150)));
    let res = send_alone(&script, HedgePolicy::after(ms(100)), req)
        .await
        .unwrap();
    assert_eq!(script.calls(), 2);
    assert_eq!(hedged(&res).winner(), Some(1));
}

// ---------------------------------------------------------------------------
// The adaptive delay.
// ---------------------------------------------------------------------------

/// Sends one GET whose original answers after `latency`.
async fn feed(svc: &mut backstop::hedge::Hedge<Script>, script: &Script, latency: Duration) {
    script.push([slow(latency, 200)]);
    let res = ServiceExt::<Request<Full<Bytes>>>::ready(&mut *svc)
        .await
        .unwrap()
        .call(get())
        .await
        .unwrap();
    assert!(Hedged::of(&res).is_none(), "fed at {latency:?}");
}

/// The delay the layer waits now: a GET that hangs, and when its copy went.
async fn delay_now(svc: &mut backstop::hedge::Hedge<Script>, script: &Script) -> Duration {
    let before = script.calls();
    script.push([Step::Hang, slow(Duration::ZERO, 200)]);
    let res = ServiceExt::<Request<Full<Bytes>>>::ready(&mut *svc)
        .await
        .unwrap()
        .call(get())
        .await
        .unwrap();
    assert_eq!(script.calls(), before + 2);
    hedged(&res).sent()[1].started
}

#[tokio::test(start_paused = true)]
async fn the_adaptive_delay_falls_back_until_enough_samples() {
    let hedge = HedgePolicy::builder()
        .adaptive(ms(50))
        .min_samples(20)
        .build()
        .unwrap();
    let script = Script::default();
    let mut svc = HedgeLayer::new(hedge).layer(script.clone());
    for _ in 0..19 {
        feed(&mut svc, &script, ms(5)).await;
    }
    // 19 samples, and the hanging original is a 20th only once canceled.
    assert_eq!(delay_now(&mut svc, &script).await, ms(50));
    // Now 20 samples are known (19 of 5 ms, one of at least 50 ms): the p95 is
    // 5 ms, read from a bucket at most 1/16 wider, on a 1 ms timer.
    let d = delay_now(&mut svc, &script).await;
    assert!(d >= ms(5) && d <= ms(6), "{d:?}");
}

#[tokio::test(start_paused = true)]
async fn the_adaptive_delay_converges_to_the_p95() {
    let hedge = HedgePolicy::builder()
        .adaptive(ms(500))
        .min_samples(20)
        .build()
        .unwrap();
    let script = Script::default();
    let mut svc = HedgeLayer::new(hedge).layer(script.clone());
    // 100 latencies, 100 ms down to 1 ms: each is below the percentile of the
    // ones before, so none is hedged while they are fed.
    for latency in (1..=100).rev() {
        feed(&mut svc, &script, ms(latency)).await;
    }
    // The p95 of 1..=100 ms is 95 ms.
    let d = delay_now(&mut svc, &script).await;
    assert!(d >= ms(95) && d <= ms(95 * 17 / 16 + 1), "{d:?}");

    // Other origins keep their own estimate (here, none yet: the fallback).
    script.push([Step::Hang, slow(Duration::ZERO, 200)]);
    let other = Request::get("http://elsewhere.test/")
        .body(Full::default())
        .unwrap();
    let res = call_with(&mut svc, other).await.unwrap();
    assert_eq!(hedged(&res).sent()[1].started, ms(500));
}

// ---------------------------------------------------------------------------
// What is hedged.
// ---------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_post_without_a_key_is_never_hedged() {
    let script = Script::new([slow(ms(1_000), 200)]);
    let res = send_alone(
        &script,
        HedgePolicy::after(ms(10)),
        with_body(Method::POST, "{}"),
    )
    .await
    .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(script.calls(), 1);
    assert!(Hedged::of(&res).is_none());

    // PATCH neither, nor a custom method.
    let script = Script::new([slow(ms(1_000), 200)]);
    send_alone(
        &script,
        HedgePolicy::after(ms(10)),
        with_body(Method::PATCH, "{}"),
    )
    .await
    .unwrap();
    assert_eq!(script.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_post_with_a_key_is_hedged_and_every_copy_carries_it() {
    let script = Script::new([slow(ms(1_000), 201), slow(ms(5), 201)]);
    let mut req = with_body(Method::POST, r#"{"amount":5}"#);
    req.headers_mut()
        .insert("idempotency-key", "k-7f3a".parse().unwrap());
    let res = send_alone(&script, HedgePolicy::after(ms(10)), req)
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::CREATED);
    script.with(|seen| {
        assert_eq!(seen.len(), 2);
        for s in seen {
            assert_eq!(s.method, Method::POST);
            assert_eq!(s.key.as_deref(), Some("k-7f3a"));
            assert_eq!(s.body.as_deref(), Some(&br#"{"amount":5}"#[..]));
        }
    });
}

#[tokio::test(start_paused = true)]
async fn in_the_stack_a_stamped_key_rides_on_every_copy() {
    let script = Script::new([slow(ms(1_000), 201), slow(ms(5), 201)]);
    // Admission marks the call keyed in the context it hands down to the hedge
    // layer, in the stack as the key layer does.
    let stack = Stack::new(RetryPolicy::default())
        .keys(IdempotencyKeyLayer::new())
        .hedge(HedgePolicy::after(ms(10)));
    let client: tower::util::BoxCloneService<_, _, backstop::Error> =
        crate::stacked!(stack, script.clone());
    let res = client
        .oneshot(with_body(Method::POST, "charge"))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::CREATED);
    script.with(|seen| {
        assert_eq!(seen.len(), 2);
        let key = seen[0].key.clone().expect("a stamped key");
        assert_eq!(seen[1].key.as_deref(), Some(&*key));
        assert!(seen.iter().all(|s| s.marker));
        // The copy replays the kept body, byte for byte.
        assert!(seen
            .iter()
            .all(|s| s.body.as_deref() == Some(&b"charge"[..])));
    });
    assert_eq!(hedged(&res).winner(), Some(1));
}

#[tokio::test(start_paused = true)]
async fn a_body_not_fully_kept_is_not_hedged() {
    // Beneath the retry layer the transport gets a replay body; this one was not
    // read by the time the hedge was due, so a second reader would have to wait.
    let script = Script::new([Step::Unread(ms(300), 200)]);
    let client = ServiceBuilder::new()
        .layer(RetryLayer::new(RetryPolicy::default()))
        .layer(HedgeLayer::new(HedgePolicy::after(ms(100))))
        .service(script.clone());
    let res = client
        .oneshot(with_body(Method::PUT, "payload"))
        .await
        .unwrap();
    assert_eq!(script.calls(), 1);
    assert_eq!(hedged(&res).not_sent(), Some(NotHedged::Body));

    // Once the original read it all, the same PUT is hedged.
    let script = Script::new([slow(ms(300), 200), slow(ms(1), 200)]);
    let client = ServiceBuilder::new()
        .layer(RetryLayer::new(RetryPolicy::default()))
        .layer(HedgeLayer::new(HedgePolicy::after(ms(100))))
        .service(script.clone());
    let res = client
        .oneshot(with_body(Method::PUT, "payload"))
        .await
        .unwrap();
    assert_eq!(hedged(&res).winner(), Some(1));
    script.with(|seen| {
        assert!(seen
            .iter()
            .all(|s| s.body.as_deref() == Some(&b"payload"[..])))
    });
}

#[tokio::test(start_paused = true)]
async fn a_body_read_past_the_replay_cap_is_not_copied_and_one_shot_passes_straight_through() {
    // Its size decides nothing: the first send read it past the cap (a chunk after
    // the one crossing it), so when the copy is due its bytes are not all kept.
    let policy = RetryPolicy::builder().replay_cap(4).build().unwrap();
    let script = Script::new([slow(ms(300), 200)]);
    let client = ServiceBuilder::new()
        .layer(RetryLayer::new(policy.clone()))
        .layer(HedgeLayer::new(HedgePolicy::after(ms(100))))
        .service(script.clone());
    let chunks = [&b"longer than"[..], &b" four bytes"[..]]
        .map(|chunk| Ok::<_, io::Error>(Frame::data(Bytes::from_static(chunk))));
    let body = http_body_util::StreamBody::new(futures_util::stream::iter(chunks));
    let req = Request::put("http://upstream.test/charges")
        .body(body)
        .unwrap();
    let res = client.oneshot(req).await.unwrap();
    assert_eq!(script.calls(), 1);
    assert_eq!(hedged(&res).not_sent(), Some(NotHedged::Body));

    // One chunk over the cap, read whole: the chunk crossing the cap is kept whole,
    // so the body is, and the copy is sent with every byte.
    let script = Script::new([slow(ms(300), 200), slow(ms(300), 200)]);
    let client = ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .layer(HedgeLayer::new(HedgePolicy::after(ms(100))))
        .service(script.clone());
    let res = client
        .oneshot(with_body(Method::PUT, "longer than four bytes"))
        .await
        .unwrap();
    assert_eq!(script.calls(), 2);
    assert_eq!(hedged(&res).not_sent(), None);
    for seen in script.seen() {
        assert_eq!(seen.body.as_deref(), Some(&b"longer than four bytes"[..]));
    }

    let script = Script::new([slow(ms(300), 200)]);
    let mut req = get();
    req.extensions_mut().insert(OneShot);
    let res = send_alone(&script, HedgePolicy::after(ms(100)), req)
        .await
        .unwrap();
    assert_eq!(script.calls(), 1);
    assert!(Hedged::of(&res).is_none());
}

#[test]
fn hedging_post_or_patch_without_keys_is_refused_when_built() {
    for method in [Method::POST, Method::PATCH] {
        let err = HedgePolicy::builder()
            .methods([Method::GET, method.clone()])
            .build()
            .unwrap_err();
        assert_eq!(err.setting(), "methods");
        assert!(err.to_string().contains(method.as_str()), "{err}");
    }
    assert!(HedgePolicy::builder()
        .methods([Method::GET, Method::HEAD])
        .build()
        .is_ok());
}

// ---------------------------------------------------------------------------
// Beneath the retry layer.
// ---------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn the_retry_layer_retries_when_every_send_failed() {
    let script = Script::new([
        slow(ms(150), 503),
        Step::Fail(ms(10), io::ErrorKind::ConnectionReset),
        slow(ms(1), 200),
    ]);
    let policy = RetryPolicy::builder()
        .backoff(ms(10), ms(10))
        .build()
        .unwrap();
    let client = ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .layer(HedgeLayer::new(HedgePolicy::after(ms(100))))
        .service(script.clone());
    let res = client.oneshot(get()).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(script.calls(), 3);
    // The history has every send: the first attempt and its hedge, then the retry.
    let history = res.extensions().get::<History>().expect("a history");
    assert_eq!(history.len(), 3);
    assert_eq!(history.retries(), 1);
    assert_eq!(history.hedges(), 1);
    let numbers: Vec<_> = history
        .attempts()
        .iter()
        .map(|a| (a.number, a.hedge))
        .collect();
    assert_eq!(numbers, [(1, false), (1, true), (2, false)]);
    assert_eq!(
        history.attempts()[0].outcome,
        AttemptOutcome::Status(StatusCode::SERVICE_UNAVAILABLE)
    );
    assert_eq!(
        history.attempts()[1].outcome,
        AttemptOutcome::Error(ErrorKind::Closed)
    );
}

#[tokio::test(start_paused = true)]
async fn a_winning_hedge_is_in_the_history_and_is_not_a_retry() {
    let script = Script::new([slow(ms(500), 200), slow(ms(10), 200)]);
    let client = ServiceBuilder::new()
        .layer(RetryLayer::new(RetryPolicy::default()))
        .layer(HedgeLayer::new(HedgePolicy::after(ms(100))))
        .service(script.clone());
    let res = client.oneshot(get()).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let history = res.extensions().get::<History>().expect("a history");
    assert_eq!(history.retries(), 0);
    assert_eq!(history.hedges(), 1);
    assert_eq!(history.attempts()[0].outcome, AttemptOutcome::Canceled);
    assert!(history.attempts()[1].hedge);
    assert_eq!(history.attempts()[1].elapsed, ms(110));
    assert!(
        history.to_string().contains("attempt 1/3: 200 OK (hedge)"),
        "{history}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_retry_policy_deadline_reaches_the_hedge_layer() {
    // The policy's 105 ms timeout leaves 5 ms when the hedge is due at 100 ms: less
    // than a useful attempt (10 ms by default), so no copy goes.
    let script = Script::new([slow(ms(102), 200), slow(ms(1), 200)]);
    let policy = RetryPolicy::builder().timeout(ms(105)).build().unwrap();
    let client = ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .layer(HedgeLayer::new(HedgePolicy::after(ms(100))))
        .service(script.clone());
    let res = client.oneshot(get()).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(script.calls(), 1, "no hedge past the policy's deadline");
}

#[tokio::test(start_paused = true)]
async fn the_retry_layer_sees_the_failure_kind_through_the_hedge_layer() {
    // Both sends reset: the hedge layer's error keeps the kind, so the retry
    // layer re-sends the GET.
    let script = Script::new([
        Step::Fail(ms(150), io::ErrorKind::ConnectionReset),
        Step::Fail(ms(10), io::ErrorKind::ConnectionReset),
        slow(ms(1), 200),
    ]);
    let client = ServiceBuilder::new()
        .layer(RetryLayer::new(
            RetryPolicy::builder()
                .backoff(ms(10), ms(10))
                .build()
                .unwrap(),
        ))
        .layer(HedgeLayer::new(HedgePolicy::after(ms(100))))
        .service(script.clone());
    let res = client.oneshot(get()).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let history = res.extensions().get::<History>().expect("a history");
    assert_eq!(
        history.attempts()[0].outcome,
        AttemptOutcome::Error(ErrorKind::Closed)
    );
}

#[tokio::test(start_paused = true)]
async fn the_attempt_timeout_above_cancels_every_send() {
    let script = Script::new([Step::Hang, Step::Hang, slow(ms(1), 200)]);
    let policy = RetryPolicy::builder()
        .attempt_timeout(ms(250))
        .backoff(ms(10), ms(10))
        .build()
        .unwrap();
    let client = ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .layer(HedgeLayer::new(HedgePolicy::after(ms(100))))
        .service(script.clone());
    let res = client.oneshot(get()).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(
        script.fates(),
        [Fate::Dropped, Fate::Dropped, Fate::Answered]
    );
}

// ---------------------------------------------------------------------------
// Over real loopback servers.
// ---------------------------------------------------------------------------

mod wire {
    use super::*;

    use http_body_util::combinators::BoxBody;
    use hyper::body::Incoming;
    use hyper_util::client::legacy::connect::HttpConnector;
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use tokio::net::TcpListener;
    use tokio::sync::mpsc;

    type ResBody = BoxBody<Bytes, Infallible>;

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Proto {
        Http1,
        Http2,
    }

    /// What the server tells the test.
    #[derive(Debug, PartialEq, Eq)]
    enum Event {
        /// A request arrived: its number, and its idempotency key.
        Arrived(usize, Option<String>),
        /// Its handler was dropped before it answered: the request was canceled.
        HandlerDropped(usize),
        /// Its response body was dropped before it ended: the body was not read.
        BodyDropped(usize),
    }

    /// What the server does with its n-th request.
    #[derive(Clone, Copy, Debug)]
    enum Plan {
        /// Answer 200 after this long.
        After(Duration),
        /// Answer 503 at once, with a body that never ends.
        EndlessFailure,
    }

    struct Notify {
        tx: mpsc::UnboundedSender<Event>,
        event: Option<Event>,
    }

    impl Drop for Notify {
        fn drop(&mut self) {
            if let Some(event) = self.event.take() {
                let _ = self.tx.send(event);
            }
        }
    }

    /// A response body that yields one chunk, then waits forever.
    struct Endless {
        first: Option<Bytes>,
        _notify: Notify,
    }

    impl Body for Endless {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            match self.first.take() {
                Some(b) => Poll::Ready(Some(Ok(Frame::data(b)))),
                None => Poll::Pending,
            }
        }
    }

    async fn handle(
        n: usize,
        req: Request<Incoming>,
        plan: Plan,
        tx: mpsc::UnboundedSender<Event>,
    ) -> Result<Response<ResBody>, Infallible> {
        let key = req
            .headers()
            .get("idempotency-key")
            .map(|v| v.to_str().unwrap().to_owned());
        let _ = tx.send(Event::Arrived(n, key));
        let _ = req.into_body().collect().await;
        match plan {
            Plan::After(delay) => {
                let mut guard = Notify {
                    tx,
                    event: Some(Event::HandlerDropped(n)),
                };
                tokio::time::sleep(delay).await;
                guard.event = None;
                Ok(Response::new(Full::new(Bytes::from_static(b"ok")).boxed()))
            }
            Plan::EndlessFailure => {
                let body = Endless {
                    first: Some(Bytes::from_static(b"unavailable")),
                    _notify: Notify {
                        tx,
                        event: Some(Event::BodyDropped(n)),
                    },
                };
                let mut res = Response::new(body.boxed());
                *res.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
                Ok(res)
            }
        }
    }

    /// A server on 127.0.0.1 that follows `plans`, one per request in arrival
    /// order, and reports what happened.
    async fn serve(proto: Proto, plans: Vec<Plan>) -> (String, mpsc::UnboundedReceiver<Event>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = mpsc::unbounded_channel();
        let count = Arc::new(AtomicUsize::new(0));
        let plans = Arc::new(plans);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let _ = stream.set_nodelay(true);
                let (tx, count, plans) = (tx.clone(), count.clone(), plans.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let n = count.fetch_add(1, Ordering::SeqCst);
                        let plan = plans.get(n).copied().unwrap_or(Plan::After(Duration::ZERO));
                        handle(n, req, plan, tx.clone())
                    });
                    let io = TokioIo::new(stream);
                    match proto {
                        Proto::Http1 => {
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(io, service)
                                .await;
                        }
                        Proto::Http2 => {
                            let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                                .serve_connection(io, service)
                                .await;
                        }
                    }
                });
            }
        });
        (format!("http://{addr}"), rx)
    }

    fn client<B>(proto: Proto) -> Client<HttpConnector, B>
    where
        B: Body + Send + 'static + Unpin,
        B::Data: Send,
        B::Error: Into<BoxError>,
    {
        let mut builder = Client::builder(TokioExecutor::new());
        if proto == Proto::Http2 {
            builder.http2_only(true);
        }
        builder.build_http()
    }

    /// Waits for `want` among the server's events.
    async fn expect(rx: &mut mpsc::UnboundedReceiver<Event>, want: Event) {
        while let Some(event) = rx.recv().await {
            if event == want {
                return;
            }
        }
        panic!("the server stopped before {want:?}");
    }

    const BOUND: Duration = Duration::from_secs(10);

    async fn the_loser_is_canceled_on_the_server(proto: Proto) {
        let (base, mut rx) = serve(
            proto,
            vec![
                Plan::After(Duration::from_secs(30)),
                Plan::After(Duration::ZERO),
            ],
        )
        .await;
        let svc = HedgeLayer::new(HedgePolicy::after(ms(50))).layer(client::<Full<Bytes>>(proto));
        let req = Request::get(format!("{base}/slow"))
            .body(Full::default())
            .unwrap();
        let res = svc.oneshot(req).await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(hedged(&res).winner(), Some(1));
        // The original's handler was dropped: HTTP/2 reset its stream, HTTP/1.1
        // closed its connection.
        expect(&mut rx, Event::HandlerDropped(0)).await;
    }

    #[tokio::test]
    async fn http1_the_loser_is_canceled_on_the_server() {
        tokio::time::timeout(BOUND, the_loser_is_canceled_on_the_server(Proto::Http1))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn http2_the_loser_is_canceled_on_the_server() {
        tokio::time::timeout(BOUND, the_loser_is_canceled_on_the_server(Proto::Http2))
            .await
            .unwrap();
    }

    async fn a_losing_response_is_closed_unread(proto: Proto) {
        // The original answers after 300 ms; the copy gets a 503 at once, whose
        // body never ends. The 503 loses and its body is never read.
        let (base, mut rx) = serve(proto, vec![Plan::After(ms(300)), Plan::EndlessFailure]).await;
        let svc = HedgeLayer::new(HedgePolicy::after(ms(50))).layer(client::<Full<Bytes>>(proto));
        let req = Request::get(format!("{base}/tail"))
            .body(Full::default())
            .unwrap();
        let res = svc.oneshot(req).await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        let h = hedged(&res);
        assert_eq!(h.winner(), Some(0));
        assert_eq!(
            h.sent()[1].outcome,
            AttemptOutcome::Status(StatusCode::SERVICE_UNAVAILABLE)
        );
        // Had the client read the endless body, the call would never have ended;
        // it dropped it, and the server saw the stream or connection go.
        expect(&mut rx, Event::BodyDropped(1)).await;
        let body = res.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"ok");
    }

    #[tokio::test]
    async fn http1_a_losing_response_is_closed_unread() {
        tokio::time::timeout(BOUND, a_losing_response_is_closed_unread(Proto::Http1))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn http2_a_losing_response_is_closed_unread() {
        tokio::time::timeout(BOUND, a_losing_response_is_closed_unread(Proto::Http2))
            .await
            .unwrap();
    }

    async fn in_the_stack_a_keyed_post_is_hedged(proto: Proto) {
        let (base, mut rx) = serve(
            proto,
            vec![
                Plan::After(Duration::from_secs(30)),
                Plan::After(Duration::ZERO),
            ],
        )
        .await;
        let transport = client::<backstop::ReplayBody<Full<Bytes>>>(proto);
        let stack = Stack::new(RetryPolicy::default()).keys(IdempotencyKeyLayer::new());
        let hedge = HedgeLayer::new(HedgePolicy::after(ms(50)));
        let svc: tower::util::BoxCloneService<Request<Full<Bytes>>, _, backstop::Error> =
            crate::stacked!(stack, hedge.layer(transport));
        let req = Request::post(format!("{base}/charges"))
            .body(Full::new(Bytes::from_static(b"amount=5")))
            .unwrap();
        let res = svc.oneshot(req).await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        let mut keys = Vec::new();
        while keys.len() < 2 {
            if let Some(Event::Arrived(_, key)) = rx.recv().await {
                keys.push(key.expect("a key on every copy"));
            }
        }
        assert_eq!(keys[0], keys[1]);
        expect(&mut rx, Event::HandlerDropped(0)).await;
    }

    #[tokio::test]
    async fn http1_in_the_stack_a_keyed_post_is_hedged() {
        let run = in_the_stack_a_keyed_post_is_hedged(Proto::Http1);
        tokio::time::timeout(BOUND, run).await.unwrap();
    }

    #[tokio::test]
    async fn http2_in_the_stack_a_keyed_post_is_hedged() {
        let run = in_the_stack_a_keyed_post_is_hedged(Proto::Http2);
        tokio::time::timeout(BOUND, run).await.unwrap();
    }

    #[tokio::test]
    async fn a_post_without_a_key_is_never_hedged_over_the_wire() {
        let run = async {
            let (base, mut rx) = serve(Proto::Http2, vec![Plan::After(ms(300))]).await;
            let svc = HedgeLayer::new(HedgePolicy::after(ms(20)))
                .layer(client::<Full<Bytes>>(Proto::Http2));
            let req = Request::post(format!("{base}/orders"))
                .body(Full::new(Bytes::from_static(b"x")))
                .unwrap();
            let res = svc.oneshot(req).await.unwrap();
            assert_eq!(res.status(), StatusCode::OK);
            drop(res);
            assert_eq!(rx.recv().await, Some(Event::Arrived(0, None)));
            // The server is done with the only request: nothing else arrived.
            assert!(rx.try_recv().is_err());
        };
        tokio::time::timeout(BOUND, run).await.unwrap();
    }
}

#[test]
fn types_are_what_tower_users_expect() {
    fn send_sync<T: Send + Sync + 'static>() {}
    fn clone<T: Clone>() {}
    fn send<T: Send>() {}
    send_sync::<Hedged>();
    send_sync::<HedgePolicy>();
    clone::<HedgeLayer>();
    clone::<backstop::hedge::Hedge<Script>>();
    send::<backstop::hedge::ResponseFuture<Script, Full<Bytes>>>();
}

#[tokio::test(start_paused = true)]
async fn under_a_one_attempt_policy_an_empty_get_is_sent_once() {
    // "Never retry" means one send: the retry layer tells the hedge layer so.
    let script = Script::new([slow(ms(500), 200), slow(ms(10), 200)]);
    let client = ServiceBuilder::new()
        .layer(RetryLayer::new(RetryPolicy::none()))
        .layer(HedgeLayer::new(HedgePolicy::after(ms(100))))
        .service(script.clone());
    let res = client.oneshot(get()).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(script.calls(), 1);
    assert!(Hedged::of(&res).is_none());
}

#[tokio::test(start_paused = true)]
async fn hedges_count_against_the_retry_policys_attempts() {
    // Three attempts allowed; the first attempt and its hedge are two of them, so
    // one retry is left when both fail.
    let script = Script::new([
        slow(ms(150), 503),
        slow(ms(10), 503),
        slow(ms(150), 503),
        slow(ms(10), 503),
        slow(ms(1), 200),
    ]);
    let policy = RetryPolicy::builder()
        .max_attempts(3)
        .backoff(ms(10), ms(10))
        .build()
        .unwrap();
    let client = ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .layer(HedgeLayer::new(HedgePolicy::after(ms(100))))
        .service(script.clone());
    let res = client.oneshot(get()).await.unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    // The retry (the third send) is hedged too, by the hedge layer's own limit.
    assert_eq!(script.calls(), 4);
    let history = res.extensions().get::<History>().unwrap();
    assert_eq!(
        history.stop_reason(),
        Some(backstop::policy::StopReason::AttemptsExhausted)
    );
}

#[tokio::test(start_paused = true)]
async fn a_method_the_retry_policy_calls_unsafe_is_not_hedged_beneath_it() {
    // The retry policy says PUT is not idempotent here; the hedge layer's own
    // settings would hedge it, but the retry layer's verdict wins.
    let script = Script::new([slow(ms(500), 200), slow(ms(1), 200)]);
    let policy = RetryPolicy::builder()
        .idempotent_methods([Method::GET])
        .build()
        .unwrap();
    let client = ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .layer(HedgeLayer::new(HedgePolicy::after(ms(100))))
        .service(script.clone());
    let res = client
        .oneshot(with_body(Method::PUT, "blob"))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(
        script.calls(),
        1,
        "a PUT the policy calls unsafe is never hedged"
    );
}

#[tokio::test(start_paused = true)]
async fn a_future_polled_after_it_ended_answers_an_error_not_pending_forever() {
    use std::future::Future;
    let waker = futures_util::task::noop_waker();
    let mut cx = Context::from_waker(&waker);
    // A GET races its copies; a POST without a key is never hedged.
    for req in [get(), with_body(Method::POST, "x")] {
        let script = Script::new([crate::support::script::status(200)]);
        let mut svc = HedgeLayer::new(HedgePolicy::after(ms(100))).layer(script.clone());
        let mut future = Box::pin(
            ServiceExt::<Request<Full<Bytes>>>::ready(&mut svc)
                .await
                .unwrap()
                .call(req),
        );
        assert!(matches!(future.as_mut().poll(&mut cx), Poll::Ready(Ok(_))));
        match future.as_mut().poll(&mut cx) {
            Poll::Ready(Err(err)) => assert_eq!(err.kind(), ErrorKind::Other, "{err}"),
            other => panic!("expected an error, got {:?}", other.map(|r| r.map(|_| ()))),
        }
    }
}
