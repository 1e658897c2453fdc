#![allow(dead_code, unreachable_pub)]

pub mod gates;
pub mod mock;
pub mod raw;
pub mod requests;
#[cfg(feature = "test-util")]
pub mod wire;
