use std::time::Duration;

use http::{Method, Request, StatusCode};

use super::*;

const HEAD: &str = "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n";

/// An `HTTPRoute` named `r` with `spec`.
fn route(spec: &str) -> String {
    if spec.is_empty() {
        format!("{HEAD}metadata:\n  name: r\nspec: {{}}\n")
    } else {
        format!("{HEAD}metadata:\n  name: r\nspec:\n{spec}")
    }
}

fn import(yaml: &str) -> (StackConfig, Vec<String>) {
    let (config, unmapped) = from_yaml(yaml).unwrap().into_parts();
    (
        config,
        unmapped.iter().map(|u| u.path().to_owned()).collect(),
    )
}

fn err(yaml: &str) -> String {
    let err = from_yaml(yaml).unwrap_err().to_string();
    assert!(!err.contains('\n'), "{err}");
    err
}

fn name_for(config: &StackConfig, method: Method, uri: &str) -> Option<String> {
    let req = Request::builder().method(method).uri(uri).body(()).unwrap();
    config
        .routes
        .route_for(&req)
        .and_then(|r| r.name().map(str::to_owned))
}

#[test]
fn a_rule_without_matches_covers_every_request_and_without_retry_has_the_defaults() {
    let (config, unmapped) = import(&route("  rules:\n  - timeouts: {request: 3s}\n"));
    assert!(unmapped.is_empty());
    let req = Request::post("http://a.test/x/y").body(()).unwrap();
    let policy = config.routes.policy_for(&req);
    assert_eq!(policy.max_attempts(), RetryPolicy::default().max_attempts());
    assert_eq!(policy.timeout(), Some(Duration::from_secs(3)));
    assert_eq!(policy.attempt_timeout(), None);
    assert_eq!(
        name_for(&config, Method::GET, "/"),
        Some("r/rules[0]".into())
    );
}

#[test]
fn retry_maps_codes_attempts_and_backoff() {
    let (config, _) = import(&route(
        "  rules:\n  - name: api\n    retry: {codes: [500, 418], attempts: 4, backoff: 7s}\n",
    ));
    let req = Request::get("http://a.test/").body(()).unwrap();
    let policy = config.routes.policy_for(&req);
    assert_eq!(policy.max_attempts(), 5);
    assert!(policy.is_retryable_status(StatusCode::INTERNAL_SERVER_ERROR));
    assert!(policy.is_retryable_status(StatusCode::IM_A_TEAPOT));
    assert!(!policy.is_retryable_status(StatusCode::SERVICE_UNAVAILABLE));
    assert_eq!(policy.backoff().base(), Duration::from_secs(7));
    assert_eq!(policy.backoff().max(), Duration::from_secs(7));
    assert_eq!(
        name_for(&config, Method::GET, "/"),
        Some("r/rules[0]/api".into())
    );
    // A short backoff keeps backstop's default max.
    let (config, _) = import(&route("  rules:\n  - retry: {backoff: 10ms}\n"));
    let backoff = config.routes.policy_for(&req).backoff();
    assert_eq!(backoff.base(), Duration::from_millis(10));
    assert_eq!(backoff.max(), RetryPolicy::default().backoff().max());
}

#[test]
fn zero_timeouts_mean_none() {
    let (config, _) = import(&route(
        "  rules:\n  - timeouts: {request: 0s, backendRequest: 0s}\n",
    ));
    let req = Request::get("http://a.test/").body(()).unwrap();
    let policy = config.routes.policy_for(&req);
    assert_eq!((policy.timeout(), policy.attempt_timeout()), (None, None));
}

#[test]
fn routes_follow_gateway_api_precedence() {
    let yaml = route(
        "  rules:
  - name: any
  - name: short
    matches: [{path: {value: /api}}]
  - name: long
    matches: [{path: {type: PathPrefix, value: /api/v1/}}]
  - name: get
    matches: [{path: {value: /api}, method: GET}]
  - name: exact
    matches: [{path: {type: Exact, value: /api/v1/login}}]
",
    );
    let (config, _) = import(&yaml);
    let name = |m: Method, uri: &str| name_for(&config, m, uri).unwrap();
    assert_eq!(name(Method::GET, "/api/v1/login"), "r/rules[4]/exact");
    assert_eq!(name(Method::GET, "/api/v1/login/x"), "r/rules[2]/long");
    assert_eq!(name(Method::GET, "/api/v1"), "r/rules[2]/long");
    assert_eq!(name(Method::GET, "/api/v2"), "r/rules[3]/get");
    assert_eq!(name(Method::POST, "/api/v2"), "r/rules[1]/short");
    assert_eq!(name(Method::POST, "/apix"), "r/rules[0]/any");
}

#[test]
fn hostnames_make_a_route_each_and_come_first() {
    let yaml = format!(
        "{}---\n{HEAD}metadata: {{name: all}}\nspec:\n  rules:\n  - matches: [{{path: {{value: /a/b}}}}]\n",
        route("  hostnames: [Foo.example.com, bar.example.com, '*.example.com']\n  rules:\n  - matches: [{path: {value: /a}}]\n"),
    );
    let (config, unmapped) = import(&yaml);
    assert_eq!(unmapped, ["documents[0].spec.hostnames[2]"]);
    assert_eq!(config.routes.iter().len(), 3);
    let hosts: Vec<_> = config.routes.iter().map(|(r, _)| r.host_name()).collect();
    assert_eq!(
        hosts,
        [Some("foo.example.com"), Some("bar.example.com"), None]
    );
    // The host's route wins over a longer prefix without a host.
    assert_eq!(
        name_for(&config, Method::GET, "http://foo.example.com/a/b"),
        Some("r/rules[0]".into())
    );
    assert_eq!(
        name_for(&config, Method::GET, "http://baz.example.com/a/b"),
        Some("all/rules[0]".into())
    );
    // Only wildcards: no route at all, each reported.
    let (config, unmapped) = import(&route("  hostnames: ['*.a.test']\n  rules: [{}]\n"));
    assert_eq!(config.routes.iter().len(), 0);
    assert_eq!(unmapped, ["spec.hostnames[0]"]);
}

#[test]
fn unmapped_parts_are_reported_and_their_matches_skipped() {
    let yaml = route(
        "  parentRefs: [{name: gw}]
  rules:
  - matches:
    - path: {value: /a}
      headers: [{name: env, value: canary}]
    - path: {type: RegularExpression, value: '/b.*'}
    - queryParams: [{name: q, value: '1'}]
    - path: {value: /d}
      headers: []
    filters: [{type: RequestHeaderModifier}]
    backendRefs: [{name: svc, port: 80}]
    sessionPersistence: {sessionName: s}
  - backendRefs: []
",
    );
    let (config, unmapped) = import(&yaml);
    assert_eq!(
        unmapped,
        [
            "spec.parentRefs",
            "spec.rules[0].backendRefs",
            "spec.rules[0].filters",
            "spec.rules[0].sessionPersistence",
            "spec.rules[0].matches[0].headers",
            "spec.rules[0].matches[1].path",
            "spec.rules[0].matches[2].queryParams",
        ]
    );
    // Only /d (an empty header list narrows nothing) and rule 1's catch-all.
    assert_eq!(config.routes.iter().len(), 2);
    assert_eq!(
        name_for(&config, Method::GET, "/a"),
        Some("r/rules[1]".into())
    );
    assert_eq!(
        name_for(&config, Method::GET, "/d"),
        Some("r/rules[0]".into())
    );
    let strict = from_yaml(&yaml).unwrap().strict().unwrap_err();
    assert_eq!(strict.path(), "spec.parentRefs");
}

#[test]
fn lists_and_streams_of_documents() {
    let list = format!(
        "apiVersion: v1\nkind: List\nitems:\n- {}\n- {{kind: Service, apiVersion: v1, metadata: {{name: s}}}}\n",
        route("  rules: [{}]\n").replace('\n', "\n  ")
    );
    let (config, unmapped) = import(&list);
    assert_eq!(config.routes.iter().len(), 1);
    assert_eq!(unmapped, ["items[1].kind"]);
    let typed = "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRouteList\nitems:\n- metadata: {name: a}\n  spec: {rules: [{}]}\n";
    assert_eq!(import(typed).0.routes.iter().len(), 1);
    let stream = format!("---\n{}---\n---\n{}", route("  rules: [{}]\n"), route(""));
    assert_eq!(import(&stream).0.routes.iter().len(), 1);
    assert_eq!(import("").0.routes.iter().len(), 0);
}

#[test]
fn bad_input_is_one_line_at_its_path() {
    let cases = [
        (route("  rules:\n  - retry: {attempts: -1}\n"), "spec.rules[0].retry.attempts: must be from 1 to 99 retries"),
        (route("  rules:\n  - retry: {attempts: 100}\n"), "spec.rules[0].retry.attempts: must be from 1 to 99 retries"),
        (route("  rules:\n  - retry: {attempts: '2'}\n"), "spec.rules[0].retry.attempts: expected an integer, found a string"),
        (route("  rules:\n  - retry: {codes: [503, 600]}\n"), "spec.rules[0].retry.codes[1]: must be a status from 400 to 599"),
        (route("  rules:\n  - retry: {atempts: 2}\n"), "spec.rules[0].retry.atempts: unknown field"),
        (route("  rules:\n  - retires: {}\n"), "spec.rules[0].retires: unknown field"),
        (route("  rules:\n  - timeouts: {request: 1s, backendRequest: 2s}\n"), "spec.rules[0].timeouts.backendRequest: must be no more than `request`"),
        (route("  rules:\n  - timeouts: {request: 48h}\n"), "spec.rules[0].timeouts.request: invalid timeout: must be more than zero and at most one day, got 172800s"),
        (route("  rules:\n  - timeouts: {request: 5ms}\n"), "spec.rules[0].timeouts.request: invalid min_attempt_time: 10ms is longer than the total timeout 5ms"),
        (route("  rules:\n  - matches: [{method: FETCH}]\n"), "spec.rules[0].matches[0].method: must be one of GET, HEAD, POST, PUT, DELETE, CONNECT, OPTIONS, TRACE, PATCH"),
        (route("  rules:\n  - matches: [{path: {type: Prefix, value: /}}]\n"), "spec.rules[0].matches[0].path.type: must be Exact, PathPrefix or RegularExpression"),
        (route("  rules:\n  - matches: [{path: {value: secret}}]\n"), "spec.rules[0].matches[0].path.value: must be an absolute path, starting with `/`"),
        (route("  rules: {}\n"), "spec.rules: expected a list, found a mapping"),
        (route("  hostnames: ['a..b']\n"), "spec.hostnames[0]: must be a hostname (RFC 1123), optionally under a wildcard label `*.`"),
        (route("  extra: 1\n"), "spec.extra: unknown field"),
        (format!("{HEAD}spec: {{}}\n"), "metadata: required"),
        (format!("{HEAD}metadata: {{name: r}}\n"), "spec: required"),
        ("apiVersion: gateway.networking.k8s.io/v1alpha9\nkind: HTTPRoute\nmetadata: {name: r}\nspec: {}\n".into(), "apiVersion: an HTTPRoute is read from gateway.networking.k8s.io/v1 or v1beta1"),
        ("metadata: {name: r}\n".into(), "kind: required"),
        ("- 1\n".into(), "expected a mapping, found a list"),
        (format!("{}---\nkind: [x]\n", route("")), "documents[1].kind: expected a string, found a list"),
    ];
    for (yaml, want) in cases {
        assert_eq!(err(&yaml), want, "{yaml}");
    }
    let malformed = err(&route("  rules: [{retry: {attempts: 2}\n"));
    assert!(malformed.starts_with("not valid YAML (line"), "{malformed}");
    assert!(err("a: 1\na: 2\n").starts_with("not valid YAML"));
}

#[test]
fn errors_never_show_the_files_values() {
    let secret = "s3cr3t";
    for yaml in [
        route(&format!("  rules:\n  - retry: {{backoff: {secret}}}\n")),
        route(&format!("  rules:\n  - matches: [{{method: {secret}}}]\n")),
        route(&format!("  rules:\n  - retry: {{attempts: {secret}}}\n")),
        route(&format!("  rules: [{{retry: \"{secret}\n")),
        format!("{HEAD}metadata: {{name: r}}\nspec: !!binary {secret}\n"),
    ] {
        let e = err(&yaml);
        assert!(!e.contains(secret), "{e}");
    }
}

#[test]
fn the_stack_builds_from_an_import() {
    let (config, _) = import(&route(
        "  rules:\n  - retry: {codes: [503], attempts: 2}\n    timeouts: {request: 10s, backendRequest: 2s}\n",
    ));
    assert!(config.budget.is_some());
    assert!(config.builder().build().is_ok());
}
