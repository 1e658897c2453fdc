//! Fuzz target `retry_after`: see `checks/retry_after.rs` for the property it checks.
#![no_main]

#[path = "../checks/mod.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::retry_after::check(data));
