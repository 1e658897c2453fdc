//! A driver for counting instructions per call on the success path, which stays
//! exact on a noisy machine where timings do not.
//!
//! It sends `N` GET requests through one stack over a trivial inner service (the
//! same stacks as `benches/overhead.rs`). Run it under callgrind twice, with two
//! values of `N`, and divide the difference of the totals by the difference of the
//! `N`s: start-up costs cancel out.
//!
//! ```text
//! cargo bench --bench instructions --no-run
//! for n in 1000 11000; do
//!   INSTR_STACK=backstop_stack INSTR_CALLS=$n valgrind --tool=callgrind \
//!     --callgrind-out-file=/dev/null target/release/deps/instructions-* 2>&1 | grep refs
//! done
//! ```
//!
//! `INSTR_STACK` is one of `bare`, `tower_retry`, `backstop_retry`, `backstop_stack`.

use std::hint::black_box;

use backstop::RetryPolicy;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use tower::{Service, ServiceExt};

mod common;

use common::request;

fn drive<S>(rt: &tokio::runtime::Runtime, svc: S, calls: usize)
where
    S: Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>> + Clone,
    S::Error: std::fmt::Debug,
{
    for _ in 0..calls {
        let mut svc = svc.clone();
        rt.block_on(async { black_box(svc.ready().await.unwrap().call(request()).await) })
            .unwrap();
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let calls = std::env::var("INSTR_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let stack = std::env::var("INSTR_STACK").unwrap_or_else(|_| "backstop_stack".into());
    match stack.as_str() {
        "bare" => drive(&rt, common::bare(), calls),
        "tower_retry" => drive(&rt, common::tower_retry(), calls),
        "backstop_retry" => drive(&rt, common::backstop_retry(RetryPolicy::default()), calls),
        "backstop_stack" => drive(&rt, common::backstop_stack(), calls),
        other => eprintln!("unknown INSTR_STACK {other}"),
    }
}
