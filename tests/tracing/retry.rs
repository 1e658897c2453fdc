//! The retry layer's tracing.

use std::io;

use crate::support::requests::call_with;
use crate::support::script::{io_error, status, status_with, Script};
use crate::Captured;
use backstop::{RetryLayer, RetryPolicy};
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use std::time::Duration;
use tower::Layer;

#[tokio::test(start_paused = true)]
async fn tracing_tells_retries_scheduled_and_skipped_without_urls() {
    let (out, _guard) = Captured::debug();

    let mock = Script::new([
        status_with(503, &[("retry-after", "1")]),
        io_error(io::ErrorKind::ConnectionReset),
        status(503),
    ]);
    let policy = RetryPolicy::builder()
        .backoff(Duration::from_millis(100), Duration::from_secs(1))
        .build()
        .unwrap();
    let req = Request::get("http://upstream.test/items?token=s3cret")
        .body(Full::<Bytes>::default())
        .unwrap();
    let mut svc = RetryLayer::new(policy).layer(mock.clone());
    let res = call_with(&mut svc, req).await.unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);

    let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    assert_eq!(text.matches("attempt answered").count(), 2, "{text}");
    assert_eq!(text.matches("attempt failed").count(), 1, "{text}");
    assert!(text.contains("status=503"), "{text}");
    assert!(text.contains("error=\"closed\""), "{text}");
    assert_eq!(text.matches("retry scheduled").count(), 2, "{text}");
    assert!(text.contains("reason=idempotent method"), "{text}");
    assert!(text.contains("wait_ms=1000"), "{text}");
    assert_eq!(text.matches("retry skipped").count(), 1, "{text}");
    assert!(text.contains("gate=\"attempts_exhausted\""), "{text}");
    // Recorded once, when the call ends, on its one last event.
    assert_eq!(
        text.matches("http.request.resend_count=").count(),
        1,
        "{text}"
    );
    assert!(text.contains("http.request.resend_count=2"), "{text}");
    assert_eq!(text.matches("call finished").count(), 1, "{text}");
    assert!(text.contains("attempts=3"), "{text}");
    // The host is told only as the request span's `server.address`.
    let text = crate::without_server_address(&text);
    for secret in ["s3cret", "upstream.test", "/items"] {
        assert!(!text.contains(secret), "{secret} leaked into {text}");
    }
}

/// A transport's answer that says when it is polled, and is ready on its second
/// poll.
struct Announced {
    polled: bool,
    status: u16,
}

impl std::future::Future for Announced {
    type Output = Result<http::Response<Full<Bytes>>, io::Error>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        tracing::debug!("transport polled");
        if !self.polled {
            self.polled = true;
            cx.waker().wake_by_ref();
            return std::task::Poll::Pending;
        }
        let mut res = http::Response::new(Full::default());
        *res.status_mut() = StatusCode::from_u16(self.status).unwrap();
        std::task::Poll::Ready(Ok(res))
    }
}

#[tokio::test(start_paused = true)]
async fn the_transport_is_polled_inside_its_request_span_inside_the_call_span() {
    let (out, _guard) = Captured::debug();
    // A 503, then a 200; no backoff, so the resend goes (and is first polled) in
    // the poll that read the 503.
    let answers = std::sync::Arc::new(std::sync::Mutex::new(vec![200, 503]));
    let transport = tower::service_fn(move |_req: Request<backstop::ReplayBody<Full<Bytes>>>| {
        let status = answers.lock().unwrap().pop().unwrap();
        Announced {
            polled: false,
            status,
        }
    });
    let policy = RetryPolicy::builder()
        .backoff(Duration::ZERO, Duration::ZERO)
        .build()
        .unwrap();
    let req = Request::get("http://upstream.test/")
        .body(Full::<Bytes>::default())
        .unwrap();
    let mut svc = RetryLayer::new(policy).layer(transport);
    let res = call_with(&mut svc, req).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);

    let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    let polls: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("transport polled"))
        .collect();
    assert_eq!(polls.len(), 4, "{text}");
    for poll in polls {
        let call = poll.find("backstop.retry").expect(poll);
        let request = poll.find("backstop.request").expect(poll);
        assert!(
            call < request,
            "the request span is inside the call's: {poll}"
        );
    }
}
