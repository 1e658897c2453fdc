//! Reloading a running stack: every service swaps at once, calls in flight keep
//! their policy, and a file that is refused leaves the settings in place.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backstop::config::{self, Registry, Reloader};
use backstop::policy::{classify_fn, Observed, Rules, Verdict};
use backstop::ReplayBody;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use tower::{Layer, Service, ServiceExt};

/// A transport that answers 503 with `Retry-After: 2` to every request (so a retry
/// waits exactly 2 s) and counts them by path.
#[derive(Clone, Default)]
struct Failing(Arc<Mutex<HashMap<String, usize>>>);

impl Failing {
    fn sent(&self, path: &str) -> usize {
        self.0.lock().unwrap().get(path).copied().unwrap_or(0)
    }
}

impl Service<Request<ReplayBody<Full<Bytes>>>> for Failing {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<ReplayBody<Full<Bytes>>>) -> Self::Future {
        *self
            .0
            .lock()
            .unwrap()
            .entry(req.uri().path().to_owned())
            .or_default() += 1;
        let res = Response::builder()
            .status(StatusCode::SERVICE_UNAVAILABLE)
            .header(http::header::RETRY_AFTER, "2")
            .body(Full::default())
            .unwrap();
        std::future::ready(Ok(res))
    }
}

fn get(path: &str) -> Request<Full<Bytes>> {
    Request::get(format!("http://upstream.test{path}"))
        .body(Full::default())
        .unwrap()
}

const THREE: &str =
    "budget = false\n[retry]\nmax_attempts = 3\nbackoff = { base = \"1s\", max = \"1s\" }";
const ONE: &str =
    "budget = false\n[retry]\nmax_attempts = 1\nbackoff = { base = \"1s\", max = \"1s\" }";

#[tokio::test(start_paused = true)]
async fn a_call_in_flight_keeps_its_policy_and_the_next_call_takes_the_new_one() {
    let config = config::from_toml(THREE).unwrap();
    let layer = config.clone().builder().build().unwrap().reloadable();
    let reloader = Reloader::new(&layer, &config).unwrap();
    let transport = Failing::default();
    let service = layer.layer(transport.clone());

    // A call under three attempts, in flight: sent, not yet finished.
    let first = tokio::spawn(service.clone().oneshot(get("/first")));
    tokio::task::yield_now().await;
    assert!((1..3).contains(&transport.sent("/first")));
    assert!(!first.is_finished());

    let changes = reloader.reload(config::from_toml(ONE).unwrap()).unwrap();
    // One attempt also means never hedged: the default's hedging changed with it.
    let lines: Vec<String> = changes.iter().map(ToString::to_string).collect();
    assert_eq!(lines, ["retry: changed", "hedging: changed"]);

    // A call that starts now, through a clone made before the reload, is sent once.
    let res = service.clone().oneshot(get("/second")).await.unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(transport.sent("/second"), 1);

    // The call in flight still makes its three attempts.
    tokio::time::advance(Duration::from_secs(5)).await;
    let res = tokio::time::timeout(Duration::from_secs(10), first)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(transport.sent("/first"), 3);
}

#[tokio::test(start_paused = true)]
async fn a_refused_file_leaves_the_routes_in_place() {
    let config = config::from_toml(THREE).unwrap();
    let layer = config.clone().builder().build().unwrap().reloadable();
    let reloader = Reloader::new(&layer, &config).unwrap();
    // A typo never reaches the reloader: the file is refused where it is read.
    assert!(config::from_toml("[retry]\nmax_atempts = 1").is_err());
    // A change of what a reload does not change is refused whole.
    let err = reloader
        .reload(config::from_toml(&format!("{ONE}\n[circuit_breaker]\nprobes = 2")).unwrap())
        .unwrap_err();
    assert_eq!(err.path(), "circuit_breaker");
    // A route that hedges in a stack without a hedge layer is refused.
    let hedging = "budget = false\n[[routes]]\npath_prefix = \"/x\"\nhedge = { delay = \"10ms\" }";
    let err = reloader
        .reload(config::from_toml(hedging).unwrap())
        .unwrap_err();
    assert_eq!(err.path(), "routes");
    // The same file changes nothing.
    assert!(reloader
        .reload(config::from_toml(THREE).unwrap())
        .unwrap()
        .is_empty());

    let transport = Failing::default();
    let res = layer.layer(transport.clone()).oneshot(get("/still")).await;
    tokio::time::advance(Duration::from_secs(5)).await;
    assert_eq!(res.unwrap().status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(transport.sent("/still"), 3);
}

#[test]
fn routes_added_and_removed_are_named() {
    let config = config::from_toml(THREE).unwrap();
    let layer = config.clone().builder().build().unwrap().reloadable();
    let reloader = Reloader::new(&layer, &config).unwrap();
    let two =
        format!("{THREE}\n[[routes]]\nname = \"a\"\npath = \"/a\"\n[[routes]]\npath = \"/b\"");
    let changes = reloader.reload(config::from_toml(&two).unwrap()).unwrap();
    let lines: Vec<String> = changes.iter().map(ToString::to_string).collect();
    assert_eq!(lines, ["routes[0] \"a\": added", "routes[1]: added"]);
    let changes = reloader.reload(config::from_toml(THREE).unwrap()).unwrap();
    assert_eq!(changes.len(), 2);
    assert!(changes.iter().all(|c| c.how() == "removed"));
}

#[tokio::test(start_paused = true)]
async fn a_registered_classifier_is_kept_across_a_reload() {
    // Rules registered by name and named in the file: after the reload the
    // classifier still decides (a 418 is retried).
    let teapots = Rules::builder()
        .retryable_statuses([503])
        .classifier(classify_fn(|outcome: Observed<'_>| match outcome {
            Observed::Response { status, .. } if status.as_u16() == 418 => Verdict::IfIdempotent,
            _ => Verdict::NoOpinion,
        }))
        .build()
        .unwrap();
    let registry = Registry::new().rules("teapots", teapots);
    let file = |n: u32| {
        format!(
            "budget = false\n[retry]\nmax_attempts = {n}\nrules = {{ name = \"teapots\" }}\nbackoff = {{ base = \"1s\", max = \"1s\" }}"
        )
    };
    let config = registry.from_toml(&file(2)).unwrap();
    let layer = config.clone().builder().build().unwrap().reloadable();
    let reloader = Reloader::new(&layer, &config).unwrap();
    reloader
        .reload(registry.from_toml(&file(4)).unwrap())
        .unwrap();

    let sent = Arc::new(Mutex::new(0));
    let counter = sent.clone();
    let teapot = tower::service_fn(move |_req: Request<ReplayBody<Full<Bytes>>>| {
        *counter.lock().unwrap() += 1;
        let res = Response::builder()
            .status(418)
            .body(Full::<Bytes>::default())
            .unwrap();
        std::future::ready(Ok::<_, Infallible>(res))
    });
    let call = tokio::spawn(layer.layer(teapot).oneshot(get("/tea")));
    tokio::time::advance(Duration::from_secs(10)).await;
    let res = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(res.status().as_u16(), 418);
    assert_eq!(*sent.lock().unwrap(), 4);
}
