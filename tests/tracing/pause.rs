//! The origin pause's tracing: paused, resumed, calls that waited, calls refused.

use crate::support::shape::BudgetLayer;
use std::time::Duration;

use crate::support::requests::call_with;
use crate::support::script::{status_with, Reply, Script};
use crate::support::shape::Stack;
use crate::Captured;
use backstop::policy::Deadline;
use backstop::RetryPolicy;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use tower::{Service, ServiceExt};

/// A boxed client (also for `admission.rs`).
pub(crate) type Client =
    tower::util::BoxCloneService<Request<Full<Bytes>>, http::Response<Reply>, backstop::Error>;

/// A GET whose URL carries a secret the traces must not show, with a deadline.
pub(crate) fn get(deadline: Option<Duration>) -> Request<Full<Bytes>> {
    let mut req = Request::get("http://upstream.test/items?token=s3cret")
        .body(Full::default())
        .unwrap();
    if let Some(after) = deadline {
        req.extensions_mut().insert(Deadline::after(after));
    }
    req
}

#[tokio::test(start_paused = true)]
async fn tracing_tells_paused_resumed_waited_and_refused_without_urls() {
    let (out, _guard) = Captured::debug();

    let mock = Script::new([status_with(429, &[("retry-after", "2")])]);
    let policy = RetryPolicy::builder()
        .max_attempts(3)
        .backoff(Duration::from_millis(10), Duration::from_millis(10))
        .build()
        .unwrap();
    let stack = Stack::new(policy).budget(&BudgetLayer::default());
    let mut svc: Client = crate::stacked!(stack, mock.clone());
    // The 429 pauses the origin for 2 s; the call's own retry waits it out.
    let pausing = {
        let mut svc = svc.clone();
        tokio::spawn(async move {
            ServiceExt::<Request<Full<Bytes>>>::ready(&mut svc)
                .await?
                .call(get(None))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(1)).await;
    // Refused: its deadline ends inside the pause.
    let err = call_with(&mut svc, get(Some(Duration::from_secs(1))))
        .await
        .unwrap_err();
    assert!(err.is_paused());
    // Waits, then goes after the pause.
    let res = call_with(&mut svc, get(None)).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(pausing.await.unwrap().unwrap().status(), StatusCode::OK);
    assert_eq!(mock.calls(), 3);

    let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    assert_eq!(
        text.matches("origin paused pause_ms=2000").count(),
        1,
        "{text}"
    );
    assert!(
        text.contains("call refused: origin paused left_ms=1999"),
        "{text}"
    );
    assert_eq!(
        text.matches("call waits for origin pause").count(),
        1,
        "{text}"
    );
    assert_eq!(text.matches("origin resumed").count(), 1, "{text}");
    // The host is told only as the request span's `server.address`.
    let text = crate::without_server_address(&text);
    for secret in ["s3cret", "upstream.test", "/items"] {
        assert!(!text.contains(secret), "{secret} leaked into {text}");
    }
}
