//! The one scripted in-process transport, for timing logic on tokio's paused
//! clock: each send takes the next [`Step`] (a 200 once the script runs out) and
//! is recorded as a [`Seen`].

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use backstop::policy::CallContext;
use backstop::BoxError;
use bytes::Bytes;
use http::{Extensions, Method, Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use tokio::time::Instant;

/// What the transport does with one send.
#[derive(Clone, Debug)]
pub enum Step {
    /// Reads the request body, then answers this status and headers after the delay.
    Answer(Duration, u16, Vec<(&'static str, &'static str)>),
    /// Reads the request body, then fails with an io error of this kind after the delay.
    Fail(Duration, io::ErrorKind),
    /// Answers this status after the delay without reading the request body.
    Unread(Duration, u16),
    /// Reads the request body, then never answers.
    Hang,
}

/// Answers `code` at once.
pub fn status(code: u16) -> Step {
    Step::Answer(Duration::ZERO, code, Vec::new())
}

/// Answers `code` with these headers at once.
pub fn status_with(code: u16, headers: &[(&'static str, &'static str)]) -> Step {
    Step::Answer(Duration::ZERO, code, headers.to_vec())
}

/// Answers `code` after `delay`.
pub fn slow(delay: Duration, code: u16) -> Step {
    Step::Answer(delay, code, Vec::new())
}

/// Fails at once with an io error of this kind.
pub fn io_error(kind: io::ErrorKind) -> Step {
    Step::Fail(Duration::ZERO, kind)
}

/// A status, or 0 for a refused connection.
pub fn code(code: u16) -> Step {
    match code {
        0 => io_error(io::ErrorKind::ConnectionRefused),
        code => status(code),
    }
}

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// How a send ended on the transport's side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    Running,
    Answered,
    /// Its future was dropped before it answered: the send was canceled.
    Dropped,
}

/// What the transport saw of one send.
#[derive(Clone, Debug)]
pub struct Seen {
    /// When the send was made.
    pub at: Instant,
    pub method: Method,
    /// Its `idempotency-key` header.
    pub key: Option<String>,
    /// Whether its call context carried the keyed mark.
    pub marker: bool,
    /// Whether its call context carried a progress record for the attempt.
    pub progress: bool,
    /// The request body, once read.
    pub body: Option<Bytes>,
    pub fate: Fate,
    /// The response body handed back, if any.
    pub response: Option<Arc<Probe>>,
}

/// Whether a response body was read, and whether it was dropped.
#[derive(Debug, Default)]
pub struct Probe {
    pub polled: AtomicBool,
    pub dropped: AtomicBool,
}

/// The response body: `body`, reporting to its [`Probe`].
#[derive(Debug)]
pub struct Reply {
    probe: Arc<Probe>,
    data: Option<Bytes>,
}

impl Body for Reply {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.probe.polled.store(true, Ordering::SeqCst);
        Poll::Ready(self.data.take().map(|d| Ok(Frame::data(d))))
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        self.probe.dropped.store(true, Ordering::SeqCst);
    }
}

type Hook = Arc<dyn Fn(&Extensions) + Send + Sync>;

#[derive(Clone, Default)]
pub struct Script {
    steps: Arc<Mutex<VecDeque<Step>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
    on_send: Option<Hook>,
}

impl Script {
    pub fn new(steps: impl IntoIterator<Item = Step>) -> Self {
        Script {
            steps: Arc::new(Mutex::new(steps.into_iter().collect())),
            ..Script::default()
        }
    }

    /// One send a status, 0 for a refused connection.
    pub fn codes(codes: impl IntoIterator<Item = u16>) -> Self {
        Script::new(codes.into_iter().map(code))
    }

    /// Adds steps after those still unused.
    pub fn push(&self, steps: impl IntoIterator<Item = Step>) {
        self.steps.lock().unwrap().extend(steps);
    }

    /// Runs `f` on each send's extensions as it is made.
    pub fn on_send(mut self, f: impl Fn(&Extensions) + Send + Sync + 'static) -> Self {
        self.on_send = Some(Arc::new(f));
        self
    }

    pub fn calls(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub fn with<T>(&self, f: impl FnOnce(&[Seen]) -> T) -> T {
        f(&self.seen.lock().unwrap())
    }

    /// When each send started, after the first.
    pub fn starts(&self) -> Vec<Duration> {
        self.with(|seen| seen.iter().map(|s| s.at - seen[0].at).collect())
    }

    /// Gaps between consecutive sends.
    pub fn gaps(&self) -> Vec<Duration> {
        self.with(|seen| seen.windows(2).map(|w| w[1].at - w[0].at).collect())
    }

    pub fn fates(&self) -> Vec<Fate> {
        self.with(|seen| seen.iter().map(|s| s.fate).collect())
    }
}

/// Marks the send dropped if its future goes away before it answered.
struct FateGuard {
    seen: Arc<Mutex<Vec<Seen>>>,
    index: usize,
}

impl Drop for FateGuard {
    fn drop(&mut self) {
        let mut seen = self.seen.lock().unwrap();
        if seen[self.index].fate == Fate::Running {
            seen[self.index].fate = Fate::Dropped;
        }
    }
}

async fn after(delay: Duration) {
    if delay == Duration::MAX {
        std::future::pending::<()>().await;
    }
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
}

impl<B> tower::Service<Request<B>> for Script
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<Reply>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Reply>, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let step = self
            .steps
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(status(200));
        if let Some(on_send) = &self.on_send {
            on_send(req.extensions());
        }
        let context = CallContext::of(req.extensions());
        let index = {
            let mut seen = self.seen.lock().unwrap();
            seen.push(Seen {
                at: Instant::now(),
                method: req.method().clone(),
                key: req
                    .headers()
                    .get("idempotency-key")
                    .map(|v| v.to_str().unwrap().to_owned()),
                marker: context.is_some_and(CallContext::is_keyed),
                progress: context.and_then(CallContext::attempt).is_some(),
                body: None,
                fate: Fate::Running,
                response: None,
            });
            seen.len() - 1
        };
        let seen = self.seen.clone();
        Box::pin(async move {
            let guard = FateGuard {
                seen: seen.clone(),
                index,
            };
            let (delay, outcome, read) = match step {
                Step::Answer(delay, code, headers) => (delay, Ok((code, headers)), true),
                Step::Fail(delay, kind) => (delay, Err(kind), true),
                Step::Unread(delay, code) => (delay, Ok((code, Vec::new())), false),
                Step::Hang => (Duration::MAX, Ok((0, Vec::new())), true),
            };
            if read {
                let body = req.into_body().collect().await.map_err(Into::into)?;
                seen.lock().unwrap()[index].body = Some(body.to_bytes());
                after(delay).await;
            } else {
                // Keep the body unread (and alive) while the send runs.
                let body = req.into_body();
                after(delay).await;
                drop(body);
            }
            let mut seen_now = seen.lock().unwrap();
            seen_now[index].fate = Fate::Answered;
            let result = match outcome {
                Ok((code, headers)) => {
                    let probe = Arc::new(Probe::default());
                    seen_now[index].response = Some(probe.clone());
                    let mut res = Response::new(Reply {
                        probe,
                        data: Some(Bytes::from_static(b"body")),
                    });
                    *res.status_mut() = StatusCode::from_u16(code).unwrap();
                    for (name, value) in headers {
                        res.headers_mut().append(name, value.parse().unwrap());
                    }
                    Ok(res)
                }
                Err(kind) => Err(io::Error::from(kind).into()),
            };
            drop(seen_now);
            drop(guard);
            result
        })
    }
}
