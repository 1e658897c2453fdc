//! The properties the fuzz targets check, shared by the cargo-fuzz targets
//! (`fuzz/fuzz_targets/`) and the stable test binary that replays the committed
//! corpus (`tests/fuzz/`). Each `check` takes raw bytes, decodes them with
//! [`input::Input`] (so neither side needs `arbitrary`) and panics when backstop
//! disagrees with the check's own model.
#![allow(dead_code, unreachable_pub)]

#[cfg(all(feature = "toml", feature = "json", feature = "yaml"))]
pub mod config_file;
#[cfg(feature = "yaml")]
pub mod gateway_httproute;
#[cfg(all(feature = "grpc", feature = "json"))]
pub mod grpc_service_config;
pub mod head_copy;
pub mod input;
pub mod replay_body;
pub mod retry_after;

/// Runs `f` inside a current-thread tokio runtime, made once per thread: the retry
/// layer creates its timers (the drain's time limit) even when nothing waits on them.
pub fn in_runtime<T>(f: impl FnOnce() -> T) -> T {
    thread_local! {
        static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a tokio runtime");
    }
    RUNTIME.with(|rt| {
        let _entered = rt.enter();
        f()
    })
}

/// Asserts what every configuration error promises: one line, with a message.
#[cfg(any(feature = "json", feature = "toml", feature = "yaml"))]
pub fn one_line(err: &backstop::config::ConfigError) {
    let line = err.to_string();
    assert!(!line.contains(['\n', '\r']), "a multi-line error: {line:?}");
    assert!(
        !err.message().is_empty(),
        "an empty error at {:?}",
        err.path()
    );
}

/// Builds the stack `config` gives (a hedging one when it has a hedge policy).
#[cfg(any(feature = "json", feature = "toml", feature = "yaml"))]
pub fn build(config: backstop::config::StackConfig) -> Result<(), backstop::policy::InvalidConfig> {
    match config.hedge.clone() {
        Some(hedge) => config.builder().hedge(hedge).build().map(drop),
        None => config.builder().build().map(drop),
    }
}
