//! reqwest through backstop's reqwest-middleware adapter.

use std::time::Duration;

use backstop::reqwest::{BackstopMiddleware, ErrorExt};
use backstop::test_util::Protocol;
use reqwest::header::AUTHORIZATION;
use reqwest_middleware::ClientWithMiddleware;

use crate::faults::{breaker, failing, policy};
use crate::secrets::{assert_clean, url, BEARER, BODY};
use crate::support::wire::{within_10s, BOTH};

fn client(protocol: Protocol) -> ClientWithMiddleware {
    let builder = backstop::reqwest::client_builder().no_proxy();
    let builder = match protocol {
        Protocol::Http2 => builder.http2_prior_knowledge(),
        _ => builder.http1_only(),
    };
    reqwest_middleware::ClientBuilder::new(builder.build().expect("a reqwest client"))
        .with(BackstopMiddleware::new(policy()).with_circuit_breaker(breaker()))
        .build()
}

async fn send(client: &ClientWithMiddleware, url: &str) -> reqwest_middleware::Error {
    client
        .put(url)
        .header(AUTHORIZATION, BEARER)
        .body(BODY)
        // reqwest's own timeout, shorter than the attempt's: a reqwest error.
        .timeout(Duration::from_millis(200))
        .send()
        .await
        .expect_err("the call fails")
}

#[tokio::test]
async fn no_secret_in_any_failure() {
    within_10s(async {
        for protocol in BOTH {
            let client = client(protocol);
            for up in failing(protocol).await {
                let what = format!("{protocol:?}, {}", up.name);
                let url = url(up.addr);
                let err = send(&client, &url).await;
                assert!(err.backstop().is_some(), "{what}: {err}");
                assert_clean(&what, &err);
                // The breaker opened: the next call is refused.
                let refused = send(&client, &url).await;
                let backstop = refused.backstop().expect("backstop's error");
                assert!(backstop.is_circuit_open(), "{what}: {refused}");
                assert_clean(&what, &refused);
            }
        }
    })
    .await;
}

#[tokio::test]
async fn reqwest_errors_keep_their_predicates_without_the_url() {
    within_10s(async {
        let client = client(Protocol::Http1);
        let refused = crate::secrets::closed_port();
        let err = send(&client, &url(refused)).await;
        let reqwest = err.reqwest().expect("the last attempt's reqwest error");
        assert!(reqwest.is_connect(), "{reqwest:?}");
        assert_eq!(reqwest.url(), None);
    })
    .await;
}
