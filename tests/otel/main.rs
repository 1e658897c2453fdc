//! Telemetry checked against the real things, in a test binary of its own (`tracing`
//! caches per call site whether anyone listens): OpenTelemetry's SDK with its
//! in-memory exporters, spans through `tracing-opentelemetry`, and a Prometheus
//! exporter's text output.

#[path = "../support/mod.rs"]
mod support;

#[cfg(all(feature = "test-util", feature = "metrics"))]
mod metrics;
#[cfg(all(feature = "test-util", feature = "metrics"))]
mod prometheus;
#[cfg(feature = "test-util")]
mod spans;
