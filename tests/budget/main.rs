//! Integration tests of `budget`, against real hyper servers on 127.0.0.1 where the wire matters.

#[path = "../support/mod.rs"]
mod support;

mod budget;
mod pause;
mod wire;
