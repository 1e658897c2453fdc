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

/// The `Service` of a front-end layer over a part of admission that never holds a
/// call (the breaker's, the throttle's): `$service<S>` with fields `inner` and
/// `admission`, whose future is the breaker's. Written once for both.
macro_rules! unheld_service {
    ($service:ident) => {
        impl<S, B, RB> tower_service::Service<http::Request<B>> for $service<S>
        where
            S: tower_service::Service<http::Request<B>, Response = http::Response<RB>>,
            S::Error: Into<crate::BoxError>,
        {
            type Response = http::Response<RB>;
            type Error = crate::Error;
            type Future = crate::circuit_breaker::ResponseFuture<S::Future>;

            fn poll_ready(
                &mut self,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<Result<(), crate::Error>> {
                self.inner
                    .poll_ready(cx)
                    .map_err(|e| crate::Error::from_inner(e.into()))
            }

            // Written into the caller, so the inner future is built where it
            // stays rather than copied out of each front-end.
            #[inline(always)]
            fn call(&mut self, req: http::Request<B>) -> Self::Future {
                crate::circuit_breaker::ResponseFuture::new(
                    crate::admit::ResponseFuture::admit_unheld(
                        &self.admission,
                        &mut self.inner,
                        req,
                    ),
                )
            }
        }
    };
}
pub(crate) use unheld_service;
