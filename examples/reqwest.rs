//! The same scripted faults through three reqwest clients: plain reqwest,
//! reqwest-retry, and backstop's middleware (with and without idempotency keys).
//!
//! Every call is a POST (a payment) to a fresh loopback upstream that applies one
//! fault to the call's first request and answers `200 OK` after that:
//!
//! | fault | the server… | processed? |
//! |---|---|---|
//! | none | answers 200 | yes |
//! | answer lost | reads the body, then closes without answering | yes |
//! | 503 + `retry-after-ms: 100` | answers before reading the body | no |
//! | connection closed on the head | closes as the head arrives | no |
//! | streamed body, closed mid-body | reads 4 bytes of a streamed body, then closes | no |
//!
//! A *duplicate* is a request the server processed after it had already processed
//! one for the same call, unless it carries the same idempotency key as that one (a
//! server that honours keys answers it from its record instead of charging twice).
//!
//! ```text
//! cargo run --example reqwest --features reqwest-middleware,test-util
//! ```

use std::time::Duration;

use backstop::reqwest::BackstopMiddleware;
use backstop::test_util::{Protocol, Recorded, Reply, Step, Upstream};
use backstop::RetryPolicy;
use bytes::Bytes;
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use reqwest_retry::policies::ExponentialBackoff;
use reqwest_retry::RetryTransientMiddleware;

/// The faults, applied in turn to each call's first request.
#[derive(Clone, Copy, Debug)]
enum Fault {
    None,
    AnswerLost,
    Unavailable,
    ClosedOnHead,
    StreamCut,
}

const FAULTS: [Fault; 5] = [
    Fault::None,
    Fault::AnswerLost,
    Fault::Unavailable,
    Fault::ClosedOnHead,
    Fault::StreamCut,
];

impl Fault {
    fn step(self) -> Option<Step> {
        match self {
            Fault::None => None,
            Fault::AnswerLost => Some(Step::CloseAfterBody),
            Fault::Unavailable => Some(
                Reply::status(503)
                    .header("retry-after-ms", "100")
                    .before_body()
                    .into(),
            ),
            Fault::ClosedOnHead => Some(Step::CloseOnHead),
            Fault::StreamCut => Some(Step::CloseAfterBodyBytes(4)),
        }
    }

    fn streamed(self) -> bool {
        matches!(self, Fault::StreamCut)
    }
}

#[derive(Default)]
struct Tally {
    calls: usize,
    requests: usize,
    ok: usize,
    duplicates: usize,
}

/// Duplicates among one call's requests (see the module docs).
fn duplicates(seen: &[Recorded]) -> usize {
    let mut first_key: Option<Option<&str>> = None;
    let mut dup = 0;
    for r in seen.iter().filter(|r| r.processed()) {
        match &first_key {
            None => first_key = Some(r.idempotency_key.as_deref()),
            Some(Some(key)) if r.idempotency_key.as_deref() == Some(*key) => {}
            Some(_) => dup += 1,
        }
    }
    dup
}

fn body(streamed: bool) -> reqwest::Body {
    const PAYMENT: &[u8] = b"{\"amount\":10,\"to\":\"acct-42\"}";
    if streamed {
        // A body of unknown length that reqwest cannot clone.
        let chunks: Vec<Result<http_body::Frame<Bytes>, std::io::Error>> = PAYMENT
            .chunks(8)
            .map(|c| Ok(http_body::Frame::data(Bytes::copy_from_slice(c))))
            .collect();
        reqwest::Body::wrap(http_body_util::StreamBody::new(futures_util::stream::iter(
            chunks,
        )))
    } else {
        reqwest::Body::from(PAYMENT)
    }
}

async fn run(
    client: &ClientWithMiddleware,
    rounds: usize,
) -> Result<Tally, Box<dyn std::error::Error>> {
    let mut tally = Tally::default();
    for _ in 0..rounds {
        for fault in FAULTS {
            let up = Upstream::builder()
                .protocol(Protocol::Http1)
                .script(fault.step())
                .start()
                .await?;
            let sent = tokio::time::timeout(
                Duration::from_secs(10),
                client
                    .post(up.uri("/payments").to_string())
                    .body(body(fault.streamed()))
                    .send(),
            )
            .await?;
            tally.calls += 1;
            if sent.is_ok_and(|res| res.status().is_success()) {
                tally.ok += 1;
            }
            let seen = up.requests();
            tally.requests += seen.len();
            tally.duplicates += duplicates(&seen);
        }
    }
    Ok(tally)
}

/// reqwest's own retry off for every client, so each counts only its own attempts.
fn reqwest_client() -> reqwest::Client {
    backstop::reqwest::client_builder()
        .no_proxy()
        .build()
        .expect("a reqwest client")
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rounds = 20;
    let quick = RetryPolicy::builder()
        .backoff(Duration::from_millis(10), Duration::from_millis(100))
        .build()?;
    let plain = ClientBuilder::new(reqwest_client()).build();
    let retry = ClientBuilder::new(reqwest_client())
        .with(RetryTransientMiddleware::new_with_policy(
            ExponentialBackoff::builder()
                .retry_bounds(Duration::from_millis(10), Duration::from_millis(100))
                .build_with_max_retries(2),
        ))
        .build();
    let backstop_keyless = ClientBuilder::new(reqwest_client())
        .with(BackstopMiddleware::new(quick.clone()))
        .build();
    let backstop = ClientBuilder::new(reqwest_client())
        .with(BackstopMiddleware::new(quick).with_idempotency_keys())
        .build();

    let plain = run(&plain, rounds).await?;
    let retry = run(&retry, rounds).await?;
    let keyless = run(&backstop_keyless, rounds).await?;
    let backstop = run(&backstop, rounds).await?;

    println!(
        "{:<28} {:>6} {:>18} {:>10} {:>11}",
        "client", "calls", "upstream requests", "successes", "duplicates"
    );
    for (name, t) in [
        ("plain reqwest", &plain),
        ("reqwest-retry", &retry),
        ("backstop (no keys)", &keyless),
        ("backstop (idempotency keys)", &backstop),
    ] {
        println!(
            "{:<28} {:>6} {:>18} {:>10} {:>11}",
            name, t.calls, t.requests, t.ok, t.duplicates
        );
    }
    println!(
        "reqwest calls={} backstop_ok={} backstop_duplicates={} reqwest_retry_ok={} reqwest_retry_duplicates={}",
        backstop.calls, backstop.ok, backstop.duplicates, retry.ok, retry.duplicates
    );
    Ok(())
}
