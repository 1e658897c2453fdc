//! `BackstopMiddleware` over the wire.

use std::time::{Duration, Instant};

use backstop::policy::{ErrorKind, History, NoRetry, NotReplayable, StopReason};
use backstop::reqwest::{BackstopMiddleware, ErrorExt};
use backstop::test_util::{Protocol, Reply, Step, Upstream};
use backstop::{BudgetPolicy, CircuitBreakerPolicy, RetryPolicy};
use reqwest_middleware::ClientBuilder;

use crate::kit::{builder, client, quick, reqwest_client, streamed, upstream, url, RefuseFirst};
use crate::support::wire::{within_10s, BOTH};

fn history(res: &reqwest::Response) -> &History {
    res.extensions()
        .get::<History>()
        .expect("a history after a retry")
}

#[tokio::test]
async fn a_503_then_success_is_the_answer_reqwest_would_give() {
    within_10s(async {
        for protocol in BOTH {
            let up = upstream(
                protocol,
                vec![
                    Reply::status(503).into(),
                    Reply::ok().header("x-answer", "yes").body("done").into(),
                ],
            )
            .await;
            let target = url(&up, "/items?page=2");
            let res = client(protocol, BackstopMiddleware::new(quick()))
                .get(&target)
                .send()
                .await
                .expect("an answer");
            assert_eq!(res.status(), 200, "{protocol:?}");
            // What plain reqwest gives for the same request: URL, version, headers.
            let plain = reqwest_client(protocol).get(&target).send().await.unwrap();
            assert_eq!(res.url(), plain.url());
            assert_eq!(res.url().as_str(), target);
            assert_eq!(res.version(), plain.version());
            assert_eq!(res.headers()["x-answer"], "yes");
            let h = history(&res);
            assert_eq!(h.len(), 2);
            assert_eq!(h.stop_reason(), Some(StopReason::Answered));
            assert_eq!(res.text().await.unwrap(), "done");
            // Two attempts of the call, and plain reqwest's one request.
            assert_eq!(up.requests().len(), 3);
        }
    })
    .await
}

#[tokio::test]
async fn a_first_answer_carries_no_history_and_keeps_its_url() {
    within_10s(async {
        let up = upstream(Protocol::Http1, vec![]).await;
        let target = url(&up, "/a/b?q=1");
        let res = client(Protocol::Http1, BackstopMiddleware::new(quick()))
            .get(&target)
            .send()
            .await
            .unwrap();
        assert_eq!(res.url().as_str(), target);
        assert!(res.extensions().get::<History>().is_none());
        assert_eq!(up.requests().len(), 1);
    })
    .await
}

/// On tokio's paused clock: reqwest tolerates it (its pool and connector register
/// no timer of their own on this path, and loopback I/O is ready whenever the
/// runtime looks), so the clock moves only by the waits backstop schedules and the
/// elapsed time is the hint exactly.
#[tokio::test(start_paused = true)]
async fn retry_after_seconds_and_milliseconds_are_waited_exactly() {
    within_10s(async {
        for (header, value, wait) in [
            ("retry-after", "1", Duration::from_secs(1)),
            ("retry-after-ms", "150", Duration::from_millis(150)),
        ] {
            let up = upstream(
                Protocol::Http1,
                vec![Reply::status(503).header(header, value).into()],
            )
            .await;
            let started = tokio::time::Instant::now();
            let res = client(Protocol::Http1, BackstopMiddleware::new(quick()))
                .get(url(&up, "/"))
                .send()
                .await
                .unwrap();
            assert_eq!(started.elapsed(), wait, "{header}: {value}");
            assert_eq!(res.status(), 200);
            assert_eq!(history(&res).attempts()[0].wait, Some(wait), "{header}");
            assert_eq!(up.requests().len(), 2);
        }
    })
    .await
}

#[tokio::test]
async fn a_longer_hint_ends_the_call_with_the_hint_readable() {
    within_10s(async {
        let up = upstream(
            Protocol::Http1,
            vec![Reply::status(429).header("retry-after", "3600").into()],
        )
        .await;
        let started = Instant::now();
        let res = client(Protocol::Http1, BackstopMiddleware::new(quick()))
            .get(url(&up, "/"))
            .send()
            .await
            .unwrap();
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(res.status(), 429);
        assert_eq!(up.requests().len(), 1);
        let h = history(&res);
        assert_eq!(h.retry_after(), Some(Duration::from_secs(3600)));
        assert_eq!(h.stop_reason(), Some(StopReason::RetryAfterTooLong));
    })
    .await
}

#[tokio::test]
async fn a_keyless_post_is_not_sent_again_once_its_body_was_written() {
    within_10s(async {
        for protocol in BOTH {
            let up = upstream(protocol, vec![Step::CloseAfterBody]).await;
            let err = client(protocol, BackstopMiddleware::new(quick()))
                .post(url(&up, "/orders"))
                .body("pay 10")
                .send()
                .await
                .expect_err("the answer was lost");
            assert_eq!(up.requests().len(), 1, "{protocol:?}");
            assert!(up.requests()[0].processed());
            let failed = err.backstop().expect("backstop's error");
            assert_eq!(
                failed.stop_reason(),
                Some(StopReason::NotRetryable(NoRetry::MaybeProcessed))
            );
            assert!(!failed.is_retryable());
            assert_eq!(failed.attempts(), 1);
            // reqwest's own error is one step away, not under a second wrapper.
            let reqwest_err = err.reqwest().expect("the attempt's reqwest error");
            assert!(!reqwest_err.is_connect());
            assert!(std::error::Error::source(failed)
                .unwrap()
                .is::<reqwest::Error>());
        }
    })
    .await
}

#[tokio::test]
async fn a_keyless_post_is_sent_again_after_a_refused_connection() {
    within_10s(async {
        let up = upstream(Protocol::Http1, vec![]).await;
        let resolver = RefuseFirst::default();
        let inner = builder(Protocol::Http1)
            .dns_resolver(resolver.clone())
            .build()
            .unwrap();
        let client = ClientBuilder::new(inner)
            .with(BackstopMiddleware::new(quick()))
            .build();
        let target = format!("http://upstream.test:{}/orders", up.addr().port());
        let res = client
            .post(&target)
            .body("pay 10")
            .send()
            .await
            .expect("sent again to the live address");
        assert_eq!(res.status(), 200);
        assert_eq!(res.url().as_str(), target);
        let h = history(&res);
        assert_eq!(h.len(), 2);
        assert_eq!(
            h.attempts()[0].outcome,
            backstop::policy::AttemptOutcome::Error(ErrorKind::Connect)
        );
        assert_eq!(up.requests().len(), 1);
        assert_eq!(up.requests()[0].body, "pay 10");
        assert_eq!(
            resolver.resolved.load(std::sync::atomic::Ordering::SeqCst),
            2
        );
    })
    .await
}

#[tokio::test]
async fn a_refused_connection_reads_as_connect_through_the_middleware_error() {
    within_10s(async {
        // Nothing listens on 127.0.0.2 at this port: every attempt is refused.
        let up = upstream(Protocol::Http1, vec![]).await;
        let client = client(
            Protocol::Http1,
            BackstopMiddleware::new(RetryPolicy::none()),
        );
        let err = client
            .get(format!("http://127.0.0.2:{}/", up.addr().port()))
            .send()
            .await
            .expect_err("refused");
        assert!(err.reqwest().is_some_and(reqwest::Error::is_connect));
        let failed = err.backstop().unwrap();
        assert_eq!(failed.kind(), ErrorKind::Connect);
        assert!(failed.is_not_processed());
        assert!(!failed.to_string().contains("127.0.0.2"));
    })
    .await
}

#[tokio::test]
async fn a_keyed_post_is_sent_again_with_the_same_key() {
    within_10s(async {
        for protocol in BOTH {
            let up = upstream(protocol, vec![Step::CloseAfterBody]).await;
            let res = client(
                protocol,
                BackstopMiddleware::new(quick()).with_idempotency_keys(),
            )
            .post(url(&up, "/orders"))
            .body("pay 10")
            .send()
            .await
            .expect("re-sent under its key");
            assert_eq!(res.status(), 200);
            let seen = up.requests();
            assert_eq!(seen.len(), 2, "{protocol:?}");
            let key = seen[0].idempotency_key.clone().expect("a key");
            assert_eq!(seen[1].idempotency_key.as_deref(), Some(key.as_str()));
            assert_eq!(seen[1].body, "pay 10");
            assert_eq!(history(&res).len(), 2);
        }
    })
    .await
}

#[tokio::test]
async fn a_streamed_body_is_replayed_byte_for_byte() {
    within_10s(async {
        for protocol in BOTH {
            let up = upstream(protocol, vec![Step::CloseAfterBody]).await;
            let res = client(protocol, BackstopMiddleware::new(quick()))
                .put(url(&up, "/blob"))
                .body(streamed(&[b"first chunk, ", b"second chunk, ", b"the end"]))
                .send()
                .await
                .expect("replayed");
            assert_eq!(res.status(), 200);
            let seen = up.requests();
            assert_eq!(seen.len(), 2, "{protocol:?}");
            assert_eq!(seen[0].body, "first chunk, second chunk, the end");
            assert_eq!(seen[1].body, seen[0].body);
            assert!(seen[1].processed());
        }
    })
    .await
}

#[tokio::test]
async fn a_stream_over_the_cap_is_sent_once_with_the_reason_recorded() {
    within_10s(async {
        let up = upstream(Protocol::Http1, vec![Step::CloseAfterBody]).await;
        let policy = RetryPolicy::builder()
            .backoff(Duration::from_millis(1), Duration::from_millis(5))
            .replay_cap(8)
            .build()
            .unwrap();
        let err = client(Protocol::Http1, BackstopMiddleware::new(policy))
            .put(url(&up, "/blob"))
            .body(streamed(&[b"0123456789", b"abcdefghij"]))
            .send()
            .await
            .expect_err("not replayable");
        assert_eq!(up.requests().len(), 1);
        let failed = err.backstop().unwrap();
        assert!(failed.is_retryable());
        assert_eq!(
            failed.stop_reason(),
            Some(StopReason::BodyNotReplayable(NotReplayable::CapExceeded))
        );
    })
    .await
}

#[tokio::test]
async fn a_buffered_body_over_the_cap_is_still_sent_again() {
    within_10s(async {
        let up = upstream(Protocol::Http1, vec![Step::CloseAfterBody]).await;
        let policy = RetryPolicy::builder()
            .backoff(Duration::from_millis(1), Duration::from_millis(5))
            .replay_cap(8)
            .build()
            .unwrap();
        let body = "a buffered body longer than the cap";
        let res = client(Protocol::Http1, BackstopMiddleware::new(policy))
            .put(url(&up, "/blob"))
            .body(body)
            .send()
            .await
            .expect("re-sent");
        assert_eq!(res.status(), 200);
        let seen = up.requests();
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[1].body, body);
    })
    .await
}

#[tokio::test]
async fn the_budget_holds_a_dead_upstream_to_1_25_requests_per_call() {
    within_10s(async {
        let up = Upstream::builder()
            .protocol(Protocol::Http1)
            .then(Reply::status(503))
            .start()
            .await
            .unwrap();
        let budget = BudgetPolicy::builder()
            .ratio(0.2)
            .min_per_second(0.0)
            .build()
            .unwrap();
        let client = client(
            Protocol::Http1,
            BackstopMiddleware::new(quick()).with_budget(budget),
        );
        let calls = 100;
        let mut stopped_by_budget = 0;
        for _ in 0..calls {
            let res = client.get(url(&up, "/")).send().await.unwrap();
            assert_eq!(res.status(), 503);
            if res
                .extensions()
                .get::<History>()
                .and_then(History::stop_reason)
                == Some(StopReason::Budget)
            {
                stopped_by_budget += 1;
            }
        }
        let sent = up.requests().len();
        assert!(
            sent <= calls * 125 / 100,
            "{sent} upstream requests for {calls} calls"
        );
        assert!(sent > calls, "the budget allows some retries: {sent}");
        assert!(stopped_by_budget > 0);
    })
    .await
}

#[tokio::test]
async fn an_open_breaker_refuses_without_touching_the_network_for_every_clone() {
    within_10s(async {
        let up = Upstream::builder()
            .protocol(Protocol::Http1)
            .then(Reply::status(503))
            .start()
            .await
            .unwrap();
        let breaker = CircuitBreakerPolicy::builder()
            .consecutive_failures(2)
            .cooldown(Duration::from_secs(60))
            .build()
            .unwrap();
        let middleware = BackstopMiddleware::new(RetryPolicy::none()).with_circuit_breaker(breaker);
        let first = client(Protocol::Http1, middleware.clone());
        for _ in 0..2 {
            assert_eq!(first.get(url(&up, "/")).send().await.unwrap().status(), 503);
        }
        let requests = up.requests().len();
        let connections = up.connections();
        // Another client with a clone of the middleware shares the breaker.
        let second = client(Protocol::Http1, middleware.clone());
        for client in [&first, &second] {
            let err = client.get(url(&up, "/")).send().await.expect_err("refused");
            let failed = err.backstop().expect("backstop's error");
            assert!(failed.is_circuit_open());
            assert!(failed.next_probe_at().is_some());
            assert!(err.reqwest().is_none());
        }
        assert_eq!(up.requests().len(), requests);
        assert_eq!(up.connections(), connections);
    })
    .await
}

#[tokio::test]
async fn the_throttle_sheds_calls_to_an_overloaded_origin_for_every_clone() {
    within_10s(async {
        let up = Upstream::builder()
            .protocol(Protocol::Http1)
            .then(Reply::status(429))
            .start()
            .await
            .unwrap();
        let throttle = backstop::ThrottlePolicy::builder().seed(5).build().unwrap();
        let middleware = BackstopMiddleware::new(RetryPolicy::none()).with_throttle(throttle);
        let (first, second) = (
            client(Protocol::Http1, middleware.clone()),
            client(Protocol::Http1, middleware.clone()),
        );
        let (mut sent, mut shed) = (0, 0);
        for _ in 0..20 {
            for client in [&first, &second] {
                match client.get(url(&up, "/")).send().await {
                    Ok(res) => {
                        assert_eq!(res.status(), 429);
                        sent += 1
                    }
                    Err(err) => {
                        let failed = err.backstop().expect("backstop's error");
                        assert!(failed.is_throttled(), "{failed}");
                        assert_eq!(failed.stop_reason(), Some(StopReason::Throttled));
                        assert!(err.reqwest().is_none());
                        shed += 1
                    }
                }
            }
        }
        // The clones count in one window: nearly every call after the first 429
        // is shed, and the shed ones never reached the upstream.
        assert_eq!(sent + shed, 40);
        assert!(shed > 30, "{sent} sent, {shed} shed");
        assert_eq!(up.requests().len(), sent);
        let head = http::Request::get(url(&up, "/"))
            .body(())
            .unwrap()
            .into_parts()
            .0;
        let layer = middleware.throttle().expect("a throttle");
        assert!(layer.probability(&head) > 0.9);
    })
    .await
}

#[tokio::test]
async fn a_hedged_get_answers_from_the_faster_send() {
    within_10s(async {
        let up = upstream(
            Protocol::Http1,
            vec![Reply::ok()
                .body("slow")
                .delay(Duration::from_secs(5))
                .into()],
        )
        .await;
        let hedge = backstop::HedgePolicy::after(Duration::from_millis(50));
        let started = Instant::now();
        let res = client(
            Protocol::Http1,
            BackstopMiddleware::new(quick()).with_hedge(hedge),
        )
        .get(url(&up, "/"))
        .send()
        .await
        .unwrap();
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(res.text().await.unwrap(), "");
        assert_eq!(up.requests().len(), 2);
    })
    .await
}

#[tokio::test]
async fn a_policy_given_with_the_call_overrides_the_middleware() {
    within_10s(async {
        let up = upstream(Protocol::Http1, vec![Reply::status(503).into()]).await;
        let res = client(Protocol::Http1, BackstopMiddleware::new(quick()))
            .get(url(&up, "/"))
            .with_extension(RetryPolicy::none())
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 503);
        assert_eq!(up.requests().len(), 1);
    })
    .await
}

#[tokio::test]
async fn two_middlewares_given_one_budget_layer_spend_from_one_account() {
    within_10s(async {
        let up = Upstream::builder()
            .protocol(Protocol::Http1)
            .then(Reply::status(503))
            .start()
            .await
            .unwrap();
        let budget = backstop::BudgetLayer::new(
            BudgetPolicy::builder()
                .ratio(0.0)
                .min_per_second(0.1)
                .window(std::time::Duration::from_secs(10))
                .build()
                .unwrap(),
        );
        // A floor of one retry in the window, shared by both clients.
        let a = client(
            Protocol::Http1,
            BackstopMiddleware::new(quick()).with_budget_layer(budget.clone()),
        );
        let b = client(
            Protocol::Http1,
            BackstopMiddleware::new(quick()).with_budget_layer(budget.clone()),
        );
        assert_eq!(a.get(url(&up, "/")).send().await.unwrap().status(), 503);
        let after_a = up.requests().len();
        let res = b.get(url(&up, "/")).send().await.unwrap();
        assert_eq!(
            up.requests().len() - after_a,
            1,
            "b finds the account spent"
        );
        assert_eq!(history_or_none(&res), Some(StopReason::Budget));
        assert_eq!(after_a, 2);
    })
    .await
}

fn history_or_none(res: &reqwest::Response) -> Option<StopReason> {
    res.extensions()
        .get::<History>()
        .and_then(History::stop_reason)
}

/// Marks each attempt in the chain's extensions, as a middleware after backstop's.
struct CountAttempts;

#[derive(Clone, Debug, PartialEq)]
struct Attempted(u32);

#[async_trait::async_trait]
impl reqwest_middleware::Middleware for CountAttempts {
    async fn handle(
        &self,
        req: reqwest::Request,
        extensions: &mut http::Extensions,
        next: reqwest_middleware::Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let seen = extensions.get::<Attempted>().map_or(0, |a| a.0);
        extensions.insert(Attempted(seen + 1));
        next.run(req, extensions).await
    }
}

/// Reads the chain's extensions once the call is over, as a middleware before
/// backstop's.
struct ReadAfter(std::sync::Arc<std::sync::Mutex<Option<Attempted>>>);

#[async_trait::async_trait]
impl reqwest_middleware::Middleware for ReadAfter {
    async fn handle(
        &self,
        req: reqwest::Request,
        extensions: &mut http::Extensions,
        next: reqwest_middleware::Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let res = next.run(req, extensions).await;
        *self.0.lock().unwrap() = extensions.get::<Attempted>().cloned();
        res
    }
}

#[tokio::test]
async fn each_attempt_runs_the_rest_of_the_chain_with_its_own_extensions() {
    within_10s(async {
        let up = upstream(
            Protocol::Http1,
            vec![Reply::status(503).into(), Reply::status(503).into()],
        )
        .await;
        let after = std::sync::Arc::new(std::sync::Mutex::new(None));
        let client = ClientBuilder::new(reqwest_client(Protocol::Http1))
            .with(ReadAfter(after.clone()))
            .with(BackstopMiddleware::new(quick()))
            .with(CountAttempts)
            .build();
        let res = client.get(url(&up, "/")).send().await.unwrap();
        assert_eq!(res.status(), 200);
        assert_eq!(up.requests().len(), 3);
        // Each attempt started from the call's extensions; the caller sees the
        // answering attempt's.
        assert_eq!(*after.lock().unwrap(), Some(Attempted(1)));
    })
    .await
}

#[tokio::test]
async fn reqwest_timeouts_stay_reachable_and_a_timed_out_post_is_not_sent_again() {
    within_10s(async {
        let slow = || -> Step { Reply::ok().delay(Duration::from_secs(3)).into() };
        // A GET: every attempt times out on reqwest's per-request timeout.
        let up = upstream(Protocol::Http1, vec![slow(), slow(), slow()]).await;
        let client = client(Protocol::Http1, BackstopMiddleware::new(quick()));
        let err = client
            .get(url(&up, "/"))
            .timeout(Duration::from_millis(100))
            .send()
            .await
            .expect_err("timed out");
        assert!(err.reqwest().is_some_and(reqwest::Error::is_timeout));
        let failed = err.backstop().unwrap();
        assert!(failed.is_timeout());
        assert_eq!(failed.kind(), ErrorKind::Timeout);
        assert_eq!(failed.attempts(), 3);
        assert_eq!(failed.stop_reason(), Some(StopReason::AttemptsExhausted));

        // A keyless POST that timed out may have been processed: sent once.
        let up = upstream(Protocol::Http1, vec![slow()]).await;
        let err = client
            .post(url(&up, "/orders"))
            .body("pay 10")
            .timeout(Duration::from_millis(100))
            .send()
            .await
            .expect_err("timed out");
        let failed = err.backstop().unwrap();
        assert_eq!(
            failed.stop_reason(),
            Some(StopReason::NotRetryable(NoRetry::MaybeProcessed))
        );
        assert_eq!(up.requests().len(), 1);
    })
    .await
}

#[tokio::test]
async fn the_deadline_cuts_the_call() {
    within_10s(async {
        let up = Upstream::builder()
            .protocol(Protocol::Http1)
            .then(Reply::ok().delay(Duration::from_secs(3)))
            .start()
            .await
            .unwrap();
        let policy = RetryPolicy::builder()
            .backoff(Duration::from_millis(1), Duration::from_millis(5))
            .attempt_timeout(Duration::from_millis(150))
            .timeout(Duration::from_millis(400))
            .build()
            .unwrap();
        let started = Instant::now();
        let err = client(Protocol::Http1, BackstopMiddleware::new(policy))
            .get(url(&up, "/"))
            .send()
            .await
            .expect_err("deadline");
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(400), "{took:?}");
        assert!(took < Duration::from_millis(1500), "{took:?}");
        let failed = err.backstop().unwrap();
        assert!(failed.is_timeout());
        assert!(failed.attempts() >= 2);
    })
    .await
}

#[tokio::test]
async fn the_answer_keeps_reqwest_s_own_extensions() {
    within_10s(async {
        let up = upstream(Protocol::Http1, vec![Reply::status(503).into()]).await;
        let res = client(Protocol::Http1, BackstopMiddleware::new(quick()))
            .get(url(&up, "/"))
            .send()
            .await
            .unwrap();
        // reqwest reads the remote address from an extension of its response.
        assert_eq!(res.remote_addr(), Some(up.addr()));
        assert!(res.extensions().get::<History>().is_some());
    })
    .await
}

#[test]
fn a_builder_error_is_never_curable() {
    let err = reqwest::Client::new()
        .get("http://[::1")
        .build()
        .expect_err("an invalid url");
    assert_eq!(backstop::policy::classify_error(&err), ErrorKind::Config);
}

#[tokio::test]
async fn a_buffered_post_follows_a_307_with_its_body_as_plain_reqwest_does() {
    within_10s(async {
        let up = upstream(
            Protocol::Http1,
            vec![Reply::status(307).header("location", "/moved").into()],
        )
        .await;
        let res = client(Protocol::Http1, BackstopMiddleware::new(quick()))
            .post(url(&up, "/orders"))
            .body("pay 10")
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        // The URL after the redirect, as reqwest reports it.
        assert_eq!(res.url().path(), "/moved");
        let seen = up.requests();
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[1].path, "/moved");
        assert_eq!(seen[1].body, "pay 10");
        // One attempt as backstop sees it: reqwest followed the redirect inside it.
        assert!(res.extensions().get::<History>().is_none());
    })
    .await
}

#[tokio::test]
async fn a_get_without_a_body_sends_none() {
    within_10s(async {
        let up = upstream(Protocol::Http1, vec![Reply::status(503).into()]).await;
        let res = client(Protocol::Http1, BackstopMiddleware::new(quick()))
            .get(url(&up, "/"))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        for seen in up.requests() {
            assert!(seen.body.is_empty());
            assert!(seen.headers.get("content-length").is_none());
            assert!(seen.headers.get("transfer-encoding").is_none());
        }
    })
    .await
}

#[tokio::test]
async fn a_keyless_post_refused_by_http2_is_sent_again() {
    within_10s(async {
        for (step, kind) in [
            (Step::RefusedStream, ErrorKind::RefusedStream),
            (Step::GoAway, ErrorKind::GoAway),
        ] {
            let up = upstream(Protocol::Http2, vec![step.clone()]).await;
            let res = client(Protocol::Http2, BackstopMiddleware::new(quick()))
                .post(url(&up, "/orders"))
                .body("pay 10")
                .send()
                .await
                .unwrap_or_else(|e| panic!("{step:?}: {e}"));
            assert_eq!(res.status(), 200, "{step:?}");
            assert_eq!(
                history(&res).attempts()[0].outcome,
                backstop::policy::AttemptOutcome::Error(kind)
            );
            let seen = up.requests();
            assert_eq!(seen.iter().filter(|r| r.processed()).count(), 1, "{step:?}");
            assert_eq!(seen.last().unwrap().body, "pay 10");
        }
    })
    .await
}

#[tokio::test]
async fn routes_that_hedge_are_followed_without_a_hedge_policy_of_the_middlewares() {
    use backstop::hedge::HedgePolicy;
    use backstop::retry::{Route, RoutePolicy, Routes};
    within_10s(async {
        for protocol in BOTH {
            // The original is slow; the route's copy, sent after 50 ms, is fast.
            let up = upstream(
                protocol,
                vec![
                    Reply::ok().delay(Duration::from_millis(2_000)).into(),
                    Reply::ok().body("copy").into(),
                ],
            )
            .await;
            let routes = Routes::new(quick()).route(
                Route::path_prefix("/search"),
                RoutePolicy::new(quick())
                    .hedge(HedgePolicy::after(Duration::from_millis(50)))
                    .unwrap(),
            );
            // Built without `with_hedge`: the route's own hedging is followed, and
            // building it does not fail.
            let middleware = BackstopMiddleware::with_routes(routes);
            let started = Instant::now();
            let res = client(protocol, middleware)
                .get(url(&up, "/search?q=1"))
                .send()
                .await
                .expect("an answer");
            assert_eq!(res.status(), 200, "{protocol:?}");
            // The copy answered, long before the stuck original would have.
            assert_eq!(res.text().await.unwrap(), "copy", "{protocol:?}");
            assert!(
                started.elapsed() < Duration::from_millis(1_500),
                "{protocol:?}"
            );
            assert_eq!(up.requests().len(), 2, "{protocol:?}");
        }
    })
    .await
}

#[tokio::test]
async fn rules_given_once_reach_the_retry_policy_and_the_breaker_in_either_order() {
    within_10s(async {
        // A 418 is retried, and counts as a breaker failure, only under these rules
        // (their classifier says so).
        let rules = || {
            use backstop::policy::{classify_fn, Decision, Observed, Rules, Verdict};
            Rules::builder()
                .classifier(classify_fn(|outcome: Observed<'_>| -> Decision {
                    match outcome {
                        Observed::Response { status, .. } if status == 418 => {
                            Verdict::IfIdempotent.into()
                        }
                        _ => Verdict::NoOpinion.into(),
                    }
                }))
                .build()
                .unwrap()
        };
        let breaker = || {
            CircuitBreakerPolicy::builder()
                .consecutive_failures(2)
                .cooldown(Duration::from_secs(60))
                .build()
                .unwrap()
        };
        // The rules given before the breaker, or after it.
        let middleware = |policy: RetryPolicy, rules_first: bool| {
            let middleware = BackstopMiddleware::new(policy);
            if rules_first {
                middleware
                    .with_rules(rules())
                    .with_circuit_breaker(breaker())
            } else {
                middleware
                    .with_circuit_breaker(breaker())
                    .with_rules(rules())
            }
        };
        for rules_first in [true, false] {
            // The retry policy: the 418 is sent again, and the second answer is it.
            let up = upstream(
                Protocol::Http1,
                vec![Reply::status(418).into(), Reply::ok().into()],
            )
            .await;
            let c = client(Protocol::Http1, middleware(quick(), rules_first));
            let res = c.get(url(&up, "/")).send().await.unwrap();
            assert_eq!(res.status(), 200, "rules first: {rules_first}");
            assert_eq!(up.requests().len(), 2, "rules first: {rules_first}");

            // The breaker: two calls that each end in a 418 open it.
            let teapot = Upstream::builder()
                .protocol(Protocol::Http1)
                .then(Reply::status(418))
                .start()
                .await
                .unwrap();
            let c = client(
                Protocol::Http1,
                middleware(RetryPolicy::none(), rules_first),
            );
            for _ in 0..2 {
                let res = c.get(url(&teapot, "/")).send().await.unwrap();
                assert_eq!(res.status(), 418, "rules first: {rules_first}");
            }
            let err = c.get(url(&teapot, "/")).send().await.expect_err("refused");
            assert!(
                err.backstop().expect("backstop's error").is_circuit_open(),
                "rules first: {rules_first}"
            );
            assert_eq!(teapot.requests().len(), 2, "rules first: {rules_first}");
        }
    })
    .await
}
