//! A failed call through the tower stack carries no backtrace, even with
//! `RUST_BACKTRACE=1`.
//!
//! Whether std captures is decided once per process from the environment, so the
//! test runs its calls in a child process of this test binary (itself again, with
//! `RUST_BACKTRACE=1`).
//!
//! The tower stack's errors (through hyper-util and tonic) are checked. The reqwest
//! adapter is not: reqwest-middleware carries a middleware's error in an
//! `anyhow::Error`, and every way of making one captures a backtrace when the
//! environment turns library backtraces on (on stable Rust, anyhow cannot ask the
//! error whether it has one); the adapter's docs say so.

use std::backtrace::{Backtrace, BacktraceStatus};
use std::process::Command;

use backstop::test_util::Protocol;
use backstop::Backstop;

use crate::faults::{breaker, policy};
use crate::secrets::{closed_port, url};
use crate::support::wire::within_10s;

/// Set in the child process this test starts.
const CHILD: &str = "BACKSTOP_BACKTRACE_CHILD";

/// In this process, starts itself again as a child with `RUST_BACKTRACE=1` and
/// asserts that the child ran and passed; in the child, makes the failed calls.
#[test]
fn a_failed_call_through_the_tower_stack_carries_no_backtrace() {
    if std::env::var_os(CHILD).is_some() {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(failed_calls());
        return;
    }
    let child = Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--exact",
            "backtrace::a_failed_call_through_the_tower_stack_carries_no_backtrace",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .env("RUST_BACKTRACE", "1")
        .env_remove("RUST_LIB_BACKTRACE")
        .output()
        .expect("the child runs");
    let out = String::from_utf8_lossy(&child.stdout);
    let err = String::from_utf8_lossy(&child.stderr);
    assert!(child.status.success(), "{out}\n{err}");
    assert!(out.contains("1 passed"), "{out}\n{err}");
}

/// Asserts that no error along `err`'s chain holds or prints a backtrace.
fn assert_no_backtrace(what: &str, err: &(dyn std::error::Error + 'static)) {
    let mut next = Some(err);
    while let Some(e) = next {
        let text = format!("{e:?} {e:#?} {e} {e:#}").to_lowercase();
        assert!(!text.contains("backtrace"), "{what}: {text}");
        next = e.source();
    }
}

/// The child's calls: a refused connection and the breaker's refusal, through
/// hyper-util and through tonic.
async fn failed_calls() {
    // The environment turns captures on in this process.
    assert_eq!(Backtrace::capture().status(), BacktraceStatus::Captured);
    within_10s(async {
        let stack = Backstop::builder()
            .retry(policy())
            .circuit_breaker(breaker())
            .build()
            .expect("a valid stack");
        let url = url(closed_port());
        for _ in 0..2 {
            // A refused connection, then the breaker's refusal.
            let err = crate::through_hyper::send(&stack, Protocol::Http1, &url)
                .await
                .unwrap_err();
            assert_no_backtrace("hyper", &err);
        }
        let mut grpc = crate::through_tonic::client(&stack, closed_port());
        for _ in 0..2 {
            let status = crate::through_tonic::call(&mut grpc).await;
            assert_no_backtrace("tonic", &status);
        }
    })
    .await;
}
