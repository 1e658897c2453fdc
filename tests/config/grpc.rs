//! gRPC service configs, written as gRPC's own documentation and examples write
//! them, read by `backstop::config::grpc`; and one through the built stack against
//! a real HTTP/2 server answering trailers-only responses.

use std::time::Duration;

use backstop::config::grpc::from_json;
use backstop::config::StackConfig;
use backstop::grpc::Code;
use backstop::policy::Rules;
use http::Request;

fn call(path: &str) -> Request<()> {
    Request::post(format!("http://greeter.test{path}"))
        .body(())
        .unwrap()
}

fn retries(rules: &(impl AsRef<Rules> + ?Sized), code: Code) -> bool {
    backstop::config::grpc::retries_code(rules, code)
}

/// A retry policy for the echo service, as grpc-go's retry example writes it:
/// capitalised keys, `waitForReady`, and a multiplier of 1 with the first wait at
/// the cap already.
const GRPC_GO_RETRY: &str = r#"{
    "methodConfig": [{
        "name": [{"service": "grpc.examples.echo.Echo"}],
        "waitForReady": true,
        "retryPolicy": {
            "MaxAttempts": 4,
            "InitialBackoff": ".01s",
            "MaxBackoff": ".01s",
            "BackoffMultiplier": 1.0,
            "RetryableStatusCodes": [ "UNAVAILABLE" ]
        }
    }]
}"#;

#[test]
fn grpc_go_retry_example() {
    let imported = from_json(GRPC_GO_RETRY).unwrap();
    let unmapped: Vec<_> = imported.unmapped().iter().map(|u| u.path()).collect();
    assert_eq!(unmapped, ["methodConfig[0].waitForReady"]);
    let config = imported.lenient();
    let echo = config
        .routes
        .route_policy_for(&call("/grpc.examples.echo.Echo/UnaryEcho"));
    let retry = echo.retry_policy();
    assert_eq!(retry.max_attempts(), 4);
    assert_eq!(retry.backoff().base(), Duration::from_millis(10));
    assert_eq!(retry.backoff().max(), Duration::from_millis(10));
    assert!(retries(retry, Code::Unavailable));
    assert!(!retries(retry, Code::DeadlineExceeded));
    assert_eq!(
        config
            .routes
            .route_for(&call("/grpc.examples.echo.Echo/UnaryEcho"))
            .and_then(|r| r.name()),
        Some("grpc.examples.echo.Echo")
    );
    // Another service gets the default: no status code retried.
    let other = config
        .routes
        .policy_for(&call("/helloworld.Greeter/SayHello"));
    assert!(!retries(other.as_ref(), Code::Unavailable));
}

/// gRPC's retry design (A6) as its examples write it: a method, a service-wide
/// entry with hedging, a default, and throttling.
const A6_STYLE: &str = r#"{
  "loadBalancingPolicy": "round_robin",
  "methodConfig": [
    {
      "name": [ { "service": "helloworld.Greeter" } ],
      "hedgingPolicy": {
        "maxAttempts": 3,
        "hedgingDelay": "0.5s",
        "nonFatalStatusCodes": [ "UNAVAILABLE", "INTERNAL", "ABORTED" ]
      }
    },
    {
      "name": [ { "service": "helloworld.Greeter", "method": "SayHello" } ],
      "timeout": "10s",
      "retryPolicy": {
        "maxAttempts": 5,
        "initialBackoff": "0.5s",
        "maxBackoff": "30s",
        "backoffMultiplier": 2,
        "retryableStatusCodes": [ "UNAVAILABLE", "RESOURCE_EXHAUSTED" ]
      }
    },
    {
      "name": [ {} ],
      "timeout": "1.000340012s"
    }
  ],
  "retryThrottling": { "maxTokens": 10, "tokenRatio": 0.1 }
}"#;

#[test]
fn a6_style_config_picks_the_right_policy_per_method() {
    let imported = from_json(A6_STYLE).unwrap();
    assert_eq!(imported.unmapped()[0].path(), "loadBalancingPolicy");
    assert_eq!(imported.unmapped().len(), 1);
    let config: StackConfig = imported.lenient();
    let routes = &config.routes;

    let hello = routes.route_policy_for(&call("/helloworld.Greeter/SayHello"));
    let retry = hello.retry_policy();
    assert_eq!(retry.max_attempts(), 5);
    assert_eq!(retry.backoff().base(), Duration::from_millis(500));
    assert_eq!(retry.backoff().max(), Duration::from_secs(30));
    assert_eq!(retry.timeout(), Some(Duration::from_secs(10)));
    assert!(retries(retry, Code::ResourceExhausted));
    assert!(!retries(retry, Code::Internal));
    assert!(hello.hedging().unwrap().is_off());

    let other = routes.route_policy_for(&call("/helloworld.Greeter/SayGoodbye"));
    let hedge = other.hedging().unwrap().policy().expect("hedged");
    assert_eq!(hedge.max_extra(), 2);
    assert!(retries(hedge.rules(), Code::Internal));
    assert!(!retries(hedge.rules(), Code::DeadlineExceeded));
    // Every copy sent failed with a non-fatal code: the next goes at once.
    assert!(retries(other.retry_policy(), Code::Aborted));

    let default = routes.route_policy_for(&call("/other.Service/Call"));
    assert_eq!(
        default.retry_policy().timeout(),
        Some(Duration::new(1, 340_012))
    );

    let budget = config.budget.clone().unwrap();
    assert_eq!(budget.ratio(), 0.1);
    assert_eq!(budget.floor(), 5.0);

    let hedge = config.hedge.clone().expect("a stack that hedges");
    assert!(config.builder().hedge(hedge).build().is_ok());
}

/// grpc-java's retrying example: one method, five attempts.
#[test]
fn grpc_java_retrying_example() {
    let config = from_json(
        r#"{
          "methodConfig": [
            {
              "name": [ { "service": "helloworld.Greeter", "method": "SayHello" } ],
              "retryPolicy": {
                "maxAttempts": 5,
                "initialBackoff": "0.5s",
                "maxBackoff": "30s",
                "backoffMultiplier": 2,
                "retryableStatusCodes": [ "UNAVAILABLE" ]
              }
            }
          ]
        }"#,
    )
    .unwrap()
    .strict()
    .unwrap();
    let route = config
        .routes
        .route_for(&call("/helloworld.Greeter/SayHello"))
        .expect("a route");
    assert_eq!(route.name(), Some("helloworld.Greeter/SayHello"));
    assert_eq!(
        config
            .routes
            .policy_for(&call("/helloworld.Greeter/SayHello"))
            .max_attempts(),
        5
    );
    assert!(config
        .routes
        .route_for(&call("/helloworld.Greeter/SayHelloAgain"))
        .is_none());
}

#[test]
fn a_mis_nested_config_is_refused_not_ignored() {
    // `retryPolicy` one level too high: gRPC would never retry. Here the field is
    // reported, and a strict read refuses the file.
    let text = r#"{
        "methodConfig": [{"name": [{"service": "a.B"}]}],
        "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "1s",
                        "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}
    }"#;
    let err = from_json(text).unwrap().strict().unwrap_err();
    assert_eq!(err.path(), "retryPolicy");
    assert_eq!(err.to_string(), "retryPolicy: not mapped: unknown field");
    // A retry policy gRPC finds illegal (and would drop) is an error.
    let text = r#"{"methodConfig": [{"name": [{"service": "a.B"}],
        "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "1s",
                        "backoffMultiplier": 2, "retryableStatusCodes": []}}]}"#;
    let err = from_json(text).unwrap_err();
    assert_eq!(
        err.path(),
        "methodConfig[0].retryPolicy.retryableStatusCodes"
    );
}

#[cfg(feature = "test-util")]
mod wire {
    use super::*;
    use crate::support::wire::{empty, transport, upstream, within_10s};
    use backstop::test_util::{Protocol, Recorded, Reply, Step};
    use http::{HeaderMap, Method};
    use tower::{Layer, Service, ServiceExt};

    /// A trailers-only gRPC response with `code`.
    fn trailers_only(code: u32) -> Step {
        Reply::ok()
            .header("content-type", "application/grpc")
            .header("grpc-status", code.to_string())
            .into()
    }

    /// One call to `path` through the stack built from the service config `text`,
    /// against an HTTP/2 server following `script`: the response's headers, what
    /// the server saw, and how long the call took.
    async fn send(
        text: &str,
        script: Vec<Step>,
        path: &str,
    ) -> (HeaderMap, Vec<Recorded>, Duration) {
        let up = upstream(Protocol::Http2, script).await;
        let config = from_json(text).unwrap().strict().unwrap();
        // Every route chooses its own hedging: the stack's policy is only the
        // layer they need, so a stack of a file that hedges nothing may have any.
        let hedge = config.hedge.clone().unwrap_or_default();
        let layer = config.builder().hedge(hedge).build().unwrap();
        let mut client = layer.layer(transport(Protocol::Http2));
        let req = Request::post(up.uri(path))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(empty())
            .unwrap();
        let started = tokio::time::Instant::now();
        let res = client.ready().await.unwrap().call(req).await.unwrap();
        let took = started.elapsed();
        let seen = up.requests();
        assert!(seen
            .iter()
            .all(|r| r.path == path && r.method == Method::POST));
        (res.headers().clone(), seen, took)
    }

    const RETRIES: &str = r#"{
        "methodConfig": [{
            "name": [{"service": "shop.Catalog"}],
            "retryPolicy": {
                "maxAttempts": 3,
                "initialBackoff": "0.001s",
                "maxBackoff": "0.005s",
                "backoffMultiplier": 2,
                "retryableStatusCodes": ["UNAVAILABLE"]
            }
        }, {
            "name": [{"service": "shop.Orders"}],
            "retryPolicy": {
                "maxAttempts": 3,
                "initialBackoff": "0.001s",
                "maxBackoff": "0.005s",
                "backoffMultiplier": 2,
                "retryableStatusCodes": ["ABORTED"]
            }
        }]
    }"#;

    const HEDGES: &str = r#"{"methodConfig": [{"name": [{"service": "kv.Store"}],
        "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "0.05s",
                          "nonFatalStatusCodes": ["UNAVAILABLE"]}}]}"#;

    /// The same hedging, with a delay no call here lives to reach: which sends go
    /// is decided by the codes alone. (Each attempt a non-fatal code starts is
    /// hedged again, so with `HEDGES` a resend answering later than 50 ms, as on a
    /// loaded machine, is copied too: three sends where the codes give two.)
    const HEDGES_BY_CODE: &str = r#"{"methodConfig": [{"name": [{"service": "kv.Store"}],
        "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "60s",
                          "nonFatalStatusCodes": ["UNAVAILABLE"]}}]}"#;

    #[tokio::test]
    async fn a_listed_unavailable_is_retried() {
        within_10s(async {
            let script = vec![trailers_only(14), trailers_only(0)];
            let (headers, seen, _) = send(RETRIES, script, "/shop.Catalog/Get").await;
            assert_eq!(headers["grpc-status"], "0");
            assert_eq!(seen.len(), 2);
        })
        .await;
    }

    #[tokio::test]
    async fn an_unlisted_unavailable_is_not() {
        within_10s(async {
            let script = vec![trailers_only(14), trailers_only(0)];
            let (headers, seen, _) = send(RETRIES, script, "/shop.Orders/Place").await;
            assert_eq!(headers["grpc-status"], "14");
            assert_eq!(seen.len(), 1);
        })
        .await;
    }

    #[tokio::test]
    async fn a_hedged_method_takes_the_first_answer() {
        within_10s(async {
            // The first copy is slow; the hedge, 50 ms later, answers at once.
            let slow: Step = Reply::ok()
                .header("content-type", "application/grpc")
                .header("grpc-status", "0")
                .header("x-copy", "first")
                .delay(Duration::from_secs(3))
                .into();
            let script = vec![slow, trailers_only(0)];
            let (headers, seen, took) = send(HEDGES, script, "/kv.Store/Get").await;
            assert!(took < Duration::from_secs(2), "{took:?}");
            assert_eq!(headers["grpc-status"], "0");
            assert!(!headers.contains_key("x-copy"));
            assert_eq!(seen.len(), 2);
        })
        .await;
    }

    #[tokio::test]
    async fn a_non_fatal_code_leaves_the_hedge_to_answer_a_fatal_one_ends_the_call() {
        within_10s(async {
            for (first, want, sent) in [(14, "0", 2), (13, "13", 1)] {
                // The next send answers late, as it may on a loaded machine.
                let late: Step = Reply::ok()
                    .header("content-type", "application/grpc")
                    .header("grpc-status", "0")
                    .delay(Duration::from_millis(200))
                    .into();
                let script = vec![trailers_only(first), late];
                let (headers, seen, _) = send(HEDGES_BY_CODE, script, "/kv.Store/Get").await;
                assert_eq!(seen.len(), sent, "first {first}");
                assert_eq!(headers["grpc-status"], want, "first {first}");
            }
        })
        .await;
    }
}
