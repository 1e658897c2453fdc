//! Fuzz target `head_copy`: see `checks/head_copy.rs` for the property it checks.
#![no_main]

#[path = "../checks/mod.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::head_copy::check(data));
