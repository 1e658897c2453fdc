//! The tower stack the middleware runs for a call: backstop's own layers, each one
//! present or not, over the service that calls the next middleware.

use std::task::{Context, Poll};

use futures_util::future::Either;
use tower_layer::Layer;
use tower_service::Service;

/// A layer that is configured or not: its service, or the inner service as it is.
pub(super) fn maybe<L: Layer<S>, S>(layer: Option<&L>, inner: S) -> Maybe<L::Service, S> {
    match layer {
        Some(layer) => Maybe::On(layer.layer(inner)),
        None => Maybe::Off(inner),
    }
}

/// A configured layer's service, or the inner service when the layer is not
/// configured. Both answer alike, so the stack has one type whatever is set.
#[derive(Clone, Debug)]
pub(super) enum Maybe<A, B> {
    On(A),
    Off(B),
}

impl<A, B, R> Service<R> for Maybe<A, B>
where
    A: Service<R>,
    B: Service<R, Response = A::Response, Error = A::Error>,
{
    type Response = A::Response;
    type Error = A::Error;
    type Future = Either<A::Future, B::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), A::Error>> {
        match self {
            Maybe::On(a) => a.poll_ready(cx),
            Maybe::Off(b) => b.poll_ready(cx),
        }
    }

    fn call(&mut self, req: R) -> Self::Future {
        match self {
            Maybe::On(a) => Either::Left(a.call(req)),
            Maybe::Off(b) => Either::Right(b.call(req)),
        }
    }
}
