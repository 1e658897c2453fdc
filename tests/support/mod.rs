#![allow(dead_code, unreachable_pub)]

pub mod gates;
pub mod orders;
pub mod policies;
pub mod raw;
pub mod raw_codec;
pub mod requests;
pub mod script;
pub mod shape;
#[cfg(feature = "test-util")]
pub mod wire;
