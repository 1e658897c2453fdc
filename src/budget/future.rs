use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{Request, Response};
use pin_project_lite::pin_project;
use tower_service::Service;

use crate::admit::Held;
use crate::policy::error::{BoxError, Error};

pin_project! {
    /// Response future of [`Budget`](super::Budget).
    pub struct ResponseFuture<S, B>
    where
        S: Service<Request<B>>,
    {
        #[pin]
        inner: crate::admit::ResponseFuture<S::Future, Held<S, B>>,
    }
}

impl<S, B> ResponseFuture<S, B>
where
    S: Service<Request<B>>,
{
    pub(super) fn new(inner: crate::admit::ResponseFuture<S::Future, Held<S, B>>) -> Self {
        ResponseFuture { inner }
    }
}

impl<S, B, RB> Future for ResponseFuture<S, B>
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Error: Into<BoxError>,
{
    type Output = Result<Response<RB>, Error>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().inner.poll(cx)
    }
}

impl<S, B> fmt::Debug for ResponseFuture<S, B>
where
    S: Service<Request<B>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}
