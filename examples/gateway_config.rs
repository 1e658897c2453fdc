//! A gateway configured from a file, reloaded while it serves.
//!
//! `cargo run --example gateway_config --features toml`
//!
//! An axum reverse proxy loads its upstream client's settings from
//! `examples/gateway.toml` (backstop's own format) and serves. Its admin route,
//! `POST /admin/reload`, takes a new file: a file that fails validation (a typo)
//! is refused with its one-line error and the routes in place stay; a valid one
//! swaps the routes at once, for the calls that start from then on, and the
//! gateway prints what changed. The upstream on 127.0.0.1 answers every other
//! catalog request with a 503, so the catalog's retries are what makes its calls
//! succeed; the reload turns them off, and half the calls then fail. The example
//! ends by itself; it reads the file and never writes it.
//!
//! The last line is for scripts:
//! `gateway_config before_ok=<n> refused=<true|false> after_ok=<n> calls=<n>`.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use backstop::config::{self, Reloader};
use backstop::progress::ProgressTracking;
use backstop::stack::{Reloadable, WithHedge};
use backstop::{BoxError, ProgressTrackingLayer, ReplayBody};
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use tokio::net::TcpListener;
use tower::{ServiceBuilder, ServiceExt};

const CALLS: usize = 40;

/// The upstream client: backstop's stack, reloadable, over a hyper-util client.
type Upstreams = Reloadable<ProgressTracking<Client<HttpConnector, ReplayBody<Body>>>, WithHedge>;

#[derive(Clone)]
struct Gateway {
    upstream: SocketAddr,
    client: Upstreams,
    reloader: Arc<Reloader>,
}

/// Proxies a request to the upstream through the backstop client.
async fn proxy(State(gw): State<Gateway>, mut req: Request<Body>) -> Response {
    if !common::to_upstream(&mut req, gw.upstream) {
        return StatusCode::BAD_REQUEST.into_response();
    }
    match gw.client.oneshot(req).await {
        Ok(res) => res.map(Body::new),
        Err(_) => StatusCode::BAD_GATEWAY.into_response(),
    }
}

/// Reloads the client's routes from the file in the body: 200 with what changed,
/// or 422 with the one-line error (the routes in place stay).
async fn reload(State(gw): State<Gateway>, body: String) -> (StatusCode, String) {
    let applied = config::from_toml(&body).and_then(|next| gw.reloader.reload(next));
    match applied {
        Ok(changes) => {
            let lines: Vec<String> = changes.iter().map(ToString::to_string).collect();
            (StatusCode::OK, lines.join("\n"))
        }
        Err(err) => (StatusCode::UNPROCESSABLE_ENTITY, err.to_string()),
    }
}

async fn start_gateway(upstream: SocketAddr, file: &str) -> Result<SocketAddr, BoxError> {
    let settings = config::from_toml(file)?;
    let hedge = settings
        .hedge
        .clone()
        .ok_or("the file gives the stack a hedge policy")?;
    let layer = settings
        .clone()
        .builder()
        .hedge(hedge)
        .build()?
        .reloadable();
    let reloader = Arc::new(Reloader::new(&layer, &settings)?);
    let client = ServiceBuilder::new()
        .layer(layer)
        .layer(ProgressTrackingLayer::new())
        .service(common::client(true));
    let app = Router::new()
        .route("/admin/reload", post(reload))
        .fallback(proxy)
        .with_state(Gateway {
            upstream,
            client,
            reloader,
        });
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(addr)
}

/// Sends `CALLS` catalog reads through the gateway, one after another; how many
/// succeeded.
async fn catalog_reads(load: &Client<HttpConnector, Full<Bytes>>, gateway: SocketAddr) -> usize {
    let mut ok = 0;
    for i in 0..CALLS {
        let req = Request::get(format!("http://{gateway}/catalog/{i}"))
            .body(Full::default())
            .expect("a valid request");
        if let Ok(res) = load.request(req).await {
            ok += usize::from(res.status().is_success());
            let _ = res.into_body().collect().await;
        }
    }
    ok
}

/// Posts `file` to the admin route; its status and answer.
async fn post_reload(
    load: &Client<HttpConnector, Full<Bytes>>,
    gateway: SocketAddr,
    file: String,
) -> Result<(StatusCode, String), BoxError> {
    let req = Request::post(format!("http://{gateway}/admin/reload"))
        .body(Full::new(Bytes::from(file)))?;
    let res = load.request(req).await?;
    let status = res.status();
    let body = res.into_body().collect().await?.to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let file = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/gateway.toml"
    ))?;

    // Every other catalog request fails with a 503.
    let arrivals = Arc::new(AtomicUsize::new(0));
    let upstream = common::serve(true, move |req: Request<hyper::body::Incoming>| {
        let n = arrivals.fetch_add(1, Ordering::Relaxed);
        async move {
            let status = if req.uri().path().starts_with("/catalog") && n.is_multiple_of(2) {
                503
            } else {
                200
            };
            let mut res = http::Response::new(Full::new(Bytes::from_static(b"ok")));
            *res.status_mut() = StatusCode::from_u16(status)?;
            Ok::<_, BoxError>(res)
        }
    })
    .await?;
    let gateway = start_gateway(upstream, &file).await?;
    let load = common::client::<Full<Bytes>>(false);

    let before_ok = catalog_reads(&load, gateway).await;
    println!("loaded examples/gateway.toml: catalog calls={CALLS} ok={before_ok}");

    // A typo: refused, and the routes in place stay.
    let typo = file.replace("max_attempts = 3\nbackoff", "max_atempts = 3\nbackoff");
    let (status, answer) = post_reload(&load, gateway, typo).await?;
    let refused = status == StatusCode::UNPROCESSABLE_ENTITY;
    println!("reload with a typo: {} {answer}", status.as_u16());

    // The catalog sent once from now on.
    let once = file.replace(
        "methods = [\"GET\", \"HEAD\"]\nretry = { max_attempts = 3 }\nhedge = { delay = \"30ms\" }",
        "methods = [\"GET\", \"HEAD\"]\nretry = { max_attempts = 1 }",
    );
    let (status, answer) = post_reload(&load, gateway, once).await?;
    println!("reload: {} {}", status.as_u16(), answer.replace('\n', "; "));

    let after_ok = catalog_reads(&load, gateway).await;
    println!("after the reload: catalog calls={CALLS} ok={after_ok}");
    println!(
        "gateway_config before_ok={before_ok} refused={refused} after_ok={after_ok} calls={CALLS}"
    );
    Ok(())
}
