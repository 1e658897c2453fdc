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

/// Runs `calls` on a runtime of its own, bounded in time, with `recorder` as the
/// `metrics` recorder and the observer's instruments described to it first (units
/// reach an exporter through the descriptions, given before any instrument).
#[cfg(all(feature = "test-util", feature = "metrics"))]
fn recorded_by(recorder: &impl ::metrics::Recorder, calls: impl std::future::Future<Output = ()>) {
    ::metrics::with_local_recorder(recorder, || {
        backstop::observe::MetricsObserver::new().describe();
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(support::wire::within_10s(calls));
    });
}
