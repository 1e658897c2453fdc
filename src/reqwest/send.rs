//! The service at the bottom of the stack: each attempt's request, turned back into
//! a `reqwest::Request`, sent down the rest of the middleware chain.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::Extensions;
use http_body_util::BodyExt;
use reqwest::{ResponseBuilderExt, Url};
use reqwest_middleware::Next;
use tower_service::Service;

use crate::body::ReplayBody;
use crate::policy::error::{BoxError, Error};

/// One attempt's request, as the stack hands it down.
pub(super) type AttemptRequest = http::Request<ReplayBody<reqwest::Body>>;

/// What an attempt answers: reqwest's response as an `http::Response`, with its URL
/// kept in the extensions the way reqwest reads it back.
pub(super) type AttemptResponse = http::Response<reqwest::Body>;

/// What every attempt of a call shares.
#[derive(Debug)]
pub(super) struct CallParts {
    /// The request's URL as the caller gave it (an `http::Uri` would drop parts
    /// reqwest keeps, such as a fragment).
    pub(super) url: Url,
    /// The middleware chain's extensions as the call began; each attempt gets its
    /// own copy, so that two hedged sends never share one.
    pub(super) extensions: Extensions,
    /// What the caller's request carried as its body.
    pub(super) body: BodyKind,
}

/// The kind of body the caller's request carried, which each attempt's reqwest
/// request carries again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum BodyKind {
    /// No body at all.
    None,
    /// Bytes in memory: each attempt gets them as a buffered body again (reqwest can
    /// then follow a 307 or 308 with it, as it would without backstop).
    Buffered,
    /// A stream: each attempt streams the replay body.
    Streamed,
}

/// The middleware chain's extensions after the attempt that answered, carried up on
/// its response so the caller's extensions can be set to them.
#[derive(Clone, Debug)]
pub(super) struct AnsweredExtensions(pub(super) Extensions);

/// Sends each attempt down the rest of the middleware chain (and so, at its end,
/// through reqwest's client).
#[derive(Clone)]
pub(super) struct SendNext<'a> {
    next: Next<'a>,
    call: Arc<CallParts>,
}

impl<'a> SendNext<'a> {
    pub(super) fn new(next: Next<'a>, call: CallParts) -> Self {
        SendNext {
            next,
            call: Arc::new(call),
        }
    }
}

impl std::fmt::Debug for SendNext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendNext").finish_non_exhaustive()
    }
}

impl<'a> Service<AttemptRequest> for SendNext<'a> {
    type Response = AttemptResponse;
    type Error = Error;
    type Future = Pin<Box<dyn Future<Output = Result<AttemptResponse, Error>> + Send + 'a>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        // The chain has no readiness of its own: reqwest's pool waits inside `run`.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: AttemptRequest) -> Self::Future {
        let next = self.next.clone();
        let call = self.call.clone();
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            let body = match call.body {
                // The replay body streams the first attempt and replays the kept
                // chunks for a later one; reqwest takes it as any `http_body::Body`.
                BodyKind::Streamed => reqwest::Body::wrap(body),
                // A buffered body's one chunk is ready at once, and is the caller's
                // own `Bytes` (kept, not copied).
                BodyKind::Buffered | BodyKind::None => {
                    reqwest::Body::from(body.collect().await.map_err(Error::from_inner)?.to_bytes())
                }
            };
            let mut req = reqwest::Request::try_from(http::Request::from_parts(parts, body))
                .map_err(from_reqwest)?;
            *req.url_mut() = call.url.clone();
            if call.body == BodyKind::None {
                *req.body_mut() = None;
            }
            let mut extensions = call.extensions.clone();
            let res = next.run(req, &mut extensions).await.map_err(from_chain)?;
            let url = res.url().clone();
            let mut res = AttemptResponse::from(res);
            res.extensions_mut().extend(url_extension(url));
            res.extensions_mut().insert(AnsweredExtensions(extensions));
            Ok(res)
        })
    }
}

/// The extension reqwest reads a response's URL from when it turns an
/// `http::Response` back into a `reqwest::Response` (its type is private: the
/// public builder method is the way to make one).
fn url_extension(url: Url) -> Extensions {
    http::Response::builder()
        .url(url)
        .body(())
        .map(|res| res.into_parts().0.extensions)
        .unwrap_or_default()
}

/// An error from the rest of the chain, as backstop's own: a reqwest error is kept
/// (its source chain is what the ladder reads) without its URL; an inner
/// middleware's error is unwrapped from its `anyhow` box when it is a backstop or
/// reqwest error.
pub(super) fn from_chain(err: reqwest_middleware::Error) -> Error {
    match err {
        reqwest_middleware::Error::Reqwest(e) => from_reqwest(e),
        reqwest_middleware::Error::Middleware(e) => match e.downcast::<Error>() {
            Ok(e) => e,
            Err(e) => match e.downcast::<reqwest::Error>() {
                Ok(e) => from_reqwest(e),
                Err(e) => Error::from_inner(BoxError::from(e)),
            },
        },
    }
}

/// A reqwest error as the source of backstop's: without its URL, whose path, query
/// and user information may hold secrets (reqwest prints it in the error's
/// `Display` and `Debug`). Every reqwest error the adapter keeps passes here.
pub(super) fn from_reqwest(err: reqwest::Error) -> Error {
    Error::from_inner(Box::new(err.without_url()))
}
