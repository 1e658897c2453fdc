//! Hedging per route: the retry layer's route table chooses each route's hedging,
//! and the hedge layer beneath follows it. Timing on tokio's paused clock over the
//! in-process mock, then over real loopback servers (HTTP/1.1 and HTTP/2).

use std::time::Duration;

use crate::support::script::{io_error, slow, status, Reply, Script};
use backstop::hedge::{HedgeChoice, HedgeLayer, HedgePolicy, Hedged};
use backstop::policy::{CallContext, History};
use backstop::retry::{Route, RoutePolicy, Routes};
use backstop::{RetryLayer, RetryPolicy};
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use tower::{Service, ServiceBuilder, ServiceExt};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn get(path: &str) -> Request<Full<Bytes>> {
    Request::get(format!("http://upstream.test{path}"))
        .body(Full::default())
        .unwrap()
}

/// A gateway's table: payments sent once, the catalog hedged after 60 ms, reports
/// never hedged; the hedge layer's own delay (500 ms) for everything else.
fn table() -> Routes {
    let quick = RetryPolicy::builder()
        .backoff(ms(1), ms(5))
        .build()
        .unwrap();
    Routes::new(quick.clone())
        .route(
            Route::path_prefix("/payments").named("payments"),
            RetryPolicy::none(),
        )
        .route(
            Route::path_prefix("/catalog").named("catalog"),
            RoutePolicy::new(quick.clone())
                .hedge(HedgePolicy::after(ms(60)))
                .unwrap(),
        )
        .route(
            Route::path_prefix("/reports").named("reports"),
            RoutePolicy::new(quick).no_hedging(),
        )
}

fn stack(
    mock: &Script,
) -> impl Service<Request<Full<Bytes>>, Response = http::Response<Reply>, Error = backstop::Error> + Clone
{
    ServiceBuilder::new()
        .layer(RetryLayer::with_routes(table()))
        .layer(HedgeLayer::new(HedgePolicy::after(ms(500))))
        .service(mock.clone())
}

#[tokio::test(start_paused = true)]
async fn a_none_route_is_neither_retried_nor_hedged() {
    let mock = Script::new([slow(ms(2000), 503)]);
    let res = stack(&mock).oneshot(get("/payments/42")).await.unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(mock.calls(), 1);
    assert!(Hedged::of(&res).is_none());
}

#[tokio::test(start_paused = true)]
async fn a_route_with_its_own_hedge_delay_hedges_at_that_delay() {
    let mock = Script::new([slow(ms(2000), 200), status(200)]);
    let started = tokio::time::Instant::now();
    let res = stack(&mock).oneshot(get("/catalog/7")).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(mock.calls(), 2);
    // The route's 60 ms, not the layer's 500 ms.
    assert_eq!(mock.gaps(), [ms(60)]);
    assert_eq!(started.elapsed(), ms(60));
    assert_eq!(Hedged::of(&res).unwrap().winner(), Some(1));
}

#[tokio::test(start_paused = true)]
async fn a_route_without_hedging_is_not_hedged_while_the_default_route_is() {
    let mock = Script::new([slow(ms(1000), 200)]);
    let mut svc = stack(&mock);
    let res = svc
        .ready()
        .await
        .unwrap()
        .call(get("/reports/q3"))
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(mock.calls(), 1);
    assert!(Hedged::of(&res).is_none());

    let mock = Script::new([slow(ms(1000), 200), status(200)]);
    let res = stack(&mock).oneshot(get("/other")).await.unwrap();
    assert_eq!(mock.calls(), 2);
    assert_eq!(mock.gaps(), [ms(500)]);
    assert_eq!(Hedged::of(&res).unwrap().winner(), Some(1));
}

#[tokio::test(start_paused = true)]
async fn a_per_call_policy_of_one_attempt_is_never_hedged() {
    let mock = Script::new([slow(ms(2000), 200), status(200)]);
    let mut req = get("/catalog/7");
    req.extensions_mut().insert(RetryPolicy::none());
    let res = stack(&mock).oneshot(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(mock.calls(), 1);
    assert!(Hedged::of(&res).is_none());
}

#[tokio::test(start_paused = true)]
async fn the_callers_own_hedge_choice_is_kept() {
    let mock = Script::new([slow(ms(2000), 200), status(200)]);
    let mut req = get("/catalog/7");
    CallContext::of_mut(req.extensions_mut())
        .set_hedge(HedgeChoice::With(HedgePolicy::after(ms(25))));
    let res = stack(&mock).oneshot(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(mock.gaps(), [ms(25)]);

    let mock = Script::new([slow(ms(2000), 200), status(200)]);
    let mut req = get("/other");
    CallContext::of_mut(req.extensions_mut()).set_hedge(HedgeChoice::Off);
    stack(&mock).oneshot(req).await.unwrap();
    assert_eq!(mock.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn the_route_name_is_in_the_history_of_answers_and_errors() {
    let mock = Script::new([status(503), status(200)]);
    let res = stack(&mock).oneshot(get("/catalog/7")).await.unwrap();
    let history = res.extensions().get::<History>().expect("a history");
    assert_eq!(history.route(), Some("catalog"));
    assert!(
        history.to_string().starts_with("route: \"catalog\"\n"),
        "{history}"
    );

    let mock = Script::new([io_error(std::io::ErrorKind::ConnectionReset)]);
    let err = stack(&mock).oneshot(get("/payments/1")).await.unwrap_err();
    assert_eq!(err.history().and_then(History::route), Some("payments"));

    // The default route has no name, and says none.
    let mock = Script::new([status(503), status(200)]);
    let res = stack(&mock).oneshot(get("/other")).await.unwrap();
    let history = res.extensions().get::<History>().unwrap();
    assert_eq!(history.route(), None);
    assert!(history.to_string().starts_with("attempt 1/3"), "{history}");
}

#[test]
fn a_hedge_on_a_route_sent_once_is_refused() {
    let err = RoutePolicy::new(RetryPolicy::none())
        .hedge(HedgePolicy::after(ms(10)))
        .unwrap_err();
    assert_eq!(err.setting(), "hedge");
}

// ---------------------------------------------------------------------------
// Over real loopback servers.
// ---------------------------------------------------------------------------

#[cfg(feature = "test-util")]
mod wire {
    use super::*;

    use std::time::Instant;

    use crate::support::wire::{empty, transport, upstream, within_10s, Body, BOTH};
    use backstop::test_util::{Protocol, Reply};
    use tower::Layer;

    fn client(
        protocol: Protocol,
    ) -> impl Service<
        Request<Body>,
        Response = http::Response<hyper::body::Incoming>,
        Error = backstop::Error,
    > + Clone {
        ServiceBuilder::new()
            .layer(RetryLayer::with_routes(table()))
            .layer(HedgeLayer::new(HedgePolicy::after(ms(2000))))
            .service(transport(protocol))
    }

    fn get(up: &backstop::test_util::Upstream, path: &str) -> Request<Body> {
        Request::get(up.uri(path)).body(empty()).unwrap()
    }

    #[tokio::test]
    async fn a_none_route_reaches_the_server_once() {
        within_10s(async {
            for protocol in BOTH {
                // Slow, then a failure a retry would cure: neither hedged nor retried.
                let up = upstream(protocol, vec![Reply::status(503).delay(ms(300)).into()]).await;
                // The layer's own delay (50 ms) would hedge it, were the route not sent once.
                let svc = ServiceBuilder::new()
                    .layer(RetryLayer::with_routes(table()))
                    .layer(HedgeLayer::new(HedgePolicy::after(ms(50))))
                    .service(transport(protocol));
                let res = svc.oneshot(get(&up, "/payments/1")).await.unwrap();
                assert_eq!(
                    res.status(),
                    StatusCode::SERVICE_UNAVAILABLE,
                    "{protocol:?}"
                );
                assert!(Hedged::of(&res).is_none(), "{protocol:?}");
                assert_eq!(up.requests().len(), 1, "{protocol:?}");
            }
        })
        .await
    }

    #[tokio::test]
    async fn a_route_with_its_own_hedge_delay_hedges_at_that_delay() {
        within_10s(async {
            for protocol in BOTH {
                let up = upstream(protocol, vec![Reply::ok().delay(ms(5000)).into()]).await;
                let started = Instant::now();
                let res = client(protocol)
                    .oneshot(get(&up, "/catalog/1"))
                    .await
                    .unwrap();
                let took = started.elapsed();
                assert_eq!(res.status(), StatusCode::OK, "{protocol:?}");
                let hedged = Hedged::of(&res).expect("hedged");
                assert_eq!(hedged.winner(), Some(1), "{protocol:?}");
                // Sent at the route's 60 ms, long before the layer's 2 s.
                let sent_at = hedged.sent()[1].started;
                assert!(sent_at >= ms(60), "{protocol:?} {sent_at:?}");
                assert!(sent_at < ms(1000), "{protocol:?} {sent_at:?}");
                assert!(took < ms(1500), "{protocol:?} {took:?}");
                assert_eq!(up.requests().len(), 2, "{protocol:?}");
            }
        })
        .await
    }

    #[tokio::test]
    async fn a_route_without_hedging_is_not_hedged_while_the_default_route_is() {
        within_10s(async {
            for protocol in BOTH {
                // The layer hedges after 50 ms here.
                let svc = |protocol| {
                    ServiceBuilder::new()
                        .layer(RetryLayer::with_routes(table()))
                        .layer(HedgeLayer::new(HedgePolicy::after(ms(50))))
                        .service(transport(protocol))
                };
                let up = upstream(
                    protocol,
                    vec![
                        Reply::ok().delay(ms(300)).into(),
                        Reply::ok().delay(ms(3000)).into(),
                    ],
                )
                .await;
                let res = svc(protocol)
                    .oneshot(get(&up, "/reports/q3"))
                    .await
                    .unwrap();
                assert_eq!(res.status(), StatusCode::OK, "{protocol:?}");
                assert!(Hedged::of(&res).is_none(), "{protocol:?}");
                assert_eq!(up.requests().len(), 1, "{protocol:?}");

                let res = svc(protocol).oneshot(get(&up, "/other")).await.unwrap();
                assert_eq!(res.status(), StatusCode::OK, "{protocol:?}");
                assert_eq!(Hedged::of(&res).unwrap().winner(), Some(1), "{protocol:?}");
                assert_eq!(up.requests().len(), 3, "{protocol:?}");
            }
        })
        .await
    }

    #[tokio::test]
    async fn the_route_name_is_in_the_history() {
        within_10s(async {
            for protocol in BOTH {
                let up = upstream(protocol, vec![Reply::status(503).into()]).await;
                let svc = RetryLayer::with_routes(table()).layer(transport(protocol));
                let res = svc.oneshot(get(&up, "/catalog/1")).await.unwrap();
                assert_eq!(res.status(), StatusCode::OK, "{protocol:?}");
                let history = res.extensions().get::<History>().expect("history");
                assert_eq!(history.route(), Some("catalog"), "{protocol:?}");
                assert_eq!(history.len(), 2, "{protocol:?}");
                assert_eq!(up.requests().len(), 2, "{protocol:?}");
            }
        })
        .await
    }
}
