//! Integration tests of `policy::Rules`: a classifier of your own, the retryable
//! error kinds and the defects of issue 10, against real servers on 127.0.0.1.

#[path = "../support/mod.rs"]
mod support;

mod tls;
mod wire;
