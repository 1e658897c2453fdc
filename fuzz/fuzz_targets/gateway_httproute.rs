//! Fuzz target `gateway_httproute`: see `checks/gateway_httproute.rs` for the
//! properties it checks.
#![no_main]

#[path = "../checks/mod.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::gateway_httproute::check(data));
