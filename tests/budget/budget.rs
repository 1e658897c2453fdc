//! The retry budget: exact accounting traces on tokio's paused clock, the sliding
//! window, per-origin accounts, and the layer under the retry layer.

use crate::support::shape::BudgetLayer;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::requests::{call, head, paused};
use crate::support::script::{status, status_with, Reply, Script};
use crate::support::shape::Stack;
use backstop::budget::{BudgetPolicy, OriginAccount};
use backstop::policy::{CallContext, History, StopReason};
use backstop::Partition;
use backstop::RetryPolicy;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use proptest::prelude::*;
use tokio::time::advance;
use tower::{Layer, Service, ServiceExt};

type Client = tower::util::BoxCloneService<Request<Full<Bytes>>, Response<Reply>, backstop::Error>;

fn budget(ratio: f64, min_per_second: f64) -> BudgetPolicy {
    BudgetPolicy::builder()
        .ratio(ratio)
        .min_per_second(min_per_second)
        .build()
        .unwrap()
}

/// Withdraws until the account refuses; how many it allowed.
fn drain(account: &OriginAccount) -> u64 {
    let mut n = 0;
    while account.try_withdraw() {
        n += 1;
        assert!(n < 10_000_000, "runaway account");
    }
    n
}

fn fast_retries(max_attempts: u32) -> RetryPolicy {
    RetryPolicy::builder()
        .max_attempts(max_attempts)
        .backoff(Duration::from_millis(10), Duration::from_millis(50))
        .build()
        .unwrap()
}

// ---------------------------------------------------------------------------------
// Exact arithmetic

#[tokio::test(start_paused = true)]
async fn ratios_are_exact() {
    // tower's TpsBudget keeps 0.3 as 1/3 and 0.6 as 1/1 (tower#857): 10 first
    // attempts would buy it 3 and 10 retries. Here they buy exactly 3 and 6.
    let cases = [
        (0.1, 9, 0),
        (0.1, 10, 1),
        (0.1, 100, 10),
        (0.3, 3, 0),
        (0.3, 4, 1),
        (0.3, 7, 2),
        (0.3, 10, 3),
        (0.3, 1000, 300),
        (0.6, 1, 0),
        (0.6, 2, 1),
        (0.6, 5, 3),
        (0.6, 10, 6),
        (0.6, 1000, 600),
    ];
    for (ratio, firsts, retries) in cases {
        let account = budget(ratio, 0.0).account();
        for _ in 0..firsts {
            account.deposit();
        }
        assert_eq!(account.available(), retries, "{ratio} × {firsts}");
        assert_eq!(drain(&account), retries, "{ratio} × {firsts}");
        assert_eq!(account.available(), 0);
    }
}

#[tokio::test(start_paused = true)]
async fn a_trace_of_deposits_and_withdrawals_at_0_3() {
    let account = budget(0.3, 0.0).account();
    let mut trace = Vec::new();
    for step in "ddd w d w ddd w w dddd w w".split_whitespace() {
        for op in step.chars() {
            match op {
                'd' => {
                    account.deposit();
                    trace.push("d".to_owned());
                }
                _ => trace.push(if account.try_withdraw() { "W" } else { "-" }.to_owned()),
            }
        }
    }
    // 0.9: no; 1.2: yes (0.2 left); 1.1: yes (0.1), no; 1.3: yes (0.3), no.
    assert_eq!(trace.concat(), "ddd-dWdddW-ddddW-");
}

#[tokio::test(start_paused = true)]
async fn a_refund_goes_back_where_its_withdrawal_was_taken() {
    let account = budget(1.0, 0.0).account();
    account.deposit();
    let withdrawn = tokio::time::Instant::now();
    assert!(account.try_withdraw());
    advance(Duration::from_millis(9_500)).await;
    account.refund_withdrawal(withdrawn);
    assert_eq!(account.available(), 1);
    advance(Duration::from_millis(500)).await;
    assert_eq!(
        account.available(),
        0,
        "the deposit, its withdrawal and the refund left the window together"
    );

    // A refund that comes after its withdrawal left the window gives nothing back:
    // the withdrawal's expiry did.
    account.deposit();
    account.deposit();
    let withdrawn = tokio::time::Instant::now();
    assert!(account.try_withdraw());
    assert_eq!(account.available(), 1);
    advance(Duration::from_secs(10)).await;
    account.refund_withdrawal(withdrawn);
    assert_eq!(account.available(), 0);
}

#[tokio::test(start_paused = true)]
async fn the_floor_lets_a_quiet_client_retry() {
    // 2 per second over 5 s: 10 retries with no traffic at all.
    let b = BudgetPolicy::builder()
        .ratio(0.2)
        .min_per_second(2.0)
        .window(Duration::from_secs(5))
        .build()
        .unwrap();
    assert_eq!(b.floor(), 10.0);
    assert_eq!(drain(&b.account()), 10);

    // A fractional floor (0.3/s × 5 s = 1.5) adds to the deposits exactly.
    let b = BudgetPolicy::builder()
        .ratio(0.5)
        .min_per_second(0.3)
        .window(Duration::from_secs(5))
        .build()
        .unwrap();
    let account = b.account();
    assert_eq!(account.available(), 1);
    account.deposit(); // 1.5 + 0.5
    assert_eq!(drain(&account), 2);

    // The defaults: 10/s over 10 s.
    assert_eq!(drain(&BudgetPolicy::default().account()), 100);
}

#[tokio::test(start_paused = true)]
async fn the_floor_refills_as_spent_retries_leave_the_window() {
    let b = BudgetPolicy::builder()
        .ratio(0.0)
        .min_per_second(1.0)
        .window(Duration::from_secs(10))
        .build()
        .unwrap();
    let account = b.account();
    assert_eq!(drain(&account), 10);
    advance(Duration::from_millis(9_999)).await;
    assert_eq!(account.available(), 0, "still inside the window");
    advance(Duration::from_millis(1)).await;
    assert_eq!(account.available(), 10, "the retries of slot 0 expired");
}

#[tokio::test(start_paused = true)]
async fn first_attempts_expire_with_the_window() {
    let account = budget(0.5, 0.0).account(); // 10 s window, ten 1 s slots
    for _ in 0..10 {
        account.deposit();
    }
    advance(Duration::from_millis(500)).await;
    for _ in 0..10 {
        account.deposit(); // same slot: expires at 10 s too
    }
    assert_eq!(account.available(), 10);
    advance(Duration::from_millis(9_499)).await;
    assert_eq!(account.available(), 10);
    advance(Duration::from_millis(1)).await;
    assert_eq!(
        account.available(),
        0,
        "expired together, one window after slot 0 began"
    );
}

#[tokio::test(start_paused = true)]
async fn the_window_slides_over_deposits_and_withdrawals() {
    let account = budget(0.5, 0.0).account();
    // t = 0: 10 first attempts pay for 5 retries.
    for _ in 0..10 {
        account.deposit();
    }
    // t = 5 s: all 5 are spent.
    advance(Duration::from_secs(5)).await;
    assert_eq!(drain(&account), 5);
    // t = 10 s: the first attempts leave the window; the retries they paid for
    // are still in it, so the account is in debt.
    advance(Duration::from_secs(5)).await;
    assert_eq!(account.available(), 0);
    for _ in 0..10 {
        account.deposit();
    }
    assert_eq!(
        account.available(),
        0,
        "the new deposits pay the debt first"
    );
    // t = 15 s: the retries leave the window too.
    advance(Duration::from_secs(5)).await;
    assert_eq!(account.available(), 5);
    // t = 20 s: and so do the last first attempts.
    advance(Duration::from_secs(5)).await;
    assert_eq!(account.available(), 0);
}

#[test]
fn concurrent_withdrawals_never_overspend() {
    // Eight threads deposit and withdraw at once; within one window the retries
    // granted equal, exactly, 0.3 of the first attempts.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(8)
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let b = BudgetPolicy::builder()
            .ratio(0.3)
            .min_per_second(0.0)
            .window(Duration::from_secs(3600))
            .build()
            .unwrap();
        let account = b.account();
        let granted = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..16 {
            let account = account.clone();
            let granted = granted.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..10_000 {
                    account.deposit();
                    for _ in 0..(i % 3) {
                        if account.try_withdraw() {
                            granted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    if i % 1000 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let granted = granted.load(Ordering::Relaxed) as u64;
        assert!(granted <= 48_000, "{granted}");
        assert_eq!(granted + drain(&account), 48_000);
    });
}

// ---------------------------------------------------------------------------------
// Property tests of the arithmetic

proptest! {
    /// Any ratio kept to a millionth: n first attempts buy exactly
    /// ⌊n · ratio⌋ retries.
    #[test]
    fn any_ratio_in_millionths_is_exact(ppm in 0u64..=3_000_000, firsts in 0u64..3000) {
        let b = budget(ppm as f64 / 1e6, 0.0);
        prop_assert_eq!(b.ratio(), ppm as f64 / 1e6);
        let retries = paused(async {
            let account = b.account();
            for _ in 0..firsts {
                account.deposit();
            }
            drain(&account)
        });
        prop_assert_eq!(retries, firsts * ppm / 1_000_000);
    }

    /// Decimal ratios as a user writes them (0.1, 0.25, 0.333, …) are exact.
    #[test]
    fn decimal_ratios_are_exact(digits in 1u32..=3, numerator in 0u64..=1000, firsts in 0u64..2000) {
        let scale = 10u64.pow(digits);
        let numerator = numerator % (scale + 1);
        let text = format!("{}.{:0width$}", numerator / scale, numerator % scale, width = digits as usize);
        let ratio: f64 = text.parse().unwrap();
        let retries = paused(async {
            let account = budget(ratio, 0.0).account();
            for _ in 0..firsts {
                account.deposit();
            }
            drain(&account)
        });
        prop_assert_eq!(retries, firsts * numerator / scale, "ratio {}", text);
    }

    /// Random deposits, withdrawals and clock moves against a plain model: a list
    /// of timed events, each counted while its slot is among the last ten.
    #[test]
    fn traces_match_a_model(
        ppm in 0i64..=1_500_000,
        floor_tenths in 0i64..40,
        ops in proptest::collection::vec((0u8..3, 0u64..1500), 0..300),
    ) {
        let window = Duration::from_secs(10);
        let b = BudgetPolicy::builder()
            .ratio(ppm as f64 / 1e6)
            .min_per_second(floor_tenths as f64 / 100.0) // × 10 s
            .window(window)
            .build()
            .unwrap();
        let floor = floor_tenths * 100_000;
        paused(async move {
            let start = tokio::time::Instant::now();
            let account = b.account();
            // (slot, units) of every event.
            let mut events: Vec<(u64, i64)> = Vec::new();
            let slot_of = |now: tokio::time::Instant| ((now - start).as_millis() / 1000) as u64;
            let balance = |events: &[(u64, i64)], slot: u64| {
                floor + events.iter().filter(|(s, _)| s + 10 > slot).map(|(_, u)| u).sum::<i64>()
            };
            for (op, arg) in ops {
                let slot = slot_of(tokio::time::Instant::now());
                match op {
                    0 => {
                        account.deposit();
                        events.push((slot, ppm));
                    }
                    1 => {
                        let expected = balance(&events, slot) >= 1_000_000;
                        prop_assert_eq!(account.try_withdraw(), expected);
                        if expected {
                            events.push((slot, -1_000_000));
                        }
                    }
                    _ => {
                        advance(Duration::from_millis(arg * 10)).await;
                        let slot = slot_of(tokio::time::Instant::now());
                        let expected = balance(&events, slot).max(0) / 1_000_000;
                        prop_assert_eq!(account.available(), expected as u64);
                    }
                }
            }
            Ok(())
        })?;
    }
}

// ---------------------------------------------------------------------------------
// The layer

#[tokio::test(start_paused = true)]
async fn under_the_retry_layer_an_outage_costs_the_ratio() {
    // Every answer is a 503; four attempts allowed per call; 20 % budget, no floor.
    let mock = Script::new((0..1000).map(|_| status(503)));
    let b = BudgetPolicy::builder()
        .ratio(0.2)
        .min_per_second(0.0)
        .window(Duration::from_secs(60))
        .build()
        .unwrap();
    let stack = Stack::new(fast_retries(4)).budget(&BudgetLayer::new(b));
    let mut client: Client = crate::stacked!(stack, mock.clone());
    let mut stopped_by_budget = 0;
    for _ in 0..100 {
        let res = call(&mut client, "http://upstream.test/").await.unwrap();
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        let h = res.extensions().get::<History>().unwrap();
        if h.stop_reason() == Some(StopReason::Budget) {
            stopped_by_budget += 1;
        }
    }
    // Naive retries would have sent 400.
    assert_eq!(mock.calls(), 120);
    assert_eq!(stopped_by_budget, 100, "every sequence ended at the budget");
}

#[tokio::test(start_paused = true)]
async fn a_call_dropped_while_it_waits_for_its_retry_gives_the_retry_back() {
    // At ratio 1 the first attempt buys exactly one retry.
    let layer = BudgetLayer::new(budget(1.0, 0.0));
    let mock = Script::new([status_with(503, &[("retry-after", "9")]), status(200)]);
    let stack = Stack::new(fast_retries(3)).budget(&layer);
    let mut client: Client = crate::stacked!(stack, mock.clone());
    let account = || layer.account(&head("http://upstream.test/"));
    // The caller gives up near the end of the 9 s the 503 asked to wait.
    let cut = tokio::time::timeout(
        Duration::from_millis(8_500),
        call(&mut client, "http://upstream.test/"),
    );
    let during = async {
        tokio::time::sleep(Duration::from_millis(4_000)).await;
        account().available()
    };
    let (cut, during) = tokio::join!(cut, during);
    assert!(
        cut.is_err(),
        "the call was still waiting when it was dropped"
    );
    assert_eq!(during, 0, "the retry was paid for when it was decided");
    assert_eq!(mock.calls(), 1);
    assert_eq!(
        account().available(),
        1,
        "the retry never sent was given back"
    );
    // Given back where it was taken: when the first attempt that paid for it
    // leaves the 10 s window, so does the retry.
    advance(Duration::from_millis(1_500)).await;
    assert_eq!(account().available(), 0);
}

#[tokio::test(start_paused = true)]
async fn the_floor_serves_a_fresh_client() {
    let mock = Script::new([status(503), status(503), status(200)]);
    let stack = Stack::new(fast_retries(3)).budget(&BudgetLayer::default());
    let mut client: Client = crate::stacked!(stack, mock.clone());
    let res = call(&mut client, "http://upstream.test/").await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(mock.calls(), 3);
}

#[tokio::test(start_paused = true)]
async fn each_origin_has_its_own_account() {
    let layer = BudgetLayer::new(budget(0.5, 0.0));
    let healthy = Script::new([]); // 200 for ever
    let failing = Script::new((0..100).map(|_| status(503)));
    let stack = Stack::new(fast_retries(4)).budget(&layer);
    let mut to_healthy: Client = crate::stacked!(stack, healthy.clone());
    let mut to_failing: Client = crate::stacked!(stack, failing.clone());

    for _ in 0..4 {
        let res = call(&mut to_healthy, "http://healthy.test/").await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
    }
    for _ in 0..10 {
        call(&mut to_failing, "http://failing.test/").await.unwrap();
    }
    // The failing origin paid for 5 retries with its own 10 first attempts; the
    // healthy origin's 2 are untouched.
    assert_eq!(failing.calls(), 15);
    assert_eq!(layer.account(&head("http://failing.test/")).available(), 0);
    assert_eq!(layer.account(&head("http://healthy.test/x")).available(), 2);
    // Scheme and port make other origins.
    assert_eq!(layer.account(&head("https://healthy.test/")).available(), 0);
    assert_eq!(
        layer
            .account(&head("http://healthy.test:8080/"))
            .available(),
        0
    );
}

#[tokio::test(start_paused = true)]
async fn a_global_account_is_shared_by_every_origin() {
    let b = BudgetPolicy::builder()
        .ratio(0.5)
        .min_per_second(0.0)
        .partition(Partition::global())
        .build()
        .unwrap();
    let layer = BudgetLayer::new(b);
    let healthy = Script::new([]);
    let failing = Script::new((0..100).map(|_| status(503)));
    let stack = Stack::new(fast_retries(4)).budget(&layer);
    let mut to_healthy: Client = crate::stacked!(stack, healthy);
    let mut to_failing: Client = crate::stacked!(stack, failing.clone());
    for _ in 0..4 {
        call(&mut to_healthy, "http://healthy.test/").await.unwrap();
    }
    // 2 retries saved by the healthy origin's calls, plus 1 from these two calls.
    for _ in 0..2 {
        call(&mut to_failing, "http://failing.test/").await.unwrap();
    }
    assert_eq!(failing.calls(), 2 + 3);
    assert_eq!(layer.account(&head("http://other.test/")).available(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_custom_key_reads_the_head_and_the_request_goes_on_whole() {
    let b = BudgetPolicy::builder()
        .ratio(1.0)
        .min_per_second(0.0)
        .partition(Partition::by_key(|head: &http::request::Parts| {
            head.headers
                .get("x-tenant")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("none")
                .to_owned()
        }))
        .build()
        .unwrap();
    let layer = BudgetLayer::new(b);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let mut svc = layer.layer(tower::service_fn(move |req: Request<Full<Bytes>>| {
        record.lock().unwrap().push((
            req.method().clone(),
            req.uri().clone(),
            req.version(),
            req.headers().get("x-tenant").cloned(),
            req.extensions().get::<u32>().copied(),
            CallContext::of(req.extensions())
                .and_then(CallContext::budget)
                .is_some(),
        ));
        async { Ok::<_, std::convert::Infallible>(Response::new(Full::<Bytes>::default())) }
    }));
    for tenant in ["a", "a", "a", "b"] {
        let mut req = Request::put("http://shared.test/x?y=1")
            .version(http::Version::HTTP_2)
            .header("x-tenant", tenant)
            .body(Full::default())
            .unwrap();
        req.extensions_mut().insert(7u32);
        svc.ready().await.unwrap().call(req).await.unwrap();
    }
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 4);
    for (i, (method, uri, version, tenant, ext, handle)) in seen.iter().enumerate() {
        assert_eq!(method, http::Method::PUT);
        assert_eq!(uri, "http://shared.test/x?y=1");
        assert_eq!(*version, http::Version::HTTP_2);
        let want = if i < 3 { "a" } else { "b" };
        assert_eq!(tenant.as_ref().unwrap(), want);
        assert_eq!(*ext, Some(7));
        assert!(handle);
    }
    // A ratio of 1: each tenant's account holds one retry per call it made.
    let available = |tenant: &str| {
        let mut head = head("http://other.test/");
        head.headers.insert("x-tenant", tenant.parse().unwrap());
        layer.account(&head).available()
    };
    assert_eq!(available("a"), 3);
    assert_eq!(available("b"), 1);
    assert_eq!(available("c"), 0);
}

#[tokio::test(start_paused = true)]
async fn clones_of_a_layer_share_accounts() {
    let layer = BudgetLayer::new(budget(1.0, 0.0));
    let copy = layer.clone();
    let mut svc = copy.layer(tower::service_fn(|_req: Request<Full<Bytes>>| async {
        Ok::<_, std::convert::Infallible>(Response::new(Full::<Bytes>::default()))
    }));
    let mut svc2 = svc.clone();
    for s in [&mut svc, &mut svc2] {
        call(s, "http://a.test/").await.unwrap();
    }
    assert_eq!(layer.account(&head("http://a.test/")).available(), 2);
}

/// A transport that answers 503 and, on each attempt, sends a stand-in hedge:
/// one withdrawal from the account the budget layer left in the extensions.
fn hedging_transport(hedges: &Arc<Mutex<Vec<bool>>>) -> Script {
    let hedges = hedges.clone();
    Script::new(vec![status(503); 4]).on_send(move |ext| {
        let handle = CallContext::of(ext)
            .and_then(CallContext::budget)
            .expect("the budget layer's handle reaches every attempt");
        hedges.lock().unwrap().push(handle.try_withdraw());
    })
}

#[tokio::test(start_paused = true)]
async fn retries_and_hedges_spend_one_account() {
    // Each call deposits two retries' worth. The first attempt's hedge spends one,
    // the retry the other; the second attempt's hedge then finds nothing.
    let layer = BudgetLayer::new(budget(2.0, 0.0));
    let hedges = Arc::default();
    let transport = hedging_transport(&hedges);
    // A stack that may hedge hands the account down to every attempt (its own
    // hedges, after an hour, never go here).
    let stack = Stack::new(fast_retries(4))
        .budget(&layer)
        .hedge(backstop::HedgePolicy::after(Duration::from_secs(3600)));
    let mut client: Client = crate::stacked!(stack, transport.clone());
    let res = call(&mut client, "http://upstream.test/").await.unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(transport.calls(), 2);
    assert_eq!(*hedges.lock().unwrap(), [true, false]);
    let h = res.extensions().get::<History>().unwrap();
    assert_eq!(h.stop_reason(), Some(StopReason::Budget));
    assert_eq!(layer.account(&head("http://upstream.test/")).available(), 0);
}

#[tokio::test(start_paused = true)]
async fn the_layer_keeps_the_inner_error_and_response() {
    // The budget creates no failures of its own but the pause's refusal: the
    // inner error is kept as the source of its error, unchanged.
    let mut svc =
        BudgetLayer::default().layer(tower::service_fn(|req: Request<Full<Bytes>>| async move {
            assert!(CallContext::of(req.extensions())
                .and_then(CallContext::budget)
                .is_some());
            Err::<Response<Full<Bytes>>, _>(std::io::Error::other("down"))
        }));
    let err: backstop::Error = call(&mut svc, "http://a.test/").await.unwrap_err();
    assert!(!err.is_paused() && !err.is_retryable());
    let inner = std::error::Error::source(&err).unwrap();
    assert_eq!(
        inner.downcast_ref::<std::io::Error>().unwrap().to_string(),
        "down"
    );
}

#[test]
fn services_are_clone_send_and_sync() {
    fn check<T: Clone + Send + Sync + 'static>() {}
    check::<BudgetLayer>();
    check::<OriginAccount>();
    check::<backstop::budget::Budget<Script>>();
    check::<BudgetPolicy>();
}

#[tokio::test(start_paused = true)]
async fn a_refund_gives_back_one_retry() {
    let account = BudgetPolicy::builder()
        .ratio(1.0)
        .min_per_second(0.0)
        .build()
        .unwrap()
        .account();
    account.deposit();
    assert!(account.try_withdraw());
    assert!(!account.try_withdraw());
    account.refund();
    assert_eq!(account.available(), 1);
    assert!(account.try_withdraw());
    // The refund leaves the window with the rest.
    tokio::time::advance(Duration::from_secs(11)).await;
    assert_eq!(account.available(), 0);
}
