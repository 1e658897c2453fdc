//! A tonic channel under a `Backstop` stack, called through tonic's client.

use std::time::Duration;

use backstop::test_util::Protocol;
use backstop::{Backstop, BackstopLayer, ReplayBody};
use bytes::Bytes;
use http::uri::PathAndQuery;
use http::{Request, Response};
use tonic::transport::Endpoint;
use tonic::Status;
use tower::ServiceBuilder;

use crate::faults::{breaker, failing, policy};
use crate::secrets::{assert_clean, BEARER, BODY, PATH};
use crate::support::raw_codec::Raw;
use crate::support::wire::within_10s;

type Svc = tower::util::BoxCloneService<
    Request<tonic::body::Body>,
    Response<tonic::body::Body>,
    backstop::Error,
>;

/// A tonic client to `addr` (the endpoint's user information holds a secret)
/// through `stack`.
pub fn client(stack: &BackstopLayer, addr: std::net::SocketAddr) -> tonic::client::Grpc<Svc> {
    let channel = Endpoint::from_shared(format!("http://user:s3cret-pass@{addr}"))
        .expect("an endpoint")
        .connect_lazy();
    let svc = ServiceBuilder::new()
        .layer(stack.clone())
        .map_request(|req: Request<ReplayBody<tonic::body::Body>>| req.map(tonic::body::Body::new))
        .service(channel);
    tonic::client::Grpc::new(Svc::new(svc))
}

/// A call whose method path holds the path's and the query's secrets, with a
/// bearer token in its metadata and a secret in its message.
pub async fn call(grpc: &mut tonic::client::Grpc<Svc>) -> Status {
    grpc.ready().await.expect("ready");
    let mut req = tonic::Request::new(Bytes::from_static(BODY.as_bytes()));
    req.metadata_mut()
        .insert("authorization", BEARER.parse().expect("a metadata value"));
    req.set_timeout(Duration::from_secs(5));
    grpc.unary(req, PathAndQuery::from_static(PATH), Raw)
        .await
        .expect_err("the call fails")
}

#[tokio::test]
async fn no_secret_in_any_failure() {
    within_10s(async {
        for up in failing(Protocol::Http2).await {
            // A stack each: tonic's requests carry no authority, so every channel
            // is one origin to a breaker.
            let stack = Backstop::builder()
                .retry(policy())
                .circuit_breaker(breaker())
                .build()
                .expect("a valid stack");
            let mut grpc = client(&stack, up.addr);
            let status = call(&mut grpc).await;
            assert_clean(up.name, &status);
            // The breaker opened: the next call is refused.
            let refused = call(&mut grpc).await;
            let err = std::error::Error::source(&refused)
                .and_then(|e| e.downcast_ref::<backstop::Error>())
                .expect("backstop's error");
            assert!(err.is_circuit_open(), "{}: {refused:?}", up.name);
            assert_clean(up.name, &refused);
        }
    })
    .await;
}
