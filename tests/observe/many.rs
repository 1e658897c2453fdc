//! Several observers at once: each sees every event, in the same order.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backstop::observe::{Event, ObserveLayer, Observers};
use backstop::{Backstop, ReplayBody, RetryPolicy};
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use tower::{Layer, ServiceExt};

/// Records the kind of each event it is told.
fn recorder() -> (
    Arc<Mutex<Vec<String>>>,
    impl Fn(&Event<'_>) + Send + Sync + 'static,
) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let into = seen.clone();
    let observer = move |event: &Event<'_>| {
        let kind = format!("{event:?}");
        let kind = kind.split('(').next().unwrap_or_default().to_owned();
        into.lock().unwrap().push(kind);
    };
    (seen, observer)
}

type Answer = std::future::Ready<Result<Response<Full<Bytes>>, Infallible>>;

/// A 503 on the first attempt, a 200 on the second.
fn flaky() -> impl tower::Service<
    Request<ReplayBody<Full<Bytes>>>,
    Response = Response<Full<Bytes>>,
    Error = Infallible,
    Future = Answer,
> + Clone {
    let sent = Arc::new(AtomicUsize::new(0));
    tower::service_fn(move |_req: Request<ReplayBody<Full<Bytes>>>| {
        let status = if sent.fetch_add(1, Ordering::Relaxed) == 0 {
            503
        } else {
            200
        };
        let res = Response::builder()
            .status(status)
            .body(Full::default())
            .unwrap();
        std::future::ready(Ok(res))
    })
}

fn policy() -> RetryPolicy {
    RetryPolicy::builder()
        .backoff(Duration::from_millis(1), Duration::from_millis(1))
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn every_observer_of_a_stack_sees_every_event_in_order() {
    let (first, a) = recorder();
    let (second, b) = recorder();
    let stack = Backstop::builder()
        .retry(policy())
        .observer(Observers::new().with(a).with(b))
        .build()
        .unwrap()
        .layer(flaky());
    let req = Request::get("http://upstream.test/")
        .body(Full::default())
        .unwrap();
    let res = tokio::time::timeout(Duration::from_secs(5), stack.oneshot(req))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(res.status(), 200);
    let first = first.lock().unwrap().clone();
    assert!(first.iter().any(|k| k == "RetryScheduled"), "{first:?}");
    assert_eq!(first.last().map(String::as_str), Some("CallFinished"));
    assert_eq!(*second.lock().unwrap(), first);
}

#[tokio::test(start_paused = true)]
async fn an_observe_layer_tells_several_observers() {
    let (first, a) = recorder();
    let (second, b) = recorder();
    let client = ObserveLayer::new(Observers::new().with(a).with(b))
        .layer(backstop::RetryLayer::new(policy()).layer(flaky()));
    let req = Request::get("http://upstream.test/")
        .body(Full::default())
        .unwrap();
    let res = tokio::time::timeout(Duration::from_secs(5), client.oneshot(req))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(res.status(), 200);
    let first = first.lock().unwrap().clone();
    assert_eq!(first.iter().filter(|k| *k == "AttemptFinished").count(), 2);
    assert_eq!(*second.lock().unwrap(), first);
}
