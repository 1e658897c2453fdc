//! gRPC's own retry metrics (gRFC A96), recorded for gRPC calls by
//! [`MetricsObserver`](super::MetricsObserver).

use metrics::{describe_histogram, histogram, Label, SharedString, Unit};

use super::CallFinished;

pub(super) const RETRIES: &str = "grpc.client.call.retries";
pub(super) const TRANSPARENT_RETRIES: &str = "grpc.client.call.transparent_retries";
pub(super) const HEDGES: &str = "grpc.client.call.hedges";
pub(super) const RETRY_DELAY: &str = "grpc.client.call.retry_delay";

pub(super) fn describe() {
    describe_histogram!(
        RETRIES,
        Unit::Count,
        "Number of retries during the client call"
    );
    describe_histogram!(
        TRANSPARENT_RETRIES,
        Unit::Count,
        "Number of transparent retries during the client call"
    );
    describe_histogram!(
        HEDGES,
        Unit::Count,
        "Number of hedges during the client call"
    );
    describe_histogram!(
        RETRY_DELAY,
        Unit::Seconds,
        "Total time of delay while there is no active attempt during the client call"
    );
}

/// At the end of a gRPC call that has a history (it retried, hedged, was held or
/// stopped on a gate), records gRPC's per-call retry histograms as gRFC A96 has
/// them: the counts only when above zero, the delay always. A call answered at
/// its first attempt records none: its counts are zero, which gRPC does not
/// report, and it waited for nothing.
pub(super) fn call_finished(e: &CallFinished<'_>) {
    let (true, Some(history)) = (e.call.is_grpc(), e.history) else {
        return;
    };
    // `grpc.method` is the route's name: a method path is never a label (gRPC
    // itself records an unregistered method as "other").
    let method: SharedString = match e.call.route_shared() {
        Some(route) => route.clone().into(),
        None => SharedString::const_str("other"),
    };
    let labels = vec![
        Label::new("grpc.method", method),
        Label::new("grpc.target", e.call.origin().to_string()),
    ];
    let transparent = history.transparent_retries();
    let retries = history.retries().saturating_sub(transparent);
    for (name, count) in [
        (RETRIES, retries),
        (TRANSPARENT_RETRIES, transparent),
        (HEDGES, history.hedges()),
    ] {
        if count > 0 {
            histogram!(name, labels.clone()).record(count as f64);
        }
    }
    histogram!(RETRY_DELAY, labels).record(history.waited().as_secs_f64());
}
