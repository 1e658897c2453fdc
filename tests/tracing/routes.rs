//! A named route in tracing: a `route` field on the retry layer's span and on the
//! hedge layer's events.

use std::time::Duration;

use crate::support::gates::Tokens;
use crate::support::script::{slow, status, Script};
use crate::Captured;
use backstop::retry::{Route, RoutePolicy, Routes};
use backstop::{HedgeLayer, HedgePolicy, RetryLayer, RetryPolicy};
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use tower::{ServiceBuilder, ServiceExt};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[tokio::test(start_paused = true)]
async fn the_route_name_is_on_the_retry_span_and_the_hedge_events() {
    let (out, _guard) = Captured::debug();

    let routes = Routes::new(RetryPolicy::default()).route(
        Route::path_prefix("/catalog").named("catalog"),
        RoutePolicy::new(RetryPolicy::default())
            .hedge(HedgePolicy::after(ms(50)))
            .unwrap(),
    );
    let mock = Script::new([slow(ms(1000), 200), status(200), slow(ms(1000), 200)]);
    let stack = ServiceBuilder::new()
        .layer(RetryLayer::with_routes(routes))
        .layer(HedgeLayer::new(HedgePolicy::after(ms(500))))
        .service(mock.clone());

    let req = Request::get("http://upstream.test/catalog/42?token=s3cret")
        .body(Full::<Bytes>::default())
        .unwrap();
    let res = stack.clone().oneshot(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);

    // A spent budget refuses the hedge: that event names the route too.
    let mut req = Request::get("http://upstream.test/catalog/43")
        .body(Full::<Bytes>::default())
        .unwrap();
    backstop::policy::CallContext::of_mut(req.extensions_mut()).set_budget(Tokens::handle(0).0);
    let res = stack.oneshot(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(mock.calls(), 3);

    let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    let line = |what: &str| {
        text.lines()
            .find(|l| l.contains(what))
            .unwrap_or_else(|| panic!("no {what:?} in {text}"))
            .to_owned()
    };
    // The span, on every line within the call.
    let sent = line("hedge sent");
    assert!(
        sent.contains("backstop.retry{http.request.method=GET route=\"catalog\"}"),
        "{sent}"
    );
    // The event's own field, after its message.
    let (_, fields) = sent.split_once("hedge sent").unwrap();
    assert!(fields.contains("copy=1"), "{sent}");
    assert!(fields.contains("route=\"catalog\""), "{sent}");
    let refused = line("hedge not sent");
    let (_, fields) = refused.split_once("hedge not sent").unwrap();
    assert!(fields.contains("gate=\"budget\""), "{refused}");
    assert!(fields.contains("route=\"catalog\""), "{refused}");
    // The host is told only as the request span's `server.address`.
    let text = crate::without_server_address(&text);
    for secret in ["s3cret", "upstream.test", "/catalog"] {
        assert!(!text.contains(secret), "{secret} leaked into {text}");
    }
}
