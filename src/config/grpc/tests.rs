use std::time::Duration;

use http::{Method, Request};

use super::*;
use crate::grpc::Code;
use crate::hedge::HedgePolicy;
use crate::retry::RetryPolicy;

fn call(path: &str) -> Request<()> {
    Request::post(format!("http://h{path}")).body(()).unwrap()
}

fn retries(policy: &RetryPolicy, code: Code) -> bool {
    retries_code(policy, code)
}

/// A hedge policy's fixed delay, as its `Debug` shows it.
fn delay(hedge: &HedgePolicy) -> String {
    let shown = format!("{hedge:?}");
    let start = shown.find("delay: ").unwrap() + "delay: ".len();
    shown[start..].split(',').next().unwrap().to_owned()
}

fn config(text: &str) -> StackConfig {
    from_json(text).unwrap().strict().unwrap()
}

fn err(text: &str) -> ConfigError {
    from_json(text).unwrap_err()
}

const RETRY: &str = r#""retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.1s",
    "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}"#;

#[test]
fn names_become_routes_most_specific_first() {
    // The service-wide entry comes first in the file; the method's still wins.
    let text = format!(
        r#"{{"methodConfig": [
        {{"name": [{{"service": "shop.Catalog"}}], "timeout": "2s"}},
        {{"name": [{{"service": "shop.Catalog", "method": "Get"}}], {RETRY}}},
        {{"name": [{{}}], "timeout": "9s"}}
    ]}}"#
    );
    let config = config(&text);
    let routes = &config.routes;
    let names: Vec<_> = routes.iter().map(|(r, _)| r.name().unwrap()).collect();
    assert_eq!(names, ["shop.Catalog/Get", "shop.Catalog"]);
    let get = routes.policy_for(&call("/shop.Catalog/Get"));
    assert_eq!(get.max_attempts(), 3);
    assert_eq!(get.timeout(), None);
    assert!(retries(get, Code::Unavailable));
    assert!(!retries(get, Code::Internal));
    let list = routes.policy_for(&call("/shop.Catalog/List"));
    assert_eq!(list.timeout(), Some(Duration::from_secs(2)));
    assert!(!retries(list, Code::Unavailable));
    // A service whose name starts the same is another service.
    let other = routes.policy_for(&call("/shop.CatalogAdmin/Get"));
    assert_eq!(other.timeout(), Some(Duration::from_secs(9)));
    assert!(config.hedge.is_none());
    // Every route chooses its hedging: none.
    assert!(routes.default_policy().hedging().unwrap().is_off());
}

#[test]
fn keys_are_read_as_grpc_reads_them() {
    for (config_key, retry_key, attempts_key) in [
        ("methodConfig", "retryPolicy", "maxAttempts"),
        ("MethodConfig", "RetryPolicy", "MaxAttempts"),
        ("method_config", "retry_policy", "max_attempts"),
        ("METHODCONFIG", "retrypolicy", "MAX-ATTEMPTS"),
    ] {
        let text = format!(
            r#"{{"{config_key}": [{{"Name": [{{"Service": "a.B"}}],
            "{retry_key}": {{"{attempts_key}": 4, "initial_backoff": "0.1s",
            "MaxBackoff": "1s", "backoffMultiplier": 2,
            "retryable_status_codes": ["unavailable", 8]}}}}]}}"#
        );
        let config = config(&text);
        let policy = config.routes.policy_for(&call("/a.B/C"));
        assert_eq!(policy.max_attempts(), 4, "{config_key}");
        assert!(retries(policy, Code::ResourceExhausted));
    }
    let twice = err(r#"{"methodConfig": [], "MethodConfig": []}"#);
    assert_eq!(twice.path(), "");
    assert!(twice.message().contains("twice"), "{twice}");
}

#[test]
fn max_attempts_is_two_to_five() {
    let with = |n: &str| {
        format!(
            r#"{{"methodConfig": [{{"name": [{{}}], "retryPolicy": {{"maxAttempts": {n},
            "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2,
            "retryableStatusCodes": [14]}}}}]}}"#
        )
    };
    let attempts = |n: &str| {
        config(&with(n))
            .routes
            .default_policy()
            .retry_policy()
            .max_attempts()
    };
    assert_eq!(attempts("2"), 2);
    assert_eq!(attempts("5"), 5);
    assert_eq!(attempts("6"), 5);
    assert_eq!(attempts("1e30"), 5);
    for bad in ["1", "0", "-3", "2.5", "\"3\"", "null"] {
        let e = err(&with(bad));
        assert_eq!(
            e.path(),
            "methodConfig[0].retryPolicy.maxAttempts",
            "{bad}: {e}"
        );
    }
}

#[test]
fn backoff_and_multiplier_map_exactly() {
    let with = |initial: &str, max: &str, multiplier: &str| {
        format!(
            r#"{{"methodConfig": [{{"name": [{{}}], "retryPolicy": {{"maxAttempts": 3,
            "initialBackoff": "{initial}", "maxBackoff": "{max}",
            "backoffMultiplier": {multiplier}, "retryableStatusCodes": ["UNAVAILABLE"]}}}}]}}"#
        )
    };
    let backoff_of = |imported: &Imported<StackConfig>| {
        imported
            .clone()
            .lenient()
            .routes
            .default_policy()
            .retry_policy()
            .backoff()
    };
    // gRPC's random(0, min(initial · multiplier^(n−1), max)): full jitter with the
    // multiplier, whatever the multiplier from 1 to 10.
    for (multiplier, ceilings) in [
        ("1.5", [100, 150, 225, 337, 506]),
        ("2", [100, 200, 400, 800, 1000]),
        ("1", [100, 100, 100, 100, 100]),
        ("10", [100, 1000, 1000, 1000, 1000]),
    ] {
        let imported = from_json(&with("0.1s", "1s", multiplier)).unwrap();
        assert!(imported.unmapped().is_empty(), "{multiplier}");
        let backoff = backoff_of(&imported);
        assert_eq!(backoff.jitter(), crate::policy::Jitter::Full);
        assert_eq!(backoff.base(), Duration::from_millis(100));
        assert_eq!(backoff.max(), Duration::from_secs(1));
        let got: Vec<_> = (1..=5).map(|n| backoff.ceiling(n).as_millis()).collect();
        assert_eq!(got, ceilings, "{multiplier}");
    }
    // Outside backstop's range: read as the nearer bound, and reported.
    for (multiplier, read) in [("0.5", 1.0), ("12", 10.0)] {
        let imported = from_json(&with("0.1s", "1s", multiplier)).unwrap();
        assert_eq!(imported.unmapped().len(), 1);
        assert_eq!(
            imported.unmapped()[0].path(),
            "methodConfig[0].retryPolicy.backoffMultiplier"
        );
        assert_eq!(backoff_of(&imported).multiplier(), read);
    }
    // With the first wait at the cap already, every multiplier is exact.
    assert!(from_json(&with(".01s", ".01s", "0.5"))
        .unwrap()
        .unmapped()
        .is_empty());
    // An initial backoff over the cap waits the cap, as in gRPC.
    let capped = config(&with("5s", "1s", "2"));
    assert_eq!(
        capped
            .routes
            .default_policy()
            .retry_policy()
            .backoff()
            .base(),
        Duration::from_secs(1)
    );
    for (args, field) in [
        (("0s", "1s", "2"), "initialBackoff"),
        (("0.1s", "0s", "2"), "maxBackoff"),
        (("0.1s", "1s", "0"), "backoffMultiplier"),
        (("0.1s", "1s", "-2"), "backoffMultiplier"),
        (("100ms", "1s", "2"), "initialBackoff"),
        (("-1s", "1s", "2"), "initialBackoff"),
        (("0.1s", "2d", "2"), "maxBackoff"),
        (("0.1s", "1.0000000001s", "2"), "maxBackoff"),
        (("0.1s", "1000000s", "2"), "retryPolicy"),
    ] {
        let e = err(&with(args.0, args.1, args.2));
        assert!(e.path().ends_with(field), "{args:?}: {e}");
    }
}

#[test]
fn hedging_maps_onto_the_route_and_the_stack() {
    let text = r#"{"methodConfig": [
        {"name": [{"service": "kv.Store", "method": "Get"}],
         "hedgingPolicy": {"maxAttempts": 9, "hedgingDelay": "0.05s",
                           "nonFatalStatusCodes": ["UNAVAILABLE", "INTERNAL"]},
         "timeout": "1s"},
        {"name": [{"service": "kv.Store", "method": "Put"}], "hedgingPolicy": {"maxAttempts": 2}}
    ]}"#;
    let config = config(text);
    let get = config.routes.route_policy_for(&call("/kv.Store/Get"));
    let hedge = get.hedging().unwrap().policy().expect("hedged");
    assert_eq!(hedge.max_extra(), 4);
    assert_eq!(delay(hedge), "50ms");
    assert!(hedge.hedges(&Method::POST, &"http://h/kv.Store/Get".parse().unwrap()));
    // When every copy sent has failed with a non-fatal code, the next goes at once.
    let retry = get.retry_policy();
    assert!(retries(retry, Code::Unavailable) && !retries(retry, Code::Aborted));
    assert_eq!(
        (retry.max_attempts(), retry.backoff().max()),
        (5, Duration::ZERO)
    );
    assert_eq!(retry.timeout(), Some(Duration::from_secs(1)));
    let put = config.routes.route_policy_for(&call("/kv.Store/Put"));
    let hedge = put.hedging().unwrap().policy().expect("hedged");
    assert_eq!((hedge.max_extra(), delay(hedge).as_str()), (1, "0ns"));
    // The stack hedges; calls no route covers do not.
    assert_eq!(config.hedge.as_ref().map(HedgePolicy::max_extra), Some(4));
    assert!(config.routes.default_policy().hedging().unwrap().is_off());
    let hedge = config.hedge.clone().unwrap();
    assert!(config.builder().hedge(hedge).build().is_ok());

    let both = format!(
        r#"{{"methodConfig": [{{"name": [{{}}], {RETRY}, "hedgingPolicy": {{"maxAttempts": 2}}}}]}}"#
    );
    assert_eq!(err(&both).path(), "methodConfig[0].hedgingPolicy");
}

#[test]
fn retry_throttling_becomes_the_budget() {
    let config = config(r#"{"retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}}"#);
    let budget = config.budget.unwrap();
    assert_eq!(budget.ratio(), 0.1);
    assert_eq!(budget.floor(), 5.0);
    assert_eq!(budget.window(), Duration::from_secs(10));
    // Without it, backstop's default budget stays.
    assert!(super::super::StackConfig::default().budget.is_some());
    assert!(self::config("{}").budget.is_some());
    for (text, path) in [
        (
            r#"{"maxTokens": 0, "tokenRatio": 0.1}"#,
            "retryThrottling.maxTokens",
        ),
        (
            r#"{"maxTokens": 1001, "tokenRatio": 0.1}"#,
            "retryThrottling.maxTokens",
        ),
        (
            r#"{"maxTokens": 10, "tokenRatio": 0}"#,
            "retryThrottling.tokenRatio",
        ),
        (
            r#"{"maxTokens": 10, "tokenRatio": 5000}"#,
            "retryThrottling.tokenRatio",
        ),
        (r#"{"maxTokens": 10}"#, "retryThrottling.tokenRatio"),
        (
            r#"{"maxTokens": "10", "tokenRatio": 1}"#,
            "retryThrottling.maxTokens",
        ),
    ] {
        let e = err(&format!(r#"{{"retryThrottling": {text}}}"#));
        assert_eq!(e.path(), path, "{text}: {e}");
    }
}

#[test]
fn no_default_entry_sends_again_only_what_was_never_processed() {
    let config = config("{}");
    let default = config.routes.default_policy();
    assert_eq!(default.retry_policy().max_attempts(), 2);
    assert!(!retries(default.retry_policy(), Code::Unavailable));
    assert!(default.hedging().unwrap().is_off());
    assert!(config.builder().build().is_ok());
}

#[test]
fn fields_without_a_setting_are_reported_by_path() {
    let text = format!(
        r#"{{"loadBalancingConfig": [{{"round_robin": {{}}}}], "healthCheckConfig": {{}},
        "methodConfig": [{{"name": [{{"service": "a.B", "extra": 1}}], "waitForReady": true,
        "maxRequestMessageBytes": 1024, "max_response_message_bytes": 2048, {RETRY}}},
        {{"timeout": "1s"}}],
        "surprise": 1}}"#
    );
    let imported = from_json(&text).unwrap();
    let paths: Vec<_> = imported.unmapped().iter().map(Unmapped::path).collect();
    assert_eq!(
        paths,
        [
            "methodConfig[0].name[0].extra",
            "methodConfig[0].maxRequestMessageBytes",
            "methodConfig[0].max_response_message_bytes",
            "methodConfig[0].waitForReady",
            "methodConfig[1]",
            "healthCheckConfig",
            "loadBalancingConfig",
            "surprise",
        ]
    );
    assert!(imported.unmapped()[4].reason().contains("no name"));
    assert_eq!(imported.unmapped()[7].reason(), "unknown field");
    let e = imported.strict().unwrap_err();
    assert_eq!(e.path(), "methodConfig[0].name[0].extra");
}

#[test]
fn bad_input_is_one_line_naming_the_path() {
    let huge = format!("{{\"x\": \"{}\"}}", "a".repeat(crate::config::MAX_FILE));
    let deep = "[".repeat(10_000);
    let cases: Vec<(String, &str)> = vec![
        ("".into(), ""),
        ("{".into(), ""),
        ("{\"methodConfig\": [}".into(), ""),
        (huge, ""),
        (deep, ""),
        ("[]".into(), ""),
        (r#"{"methodConfig": {}}"#.into(), "methodConfig"),
        (r#"{"methodConfig": [3]}"#.into(), "methodConfig[0]"),
        (r#"{"methodConfig": [{"name": {}}]}"#.into(), "methodConfig[0].name"),
        (
            r#"{"methodConfig": [{"name": [{"method": "Get"}]}]}"#.into(),
            "methodConfig[0].name[0]",
        ),
        (
            r#"{"methodConfig": [{"name": [{"service": "a/B"}]}]}"#.into(),
            "methodConfig[0].name[0].service",
        ),
        (
            r#"{"methodConfig": [{"name": [{"service": 7}]}]}"#.into(),
            "methodConfig[0].name[0].service",
        ),
        (
            r#"{"methodConfig": [{"name": [{"service": "a.B"}]}, {"name": [{"service": "a.B", "method": ""}]}]}"#.into(),
            "methodConfig[1].name[0]",
        ),
        (
            r#"{"methodConfig": [{"name": [{}, {"service": ""}]}]}"#.into(),
            "methodConfig[0].name[1]",
        ),
        (
            r#"{"methodConfig": [{"name": [{}], "timeout": "0s"}]}"#.into(),
            "methodConfig[0].timeout",
        ),
        (
            r#"{"methodConfig": [{"name": [{}], "timeout": 1}]}"#.into(),
            "methodConfig[0].timeout",
        ),
        (
            r#"{"methodConfig": [{"name": [{}], "retryPolicy": {"maxAttempts": 2, "initialBackoff": "1s", "maxBackoff": "1s", "backoffMultiplier": 2}}]}"#.into(),
            "methodConfig[0].retryPolicy.retryableStatusCodes",
        ),
        (
            r#"{"methodConfig": [{"name": [{}], "retryPolicy": {"maxAttempts": 2, "initialBackoff": "1s", "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": ["SLOW"]}}]}"#.into(),
            "methodConfig[0].retryPolicy.retryableStatusCodes[0]",
        ),
        (
            r#"{"methodConfig": [{"name": [{}], "retryPolicy": {"maxAttempts": 2, "initialBackoff": "1s", "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": [17]}}]}"#.into(),
            "methodConfig[0].retryPolicy.retryableStatusCodes[0]",
        ),
        (
            r#"{"methodConfig": [{"name": [{}], "retryPolicy": {"maxAttempts": 2, "initialBackoff": "1s", "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": ["OK"]}}]}"#.into(),
            "methodConfig[0].retryPolicy.retryableStatusCodes",
        ),
        (
            r#"{"methodConfig": [{"name": [{}], "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "x"}}]}"#.into(),
            "methodConfig[0].hedgingPolicy.hedgingDelay",
        ),
        (
            "{\"methodConfig\": [{\"name\": [{}], \"bad\\nkey\": 1, \"retryPolicy\": 3}]}".into(),
            "methodConfig[0].retryPolicy",
        ),
    ];
    for (text, path) in cases {
        let shown: String = text.chars().take(80).collect();
        let e = err(&text);
        assert_eq!(e.path(), path, "{shown}: {e}");
        assert!(!e.to_string().contains('\n'), "{shown}: {e}");
    }
    // A key is shown in one line, cut short.
    let imported = from_json("{\"a\\nb\": 1}").unwrap();
    assert_eq!(imported.unmapped()[0].path(), "a?b");
    let long = format!("{{\"{}\": 1}}", "k".repeat(500));
    assert_eq!(from_json(&long).unwrap().unmapped()[0].path().len(), 64);
    // Nothing of a value is repeated.
    let e = err(r#"{"methodConfig": [{"name": [{}], "timeout": "secret-value"}]}"#);
    assert!(!e.to_string().contains("secret"), "{e}");
}
