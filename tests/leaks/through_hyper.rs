//! hyper-util's legacy client under a `Backstop` stack.

use backstop::test_util::Protocol;
use backstop::{Backstop, BackstopLayer, ProgressTrackingLayer};
use http::header::AUTHORIZATION;
use http::{Request, Response};
use hyper::body::Incoming;
use tower::{ServiceBuilder, ServiceExt};

use crate::faults::{breaker, failing, policy};
use crate::secrets::{assert_clean, url, BEARER, BODY};
use crate::support::wire::{full, transport, within_10s, BOTH};

pub async fn send(
    stack: &BackstopLayer,
    protocol: Protocol,
    url: &str,
) -> Result<Response<Incoming>, backstop::Error> {
    let req = Request::put(url)
        .header(AUTHORIZATION, BEARER)
        .body(full(BODY))
        .expect("a request");
    ServiceBuilder::new()
        .layer(stack.clone())
        .layer(ProgressTrackingLayer::new())
        .service(transport(protocol))
        .oneshot(req)
        .await
}

#[tokio::test]
async fn no_secret_in_any_failure() {
    within_10s(async {
        for protocol in BOTH {
            let stack = Backstop::builder()
                .retry(policy())
                .circuit_breaker(breaker())
                .build()
                .expect("a valid stack");
            for up in failing(protocol).await {
                let what = format!("{protocol:?}, {}", up.name);
                let url = url(up.addr);
                let err = send(&stack, protocol, &url).await.unwrap_err();
                assert_clean(&what, &err);
                // The breaker opened: the next call is refused.
                let refused = send(&stack, protocol, &url).await.unwrap_err();
                assert!(refused.is_circuit_open(), "{what}: {refused}");
                assert_clean(&what, &refused);
            }
        }
    })
    .await;
}
