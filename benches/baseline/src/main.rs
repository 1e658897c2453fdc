//! Today's `RetryLayer` against the one issue 9 set its goals on (`backstop_old`,
//! commit b8d51a5), beside tower's retry and the floor of `benches/common/floor.rs`:
//! every stack interleaved in rounds in one process, each one's added time over the
//! bare service and its ratio to tower's, as `benches/overhead.rs` measures them
//! (`ratios`, with the same code: `benches/common/ratios.rs`), over
//! `RATIOS_PROCESSES` fresh processes. `INSTR_STACK` and `INSTR_CALLS` drive one
//! stack for callgrind instead. `run.sh` builds and runs it.

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use tower::{Layer, Service};

#[allow(dead_code, unused_imports)]
#[path = "../../common/mod.rs"]
mod common;

use common::ratios::{measure, Measure};

/// The retry layer of b8d51a5 with its default policy, over the same inner service.
fn old_retry(
) -> impl Service<Request<Full<Bytes>>, Response = common::Res, Error = backstop_old::Error> + Clone
{
    backstop_old::RetryLayer::new(backstop_old::RetryPolicy::default()).layer(tower::service_fn(
        common::ok::<backstop_old::ReplayBody<Full<Bytes>>>,
    ))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

/// One process's measurement (see [`common::ratios::interleaved`]).
fn once() {
    let rt = runtime();
    let tower_retry = common::tower_retry();
    let today = common::backstop_retry(backstop::RetryPolicy::default());
    let old = old_retry();
    let floor = common::floor::retry();
    let stacks: [(&str, Measure<'_>); 4] = [
        ("tower_retry", measure(&rt, &tower_retry)),
        ("backstop_retry", measure(&rt, &today)),
        ("backstop_retry_b8d51a5", measure(&rt, &old)),
        ("floor_retry", measure(&rt, &floor)),
    ];
    common::ratios::interleaved(&stacks);
}

/// Sends `INSTR_CALLS` requests through the stack `stack`, for callgrind.
fn drive(stack: &str) {
    let calls: usize = std::env::var("INSTR_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000);
    let rt = runtime();
    match stack {
        "bare" => common::drive(&rt, common::bare(), calls),
        "tower_retry" => common::drive(&rt, common::tower_retry(), calls),
        "backstop_retry" => common::drive(
            &rt,
            common::backstop_retry(backstop::RetryPolicy::default()),
            calls,
        ),
        "backstop_retry_b8d51a5" => common::drive(&rt, old_retry(), calls),
        "floor_retry" => common::drive(&rt, common::floor::retry(), calls),
        other => panic!("no stack {other:?}"),
    }
}

const CHILD: &str = "BASELINE_CHILD";

fn main() {
    if std::env::var_os(CHILD).is_some() {
        return once();
    }
    if let Ok(stack) = std::env::var("INSTR_STACK") {
        return drive(&stack);
    }
    common::ratios::over_processes(CHILD, &[]);
}
