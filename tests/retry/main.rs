//! Integration tests of `retry`, against real hyper servers on 127.0.0.1 where the wire matters.

#[path = "../support/mod.rs"]
mod support;

#[path = "../observe/record.rs"]
mod record;

mod attempts;
mod backoff;
mod replay;
mod wire;
