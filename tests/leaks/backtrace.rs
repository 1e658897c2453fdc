//! A failed call through the tower stack carries no backtrace, even with
//! `RUST_BACKTRACE=1`.
//!
//! Whether std captures is decided once per process from the environment, so the
//! calls run in a child process of this test binary with `RUST_BACKTRACE=1`.
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

#[test]
fn a_failed_call_through_the_tower_stack_carries_no_backtrace() {
    let child = Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--exact",
            "backtrace::failed_calls",
            "--ignored",
            "--nocapture",
        ])
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

#[tokio::test]
#[ignore = "run by a_failed_call_through_the_tower_stack_carries_no_backtrace, with RUST_BACKTRACE=1"]
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
