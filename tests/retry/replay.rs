#![cfg(feature = "test-util")]
//! A body over the replay cap, over real hyper-util clients and loopback upstreams
//! (HTTP/1.1 and HTTP/2): whether it is sent again depends on how far the failed
//! attempt read it, never on its size. A body no attempt read is sent whole; one
//! read no further than the cap is sent from its kept prefix, then the rest of the
//! original stream; one read past the cap is not sent again.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use crate::support::wire::{
    faulty_transport, full, quick, transport, upstream, within_10s, Body, Connect, FaultyConnector,
    BOTH,
};
use backstop::policy::{NotReplayable, StopReason};
use backstop::test_util::{Protocol, Reply, Step, Upstream};
use backstop::{BoxError, HedgeLayer, HedgePolicy, ReplayBody, RetryLayer};
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body::{Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::sync::mpsc;
use tower::{Layer, Service, ServiceExt};

/// 16 KiB chunks.
const CHUNK: usize = 16 * 1024;
/// Six chunks: 96 KiB, over the cap.
const CHUNKS: usize = 6;

/// 96 KiB of bytes that differ from chunk to chunk and within each chunk, so a
/// byte sent twice, skipped or out of order changes what the server receives.
fn payload() -> Vec<Bytes> {
    let mut state = 0x2545_f491_u32;
    (0..CHUNKS)
        .map(|_| {
            let chunk: Vec<u8> = (0..CHUNK)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 17;
                    state ^= state << 5;
                    state as u8
                })
                .collect();
            Bytes::from(chunk)
        })
        .collect()
}

fn joined(chunks: &[Bytes]) -> Vec<u8> {
    chunks.concat()
}

/// A streamed body that announces its exact length (96 KiB: over the cap), fed
/// chunk by chunk through a channel, counting the bytes pulled from it.
struct Announced {
    rx: mpsc::UnboundedReceiver<Bytes>,
    left: u64,
    pulled: Arc<AtomicU64>,
}

impl http_body::Body for Announced {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.left == 0 {
            return Poll::Ready(None);
        }
        match self.rx.poll_recv(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(None) => Poll::Ready(Some(Err("the feed ended early".into()))),
            Poll::Ready(Some(chunk)) => {
                self.left = self.left.saturating_sub(chunk.len() as u64);
                self.pulled.fetch_add(chunk.len() as u64, Ordering::SeqCst);
                Poll::Ready(Some(Ok(Frame::data(chunk))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.left == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.left)
    }
}

/// One upload: its body, the chunks fed to it, and how much was pulled from it.
struct Upload {
    chunks: Vec<Bytes>,
    tx: mpsc::UnboundedSender<Bytes>,
    pulled: Arc<AtomicU64>,
    body: Option<Body>,
}

impl Upload {
    /// The body announces 96 KiB; the first `ready` chunks are fed at once, the
    /// rest by [`feed_rest`](Upload::feed_rest).
    fn new(ready: usize) -> Self {
        let chunks = payload();
        let (tx, rx) = mpsc::unbounded_channel();
        for chunk in &chunks[..ready] {
            tx.send(chunk.clone()).unwrap();
        }
        let pulled = Arc::new(AtomicU64::new(0));
        let body = Announced {
            rx,
            left: (CHUNK * CHUNKS) as u64,
            pulled: Arc::clone(&pulled),
        };
        Upload {
            chunks: chunks[ready..].to_vec(),
            tx,
            pulled,
            body: Some(body.boxed()),
        }
    }

    /// A hook that feeds the chunks not fed yet once the second attempt starts,
    /// and records how much the first attempt had pulled by then.
    fn feed_rest(&self) -> impl Fn() -> Option<u64> + Clone + Send + 'static {
        let rest = Arc::new(Mutex::new(Some((self.tx.clone(), self.chunks.clone()))));
        let pulled = Arc::clone(&self.pulled);
        move || {
            let (tx, chunks) = rest.lock().unwrap().take()?;
            let first = pulled.load(Ordering::SeqCst);
            for chunk in chunks {
                tx.send(chunk).unwrap();
            }
            Some(first)
        }
    }

    fn pulled(&self) -> u64 {
        self.pulled.load(Ordering::SeqCst)
    }
}

/// What one upload through the retry layer came to.
struct Sent {
    up: Upstream,
    result: Result<Response<Incoming>, backstop::Error>,
    /// What the first attempt had pulled when the second was sent.
    first: Option<u64>,
    /// What was pulled from the original in all.
    pulled: u64,
}

impl Sent {
    /// The response, or a panic naming the case and the error.
    fn ok(&self, what: &str) -> &Response<Incoming> {
        match &self.result {
            Ok(res) => res,
            Err(err) => panic!("{what}: {err}"),
        }
    }

    /// What the server received of each request, byte for byte.
    fn assert_received(&self, want: &[&[u8]], what: &str) {
        let seen = self.up.requests();
        assert_eq!(seen.len(), want.len(), "{what}: requests");
        for (i, (seen, want)) in seen.iter().zip(want).enumerate() {
            assert_eq!(seen.body.len(), want.len(), "{what}: request {i}'s length");
            assert!(seen.body[..] == want[..], "{what}: request {i}'s bytes");
        }
    }
}

/// Sends `method` with an upload of `ready` chunks at hand, through the retry
/// layer over `inner`, to an upstream following `steps`. The rest of the body is
/// fed when the second attempt is sent.
async fn send_upload<S>(
    protocol: Protocol,
    steps: Vec<Step>,
    method: Method,
    ready: usize,
    inner: S,
) -> Sent
where
    S: Service<Request<ReplayBody<Body>>, Response = Response<Incoming>> + Clone + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send,
{
    let up = upstream(protocol, steps).await;
    let mut upload = Upload::new(ready);
    let feed = upload.feed_rest();
    let calls = Arc::new(AtomicUsize::new(0));
    let first_pulled = Arc::new(Mutex::new(None));
    let seen = Arc::clone(&first_pulled);
    let inner = tower::util::MapRequest::new(inner, move |req: Request<ReplayBody<Body>>| {
        if calls.fetch_add(1, Ordering::SeqCst) == 1 {
            *seen.lock().unwrap() = feed();
        }
        req
    });
    let req = Request::builder()
        .method(method)
        .uri(up.uri("/upload"))
        .body(upload.body.take().expect("one send per upload"))
        .unwrap();
    let result = RetryLayer::new(quick()).layer(inner).oneshot(req).await;
    let first = *first_pulled.lock().unwrap();
    Sent {
        up,
        result,
        first,
        pulled: upload.pulled(),
    }
}

/// [`send_upload`] over a plain hyper-util client.
async fn upload(protocol: Protocol, steps: Vec<Step>, method: Method, ready: usize) -> Sent {
    send_upload(protocol, steps, method, ready, transport(protocol)).await
}

#[tokio::test]
async fn a_body_over_the_cap_whose_connection_was_refused_is_sent_whole() {
    within_10s(async {
        for protocol in BOTH {
            let want = joined(&payload());
            let up = upstream(protocol, vec![Reply::ok().into()]).await;
            // The first connect goes to a port where nothing listens.
            let client = faulty_transport(protocol, FaultyConnector::new([Connect::Closed]), true);
            let req = Request::post(up.uri("/charges"))
                .body(full(want.clone()))
                .unwrap();
            let res = RetryLayer::new(quick())
                .layer(client)
                .oneshot(req)
                .await
                .unwrap_or_else(|err| panic!("{protocol:?}: {err}"));
            assert_eq!(res.status(), StatusCode::OK, "{protocol:?}");
            let seen = up.requests();
            assert_eq!(seen.len(), 1, "{protocol:?}");
            assert!(seen[0].body[..] == want[..], "{protocol:?}: the bytes sent");
            let history = res.extensions().get::<backstop::policy::History>().unwrap();
            assert_eq!(history.len(), 2, "{protocol:?}");
        }
    })
    .await
}

#[tokio::test]
async fn a_body_over_the_cap_refused_before_it_was_read_is_sent_whole() {
    within_10s(async {
        let cases = [
            (Protocol::Http2, Method::POST, Step::RefusedStream),
            (Protocol::Http2, Method::POST, Step::GoAway),
            (Protocol::Http1, Method::PUT, Step::CloseOnHead),
        ];
        for (protocol, method, step) in cases {
            let what = format!("{protocol:?} {step:?}");
            // Nothing to read until the second attempt is sent.
            let sent = upload(protocol, vec![step, Reply::ok().into()], method, 0).await;
            assert_eq!(sent.ok(&what).status(), StatusCode::OK, "{what}");
            assert_eq!(
                sent.first,
                Some(0),
                "{what}: the first attempt read nothing"
            );
            let want = joined(&payload());
            sent.assert_received(&[b"", &want], &what);
            assert_eq!(sent.pulled, want.len() as u64, "{what}: read once");
        }
    })
    .await
}

#[tokio::test]
async fn a_stream_refused_after_part_of_the_body_is_resent_from_the_kept_prefix() {
    within_10s(async {
        // Three chunks (48 KiB, within the cap and HTTP/2's initial window) are at
        // hand; hyper sends what it has read of them when the refusal arrives.
        for step in [Step::RefusedStream, Step::GoAway] {
            let what = format!("{step:?}");
            let steps = vec![step, Reply::ok().into()];
            let sent = upload(Protocol::Http2, steps, Method::POST, 3).await;
            assert_eq!(sent.ok(&what).status(), StatusCode::OK, "{what}");
            let first = sent.first.expect("a second attempt");
            assert!(
                first <= 3 * CHUNK as u64,
                "{what}: the first attempt read {first}"
            );
            let seen = sent.up.requests();
            assert_eq!(seen.len(), 2, "{what}");
            assert!(!seen[0].processed(), "{what}");
            let want = joined(&payload());
            assert!(seen[1].body[..] == want[..], "{what}: the resent bytes");
            // Prefix from what was kept, the rest from the original, read once.
            assert_eq!(sent.pulled, want.len() as u64, "{what}");
        }
    })
    .await
}

#[tokio::test]
async fn a_body_read_partly_is_resent_from_the_kept_prefix_then_the_untouched_rest() {
    within_10s(async {
        for protocol in BOTH {
            let what = format!("{protocol:?}");
            // Two chunks at hand; the server reads them and closes the connection.
            let steps = vec![Step::CloseAfterBodyBytes(2 * CHUNK), Reply::ok().into()];
            let sent = upload(protocol, steps, Method::PUT, 2).await;
            assert_eq!(sent.ok(&what).status(), StatusCode::OK, "{what}");
            assert_eq!(sent.first, Some(2 * CHUNK as u64), "{what}");
            let want = joined(&payload());
            sent.assert_received(&[&want[..2 * CHUNK], &want], &what);
            // The rest of the original was read once, by the second attempt.
            assert_eq!(sent.pulled, want.len() as u64, "{what}");
        }
    })
    .await
}

#[tokio::test]
async fn a_body_read_past_the_cap_is_not_resent() {
    within_10s(async {
        for protocol in BOTH {
            // Every chunk at hand; the server reads 80 KiB, then closes.
            let steps = vec![Step::CloseAfterBodyBytes(5 * CHUNK), Reply::ok().into()];
            let sent = upload(protocol, steps, Method::PUT, CHUNKS).await;
            let err = sent.result.expect_err("not sent again");
            assert_eq!(
                err.stop_reason(),
                Some(StopReason::BodyNotReplayable(NotReplayable::CapExceeded)),
                "{protocol:?}: {err}"
            );
            assert!(
                err.to_string()
                    .contains("not replayable: body read past the replay cap"),
                "{err}"
            );
            assert_eq!(err.attempts(), 1, "{protocol:?}");
            assert_eq!(sent.up.requests().len(), 1, "{protocol:?}");
        }
    })
    .await
}

#[tokio::test]
async fn beneath_a_hedge_layer_a_refused_body_over_the_cap_is_resent_whole() {
    within_10s(async {
        // A hedge would be due long after the refusal: the send fails alone.
        let hedged = HedgeLayer::new(HedgePolicy::after(Duration::from_secs(5)))
            .layer(transport(Protocol::Http2));
        let steps = vec![Step::RefusedStream, Reply::ok().into()];
        let sent = send_upload(Protocol::Http2, steps, Method::PUT, 0, hedged).await;
        assert_eq!(sent.ok("hedged").status(), StatusCode::OK);
        assert_eq!(sent.first, Some(0));
        let want = joined(&payload());
        sent.assert_received(&[b"", &want], "hedged");
        assert_eq!(sent.pulled, want.len() as u64);
    })
    .await
}

/// Issue 25: hyper 1.12's HTTP/2 body pipe (since hyperium/hyper#4061) pulls the
/// body's one chunk, and asks for the next frame, before it waits for send capacity,
/// so the 96 KiB chunk is read past the 64 KiB cap when the refusal arrives. The chunk
/// crossing the cap is kept whole, so the retry sends it again, byte for byte.
#[tokio::test]
async fn a_single_chunk_over_the_cap_refused_over_http2_is_resent_whole() {
    within_10s(async {
        // The whole 96 KiB in one chunk, refused before the server read any of it.
        for step in [Step::RefusedStream, Step::GoAway] {
            let what = format!("{step:?}");
            let want = joined(&payload());
            let up = upstream(Protocol::Http2, vec![step, Reply::ok().into()]).await;
            let req = Request::post(up.uri("/charges"))
                .body(full(want.clone()))
                .unwrap();
            let res = RetryLayer::new(quick())
                .layer(transport(Protocol::Http2))
                .oneshot(req)
                .await
                .unwrap_or_else(|err| panic!("{what}: {err}"));
            assert_eq!(res.status(), StatusCode::OK, "{what}");
            let seen = up.requests();
            assert_eq!(seen.len(), 2, "{what}: requests");
            assert!(
                seen[0].body.is_empty(),
                "{what}: the refused stream read nothing"
            );
            assert_eq!(seen[1].body.len(), want.len(), "{what}: the resent length");
            assert!(seen[1].body[..] == want[..], "{what}: the resent bytes");
        }
    })
    .await
}
