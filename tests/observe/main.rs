//! The observer hook: what each layer tells, on the paused clock and over real
//! loopback upstreams, and the `metrics` observer's counts.

#[path = "../support/mod.rs"]
mod support;

mod events;
mod grpc_metrics;
mod many;
#[cfg(feature = "metrics")]
mod metrics;
mod record;
