//! Fuzz target `config_file`: see `checks/config_file.rs` for the properties it
//! checks.
#![no_main]

#[path = "../checks/mod.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::config_file::check(data));
