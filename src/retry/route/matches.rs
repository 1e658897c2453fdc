//! Which requests a route covers.

use std::sync::Arc;

use http::{Method, Request};

/// Which requests a route covers: a path (a prefix, or an exact path), methods and
/// a host, each optional; a request matches when it matches every part that is
/// set.
///
/// A path prefix matches whole segments: `/pay` covers `/pay` and `/pay/42`, not
/// `/payments`. An exact path covers that path only (a gRPC method's
/// `/package.Service/Method`). A route with methods covers any of them. The host is
/// compared without case, from the URI or else the `Host` header.
///
/// # Examples
///
/// ```
/// use backstop::retry::Route;
/// use http::Method;
///
/// let route = Route::path_prefix("/payments").method(Method::POST).named("payments");
/// let req = http::Request::post("http://api.example.com/payments/42").body(()).unwrap();
/// assert!(route.matches(&req));
/// assert_eq!(route.name(), Some("payments"));
///
/// // One gRPC method, and reads of any kind under `/catalog`.
/// let say = Route::path_exact("/helloworld.Greeter/SayHello");
/// let req = http::Request::post("http://grpc.test/helloworld.Greeter/SayHello").body(()).unwrap();
/// assert!(say.matches(&req));
/// let reads = Route::path_prefix("/catalog").methods([Method::GET, Method::HEAD]);
/// let req = http::Request::head("http://shop.test/catalog/42").body(()).unwrap();
/// assert!(reads.matches(&req));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Route {
    path: Option<PathMatch>,
    methods: Vec<Method>,
    host: Option<String>,
    name: Option<Arc<str>>,
}

/// How a [`Route`] matches a request's path.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PathMatch {
    /// Paths under this prefix, by whole segments.
    Prefix(String),
    /// This path only.
    Exact(String),
}

impl Route {
    /// A route that covers every request.
    pub fn any() -> Self {
        Route::default()
    }

    /// A route for paths under `prefix`.
    pub fn path_prefix(prefix: impl Into<String>) -> Self {
        Route::any().and_path_prefix(prefix)
    }

    /// A route for requests to `host`.
    pub fn host(host: impl Into<String>) -> Self {
        Route::any().and_host(host)
    }

    /// A route for the path `path` only.
    pub fn path_exact(path: impl Into<String>) -> Self {
        Route::any().and_path_exact(path)
    }

    /// A route for requests with `method`.
    pub fn for_method(method: Method) -> Self {
        Route::any().method(method)
    }

    /// Also requires paths under `prefix` (instead of any path set before).
    pub fn and_path_prefix(mut self, prefix: impl Into<String>) -> Self {
        let mut prefix = prefix.into();
        while prefix.len() > 1 && prefix.ends_with('/') {
            prefix.pop();
        }
        self.path = Some(PathMatch::Prefix(prefix));
        self
    }

    /// Also requires the path `path` exactly (instead of any path set before).
    pub fn and_path_exact(mut self, path: impl Into<String>) -> Self {
        self.path = Some(PathMatch::Exact(path.into()));
        self
    }

    /// Also requires `method` (instead of any methods set before).
    pub fn method(self, method: Method) -> Self {
        self.methods([method])
    }

    /// Also requires one of `methods` (instead of any set before); none means any
    /// method.
    pub fn methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.methods.clear();
        for method in methods {
            if !self.methods.contains(&method) {
                self.methods.push(method);
            }
        }
        self
    }

    /// Also requires `host`.
    pub fn and_host(mut self, host: impl Into<String>) -> Self {
        self.host = Some(host.into().to_ascii_lowercase());
        self
    }

    /// Names the route, for the history, tracing and the call's context.
    ///
    /// The name is shown quoted and escaped wherever it is written, so any text is
    /// safe; keep it short and free of request data.
    pub fn named(mut self, name: impl Into<Arc<str>>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The route's name, if it was [named](Route::named).
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// The route's name, shared with the calls it covers.
    pub(super) fn shared_name(&self) -> Option<&Arc<str>> {
        self.name.as_ref()
    }

    /// How the route matches paths; `None` for any path.
    pub fn path(&self) -> Option<&PathMatch> {
        self.path.as_ref()
    }

    /// The methods the route covers; empty for any method.
    pub fn method_list(&self) -> &[Method] {
        &self.methods
    }

    /// The host the route covers (lower case), if it was given one.
    pub fn host_name(&self) -> Option<&str> {
        self.host.as_deref()
    }

    /// Whether `req` is covered by this route.
    pub fn matches<B>(&self, req: &Request<B>) -> bool {
        if !self.methods.is_empty() && !self.methods.contains(req.method()) {
            return false;
        }
        match &self.path {
            None => {}
            Some(PathMatch::Prefix(prefix)) => {
                let path = req.uri().path();
                let under = path.strip_prefix(prefix.as_str()).is_some_and(|rest| {
                    rest.is_empty() || rest.starts_with('/') || prefix.ends_with('/')
                });
                if !under {
                    return false;
                }
            }
            Some(PathMatch::Exact(exact)) if req.uri().path() != exact => return false,
            Some(PathMatch::Exact(_)) => {}
        }
        if let Some(host) = &self.host {
            let req_host = req.uri().host().or_else(|| {
                req.headers()
                    .get(http::header::HOST)
                    .and_then(|h| h.to_str().ok())
                    .map(|h| h.rsplit_once(':').map_or(h, |(name, _)| name))
            });
            if !req_host.is_some_and(|h| h.eq_ignore_ascii_case(host)) {
                return false;
            }
        }
        true
    }
}
