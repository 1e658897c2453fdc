use std::collections::VecDeque;
use std::convert::Infallible;
use std::io;
use std::marker::PhantomPinned;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Empty, Full, StreamBody};
use tokio::sync::mpsc;

use super::ReplayBody;
use crate::policy::error::BoxError;
use crate::policy::{AttemptLog, NotReplayable};

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// A frame (or error) in a comparable form.
#[derive(Debug, Clone, PartialEq, Eq)]
enum F {
    Data(Bytes),
    Trailers(HeaderMap),
    Err(String),
}

fn d(s: &str) -> F {
    F::Data(Bytes::copy_from_slice(s.as_bytes()))
}

fn conv(item: Option<Result<Frame<Bytes>, BoxError>>) -> Option<F> {
    match item? {
        Err(e) => Some(F::Err(e.to_string())),
        Ok(frame) => match frame.into_data() {
            Ok(data) => Some(F::Data(data)),
            Err(frame) => match frame.into_trailers() {
                Ok(t) => Some(F::Trailers(t)),
                Err(_) => panic!("unknown frame kind"),
            },
        },
    }
}

async fn next<B>(body: &mut ReplayBody<B>) -> Option<F>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    conv(body.frame().await)
}

/// Every frame up to the end, or up to and including the first error.
async fn all<B>(body: &mut ReplayBody<B>) -> Vec<F>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    let mut out = Vec::new();
    while let Some(f) = next(body).await {
        let stop = matches!(f, F::Err(_));
        out.push(f);
        if stop {
            break;
        }
    }
    out
}

fn poll_once<B>(body: &mut ReplayBody<B>, cx: &mut Context<'_>) -> Poll<Option<F>>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    Pin::new(body).poll_frame(cx).map(conv)
}

/// A waker that counts its wake-ups.
#[derive(Default)]
struct CountWaker(AtomicUsize);

impl Wake for CountWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn count_waker() -> (Arc<CountWaker>, Waker) {
    let c = Arc::new(CountWaker::default());
    let w = Waker::from(Arc::clone(&c));
    (c, w)
}

fn woken(c: &CountWaker) -> usize {
    c.0.load(Ordering::SeqCst)
}

type Frames = futures_util::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>>;

/// A body of data frames (size hint unknown).
fn stream(chunks: &[&str]) -> StreamBody<Frames> {
    stream_with_trailers(chunks, None)
}

fn stream_with_trailers(chunks: &[&str], trailers: Option<HeaderMap>) -> StreamBody<Frames> {
    let mut frames: Vec<Result<Frame<Bytes>, Infallible>> = chunks
        .iter()
        .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c.as_bytes()))))
        .collect();
    if let Some(t) = trailers {
        frames.push(Ok(Frame::trailers(t)));
    }
    StreamBody::new(futures_util::stream::iter(frames))
}

fn trailers() -> HeaderMap {
    let mut t = HeaderMap::new();
    t.insert("x-checksum", HeaderValue::from_static("abc123"));
    t.insert("x-count", HeaderValue::from_static("3"));
    t
}

/// A body fed through a channel, to control when chunks arrive.
struct ChanBody {
    rx: mpsc::UnboundedReceiver<Result<Frame<Bytes>, io::Error>>,
}

impl Body for ChanBody {
    type Data = Bytes;
    type Error = io::Error;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        self.rx.poll_recv(cx)
    }
}

type Tx = mpsc::UnboundedSender<Result<Frame<Bytes>, io::Error>>;

fn chan() -> (Tx, ChanBody) {
    let (tx, rx) = mpsc::unbounded_channel();
    (tx, ChanBody { rx })
}

fn send(tx: &Tx, s: &str) {
    tx.send(Ok(Frame::data(Bytes::copy_from_slice(s.as_bytes()))))
        .unwrap();
}

/// A body with an exact, shrinking size hint that counts its polls.
struct Counted {
    chunks: VecDeque<Bytes>,
    trailers: Option<HeaderMap>,
    polls: Arc<AtomicUsize>,
}

fn counted(chunks: &[&str]) -> (Counted, Arc<AtomicUsize>) {
    let polls = Arc::new(AtomicUsize::new(0));
    let body = Counted {
        chunks: chunks
            .iter()
            .map(|c| Bytes::copy_from_slice(c.as_bytes()))
            .collect(),
        trailers: None,
        polls: Arc::clone(&polls),
    };
    (body, polls)
}

impl Body for Counted {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.polls.fetch_add(1, Ordering::SeqCst);
        if let Some(c) = self.chunks.pop_front() {
            return Poll::Ready(Some(Ok(Frame::data(c))));
        }
        Poll::Ready(self.trailers.take().map(|t| Ok(Frame::trailers(t))))
    }
    fn is_end_stream(&self) -> bool {
        self.chunks.is_empty() && self.trailers.is_none()
    }
    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.chunks.iter().map(|c| c.len() as u64).sum())
    }
}

fn exact(h: SizeHint) -> Option<u64> {
    h.exact()
}

fn not_kept() -> F {
    F::Err("replay body: data no longer kept".into())
}

const CAP: usize = 1024;

// ---------------------------------------------------------------------------
// Types
// ---------------------------------------------------------------------------

#[test]
fn send_sync_static_and_hyper_bounds() {
    fn send_sync_static<T: Send + Sync + 'static>() {}
    fn hyper_body<T>()
    where
        T: Body + Send + Unpin + 'static,
        T::Data: Send,
        T::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
    }
    send_sync_static::<ReplayBody<Full<Bytes>>>();
    hyper_body::<ReplayBody<Full<Bytes>>>();
    // A !Unpin, Send body still gives a Send + Sync + Unpin reader.
    send_sync_static::<ReplayBody<NotUnpin>>();
    hyper_body::<ReplayBody<NotUnpin>>();

    // The client type users declare under the retry layer.
    type Client = hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        ReplayBody<Full<Bytes>>,
    >;
    fn client_is_send_sync<T: Send + Sync + Clone + 'static>() {}
    client_is_send_sync::<Client>();
}

#[tokio::test]
async fn hyper_client_sends_every_reader() {
    use http::header::{CONTENT_LENGTH, TRANSFER_ENCODING};
    use hyper::body::Incoming;
    use hyper_util::rt::{TokioExecutor, TokioIo};

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(|req: http::Request<Incoming>| async move {
                    let cl = req
                        .headers()
                        .get(CONTENT_LENGTH)
                        .map(|v| v.to_str().unwrap().to_owned());
                    let te = req.headers().contains_key(TRANSFER_ENCODING);
                    let body = req.into_body().collect().await?.to_bytes();
                    let text = format!("{cl:?} {te} {}", String::from_utf8_lossy(&body));
                    Ok::<_, hyper::Error>(http::Response::new(Full::new(Bytes::from(text))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });

    let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .build_http::<ReplayBody<Full<Bytes>>>();
    let uri: http::Uri = format!("http://{addr}/").parse().unwrap();

    let first = ReplayBody::new(Full::new(Bytes::from_static(b"hello world")), CAP);
    let second = first.replay();
    let progress = AttemptLog::new();
    let mut first = first;
    first.set_progress(Some(progress.clone()));
    for body in [first, second] {
        let req = http::Request::post(uri.clone()).body(body).unwrap();
        let resp = client.request(req).await.unwrap();
        let text = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&text[..], b"Some(\"11\") false hello world");
    }
    let snap = progress.snapshot();
    assert_eq!(snap.body_bytes, 11);
    assert!(snap.body_complete, "hyper stops after the last data frame");

    // A streamed body: chunked on every attempt, same bytes.
    let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .build_http::<ReplayBody<StreamBody<Frames>>>();
    let first = ReplayBody::new(stream(&["ab", "cd", "ef"]), CAP);
    let readers = [first.replay(), first.replay()];
    let req = http::Request::post(uri.clone()).body(first).unwrap();
    let resp = client.request(req).await.unwrap();
    let text = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&text[..], b"None true abcdef");
    for body in readers {
        assert!(body.is_fully_kept());
        let req = http::Request::post(uri.clone()).body(body).unwrap();
        let resp = client.request(req).await.unwrap();
        let text = resp.into_body().collect().await.unwrap().to_bytes();
        // Fully kept: the hint is exact, so hyper sends a content-length.
        assert_eq!(&text[..], b"Some(\"6\") false abcdef");
    }
}

// ---------------------------------------------------------------------------
// Basic replay
// ---------------------------------------------------------------------------

#[tokio::test]
async fn one_chunk() {
    let mut first = ReplayBody::new(Full::new(Bytes::from_static(b"hello")), CAP);
    assert!(!first.is_fully_kept());
    assert_eq!(first.replayable(), Ok(()));
    assert!(!first.is_end_stream());
    assert_eq!(next(&mut first).await, Some(d("hello")));
    // Full says it is at its end after its one chunk: kept without a further poll.
    assert!(first.is_end_stream());
    assert!(first.is_fully_kept());
    assert_eq!(next(&mut first).await, None);
    assert_eq!(next(&mut first).await, None, "None again after None");

    let mut second = first.replay();
    assert_eq!(exact(second.size_hint()), Some(5));
    assert!(!second.is_end_stream());
    assert_eq!(all(&mut second).await, vec![d("hello")]);
    assert!(second.is_end_stream());
    assert_eq!(next(&mut second).await, None);
}

#[tokio::test]
async fn several_chunks() {
    let mut first = ReplayBody::new(stream(&["a", "bc", "def", "ghij"]), CAP);
    let want = vec![d("a"), d("bc"), d("def"), d("ghij")];
    assert_eq!(all(&mut first).await, want);
    assert!(first.is_fully_kept());
    assert_eq!(first.replayable(), Ok(()));
    let mut second = first.replay();
    assert_eq!(exact(second.size_hint()), Some(10));
    assert_eq!(all(&mut second).await, want);
}

#[tokio::test]
async fn chunks_are_shared_not_copied() {
    let data = Bytes::from(vec![7u8; 64]);
    let mut first = ReplayBody::new(Full::new(data.clone()), CAP);
    let Some(Ok(frame)) = first.frame().await else {
        panic!("no frame")
    };
    let a = frame.into_data().unwrap();
    let mut second = first.replay();
    let Some(Ok(frame)) = second.frame().await else {
        panic!("no frame")
    };
    let b = frame.into_data().unwrap();
    assert_eq!(a.as_ptr(), data.as_ptr());
    assert_eq!(b.as_ptr(), data.as_ptr());
}

#[tokio::test]
async fn trailers_replayed() {
    let mut first = ReplayBody::new(stream_with_trailers(&["ab", "cd"], Some(trailers())), CAP);
    let want = vec![d("ab"), d("cd"), F::Trailers(trailers())];
    assert_eq!(all(&mut first).await, want);
    assert!(first.is_end_stream());
    assert_eq!(next(&mut first).await, None);
    assert!(first.is_fully_kept());

    let mut second = first.replay();
    assert_eq!(next(&mut second).await, Some(d("ab")));
    assert_eq!(next(&mut second).await, Some(d("cd")));
    assert!(!second.is_end_stream(), "trailers still to come");
    assert_eq!(next(&mut second).await, Some(F::Trailers(trailers())));
    assert!(second.is_end_stream());
    assert_eq!(next(&mut second).await, None);
}

#[tokio::test]
async fn trailers_only() {
    let mut first = ReplayBody::new(stream_with_trailers(&[], Some(trailers())), CAP);
    assert_eq!(all(&mut first).await, vec![F::Trailers(trailers())]);
    assert!(first.is_fully_kept());
    let mut second = first.replay();
    assert_eq!(all(&mut second).await, vec![F::Trailers(trailers())]);
}

#[tokio::test]
async fn several_replays() {
    let mut readers = vec![ReplayBody::new(
        stream_with_trailers(&["one ", "two ", "three"], Some(trailers())),
        CAP,
    )];
    let want = vec![d("one "), d("two "), d("three"), F::Trailers(trailers())];
    for i in 0..4 {
        let mut r = readers[i].replay();
        if i == 0 {
            // The first reader reads first.
            assert_eq!(all(&mut readers[0]).await, want);
        }
        assert_eq!(all(&mut r).await, want, "reader {}", i + 1);
        readers.push(r);
    }
    for r in &readers {
        assert!(r.is_fully_kept());
        assert_eq!(r.replayable(), Ok(()));
    }
}

#[tokio::test]
async fn reader_made_before_first_reads() {
    // A replay made before anything was read, read after the first one finished.
    let (body, polls) = counted(&["x", "yz"]);
    let mut first = ReplayBody::new(body, CAP);
    let mut second = first.replay();
    assert_eq!(exact(second.size_hint()), Some(3));
    assert_eq!(all(&mut first).await, vec![d("x"), d("yz")]);
    let after_first = polls.load(Ordering::SeqCst);
    assert_eq!(all(&mut second).await, vec![d("x"), d("yz")]);
    assert_eq!(
        polls.load(Ordering::SeqCst),
        after_first,
        "a replay of a kept body does not touch the original"
    );
}

#[tokio::test]
async fn replay_after_full_read_does_not_touch_original() {
    let (mut body, polls) = counted(&["ab", "c"]);
    body.trailers = Some(trailers());
    let mut first = ReplayBody::new(body, CAP);
    assert_eq!(
        all(&mut first).await,
        vec![d("ab"), d("c"), F::Trailers(trailers())]
    );
    assert_eq!(polls.load(Ordering::SeqCst), 3);
    for _ in 0..3 {
        let mut r = first.replay();
        assert_eq!(
            all(&mut r).await,
            vec![d("ab"), d("c"), F::Trailers(trailers())]
        );
    }
    assert_eq!(polls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn empty_data_frames_pass_through() {
    let mut first = ReplayBody::new(stream(&["a", "", "b", ""]), CAP);
    assert_eq!(all(&mut first).await, vec![d("a"), d(""), d("b"), d("")]);
    assert!(first.is_fully_kept());
    // Empty frames carry nothing and are not kept.
    let mut second = first.replay();
    assert_eq!(all(&mut second).await, vec![d("a"), d("b")]);
}

// ---------------------------------------------------------------------------
// Switching attempts mid-stream
// ---------------------------------------------------------------------------

#[tokio::test]
async fn replay_started_half_way() {
    let (tx, body) = chan();
    let mut first = ReplayBody::new(body, CAP);
    send(&tx, "aa");
    send(&tx, "bb");
    assert_eq!(next(&mut first).await, Some(d("aa")));
    assert_eq!(next(&mut first).await, Some(d("bb")));
    assert!(!first.is_fully_kept());
    assert_eq!(first.replayable(), Ok(()));

    // The first attempt stops; a new one starts with body remaining.
    let mut second = first.replay();
    assert_eq!(next(&mut second).await, Some(d("aa")));
    assert_eq!(next(&mut second).await, Some(d("bb")));
    send(&tx, "cc");
    send(&tx, "dd");
    drop(tx);
    assert_eq!(all(&mut second).await, vec![d("cc"), d("dd")]);
    assert!(first.is_fully_kept());

    // The stale first reader sees the same sequence if it is polled again.
    assert_eq!(all(&mut first).await, vec![d("cc"), d("dd")]);

    // A third reader gets everything.
    let mut third = second.replay();
    assert_eq!(
        all(&mut third).await,
        vec![d("aa"), d("bb"), d("cc"), d("dd")]
    );
}

#[tokio::test]
async fn two_readers_interleaved_while_streaming() {
    let (tx, body) = chan();
    let mut a = ReplayBody::new(body, CAP);
    let mut b = a.replay();
    let (ca, wa) = count_waker();
    let (cb, wb) = count_waker();
    let mut cxa = Context::from_waker(&wa);
    let mut cxb = Context::from_waker(&wb);

    // Both wait on the original.
    assert_eq!(poll_once(&mut a, &mut cxa), Poll::Pending);
    assert_eq!(poll_once(&mut b, &mut cxb), Poll::Pending);

    // A chunk arrives: both readers are woken, not just the last one to poll.
    send(&tx, "1");
    assert_eq!(woken(&ca), 1);
    assert_eq!(woken(&cb), 1);

    // b pulls it; a gets it from the kept chunks.
    assert_eq!(poll_once(&mut b, &mut cxb), Poll::Ready(Some(d("1"))));
    assert_eq!(poll_once(&mut a, &mut cxa), Poll::Ready(Some(d("1"))));

    // a waits, then b waits; both are woken when data arrives, a pulls it all.
    assert_eq!(poll_once(&mut a, &mut cxa), Poll::Pending);
    assert_eq!(poll_once(&mut b, &mut cxb), Poll::Pending);
    let before = woken(&cb);
    send(&tx, "2");
    send(&tx, "3");
    assert!(woken(&cb) > before);
    assert_eq!(poll_once(&mut a, &mut cxa), Poll::Ready(Some(d("2"))));
    assert_eq!(poll_once(&mut a, &mut cxa), Poll::Ready(Some(d("3"))));
    assert_eq!(poll_once(&mut b, &mut cxb), Poll::Ready(Some(d("2"))));
    assert_eq!(poll_once(&mut a, &mut cxa), Poll::Pending);
    assert_eq!(poll_once(&mut b, &mut cxb), Poll::Ready(Some(d("3"))));
    assert_eq!(poll_once(&mut b, &mut cxb), Poll::Pending);

    // The end: both are woken and both end.
    let (wa_before, wb_before) = (woken(&ca), woken(&cb));
    drop(tx);
    assert!(woken(&ca) > wa_before);
    assert!(woken(&cb) > wb_before);
    assert_eq!(poll_once(&mut b, &mut cxb), Poll::Ready(None));
    assert_eq!(poll_once(&mut a, &mut cxa), Poll::Ready(None));
    assert!(a.is_fully_kept());
}

/// A body that is ready on every second poll and never wakes anyone.
struct Alternating {
    polls: usize,
}

impl Body for Alternating {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.polls += 1;
        match self.polls {
            1 | 3 => Poll::Pending,
            2 => Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"x"))))),
            _ => Poll::Ready(None),
        }
    }
}

#[test]
fn a_pull_wakes_the_readers_waiting_on_the_original() {
    let mut a = ReplayBody::new(Alternating { polls: 0 }, CAP);
    let mut b = a.replay();
    let (ca, wa) = count_waker();
    let (cb, wb) = count_waker();
    let mut cxa = Context::from_waker(&wa);
    let mut cxb = Context::from_waker(&wb);
    assert_eq!(poll_once(&mut b, &mut cxb), Poll::Pending);
    assert_eq!(woken(&cb), 0);
    // a's poll finds the chunk the original never announced: b must hear of it.
    assert_eq!(poll_once(&mut a, &mut cxa), Poll::Ready(Some(d("x"))));
    assert_eq!(woken(&cb), 1);
    assert_eq!(woken(&ca), 0, "the puller is not woken needlessly");
    assert_eq!(poll_once(&mut b, &mut cxb), Poll::Ready(Some(d("x"))));
    // b waits; a's pull of the end wakes it.
    assert_eq!(poll_once(&mut b, &mut cxb), Poll::Pending);
    assert_eq!(poll_once(&mut a, &mut cxa), Poll::Ready(None));
    assert_eq!(woken(&cb), 2);
    assert_eq!(poll_once(&mut b, &mut cxb), Poll::Ready(None));
    assert!(a.is_fully_kept());
}

#[test]
fn same_waker_for_two_readers_is_still_woken() {
    // Two readers polled by one task (one waker): a pull by one must still wake
    // the task for the other.
    let mut a = ReplayBody::new(Alternating { polls: 0 }, CAP);
    let mut b = a.replay();
    let (c, w) = count_waker();
    let mut cx = Context::from_waker(&w);
    assert_eq!(poll_once(&mut b, &mut cx), Poll::Pending);
    assert_eq!(poll_once(&mut a, &mut cx), Poll::Ready(Some(d("x"))));
    assert_eq!(woken(&c), 1);
}

#[tokio::test]
async fn two_readers_in_tasks_while_streaming() {
    for _ in 0..20 {
        let (tx, body) = chan();
        let mut a = ReplayBody::new(body, CAP);
        let mut b = a.replay();
        let ta = tokio::spawn(async move { all(&mut a).await });
        let tb = tokio::spawn(async move { all(&mut b).await });
        let mut want = Vec::new();
        for i in 0..50 {
            let s = format!("chunk{i};");
            send(&tx, &s);
            want.push(F::Data(Bytes::from(s)));
            if i % 7 == 0 {
                tokio::task::yield_now().await;
            }
        }
        drop(tx);
        let (ra, rb) = tokio::time::timeout(std::time::Duration::from_secs(10), async {
            (ta.await.unwrap(), tb.await.unwrap())
        })
        .await
        .expect("a reader was never woken");
        assert_eq!(ra, want);
        assert_eq!(rb, want);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_readers_on_threads() {
    let (tx, body) = chan();
    let first = ReplayBody::new(body, CAP);
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let mut r = first.replay();
        tasks.push(tokio::spawn(async move { all(&mut r).await }));
    }
    let mut want = Vec::new();
    for i in 0..100 {
        let s = format!("{i},");
        send(&tx, &s);
        want.push(F::Data(Bytes::from(s)));
    }
    drop(tx);
    for t in tasks {
        let got = tokio::time::timeout(std::time::Duration::from_secs(10), t)
            .await
            .expect("a reader was never woken")
            .unwrap();
        assert_eq!(got, want);
    }
    assert!(first.is_fully_kept());
}

// ---------------------------------------------------------------------------
// Cap
// ---------------------------------------------------------------------------

#[tokio::test]
async fn cap_crossed_mid_stream() {
    let (tx, body) = chan();
    let mut first = ReplayBody::new(body, 10);
    let mut early = first.replay();
    send(&tx, "1234");
    send(&tx, "5678");
    assert_eq!(next(&mut first).await, Some(d("1234")));
    assert_eq!(next(&mut first).await, Some(d("5678")));
    assert_eq!(first.replayable(), Ok(()));
    send(&tx, "9abc");
    send(&tx, "def");
    drop(tx);
    // The chunk crossing the cap is kept whole and yielded whole; pulling the next
    // one is what reads past the cap.
    assert_eq!(next(&mut first).await, Some(d("9abc")));
    assert_eq!(first.replayable(), Ok(()));
    // The first reader still gets every byte.
    assert_eq!(all(&mut first).await, vec![d("def")]);
    assert_eq!(first.replayable(), Err(NotReplayable::CapExceeded));
    assert!(!first.is_fully_kept());
    assert!(first.is_end_stream());

    // A replay reader gets an error frame, not a panic, and again if polled again.
    let mut late = first.replay();
    assert!(!late.is_end_stream());
    assert_eq!(next(&mut late).await, Some(not_kept()));
    assert_eq!(next(&mut late).await, Some(not_kept()));
    assert_eq!(late.replayable(), Err(NotReplayable::CapExceeded));
    // So does a reader made before the cap was crossed.
    assert_eq!(next(&mut early).await, Some(not_kept()));
}

#[tokio::test]
async fn cap_reached_exactly_is_kept() {
    let mut first = ReplayBody::new(stream(&["12345", "67890"]), 10);
    assert_eq!(all(&mut first).await, vec![d("12345"), d("67890")]);
    assert_eq!(first.replayable(), Ok(()));
    assert!(first.is_fully_kept());
    let mut second = first.replay();
    assert_eq!(all(&mut second).await, vec![d("12345"), d("67890")]);
}

#[tokio::test]
async fn cap_reached_exactly_then_a_chunk_is_past_the_cap() {
    // A chunk begun at the cap does not cross it: it is wholly past it.
    let mut first = ReplayBody::new(stream(&["12345", "67890", "x"]), 10);
    assert_eq!(next(&mut first).await, Some(d("12345")));
    assert_eq!(next(&mut first).await, Some(d("67890")));
    assert_eq!(first.replayable(), Ok(()));
    assert_eq!(next(&mut first).await, Some(d("x")));
    assert_eq!(first.replayable(), Err(NotReplayable::CapExceeded));
}

#[tokio::test]
async fn cap_crossed_then_trailers() {
    // The chunk crossing the cap and the trailers after it: all kept.
    let mut first = ReplayBody::new(stream_with_trailers(&["123", "456"], Some(trailers())), 4);
    assert_eq!(
        all(&mut first).await,
        vec![d("123"), d("456"), F::Trailers(trailers())]
    );
    assert_eq!(next(&mut first).await, None);
    assert_eq!(first.replayable(), Ok(()));
    assert!(first.is_fully_kept());
    let mut second = first.replay();
    assert_eq!(
        all(&mut second).await,
        vec![d("123"), d("456"), F::Trailers(trailers())]
    );

    // A chunk after the crossing one reads past the cap: its trailers are lost.
    let body = stream_with_trailers(&["123", "456", "7"], Some(trailers()));
    let mut first = ReplayBody::new(body, 4);
    assert_eq!(
        all(&mut first).await,
        vec![d("123"), d("456"), d("7"), F::Trailers(trailers())]
    );
    assert_eq!(first.replayable(), Err(NotReplayable::CapExceeded));
    let mut second = first.replay();
    assert_eq!(next(&mut second).await, Some(not_kept()));
}

#[tokio::test]
async fn zero_cap() {
    let mut first = ReplayBody::new(stream(&["a"]), 0);
    assert_eq!(first.replayable(), Ok(()));
    assert_eq!(all(&mut first).await, vec![d("a")]);
    assert_eq!(first.replayable(), Err(NotReplayable::CapExceeded));
}

#[tokio::test]
async fn size_hint_over_cap_is_whole_until_read_past_the_cap() {
    let mut first = ReplayBody::new(Full::new(Bytes::from_static(b"0123456789ab")), 10);
    // The size hint decides nothing: nothing was read, so nothing is lost.
    assert_eq!(first.replayable(), Ok(()));
    assert!(!first.is_direct_repr());
    assert_eq!(exact(first.size_hint()), Some(12));
    // The one chunk crosses the cap: kept whole, so the body is whole.
    assert_eq!(all(&mut first).await, vec![d("0123456789ab")]);
    assert_eq!(next(&mut first).await, None);
    assert_eq!(first.replayable(), Ok(()));
    assert!(first.is_fully_kept());
    let mut second = first.source().replay().expect("kept whole");
    assert_eq!(all(&mut second).await, vec![d("0123456789ab")]);

    // Two chunks over the cap: the second is read past the cap.
    let mut first = ReplayBody::new(stream(&["0123456789ab", "cd"]), 10);
    assert_eq!(next(&mut first).await, Some(d("0123456789ab")));
    assert_eq!(first.replayable(), Ok(()));
    assert_eq!(all(&mut first).await, vec![d("cd")]);
    // Read past the cap: the rest was sent and not kept.
    assert_eq!(first.replayable(), Err(NotReplayable::CapExceeded));
    assert!(!first.is_fully_kept());
    let mut second = first.replay();
    assert_eq!(next(&mut second).await, Some(not_kept()));
    assert!(first.source().replay().is_err());
}

#[tokio::test]
async fn size_hint_at_cap_is_kept() {
    let mut first = ReplayBody::new(Full::new(Bytes::from_static(b"0123456789")), 10);
    assert_eq!(first.replayable(), Ok(()));
    assert_eq!(all(&mut first).await, vec![d("0123456789")]);
    assert!(first.is_fully_kept());
}

/// 64 KiB: the default replay cap.
const CAP_64K: usize = 64 * 1024;

/// `n` bytes that differ from byte to byte, so a byte sent twice, skipped or out of
/// order shows.
fn pattern(n: usize) -> Bytes {
    let mut state = 0x2545_f491_u32;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state as u8
        })
        .collect::<Vec<u8>>()
        .into()
}

/// A counted body of one 96 KiB chunk (over the 64 KiB cap), then a short one.
fn over_the_cap() -> (Counted, Arc<AtomicUsize>, Bytes) {
    let whole = pattern(97 * 1024);
    let polls = Arc::new(AtomicUsize::new(0));
    let body = Counted {
        chunks: [whole.slice(..96 * 1024), whole.slice(96 * 1024..)].into(),
        trailers: None,
        polls: Arc::clone(&polls),
    };
    (body, polls, whole)
}

/// The data a reader yields up to its end, joined.
async fn joined<B>(body: &mut ReplayBody<B>) -> Vec<u8>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    let mut out = Vec::new();
    for frame in all(body).await {
        match frame {
            F::Data(data) => out.extend_from_slice(&data),
            other => panic!("not data: {other:?}"),
        }
    }
    out
}

#[tokio::test]
async fn a_chunk_crossing_the_cap_is_kept_and_yielded_whole() {
    let (body, polls, whole) = over_the_cap();
    let mut first = ReplayBody::new(body, CAP_64K);
    let source = first.source();
    assert_eq!(exact(first.size_hint()), Some(97 * 1024));
    let Some(F::Data(chunk)) = next(&mut first).await else {
        panic!("a data frame")
    };
    // The whole chunk, not copied.
    assert_eq!(chunk, whole.slice(..96 * 1024));
    assert_eq!(chunk.as_ptr(), whole.as_ptr());
    // Past the cap, but within the chunk that crossed it: the body is whole.
    assert_eq!(first.replayable(), Ok(()));
    assert!(!first.is_end_stream());
    assert!(!first.is_fully_kept());
    assert_eq!(exact(first.size_hint()), Some(1024));
    // The chunk kept is the one yielded: a replay yields the same bytes, no copy.
    let mut second = first.replay();
    let Some(F::Data(kept)) = next(&mut second).await else {
        panic!("a data frame")
    };
    assert_eq!(kept.as_ptr(), whole.as_ptr());
    assert_eq!(kept.len(), 96 * 1024);
    // Pulling the next chunk reads past the cap.
    assert_eq!(
        next(&mut first).await,
        Some(F::Data(whole.slice(96 * 1024..)))
    );
    assert_eq!(first.replayable(), Err(NotReplayable::CapExceeded));
    assert!(source.replay().is_err());
    assert_eq!(next(&mut first).await, None);
    assert!(first.is_end_stream());
    // The copy behind the front cannot get that chunk: an error, never a gap.
    assert_eq!(next(&mut second).await, Some(not_kept()));
    // One pull per chunk.
    assert_eq!(polls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_retry_after_the_crossing_chunk_sends_the_whole_body_once() {
    let (body, polls, whole) = over_the_cap();
    let mut first = ReplayBody::new(body, CAP_64K);
    let source = first.source();
    assert_eq!(
        next(&mut first).await,
        Some(F::Data(whole.slice(..96 * 1024)))
    );
    // A retry: the kept chunk, then the original's next chunk.
    let mut second = source
        .replay()
        .expect("read to the end of the crossing chunk");
    assert_eq!(exact(second.size_hint()), Some(97 * 1024));
    assert_eq!(
        next(&mut second).await,
        Some(F::Data(whole.slice(..96 * 1024)))
    );
    assert!(!second.is_end_stream());
    assert_eq!(exact(second.size_hint()), Some(1024));
    assert_eq!(joined(&mut second).await, &whole[96 * 1024..]);
    assert!(second.is_end_stream());
    assert_eq!(second.replayable(), Err(NotReplayable::CapExceeded));
    // The earlier attempt's late reader gets no byte of the rest.
    assert!(matches!(next(&mut first).await, Some(F::Err(_))));
    // The original was read once.
    assert_eq!(polls.load(Ordering::SeqCst), 2);

    // One chunk of 96 KiB, as a `Full` body: kept whole, re-sent byte for byte.
    let whole = pattern(96 * 1024);
    let mut first = ReplayBody::new(Full::new(whole.clone()), CAP_64K);
    let source = first.source();
    assert_eq!(joined(&mut first).await, &whole[..]);
    assert!(first.is_end_stream());
    assert!(first.is_fully_kept());
    let mut second = source.replay().expect("kept whole");
    assert_eq!(exact(second.size_hint()), Some(96 * 1024));
    assert_eq!(joined(&mut second).await, &whole[..]);
    assert!(second.is_end_stream());
    assert_eq!(second.replayable(), Ok(()));
}

#[tokio::test]
async fn hedged_readers_of_a_crossing_chunk_then_a_retry_send_each_byte_once() {
    let (body, polls, whole) = over_the_cap();
    let mut a = ReplayBody::new(body, CAP_64K);
    let mut b = a.replay();
    let source = a.source();
    // Both copies read the crossing chunk: the one pull from the original, then the
    // kept chunk.
    assert_eq!(next(&mut a).await, Some(F::Data(whole.slice(..96 * 1024))));
    assert_eq!(next(&mut b).await, Some(F::Data(whole.slice(..96 * 1024))));
    assert_eq!(exact(b.size_hint()), Some(1024));
    assert_eq!(a.replayable(), Ok(()));
    // A retry takes the rest over from both.
    let mut c = source
        .replay()
        .expect("read to the end of the crossing chunk");
    assert_eq!(joined(&mut c).await, &whole[..]);
    assert!(matches!(next(&mut a).await, Some(F::Err(_))));
    assert!(matches!(next(&mut b).await, Some(F::Err(_))));
    assert_eq!(polls.load(Ordering::SeqCst), 2);

    // Without a retry, the copy that pulls next reads past the cap, once.
    let (body, _, whole) = over_the_cap();
    let mut a = ReplayBody::new(body, CAP_64K);
    let mut b = a.replay();
    assert_eq!(next(&mut a).await, Some(F::Data(whole.slice(..96 * 1024))));
    assert_eq!(next(&mut b).await, Some(F::Data(whole.slice(..96 * 1024))));
    assert_eq!(next(&mut b).await, Some(F::Data(whole.slice(96 * 1024..))));
    assert_eq!(b.replayable(), Err(NotReplayable::CapExceeded));
    // The other copy cannot get it again: an error, never a gap.
    assert_eq!(next(&mut a).await, Some(not_kept()));

    // A body of one chunk over the cap, read whole, is kept whole: hedged copies
    // and a retry all send it byte for byte.
    let whole = pattern(96 * 1024);
    let mut a = ReplayBody::new(Full::new(whole.clone()), CAP_64K);
    let mut b = a.replay();
    let source = a.source();
    assert_eq!(joined(&mut a).await, &whole[..]);
    assert_eq!(joined(&mut b).await, &whole[..]);
    assert!(a.is_fully_kept());
    let mut c = source.replay().expect("kept whole");
    assert_eq!(joined(&mut c).await, &whole[..]);
}

// ---------------------------------------------------------------------------
// Empty, one-shot, errors
// ---------------------------------------------------------------------------

#[tokio::test]
async fn empty_body() {
    let mut first = ReplayBody::new(Empty::<Bytes>::new(), CAP);
    assert!(first.is_empty_repr(), "no Arc, Mutex or Box");
    assert!(first.is_fully_kept());
    assert_eq!(first.replayable(), Ok(()));
    assert!(first.is_end_stream());
    assert_eq!(exact(first.size_hint()), Some(0));
    assert_eq!(next(&mut first).await, None);
    assert_eq!(next(&mut first).await, None);
    let mut second = first.replay();
    assert!(second.is_empty_repr());
    assert!(second.is_fully_kept());
    assert!(second.is_end_stream());
    assert_eq!(next(&mut second).await, None);

    // An empty Full takes the same path, even with a zero cap.
    let empty_full = ReplayBody::new(Full::new(Bytes::new()), 0);
    assert!(empty_full.is_empty_repr());
    assert_eq!(empty_full.replayable(), Ok(()));
}

#[tokio::test]
async fn empty_body_reports_completion_when_polled() {
    let mut body = ReplayBody::new(Empty::<Bytes>::new(), CAP);
    let progress = AttemptLog::new();
    body.set_progress(Some(progress.clone()));
    assert!(!progress.snapshot().anything_written());
    assert_eq!(next(&mut body).await, None);
    let snap = progress.snapshot();
    assert_eq!(snap.body_bytes, 0);
    assert!(snap.body_complete);
}

#[tokio::test]
async fn one_shot() {
    let mut first = ReplayBody::one_shot(stream_with_trailers(&["ab", "cd"], Some(trailers())));
    assert_eq!(first.replayable(), Err(NotReplayable::OneShot));
    assert!(!first.is_fully_kept());
    assert_eq!(
        all(&mut first).await,
        vec![d("ab"), d("cd"), F::Trailers(trailers())]
    );
    assert_eq!(next(&mut first).await, None);
    assert_eq!(first.replayable(), Err(NotReplayable::OneShot));
    assert!(!first.is_fully_kept());
    let mut second = first.replay();
    assert_eq!(next(&mut second).await, Some(not_kept()));
    assert_eq!(second.replayable(), Err(NotReplayable::OneShot));
}

#[tokio::test]
async fn one_shot_trailers_only_not_replayed_silently() {
    let mut first = ReplayBody::one_shot(stream_with_trailers(&[], Some(trailers())));
    assert_eq!(all(&mut first).await, vec![F::Trailers(trailers())]);
    let mut second = first.replay();
    assert!(!second.is_end_stream());
    assert_eq!(next(&mut second).await, Some(not_kept()));
}

#[tokio::test]
async fn one_shot_replay_before_any_read_streams_the_original() {
    // Nothing was consumed yet, so a reader made now can still read from the start.
    let first = ReplayBody::one_shot(stream(&["ab", "cd"]));
    let mut second = first.replay();
    assert_eq!(all(&mut second).await, vec![d("ab"), d("cd")]);
    drop(first);
}

#[tokio::test]
async fn original_body_errors() {
    let frames: Vec<Result<Frame<Bytes>, io::Error>> = vec![
        Ok(Frame::data(Bytes::from_static(b"ok"))),
        Err(io::Error::other("disk on fire")),
        Ok(Frame::data(Bytes::from_static(b"never"))),
    ];
    let mut first = ReplayBody::new(StreamBody::new(futures_util::stream::iter(frames)), CAP);
    let mut early = first.replay();
    assert_eq!(next(&mut first).await, Some(d("ok")));
    assert_eq!(next(&mut first).await, Some(F::Err("disk on fire".into())));
    assert_eq!(first.replayable(), Err(NotReplayable::BodyError));
    assert!(!first.is_fully_kept());
    assert!(!first.is_end_stream());
    // Polled again: an error, never the data after the failure.
    assert_eq!(
        next(&mut first).await,
        Some(F::Err("replay body: the original body failed".into()))
    );
    // Other readers get errors too.
    assert_eq!(
        next(&mut early).await,
        Some(F::Err("replay body: the original body failed".into()))
    );
    let mut late = first.replay();
    assert_eq!(
        next(&mut late).await,
        Some(F::Err("replay body: the original body failed".into()))
    );
}

#[tokio::test]
async fn body_error_outranks_cap_exceeded() {
    let frames: Vec<Result<Frame<Bytes>, io::Error>> = vec![
        Ok(Frame::data(Bytes::from_static(b"too long"))),
        Ok(Frame::data(Bytes::from_static(b"again"))),
        Err(io::Error::other("boom")),
    ];
    let mut first = ReplayBody::new(StreamBody::new(futures_util::stream::iter(frames)), 2);
    assert_eq!(next(&mut first).await, Some(d("too long")));
    assert_eq!(first.replayable(), Ok(()));
    assert_eq!(next(&mut first).await, Some(d("again")));
    assert_eq!(first.replayable(), Err(NotReplayable::CapExceeded));
    assert_eq!(next(&mut first).await, Some(F::Err("boom".into())));
    assert_eq!(first.replayable(), Err(NotReplayable::BodyError));
}

#[tokio::test]
async fn waiting_reader_sees_error_of_other_reader() {
    let (tx, body) = chan();
    let mut a = ReplayBody::new(body, CAP);
    let mut b = a.replay();
    let (cb, wb) = count_waker();
    let mut cxb = Context::from_waker(&wb);
    assert_eq!(poll_once(&mut b, &mut cxb), Poll::Pending);
    tx.send(Err(io::Error::other("gone"))).unwrap();
    assert_eq!(next(&mut a).await, Some(F::Err("gone".into())));
    assert!(woken(&cb) >= 1);
    assert_eq!(
        poll_once(&mut b, &mut cxb),
        Poll::Ready(Some(F::Err("replay body: the original body failed".into())))
    );
}

/// A body that panics on its second poll.
struct Panicky {
    polls: usize,
}

impl Body for Panicky {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.polls += 1;
        if self.polls > 1 {
            panic!("body bug");
        }
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"first")))))
    }
}

#[tokio::test]
async fn panicking_original_poisons_nothing() {
    let mut first = ReplayBody::new(Panicky { polls: 0 }, CAP);
    let mut second = first.replay();
    assert_eq!(next(&mut first).await, Some(d("first")));
    let waker = Waker::from(Arc::new(CountWaker::default()));
    let mut cx = Context::from_waker(&waker);
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = Pin::new(&mut first).poll_frame(&mut cx);
    }));
    assert!(caught.is_err(), "the body's own panic propagates");
    // Every later call works and reports the failure.
    assert_eq!(second.replayable(), Err(NotReplayable::BodyError));
    assert!(!second.is_fully_kept());
    assert!(!second.is_end_stream());
    let _ = second.size_hint();
    let _ = format!("{second:?}");
    let want = F::Err("replay body: the original body panicked".into());
    assert_eq!(next(&mut second).await, Some(want.clone()));
    assert_eq!(next(&mut first).await, Some(want.clone()));
    let mut third = first.replay();
    assert_eq!(next(&mut third).await, Some(want));
}

// ---------------------------------------------------------------------------
// Progress
// ---------------------------------------------------------------------------

#[tokio::test]
async fn progress_reported_per_reader() {
    let mut first = ReplayBody::new(stream_with_trailers(&["abc", "de"], Some(trailers())), CAP);
    let p1 = AttemptLog::new();
    first.set_progress(Some(p1.clone()));
    assert_eq!(next(&mut first).await, Some(d("abc")));
    let snap = p1.snapshot();
    assert_eq!(snap.body_bytes, 3);
    assert!(snap.write_began);
    assert!(!snap.body_complete);
    assert_eq!(next(&mut first).await, Some(d("de")));
    assert_eq!(p1.snapshot().body_bytes, 5);
    assert!(!p1.snapshot().body_complete, "trailers still to come");
    assert_eq!(next(&mut first).await, Some(F::Trailers(trailers())));
    assert!(p1.snapshot().body_complete);
    assert_eq!(next(&mut first).await, None);
    assert_eq!(p1.snapshot().body_bytes, 5);

    // A replay has its own record, unset until set.
    let mut second = first.replay();
    assert_eq!(next(&mut second).await, Some(d("abc")));
    let p2 = AttemptLog::new();
    second.set_progress(Some(p2.clone()));
    assert_eq!(next(&mut second).await, Some(d("de")));
    assert_eq!(p2.snapshot().body_bytes, 2);
    assert!(!p2.snapshot().body_complete);
    assert_eq!(next(&mut second).await, Some(F::Trailers(trailers())));
    assert_eq!(next(&mut second).await, None);
    assert!(p2.snapshot().body_complete);
    assert_eq!(p1.snapshot().body_bytes, 5, "first record untouched");

    // Cleared progress: nothing reported.
    let mut third = first.replay();
    third.set_progress(Some(p2.clone()));
    third.set_progress(None);
    assert_eq!(all(&mut third).await.len(), 3);
    assert_eq!(p2.snapshot().body_bytes, 2);
}

#[tokio::test]
async fn progress_complete_on_none_end() {
    let (tx, body) = chan();
    let mut first = ReplayBody::new(body, CAP);
    let p = AttemptLog::new();
    first.set_progress(Some(p.clone()));
    send(&tx, "xyz");
    assert_eq!(next(&mut first).await, Some(d("xyz")));
    assert!(!p.snapshot().body_complete);
    drop(tx);
    assert_eq!(next(&mut first).await, None);
    let snap = p.snapshot();
    assert!(snap.body_complete);
    assert_eq!(snap.body_bytes, 3);
}

#[tokio::test]
async fn progress_complete_at_last_data_frame_when_known() {
    // hyper stops polling once is_end_stream is true after a data frame.
    let mut first = ReplayBody::new(Full::new(Bytes::from_static(b"hello")), CAP);
    let p = AttemptLog::new();
    first.set_progress(Some(p.clone()));
    assert_eq!(next(&mut first).await, Some(d("hello")));
    assert!(first.is_end_stream());
    assert_eq!(p.snapshot().body_bytes, 5);
    assert!(p.snapshot().body_complete);

    let mut second = first.replay();
    let p2 = AttemptLog::new();
    second.set_progress(Some(p2.clone()));
    assert_eq!(next(&mut second).await, Some(d("hello")));
    assert!(p2.snapshot().body_complete);
}

// ---------------------------------------------------------------------------
// Size hints
// ---------------------------------------------------------------------------

#[tokio::test]
async fn size_hint_exact_for_full() {
    let mut first = ReplayBody::new(Full::new(Bytes::from_static(b"hello")), CAP);
    let second = first.replay();
    assert_eq!(exact(first.size_hint()), Some(5));
    assert_eq!(exact(second.size_hint()), Some(5));
    assert_eq!(next(&mut first).await, Some(d("hello")));
    assert_eq!(exact(first.size_hint()), Some(0));
    assert_eq!(exact(second.size_hint()), Some(5));
}

#[tokio::test]
async fn size_hint_after_partial_reads() {
    let (body, _) = counted(&["abc", "defg", "hi"]);
    let mut first = ReplayBody::new(body, CAP);
    assert_eq!(exact(first.size_hint()), Some(9));
    assert_eq!(next(&mut first).await, Some(d("abc")));
    assert_eq!(exact(first.size_hint()), Some(6));

    let mut second = first.replay();
    assert_eq!(exact(second.size_hint()), Some(9));
    assert_eq!(next(&mut second).await, Some(d("abc")));
    assert_eq!(exact(second.size_hint()), Some(6));
    assert_eq!(next(&mut second).await, Some(d("defg")));
    assert_eq!(exact(second.size_hint()), Some(2));
    // The stale first reader is now behind by one kept chunk.
    assert_eq!(exact(first.size_hint()), Some(6));
    assert_eq!(next(&mut second).await, Some(d("hi")));
    assert_eq!(exact(second.size_hint()), Some(0));
    assert!(second.is_end_stream());
    assert!(first.is_fully_kept());
    assert_eq!(exact(first.size_hint()), Some(6));
    assert_eq!(exact(first.replay().size_hint()), Some(9));
}

#[tokio::test]
async fn size_hint_unknown_stream() {
    let (tx, body) = chan();
    let mut first = ReplayBody::new(body, CAP);
    assert_eq!(first.size_hint().lower(), 0);
    assert_eq!(first.size_hint().upper(), None);
    send(&tx, "abcd");
    assert_eq!(next(&mut first).await, Some(d("abcd")));
    let second = first.replay();
    assert_eq!(second.size_hint().lower(), 4);
    assert_eq!(second.size_hint().upper(), None);
    drop(tx);
    assert_eq!(next(&mut first).await, None);
    assert_eq!(exact(second.size_hint()), Some(4));
}

#[test]
fn size_hint_saturates() {
    struct Huge;
    impl Body for Huge {
        type Data = Bytes;
        type Error = Infallible;
        fn poll_frame(
            self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"z")))))
        }
        fn size_hint(&self) -> SizeHint {
            SizeHint::with_exact(u64::MAX)
        }
    }
    let mut first = ReplayBody::new(Huge, usize::MAX);
    let waker = Waker::from(Arc::new(CountWaker::default()));
    let mut cx = Context::from_waker(&waker);
    assert_eq!(poll_once(&mut first, &mut cx), Poll::Ready(Some(d("z"))));
    let second = first.replay();
    assert_eq!(exact(second.size_hint()), Some(u64::MAX));
}

// ---------------------------------------------------------------------------
// !Unpin, Debug
// ---------------------------------------------------------------------------

pin_project_lite::pin_project! {
    /// A body that cannot be moved once pinned.
    struct NotUnpin {
        #[pin]
        inner: StreamBody<Frames>,
        #[pin]
        _pinned: PhantomPinned,
    }
}

impl Body for NotUnpin {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.project().inner.poll_frame(cx)
    }
}

#[tokio::test]
async fn not_unpin_body() {
    fn is_unpin<T: Unpin>() {}
    is_unpin::<ReplayBody<NotUnpin>>();
    let body = NotUnpin {
        inner: stream_with_trailers(&["pinned ", "body"], Some(trailers())),
        _pinned: PhantomPinned,
    };
    let mut first = ReplayBody::new(body, CAP);
    let want = vec![d("pinned "), d("body"), F::Trailers(trailers())];
    assert_eq!(all(&mut first).await, want);
    let mut second = first.replay();
    assert_eq!(all(&mut second).await, want);
}

#[tokio::test]
async fn debug_shows_state_not_contents() {
    let empty = ReplayBody::new(Empty::<Bytes>::new(), CAP);
    let s = format!("{empty:?}");
    assert!(s.starts_with("ReplayBody"), "{s}");
    assert!(s.contains("empty"), "{s}");

    let mut body = ReplayBody::new(Full::new(Bytes::from_static(b"secret-token")), CAP);
    let _ = next(&mut body).await;
    let s = format!("{body:?}");
    assert!(!s.contains("secret"), "{s}");
    assert!(s.contains("kept_bytes: 12"), "{s}");
    assert!(s.contains("replayable: Ok"), "{s}");
}

#[test]
fn dropped_reader_leaves_the_waiting_list() {
    fn waiting<B>(body: &ReplayBody<B>) -> usize {
        match &body.repr {
            super::Repr::Empty => 0,
            super::Repr::Shared(r) => super::lock_shared(&r.shared).wakers.lock().len(),
            super::Repr::Direct(_) => 0,
        }
    }
    let (tx, body) = chan();
    let a = ReplayBody::new(body, CAP);
    let mut b = a.replay();
    let (_, w) = count_waker();
    let mut cx = Context::from_waker(&w);
    assert_eq!(poll_once(&mut b, &mut cx), Poll::Pending);
    assert_eq!(waiting(&a), 1);
    drop(b);
    assert_eq!(waiting(&a), 0);
    drop(tx);
}

// ---------------------------------------------------------------------------
// Wake-ups: register only on Pending, wake only on news
// ---------------------------------------------------------------------------

#[test]
fn a_ready_poll_registers_no_waker() {
    let (tx, body) = chan();
    let mut a = ReplayBody::new(body, CAP);
    let b = a.replay();
    let (ca, wa) = count_waker();
    let mut cxa = Context::from_waker(&wa);
    for s in ["1", "2", "3"] {
        send(&tx, s);
        assert_eq!(poll_once(&mut a, &mut cxa), Poll::Ready(Some(d(s))));
        assert_eq!(a.waiting(), 0, "a ready poll leaves no waker behind");
    }
    assert_eq!(poll_once(&mut a, &mut cxa), Poll::Pending);
    assert_eq!(a.waiting(), 1, "a pending poll registers");
    send(&tx, "4");
    assert_eq!(woken(&ca), 1);
    assert_eq!(a.waiting(), 0, "a wake empties the list");
    assert_eq!(poll_once(&mut a, &mut cxa), Poll::Ready(Some(d("4"))));
    assert_eq!(b.waiting(), 0);
    assert_eq!(woken(&ca), 1, "no wake-up of its own");
}

#[test]
fn two_readers_wake_counts() {
    // Driven by hand: every wake-up is counted, and each must be news.
    let (tx, body) = chan();
    let mut a = ReplayBody::new(body, CAP);
    let mut b = a.replay();
    let (ca, wa) = count_waker();
    let (cb, wb) = count_waker();
    let mut cxa = Context::from_waker(&wa);
    let mut cxb = Context::from_waker(&wb);

    // a streams ahead while b is not waiting: nobody is woken.
    send(&tx, "1");
    send(&tx, "2");
    assert_eq!(poll_once(&mut a, &mut cxa), Poll::Ready(Some(d("1"))));
    assert_eq!(poll_once(&mut a, &mut cxa), Poll::Ready(Some(d("2"))));
    assert_eq!((woken(&ca), woken(&cb)), (0, 0));

    // b catches up from the kept chunks, then waits; a waits too.
    assert_eq!(poll_once(&mut b, &mut cxb), Poll::Ready(Some(d("1"))));
    assert_eq!(poll_once(&mut b, &mut cxb), Poll::Ready(Some(d("2"))));
    assert_eq!(poll_once(&mut b, &mut cxb), Poll::Pending);
    assert_eq!(poll_once(&mut a, &mut cxa), Poll::Pending);
    assert_eq!((woken(&ca), woken(&cb)), (0, 0), "no news yet");

    // A third reader replaying kept chunks is no news for the waiting ones.
    let mut c = a.replay();
    let (cc, wc) = count_waker();
    let mut cxc = Context::from_waker(&wc);
    assert_eq!(poll_once(&mut c, &mut cxc), Poll::Ready(Some(d("1"))));
    assert_eq!(poll_once(&mut c, &mut cxc), Poll::Ready(Some(d("2"))));
    assert_eq!((woken(&ca), woken(&cb)), (0, 0));

    // c pulls a chunk the original never announced to a or b (it is polled with
    // the fan-out waker, so the channel's wake reaches all three).
    assert_eq!(poll_once(&mut c, &mut cxc), Poll::Pending);
    send(&tx, "3");
    assert_eq!((woken(&ca), woken(&cb), woken(&cc)), (1, 1, 1));
    assert_eq!(poll_once(&mut c, &mut cxc), Poll::Ready(Some(d("3"))));
    assert_eq!(
        (woken(&ca), woken(&cb), woken(&cc)),
        (1, 1, 1),
        "woken once"
    );
    assert_eq!(poll_once(&mut a, &mut cxa), Poll::Ready(Some(d("3"))));
    assert_eq!(poll_once(&mut b, &mut cxb), Poll::Ready(Some(d("3"))));

    // b waits; a spurious poll of a that pulls nothing wakes nobody.
    assert_eq!(poll_once(&mut b, &mut cxb), Poll::Pending);
    assert_eq!(poll_once(&mut a, &mut cxa), Poll::Pending);
    assert_eq!(poll_once(&mut a, &mut cxa), Poll::Pending);
    assert_eq!(woken(&cb), 1);

    // The end wakes both waiting readers exactly once.
    drop(tx);
    assert_eq!((woken(&ca), woken(&cb)), (2, 2));
    assert_eq!(poll_once(&mut a, &mut cxa), Poll::Ready(None));
    assert_eq!(poll_once(&mut b, &mut cxb), Poll::Ready(None));
    assert_eq!((woken(&ca), woken(&cb)), (2, 2));
    assert_eq!(a.waiting(), 0);
}

/// A body that wakes its waker during its first poll and still says `Pending`,
/// like a body whose data arrives on another thread between its poll and the
/// caller's next step; then one chunk, then its end.
struct WakesWhilePolled {
    polls: usize,
}

impl Body for WakesWhilePolled {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.polls += 1;
        match self.polls {
            1 => {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            2 => Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"late"))))),
            _ => Poll::Ready(None),
        }
    }
}

#[test]
fn a_wake_between_poll_and_registration_is_not_lost() {
    // The reader registers only after the original said Pending; the original's
    // wake came before that, when nobody was listed. The reader must still be
    // woken (here: it wakes itself), or it would wait forever.
    for one_shot in [false, true] {
        let body = WakesWhilePolled { polls: 0 };
        let mut a = if one_shot {
            ReplayBody::one_shot(body)
        } else {
            ReplayBody::new(body, CAP)
        };
        let (ca, wa) = count_waker();
        let mut cxa = Context::from_waker(&wa);
        assert_eq!(poll_once(&mut a, &mut cxa), Poll::Pending);
        assert_eq!(woken(&ca), 1, "one_shot={one_shot}");
        assert_eq!(poll_once(&mut a, &mut cxa), Poll::Ready(Some(d("late"))));
        assert_eq!(poll_once(&mut a, &mut cxa), Poll::Ready(None));
    }
}

#[test]
fn a_wake_between_poll_and_registration_reaches_the_other_waiting_reader() {
    // b waits on the original; a's poll meets a body that wakes during the poll:
    // b hears of it through the fan-out waker, and a does not wait forever.
    struct Script {
        polls: usize,
    }
    impl Body for Script {
        type Data = Bytes;
        type Error = Infallible;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            self.polls += 1;
            match self.polls {
                1 => Poll::Pending,
                2 => {
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
                3 => Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"x"))))),
                _ => Poll::Ready(None),
            }
        }
    }
    let mut a = ReplayBody::new(Script { polls: 0 }, CAP);
    let mut b = a.replay();
    let (ca, wa) = count_waker();
    let (cb, wb) = count_waker();
    let mut cxa = Context::from_waker(&wa);
    let mut cxb = Context::from_waker(&wb);
    assert_eq!(poll_once(&mut b, &mut cxb), Poll::Pending);
    assert_eq!(poll_once(&mut a, &mut cxa), Poll::Pending);
    assert_eq!((woken(&ca), woken(&cb)), (1, 1));
    assert_eq!(poll_once(&mut b, &mut cxb), Poll::Ready(Some(d("x"))));
    assert_eq!(woken(&ca), 1, "a was not waiting: no second wake");
    assert_eq!(poll_once(&mut a, &mut cxa), Poll::Ready(Some(d("x"))));
}

mod wake_schedule {
    //! Readers driven only by their wake-ups, in any order, all finish.

    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        /// A chunk arrives.
        Send,
        /// Poll reader `i` if it has been woken since it last waited.
        Poll(usize),
        /// Poll reader `i` whether or not it was woken (a spurious poll).
        Spurious(usize),
        /// A new reader from the first byte.
        Replay,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => Just(Op::Send),
            4 => (0..4usize).prop_map(Op::Poll),
            1 => (0..4usize).prop_map(Op::Spurious),
            1 => Just(Op::Replay),
        ]
    }

    struct Driven {
        body: ReplayBody<ChanBody>,
        counter: Arc<CountWaker>,
        waker: Waker,
        /// Wake count when it last returned `Pending`, if it is waiting.
        parked_at: Option<usize>,
        got: Vec<F>,
        done: bool,
    }

    impl Driven {
        fn new(body: ReplayBody<ChanBody>) -> Self {
            let (counter, waker) = count_waker();
            Driven {
                body,
                counter,
                waker,
                parked_at: None,
                got: Vec::new(),
                done: false,
            }
        }

        fn runnable(&self) -> bool {
            !self.done && self.parked_at.is_none_or(|at| woken(&self.counter) > at)
        }

        fn poll(&mut self) {
            if self.done {
                return;
            }
            let mut cx = Context::from_waker(&self.waker);
            let seen = woken(&self.counter);
            match poll_once(&mut self.body, &mut cx) {
                Poll::Pending => self.parked_at = Some(seen),
                Poll::Ready(None) => {
                    self.parked_at = None;
                    self.done = true;
                }
                Poll::Ready(Some(f)) => {
                    self.parked_at = None;
                    self.got.push(f);
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn no_reader_is_left_waiting(ops in proptest::collection::vec(op(), 0..40)) {
            let (tx, body) = chan();
            let mut readers = vec![Driven::new(ReplayBody::new(body, CAP))];
            let mut want = Vec::new();
            for op in ops {
                match op {
                    Op::Send => {
                        let s = format!("{};", want.len());
                        send(&tx, &s);
                        want.push(F::Data(Bytes::from(s)));
                    }
                    Op::Poll(i) => {
                        if let Some(r) = readers.get_mut(i) {
                            if r.runnable() {
                                r.poll();
                            }
                        }
                    }
                    Op::Spurious(i) => {
                        if let Some(r) = readers.get_mut(i) {
                            r.poll();
                        }
                    }
                    Op::Replay => {
                        if readers.len() < 4 {
                            let r = readers[0].body.replay();
                            readers.push(Driven::new(r));
                        }
                    }
                }
            }
            drop(tx);
            // Run whoever is runnable; a reader left waiting without a wake-up
            // while others are done would never finish.
            for _ in 0..10_000 {
                let Some(r) = readers.iter_mut().find(|r| r.runnable()) else {
                    break;
                };
                r.poll();
            }
            for (i, r) in readers.iter().enumerate() {
                prop_assert!(r.done, "reader {} was never woken", i);
                prop_assert_eq!(&r.got, &want, "reader {}", i);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Bodies read once: straight through, no shared state
// ---------------------------------------------------------------------------

#[tokio::test]
async fn bodies_read_once_take_the_direct_path() {
    let cases: Vec<(&str, ReplayBody<StreamBody<Frames>>)> = vec![
        ("one-shot", ReplayBody::one_shot(stream(&["ab", "cd"]))),
        ("cap 0", ReplayBody::new(stream(&["ab", "cd"]), 0)),
    ];
    for (name, mut body) in cases {
        assert!(body.is_direct_repr(), "{name}");
        assert_eq!(all(&mut body).await, vec![d("ab"), d("cd")], "{name}");
        assert!(body.is_direct_repr(), "{name}: never moved");
        assert_eq!(body.waiting(), 0);
    }
    // With a cap, the shared path, whatever the size hint: a body announced over
    // the cap keeps what an attempt reads up to the cap.
    assert!(!ReplayBody::new(stream(&["ab"]), CAP).is_direct_repr());
    let over = ReplayBody::new(Full::new(Bytes::from_static(b"0123456789ab")), 10);
    assert!(!over.is_direct_repr());
}

#[tokio::test]
async fn a_one_shot_source_watches_without_sharing() {
    let frames: Vec<Result<Frame<Bytes>, io::Error>> = vec![
        Ok(Frame::data(Bytes::from_static(b"ok"))),
        Err(io::Error::other("disk on fire")),
    ];
    let mut first = ReplayBody::one_shot(StreamBody::new(futures_util::stream::iter(frames)));
    let source = first.source();
    assert!(
        first.is_direct_repr(),
        "a source of a one-shot body shares nothing"
    );
    assert_eq!(source.replayable(), Err(NotReplayable::OneShot));
    assert_eq!(next(&mut first).await, Some(d("ok")));
    assert_eq!(source.replayable(), Err(NotReplayable::OneShot));
    assert_eq!(next(&mut first).await, Some(F::Err("disk on fire".into())));
    // The body error outranks one-shot, from the body and from its source.
    assert_eq!(first.replayable(), Err(NotReplayable::BodyError));
    assert_eq!(source.replayable(), Err(NotReplayable::BodyError));
    // A reader made from it errs rather than send anything.
    // No later attempt is given a reader: nothing is sent.
    assert_eq!(source.replay().err(), Some(NotReplayable::BodyError));
    assert!(first.is_direct_repr(), "asking moved nothing");
}

#[tokio::test]
async fn a_cap_zero_source_still_replays_what_was_never_sent() {
    // A cap of 0 under a policy that retries: an attempt that failed before the
    // body was read leaves the whole body to the next one.
    let (tx, body) = chan();
    let first = ReplayBody::new(body, 0);
    let source = first.source();
    assert_eq!(source.replayable(), Ok(()));
    drop(first);
    let mut second = source.replay().expect("nothing was read");
    send(&tx, "abc");
    drop(tx);
    assert_eq!(all(&mut second).await, vec![d("abc")]);
    assert_eq!(source.replayable(), Err(NotReplayable::CapExceeded));
}

#[tokio::test]
async fn a_direct_reader_moves_to_shared_state_mid_stream() {
    // Empty frames and trailers are kept even with a cap of 0.
    let mut first = ReplayBody::new(stream_with_trailers(&["", ""], Some(trailers())), 0);
    assert_eq!(next(&mut first).await, Some(d("")));
    let mut second = first.replay();
    assert!(!first.is_direct_repr());
    assert_eq!(next(&mut first).await, Some(d("")));
    assert_eq!(next(&mut first).await, Some(F::Trailers(trailers())));
    assert_eq!(next(&mut first).await, None);
    assert!(first.is_fully_kept());
    assert_eq!(all(&mut second).await, vec![F::Trailers(trailers())]);

    // With a data byte already sent, a replay errs, and the first reader goes on.
    let (tx, body) = chan();
    let mut first = ReplayBody::new(body, 0);
    send(&tx, "a");
    assert_eq!(next(&mut first).await, Some(d("a")));
    let mut second = first.replay();
    send(&tx, "b");
    drop(tx);
    assert_eq!(all(&mut first).await, vec![d("b")]);
    assert_eq!(next(&mut second).await, Some(not_kept()));
    assert_eq!(first.replayable(), Err(NotReplayable::CapExceeded));
}

#[test]
fn a_direct_reader_is_woken_by_its_body() {
    let (tx, body) = chan();
    let mut first = ReplayBody::one_shot(body);
    let (c, w) = count_waker();
    let mut cx = Context::from_waker(&w);
    assert_eq!(poll_once(&mut first, &mut cx), Poll::Pending);
    send(&tx, "x");
    assert_eq!(woken(&c), 1);
    assert_eq!(poll_once(&mut first, &mut cx), Poll::Ready(Some(d("x"))));
    drop(tx);
    assert_eq!(woken(&c), 1, "no wake for a poll that was not pending");
    assert_eq!(poll_once(&mut first, &mut cx), Poll::Ready(None));
}

#[test]
fn a_direct_reader_survives_its_body_panicking() {
    let mut first = ReplayBody::one_shot(Panicky { polls: 0 });
    let source = first.source();
    let waker = Waker::from(Arc::new(CountWaker::default()));
    let mut cx = Context::from_waker(&waker);
    assert_eq!(
        poll_once(&mut first, &mut cx),
        Poll::Ready(Some(d("first")))
    );
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = Pin::new(&mut first).poll_frame(&mut cx);
    }));
    assert!(caught.is_err(), "the body's own panic propagates");
    assert_eq!(first.replayable(), Err(NotReplayable::BodyError));
    assert!(!first.is_end_stream());
    let _ = first.size_hint();
    let _ = format!("{first:?}");
    let want = F::Err("replay body: the original body panicked".into());
    assert_eq!(
        poll_once(&mut first, &mut cx),
        Poll::Ready(Some(want.clone()))
    );
    assert_eq!(poll_once(&mut first, &mut cx), Poll::Ready(Some(want)));
    assert_eq!(source.replayable(), Err(NotReplayable::BodyError));
}

#[test]
fn a_dropped_direct_reader_tells_its_source_of_a_panic() {
    let mut first = ReplayBody::one_shot(Panicky { polls: 0 });
    let source = first.source();
    let waker = Waker::from(Arc::new(CountWaker::default()));
    let mut cx = Context::from_waker(&waker);
    let _ = poll_once(&mut first, &mut cx);
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let _ = Pin::new(&mut first).poll_frame(&mut cx);
    }));
    assert!(caught.is_err());
    assert_eq!(source.replayable(), Err(NotReplayable::BodyError));
}

#[tokio::test]
async fn direct_debug_shows_state_not_contents() {
    let mut body = ReplayBody::one_shot(Full::new(Bytes::from_static(b"secret-token")));
    let _ = next(&mut body).await;
    let s = format!("{body:?}");
    assert!(!s.contains("secret"), "{s}");
    assert!(s.contains("direct"), "{s}");
    assert!(s.contains("replayable: Err(OneShot)"), "{s}");
}

mod direct_matches_shared {
    //! The direct path answers exactly as the shared path did for the same body.

    use super::*;
    use proptest::prelude::*;

    /// A scripted body: data frames (some empty), then trailers, an error or the
    /// end; an exact size hint or none; it may say it is at its end.
    #[derive(Debug, Clone)]
    struct Script {
        chunks: Vec<Vec<u8>>,
        last: Last,
        exact_hint: bool,
        says_end: bool,
    }

    #[derive(Debug, Clone)]
    enum Last {
        End,
        Trailers,
        Error,
    }

    struct Scripted {
        s: Script,
        next: usize,
        finished: bool,
    }

    impl Body for Scripted {
        type Data = Bytes;
        type Error = io::Error;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
            if let Some(c) = self.s.chunks.get(self.next).cloned() {
                self.next += 1;
                return Poll::Ready(Some(Ok(Frame::data(Bytes::from(c)))));
            }
            if self.finished {
                return Poll::Ready(None);
            }
            self.finished = true;
            Poll::Ready(match self.s.last {
                Last::End => None,
                Last::Trailers => Some(Ok(Frame::trailers(trailers()))),
                Last::Error => Some(Err(io::Error::other("scripted"))),
            })
        }
        fn is_end_stream(&self) -> bool {
            self.s.says_end && matches!(self.s.last, Last::End) && self.next >= self.s.chunks.len()
        }
        fn size_hint(&self) -> SizeHint {
            if !self.s.exact_hint || !matches!(self.s.last, Last::End) {
                return SizeHint::new();
            }
            let rest = self.s.chunks[self.next.min(self.s.chunks.len())..]
                .iter()
                .map(|c| c.len() as u64)
                .sum();
            SizeHint::with_exact(rest)
        }
    }

    fn script() -> impl Strategy<Value = Script> {
        (
            proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..3), 0..5),
            prop_oneof![Just(Last::End), Just(Last::Trailers), Just(Last::Error)],
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(chunks, last, exact_hint, says_end)| Script {
                chunks,
                last,
                exact_hint,
                says_end,
            })
    }

    /// Everything a caller can see of a reader after each step.
    #[derive(Debug, PartialEq)]
    struct Seen {
        frame: Option<Option<F>>,
        end: bool,
        hint: (u64, Option<u64>),
        replayable: Result<(), NotReplayable>,
        kept: bool,
    }

    fn seen(body: &ReplayBody<Scripted>, frame: Option<Option<F>>) -> Seen {
        // The end first: the shared path learns of an original at its end when
        // asked, the direct one when made, and a hint asked before that would
        // differ (unknown against an exact 0, both true).
        let end = body.is_end_stream();
        let hint = body.size_hint();
        Seen {
            frame,
            end,
            hint: (hint.lower(), hint.upper()),
            replayable: body.replayable(),
            kept: body.is_fully_kept(),
        }
    }

    /// Reads `body` to its end (and one poll past it), replaying at step
    /// `replay_at`; what was seen, the progress and what the replay yielded.
    fn run(
        mut body: ReplayBody<Scripted>,
        replay_at: usize,
    ) -> (Vec<Seen>, crate::policy::Progress, Vec<Option<F>>) {
        let progress = AttemptLog::new();
        body.set_progress(Some(progress.clone()));
        let waker = Waker::from(Arc::new(CountWaker::default()));
        let mut cx = Context::from_waker(&waker);
        let mut out = vec![seen(&body, None)];
        let mut replay = None;
        for step in 0..12 {
            if step == replay_at {
                replay = Some(body.replay());
            }
            let Poll::Ready(frame) = poll_once(&mut body, &mut cx) else {
                panic!("a scripted body is never pending");
            };
            let stop = frame.is_none();
            out.push(seen(&body, Some(frame)));
            if stop {
                break;
            }
        }
        let mut replayed = Vec::new();
        if let Some(mut r) = replay {
            for _ in 0..12 {
                let Poll::Ready(frame) = poll_once(&mut r, &mut cx) else {
                    panic!("a scripted body is never pending");
                };
                let stop = matches!(frame, None | Some(F::Err(_)));
                replayed.push(frame);
                if stop {
                    break;
                }
            }
        }
        (out, progress.snapshot(), replayed)
    }

    fn scripted(s: &Script) -> Scripted {
        Scripted {
            s: s.clone(),
            next: 0,
            finished: false,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn same_frames_answers_and_progress(s in script(), replay_at in 0usize..14) {
            // A cap of 0: whole until a data byte is read, whatever the size hint.
            let b = scripted(&s);
            if !b.is_end_stream() {
                let direct = ReplayBody::new(b, 0);
                prop_assert!(direct.is_direct_repr());
                let shared = ReplayBody::through_shared(scripted(&s), 0, Ok(()));
                prop_assert_eq!(run(direct, replay_at), run(shared, replay_at));
            }
            // One-shot.
            let direct = ReplayBody::one_shot(scripted(&s));
            let shared =
                ReplayBody::through_shared(scripted(&s), 0, Err(NotReplayable::OneShot));
            prop_assert_eq!(run(direct, replay_at), run(shared, replay_at));
        }
    }
}

#[cfg(target_pointer_width = "64")]
#[test]
fn the_direct_path_makes_the_body_no_bigger() {
    // The retry future carries the request through every layer: a reader of a
    // shared body, a direct one and an empty one all fit in 56 bytes, as before.
    assert!(std::mem::size_of::<ReplayBody<Full<Bytes>>>() <= 56);
    assert!(std::mem::size_of::<Option<super::ReplaySource<Full<Bytes>>>>() <= 16);
}

#[test]
fn a_replay_body_is_no_larger_than_the_body_it_stands_for() {
    // hyper moves the request it sends many times; a request over 256 bytes costs
    // it more on every move, so the replay body must not push one over.
    use std::mem::size_of;
    assert!(size_of::<ReplayBody<Full<Bytes>>>() <= size_of::<Full<Bytes>>());
    assert!(size_of::<http::Request<ReplayBody<Full<Bytes>>>>() <= 256);
}

// ---------------------------------------------------------------------------
// Attempts: what an attempt read decides whether the next one may be sent
// ---------------------------------------------------------------------------

/// Twelve chunks of 100 bytes each (chunk `i` is 100 copies of `b'a' + i`), with
/// an exact size hint (1200, over a cap of 500), counting its polls.
fn twelve_chunks() -> (Counted, Arc<AtomicUsize>, Vec<F>) {
    let chunks: Vec<String> = (0..12u8)
        .map(|i| String::from_utf8(vec![b'a' + i; 100]).unwrap())
        .collect();
    let refs: Vec<&str> = chunks.iter().map(String::as_str).collect();
    let (body, polls) = counted(&refs);
    let want = refs.iter().map(|c| d(c)).collect();
    (body, polls, want)
}

const SMALL_CAP: usize = 500;

fn polls_of(polls: &AtomicUsize) -> usize {
    polls.load(Ordering::SeqCst)
}

#[tokio::test]
async fn a_body_over_the_cap_that_no_attempt_read_is_sent_whole() {
    let (body, polls, want) = twelve_chunks();
    let first = ReplayBody::new(body, SMALL_CAP);
    let source = first.source();
    assert_eq!(exact(first.size_hint()), Some(1200));
    // The first attempt failed before its transport polled the body.
    assert_eq!(source.replayable(), Ok(()));
    drop(first);
    let mut second = source.replay().expect("nothing was read");
    assert_eq!(exact(second.size_hint()), Some(1200));
    assert_eq!(all(&mut second).await, want);
    // Every chunk pulled from the original once.
    assert_eq!(polls_of(&polls), 12);
    // The second attempt read past the cap: a third is not sent.
    assert_eq!(source.replayable(), Err(NotReplayable::CapExceeded));
    assert_eq!(source.replay().err(), Some(NotReplayable::CapExceeded));
}

#[tokio::test]
async fn a_body_read_up_to_the_cap_is_replayed_from_the_kept_prefix_then_the_rest() {
    let (body, polls, want) = twelve_chunks();
    let mut first = ReplayBody::new(body, SMALL_CAP);
    let source = first.source();
    let mut prefix = Vec::new();
    for _ in 0..5 {
        prefix.push(next(&mut first).await.unwrap());
    }
    assert_eq!(prefix, want[..5]);
    // Exactly the cap was read: all of it is kept.
    assert_eq!(source.replayable(), Ok(()));
    assert_eq!(polls_of(&polls), 5);

    let mut second = source.replay().expect("read no further than the cap");
    assert_eq!(exact(second.size_hint()), Some(1200));
    let mut got = Vec::new();
    for _ in 0..5 {
        got.push(next(&mut second).await.unwrap());
    }
    // The prefix came from what was kept: the original was not touched.
    assert_eq!(polls_of(&polls), 5);
    assert_eq!(exact(second.size_hint()), Some(700));
    got.extend(all(&mut second).await);
    // Prefix, then the untouched rest, each byte once, in order.
    assert_eq!(got, want);
    assert_eq!(polls_of(&polls), 12);
}

#[tokio::test]
async fn an_attempt_that_read_past_the_cap_leaves_no_next_attempt() {
    let (body, polls, want) = twelve_chunks();
    let mut first = ReplayBody::new(body, SMALL_CAP);
    let source = first.source();
    for chunk in &want[..6] {
        assert_eq!(next(&mut first).await.as_ref(), Some(chunk));
    }
    assert_eq!(source.replayable(), Err(NotReplayable::CapExceeded));
    assert_eq!(source.replay().err(), Some(NotReplayable::CapExceeded));
    // Refused, the retry took nothing over: the first reader goes on.
    assert_eq!(all(&mut first).await, want[6..]);
    assert_eq!(polls_of(&polls), 12);
}

#[tokio::test]
async fn a_late_reader_of_an_earlier_attempt_pulls_nothing_once_a_retry_took_over() {
    let (body, polls, want) = twelve_chunks();
    let mut first = ReplayBody::new(body, SMALL_CAP);
    let source = first.source();
    assert_eq!(next(&mut first).await.as_ref(), Some(&want[0]));
    assert_eq!(next(&mut first).await.as_ref(), Some(&want[1]));
    let mut second = source.replay().expect("two chunks kept");
    // The first attempt's transport lets go of its reader late and polls it again:
    // it must not take the third chunk away from the retry.
    assert_eq!(
        next(&mut first).await,
        Some(F::Err(
            "replay body: a later attempt took the body over".into()
        ))
    );
    assert_eq!(polls_of(&polls), 2);
    // Interleaved with the retry, it keeps failing, and never pulls.
    assert_eq!(next(&mut second).await.as_ref(), Some(&want[0]));
    assert!(matches!(next(&mut first).await, Some(F::Err(_))));
    assert_eq!(polls_of(&polls), 2);
    let mut got = vec![want[0].clone()];
    got.extend(all(&mut second).await);
    assert_eq!(got, want);
    assert_eq!(polls_of(&polls), 12);
    assert!(matches!(next(&mut first).await, Some(F::Err(_))));
}

#[test]
fn a_late_reader_waiting_on_the_original_is_woken_and_told_when_a_retry_takes_over() {
    let (tx, body) = chan();
    let mut first = ReplayBody::new(body, CAP);
    let source = first.source();
    let (c1, w1) = count_waker();
    let mut cx1 = Context::from_waker(&w1);
    send(&tx, "ab");
    assert_eq!(poll_once(&mut first, &mut cx1), Poll::Ready(Some(d("ab"))));
    // The first attempt's transport waits on the original for more.
    assert!(poll_once(&mut first, &mut cx1).is_pending());
    let mut second = source.replay().expect("kept");
    assert_eq!(woken(&c1), 1, "the waiting reader hears of the new attempt");
    assert!(matches!(
        poll_once(&mut first, &mut cx1),
        Poll::Ready(Some(F::Err(_)))
    ));
    // The retry reads the kept prefix, then the rest when it comes.
    let (_c2, w2) = count_waker();
    let mut cx2 = Context::from_waker(&w2);
    assert_eq!(poll_once(&mut second, &mut cx2), Poll::Ready(Some(d("ab"))));
    assert!(poll_once(&mut second, &mut cx2).is_pending());
    send(&tx, "cd");
    drop(tx);
    assert_eq!(poll_once(&mut second, &mut cx2), Poll::Ready(Some(d("cd"))));
    assert_eq!(poll_once(&mut second, &mut cx2), Poll::Ready(None));
    // The stale reader is not woken by the retry's pulls: it is no longer waiting.
    assert_eq!(woken(&c1), 1);
}

#[tokio::test]
async fn hedged_copies_read_beside_their_attempt_and_a_retry_takes_over_from_both() {
    let (tx, body) = chan();
    let mut first = ReplayBody::new(body, CAP);
    let source = first.source();
    // A hedged copy of the first attempt reads beside it: either may pull.
    let mut copy = first.replay();
    send(&tx, "ab");
    assert_eq!(next(&mut copy).await, Some(d("ab")));
    assert_eq!(next(&mut first).await, Some(d("ab")));
    send(&tx, "cd");
    assert_eq!(next(&mut first).await, Some(d("cd")));
    assert_eq!(next(&mut copy).await, Some(d("cd")));
    // Both sends failed; the retry takes the body over from both.
    let mut retry = source.replay().expect("kept");
    send(&tx, "ef");
    drop(tx);
    for stale in [&mut first, &mut copy] {
        assert!(matches!(next(stale).await, Some(F::Err(_))));
    }
    assert_eq!(all(&mut retry).await, vec![d("ab"), d("cd"), d("ef")]);
    // A copy made of the retry's reader belongs to the retry.
    let mut retry_copy = retry.replay();
    assert_eq!(all(&mut retry_copy).await, vec![d("ab"), d("cd"), d("ef")]);
    assert!(retry.is_fully_kept());
}

#[tokio::test]
async fn a_direct_first_reader_is_of_the_first_attempt() {
    // A cap of 0 under a policy that retries: the first reader starts straight
    // through, moves to the shared state when the source is made, and a retry
    // made before it read anything takes the body over from it.
    let (tx, body) = chan();
    let mut first = ReplayBody::new(body, 0);
    assert!(first.is_direct_repr());
    let source = first.source();
    let mut retry = source.replay().expect("nothing read");
    send(&tx, "ab");
    drop(tx);
    assert!(matches!(next(&mut first).await, Some(F::Err(_))));
    assert_eq!(all(&mut retry).await, vec![d("ab")]);
}
