//! Gateway API `HTTPRoute`s as the Gateway API docs and GEPs write them, imported
//! with `config::gateway::from_yaml`; and the built stack over real loopback
//! upstreams, HTTP/1.1 and HTTP/2.

use std::time::Duration;

use backstop::config::gateway::from_yaml;
use backstop::config::StackConfig;
use http::{Method, Request, StatusCode};

/// GEP-1731's example (`spec: ...` filled in with a parent and a path).
const RETRY_EXAMPLE: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: retry-example
spec:
  parentRefs:
  - name: example-gateway
  rules:
  - matches:
    - path:
        type: PathPrefix
        value: /retry
    backendRefs:
    - name: some-service
      port: 8080
    retry:
      codes:
      - 500
      - 502
      - 503
      - 504
      attempts: 2
      backoff: 100ms
"#;

/// `examples/experimental/http-route-timeouts/timeout-example.yaml` (GEP-1742).
const TIMEOUT_EXAMPLE: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: timeout-example
spec:
  parentRefs:
  - name: example-gateway
  rules:
  - matches:
    - path:
        type: PathPrefix
        value: /timeout
    timeouts:
      request: 10s
      backendRequest: 2s
    backendRefs:
    - name: timeout-svc
      port: 8080
"#;

/// `examples/experimental/http-route-rule-name.yaml`.
const RULE_NAME_EXAMPLE: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: example-route
spec:
  parentRefs:
  - name: example-gateway
  rules:
  - name: read-only
    matches:
    - method: GET
    backendRefs:
    - name: backend-mirror-svc
      port: 8080
  - name: write-only
    matches:
    - method: POST
    - method: PATCH
    - method: DELETE
    backendRefs:
    - name: backend-svc
      port: 8080
"#;

/// The HTTP routing guide's `foo-route` and `bar-route`, one stream.
const HTTP_ROUTING_GUIDE: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: foo-route
spec:
  parentRefs:
  - name: example-gateway
  hostnames:
  - "foo.example.com"
  rules:
  - matches:
    - path:
        type: PathPrefix
        value: /login
    backendRefs:
    - name: foo-svc
      port: 8080
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: bar-route
spec:
  parentRefs:
  - name: example-gateway
  hostnames:
  - "bar.example.com"
  rules:
  - matches:
    - headers:
      - type: Exact
        name: env
        value: canary
    backendRefs:
    - name: bar-svc-canary
      port: 8080
  - backendRefs:
    - name: bar-svc
      port: 8080
"#;

fn req(method: Method, uri: &str) -> Request<()> {
    Request::builder().method(method).uri(uri).body(()).unwrap()
}

fn name(config: &StackConfig, method: Method, uri: &str) -> Option<String> {
    config
        .routes
        .route_for(&req(method, uri))
        .and_then(|r| r.name().map(str::to_owned))
}

#[test]
fn gep_1731_retries() {
    let imported = from_yaml(RETRY_EXAMPLE).unwrap();
    let unmapped: Vec<_> = imported.unmapped().iter().map(|u| u.path()).collect();
    assert_eq!(unmapped, ["spec.parentRefs", "spec.rules[0].backendRefs"]);
    let config = imported.lenient();
    let route = config
        .routes
        .route_policy_for(&req(Method::GET, "http://gw.test/retry/x"));
    let policy = route.retry_policy();
    assert_eq!(policy.max_attempts(), 3);
    for code in [500, 502, 503, 504] {
        assert!(policy.is_retryable_status(StatusCode::from_u16(code).unwrap()));
    }
    assert!(!policy.is_retryable_status(StatusCode::TOO_MANY_REQUESTS));
    assert_eq!(policy.backoff().base(), Duration::from_millis(100));
    // Outside the route: the default policy.
    let other = config
        .routes
        .policy_for(&req(Method::GET, "http://gw.test/retryx"));
    assert!(!other.is_retryable_status(StatusCode::INTERNAL_SERVER_ERROR));
}

#[test]
fn gep_1742_timeouts() {
    let config = from_yaml(TIMEOUT_EXAMPLE).unwrap().lenient();
    let policy = config
        .routes
        .policy_for(&req(Method::GET, "http://gw.test/timeout"));
    assert_eq!(policy.timeout(), Some(Duration::from_secs(10)));
    assert_eq!(policy.attempt_timeout(), Some(Duration::from_secs(2)));
    let other = config
        .routes
        .policy_for(&req(Method::GET, "http://gw.test/"));
    assert_eq!((other.timeout(), other.attempt_timeout()), (None, None));
}

#[test]
fn rule_names_and_methods() {
    let config = from_yaml(RULE_NAME_EXAMPLE).unwrap().lenient();
    assert_eq!(
        name(&config, Method::GET, "http://gw.test/any"),
        Some("example-route/rules[0]/read-only".into())
    );
    for method in [Method::POST, Method::PATCH, Method::DELETE] {
        assert_eq!(
            name(&config, method, "http://gw.test/any"),
            Some("example-route/rules[1]/write-only".into())
        );
    }
    assert_eq!(name(&config, Method::PUT, "http://gw.test/any"), None);
}

#[test]
fn the_http_routing_guide() {
    let imported = from_yaml(HTTP_ROUTING_GUIDE).unwrap();
    let unmapped: Vec<_> = imported.unmapped().iter().map(|u| u.path()).collect();
    assert_eq!(
        unmapped,
        [
            "documents[0].spec.parentRefs",
            "documents[0].spec.rules[0].backendRefs",
            "documents[1].spec.parentRefs",
            "documents[1].spec.rules[0].backendRefs",
            "documents[1].spec.rules[0].matches[0].headers",
            "documents[1].spec.rules[1].backendRefs",
        ]
    );
    let strict = from_yaml(HTTP_ROUTING_GUIDE).unwrap().strict().unwrap_err();
    assert_eq!(
        strict.to_string(),
        "documents[0].spec.parentRefs: not mapped: the Gateways a route attaches to: \
         a client stack has none"
    );
    let config = imported.lenient();
    assert_eq!(
        name(&config, Method::GET, "http://foo.example.com/login/x"),
        Some("foo-route/rules[0]".into())
    );
    assert_eq!(
        name(&config, Method::GET, "http://foo.example.com/other"),
        None
    );
    // The canary match is skipped, not widened: bar's requests take rule 1.
    assert_eq!(
        name(&config, Method::GET, "http://bar.example.com/login"),
        Some("bar-route/rules[1]".into())
    );
}

#[cfg(feature = "test-util")]
mod wire {
    use super::*;
    use crate::support::wire::{empty, transport, within_10s, BOTH};
    use backstop::test_util::Reply;
    use tower::{Layer, ServiceExt};

    /// GEP-1731's example through the built stack: `status` from every attempt.
    async fn calls_for(status: u16) -> Vec<(usize, StatusCode)> {
        let mut seen = Vec::new();
        for protocol in BOTH {
            let up = backstop::test_util::Upstream::builder()
                .protocol(protocol)
                .then(Reply::status(status))
                .start()
                .await
                .unwrap();
            let config = from_yaml(RETRY_EXAMPLE).unwrap().lenient();
            let stack = config.builder().build().unwrap();
            let res = stack
                .layer(transport(protocol))
                .oneshot(Request::get(up.uri("/retry/items")).body(empty()).unwrap())
                .await
                .unwrap();
            seen.push((up.requests().len(), res.status()));
        }
        seen
    }

    #[tokio::test]
    async fn a_listed_status_is_retried_attempts_times() {
        let seen = within_10s(calls_for(503)).await;
        assert_eq!(seen, [(3, StatusCode::SERVICE_UNAVAILABLE); 2]);
    }

    #[tokio::test]
    async fn a_status_not_listed_is_not_retried() {
        // 429 is retried by backstop's defaults, not by this route's codes.
        let seen = within_10s(calls_for(429)).await;
        assert_eq!(seen, [(1, StatusCode::TOO_MANY_REQUESTS); 2]);
    }
}
