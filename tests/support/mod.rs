#![allow(dead_code, unreachable_pub)]

pub mod mock;
