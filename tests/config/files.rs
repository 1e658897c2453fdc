//! backstop's own format: every policy written and read back to the same
//! settings, a route inheriting what it does not name, and every error one line
//! that names its path.

use std::time::Duration;

use backstop::circuit_breaker::CircuitBreakerPolicy;
use backstop::config::{self, Registry, StackConfig};
use backstop::hedge::HedgePolicy;
use backstop::idempotency_key::IdempotencyKeyLayer;
use backstop::policy::{classify_fn, ErrorKind, Jitter, Observed, Rules, Verdict};
use backstop::retry::{Route, RoutePolicy, Routes};
use backstop::{BudgetPolicy, RetryPolicy};
use http::{Method, Request};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// `value` written in each format and read back: each read gives the same
/// text again, in every format.
fn round_trip<T: Serialize + DeserializeOwned>(value: &T) -> T {
    let json = serde_json::to_string(value).unwrap();
    let from_json: T = serde_json::from_str(&json).unwrap();
    assert_eq!(serde_json::to_string(&from_json).unwrap(), json);

    let toml_text = toml::to_string(&Wrap { v: value }).unwrap();
    let from_toml: Unwrap<T> = toml::from_str(&toml_text).unwrap();
    assert_eq!(
        serde_json::to_string(&from_toml.v).unwrap(),
        json,
        "{toml_text}"
    );

    let yaml = serde_saphyr::to_string(value).unwrap();
    let from_yaml: T = serde_saphyr::from_str(&yaml).unwrap();
    assert_eq!(serde_json::to_string(&from_yaml).unwrap(), json, "{yaml}");
    from_json
}

/// TOML's top level is a table: a value is written under a key.
#[derive(Serialize)]
struct Wrap<'a, T> {
    v: &'a T,
}

#[derive(serde::Deserialize)]
struct Unwrap<T> {
    v: T,
}

fn get(uri: &str) -> Request<()> {
    Request::get(uri).body(()).unwrap()
}

fn req(method: Method, uri: &str) -> Request<()> {
    Request::builder().method(method).uri(uri).body(()).unwrap()
}

#[test]
fn a_retry_policy_reads_back_the_same() {
    let policy = RetryPolicy::builder()
        .max_attempts(5)
        .backoff(Duration::from_millis(50), Duration::from_secs(3))
        .retryable_statuses([429, 500, 502, 503, 504])
        .retryable_errors([ErrorKind::Connect, ErrorKind::Timeout])
        .idempotent_methods([Method::GET, Method::PUT])
        .max_retry_after(Duration::from_secs(20))
        .attempt_timeout(Duration::from_millis(1500))
        .timeout(Duration::from_secs(9))
        .min_attempt_time(Duration::from_millis(20))
        .replay_cap(1024)
        .drain(2048, Duration::from_millis(50))
        .build()
        .unwrap();
    let back = round_trip(&policy);
    assert_eq!(back.max_attempts(), 5);
    assert_eq!(back.backoff().base(), Duration::from_millis(50));
    assert_eq!(back.backoff().max(), Duration::from_secs(3));
    assert!(back.is_retryable_status(http::StatusCode::INTERNAL_SERVER_ERROR));
    assert!(!back.is_retryable_status(http::StatusCode::REQUEST_TIMEOUT));
    assert!(back.is_retryable_error(ErrorKind::Timeout));
    assert!(!back.is_retryable_error(ErrorKind::Dns));
    assert!(back.is_idempotent_method(&Method::PUT));
    assert!(!back.is_idempotent_method(&Method::DELETE));
    assert_eq!(back.max_retry_after(), Duration::from_secs(20));
    assert_eq!(back.attempt_timeout(), Some(Duration::from_millis(1500)));
    assert_eq!(back.timeout(), Some(Duration::from_secs(9)));
    assert_eq!(back.min_attempt_time(), Duration::from_millis(20));
    assert_eq!(back.replay_cap(), 1024);
    assert_eq!(back.drain_limit(), 2048);
    assert_eq!(back.drain_timeout(), Duration::from_millis(50));
    // The defaults too: no timeout stays no timeout.
    let back = round_trip(&RetryPolicy::default());
    assert_eq!(back.timeout(), None);
    assert_eq!(back.attempt_timeout(), None);
    assert_eq!(back.max_attempts(), 3);
}

#[test]
fn every_backoff_shape_reads_back_the_same() {
    let seconds = |base: f64, max: f64| {
        RetryPolicy::builder().backoff(Duration::from_secs_f64(base), Duration::from_secs_f64(max))
    };
    let policies = [
        // AWS's three (base 5 ms, cap 2 s).
        seconds(0.005, 2.0).jitter(Jitter::Full),
        seconds(0.005, 2.0).jitter(Jitter::Equal),
        seconds(0.005, 2.0).jitter(Jitter::Decorrelated),
        // clientwright: 0.1 s, ×2, 10 s, ±20 %.
        seconds(0.1, 10.0)
            .backoff_multiplier(2.0)
            .jitter(Jitter::Proportional(0.2)),
        // ahttp_client: 0.5 s doubling, 4 s at most, no jitter.
        seconds(0.5, 4.0).jitter(Jitter::None),
        seconds(0.1, 1.0).backoff_multiplier(1.5),
    ];
    for b in policies {
        let policy = b.build().unwrap();
        let back = round_trip(&policy);
        assert_eq!(back.backoff(), policy.backoff());
    }
    // Each shape as it is written in a file; a file that names none is full jitter
    // doubling, as before.
    for (written, jitter, multiplier) in [
        (r#"{ base = "5ms", max = "2s" }"#, Jitter::Full, 2.0),
        (
            r#"{ base = "5ms", max = "2s", jitter = "equal" }"#,
            Jitter::Equal,
            2.0,
        ),
        (
            r#"{ base = "5ms", max = "2s", jitter = "decorrelated" }"#,
            Jitter::Decorrelated,
            2.0,
        ),
        (
            r#"{ base = "100ms", max = "10s", multiplier = 2.0, jitter = { proportional = 0.2 } }"#,
            Jitter::Proportional(0.2),
            2.0,
        ),
        (
            r#"{ base = "500ms", max = "4s", jitter = "none" }"#,
            Jitter::None,
            2.0,
        ),
        (
            r#"{ base = "100ms", max = "4s", jitter = "full", multiplier = 3 }"#,
            Jitter::Full,
            3.0,
        ),
    ] {
        let file = format!("[retry]\nbackoff = {written}");
        let config = config::from_toml(&file).expect(&file);
        let backoff = config.routes.policy_for(&get("http://h/")).backoff();
        assert_eq!(
            (backoff.jitter(), backoff.multiplier()),
            (jitter, multiplier),
            "{file}"
        );
    }
    let yaml = "retry:\n  backoff: {base: 5ms, max: 2s, jitter: {proportional: 0.5}}\n";
    let config = config::from_yaml(yaml).unwrap();
    let backoff = config.routes.policy_for(&get("http://h/")).backoff();
    assert_eq!(backoff.jitter(), Jitter::Proportional(0.5));
    // Bad shapes are the builder's errors, at their path.
    for (written, says) in [
        (
            r#"{ base = "5ms", max = "2s", jitter = "wobbly" }"#,
            "unknown variant",
        ),
        (
            r#"{ base = "5ms", max = "2s", jitter = { proportional = 2.0 } }"#,
            "jitter",
        ),
        (
            r#"{ base = "5ms", max = "2s", multiplier = 0.5 }"#,
            "backoff_multiplier",
        ),
        (
            r#"{ base = "5ms", max = "2s", jitter = "decorrelated", multiplier = 3 }"#,
            "backoff_multiplier",
        ),
    ] {
        let file = format!("[retry]\nbackoff = {written}");
        let err = config::from_toml(&file).expect_err(&file);
        assert!(err.message().contains(says), "{file}: {err}");
        assert_eq!(err.to_string().lines().count(), 1, "{err}");
    }
}

#[test]
fn hedge_budget_breaker_and_key_read_back_the_same() {
    let fixed = HedgePolicy::builder()
        .after(Duration::from_millis(40))
        .max_extra(2)
        .methods([Method::GET])
        .build()
        .unwrap();
    let back = round_trip(&fixed);
    assert_eq!(back.max_extra(), 2);
    assert!(back.hedges_method(&Method::GET));
    assert!(!back.hedges_method(&Method::HEAD));
    let adaptive = HedgePolicy::builder()
        .adaptive(Duration::from_millis(80))
        .percentile(0.99)
        .min_samples(200)
        .window(Duration::from_secs(20))
        .build()
        .unwrap();
    let json = serde_json::to_value(round_trip(&adaptive)).unwrap();
    assert_eq!(json["adaptive"]["percentile"], 0.99);
    assert_eq!(json["adaptive"]["fallback"], "80ms");
    assert_eq!(json["adaptive"]["window"], "20s");

    let budget = BudgetPolicy::builder()
        .ratio(0.1)
        .min_per_second(2.0)
        .window(Duration::from_secs(20))
        .partition(backstop::Partition::global())
        .pause_mode(backstop::budget::PauseMode::FailFast)
        .max_pause(Duration::from_secs(30))
        .build()
        .unwrap();
    let back = round_trip(&budget);
    assert_eq!(back.ratio(), 0.1);
    assert_eq!(back.min_per_second(), 2.0);
    assert_eq!(back.window(), Duration::from_secs(20));
    assert_eq!(back.pause_mode(), backstop::budget::PauseMode::FailFast);
    assert_eq!(back.max_pause(), Duration::from_secs(30));
    assert_eq!(serde_json::to_value(&back).unwrap()["partition"], "global");

    let breaker = CircuitBreakerPolicy::builder()
        .failure_ratio(0.25)
        .min_calls(10)
        .consecutive_failures(3)
        .cooldown(Duration::from_secs(2))
        .max_cooldown(Duration::from_secs(30))
        .jitter(0.1)
        .probes(2)
        .build()
        .unwrap();
    let back = round_trip(&breaker);
    assert_eq!(back.failure_ratio(), 0.25);
    assert_eq!(back.min_calls(), 10);
    assert_eq!(back.consecutive_failures(), 3);
    assert_eq!(back.cooldown(), Duration::from_secs(2));
    assert_eq!(back.max_cooldown(), Duration::from_secs(30));
    assert_eq!(back.probes(), 2);

    let key = IdempotencyKeyLayer::new()
        .header(http::HeaderName::from_static("x-request-key"))
        .methods([Method::POST]);
    let json = serde_json::to_value(round_trip(&key)).unwrap();
    assert_eq!(json["header"], "x-request-key");
    assert_eq!(json["methods"], serde_json::json!(["POST"]));
}

#[test]
fn kinds_codes_routes_and_rules_read_back_the_same() {
    for kind in ErrorKind::ALL {
        assert_eq!(round_trip(&vec![kind]), vec![kind]);
    }
    #[cfg(feature = "grpc")]
    {
        use backstop::grpc::Code;
        assert_eq!(
            round_trip(&vec![Code::Unavailable]),
            vec![Code::Unavailable]
        );
        let read: Vec<Code> =
            serde_json::from_str(r#"["unavailable", 8, "DeadlineExceeded"]"#).unwrap();
        assert_eq!(
            read,
            [
                Code::Unavailable,
                Code::ResourceExhausted,
                Code::DeadlineExceeded
            ]
        );
    }
    let route = Route::path_exact("/pkg.Svc/Get")
        .methods([Method::POST, Method::GET])
        .and_host("API.example.com")
        .named("get");
    assert_eq!(round_trip(&route), route);

    let routes = Routes::new(RetryPolicy::default())
        .route(
            Route::path_prefix("/payments").named("payments"),
            RetryPolicy::none(),
        )
        .route(
            Route::path_prefix("/catalog").named("catalog"),
            RoutePolicy::new(RetryPolicy::builder().max_attempts(4).build().unwrap())
                .hedge(HedgePolicy::after(Duration::from_millis(30)))
                .unwrap(),
        )
        .route(
            Route::path_prefix("/orders"),
            RoutePolicy::new(RetryPolicy::default()).no_hedging(),
        );
    let back = round_trip(&routes);
    let catalog = back.route_policy_for(&get("http://h/catalog/1"));
    assert_eq!(catalog.retry_policy().max_attempts(), 4);
    assert!(catalog.hedging().unwrap().policy().is_some());
    assert!(back
        .route_policy_for(&get("http://h/orders"))
        .hedging()
        .unwrap()
        .is_off());
    assert_eq!(
        back.policy_for(&get("http://h/payments/1")).max_attempts(),
        1
    );
    assert!(back
        .route_policy_for(&get("http://h/other"))
        .hedging()
        .is_none());

    let rules = Rules::builder()
        .retry_on(500)
        .attempt_header(http::HeaderName::from_static("x-attempt"))
        .build()
        .unwrap();
    let back = round_trip(&rules);
    assert!(back.is_retryable_status(http::StatusCode::INTERNAL_SERVER_ERROR));
    assert_eq!(back.attempt_header().map(|h| h.as_str()), Some("x-attempt"));
}

/// A classifier of one's own: retries a 418.
fn teapots() -> Rules {
    Rules::builder()
        .classifier(classify_fn(|outcome: Observed<'_>| match outcome {
            Observed::Response { status, .. } if status.as_u16() == 418 => Verdict::IfIdempotent,
            _ => Verdict::NoOpinion,
        }))
        .build()
        .unwrap()
}

#[test]
fn a_classifier_is_written_by_its_registered_name_and_never_lost() {
    // Unnamed, it cannot be written: an error, not a file without it.
    let policy = RetryPolicy::builder().rules(teapots()).build().unwrap();
    let err = serde_json::to_string(&policy).unwrap_err().to_string();
    assert!(err.contains("classifier"), "{err}");

    // Registered, the file names it, and reading the file through the registry
    // gives the classifier back, with the file's other settings on top.
    let registry = Registry::new().rules("teapots", teapots());
    let named = RetryPolicy::builder()
        .rules(registry.get("teapots").unwrap().clone())
        .retry_on(500)
        .build()
        .unwrap();
    let json = serde_json::to_string(&named).unwrap();
    assert!(json.contains(r#""name":"teapots""#), "{json}");
    let back: RetryPolicy = registry.scope(|| serde_json::from_str(&json)).unwrap();
    assert!(back.rules().has_classifier());
    assert!(back.is_retryable_status(http::StatusCode::INTERNAL_SERVER_ERROR));

    // Outside the registry's scope the name is not known: an error at its path.
    let err = config::from_json(&format!(r#"{{"retry": {json}}}"#)).unwrap_err();
    assert_eq!(err.path(), "retry.rules.name");
    assert!(err.message().contains("registered"), "{err}");
    let with = registry
        .from_json(&format!(r#"{{"retry": {json}}}"#))
        .unwrap();
    assert!(with
        .routes
        .default_policy()
        .retry_policy()
        .rules()
        .has_classifier());

    // A breaker's own failure rule and a key generator are code too.
    let breaker = CircuitBreakerPolicy::builder()
        .failure_if(|_| true)
        .build()
        .unwrap();
    assert!(serde_json::to_string(&breaker).is_err());
    let key = IdempotencyKeyLayer::new().generator(|| http::HeaderValue::from_static("k"));
    assert!(serde_json::to_string(&key).is_err());
}

const GATEWAY: &str = r#"
idempotency_key = true

[retry]
max_attempts = 3
backoff = { base = "100ms", max = "2s" }
timeout = "10s"
rules = { retryable_statuses = [429, "502-504"] }

[hedge]
delay = "50ms"

[budget]
ratio = 0.1

[circuit_breaker]
consecutive_failures = 3
cooldown = "5s"

[[routes]]
name = "payments"
path_prefix = "/payments"
methods = ["POST", "PUT"]
retry = { max_attempts = 1 }

[[routes]]
name = "catalog"
path_prefix = "/catalog"
methods = ["GET", "HEAD"]
retry = { max_attempts = 4 }
hedge = { delay = "30ms" }

[[routes]]
name = "reports"
path = "/reports"
hedge = false
"#;

#[test]
fn a_gateway_table_in_toml_builds_the_stack_it_says() {
    let config = config::from_toml(GATEWAY).unwrap();
    let pay = config
        .routes
        .route_policy_for(&req(Method::PUT, "http://gw/payments/1"));
    assert_eq!(pay.retry_policy().max_attempts(), 1);
    // Inherited from [retry]: what the route did not name.
    assert_eq!(pay.retry_policy().timeout(), Some(Duration::from_secs(10)));
    // A GET to /payments is not the route's method: the default applies.
    assert_eq!(
        config
            .routes
            .policy_for(&get("http://gw/payments/1"))
            .max_attempts(),
        3
    );
    let catalog = config
        .routes
        .route_policy_for(&req(Method::HEAD, "http://gw/catalog/9"));
    assert_eq!(catalog.retry_policy().max_attempts(), 4);
    assert_eq!(
        catalog.retry_policy().backoff().max(),
        Duration::from_secs(2)
    );
    assert!(catalog
        .retry_policy()
        .is_retryable_status(http::StatusCode::TOO_MANY_REQUESTS));
    assert!(catalog.hedging().unwrap().policy().is_some());
    assert!(config
        .routes
        .route_policy_for(&get("http://gw/reports"))
        .hedging()
        .unwrap()
        .is_off());
    assert!(config
        .routes
        .route_for(&get("http://gw/reports/x"))
        .is_none());
    assert_eq!(config.budget.as_ref().unwrap().ratio(), 0.1);
    assert_eq!(
        config
            .circuit_breaker
            .as_ref()
            .unwrap()
            .consecutive_failures(),
        3
    );
    assert!(config.idempotency_key.is_some());
    assert!(config.hedge.is_some());

    // The same settings written and read back.
    let text = config::to_toml(&config).unwrap();
    let again = config::from_toml(&text).unwrap();
    assert_eq!(config::to_toml(&again).unwrap(), text);

    // It builds a hedging stack (its routes hedge).
    let hedge = config.hedge.clone().unwrap();
    let built = config.builder().hedge(hedge).build();
    assert!(built.is_ok());
}

#[test]
fn the_same_file_in_json_and_yaml() {
    let toml_config = config::from_toml(GATEWAY).unwrap();
    let json = serde_json::to_string(&toml_config).unwrap();
    let from_json = config::from_json(&json).unwrap();
    let yaml = serde_saphyr::to_string(&toml_config).unwrap();
    let from_yaml = config::from_yaml(&yaml).unwrap();
    let text = config::to_toml(&toml_config).unwrap();
    assert_eq!(config::to_toml(&from_json).unwrap(), text);
    assert_eq!(config::to_toml(&from_yaml).unwrap(), text);
}

#[test]
fn every_error_is_one_line_naming_its_path() {
    let cases: [(&str, &str, &str); 11] = [
        (
            "[retry]\nbackoff = { base = \"1s\", max = \"2s\", multiplier = 20.0 }",
            "retry.backoff.multiplier",
            "multiplier",
        ),
        (
            "[[routes]]\n[[routes]]\n[[routes]]\nretry = { max_atempts = 2 }",
            "routes[2].retry.max_atempts",
            "unknown field",
        ),
        (
            "[retry]\nmax_attempts = 0",
            "retry.max_attempts",
            "between 1 and 100",
        ),
        (
            "[retry]\nmax_attempts = \"three\"",
            "retry.max_attempts",
            "invalid type",
        ),
        ("[retry]\ntimeout = 5", "retry.timeout", "duration"),
        ("[retry]\ntimeout = \"5 minutes\"", "retry.timeout", "unit"),
        (
            "[retry]\nrules = { retryable_statuses = [700] }",
            "retry.rules.retryable_statuses[0]",
            "400 to 599",
        ),
        (
            "[retry]\nrules = { retryable_errors = [\"flaky\"] }",
            "retry.rules.retryable_errors[0]",
            "unknown error kind",
        ),
        (
            "[[routes]]\npath = \"/a\"\npath_prefix = \"/b\"",
            "routes[0]",
            "not both",
        ),
        (
            "[[routes]]\nretry = { max_attempts = 1 }\nhedge = { delay = \"1ms\" }",
            "routes[0].hedge",
            "one attempt",
        ),
        ("[budget]\nratio = -1.0", "budget.ratio", "ratio"),
    ];
    for (file, path, says) in cases {
        let err = config::from_toml(file).expect_err(file);
        assert_eq!(err.path(), path, "{file}: {err}");
        assert!(err.message().contains(says), "{file}: {err}");
        assert_eq!(err.to_string().lines().count(), 1, "{err}");
    }
    // A malformed file, a wrong type at the top, a huge file.
    for bad in ["[retry", "retry = 3", "= ="] {
        let err = config::from_toml(bad).expect_err(bad);
        assert_eq!(err.to_string().lines().count(), 1, "{err}");
    }
    for bad in ["{", "[]", r#"{"retry": {"max_attempts": 2}} trailing"#] {
        let err = config::from_json(bad).unwrap_err();
        assert_eq!(err.to_string().lines().count(), 1, "{err}");
    }
    for bad in ["retry: [", "retry:\n  max_attempts: -1\n", "- a\n- b\n"] {
        let err = config::from_yaml(bad).unwrap_err();
        assert_eq!(err.to_string().lines().count(), 1, "{err}");
    }
    let huge = format!("# {}\n", "x".repeat(config::MAX_FILE));
    assert!(config::from_toml(&huge)
        .unwrap_err()
        .message()
        .contains("bytes"));
    // No value from the file is repeated in an error.
    let err = config::from_toml("[retry]\ntimeout = \"s3cret\"").unwrap_err();
    assert!(!err.to_string().contains("s3cret"), "{err}");
}

#[test]
fn an_empty_file_is_the_default_stack() {
    let config = config::from_toml("").unwrap();
    let default = StackConfig::default();
    assert_eq!(
        config::to_toml(&config).unwrap(),
        config::to_toml(&default).unwrap()
    );
    assert!(config.builder().build().is_ok());
    let off = config::from_toml("budget = false").unwrap();
    assert!(off.budget.is_none());
}
