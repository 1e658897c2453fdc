//! Fuzz target `replay_body`: see `checks/replay_body.rs` for the property it checks.
#![no_main]

#[path = "../checks/mod.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::replay_body::check(data));
