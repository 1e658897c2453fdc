#![cfg(feature = "test-util")]
//! A classifier of your own over real hyper-util clients and loopback upstreams,
//! HTTP/1.1 and HTTP/2, for the retry, hedge and breaker layers.

use std::net::SocketAddr;
use std::time::Duration;

use crate::support::wire::{client, empty, quick, transport, upstream, within_10s, Body, BOTH};
use backstop::hedge::{HedgeLayer, HedgePolicy, Hedged};
use backstop::policy::{
    classify_fn, AttemptOutcome, ErrorKind, NoRetry, Observed, Report, Rules, StopReason, Verdict,
};
use backstop::test_util::{Protocol, Reply, Upstream};
use backstop::{CircuitBreakerLayer, CircuitBreakerPolicy, RetryLayer, RetryPolicy};
use http::{HeaderName, Method, Request, StatusCode};
use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tower::{Layer, Service, ServiceBuilder, ServiceExt};

/// An application's own "busy, try again" signal: a 200 with `x-busy`, with a
/// wait hint of `x-busy`'s milliseconds.
fn busy_rules() -> Rules {
    Rules::builder()
        .classifier(classify_fn(|outcome: Observed<'_>| match outcome {
            Observed::Response { headers, .. } => match headers.get("x-busy") {
                Some(ms) => {
                    let ms = ms.to_str().unwrap().parse().unwrap();
                    Verdict::IfIdempotent.after(Duration::from_millis(ms))
                }
                None => Verdict::NoOpinion.into(),
            },
            Observed::Error { .. } => Verdict::NoOpinion.into(),
        }))
        .build()
        .unwrap()
}

fn with_rules(rules: Rules) -> RetryPolicy {
    RetryPolicy::builder()
        .rules(rules)
        .backoff(Duration::from_millis(1), Duration::from_millis(5))
        .build()
        .unwrap()
}

fn request(method: Method, upstream: &Upstream) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(upstream.uri("/items"))
        .body(empty())
        .unwrap()
}

#[tokio::test]
async fn a_classified_200_is_retried_after_its_hint() {
    within_10s(async {
        for protocol in BOTH {
            let up = upstream(
                protocol,
                vec![
                    Reply::ok().header("x-busy", "30").into(),
                    Reply::ok().into(),
                ],
            )
            .await;
            let result = RetryLayer::new(with_rules(busy_rules()))
                .layer(transport(protocol))
                .oneshot(request(Method::GET, &up))
                .await;
            let report = Report::of(&result);
            assert_eq!(report.attempts(), 2, "{protocol:?}");
            assert_eq!(report.stop_reason(), Some(StopReason::Answered));
            assert!(!report.is_retryable());
            let history = report.history().unwrap();
            // The hint replaced the backoff, exactly, and is recorded as the server's.
            assert_eq!(history.attempts()[0].wait, Some(Duration::from_millis(30)));
            assert_eq!(
                history.attempts()[0].retry_after,
                Some(Duration::from_millis(30))
            );
            assert_eq!(up.processed_count(), 2);
            assert_eq!(result.unwrap().status(), StatusCode::OK);
        }
    })
    .await;
}

#[tokio::test]
async fn a_hint_over_the_cap_ends_the_call_with_the_response() {
    within_10s(async {
        let up = upstream(
            Protocol::Http1,
            vec![Reply::ok().header("x-busy", "60000").into()],
        )
        .await;
        let policy = RetryPolicy::builder()
            .rules(busy_rules())
            .max_retry_after(Duration::from_secs(1))
            .build()
            .unwrap();
        let result = RetryLayer::new(policy)
            .layer(transport(Protocol::Http1))
            .oneshot(request(Method::GET, &up))
            .await;
        let report = Report::of(&result);
        assert_eq!(report.stop_reason(), Some(StopReason::RetryAfterTooLong));
        // The policy's verdict on the returned response: worth a retry.
        assert!(report.is_retryable());
        assert_eq!(
            report.history().unwrap().retry_after(),
            Some(Duration::from_secs(60))
        );
        assert_eq!(up.processed_count(), 1);
    })
    .await;
}

#[tokio::test]
async fn retryable_when_idempotent_still_keeps_a_keyless_post_safe() {
    within_10s(async {
        for protocol in BOTH {
            let up = upstream(
                protocol,
                vec![Reply::ok().header("x-busy", "1").into(), Reply::ok().into()],
            )
            .await;
            let result = RetryLayer::new(with_rules(busy_rules()))
                .layer(transport(protocol))
                .oneshot(request(Method::POST, &up))
                .await;
            let report = Report::of(&result);
            assert_eq!(report.attempts(), 1, "{protocol:?}");
            assert_eq!(
                report.stop_reason(),
                Some(StopReason::NotRetryable(NoRetry::MaybeProcessed))
            );
            assert!(!report.is_retryable());
            assert_eq!(up.processed_count(), 1);
            // With a key it is sent again.
            let mut keyed = request(Method::POST, &up);
            keyed
                .headers_mut()
                .insert("idempotency-key", "k-1".parse().unwrap());
            let up2 = upstream(
                protocol,
                vec![Reply::ok().header("x-busy", "1").into(), Reply::ok().into()],
            )
            .await;
            *keyed.uri_mut() = up2.uri("/items");
            let res = RetryLayer::new(with_rules(busy_rules()))
                .layer(transport(protocol))
                .oneshot(keyed)
                .await
                .unwrap();
            assert_eq!(Report::of(&Ok::<_, backstop::Error>(res)).attempts(), 2);
            assert_eq!(up2.processed_count(), 2);
        }
    })
    .await;
}

#[tokio::test]
async fn a_2xx_asking_for_a_retry_is_an_answer() {
    within_10s(async {
        for protocol in BOTH {
            for method in [Method::POST, Method::GET] {
                let up = upstream(
                    protocol,
                    vec![
                        Reply::status(201).header("x-should-retry", "true").into(),
                        Reply::status(201).into(),
                    ],
                )
                .await;
                let res = RetryLayer::new(quick())
                    .layer(transport(protocol))
                    .oneshot(request(method.clone(), &up))
                    .await
                    .unwrap();
                assert_eq!(res.status(), StatusCode::CREATED);
                assert_eq!(up.processed_count(), 1, "{protocol:?} {method}");
                let result = Ok::<_, backstop::Error>(res);
                let report = Report::of(&result);
                assert!(report.history().is_none());
                assert_eq!(report.attempts(), 1);
                assert_eq!(report.stop_reason(), Some(StopReason::Answered));
            }
        }
    })
    .await;
}

/// A port nothing listens on.
async fn closed_port() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    addr
}

#[tokio::test]
async fn error_kinds_are_a_setting() {
    within_10s(async {
        let addr = closed_port().await;
        let uri = format!("http://{addr}/items");
        let get = || Request::get(&uri).body(empty()).unwrap();
        // By default a refused connection is re-sent.
        let err = RetryLayer::new(quick())
            .layer(transport(Protocol::Http1))
            .oneshot(get())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Connect);
        assert_eq!(err.attempts(), 3);
        // Left out of the kinds, it is not.
        let policy = RetryPolicy::builder()
            .retryable_errors([ErrorKind::Dns, ErrorKind::Timeout])
            .build()
            .unwrap();
        let result = RetryLayer::new(policy)
            .layer(transport(Protocol::Http1))
            .oneshot(get())
            .await;
        let report = Report::of(&result);
        assert_eq!(report.attempts(), 1);
        assert_eq!(
            report.stop_reason(),
            Some(StopReason::NotRetryable(NoRetry::KindExcluded))
        );
    })
    .await;
}

/// A resolver that fails its first `failures` look-ups, then resolves to `addr`.
#[derive(Clone)]
struct FlakyDns {
    failures: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    addr: SocketAddr,
}

impl Service<Name> for FlakyDns {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = std::io::Error;
    type Future = std::future::Ready<Result<Self::Response, std::io::Error>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), std::io::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Name) -> Self::Future {
        use std::sync::atomic::Ordering;
        let left = self.failures.load(Ordering::SeqCst);
        if left > 0 {
            self.failures.store(left - 1, Ordering::SeqCst);
            return std::future::ready(Err(std::io::Error::other("no such host")));
        }
        std::future::ready(Ok(vec![self.addr].into_iter()))
    }
}

#[tokio::test]
async fn a_dns_failure_is_a_transient_connect_failure_for_a_post() {
    within_10s(async {
        let up = upstream(Protocol::Http1, vec![Reply::ok().into()]).await;
        let dns = FlakyDns {
            failures: std::sync::Arc::new(1.into()),
            addr: up.addr(),
        };
        let transport: Client<HttpConnector<FlakyDns>, backstop::ReplayBody<Body>> =
            Client::builder(TokioExecutor::new()).build(HttpConnector::new_with_resolver(dns));
        let uri = format!("http://backend.test:{}/items", up.addr().port());
        let req = Request::post(&uri).body(empty()).unwrap();
        let res = RetryLayer::new(quick())
            .layer(transport.clone())
            .oneshot(req)
            .await
            .unwrap();
        let history = res.extensions().get::<backstop::policy::History>().unwrap();
        assert_eq!(
            history.attempts()[0].outcome,
            AttemptOutcome::Error(ErrorKind::Dns)
        );
        assert_eq!(history.len(), 2);
        assert_eq!(up.processed_count(), 1);

        // Always failing: every attempt is a DNS error, named apart.
        let dns = FlakyDns {
            failures: std::sync::Arc::new(usize::MAX.into()),
            addr: up.addr(),
        };
        let transport: Client<HttpConnector<FlakyDns>, backstop::ReplayBody<Body>> =
            Client::builder(TokioExecutor::new()).build(HttpConnector::new_with_resolver(dns));
        let err = RetryLayer::new(quick())
            .layer(transport)
            .oneshot(Request::post(&uri).body(empty()).unwrap())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Dns);
        assert_eq!(err.attempts(), 3);
        assert!(err.is_not_processed());
        assert_eq!(
            err.to_string(),
            "dns error after 3 attempts (attempts exhausted)"
        );
    })
    .await;
}

#[tokio::test]
async fn the_attempt_header_tells_the_server_which_attempt_it_sees() {
    within_10s(async {
        for protocol in BOTH {
            let up = upstream(
                protocol,
                vec![Reply::status(503).into(), Reply::ok().into()],
            )
            .await;
            let rules = Rules::builder()
                .attempt_header(HeaderName::from_static("x-attempt"))
                .build()
                .unwrap();
            RetryLayer::new(with_rules(rules))
                .layer(transport(protocol))
                .oneshot(request(Method::GET, &up))
                .await
                .unwrap();
            let seen: Vec<_> = up
                .requests()
                .iter()
                .map(|r| r.headers["x-attempt"].to_str().unwrap().to_owned())
                .collect();
            assert_eq!(seen, ["1", "2"], "{protocol:?}");
            // Off by default.
            let up = upstream(protocol, vec![Reply::ok().into()]).await;
            RetryLayer::new(quick())
                .layer(transport(protocol))
                .oneshot(request(Method::GET, &up))
                .await
                .unwrap();
            assert!(!up.requests()[0].headers.contains_key("x-attempt"));
        }
    })
    .await;
}

#[tokio::test]
async fn the_breaker_counts_what_the_classifier_calls_a_failure() {
    within_10s(async {
        let up = upstream(
            Protocol::Http1,
            vec![Reply::ok().header("x-busy", "1").into(); 2],
        )
        .await;
        let breaker = CircuitBreakerPolicy::builder()
            .consecutive_failures(2)
            .cooldown(Duration::from_secs(60))
            .rules(busy_rules())
            .build()
            .unwrap();
        let mut svc = ServiceBuilder::new()
            .layer(CircuitBreakerLayer::new(breaker))
            .service(client::<Body>(Protocol::Http1));
        for _ in 0..2 {
            let res = svc
                .ready()
                .await
                .unwrap()
                .call(request(Method::GET, &up))
                .await
                .unwrap();
            assert_eq!(res.status(), StatusCode::OK);
        }
        let err = svc
            .ready()
            .await
            .unwrap()
            .call(request(Method::GET, &up))
            .await
            .unwrap_err();
        assert!(err.is_circuit_open());
        assert_eq!(up.processed_count(), 2);

        // Without the rules, a 200 is a success.
        let plain = CircuitBreakerPolicy::builder()
            .consecutive_failures(2)
            .build()
            .unwrap();
        let up = upstream(
            Protocol::Http1,
            vec![Reply::ok().header("x-busy", "1").into(); 3],
        )
        .await;
        let mut svc = ServiceBuilder::new()
            .layer(CircuitBreakerLayer::new(plain))
            .service(client::<Body>(Protocol::Http1));
        for _ in 0..3 {
            svc.ready()
                .await
                .unwrap()
                .call(request(Method::GET, &up))
                .await
                .unwrap();
        }
        assert_eq!(up.processed_count(), 3);
    })
    .await;
}

#[tokio::test]
async fn the_hedge_layer_waits_past_what_the_classifier_calls_a_failure() {
    within_10s(async {
        for protocol in BOTH {
            for rules in [Some(busy_rules()), None] {
                // The original answers "busy" at 60 ms; the copy, sent at 20 ms,
                // answers at 170 ms.
                let up = upstream(
                    protocol,
                    vec![
                        Reply::ok()
                            .header("x-busy", "1")
                            .delay(Duration::from_millis(60))
                            .into(),
                        Reply::ok().delay(Duration::from_millis(150)).into(),
                    ],
                )
                .await;
                let mut hedge = HedgePolicy::builder().after(Duration::from_millis(20));
                if let Some(rules) = rules.clone() {
                    hedge = hedge.rules(rules);
                }
                let req = Request::get(up.uri("/items"))
                    .body(http_body_util::Full::new(bytes::Bytes::new()))
                    .unwrap();
                let res = HedgeLayer::new(hedge.build().unwrap())
                    .layer(client::<http_body_util::Full<bytes::Bytes>>(protocol))
                    .oneshot(req)
                    .await
                    .unwrap();
                let winner = Hedged::of(&res).unwrap().winner();
                if rules.is_some() {
                    // "Busy" is a failure: the copy's answer wins.
                    assert!(!res.headers().contains_key("x-busy"), "{protocol:?}");
                    assert_eq!(winner, Some(1));
                } else {
                    assert!(res.headers().contains_key("x-busy"), "{protocol:?}");
                    assert_eq!(winner, Some(0));
                }
            }
        }
    })
    .await;
}

#[tokio::test]
async fn tower_timeouts_are_timeouts() {
    within_10s(async {
        let up = upstream(
            Protocol::Http1,
            vec![Reply::ok().delay(Duration::from_secs(5)).into(); 3],
        )
        .await;
        let svc = ServiceBuilder::new()
            .layer(RetryLayer::new(quick()))
            .map_err(|e: backstop::BoxError| e)
            .layer(tower::timeout::TimeoutLayer::new(Duration::from_millis(50)))
            .service(transport(Protocol::Http1));
        let err = svc.oneshot(request(Method::GET, &up)).await.unwrap_err();
        assert!(err.is_timeout());
        assert_eq!(err.kind(), ErrorKind::Timeout);
        assert_eq!(err.attempts(), 3);
        assert!(err.is_retryable());
    })
    .await;
}

#[tokio::test]
async fn one_report_reads_every_shape_of_result() {
    within_10s(async {
        let up = upstream(Protocol::Http1, vec![Reply::status(503).into(); 3]).await;
        // A tower stack's BoxError.
        let svc = ServiceBuilder::new()
            .map_err(|e: backstop::Error| -> backstop::BoxError { e.into() })
            .layer(RetryLayer::new(quick()))
            .service(transport(Protocol::Http1));
        let result = svc.oneshot(request(Method::GET, &up)).await;
        // The last 503 is returned as it is, with its history.
        let report = Report::of(&result);
        assert!(!report.is_error());
        assert_eq!(report.attempts(), 3);
        assert!(report.is_retryable());
        assert_eq!(report.stop_reason(), Some(StopReason::AttemptsExhausted));
        assert_eq!(result.unwrap().status(), StatusCode::SERVICE_UNAVAILABLE);
        // An error that no backstop layer made.
        let other: Result<http::Response<()>, backstop::BoxError> = Err("other".into());
        let report = Report::of(&other);
        assert!(report.is_error());
        assert_eq!(report.attempts(), 0);
        assert_eq!(report.stop_reason(), None);
        // An error from the retry layer, boxed by the stack.
        let addr = closed_port().await;
        let svc = ServiceBuilder::new()
            .map_err(|e: backstop::Error| -> backstop::BoxError { e.into() })
            .layer(RetryLayer::new(quick()))
            .service(transport(Protocol::Http1));
        let req = Request::get(format!("http://{addr}/"))
            .body(empty())
            .unwrap();
        let result = svc.oneshot(req).await;
        let report = Report::of(&result);
        assert!(report.is_error());
        assert_eq!(report.attempts(), 3);
        assert!(report.is_retryable());
        assert_eq!(report.stop_reason(), Some(StopReason::AttemptsExhausted));
        // A non-retryable status that survives is returned, and its report says so.
        let up = upstream(Protocol::Http1, vec![Reply::status(501).into()]).await;
        let result = RetryLayer::new(quick())
            .layer(transport(Protocol::Http1))
            .oneshot(request(Method::GET, &up))
            .await;
        let report = Report::of(&result);
        assert!(!report.is_error());
        assert!(!report.is_retryable());
        assert_eq!(report.stop_reason(), Some(StopReason::Answered));
    })
    .await;
}
