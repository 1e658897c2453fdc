use crate::admit::NeverHeld;

/// Response future of [`CircuitBreaker`](super::CircuitBreaker), and of
/// [`Throttle`](crate::throttle::Throttle): admission that never holds a call.
pub type ResponseFuture<F> = crate::admit::ResponseFuture<F, NeverHeld<F>>;

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
                crate::admit::ResponseFuture::admit_unheld(&self.admission, &mut self.inner, req)
            }
        }
    };
}
pub(crate) use unheld_service;
