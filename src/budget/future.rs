use http::Request;
use tower_service::Service;

/// Response future of [`Budget`](super::Budget): the call sent at once (a call
/// whose origin is paused, held by the retry layer beneath), or held here while
/// its origin is paused when no retry layer beneath holds it; its outcome recorded
/// once when it ends.
pub type ResponseFuture<S, B> =
    crate::admit::ResponseFuture<<S as Service<Request<B>>>::Future, crate::admit::Held<S, B>>;
