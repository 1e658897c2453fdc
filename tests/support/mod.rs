#![allow(dead_code, unreachable_pub)]

pub mod mock;
#[cfg(feature = "test-util")]
pub mod wire;
