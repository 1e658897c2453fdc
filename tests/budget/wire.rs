//! The origin pause over real loopback upstreams, HTTP/1.1 and HTTP/2.

use crate::support::shape::BudgetLayer;
use std::time::Duration;

use crate::support::shape::Stack;
use crate::support::wire::{empty, quick, transport, upstream, within_10s, Body, BOTH};
use backstop::policy::Deadline;
use backstop::test_util::{Reply, Step};
use backstop::RetryPolicy;
use http::{Request, StatusCode};
use tokio::time::Instant;
use tower::util::BoxCloneService;
use tower::{Service, ServiceExt};

type Client =
    BoxCloneService<Request<Body>, http::Response<hyper::body::Incoming>, backstop::Error>;

#[tokio::test]
async fn a_429_pauses_the_origin_over_the_wire() {
    within_10s(async {
        for protocol in BOTH {
            let up = upstream(
                protocol,
                vec![Step::Reply(
                    Reply::status(429).header("retry-after-ms", "300"),
                )],
            )
            .await;
            let layer = BudgetLayer::default();
            let once = Stack::new(RetryPolicy::none()).budget(&layer);
            let mut once: Client = crate::stacked!(once, transport(protocol));
            let client = Stack::new(quick()).budget(&layer);
            let mut client: Client = crate::stacked!(client, transport(protocol));
            let get = |deadline: Option<Duration>| {
                let mut req = Request::get(up.uri("/items")).body(empty()).unwrap();
                if let Some(after) = deadline {
                    req.extensions_mut().insert(Deadline::after(after));
                }
                req
            };

            let t0 = Instant::now();
            let res = once.ready().await.unwrap().call(get(None)).await.unwrap();
            assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
            let received = Instant::now();
            let until = layer
                .account(&Request::get(up.uri("/")).body(()).unwrap().into_parts().0)
                .paused_until()
                .expect("paused");
            // The hint counts from when the answer arrived.
            let hint = Duration::from_millis(300);
            assert!(
                until >= t0 + hint && until <= received + hint,
                "{protocol:?}"
            );

            // A deadline inside the pause: refused, nothing sent.
            let err = client
                .ready()
                .await
                .unwrap()
                .call(get(Some(Duration::from_millis(100))))
                .await
                .unwrap_err();
            assert!(err.is_paused() && err.is_retryable(), "{protocol:?}: {err}");
            assert!(err.retry_after().unwrap() <= Duration::from_millis(300));
            assert_eq!(up.requests().len(), 1, "{protocol:?}");

            // Room to wait: it goes once the pause is over, and succeeds.
            let res = client.ready().await.unwrap().call(get(None)).await.unwrap();
            assert_eq!(res.status(), StatusCode::OK, "{protocol:?}");
            assert!(Instant::now() >= until, "{protocol:?}");
            assert_eq!(up.requests().len(), 2, "{protocol:?}");
        }
    })
    .await;
}
