use http::Request;
use tower_service::Service;

/// Response future of [`Budget`](super::Budget): the call sent at once, or held
/// while its origin is paused and sent through a clone of the inner service once
/// its hold is over; its outcome recorded once when it ends.
pub type ResponseFuture<S, B> =
    crate::admit::ResponseFuture<<S as Service<Request<B>>>::Future, crate::admit::Held<S, B>>;
