//! Integration tests of `test_util`, against real hyper servers on 127.0.0.1 where the wire matters.

#[path = "../support/mod.rs"]
mod support;

mod kit;
