//! Tracing output, in a test binary of its own: `tracing` caches per call site whether
//! anyone listens, so a subscriber set for one test must not race with other tests'
//! call sites in the same process.

#[path = "../support/mod.rs"]
mod support;

mod breaker;
mod retry;
