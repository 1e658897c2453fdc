//! What the stack guarantees by construction: a hedge spends the call's budget and
//! asks its breaker, rules given once decide for the retry, hedge and breaker
//! policies, a breaker's refusal says when to come back, and the builder's result
//! does not depend on the order of its calls.

use std::time::Duration;

use crate::support::orders::same_in_every_order;
use crate::support::requests::{call, head};
use crate::support::script::{ms, slow, status, Reply, Script, Step};
use backstop::hedge::{Hedged, NotHedged};
use backstop::idempotency_key::IdempotencyKeyLayer;
use backstop::policy::{classify_fn, ErrorKind, Observed, Rules, Verdict};
use backstop::stack::{BackstopBuilder, HedgeMode, NoHedge, WithHedge};
use backstop::{Backstop, BudgetPolicy, CircuitBreakerPolicy, HedgePolicy, RetryPolicy};
use bytes::Bytes;
use http::{HeaderName, Request, Response};
use http_body_util::Full;
use tokio::time::Instant;
use tower::util::BoxCloneService;
use tower::Layer;

type Client = BoxCloneService<Request<Full<Bytes>>, Response<Reply>, backstop::Error>;

const A: &str = "http://a.test/";

/// The stack `layer` over `mock` (a macro: the stack's type depends on whether it
/// hedges).
macro_rules! client {
    ($layer:expr, $mock:expr) => {{
        let client: Client = BoxCloneService::new($layer.layer($mock.clone()));
        client
    }};
}

fn retries() -> RetryPolicy {
    RetryPolicy::builder()
        .max_attempts(3)
        .backoff(ms(10), ms(50))
        .build()
        .unwrap()
}

fn one_failure_opens() -> CircuitBreakerPolicy {
    CircuitBreakerPolicy::builder()
        .consecutive_failures(1)
        .cooldown(Duration::from_secs(5))
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_hedge_asks_the_calls_breaker() {
    let layer = Backstop::builder()
        .retry(retries())
        .hedge(HedgePolicy::after(ms(100)))
        .circuit_breaker(one_failure_opens())
        .build()
        .unwrap();
    // The first call's original answers after 300 ms; a second call, sent once,
    // fails at 50 ms and opens the breaker before the first call's hedge is due.
    let mock = Script::new([slow(ms(300), 200), status(503), status(200)]);
    let mut first = client!(&layer, &mock);
    let mut once = client!(&layer.clone().retry(RetryPolicy::none()), &mock);
    let slow_call = tokio::spawn(async move { call(&mut first, A).await });
    tokio::time::sleep(ms(50)).await;
    assert_eq!(call(&mut once, A).await.unwrap().status(), 503);
    assert_eq!(
        layer.breaker_state(&head(A)),
        Some(backstop::circuit_breaker::State::Open)
    );
    let res = slow_call.await.unwrap().unwrap();
    assert_eq!(res.status(), 200);
    let hedged = Hedged::of(&res).expect("a hedge was due");
    assert_eq!(hedged.not_sent(), Some(NotHedged::CircuitOpen));
    assert_eq!(mock.calls(), 2, "no copy reached the origin");
}

#[tokio::test(start_paused = true)]
async fn a_hedge_spends_the_calls_budget() {
    // Nothing deposited, no floor: the budget pays for no extra attempt.
    let layer = Backstop::builder()
        .retry(retries())
        .hedge(HedgePolicy::after(ms(100)))
        .budget(
            BudgetPolicy::builder()
                .ratio(0.0)
                .min_per_second(0.0)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let mock = Script::new([slow(ms(300), 200)]);
    let res = call(&mut client!(&layer, &mock), A).await.unwrap();
    let hedged = Hedged::of(&res).expect("a hedge was due");
    assert_eq!(hedged.not_sent(), Some(NotHedged::Budget));
    assert_eq!(mock.calls(), 1);
}

/// An API that answers "busy" with a 200 and `x-busy`: a rule of the application's.
fn busy_rules() -> Rules {
    Rules::builder()
        .classifier(classify_fn(|outcome: Observed<'_>| match outcome {
            Observed::Response { headers, .. } if headers.contains_key("x-busy") => {
                Verdict::IfIdempotent
            }
            _ => Verdict::NoOpinion,
        }))
        .build()
        .unwrap()
}

fn busy(delay: Duration) -> Step {
    Step::Answer(delay, 200, vec![("x-busy", "1")])
}

#[tokio::test(start_paused = true)]
async fn rules_given_once_decide_for_the_retry_the_hedge_and_the_breaker() {
    // Policies built without the rule; the stack gives it to each.
    let layer = Backstop::builder()
        .retry(retries())
        .hedge(HedgePolicy::after(ms(100)))
        .circuit_breaker(one_failure_opens())
        .rules(busy_rules())
        .build()
        .unwrap();

    // The hedge: the original's busy answer at 120 ms is a failure worth another
    // try, so it leaves the copy (sent at 100 ms) running, and the copy wins.
    let mock = Script::new([busy(ms(120)), slow(ms(300), 200)]);
    let res = call(&mut client!(&layer, &mock), A).await.unwrap();
    assert_eq!(Hedged::of(&res).unwrap().winner(), Some(1));
    assert_eq!(mock.calls(), 2);

    // The retry: a busy answer is retried.
    let mock = Script::new([busy(ms(0)), status(200)]);
    let res = call(&mut client!(&layer, &mock), "http://b.test/")
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(mock.calls(), 2);

    // The breaker: a call whose final answer is busy is a failure, and opens it.
    let once = layer.clone().retry(RetryPolicy::none());
    let mock = Script::new([busy(ms(0))]);
    let res = call(&mut client!(&once, &mock), "http://c.test/")
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let err = call(&mut client!(&once, &mock), "http://c.test/")
        .await
        .unwrap_err();
    assert!(err.is_circuit_open(), "{err}");
}

#[tokio::test(start_paused = true)]
async fn a_breakers_refusal_is_its_own_kind_and_says_when_to_come_back() {
    let layer = Backstop::builder()
        .retry(RetryPolicy::none())
        .circuit_breaker(one_failure_opens())
        .build()
        .unwrap();
    let mock = Script::new([status(503)]);
    let mut c = client!(&layer, &mock);
    assert_eq!(call(&mut c, A).await.unwrap().status(), 503);
    let err = call(&mut c, A).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::CircuitOpen);
    assert_eq!(err.to_string(), "call refused (circuit open)");
    let next = err.next_probe_at().expect("open: the next probe is known");
    assert_eq!(err.retry_after(), Some(next - Instant::now()));
    // The cooldown has jitter around 5 s.
    assert!(err.retry_after().unwrap() >= Duration::from_secs(4));
    assert_eq!(mock.calls(), 1);
}

#[test]
fn the_builders_result_does_not_depend_on_the_order_of_its_calls() {
    let a = Backstop::builder()
        .retry(retries())
        .budget(BudgetPolicy::default())
        .circuit_breaker(one_failure_opens())
        .hedge(HedgePolicy::after(ms(100)))
        .build()
        .unwrap();
    let b = Backstop::builder()
        .hedge(HedgePolicy::after(ms(100)))
        .circuit_breaker(one_failure_opens())
        .budget(BudgetPolicy::default())
        .retry(retries())
        .build()
        .unwrap();
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
    // Settings that contradict each other are refused, whichever comes first: a
    // route that hedges needs the stack's hedge layer.
    let hedging_route = backstop::retry::Routes::new(retries()).route(
        backstop::retry::Route::path_prefix("/search"),
        backstop::retry::RoutePolicy::new(retries())
            .hedge(HedgePolicy::after(ms(50)))
            .unwrap(),
    );
    assert!(Backstop::builder()
        .routes(hedging_route.clone())
        .build()
        .is_err());
    assert!(Backstop::builder()
        .routes(hedging_route)
        .hedge(HedgePolicy::after(ms(100)))
        .build()
        .is_ok());
    let both = Backstop::builder()
        .routes(backstop::retry::Routes::new(retries()))
        .retry(retries())
        .build();
    assert!(both.is_err());
    assert!(Backstop::builder()
        .no_budget()
        .budget(BudgetPolicy::default())
        .build()
        .is_err());
}

#[test]
fn the_stack_does_not_depend_on_the_order_of_the_calls() {
    type Step<H> = dyn Fn(BackstopBuilder<H>) -> BackstopBuilder<H>;
    fn steps<H: HedgeMode>() -> [Box<Step<H>>; 5] {
        [
            Box::new(|b| b.retry(retries())),
            Box::new(|b| b.budget(BudgetPolicy::builder().ratio(0.5).build().unwrap())),
            Box::new(|b| b.circuit_breaker(one_failure_opens())),
            Box::new(|b| {
                b.idempotency_key(
                    IdempotencyKeyLayer::new().header(HeaderName::from_static("x-key")),
                )
            }),
            Box::new(|b| b.rules(Rules::builder().retry_on(500).build().unwrap())),
        ]
    }
    let built = |b: BackstopBuilder<_>| format!("{:?}", b.build().unwrap());
    let no_hedge = steps();
    let no_hedge: Vec<&Step<NoHedge>> = no_hedge.iter().map(|s| &**s).collect();
    same_in_every_order(&Backstop::builder(), &no_hedge, built);
    let with_hedge = steps();
    let with_hedge: Vec<&Step<WithHedge>> = with_hedge.iter().map(|s| &**s).collect();
    let hedging = Backstop::builder().hedge(HedgePolicy::after(ms(100)));
    let layer = same_in_every_order(&hedging, &with_hedge, |b| {
        format!("{:?}", b.build().unwrap())
    });
    assert!(layer.contains("500"), "the stack's rules: {layer}");
}

#[test]
fn the_stack_is_one_clone_send_sync_service_over_a_hyper_util_client() {
    use backstop::progress::ProgressTracking;
    use backstop::stack::BackstopLayer;
    use tower::Service;

    fn clone_send_sync<T: Clone + Send + Sync + 'static>() {}
    fn send<T: Send + 'static>() {}
    // What a gateway keeps in its state: the stack over a hyper-util client.
    type Transport = ProgressTracking<crate::support::wire::Transport>;
    type Req = Request<crate::support::wire::Body>;
    clone_send_sync::<Backstop<Transport>>();
    clone_send_sync::<Backstop<Transport, WithHedge>>();
    clone_send_sync::<BackstopLayer>();
    clone_send_sync::<BackstopLayer<WithHedge>>();
    // Its futures can be spawned.
    send::<<Backstop<Transport> as Service<Req>>::Future>();
    send::<<Backstop<Transport, WithHedge> as Service<Req>>::Future>();
}
