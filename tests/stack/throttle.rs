//! Adaptive throttling in the stack, with the breaker and the budget, over real
//! loopback upstreams: each part decides for each origin on its own evidence, in
//! the documented order (breaker, throttle, budget).

use std::sync::{Arc, Mutex};

use crate::support::policies::breaker;
use crate::support::script::ms;
use crate::support::wire::{empty, transport, upstream, within_10s, Body, BOTH};
use backstop::circuit_breaker::State;
use backstop::observe::{Event, Refusal};
use backstop::policy::StopReason;
use backstop::test_util::{Reply, Step, Upstream};
use backstop::throttle::{ThrottlePolicy, Throttled};
use backstop::{Backstop, BudgetPolicy, RetryPolicy};
use http::{Request, Response, StatusCode};
use tower::util::BoxCloneService;
use tower::{Layer, Service, ServiceExt};

type WireClient = BoxCloneService<Request<Body>, Response<hyper::body::Incoming>, backstop::Error>;

/// What the observer saw for one origin (by port).
#[derive(Clone, Debug, Default, PartialEq)]
struct Seen {
    retries: usize,
    throttled: usize,
    circuit_open: usize,
}

/// How each call to an origin ended.
#[derive(Debug, Default, PartialEq)]
struct Ended {
    answered: usize,
    throttled: usize,
    circuit_open: usize,
}

/// An upstream answering `status` to every call a test makes (at most 100).
async fn always(protocol: backstop::test_util::Protocol, status: u16) -> Upstream {
    upstream(protocol, vec![Step::Reply(Reply::status(status)); 100]).await
}

fn head(up: &Upstream) -> http::request::Parts {
    Request::get(up.uri("/")).body(()).unwrap().into_parts().0
}

#[tokio::test]
async fn breaker_throttle_and_budget_decide_per_origin_in_one_stack() {
    within_10s(async {
        for protocol in BOTH {
            // a: overloaded, answers 429 (not a breaker failure: a 4xx);
            // b: down, answers 503 (a failure to the breaker, which opens on one, and
            // a rejection to the throttle); c: healthy.
            let a = always(protocol, 429).await;
            let b = always(protocol, 503).await;
            let c = always(protocol, 200).await;
            let seen: Arc<Mutex<Vec<(u16, Seen)>>> = Arc::default();
            let record = seen.clone();
            let observer = move |event: &Event<'_>| {
                let port = event.call().origin().port().unwrap();
                let mut seen = record.lock().unwrap();
                let i = match seen.iter().position(|(p, _)| *p == port) {
                    Some(i) => i,
                    None => {
                        seen.push((port, Seen::default()));
                        seen.len() - 1
                    }
                };
                let entry = &mut seen[i].1;
                match event {
                    Event::RetryScheduled(_) => entry.retries += 1,
                    Event::CallRefused(e) => match e.refusal {
                        Refusal::Throttled { .. } => entry.throttled += 1,
                        Refusal::CircuitOpen { .. } => entry.circuit_open += 1,
                        other => panic!("unexpected refusal {other:?}"),
                    },
                    _ => {}
                }
            };
            let layer = Backstop::builder()
                .retry(
                    RetryPolicy::builder()
                        .max_attempts(2)
                        .backoff(ms(1), ms(2))
                        .build()
                        .unwrap(),
                )
                // Half a retry per first attempt, no floor.
                .budget(
                    BudgetPolicy::builder()
                        .ratio(0.5)
                        .min_per_second(0.0)
                        .build()
                        .unwrap(),
                )
                .circuit_breaker(breaker(1, ms(60_000)))
                .throttle(ThrottlePolicy::builder().seed(3).build().unwrap())
                .observer(observer)
                .build()
                .unwrap();
            let mut client: WireClient = BoxCloneService::new(layer.layer(transport(protocol)));
            let mut ended = [Ended::default(), Ended::default(), Ended::default()];
            for _ in 0..30 {
                for (up, ended) in [&a, &b, &c].into_iter().zip(&mut ended) {
                    let get = Request::get(up.uri("/items")).body(empty()).unwrap();
                    match client.ready().await.unwrap().call(get).await {
                        Ok(_) => ended.answered += 1,
                        Err(err) if err.is_throttled() => {
                            assert_eq!(err.stop_reason(), Some(StopReason::Throttled));
                            assert_eq!(err.attempts(), 0);
                            let why = std::error::Error::source(&err)
                                .and_then(|s| s.downcast_ref::<Throttled>())
                                .expect("a Throttled source");
                            assert!(why.probability() > 0.0 && why.requests() > 0);
                            ended.throttled += 1
                        }
                        Err(err) if err.is_circuit_open() => ended.circuit_open += 1,
                        Err(err) => panic!("{protocol:?}: {err}"),
                    }
                }
            }
            let of = |up: &Upstream| {
                let port = up.addr().port();
                let seen = seen.lock().unwrap();
                seen.iter()
                    .find(|(p, _)| *p == port)
                    .map(|(_, s)| s.clone())
                    .unwrap_or_default()
            };
            let [ea, eb, ec] = &ended;

            // a: the breaker stays closed on 429s; the throttle sheds most calls; the
            // budget pays for at most half a retry per call that went.
            assert_eq!(
                client_state(&layer, &a),
                Some(State::Closed),
                "{protocol:?}"
            );
            assert!(ea.throttled > 15, "{protocol:?}: {ea:?}");
            assert_eq!(ea.circuit_open, 0);
            let sa = of(&a);
            assert_eq!(sa.throttled, ea.throttled, "one event per shed call");
            assert!(2 * sa.retries <= ea.answered, "{protocol:?}: {sa:?} {ea:?}");
            assert_eq!(a.requests().len(), ea.answered + sa.retries, "{protocol:?}");
            assert!(layer.throttle_probability(&head(&a)).unwrap() > 0.5);

            // b: its first call fails and opens the breaker; from then on the breaker
            // refuses first, and the throttle no longer counts b's calls: its one
            // rejection leaves p = 1/2, and it sheds nothing.
            assert_eq!(client_state(&layer, &b), Some(State::Open), "{protocol:?}");
            let refused = Ended {
                answered: 1,
                throttled: 0,
                circuit_open: 29,
            };
            assert_eq!(eb, &refused, "{protocol:?}");
            assert_eq!(b.requests().len(), 1, "{protocol:?}: no budget for a retry");
            assert_eq!(layer.throttle_probability(&head(&b)), Some(0.5));
            for _ in 0..5 {
                let get = Request::get(b.uri("/items")).body(empty()).unwrap();
                let err = client.ready().await.unwrap().call(get).await.unwrap_err();
                assert!(
                    err.is_circuit_open(),
                    "{protocol:?}: the breaker decides first"
                );
            }
            assert_eq!(layer.throttle_probability(&head(&b)), Some(0.5));
            assert_eq!(
                of(&b),
                Seen {
                    circuit_open: 34,
                    ..Seen::default()
                }
            );

            // c: healthy, never shed nor refused.
            assert_eq!(
                ec,
                &Ended {
                    answered: 30,
                    ..Ended::default()
                },
                "{protocol:?}"
            );
            assert_eq!(layer.throttle_probability(&head(&c)), Some(0.0));
            assert_eq!(of(&c), Seen::default());
        }
    })
    .await;
}

fn client_state(layer: &backstop::BackstopLayer, up: &Upstream) -> Option<State> {
    layer.breaker_state(&head(up))
}

#[tokio::test]
async fn a_stack_without_a_throttle_sheds_nothing() {
    within_10s(async {
        let protocol = BOTH[0];
        let a = always(protocol, 429).await;
        let layer = Backstop::builder()
            .retry(RetryPolicy::none())
            .build()
            .unwrap();
        let mut client: WireClient = BoxCloneService::new(layer.layer(transport(protocol)));
        for _ in 0..50 {
            let get = Request::get(a.uri("/")).body(empty()).unwrap();
            let res = client.ready().await.unwrap().call(get).await.unwrap();
            assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
        }
        assert_eq!(a.requests().len(), 50);
        assert_eq!(layer.throttle_probability(&head(&a)), None);
    })
    .await;
}
