//! Gateway API `HTTPRoute`s (YAML) as backstop routes: each rule's `retry` and
//! `timeouts` become a retry policy, each of its `matches` a [`Route`](crate::retry::Route) with it.
//!
//! A gateway's routes already say how each path is retried and how long it may
//! take ([GEP-1731] retries, [GEP-1742] timeouts); [`from_yaml`] reads them, so a
//! client stack in front of the same services needs no second table. (backstop's
//! own format is read by [`config::from_yaml`](crate::config::from_yaml).)
//!
//! | `HTTPRoute` (`gateway.networking.k8s.io/v1`) | backstop |
//! |---|---|
//! | `rules[].matches[]` | one [`Route`](crate::retry::Route) per match (per exact hostname), with the rule's policy |
//! | `matches[].path` `PathPrefix` / `Exact` | [`Route::path_prefix`](crate::retry::Route::path_prefix) (whole segments, a trailing `/` ignored, as the spec) / [`Route::path_exact`](crate::retry::Route::path_exact) |
//! | `matches[].method` | [`Route::method`](crate::retry::Route::method) |
//! | no `matches` (or a match without `path`) | a prefix match on `/`: every request (of that method) |
//! | `spec.hostnames` (exact names) | [`Route::and_host`](crate::retry::Route::and_host), one route per hostname |
//! | `retry.codes` | [`retryable_statuses`](crate::retry::RetryPolicyBuilder::retryable_statuses) (400 to 599); absent or empty: backstop's (408, 429, 502, 503, 504) |
//! | `retry.attempts` (retries, 1 to 99) | [`max_attempts`](RetryPolicy::max_attempts) `= attempts + 1` (the first attempt counts in backstop) |
//! | `retry.backoff` | the backoff's base; its max is backstop's default max (5 s), or the base if longer |
//! | `timeouts.request` | the policy's total [`timeout`](RetryPolicy::timeout); `"0s"`: none |
//! | `timeouts.backendRequest` | the [`attempt_timeout`](RetryPolicy::attempt_timeout); `"0s"`: none |
//! | a rule without `retry` | backstop's defaults ([`RetryPolicy::default()`]), the spec leaving it to the implementation; its `timeouts` still apply |
//! | a request no rule matches | the default policy, [`RetryPolicy::default()`] |
//! | `metadata.name`, `metadata.namespace`, `rules[].name` | the route's [name](crate::retry::Route::named): `namespace/name/rules[i]/rule-name` |
//!
//! The rest of the stack ([`StackConfig`]'s budget, breaker, hedging) is
//! [`StackConfig::default()`]'s: an `HTTPRoute` has no such settings.
//!
//! # Where the mapping is approximate
//!
//! - **Backoff**: Gateway API's `backoff` is the *least* wait before a retry;
//!   backstop's full jitter waits a random time *up to* `base · 2^(n-1)`, so a
//!   retry can come sooner than `backoff` (it spreads clients that failed
//!   together instead).
//! - **What is retried**: backstop's safety rules still apply. A listed status
//!   is retried for idempotent methods and requests with an idempotency key, not
//!   for a plain POST or PATCH (a gateway would resend it); 425 Too Early is
//!   always retried; a connection failure is retried as backstop classifies it
//!   (the spec asks for retries on connection errors too).
//! - **Precedence**: the routes are ordered so that backstop's first match gives
//!   Gateway API's precedence for the fields mapped: a route with an exact
//!   hostname first, then an `Exact` path, then the longest prefix (counted
//!   without a trailing `/`), then a match with a method, then by the
//!   `HTTPRoute`'s `namespace/name` (the spec's tie-break for routes of the same
//!   age: `creationTimestamp` is not read), then in file order (documents, rules,
//!   matches).
//!
//! # What is not mapped
//!
//! Each is returned with its path in [`Imported::unmapped`], and refused by
//! [`Imported::strict`]; nothing is dropped silently, and nothing widens a route:
//!
//! - a match with `headers` or `queryParams`, or a `RegularExpression` path, is
//!   **skipped** (its requests fall to the next route that matches them), never
//!   imported without the part that narrows it;
//! - a wildcard hostname (`*.example.com`): the route's matches under it are
//!   skipped the same way (the exact hostnames of the route are imported);
//! - `parentRefs`, `useDefaultGateways`, `backendRefs`, `filters`,
//!   `sessionPersistence`: a gateway's business, not a retry policy's;
//! - a document of another kind (a `Gateway`, a `Service`) in a stream.
//!
//! `metadata` other than `name` and `namespace`, and `status`, are not
//! configuration and are not reported.
//!
//! # Input
//!
//! One `HTTPRoute`, a stream of documents separated by `---`, or a `List` (or an
//! `HTTPRouteList`) with `items`. In a stream of more than one document, paths
//! start with `documents[i]` (the `i`-th non-empty document); in a list, with
//! `items[i]`.
//!
//! A file that Kubernetes would refuse is refused here, with a one-line
//! [`ConfigError`] naming the field and never showing its value: malformed YAML,
//! a wrong type, an unknown field in the parts read (`spec`, a rule, a match, its
//! `path`, `retry`, `timeouts`), an unknown path type or method, a status outside
//! 400 to 599, `attempts` below 1, a duration that is not a Gateway API duration
//! ([GEP-2257]: `"10s"`, `"1m30s"`, `"500ms"`), a `backendRequest` longer than
//! `request`, and a file over [`MAX_FILE`](crate::config::MAX_FILE) (1 MiB, refused
//! before it is parsed).
//!
//! [GEP-1731]: https://gateway-api.sigs.k8s.io/geps/gep-1731/
//! [GEP-1742]: https://gateway-api.sigs.k8s.io/geps/gep-1742/
//! [GEP-2257]: https://gateway-api.sigs.k8s.io/geps/gep-2257/
//!
//! # Examples
//!
//! GEP-1731's and GEP-1742's examples, with a path to match:
//!
//! ```
//! use std::time::Duration;
//! use backstop::config::gateway;
//!
//! let yaml = r#"
//! apiVersion: gateway.networking.k8s.io/v1
//! kind: HTTPRoute
//! metadata:
//!   name: retry-example
//! spec:
//!   parentRefs:
//!   - name: example-gateway
//!   rules:
//!   - matches:
//!     - path:
//!         type: PathPrefix
//!         value: /timeout
//!     timeouts:
//!       request: 10s
//!       backendRequest: 2s
//!     retry:
//!       codes: [500, 502, 503, 504]
//!       attempts: 2
//!       backoff: 100ms
//!     backendRefs:
//!     - name: some-service
//!       port: 8080
//! "#;
//! let imported = gateway::from_yaml(yaml)?;
//! // The gateway's own parts are reported, not dropped.
//! let unmapped: Vec<_> = imported.unmapped().iter().map(|u| u.path()).collect();
//! assert_eq!(unmapped, ["spec.parentRefs", "spec.rules[0].backendRefs"]);
//!
//! let config = imported.lenient();
//! let req = http::Request::get("http://svc.test/timeout/slow").body(()).unwrap();
//! assert_eq!(
//!     config.routes.route_for(&req).and_then(|r| r.name()),
//!     Some("retry-example/rules[0]")
//! );
//! let policy = config.routes.policy_for(&req);
//! assert_eq!(policy.max_attempts(), 3); // the first attempt and 2 retries
//! assert!(policy.is_retryable_status(http::StatusCode::INTERNAL_SERVER_ERROR));
//! assert_eq!(policy.timeout(), Some(Duration::from_secs(10)));
//! assert_eq!(policy.attempt_timeout(), Some(Duration::from_secs(2)));
//!
//! // The stack, built from it.
//! let layer = config.builder().build()?;
//! # let _ = layer;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A header match is not mapped; strict mode refuses it:
//!
//! ```
//! let yaml = r#"
//! apiVersion: gateway.networking.k8s.io/v1
//! kind: HTTPRoute
//! metadata: {name: canary}
//! spec:
//!   rules:
//!   - matches:
//!     - headers:
//!       - {name: env, value: canary}
//!     retry: {attempts: 3}
//! "#;
//! let err = backstop::config::gateway::from_yaml(yaml)?.strict().unwrap_err();
//! assert_eq!(err.path(), "spec.rules[0].matches[0].headers");
//! # Ok::<(), backstop::config::ConfigError>(())
//! ```

use super::{ConfigError, Imported, StackConfig, Unmapped};
use crate::retry::Routes;
use crate::RetryPolicy;

mod node;
mod route;

use node::{join, Fields, Node};
use route::Candidate;

/// Reads `HTTPRoute`s from YAML: one document, a stream of documents, or a
/// `List`; see the [module docs](self) for the mapping.
///
/// The routes are ordered by Gateway API's precedence; the default policy (for a
/// request no rule matches) is [`RetryPolicy::default()`], and the rest of the
/// stack is [`StackConfig::default()`]'s.
///
/// # Errors
///
/// A one-line [`ConfigError`] at the field that is wrong: malformed YAML, a wrong
/// type, an unknown field, a value out of the spec's range, a file over 1 MiB.
/// Fields that are valid but have no meaning in backstop are not errors: they are
/// in [`Imported::unmapped`], and [`Imported::strict`] refuses them.
///
/// # Examples
///
/// ```
/// let yaml = "
/// apiVersion: gateway.networking.k8s.io/v1
/// kind: HTTPRoute
/// metadata: {name: shop}
/// spec:
///   rules:
///   - matches: [{path: {type: Exact, value: /pay}, method: POST}]
///     retry: {attempts: 0}
/// ";
/// let err = backstop::config::gateway::from_yaml(yaml).unwrap_err();
/// assert_eq!(err.to_string(), "spec.rules[0].retry.attempts: must be from 1 to 99 retries");
/// ```
pub fn from_yaml(text: &str) -> Result<Imported<StackConfig>, ConfigError> {
    let documents = node::documents(text)?;
    let mut read = Read::default();
    for (i, document) in documents.iter().enumerate() {
        let path = if documents.len() > 1 {
            format!("documents[{i}]")
        } else {
            String::new()
        };
        read.object(document, &path, Kind::Any)?;
    }
    let Read {
        mut candidates,
        unmapped,
        ..
    } = read;
    candidates.sort_by(|a, b| a.rank.cmp(&b.rank));
    let routes = candidates
        .into_iter()
        .fold(Routes::new(RetryPolicy::default()), |routes, c| {
            routes.route(c.route, c.policy)
        });
    let config = StackConfig {
        routes,
        ..StackConfig::default()
    };
    Ok(Imported::new(config, unmapped))
}

/// Which objects a place in the file may hold.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A document: an `HTTPRoute`, a list, or another kind (not mapped).
    Any,
    /// An item of a `List`: not another list.
    Item,
    /// An item of an `HTTPRouteList`, whose `kind` may be left out.
    Route,
}

/// What the file gave so far.
#[derive(Default)]
struct Read {
    candidates: Vec<Candidate>,
    unmapped: Vec<Unmapped>,
    /// `HTTPRoute`s read, for their order in the file.
    objects: usize,
}

impl Read {
    fn object(&mut self, node: &Node, path: &str, place: Kind) -> Result<(), ConfigError> {
        let mut top = Fields::of(node, path)?;
        let kind = match top.take("kind") {
            Some((kind, at)) => kind.str(&at)?,
            None if place == Kind::Route => "HTTPRoute",
            None => return Err(ConfigError::new(join(path, "kind"), "required")),
        };
        match kind {
            "HTTPRoute" => {
                self.objects += 1;
                route::read(top, self.objects, &mut self.candidates, &mut self.unmapped)
            }
            "List" | "HTTPRouteList" if place == Kind::Any => {
                let items = top.take("items");
                top.rest_ignored();
                let Some((items, at)) = items else {
                    return Ok(());
                };
                let place = if kind == "List" {
                    Kind::Item
                } else {
                    Kind::Route
                };
                for (i, item) in items.seq(&at)?.iter().enumerate() {
                    self.object(item, &format!("{at}[{i}]"), place)?;
                }
                Ok(())
            }
            _ => {
                self.unmapped.push(Unmapped::new(
                    join(path, "kind"),
                    "not an HTTPRoute: only HTTPRoutes are imported",
                ));
                top.rest_ignored();
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests;
