//! The adaptive throttle's tracing: each shed call, with counts only.

use crate::support::requests::call_with;
use crate::support::script::{status, Reply, Script};
use crate::Captured;
use backstop::throttle::{ThrottleLayer, ThrottlePolicy};
use backstop::{Backstop, RetryPolicy};
use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use tower::Layer;

type Client =
    tower::util::BoxCloneService<Request<Full<Bytes>>, http::Response<Reply>, backstop::Error>;

#[tokio::test(start_paused = true)]
async fn tracing_tells_each_shed_call_without_urls() {
    let (out, _guard) = Captured::debug();
    let throttle = ThrottlePolicy::builder().seed(2).build().unwrap();
    let mock = Script::new((0..20).map(|_| status(503)));
    let stack = Backstop::builder()
        .retry(RetryPolicy::none())
        .throttle(throttle.clone())
        .build()
        .unwrap();
    let alone = ThrottleLayer::new(throttle);
    let mut shed = 0;
    for layer in [0, 1] {
        let mut svc: Client = match layer {
            0 => Client::new(stack.layer(mock.clone())),
            _ => Client::new(alone.layer(mock.clone())),
        };
        for _ in 0..5 {
            let get = Request::get("http://user:pw@upstream.test/items?token=s3cret")
                .body(Full::<Bytes>::default())
                .unwrap();
            if let Err(err) = call_with(&mut svc, get).await {
                assert!(err.is_throttled());
                shed += 1;
            }
        }
    }
    assert!(shed >= 4, "{shed}");
    let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    assert_eq!(
        text.matches("call refused: throttled").count(),
        shed,
        "{text}"
    );
    assert!(
        text.contains("throttled requests=3 accepts=0 probability=0.75"),
        "{text}"
    );
    for secret in ["s3cret", "/items", "upstream.test", "user", "pw@"] {
        assert!(!text.contains(secret), "{secret} leaked into {text}");
    }
}
