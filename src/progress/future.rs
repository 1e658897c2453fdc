use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper_util::client::legacy::connect::CaptureConnection;
use pin_project_lite::pin_project;

use crate::policy::AttemptLog;

pin_project! {
    /// Response future of [`ProgressTracking`](super::ProgressTracking).
    pub struct ResponseFuture<F> {
        #[pin]
        pub(super) inner: F,
        // The attempt's record and the client's connection capture; `None` for a
        // request without a record, which passes straight through. The capture is
        // let go once it has shown a connection: nothing more is learnt from it.
        pub(super) tracking: Option<(AttemptLog, Option<CaptureConnection>)>,
    }
}

impl<F, T, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<T, E>>,
{
    type Output = F::Output;

    // Always inlined: a request without a record passes straight through, and the
    // inner future writes its answer where the caller's goes.
    #[inline(always)]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let Some(tracking) = this.tracking.as_mut() else {
            return this.inner.poll(cx);
        };
        tracked(this.inner, tracking, cx)
    }
}

/// Polls the inner future of a request with a record, and keeps the record
/// current: out of line, as only a write whose safety depends on it has one.
#[inline(never)]
fn tracked<F, T, E>(
    inner: Pin<&mut F>,
    (progress, capture): &mut (AttemptLog, Option<CaptureConnection>),
    cx: &mut Context<'_>,
) -> Poll<Result<T, E>>
where
    F: Future<Output = Result<T, E>>,
{
    let result = inner.poll(cx);
    // hyper-util fills the capture in our own poll, when it hands the request to
    // a connection and before the connection writes a byte; checking after every
    // poll keeps the record current even if the future is dropped next (an
    // attempt timeout).
    if capture
        .as_ref()
        .is_some_and(|c| c.connection_metadata().is_some())
    {
        progress.mark_connected();
        progress.mark_write_began();
        *capture = None;
    }
    if let Poll::Ready(Ok(_)) = &result {
        progress.mark_head_received();
    }
    result
}

impl<F> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("tracked", &self.tracking.is_some())
            .finish_non_exhaustive()
    }
}
