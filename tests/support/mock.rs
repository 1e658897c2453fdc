//! A scripted in-process transport, for timing logic on tokio's paused clock.

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use backstop::policy::CallContext;
use backstop::{BoxError, ReplayBody};
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use tokio::time::Instant;

/// What the transport does with one attempt.
#[derive(Clone, Debug)]
pub enum Step {
    /// Answer with this status and headers.
    Status(u16, Vec<(&'static str, &'static str)>),
    /// Fail with an io error of this kind.
    Io(io::ErrorKind),
    /// Never answer.
    Hang,
    /// Answer after this delay.
    Slow(Duration, u16),
}

pub fn status(code: u16) -> Step {
    Step::Status(code, Vec::new())
}

pub fn status_with(code: u16, headers: &[(&'static str, &'static str)]) -> Step {
    Step::Status(code, headers.to_vec())
}

/// What the transport saw of one attempt.
#[derive(Clone, Debug)]
pub struct Seen {
    pub at: Instant,
    pub method: Method,
    pub body: Bytes,
    pub progress: bool,
}

#[derive(Clone, Default)]
pub struct Mock {
    steps: Arc<Mutex<VecDeque<Step>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Mock {
    pub fn new(steps: impl IntoIterator<Item = Step>) -> Self {
        Mock {
            steps: Arc::new(Mutex::new(steps.into_iter().collect())),
            seen: Arc::default(),
        }
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub fn calls(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    /// Gaps between consecutive attempts.
    pub fn gaps(&self) -> Vec<Duration> {
        let seen = self.seen();
        seen.windows(2).map(|w| w[1].at - w[0].at).collect()
    }
}

impl tower::Service<Request<ReplayBody<Full<Bytes>>>> for Mock {
    type Response = Response<Full<Bytes>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<ReplayBody<Full<Bytes>>>) -> Self::Future {
        let step = self
            .steps
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(Step::Status(200, Vec::new()));
        let seen = self.seen.clone();
        Box::pin(async move {
            let at = Instant::now();
            let method = req.method().clone();
            let progress = CallContext::of(req.extensions())
                .and_then(CallContext::attempt)
                .is_some();
            let body = req.into_body().collect().await?.to_bytes();
            seen.lock().unwrap().push(Seen {
                at,
                method,
                body,
                progress,
            });
            match step {
                Step::Status(code, headers) => Ok(response(code, &headers)),
                Step::Io(kind) => Err(io::Error::from(kind).into()),
                Step::Hang => std::future::pending().await,
                Step::Slow(delay, code) => {
                    tokio::time::sleep(delay).await;
                    Ok(response(code, &[]))
                }
            }
        })
    }
}

fn response(code: u16, headers: &[(&'static str, &'static str)]) -> Response<Full<Bytes>> {
    let mut res = Response::new(Full::new(Bytes::from_static(b"body")));
    *res.status_mut() = StatusCode::from_u16(code).unwrap();
    for (name, value) in headers {
        res.headers_mut().append(*name, value.parse().unwrap());
    }
    res
}
