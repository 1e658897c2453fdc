//! A gateway: an axum reverse proxy whose upstream client retries and hedges per
//! route, from one route table.
//!
//! `cargo run --example gateway`
//!
//! A faulty upstream listens on 127.0.0.1 (HTTP/2, cleartext). In front of it an
//! axum server proxies every request through one backstop client: a `Backstop`
//! stack (`Backstop::builder()`: the route table, a default hedge policy,
//! idempotency keys and the default budget) over a hyper-util client wrapped in
//! `ProgressTrackingLayer`, kept in the router's state as its own nameable type.
//! Its route table says:
//!
//! | route | retries | hedging | the upstream's faults |
//! |---|---|---|---|
//! | `payments` (`/payments`) | never (`RetryPolicy::none()`) | never | every 4th call a 503, every 6th answers after 150 ms |
//! | `catalog` (`GET /catalog`) | up to 3 attempts | after 30 ms | every 5th call a 503 first, every 7th answers after 300 ms first |
//! | `orders` (`POST /orders`, keyed) | up to 3 attempts, same key | never | every 3rd call a 503 first, every 5th applied and then its answer lost |
//! | anything else | the defaults | the stack's own (after 20 ms) | none |
//!
//! A payment GET the default route would have hedged after 20 ms (and retried
//! after a 503) reaches the upstream exactly once; catalog reads are retried and
//! hedged at the route's own delay; orders are retried with their idempotency key,
//! which the upstream uses to answer a repeat without applying it twice.
//!
//! The upstream counts, per route, the requests it received and the *duplicates*:
//! writes (payments, orders) it applied a second time for the same call. A load
//! client sends the calls to the gateway over HTTP/1.1, 8 at a time.
//!
//! First, for comparison, the same payments go through a gateway whose client has
//! no route table (the default policy and the stack's own hedge delay): the
//! upstream then applies some payments twice.
//!
//! The last line is for scripts:
//! `gateway payments_calls=<n> payments_upstream=<n> catalog_calls=<n> catalog_ok=<n> duplicates=<n>`.

mod common;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Router;
use backstop::hedge::HedgePolicy;
use backstop::progress::ProgressTracking;
use backstop::retry::{Route, RoutePolicy, Routes};
use backstop::stack::WithHedge;
use backstop::{
    Backstop, BackstopLayer, BoxError, IdempotencyKeyLayer, ProgressTrackingLayer, ReplayBody,
    RetryPolicy,
};
use bytes::Bytes;
use futures_util::stream::{self, StreamExt};
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use tokio::net::TcpListener;
use tower::{ServiceBuilder, ServiceExt};

const PAYMENTS: usize = 48;
const CATALOG: usize = 140;
const ORDERS: usize = 30;
const CONCURRENCY: usize = 8;

// ---------------------------------------------------------------------------
// The upstream: faults decided per call (its `x-call-id`) and per arrival, so the
// counts do not depend on the order in which concurrent calls arrive.
// ---------------------------------------------------------------------------

#[derive(Default)]
struct Counts {
    requests: AtomicUsize,
    duplicates: AtomicUsize,
}

#[derive(Default)]
struct Upstream {
    payments: Counts,
    catalog: Counts,
    orders: Counts,
    /// Every request's call id, in arrival order.
    seen: Mutex<Vec<(String, u64)>>,
    /// The writes applied, by route and call id.
    applied: Mutex<HashSet<(String, u64)>>,
    /// The idempotency keys of the orders applied.
    keys: Mutex<HashSet<String>>,
}

impl Upstream {
    /// How many earlier requests of `route` carried call `id`.
    fn arrival(&self, route: &str, id: u64) -> usize {
        let mut seen = self.seen.lock().unwrap();
        let n = seen.iter().filter(|(r, i)| r == route && *i == id).count();
        seen.push((route.to_owned(), id));
        n
    }

    /// Applies a write; counts it when call `id` was applied before.
    fn apply(&self, route: &str, id: u64, counts: &Counts) {
        if !self.applied.lock().unwrap().insert((route.to_owned(), id)) {
            counts.duplicates.fetch_add(1, Ordering::Relaxed);
        }
    }

    async fn handle(
        self: Arc<Self>,
        req: Request<Incoming>,
    ) -> Result<http::Response<Full<Bytes>>, BoxError> {
        let id: u64 = req
            .headers()
            .get("x-call-id")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let key = req
            .headers()
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let path = req.uri().path().to_owned();
        // The whole body is read: a request that arrives is processed.
        let _body = req.into_body().collect().await?;

        if path.starts_with("/payments") {
            self.payments.requests.fetch_add(1, Ordering::Relaxed);
            // A payment is applied on every arrival, whatever its method.
            self.apply("payments", id, &self.payments);
            if id.is_multiple_of(6) {
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
            return Ok(reply(if id.is_multiple_of(4) { 503 } else { 200 }));
        }
        if path.starts_with("/catalog") {
            self.catalog.requests.fetch_add(1, Ordering::Relaxed);
            let first = self.arrival("catalog", id) == 0;
            if first && id.is_multiple_of(5) {
                return Ok(reply(503));
            }
            if first && id.is_multiple_of(7) {
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            return Ok(reply(200));
        }
        if path.starts_with("/orders") {
            self.orders.requests.fetch_add(1, Ordering::Relaxed);
            let first = self.arrival("orders", id) == 0;
            if first && id.is_multiple_of(3) {
                return Ok(reply(503));
            }
            // A repeat of a key already applied is answered, not applied again.
            let repeat = key
                .as_ref()
                .is_some_and(|k| !self.keys.lock().unwrap().insert(k.clone()));
            if !repeat {
                self.apply("orders", id, &self.orders);
            }
            if first && id.is_multiple_of(5) {
                // Applied, then the answer is lost: the stream is reset.
                return Err("answer lost".into());
            }
            return Ok(reply(201));
        }
        Ok(reply(200))
    }
}

fn reply(status: u16) -> http::Response<Full<Bytes>> {
    let mut res = http::Response::new(Full::new(Bytes::from_static(b"ok")));
    *res.status_mut() = StatusCode::from_u16(status).expect("a valid status");
    res
}

// ---------------------------------------------------------------------------
// The gateway.
// ---------------------------------------------------------------------------

/// The gateway's upstream client: the transport is declared once, for the replay
/// body around axum's body.
type Transport = Client<HttpConnector, ReplayBody<Body>>;

/// The whole client: backstop's stack over the transport, whose attempts
/// `ProgressTrackingLayer` records. One nameable type, whatever the stack holds, so
/// the router's state names it without boxing.
type Upstreams = Backstop<ProgressTracking<Transport>, WithHedge>;

/// The client `layer` makes over a fresh transport.
fn client(layer: BackstopLayer<WithHedge>, h2: bool) -> Upstreams {
    ServiceBuilder::new()
        .layer(layer)
        .layer(ProgressTrackingLayer::new())
        .service(common::client(h2))
}

fn route_table() -> Result<Routes, backstop::policy::InvalidConfig> {
    let retry = RetryPolicy::builder()
        .backoff(Duration::from_millis(2), Duration::from_millis(20))
        .attempt_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(5))
        .build()?;
    Ok(Routes::new(retry.clone())
        // Never repeated, by retry or by hedge.
        .route(
            Route::path_prefix("/payments").named("payments"),
            RetryPolicy::none(),
        )
        // Reads: retried, and hedged after the route's own 30 ms.
        .route(
            Route::path_prefix("/catalog")
                .method(Method::GET)
                .named("catalog"),
            RoutePolicy::new(retry.clone()).hedge(HedgePolicy::after(Duration::from_millis(30)))?,
        )
        // Keyed writes: retried with their key, never hedged.
        .route(
            Route::path_prefix("/orders")
                .method(Method::POST)
                .named("orders"),
            RoutePolicy::new(retry).no_hedging(),
        ))
}

fn upstream_client(h2: bool) -> Result<Upstreams, backstop::policy::InvalidConfig> {
    let layer = Backstop::builder()
        .routes(route_table()?)
        // For the routes that name no hedging of their own.
        .hedge(HedgePolicy::after(Duration::from_millis(20)))
        // One key per POST call, on every attempt.
        .idempotency_key(IdempotencyKeyLayer::new())
        .build()?;
    Ok(client(layer, h2))
}

#[derive(Clone)]
struct Gateway {
    upstream: SocketAddr,
    client: Upstreams,
}

/// Proxies one request to the upstream, through the backstop client.
async fn proxy(State(gw): State<Gateway>, mut req: Request<Body>) -> Response {
    if !common::to_upstream(&mut req, gw.upstream) {
        return StatusCode::BAD_REQUEST.into_response();
    }
    match gw.client.oneshot(req).await {
        Ok(res) => res.map(Body::new),
        // The error names statuses and error kinds only: safe to log.
        Err(err) => {
            eprintln!("upstream call failed: {err}");
            StatusCode::BAD_GATEWAY.into_response()
        }
    }
}

// ---------------------------------------------------------------------------
// The load.
// ---------------------------------------------------------------------------

#[derive(Default)]
struct Outcome {
    calls: usize,
    ok: usize,
}

async fn send(
    client: &Client<HttpConnector, Full<Bytes>>,
    gateway: SocketAddr,
    method: Method,
    path: &str,
    id: u64,
) -> bool {
    let req = Request::builder()
        .method(method)
        .uri(format!("http://{gateway}{path}/{id}"))
        .header("x-call-id", id.to_string())
        .body(Full::new(Bytes::from_static(b"{\"qty\":1}")))
        .expect("a valid request");
    match client.request(req).await {
        Ok(res) => {
            let ok = res.status().is_success();
            let _ = res.into_body().collect().await;
            ok
        }
        Err(_) => false,
    }
}

async fn run(
    client: &Client<HttpConnector, Full<Bytes>>,
    gateway: SocketAddr,
    method: Method,
    path: &str,
    calls: usize,
) -> Outcome {
    let ok = stream::iter(1..=calls as u64)
        .map(|id| send(client, gateway, method.clone(), path, id))
        .buffer_unordered(CONCURRENCY)
        .filter(|ok| std::future::ready(*ok))
        .count()
        .await;
    Outcome { calls, ok }
}

/// A fresh upstream, and its address.
async fn start_upstream() -> std::io::Result<(Arc<Upstream>, SocketAddr)> {
    let upstream = Arc::new(Upstream::default());
    let handler = upstream.clone();
    let addr = common::serve(true, move |req| handler.clone().handle(req)).await?;
    Ok((upstream, addr))
}

/// A gateway in front of `upstream` whose client is `client`; its address.
async fn start_gateway(upstream: SocketAddr, client: Upstreams) -> std::io::Result<SocketAddr> {
    let app = Router::new()
        .fallback(proxy)
        .with_state(Gateway { upstream, client });
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(addr)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let load = common::client::<Full<Bytes>>(false);

    // For comparison: the same payments through a client without the route table,
    // whose default policy retries the 503s and whose hedge policy hedges the slow.
    let (plain_upstream, addr) = start_upstream().await?;
    let plain = Backstop::builder()
        .retry(RetryPolicy::default())
        .hedge(HedgePolicy::after(Duration::from_millis(20)))
        .build()?;
    let gateway = start_gateway(addr, client(plain, true)).await?;
    let before = run(&load, gateway, Method::GET, "/payments/capture", PAYMENTS).await;
    println!(
        "without routes: payments calls={} upstream={} duplicates={}",
        before.calls,
        plain_upstream.payments.requests.load(Ordering::Relaxed),
        plain_upstream.payments.duplicates.load(Ordering::Relaxed),
    );

    // With the route table.
    let (upstream, addr) = start_upstream().await?;
    let gateway = start_gateway(addr, upstream_client(true)?).await?;
    let payments = run(&load, gateway, Method::GET, "/payments/capture", PAYMENTS).await;
    let catalog = run(&load, gateway, Method::GET, "/catalog/items", CATALOG).await;
    let orders = run(&load, gateway, Method::POST, "/orders", ORDERS).await;

    println!(
        "{:<10} {:>6} {:>6} {:>9} {:>11}",
        "route", "calls", "ok", "upstream", "duplicates"
    );
    let rows = [
        ("payments", &payments, &upstream.payments),
        ("catalog", &catalog, &upstream.catalog),
        ("orders", &orders, &upstream.orders),
    ];
    let mut duplicates = 0;
    for (name, outcome, counts) in rows {
        let dup = counts.duplicates.load(Ordering::Relaxed);
        duplicates += dup;
        println!(
            "{:<10} {:>6} {:>6} {:>9} {:>11}",
            name,
            outcome.calls,
            outcome.ok,
            counts.requests.load(Ordering::Relaxed),
            dup
        );
    }
    println!(
        "gateway payments_calls={} payments_upstream={} catalog_calls={} catalog_ok={} duplicates={}",
        payments.calls,
        upstream.payments.requests.load(Ordering::Relaxed),
        catalog.calls,
        catalog.ok,
        duplicates
    );
    Ok(())
}
