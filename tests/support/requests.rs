//! Requests, calls and the paused runtime the layer tests share.

use std::future::Future;

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use tower::{Service, ServiceExt};

pub fn get(uri: &str) -> Request<Full<Bytes>> {
    Request::get(uri).body(Full::default()).unwrap()
}

/// The head of a GET of `uri`, as the layers' inspection methods take it.
pub fn head(uri: &str) -> http::request::Parts {
    Request::get(uri).body(()).unwrap().into_parts().0
}

/// Drives `svc` to readiness and sends it a GET of `uri`.
pub async fn call<S>(svc: &mut S, uri: &str) -> Result<S::Response, S::Error>
where
    S: Service<Request<Full<Bytes>>>,
{
    svc.ready().await?.call(get(uri)).await
}

/// Runs `f` on a current-thread runtime whose clock starts paused (for property
/// tests, which cannot be `#[tokio::test]`s).
pub fn paused<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
        .block_on(f)
}

/// Drives `svc` to readiness (it must get there) and sends it `req`: for services
/// generic over the request body, which cannot infer it from `ready()` alone.
pub async fn call_with<S>(svc: &mut S, req: Request<Full<Bytes>>) -> Result<S::Response, S::Error>
where
    S: Service<Request<Full<Bytes>>>,
{
    match svc.ready().await {
        Ok(svc) => svc.call(req).await,
        Err(_) => panic!("the service failed to get ready"),
    }
}
