//! Admission in the `Backstop` stack (key, breaker, budget, pause), and the
//! separate layers as front-ends of the same admission: one scenario, and the
//! observer events of a retried, a refused and a paused call, agree in both
//! shapes. The rest is stated in the stack alone: records, holds, what a dropped
//! call gives back, what the stack hands down to its hedge, and real loopback
//! upstreams.

use crate::support::shape::{BudgetLayer, CircuitBreakerLayer};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::record::Recorder;
use crate::support::requests::{call, get, head};
use crate::support::script::{ms, slow, status, status_with, Reply, Script, Step};
use crate::support::shape::{Shape, Stack};
use backstop::budget::BudgetPolicy;
use backstop::circuit_breaker::State;
use backstop::hedge::{HedgePolicy, Hedged};
use backstop::idempotency_key::IdempotencyKeyLayer;
use backstop::observe::{Event, ObserveLayer, Observer};
use backstop::policy::{CallContext, Deadline, ErrorKind, History, StopReason};
use backstop::RetryPolicy;
use bytes::Bytes;
use futures_util::FutureExt;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use tokio::time::{sleep, Instant};
use tower::util::BoxCloneService;
use tower::{Service, ServiceBuilder, ServiceExt};

type Client = BoxCloneService<Request<Full<Bytes>>, Response<Reply>, backstop::Error>;

const A: &str = "http://a.test/";

fn retries() -> RetryPolicy {
    RetryPolicy::builder()
        .max_attempts(3)
        .backoff(ms(10), ms(50))
        .build()
        .unwrap()
}

fn breaker(consecutive: u32, cooldown: Duration) -> CircuitBreakerLayer {
    CircuitBreakerLayer::new(crate::support::policies::breaker(consecutive, cooldown))
}

/// A budget that releases a paused origin's calls at the pause's end exactly.
fn unspread() -> BudgetLayer {
    BudgetLayer::new(
        BudgetPolicy::builder()
            .pause_spread(Duration::ZERO)
            .build()
            .unwrap(),
    )
}

fn within(req: &mut Request<Full<Bytes>>, after: Duration) {
    within_deadline(req, after)
}

fn within_deadline(req: &mut Request<Full<Bytes>>, after: Duration) {
    req.extensions_mut().insert(Deadline::after(after));
}

/// The lines `recorder` wrote, with the values of `jittered` left out.
fn normalised(recorder: &Recorder, jittered: &[&str]) -> Vec<String> {
    recorder
        .lines()
        .into_iter()
        .map(|line| {
            line.split(' ')
                .map(|word| match word.split_once('=') {
                    Some((name, _)) if jittered.contains(&name) => format!("{name}=_"),
                    _ => word.to_owned(),
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// `run` in both shapes: what it returns in the stack is what it returns in the
/// separate layers.
async fn same_in_every_shape<T, F, Fut>(run: F) -> T
where
    T: PartialEq + std::fmt::Debug,
    F: Fn(Shape) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let layers = run(Shape::Layers).await;
    assert_eq!(run(Shape::Stack).await, layers, "the stack differs");
    layers
}

// ---------------------------------------------------------------------------------
// Observer events

/// An observed client: Observe → (key, breaker, budget, retry in `shape`) → `mock`.
/// Besides `recorder`'s lines, each finished call's budget and time are written
/// down as a line of its own, and `every_field` gets each event whole, as its
/// `Debug` prints it.
/// The kind of each event line: its first word.
fn kinds(lines: &[String]) -> Vec<&str> {
    lines.iter().map(|l| l.split(' ').next().unwrap()).collect()
}

fn observed_whole(
    shape: Shape,
    stack: &Stack,
    recorder: &Recorder,
    every_field: &Recorder,
    mock: &Script,
) -> Client {
    let inner: Client = crate::shaped!(shape, stack, mock.clone());
    let lines = recorder.clone();
    let whole = every_field.clone();
    let t0 = Instant::now();
    let observer = move |event: &Event<'_>| {
        whole.push(since(&format!("{event:?}"), t0));
        lines.on_event(event);
        if let Event::CallFinished(finished) = event {
            lines.push(format!(
                "finished budget_available={:?} elapsed_ms={}",
                finished.budget_available,
                finished.elapsed.as_millis()
            ));
        }
    };
    BoxCloneService::new(
        ServiceBuilder::new()
            .layer(ObserveLayer::new(observer))
            .service(inner),
    )
}

/// `text` with each `Instant` printed in it told as the time since `t0`, so that
/// runs one after the other on the same clock compare.
fn since(text: &str, t0: Instant) -> String {
    fn read(instant: &str) -> Option<Duration> {
        let rest = instant.strip_prefix("Instant { tv_sec: ")?;
        let (secs, rest) = rest.split_once(", tv_nsec: ")?;
        let (nanos, _) = rest.split_once(" }")?;
        Some(Duration::new(secs.parse().ok()?, nanos.parse().ok()?))
    }
    let origin = read(&format!("{:?}", t0.into_std())).expect("an Instant prints its parts");
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("Instant { ") {
        out.push_str(&rest[..at]);
        let end = at + rest[at..].find(" }").expect("a whole Instant") + 2;
        let instant = read(&rest[at..end]).expect("an Instant's parts");
        out.push_str(&format!("t0+{:?}", instant.saturating_sub(origin)));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

fn observed(shape: Shape, stack: &Stack, recorder: &Recorder, mock: &Script) -> Client {
    observed_whole(shape, stack, recorder, &Recorder::default(), mock)
}

fn admitting(retry: RetryPolicy, breaker: &CircuitBreakerLayer, budget: &BudgetLayer) -> Stack {
    Stack::new(retry)
        .keys(IdempotencyKeyLayer::new())
        .breaker(breaker)
        .budget(budget)
}

#[tokio::test(start_paused = true)]
async fn a_retried_call_tells_the_same_events_in_every_shape() {
    let lines = same_in_every_shape(|shape| async move {
        let recorder = Recorder::default();
        let mock = Script::new([status(503), status(503), status(200)]);
        let stack = admitting(retries(), &breaker(5, ms(1000)), &BudgetLayer::default());
        let mut client = observed(shape, &stack, &recorder, &mock);
        let req = Request::post(A).body(Full::default()).unwrap();
        let res = client.ready().await.unwrap().call(req).await.unwrap();
        assert_eq!(res.status(), StatusCode::OK, "{shape:?}");
        assert_eq!(mock.calls(), 3, "{shape:?}");
        normalised(&recorder, &["wait_ms", "elapsed_ms"])
    })
    .await;
    assert_eq!(
        kinds(&lines),
        [
            "attempt_finished",
            "retry_scheduled",
            "attempt_finished",
            "retry_scheduled",
            "attempt_finished",
            "call_finished",
            "finished"
        ],
        "{lines:#?}"
    );
    // Keyed by admission, so the POST was retried for its key.
    assert!(lines[1].contains("reason=keyed"), "{lines:#?}");
}

#[tokio::test(start_paused = true)]
async fn a_refused_call_tells_the_same_events_in_every_shape() {
    let (lines, _) = same_in_every_shape(|shape| async move {
        let recorder = Recorder::default();
        let every_field = Recorder::default();
        let mock = Script::new([status(503)]);
        let breakers = breaker(1, ms(1000));
        let stack = admitting(RetryPolicy::none(), &breakers, &BudgetLayer::default());
        let mut client = observed_whole(shape, &stack, &recorder, &every_field, &mock);
        call(&mut client, A).await.unwrap();
        let err = call(&mut client, A).await.unwrap_err();
        assert!(err.is_circuit_open(), "{shape:?}: {err}");
        assert_eq!(err.stop_reason(), Some(StopReason::CircuitOpen));
        assert_eq!(err.next_probe_at(), Some(Instant::now() + ms(1000)));
        assert_eq!(mock.calls(), 1, "{shape:?}");
        assert_eq!(breakers.origins(), 1);
        // Every field of every event, the times included, as in the layers.
        (normalised(&recorder, &[]), every_field.lines())
    })
    .await;
    assert_eq!(
        kinds(&lines),
        [
            "attempt_finished",
            "retry_skipped",
            "call_finished",
            "finished",
            "breaker_state_changed",
            "call_refused"
        ],
        "{lines:#?}"
    );
    assert!(lines[5].contains("refusal=circuit_open"), "{lines:#?}");
}

#[tokio::test(start_paused = true)]
async fn a_paused_call_tells_the_same_events_in_every_shape() {
    let (lines, every_field) = same_in_every_shape(|shape| async move {
        let recorder = Recorder::default();
        let every_field = Recorder::default();
        // The 429's 2 s hint is longer than a retry may wait: the call ends with
        // it, and the origin is paused.
        let retry = RetryPolicy::builder()
            .max_attempts(2)
            .max_retry_after(ms(1000))
            .build()
            .unwrap();
        let mock = Script::new([status_with(429, &[("retry-after", "2")])]);
        let budget = unspread();
        let stack = admitting(retry, &breaker(5, ms(1000)), &budget);
        let mut client = observed_whole(shape, &stack, &recorder, &every_field, &mock);
        let t0 = Instant::now();
        let res = call(&mut client, A).await.unwrap();
        assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
        // Refused: its deadline ends inside the pause.
        let mut req = get(A);
        within(&mut req, ms(500));
        let err = client.ready().await.unwrap().call(req).await.unwrap_err();
        assert!(err.is_paused(), "{shape:?}: {err}");
        assert_eq!(Instant::now(), t0);
        // Held, then sent when the pause ends.
        let res = call(&mut client, A).await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(Instant::now(), t0 + ms(2000), "{shape:?}");
        assert_eq!(mock.calls(), 2, "{shape:?}");
        assert_eq!(budget.origins(), 1);
        // Every field of every event, the times included, as in the layers.
        (normalised(&recorder, &[]), every_field.lines())
    })
    .await;
    assert_eq!(
        kinds(&lines),
        [
            "attempt_finished",
            "retry_skipped",
            "call_finished",
            "finished",
            "origin_paused",
            "call_refused",
            "call_waited",
            "origin_resumed",
            "attempt_finished",
            "call_finished",
            "finished"
        ],
        "{lines:#?}"
    );
    assert!(
        every_field
            .iter()
            .any(|e| e.contains("refusal: Paused { until: t0+2s }")),
        "{every_field:#?}"
    );
    assert!(lines[5].contains("refusal=paused"), "{lines:#?}");
}

// ---------------------------------------------------------------------------------
// The separate layers and the stack: front-ends of one admission

/// What a held call met, in one shape: whether it was refused for the pause, when it
/// ended and when its attempt was sent (from the pause's start), how many attempts
/// reached the origin, and the hold its history tells.
#[derive(Debug, PartialEq)]
struct Met {
    paused: bool,
    ended: Duration,
    sent: Vec<Duration>,
    held: Option<Duration>,
}

#[tokio::test(start_paused = true)]
async fn a_held_call_is_bounded_alike_in_every_shape() {
    // A budget layer above a retry layer hands the hold down to it, so the hold ends
    // by the call's deadline in both shapes: the request's `Deadline`, or the retry
    // policy's total timeout from the call's date, whichever is earlier.
    let timed = crate::support::policies::three_within;
    // Each client has made a call before the pause: a budget layer's service
    // learns from its first call that a retry layer is beneath it.
    let met = same_in_every_shape(|shape| async move {
        let budget = unspread();
        let mut met = Vec::new();
        // A timeout that ends inside the pause; a timeout with room for it, whose
        // attempt hangs; the same, answered; a `Deadline` inside the pause with no
        // timeout.
        let cases: [(RetryPolicy, Step, Option<Duration>); 4] = [
            (timed(ms(500)), status(200), None),
            (timed(ms(3000)), Step::Hang, None),
            (timed(ms(3000)), status(200), None),
            (retries(), status(200), Some(ms(1500))),
        ];
        for (policy, step, deadline) in cases {
            let mock = Script::new([status(200), step]);
            let stack = Stack::new(policy).budget(&budget);
            let mut client = crate::shaped!(shape, stack, mock.clone());
            assert_eq!(call(&mut client, A).await.unwrap().status(), 200);
            // A 429 with a 2 s hint pauses the origin.
            let pausing = Script::new([status_with(429, &[("retry-after", "2")])]);
            let once = Stack::new(RetryPolicy::none()).budget(&budget);
            let mut once = crate::shaped!(shape, once, pausing);
            assert_eq!(call(&mut once, A).await.unwrap().status(), 429);
            let start = Instant::now();
            let mut req = get(A);
            if let Some(deadline) = deadline {
                within_deadline(&mut req, deadline);
            }
            let result = client.ready().await.unwrap().call(req).await;
            met.push(Met {
                paused: result.as_ref().is_err_and(backstop::Error::is_paused),
                ended: Instant::now() - start,
                sent: mock.seen()[1..].iter().map(|s| s.at - start).collect(),
                held: result
                    .ok()
                    .and_then(|res| res.extensions().get::<History>().and_then(History::held)),
            });
        }
        met
    })
    .await;
    let s = Duration::from_secs;
    assert_eq!(
        met,
        [
            // Refused at once, nothing sent.
            Met {
                paused: true,
                ended: s(0),
                sent: vec![],
                held: None
            },
            // Held to the pause's end, then cut at the timeout from the call's date.
            Met {
                paused: false,
                ended: s(3),
                sent: vec![s(2)],
                held: None
            },
            // Held, sent at the end, and the history tells the hold.
            Met {
                paused: false,
                ended: s(2),
                sent: vec![s(2)],
                held: Some(s(2))
            },
            // The Deadline alone bounds it too.
            Met {
                paused: true,
                ended: s(0),
                sent: vec![],
                held: None
            },
        ]
    );
}

/// The stop reason in `res`'s history.
fn stopped<B>(res: &Response<B>) -> Option<StopReason> {
    res.extensions()
        .get::<History>()
        .and_then(History::stop_reason)
}

#[tokio::test(start_paused = true)]
async fn the_layers_and_the_stack_admit_alike() {
    let seen = same_in_every_shape(|shape| async move {
        // Two failed calls in a row open the breaker; each first attempt deposits
        // one retry, and there is no floor.
        let breakers = breaker(2, ms(5000));
        let budget = one_retry_per_call();
        let stack = admitting(retries(), &breakers, &budget);
        let mock = Script::new((0..6).map(|i| status(if i == 1 { 201 } else { 503 })));
        let mut client: Client = crate::shaped!(shape, stack, mock.clone());
        let mut answers = Vec::new();
        // A POST is keyed, so its 503 is retried (with the call's deposit).
        let post = Request::post(A).body(Full::default()).unwrap();
        let res = client.ready().await.unwrap().call(post).await.unwrap();
        answers.push((res.status(), stopped(&res)));
        // Each GET retries once with its deposit; the budget stops the next retry.
        for _ in 0..2 {
            let res = call(&mut client, A).await.unwrap();
            answers.push((res.status(), stopped(&res)));
        }
        // Two failed calls: the breaker refuses the next without sending it.
        let err = call(&mut client, A).await.unwrap_err();
        let refusal = (err.kind(), err.attempts(), err.stop_reason());
        // Each attempt sent: its method, and whether it carried the first key.
        let first = mock.seen()[0].key.clone();
        let sent: Vec<_> = mock
            .seen()
            .iter()
            .map(|s| (s.method.clone(), s.key.is_some() && s.key == first))
            .collect();
        let state = (
            breakers.state(&head(A)),
            budget.account(&head(A)).available(),
        );
        (answers, refusal, sent, state)
    })
    .await;
    let (answers, refusal, sent, state) = seen;
    assert_eq!(
        answers,
        [
            (StatusCode::CREATED, Some(StopReason::Answered)),
            (StatusCode::SERVICE_UNAVAILABLE, Some(StopReason::Budget)),
            (StatusCode::SERVICE_UNAVAILABLE, Some(StopReason::Budget)),
        ]
    );
    assert_eq!(
        refusal,
        (ErrorKind::CircuitOpen, 0, Some(StopReason::CircuitOpen))
    );
    // The POST's two attempts with one stamped key, two unkeyed per GET.
    let (post, get) = (http::Method::POST, http::Method::GET);
    assert_eq!(
        sent,
        [
            (post.clone(), true),
            (post, true),
            (get.clone(), false),
            (get.clone(), false),
            (get.clone(), false),
            (get, false),
        ]
    );
    assert_eq!(state, (State::Open, 0));
}

// ---------------------------------------------------------------------------------
// Breaker and budget records

#[tokio::test(start_paused = true)]
async fn the_layers_given_to_a_stack_count_its_calls_origins() {
    let breakers = breaker(5, ms(1000));
    let budget = BudgetLayer::default();
    let stack = admitting(retries(), &breakers, &budget);
    let mut client: Client = crate::stacked!(stack, Script::new([]));
    for uri in ["http://a.test/", "http://b.test/", "http://c.test/x"] {
        call(&mut client, uri).await.unwrap();
    }
    assert_eq!((breakers.origins(), budget.origins()), (3, 3));
    // A deposit per call: ten first attempts, at the default ratio of 0.2, pay for
    // two retries beside the floor's.
    let before = budget.account(&head(A)).available();
    for _ in 0..10 {
        call(&mut client, A).await.unwrap();
    }
    assert_eq!(budget.account(&head(A)).available(), before + 2);
    assert_eq!(breakers.state(&head(A)), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_half_open_probe_is_not_retried() {
    let mock = Script::new([status(503), status(503), status(503), status(503)]);
    let breakers = breaker(1, ms(1000));
    let stack = Stack::new(retries()).breaker(&breakers);
    let mut client: Client = crate::stacked!(stack, mock.clone());
    // Three attempts, one failed call: the breaker opens.
    call(&mut client, A).await.unwrap();
    assert_eq!(mock.calls(), 3);
    assert_eq!(breakers.state(&head(A)), State::Open);
    sleep(ms(1000)).await;
    // The probe's 503 is not retried: the half-open breaker refuses the retry.
    let res = call(&mut client, A).await.unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(mock.calls(), 4);
    let history = res.extensions().get::<History>().unwrap();
    assert_eq!(history.stop_reason(), Some(StopReason::CircuitOpen));
    assert_eq!(breakers.state(&head(A)), State::Open);
}

#[tokio::test(start_paused = true)]
async fn an_empty_budget_stops_the_retries() {
    let budget = BudgetLayer::new(
        BudgetPolicy::builder()
            .ratio(0.5)
            .min_per_second(0.0)
            .build()
            .unwrap(),
    );
    let mock = Script::new((0..20).map(|_| status(503)));
    let stack = Stack::new(retries()).budget(&budget);
    let mut client: Client = crate::stacked!(stack, mock.clone());
    // Half a retry per call: the first call cannot retry, the second can once.
    let res = call(&mut client, A).await.unwrap();
    let history = res.extensions().get::<History>().unwrap();
    assert_eq!(history.stop_reason(), Some(StopReason::Budget));
    assert_eq!(mock.calls(), 1);
    call(&mut client, A).await.unwrap();
    assert_eq!(mock.calls(), 3);
    assert_eq!(budget.account(&head(A)).available(), 0);
}

// ---------------------------------------------------------------------------------
// Holds

#[tokio::test(start_paused = true)]
async fn a_hold_whose_pause_is_extended_waits_for_the_new_end() {
    let budget = unspread();
    let mock = Script::new([]);
    let stack = Stack::new(retries()).budget(&budget);
    let client: Client = crate::stacked!(stack, mock.clone());
    let t0 = Instant::now();
    let account = budget.account(&head(A));
    account.pause(t0 + ms(1000));
    let held = {
        let mut client = client.clone();
        tokio::spawn(async move { call(&mut client, A).await })
    };
    let mut short = get(A);
    within(&mut short, ms(2500));
    let short = {
        let mut client = client.clone();
        tokio::spawn(async move { client.ready().await?.call(short).await })
    };
    sleep(ms(500)).await;
    assert_eq!(mock.calls(), 0);
    // Another answer pushes the end to 3 s: past the second call's deadline.
    account.pause(t0 + ms(3000));
    let err = short.await.unwrap().unwrap_err();
    assert!(err.is_paused(), "{err}");
    assert_eq!(Instant::now(), t0 + ms(1000), "refused when its hold ended");
    assert_eq!(err.paused_until(), Some(t0 + ms(3000)));
    let res = held.await.unwrap().unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(mock.seen()[0].at, t0 + ms(3000));
    assert_eq!(mock.calls(), 1);
}

/// A scripted transport whose readiness fails once `broken`.
#[derive(Clone)]
struct Breakable {
    mock: Script,
    broken: Arc<AtomicBool>,
}

impl<B> Service<Request<B>> for Breakable
where
    Script: Service<Request<B>>,
{
    type Response = <Script as Service<Request<B>>>::Response;
    type Error = backstop::BoxError;
    type Future = futures_util::future::MapErr<
        <Script as Service<Request<B>>>::Future,
        fn(<Script as Service<Request<B>>>::Error) -> backstop::BoxError,
    >;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if self.broken.load(Ordering::SeqCst) {
            return Poll::Ready(Err("transport gone".into()));
        }
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        use futures_util::TryFutureExt;
        let to_box: fn(<Script as Service<Request<B>>>::Error) -> backstop::BoxError =
            |_| "never".into();
        self.mock.call(req).map_err(to_box)
    }
}

#[tokio::test(start_paused = true)]
async fn a_held_call_whose_service_fails_readiness_ends_with_that_error() {
    let seen = same_in_every_shape(|shape| async move {
        let budget = unspread();
        let breakers = breaker(1, ms(1000));
        let mock = Script::new([]);
        let broken = Arc::new(AtomicBool::new(false));
        let transport = Breakable {
            mock: mock.clone(),
            broken: broken.clone(),
        };
        let stack = admitting(retries(), &breakers, &budget);
        let mut client: Client = crate::shaped!(shape, stack, transport);
        budget.account(&head(A)).pause(Instant::now() + ms(1000));
        let future = client.ready().await.unwrap().call(get(A));
        broken.store(true, Ordering::SeqCst);
        let err = future.await.unwrap_err();
        assert_eq!(mock.calls(), 0);
        let sources =
            std::iter::successors(Some(&err as &(dyn std::error::Error + 'static)), |e| {
                e.source()
            })
            .map(|e| e.to_string())
            .collect::<Vec<_>>();
        assert!(sources.iter().any(|s| s == "transport gone"), "{sources:?}");
        (
            err.kind(),
            err.is_retryable(),
            err.stop_reason(),
            sources.last().cloned(),
            breakers.state(&head(A)),
        )
    })
    .await;
    assert_eq!(seen.3.as_deref(), Some("transport gone"));
}

// ---------------------------------------------------------------------------------
// A future dropped before it ends

#[tokio::test(start_paused = true)]
async fn a_held_probe_dropped_gives_its_slot_back() {
    // A 503 that opens the breaker and pauses the origin for 5 s.
    let mock = Script::new([status_with(503, &[("retry-after", "5")])]);
    let breakers = breaker(1, ms(1000));
    let budget = unspread();
    let stack = admitting(RetryPolicy::none(), &breakers, &budget);
    let mut client: Client = crate::stacked!(stack, mock.clone());
    call(&mut client, A).await.unwrap();
    assert_eq!(breakers.state(&head(A)), State::Open);
    sleep(ms(1000)).await;
    // The probe is admitted, then held by the pause.
    let mut probe = client.ready().await.unwrap().call(get(A));
    assert!((&mut probe).now_or_never().is_none(), "held");
    let err = client
        .ready()
        .await
        .unwrap()
        .call(get(A))
        .now_or_never()
        .expect("refused at once")
        .unwrap_err();
    assert!(err.is_circuit_open(), "the probe's slot is taken: {err}");
    drop(probe);
    assert_eq!(breakers.state(&head(A)), State::HalfOpen);
    // The slot is free again: the next call is the probe, held in its turn.
    let next = client.ready().await.unwrap().call(get(A));
    let res = next.await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(mock.calls(), 2);
    assert_eq!(breakers.state(&head(A)), State::Closed);
}

// ---------------------------------------------------------------------------------
// What admission hands down

/// What a transport's call context held: a budget, a breaker, the keyed mark.
type Handed = Arc<std::sync::Mutex<Vec<(bool, bool, bool)>>>;

fn recording(handed: &Handed) -> Script {
    let handed = handed.clone();
    Script::new([]).on_send(move |ext| {
        let context = CallContext::of(ext);
        handed.lock().unwrap().push((
            context.and_then(CallContext::budget).is_some(),
            context.and_then(CallContext::breaker).is_some(),
            context.is_some_and(CallContext::is_keyed),
        ));
    })
}

#[tokio::test(start_paused = true)]
async fn a_stack_that_may_hedge_hands_the_budget_and_breaker_to_every_call() {
    let handed = Handed::default();
    let stack = admitting(retries(), &breaker(5, ms(1000)), &BudgetLayer::default())
        .hedge(HedgePolicy::after(ms(100)));
    let mut client: Client = crate::stacked!(stack, recording(&handed));
    let post = Request::post(A).body(Full::default()).unwrap();
    client.ready().await.unwrap().call(post).await.unwrap();
    // A call that carries a context already gets them.
    let mut own = get(A);
    CallContext::of_mut(own.extensions_mut());
    client.ready().await.unwrap().call(own).await.unwrap();
    let handed = handed.lock().unwrap().clone();
    assert_eq!(handed, [(true, true, true), (true, true, false)]);
}

/// The stack: budget, retry and hedge (a copy after 100 ms) over `mock`.
fn hedged(budget: &BudgetLayer, mock: &Script) -> Client {
    let stack = Stack::new(retries())
        .budget(budget)
        .hedge(HedgePolicy::after(ms(100)));
    crate::stacked!(stack, mock.clone())
}

fn one_retry_per_call() -> BudgetLayer {
    BudgetLayer::new(
        BudgetPolicy::builder()
            .ratio(1.0)
            .min_per_second(0.0)
            .build()
            .unwrap(),
    )
}

#[tokio::test(start_paused = true)]
async fn a_hedge_spends_from_the_calls_budget() {
    let budget = one_retry_per_call();
    let mock = Script::new([slow(ms(300), 200), slow(ms(300), 200), slow(ms(300), 200)]);
    let mut client = hedged(&budget, &mock);
    let res = call(&mut client, A).await.unwrap();
    let hedged = Hedged::of(&res).unwrap();
    assert_eq!(hedged.copies(), 1);
    // The call's deposit paid for its hedge.
    let account = budget.account(&head(A));
    assert_eq!(account.available(), 0);
    // With nothing deposited, the budget refuses the hedge: `composition.rs`,
    // `a_hedge_spends_the_calls_budget`.
}

#[tokio::test(start_paused = true)]
async fn a_keyed_post_with_its_own_header_is_hedged() {
    let keys = IdempotencyKeyLayer::new().header(http::HeaderName::from_static("x-op-key"));
    let stack = Stack::new(retries())
        .keys(keys)
        .hedge(HedgePolicy::after(ms(100)));
    let mock = Script::new([slow(ms(300), 200), slow(ms(300), 200)]);
    let mut client: Client = crate::stacked!(stack, mock.clone());
    let post = Request::post(A).body(Full::default()).unwrap();
    let res = client.ready().await.unwrap().call(post).await.unwrap();
    // Keyed by the mark alone (the hedge does not know the header): hedged.
    assert_eq!(Hedged::of(&res).unwrap().copies(), 1);
    assert_eq!(mock.calls(), 2);
}

// ---------------------------------------------------------------------------------
// Over real loopback upstreams

#[cfg(feature = "test-util")]
mod wire {
    use super::*;
    use crate::support::wire::{empty, quick, transport, upstream, within_10s, Body, BOTH};
    use backstop::test_util::{Reply as Answer, Step};

    type WireClient =
        BoxCloneService<Request<Body>, Response<hyper::body::Incoming>, backstop::Error>;

    #[tokio::test]
    async fn a_keyed_post_is_retried_after_a_503_with_one_key() {
        within_10s(async {
            for protocol in BOTH {
                let up = upstream(
                    protocol,
                    vec![Step::Reply(Answer::status(503)), Step::Reply(Answer::ok())],
                )
                .await;
                let breakers = breaker(5, ms(1000));
                let budget = BudgetLayer::default();
                let stack = admitting(quick(), &breakers, &budget);
                let mut client: WireClient = crate::stacked!(stack, transport(protocol));
                let post = Request::post(up.uri("/orders"))
                    .body(crate::support::wire::full("amount=42"))
                    .unwrap();
                let res = client.ready().await.unwrap().call(post).await.unwrap();
                assert_eq!(res.status(), StatusCode::OK, "{protocol:?}");
                let seen = up.requests();
                assert_eq!(seen.len(), 2, "{protocol:?}");
                let key = seen[0].idempotency_key.clone().expect("stamped");
                assert_eq!(seen[1].idempotency_key.as_deref(), Some(&*key));
                assert!(seen.iter().all(|r| r.body == "amount=42"));
                assert_eq!((breakers.origins(), budget.origins()), (1, 1));
            }
        })
        .await;
    }

    #[tokio::test]
    async fn a_429_pause_holds_the_next_call_alike_in_every_shape() {
        within_10s(async {
            for (protocol, shape) in BOTH
                .into_iter()
                .flat_map(|p| [(p, Shape::Stack), (p, Shape::Layers)])
            {
                // Two calls of the clients below, then a 429 that pauses the origin.
                let up = upstream(
                    protocol,
                    vec![
                        Step::Reply(Answer::status(200)),
                        Step::Reply(Answer::status(200)),
                        Step::Reply(Answer::status(429).header("retry-after-ms", "300")),
                    ],
                )
                .await;
                let budget = BudgetLayer::default();
                // One breaker and budget for every client.
                let breakers = breaker(5, ms(1000));
                let get = || Request::get(up.uri("/items")).body(empty()).unwrap();
                // Each client has made a call: a budget layer's service learns from
                // its first call that a retry layer is beneath it.
                let short = RetryPolicy::builder().timeout(ms(100)).build().unwrap();
                let short = admitting(short, &breakers, &budget);
                let mut short: WireClient = crate::shaped!(shape, short, transport(protocol));
                let stack = admitting(quick(), &breakers, &budget);
                let mut client: WireClient = crate::shaped!(shape, stack, transport(protocol));
                for c in [&mut short, &mut client] {
                    let res = c.ready().await.unwrap().call(get()).await.unwrap();
                    assert_eq!(res.status(), StatusCode::OK);
                }
                let once = Stack::new(RetryPolicy::none())
                    .breaker(&breakers)
                    .budget(&budget);
                let mut once: WireClient = crate::shaped!(shape, once, transport(protocol));
                let res = once.ready().await.unwrap().call(get()).await.unwrap();
                assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
                let until = budget
                    .account(&Request::get(up.uri("/")).body(()).unwrap().into_parts().0)
                    .paused_until()
                    .expect("paused");
                // A total timeout that ends inside the pause: refused at once.
                let err = short.ready().await.unwrap().call(get()).await.unwrap_err();
                assert!(err.is_paused(), "{protocol:?} {shape:?}: {err}");
                assert!(
                    Instant::now() < until,
                    "{protocol:?} {shape:?}: refused at once"
                );
                assert_eq!(up.requests().len(), 3, "{protocol:?} {shape:?}");
                // Room for the pause: held, then sent.
                let res = client.ready().await.unwrap().call(get()).await.unwrap();
                assert_eq!(res.status(), StatusCode::OK, "{protocol:?} {shape:?}");
                assert!(Instant::now() >= until, "{protocol:?} {shape:?}: held");
                assert_eq!(up.requests().len(), 4, "{protocol:?} {shape:?}");
                // The answer's history tells the hold.
                let history = res.extensions().get::<History>().expect("history");
                let hold = history.held().expect("held");
                assert!(
                    hold >= ms(200) && hold < ms(2000),
                    "{protocol:?} {shape:?}: {hold:?}"
                );
                assert_eq!(history.stop_reason(), Some(StopReason::Answered));
            }
        })
        .await;
    }
}
