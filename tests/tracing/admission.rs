//! The `Backstop` stack traces what the separate layers trace: the same messages,
//! for a call the breaker refuses and for calls a pause holds or refuses.

use crate::support::shape::{BudgetLayer, CircuitBreakerLayer};
use std::time::Duration;

use super::pause::{get, Client};
use crate::support::requests::call_with;
use crate::support::script::{status, status_with, Script};
use crate::support::shape::{Shape, Stack};
use crate::Captured;
use backstop::budget::BudgetPolicy;
use backstop::idempotency_key::IdempotencyKeyLayer;
use backstop::RetryPolicy;
use http::StatusCode;

fn admitting() -> Stack {
    // The 503 opens it (the pause's refusal sent nothing and counts neither way).
    let breaker = super::breaker::opening_after(1);
    let budget = BudgetPolicy::builder()
        .pause_spread(Duration::ZERO)
        .build()
        .unwrap();
    Stack::new(RetryPolicy::none())
        .keys(IdempotencyKeyLayer::new())
        .breaker(&CircuitBreakerLayer::new(breaker))
        .budget(&BudgetLayer::new(budget))
}

/// What was traced while `run` ran in `shape`, each line without its timestamp.
async fn traced<F, Fut>(shape: Shape, run: F) -> Vec<String>
where
    F: FnOnce(Client) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let (out, guard_) = Captured::debug();
    run(crate::shaped!(shape, admitting(), Script::new(script()))).await;
    drop(guard_);
    let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    text.lines()
        .map(|line| {
            line.split_once(' ')
                .map_or(line, |(_, rest)| rest)
                .to_owned()
        })
        .collect()
}

/// A 429 that pauses the origin for 2 s, then a 503 that opens the breaker.
fn script() -> Vec<crate::support::script::Step> {
    vec![status_with(429, &[("retry-after", "2")]), status(503)]
}

async fn scenario(mut svc: Client) {
    let res = call_with(&mut svc, get(None)).await.unwrap();
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    // Refused: its deadline ends inside the pause.
    let err = call_with(&mut svc, get(Some(Duration::from_secs(1))))
        .await
        .unwrap_err();
    assert!(err.is_paused(), "{err}");
    // Held for 2 s, then answered 503: the breaker's first failure opens it.
    let res = call_with(&mut svc, get(None)).await.unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    // Refused by the breaker.
    let err = call_with(&mut svc, get(None)).await.unwrap_err();
    assert!(err.is_circuit_open(), "{err}");
}

#[tokio::test(start_paused = true)]
async fn the_stack_traces_what_the_layers_trace() {
    let layers = traced(Shape::Layers, scenario).await;
    for message in [
        "origin paused pause_ms=2000",
        "call refused: origin paused left_ms=2000",
        "call waits for origin pause",
        "origin resumed",
        "circuit opened",
        "call refused: circuit open",
    ] {
        assert_eq!(
            layers.iter().filter(|l| l.contains(message)).count(),
            1,
            "{message}: {layers:#?}"
        );
    }
    for line in &layers {
        assert!(
            !line.contains("s3cret") && !line.contains("/items"),
            "{line}"
        );
    }
    assert_eq!(traced(Shape::Stack, scenario).await, layers);
}
