//! reqwest's own retry, below the middleware: off in the client backstop builds
//! (every attempt reaching the server is one the policy allowed), on in a client
//! built the default way (where it multiplies them).

use std::time::Duration;

use backstop::policy::History;
use backstop::reqwest::{BackstopMiddleware, ErrorExt};
use backstop::test_util::{Protocol, Reply, Step};
use backstop::RetryPolicy;

use crate::kit::{client, quick, reqwest_client, upstream, url};
use crate::support::wire::{within_10s, BOTH};

/// Two attempts per call.
fn two_attempts() -> RetryPolicy {
    RetryPolicy::builder()
        .max_attempts(2)
        .backoff(Duration::from_millis(1), Duration::from_millis(5))
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_503_then_200_reaches_the_server_twice() {
    within_10s(async {
        for protocol in BOTH {
            let up = upstream(protocol, vec![Reply::status(503).into()]).await;
            let client = client(protocol, BackstopMiddleware::new(quick()));
            let res = client.get(url(&up, "/")).send().await.unwrap();
            assert_eq!(res.status(), 200, "{protocol:?}");
            assert_eq!(up.requests().len(), 2, "{protocol:?}");
        }
        // The whole client, built by the middleware.
        let up = upstream(Protocol::Http1, vec![Reply::status(503).into()]).await;
        let client = BackstopMiddleware::new(quick()).into_client().unwrap();
        let res = client.get(url(&up, "/")).send().await.unwrap();
        assert_eq!(res.status(), 200);
        assert_eq!(up.requests().len(), 2);
    })
    .await;
}

/// A GET through `reqwest` under a two-attempt middleware, to an HTTP/2 upstream
/// that refuses three streams, then answers: the call's result, and how many
/// requests reached the server.
async fn over_refusals(
    reqwest: reqwest::Client,
) -> (reqwest_middleware::Result<reqwest::Response>, usize) {
    let up = upstream(Protocol::Http2, vec![Step::RefusedStream; 3]).await;
    let client = reqwest_middleware::ClientBuilder::new(reqwest)
        .with(BackstopMiddleware::new(two_attempts()))
        .build();
    let sent = client.get(url(&up, "/")).send().await;
    (sent, up.requests().len())
}

#[tokio::test]
async fn refused_streams_reach_the_server_as_often_as_the_policy_says() {
    within_10s(async {
        let (sent, requests) = over_refusals(reqwest_client(Protocol::Http2)).await;
        let err = sent.unwrap_err();
        assert_eq!(err.backstop().expect("backstop's error").attempts(), 2);
        assert_eq!(requests, 2);
    })
    .await;
}

#[tokio::test]
async fn a_client_built_the_default_way_multiplies_the_attempts() {
    within_10s(async {
        let reqwest = reqwest::Client::builder()
            .no_proxy()
            .http2_prior_knowledge()
            .build()
            .unwrap();
        let (sent, requests) = over_refusals(reqwest).await;
        let res = sent.unwrap();
        assert_eq!(res.status(), 200);
        // backstop sent two attempts; reqwest sent its first three times.
        assert_eq!(res.extensions().get::<History>().unwrap().len(), 2);
        assert_eq!(requests, 4);
    })
    .await;
}
