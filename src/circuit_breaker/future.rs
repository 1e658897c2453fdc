use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Response;
use pin_project_lite::pin_project;

use crate::admit::NeverHeld;
use crate::policy::error::{BoxError, Error};

pin_project! {
    /// Response future of [`CircuitBreaker`](super::CircuitBreaker), and of
    /// [`Throttle`](crate::throttle::Throttle): admission that never holds a call.
    pub struct ResponseFuture<F> {
        #[pin]
        inner: crate::admit::ResponseFuture<F, NeverHeld<F>>,
    }
}

impl<F> ResponseFuture<F> {
    pub(crate) fn new(inner: crate::admit::ResponseFuture<F, NeverHeld<F>>) -> Self {
        ResponseFuture { inner }
    }
}

impl<F, RB, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<RB>, E>>,
    E: Into<BoxError>,
{
    type Output = Result<Response<RB>, Error>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().inner.poll(cx)
    }
}

impl<F> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}
