//! Bounded memory: the budget's and the breaker's per-origin entries are forgotten
//! once unused, whatever state they were left in.

use std::time::Duration;

use crate::support::requests::call;
use backstop::policy::CallContext;
use backstop::{BudgetLayer, BudgetPolicy, CircuitBreakerLayer, CircuitBreakerPolicy};
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use tokio::sync::oneshot;
use tokio::time::advance;
use tower::Layer;

const ORIGINS: usize = 10_000;

/// Every tenth origin answers 503, the others 200.
fn answer(host: &str) -> u16 {
    let index = host.strip_prefix('o').and_then(|h| h.strip_suffix(".test"));
    match index.and_then(|i| i.parse::<usize>().ok()) {
        Some(i) if i % 10 == 0 => 503,
        _ => 200,
    }
}

/// Opens after two failures in a row, for 5 s.
fn breaker() -> CircuitBreakerPolicy {
    CircuitBreakerPolicy::builder()
        .consecutive_failures(2)
        .cooldown(Duration::from_secs(5))
        .build()
        .unwrap()
}

/// An upstream that answers by host (see [`answer`]), `check`ing each request, and
/// holds the answer to `slow.test` until the sender it returns is used.
fn upstream<B: Send + 'static>(
    check: fn(&Request<B>),
) -> (
    oneshot::Sender<()>,
    impl tower::Service<
            Request<B>,
            Response = Response<Full<Bytes>>,
            Error = std::io::Error,
            Future = impl Send,
        > + Clone,
) {
    let (release, released) = oneshot::channel::<()>();
    let released = std::sync::Arc::new(std::sync::Mutex::new(Some(released)));
    let upstream = tower::service_fn(move |req: Request<B>| {
        check(&req);
        let host = req.uri().host().unwrap_or_default().to_owned();
        let wait = (host == "slow.test").then(|| released.lock().unwrap().take().unwrap());
        async move {
            if let Some(wait) = wait {
                wait.await.ok();
            }
            // Held until the answer, as a retry layer holds the budget's handle.
            drop(req);
            let mut res = Response::new(Full::<Bytes>::default());
            *res.status_mut() = http::StatusCode::from_u16(answer(&host)).unwrap();
            Ok::<_, std::io::Error>(res)
        }
    });
    (release, upstream)
}

/// A call to `slow.test` through a clone of `client`, left in flight.
async fn call_slow<S>(client: &S) -> tokio::task::JoinHandle<Result<S::Response, S::Error>>
where
    S: tower::Service<Request<Full<Bytes>>> + Clone + Send + 'static,
    S::Future: Send,
    S::Response: Send,
    S::Error: Send,
{
    let mut slow = client.clone();
    let in_flight = tokio::spawn(async move { call(&mut slow, "http://slow.test/").await });
    tokio::task::yield_now().await;
    in_flight
}

/// Lets the slow call's upstream answer, and takes the call's answer (within a
/// second).
async fn finish_slow<R, E: std::fmt::Debug>(
    release: oneshot::Sender<()>,
    in_flight: tokio::task::JoinHandle<Result<R, E>>,
) -> R {
    release.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(1), in_flight)
        .await
        .unwrap()
        .unwrap()
        .unwrap()
}

/// Calls each of the `ORIGINS` origins once through a clone of `client`, and every
/// twentieth that failed twice more (its breaker opens and refuses the third): how
/// many failed once, and how many breakers opened.
async fn call_every_origin<S>(client: &S) -> (usize, usize)
where
    S: tower::Service<
            Request<Full<Bytes>>,
            Response = Response<Full<Bytes>>,
            Error = backstop::Error,
        > + Clone,
{
    let (mut failed_once, mut opened) = (0, 0);
    for i in 0..ORIGINS {
        let uri = format!("http://o{i}.test/");
        let mut svc = client.clone();
        let res = call(&mut svc, &uri).await.unwrap();
        if res.status() == 503 {
            failed_once += 1;
            if i % 20 == 0 {
                assert_eq!(call(&mut svc, &uri).await.unwrap().status(), 503);
                assert!(call(&mut svc, &uri).await.unwrap_err().is_circuit_open());
                opened += 1;
            }
        }
    }
    (failed_once, opened)
}

/// o0's breaker, fresh and closed, opens on its second failure in a row.
async fn opens_after_two_failures<S>(client: &S)
where
    S: tower::Service<
            Request<Full<Bytes>>,
            Response = Response<Full<Bytes>>,
            Error = backstop::Error,
        > + Clone,
{
    let mut svc = client.clone();
    for _ in 0..2 {
        let res = call(&mut svc, "http://o0.test/").await.unwrap();
        assert_eq!(res.status(), 503);
    }
    let err = call(&mut svc, "http://o0.test/").await.unwrap_err();
    assert!(err.is_circuit_open());
}

#[tokio::test(start_paused = true)]
async fn ten_thousand_origins_then_idle_leave_the_registries_empty() {
    let breakers = CircuitBreakerLayer::new(breaker());
    let budgets = BudgetLayer::new(BudgetPolicy::default());
    let (release, upstream) = upstream(|req: &Request<Full<Bytes>>| {
        assert!(CallContext::of(req.extensions())
            .and_then(CallContext::budget)
            .is_some());
    });
    let client = breakers.layer(budgets.layer(upstream));

    // A call that stays in flight through the idle time holds its entries.
    let in_flight = call_slow(&client).await;

    assert_eq!(call_every_origin(&client).await, (1_000, 500));
    assert_eq!(budgets.origins(), ORIGINS + 1);
    assert_eq!(breakers.origins(), ORIGINS + 1);

    // Past the budget's window (10 s) only the call in flight holds an account; the
    // breakers last for their longest cooldown (60 s by default).
    advance(Duration::from_secs(20)).await;
    assert_eq!(budgets.origins(), 1);
    assert_eq!(breakers.origins(), ORIGINS + 1);

    // Idle for longer than every limit: only the call in flight is left, open
    // breakers and breakers whose last call failed included.
    advance(Duration::from_secs(100)).await;
    assert_eq!(budgets.origins(), 1);
    assert_eq!(breakers.origins(), 1);

    let res = finish_slow(release, in_flight).await;
    assert_eq!(res.status(), 200);
    // The account's last use was the call's deposit, long ago; the breaker just
    // counted the call's outcome.
    assert_eq!(budgets.origins(), 0);
    assert_eq!(breakers.origins(), 1);
    // Its use is dated to the end of its window slot (a tenth of the 30 s window,
    // at 123 s), and a success is kept until it leaves the window.
    advance(Duration::from_secs(29)).await;
    assert_eq!(breakers.origins(), 1);
    advance(Duration::from_secs(1)).await;
    assert_eq!((budgets.origins(), breakers.origins()), (0, 0));

    // A forgotten breaker starts afresh, closed: o0's old breaker, past its
    // cooldown, would have let one probe through and reopened when it failed; the
    // new one takes two failures in a row to open.
    opens_after_two_failures(&client).await;
    assert_eq!(breakers.origins(), 1);
}

/// A crawler's memory: 100,000 healthy hosts called once each are forgotten once
/// the breaker's window has passed; a host whose last call failed is kept for the
/// longest cooldown, as long as its run of failures can still open its breaker.
#[tokio::test(start_paused = true)]
async fn a_hundred_thousand_healthy_hosts_are_forgotten_after_the_window() {
    const HOSTS: usize = 100_000;
    let breakers = CircuitBreakerLayer::new(CircuitBreakerPolicy::default());
    let upstream = tower::service_fn(|req: Request<Full<Bytes>>| {
        let failing = req.uri().host() == Some("failing.test");
        async move {
            let mut res = Response::new(Full::<Bytes>::default());
            if failing {
                *res.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
            }
            Ok::<_, std::io::Error>(res)
        }
    });
    let mut client = breakers.layer(upstream);
    for i in 0..HOSTS {
        let res = call(&mut client, &format!("http://h{i}.test/"))
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
    }
    let res = call(&mut client, "http://failing.test/").await.unwrap();
    assert_eq!(res.status(), 503);
    assert_eq!(breakers.origins(), HOSTS + 1);

    // The calls are dated to the end of their window slot (3 s); the window
    // (30 s) holds them until 30 s.
    advance(Duration::from_secs(29)).await;
    assert_eq!(breakers.origins(), HOSTS + 1);
    advance(Duration::from_secs(1)).await;
    assert_eq!(breakers.origins(), 1);

    // One failure of the five in a row that open the breaker: kept for the longest
    // cooldown (60 s) after its slot's end.
    advance(Duration::from_secs(32)).await;
    assert_eq!(breakers.origins(), 1);
    advance(Duration::from_secs(1)).await;
    assert_eq!(breakers.origins(), 0);
}

/// The same in the `Backstop` stack: each origin's breaker and account are kept in
/// one entry, forgotten once both are idle.
#[tokio::test(start_paused = true)]
async fn a_stack_forgets_ten_thousand_idle_origins_too() {
    use backstop::{Backstop, ReplayBody, RetryPolicy};
    let stack = Backstop::builder()
        .retry(RetryPolicy::none())
        .circuit_breaker(breaker())
        .budget(BudgetPolicy::default())
        .build()
        .unwrap();
    let (release, upstream) = upstream(|_: &Request<ReplayBody<Full<Bytes>>>| {});
    let client = stack.layer(upstream);

    let in_flight = call_slow(&client).await;

    assert_eq!(call_every_origin(&client).await, (1_000, 500));
    let head = |uri| Request::get(uri).body(()).unwrap().into_parts().0;
    assert_eq!(
        stack.breaker_state(&head("http://o0.test/")),
        Some(backstop::circuit_breaker::State::Open)
    );
    assert_eq!(stack.origins(), ORIGINS + 1);

    // Past the budget's window an entry stays for its breaker's longest cooldown.
    advance(Duration::from_secs(20)).await;
    assert_eq!(stack.origins(), ORIGINS + 1);
    // Idle past every limit: only the call in flight holds its entry.
    advance(Duration::from_secs(100)).await;
    assert_eq!(stack.origins(), 1);

    let res = finish_slow(release, in_flight).await;
    assert_eq!(res.status(), 200);
    // The breaker just counted the call's outcome, a success: the entry stays
    // until it leaves the breaker's window.
    advance(Duration::from_secs(29)).await;
    assert_eq!(stack.origins(), 1);
    advance(Duration::from_secs(1)).await;
    assert_eq!(stack.origins(), 0);

    // A forgotten breaker starts afresh, closed.
    opens_after_two_failures(&client).await;
    assert_eq!(stack.origins(), 1);
}

/// A stack whose breaker and budget partition calls differently keeps each in its
/// own registry: one global breaker, an account per origin.
#[tokio::test(start_paused = true)]
async fn a_stack_keeps_breaker_and_budget_apart_when_they_partition_differently() {
    use backstop::{Backstop, Partition, ReplayBody, RetryPolicy};
    let stack = Backstop::builder()
        .retry(RetryPolicy::none())
        .circuit_breaker(
            CircuitBreakerPolicy::builder()
                .consecutive_failures(2)
                .partition(Partition::global())
                .build()
                .unwrap(),
        )
        .budget(
            BudgetPolicy::builder()
                .ratio(1.0)
                .min_per_second(0.0)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let upstream = tower::service_fn(|req: Request<ReplayBody<Full<Bytes>>>| {
        let host = req.uri().host().unwrap_or_default().to_owned();
        async move {
            let mut res = Response::new(Full::<Bytes>::default());
            *res.status_mut() = http::StatusCode::from_u16(answer(&host)).unwrap();
            Ok::<_, std::io::Error>(res)
        }
    });
    let mut client = stack.layer(upstream);
    for _ in 0..2 {
        assert_eq!(
            call(&mut client, "http://o0.test/").await.unwrap().status(),
            503
        );
    }
    // The one breaker opened for every origin.
    assert!(call(&mut client, "http://o1.test/")
        .await
        .unwrap_err()
        .is_circuit_open());
    let head = |uri| Request::get(uri).body(()).unwrap().into_parts().0;
    let (a, b) = (head("http://o0.test/"), head("http://o1.test/"));
    assert_eq!(stack.breaker_state(&a), stack.breaker_state(&b));
    // Two accounts (o0 deposited twice, o1 was refused before the budget) and the
    // global breaker.
    assert_eq!(stack.origins(), 3);
    let (a, b) = (
        stack.budget_account(&a).unwrap(),
        stack.budget_account(&b).unwrap(),
    );
    assert_eq!((a.available(), b.available()), (2, 0));
}
