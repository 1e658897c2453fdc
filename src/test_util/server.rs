//! The accept loop and the HTTP/1.1 and HTTP/2 connection drivers.

use std::future::{pending, poll_fn, Future};
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt};
use http_body::{Body, Frame, SizeHint};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio::time::Sleep;

use super::io_tap::{self, SharedSocket, Tap};
use super::{Protocol, Reply, Shared, Slot, Stall, Step};

/// What [`Step::CloseAfterHead`] announces in `content-length`, and how much it sends.
const BROKEN_DECLARED: usize = 64;
const BROKEN_SENT: usize = 32;

/// The most a connection waits for its last frames to be written before a close.
const FLUSH_WAIT: Duration = Duration::from_secs(1);

/// Accepts connections until the task is aborted (the [`super::Upstream`] is dropped);
/// the connection tasks live in a [`JoinSet`], so they are aborted with it.
pub(super) async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut connections = JoinSet::new();
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(_) => {
                // Out of file descriptors or similar: don't spin.
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        while connections.try_join_next().is_some() {}
        let _ = stream.set_nodelay(true);
        let (id, refuse) = shared.accept();
        let shared = shared.clone();
        connections.spawn(async move {
            let socket = io_tap::shared(stream);
            if refuse {
                io_tap::close(socket, None).await;
                return;
            }
            match shared.protocol {
                Protocol::Http1 => serve_h1(socket, shared, id).await,
                Protocol::Http2 => serve_h2(socket, shared, id).await,
            }
        });
    }
}

// ---------------------------------------------------------------------------------------
// Request bodies

/// A request body of either protocol.
enum RequestBody {
    H1(hyper::body::Incoming),
    H2(h2::RecvStream),
}

impl RequestBody {
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, ()>>> {
        match self {
            RequestBody::H1(body) => loop {
                match ready!(Pin::new(&mut *body).poll_frame(cx)) {
                    None => return Poll::Ready(None),
                    Some(Err(_)) => return Poll::Ready(Some(Err(()))),
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data() {
                            return Poll::Ready(Some(Ok(data)));
                        }
                        // Trailers: keep going to the end.
                    }
                }
            },
            RequestBody::H2(body) => match ready!(body.poll_data(cx)) {
                None => Poll::Ready(None),
                Some(Err(_)) => Poll::Ready(Some(Err(()))),
                Some(Ok(data)) => {
                    let _ = body.flow_control().release_capacity(data.len());
                    Poll::Ready(Some(Ok(data)))
                }
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            RequestBody::H1(body) => body.is_end_stream(),
            RequestBody::H2(body) => body.is_end_stream(),
        }
    }

    /// Reads the body (at most `limit` bytes of it), recording it as it goes. `Ok(())`
    /// once the end of the body was seen, `Err(())` if reading stopped before it.
    async fn read(&mut self, shared: &Shared, slot: Slot, limit: Option<usize>) -> Result<(), ()> {
        let mut read = 0_usize;
        loop {
            if self.is_end_stream() {
                break;
            }
            if limit.is_some_and(|limit| read >= limit) {
                return Err(());
            }
            match poll_fn(|cx| self.poll_chunk(cx)).await {
                None => break,
                Some(Err(())) => return Err(()),
                Some(Ok(mut data)) => {
                    let mut truncated = false;
                    if let Some(limit) = limit {
                        if data.len() > limit - read {
                            data.truncate(limit - read);
                            truncated = true;
                        }
                    }
                    read += data.len();
                    shared.append_body(slot, &data);
                    if truncated {
                        return Err(());
                    }
                }
            }
        }
        shared.body_complete(slot);
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// HTTP/1.1

async fn serve_h1(socket: SharedSocket, shared: Arc<Shared>, id: usize) {
    let service = hyper::service::service_fn(move |request| {
        let shared = shared.clone();
        async move { h1_request(&shared, id, request).await }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(Tap(socket.clone())), service)
        .await;
    io_tap::close(socket, None).await;
}

/// Handles one HTTP/1.1 request. An `Err` makes hyper close the connection without
/// sending a response.
async fn h1_request(
    shared: &Shared,
    id: usize,
    request: http::Request<hyper::body::Incoming>,
) -> Result<http::Response<ReplyBody>, io::Error> {
    let (head, body) = request.into_parts();
    let (slot, step) = shared.begin(&head, id);
    let mut body = RequestBody::H1(body);
    let abort = || {
        io::Error::new(
            io::ErrorKind::ConnectionAborted,
            "test_util: scripted close",
        )
    };
    match step {
        Step::Reply(reply) => {
            if !reply.early {
                body.read(shared, slot, None).await.map_err(|()| abort())?;
            }
            if let Some(delay) = reply.delay {
                tokio::time::sleep(delay).await;
            }
            let body = match reply.stall {
                Stall::No => ReplyBody::full(reply.body.clone()),
                Stall::For(stall) => ReplyBody::stalled(Some(stall), reply.body.clone()),
                Stall::Forever => ReplyBody::stalled(None, reply.body.clone()),
            };
            Ok(http::Response::from_parts(reply.head(), body))
        }
        Step::CloseAfterHead => {
            body.read(shared, slot, None).await.map_err(|()| abort())?;
            Ok(broken_head().map(|()| ReplyBody::broken()))
        }
        Step::CloseAfterBodyBytes(limit) => {
            let _ = body.read(shared, slot, Some(limit)).await;
            Err(abort())
        }
        Step::CloseAfterBody | Step::ResetStream => {
            let _ = body.read(shared, slot, None).await;
            Err(abort())
        }
        Step::RefuseConnection | Step::CloseOnHead | Step::RefusedStream | Step::GoAway => {
            Err(abort())
        }
    }
}

/// The head [`Step::CloseAfterHead`] sends.
fn broken_head() -> http::Response<()> {
    let mut head = http::Response::new(());
    head.headers_mut()
        .insert(http::header::CONTENT_LENGTH, BROKEN_DECLARED.into());
    head
}

/// A response body for hyper's HTTP/1.1 server.
pub(super) struct ReplyBody {
    state: ReplyState,
}

enum ReplyState {
    Full(Option<Bytes>),
    /// Nothing until the sleep is over (never, without one), then the body.
    Stalled(Option<Pin<Box<Sleep>>>, Option<Bytes>),
    /// Some bytes, one `Pending` (so hyper flushes them), then an error, which makes
    /// hyper abort the connection.
    Broken(Option<Bytes>, bool),
}

impl ReplyBody {
    fn full(body: Bytes) -> Self {
        ReplyBody {
            state: ReplyState::Full(Some(body).filter(|body| !body.is_empty())),
        }
    }

    fn stalled(stall: Option<Duration>, body: Bytes) -> Self {
        let sleep = stall.map(|stall| Box::pin(tokio::time::sleep(stall)));
        ReplyBody {
            state: ReplyState::Stalled(sleep, Some(body).filter(|body| !body.is_empty())),
        }
    }

    fn broken() -> Self {
        ReplyBody {
            state: ReplyState::Broken(Some(Bytes::from(vec![b'x'; BROKEN_SENT])), false),
        }
    }
}

impl Body for ReplyBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        match &mut self.get_mut().state {
            ReplyState::Full(body) => Poll::Ready(body.take().map(|b| Ok(Frame::data(b)))),
            ReplyState::Stalled(None, _) => Poll::Pending,
            ReplyState::Stalled(Some(sleep), body) => {
                ready!(sleep.as_mut().poll(cx));
                Poll::Ready(body.take().map(|b| Ok(Frame::data(b))))
            }
            ReplyState::Broken(chunk, yielded) => {
                if let Some(chunk) = chunk.take() {
                    return Poll::Ready(Some(Ok(Frame::data(chunk))));
                }
                if !*yielded {
                    *yielded = true;
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                Poll::Ready(Some(Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "test_util: scripted close after the response head",
                ))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.state, ReplyState::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match &self.state {
            ReplyState::Full(body) => {
                SizeHint::with_exact(body.as_ref().map_or(0, |b| b.len() as u64))
            }
            _ => SizeHint::default(),
        }
    }
}

// ---------------------------------------------------------------------------------------
// HTTP/2

/// What a stream handler asks of its connection.
enum Outcome {
    /// Nothing: the stream is done (or left to its own devices).
    Done,
    /// Close the connection now.
    Close,
    /// Let the connection write what is queued, then close it. The stream is kept open
    /// until then (dropping it would reset it with `CANCEL`).
    FlushThenClose(h2::SendStream<Bytes>),
    /// Write a `GOAWAY` with this last-stream-id, then close the connection.
    GoAway(u32),
}

type Handler = Pin<Box<dyn Future<Output = Outcome> + Send>>;

async fn serve_h2(socket: SharedSocket, shared: Arc<Shared>, id: usize) {
    let go_away = drive_h2(Tap(socket.clone()), shared, id).await;
    let frame = go_away.map(|last| io_tap::go_away_frame(last, u32::from(h2::Reason::NO_ERROR)));
    io_tap::close(socket, frame.as_ref().map(|frame| &frame[..])).await;
}

/// Serves HTTP/2 streams until the connection ends or a step closes it. Returns the
/// last-stream-id of a `GOAWAY` to write before closing.
async fn drive_h2(io: Tap, shared: Arc<Shared>, id: usize) -> Option<u32> {
    let mut connection = h2::server::handshake(io).await.ok()?;
    let mut ping_pong = connection.ping_pong();
    let mut handlers = FuturesUnordered::<Handler>::new();
    let mut flushing: Option<Pin<Box<dyn Future<Output = ()> + Send>>> = None;
    let mut open_streams = Vec::new();
    loop {
        tokio::select! {
            next = connection.accept() => match next {
                Some(Ok((request, respond))) => {
                    handlers.push(Box::pin(h2_stream(shared.clone(), id, request, respond)));
                }
                Some(Err(_)) | None => return None,
            },
            Some(outcome) = handlers.next(), if !handlers.is_empty() => match outcome {
                Outcome::Done => {}
                Outcome::Close => return None,
                Outcome::GoAway(last) => return Some(last),
                Outcome::FlushThenClose(stream) => {
                    open_streams.push(stream);
                    if flushing.is_none() {
                        flushing = Some(match ping_pong.take() {
                            // Frames go out in order: once the PONG is back, everything
                            // queued before the PING was written.
                            Some(mut ping_pong) => Box::pin(async move {
                                let ping = ping_pong.ping(h2::Ping::opaque());
                                let _ = tokio::time::timeout(FLUSH_WAIT, ping).await;
                            }),
                            None => Box::pin(tokio::time::sleep(FLUSH_WAIT / 10)),
                        });
                    }
                }
            },
            () = async {
                match flushing.as_mut() {
                    Some(flush) => flush.await,
                    None => pending().await,
                }
            }, if flushing.is_some() => return None,
        }
    }
}

/// Handles one HTTP/2 stream.
async fn h2_stream(
    shared: Arc<Shared>,
    id: usize,
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
) -> Outcome {
    let (head, body) = request.into_parts();
    let (slot, step) = shared.begin(&head, id);
    let mut body = RequestBody::H2(body);
    match step {
        Step::Reply(reply) if reply.early => {
            // Answer with the body unread, then tell the client to stop sending it.
            if let Some(delay) = reply.delay {
                tokio::time::sleep(delay).await;
            }
            let head = http::Response::from_parts(reply.head(), ());
            match respond.send_response(head, reply.body.is_empty()) {
                Ok(mut stream) => {
                    if !reply.body.is_empty() {
                        let _ = stream.send_data(reply.body.clone(), true);
                    }
                    stream.send_reset(h2::Reason::NO_ERROR);
                }
                Err(_) => respond.send_reset(h2::Reason::INTERNAL_ERROR),
            }
            drop(body);
            Outcome::Done
        }
        Step::Reply(reply) => {
            if body.read(&shared, slot, None).await.is_err() {
                respond.send_reset(h2::Reason::CANCEL);
                return Outcome::Done;
            }
            h2_reply(&reply, respond).await;
            Outcome::Done
        }
        Step::CloseAfterHead => {
            if body.read(&shared, slot, None).await.is_err() {
                return Outcome::Close;
            }
            let Ok(mut stream) = respond.send_response(broken_head(), false) else {
                return Outcome::Close;
            };
            let _ = stream.send_data(Bytes::from(vec![b'x'; BROKEN_SENT]), false);
            Outcome::FlushThenClose(stream)
        }
        Step::CloseAfterBodyBytes(limit) => {
            let _ = body.read(&shared, slot, Some(limit)).await;
            Outcome::Close
        }
        Step::CloseAfterBody => {
            let _ = body.read(&shared, slot, None).await;
            Outcome::Close
        }
        Step::ResetStream => {
            let _ = body.read(&shared, slot, None).await;
            respond.send_reset(h2::Reason::INTERNAL_ERROR);
            Outcome::Done
        }
        Step::RefusedStream => {
            respond.send_reset(h2::Reason::REFUSED_STREAM);
            Outcome::Done
        }
        Step::GoAway => {
            // The highest client stream id below this one (client streams are odd).
            Outcome::GoAway(respond.stream_id().as_u32().saturating_sub(2))
        }
        Step::RefuseConnection | Step::CloseOnHead => Outcome::Close,
    }
}

async fn h2_reply(reply: &Reply, mut respond: h2::server::SendResponse<Bytes>) {
    if let Some(delay) = reply.delay {
        tokio::time::sleep(delay).await;
    }
    let head = http::Response::from_parts(reply.head(), ());
    let end_now = reply.stall == Stall::No && reply.body.is_empty();
    let mut stream = match respond.send_response(head, end_now) {
        Ok(stream) => stream,
        Err(_) => {
            // E.g. a connection-specific header, which HTTP/2 forbids.
            respond.send_reset(h2::Reason::INTERNAL_ERROR);
            return;
        }
    };
    if end_now {
        return;
    }
    match reply.stall {
        Stall::No => {}
        Stall::For(stall) => tokio::time::sleep(stall).await,
        Stall::Forever => pending::<()>().await,
    }
    let _ = stream.send_data(reply.body.clone(), true);
}
