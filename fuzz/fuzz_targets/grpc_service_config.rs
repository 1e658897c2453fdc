//! Fuzz target `grpc_service_config`: see `checks/grpc_service_config.rs` for the
//! properties it checks.
#![no_main]

#[path = "../checks/mod.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::grpc_service_config::check(data));
