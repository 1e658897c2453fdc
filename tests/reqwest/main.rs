//! Integration tests of the reqwest adapter: a real reqwest client, through
//! reqwest-middleware, against real loopback servers.
#![cfg(all(feature = "reqwest-middleware", feature = "test-util"))]

#[path = "../support/mod.rs"]
mod support;

mod delegated;
mod kit;
mod middleware;
mod observed;
mod own_retry;
