//! Policies per route, for gateways.

use std::sync::Arc;

use http::{Method, Request};

use crate::policy::RetryPolicy;

/// Which requests a route covers: a path prefix, a method and a host, each
/// optional; a request matches when it matches every part that is set.
///
/// A path prefix matches whole segments: `/pay` covers `/pay` and `/pay/42`, not
/// `/payments`. The host is compared without case, from the URI or else the `Host`
/// header.
///
/// # Examples
///
/// ```
/// use backstop::retry::Route;
/// use http::Method;
///
/// let route = Route::path_prefix("/payments").method(Method::POST);
/// let req = http::Request::post("http://api.example.com/payments/42").body(()).unwrap();
/// assert!(route.matches(&req));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Route {
    path_prefix: Option<String>,
    method: Option<Method>,
    host: Option<String>,
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

    /// A route for requests with `method`.
    pub fn for_method(method: Method) -> Self {
        Route::any().method(method)
    }

    /// Also requires paths under `prefix`.
    pub fn and_path_prefix(mut self, prefix: impl Into<String>) -> Self {
        let mut prefix = prefix.into();
        while prefix.len() > 1 && prefix.ends_with('/') {
            prefix.pop();
        }
        self.path_prefix = Some(prefix);
        self
    }

    /// Also requires `method`.
    pub fn method(mut self, method: Method) -> Self {
        self.method = Some(method);
        self
    }

    /// Also requires `host`.
    pub fn and_host(mut self, host: impl Into<String>) -> Self {
        self.host = Some(host.into().to_ascii_lowercase());
        self
    }

    /// Whether `req` is covered by this route.
    pub fn matches<B>(&self, req: &Request<B>) -> bool {
        if let Some(m) = &self.method {
            if req.method() != m {
                return false;
            }
        }
        if let Some(prefix) = &self.path_prefix {
            let path = req.uri().path();
            let under = path.strip_prefix(prefix.as_str()).is_some_and(|rest| {
                rest.is_empty() || rest.starts_with('/') || prefix.ends_with('/')
            });
            if !under {
                return false;
            }
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

/// Retry policies by route, in one place: the first route that matches a request
/// gives its policy, else the default does.
///
/// A policy in a request's extensions overrides both, for that call.
///
/// # Examples
///
/// ```
/// use backstop::retry::{Route, Routes};
/// use backstop::{RetryLayer, RetryPolicy};
/// use http::Method;
///
/// let routes = Routes::new(RetryPolicy::default())
///     // Never repeat payment captures, whatever their method.
///     .route(Route::path_prefix("/payments/capture"), RetryPolicy::none())
///     // Reads of the catalogue may try harder.
///     .route(
///         Route::path_prefix("/catalogue").method(Method::GET),
///         RetryPolicy::builder().max_attempts(5).build()?,
///     );
/// let layer = RetryLayer::with_routes(routes);
/// # let _ = layer;
/// # Ok::<(), backstop::policy::InvalidConfig>(())
/// ```
#[derive(Clone, Debug)]
pub struct Routes {
    default: Arc<RetryPolicy>,
    routes: Vec<(Route, Arc<RetryPolicy>)>,
}

impl Routes {
    /// Routes with `default` for every request no route covers.
    pub fn new(default: RetryPolicy) -> Self {
        Routes {
            default: Arc::new(default),
            routes: Vec::new(),
        }
    }

    /// Adds a route; routes are tried in the order they were added.
    pub fn route(mut self, route: Route, policy: RetryPolicy) -> Self {
        self.routes.push((route, Arc::new(policy)));
        self
    }

    /// The policy for `req`.
    #[inline]
    pub fn policy_for<B>(&self, req: &Request<B>) -> &Arc<RetryPolicy> {
        self.routes
            .iter()
            .find(|(route, _)| route.matches(req))
            .map_or(&self.default, |(_, policy)| policy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: Method, uri: &str) -> Request<()> {
        Request::builder().method(method).uri(uri).body(()).unwrap()
    }

    #[test]
    fn path_prefix_matches_whole_segments() {
        let r = Route::path_prefix("/pay/");
        assert!(r.matches(&req(Method::GET, "http://h/pay")));
        assert!(r.matches(&req(Method::GET, "http://h/pay/42")));
        assert!(!r.matches(&req(Method::GET, "http://h/payments")));
        assert!(!r.matches(&req(Method::GET, "http://h/")));
        assert!(Route::path_prefix("/").matches(&req(Method::GET, "http://h/x")));
    }

    #[test]
    fn host_from_uri_or_header() {
        let r = Route::host("API.example.com");
        assert!(r.matches(&req(Method::GET, "http://api.example.com/")));
        let mut relative = req(Method::GET, "/x");
        assert!(!r.matches(&relative));
        relative
            .headers_mut()
            .insert(http::header::HOST, "api.example.com:8080".parse().unwrap());
        assert!(r.matches(&relative));
    }

    #[test]
    fn first_matching_route_wins() {
        let routes = Routes::new(RetryPolicy::default())
            .route(
                Route::for_method(Method::POST).and_path_prefix("/a"),
                RetryPolicy::none(),
            )
            .route(
                Route::path_prefix("/a"),
                RetryPolicy::builder().max_attempts(5).build().unwrap(),
            );
        assert_eq!(
            routes
                .policy_for(&req(Method::POST, "http://h/a/1"))
                .max_attempts(),
            1
        );
        assert_eq!(
            routes
                .policy_for(&req(Method::GET, "http://h/a/1"))
                .max_attempts(),
            5
        );
        assert_eq!(
            routes
                .policy_for(&req(Method::GET, "http://h/b"))
                .max_attempts(),
            3
        );
    }
}
