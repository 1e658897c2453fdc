//! The circuit breaker's tracing: each state change and each refused call.

use crate::support::shape::CircuitBreakerLayer;
use std::time::Duration;

use crate::support::requests::call_with;
use crate::support::script::{status, Reply, Script};
use crate::support::shape::Stack;
use crate::Captured;
use backstop::circuit_breaker::CircuitBreakerPolicy;
use backstop::RetryPolicy;
use bytes::Bytes;
use http::Request;
use http_body_util::Full;

type Client =
    tower::util::BoxCloneService<Request<Full<Bytes>>, http::Response<Reply>, backstop::Error>;

/// A breaker that opens after `failures` failed calls in a row, for exactly 1 s.
pub(crate) fn opening_after(failures: u32) -> CircuitBreakerPolicy {
    crate::support::policies::breaker(failures, Duration::from_secs(1))
}

#[tokio::test(start_paused = true)]
async fn tracing_tells_each_breaker_state_change_and_each_refusal() {
    let (out, _guard) = Captured::debug();

    let breaker = opening_after(2);
    let mock = Script::new([status(503), status(503), status(200)]);
    let stack = Stack::new(RetryPolicy::none()).breaker(&CircuitBreakerLayer::new(breaker));
    let mut svc: Client = crate::stacked!(stack, mock.clone());
    let get = || {
        Request::get("http://upstream.test/items?token=s3cret")
            .body(Full::<Bytes>::default())
            .unwrap()
    };
    for _ in 0..2 {
        assert_eq!(call_with(&mut svc, get()).await.unwrap().status(), 503);
    }
    for _ in 0..2 {
        assert!(call_with(&mut svc, get())
            .await
            .unwrap_err()
            .is_circuit_open());
    }
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(call_with(&mut svc, get()).await.unwrap().status(), 200);

    let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    assert_eq!(text.matches("circuit opened").count(), 1, "{text}");
    assert_eq!(text.matches("circuit half-open").count(), 1, "{text}");
    assert_eq!(text.matches("circuit closed").count(), 1, "{text}");
    assert_eq!(
        text.matches("call refused: circuit open").count(),
        2,
        "{text}"
    );
    assert!(text.contains("next_probe_in_ms=1000"), "{text}");
    assert!(text.contains("origin=http://upstream.test"), "{text}");
    for secret in ["s3cret", "/items"] {
        assert!(!text.contains(secret), "{secret} leaked into {text}");
    }
}
