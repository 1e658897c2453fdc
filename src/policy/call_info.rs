//! Who an event is about: the call's origin and what else names the call (route,
//! method), each bounded, so they make metric labels.

use std::fmt;
use std::sync::Arc;

use http::uri::{Authority, Scheme};
use http::{Method, Request, Uri};

use super::CallContext;

/// The origin of a call: its scheme, host and port, never its user information,
/// path or query.
///
/// # Examples
///
/// ```
/// use backstop::observe::Origin;
///
/// let uri: http::Uri = "https://user:secret@api.example.com:8443/pay?card=4242".parse().unwrap();
/// let origin = Origin::of(&uri);
/// assert_eq!(origin.to_string(), "https://api.example.com:8443");
/// assert_eq!(origin.host(), Some("api.example.com"));
/// ```
#[derive(Clone, Default)]
pub struct Origin {
    scheme: Option<Scheme>,
    // Kept whole (a cheap clone of a shared buffer); only its host and port are
    // ever read, so the user information never leaves it.
    authority: Option<Authority>,
}

impl Origin {
    /// The origin of `uri`.
    pub fn of(uri: &Uri) -> Self {
        Origin {
            scheme: uri.scheme().cloned(),
            authority: uri.authority().cloned(),
        }
    }

    /// The scheme (`http`, `https`), when the URI has one.
    pub fn scheme(&self) -> Option<&str> {
        self.scheme.as_ref().map(Scheme::as_str)
    }

    /// The host, without user information or port.
    pub fn host(&self) -> Option<&str> {
        self.authority.as_ref().map(Authority::host)
    }

    /// The port, when the URI names one.
    pub fn port(&self) -> Option<u16> {
        self.authority.as_ref().and_then(Authority::port_u16)
    }
}

impl fmt::Display for Origin {
    /// `scheme://host:port`, each part as far as the URI has it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(scheme) = self.scheme() {
            write!(f, "{scheme}://")?;
        }
        match self.host() {
            Some(host) => f.write_str(host)?,
            None => f.write_str("(no authority)")?,
        }
        match self.port() {
            Some(port) => write!(f, ":{port}"),
            None => Ok(()),
        }
    }
}

impl fmt::Debug for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Origin({self})")
    }
}

impl PartialEq for Origin {
    fn eq(&self, other: &Self) -> bool {
        self.scheme == other.scheme && self.host() == other.host() && self.port() == other.port()
    }
}

impl Eq for Origin {}

/// What every event says of its call: the origin, the route name when a route
/// table named one, and the method. Each is bounded, so all three make good
/// metric labels; none holds a path, query, header value or body.
#[derive(Clone, Debug)]
pub struct CallInfo {
    origin: Origin,
    route: Option<Arc<str>>,
    method: Method,
    grpc: bool,
    /// The call's attributes as `metrics` labels, made once per call by the
    /// first `MetricsObserver` event and shared by the call's later ones.
    #[cfg(feature = "metrics")]
    labels: std::sync::OnceLock<CallLabels>,
}

/// A call's attributes as `metrics` labels: *server* (`server.address`,
/// `server.port`, `url.scheme`), then `http.request.method`, then `route` when the
/// call has one. Every value is static or shared, so a copy costs no allocation.
#[cfg(feature = "metrics")]
#[derive(Clone, Debug)]
pub(crate) struct CallLabels {
    pub(crate) all: Vec<metrics::Label>,
    /// How many of `all` are *server*.
    pub(crate) server: usize,
}

impl CallInfo {
    /// The call of `req`: its origin, method, and the route its
    /// [`CallContext`] names.
    pub fn of<B>(req: &Request<B>) -> Self {
        CallInfo::of_call(req.uri(), req.method(), req.headers(), req.extensions())
    }

    /// The same, from a request's head.
    pub(crate) fn of_head(head: &http::request::Parts) -> Self {
        CallInfo::of_call(&head.uri, &head.method, &head.headers, &head.extensions)
    }

    fn of_call(
        uri: &http::Uri,
        method: &Method,
        headers: &http::HeaderMap,
        extensions: &http::Extensions,
    ) -> Self {
        let grpc = is_grpc(headers);
        CallInfo {
            origin: Origin::of(uri),
            route: CallContext::of(extensions).and_then(|c| c.route().map(Arc::from)),
            method: method.clone(),
            grpc,
            #[cfg(feature = "metrics")]
            labels: std::sync::OnceLock::new(),
        }
    }

    /// A call to `origin` with `method`, on no route.
    pub fn new(origin: Origin, method: Method) -> Self {
        CallInfo {
            origin,
            route: None,
            method,
            grpc: false,
            #[cfg(feature = "metrics")]
            labels: std::sync::OnceLock::new(),
        }
    }

    /// The same call, made by a gRPC client (or not).
    pub fn with_grpc(mut self, grpc: bool) -> Self {
        self.grpc = grpc;
        self
    }

    /// Whether the call is a gRPC call: its request's `content-type` is
    /// `application/grpc` or one of its subtypes.
    pub fn is_grpc(&self) -> bool {
        self.grpc
    }

    /// The same call, on the route named `route`.
    pub fn with_route(mut self, route: impl Into<Arc<str>>) -> Self {
        self.route = Some(route.into());
        #[cfg(feature = "metrics")]
        {
            self.labels = std::sync::OnceLock::new();
        }
        self
    }

    /// The route's name, shared.
    #[cfg(feature = "metrics")]
    pub(crate) fn route_shared(&self) -> Option<&Arc<str>> {
        self.route.as_ref()
    }

    /// The call's labels, made by `make` on first use.
    #[cfg(feature = "metrics")]
    pub(crate) fn labels(&self, make: impl FnOnce(&CallInfo) -> CallLabels) -> &CallLabels {
        self.labels.get_or_init(|| make(self))
    }

    /// The call's origin.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// The name of the route the call matched, when a route table named it.
    pub fn route(&self) -> Option<&str> {
        self.route.as_deref()
    }

    /// The call's method.
    pub fn method(&self) -> &Method {
        &self.method
    }
}

/// Whether a head says it is gRPC's: its `content-type` is `application/grpc` or
/// one of its subtypes (`application/grpc+proto`).
pub(crate) fn is_grpc(headers: &http::HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}
