//! An observer that records through the `metrics` facade.

use std::sync::Once;

use http::Method;
use metrics::{counter, gauge, histogram, Label, Unit};

use super::{outcome_label, reason_label, CallInfo, Event, Observer};
use crate::policy::circuit::State;

/// Records what the layers decide through the [`metrics`](https://docs.rs/metrics)
/// facade, so Prometheus, OpenTelemetry, StatsD and the other exporters of that
/// facade see it. Feature `metrics`.
///
/// It uses the OpenTelemetry HTTP client name where there is one
/// (`http.client.request.duration`) and a `backstop.*` family for the rest:
///
/// | metric | type | unit | labels | what |
/// |---|---|---|---|---|
/// | `http.client.request.duration` | histogram | seconds | origin, route, method, outcome, `http.request.resend_count` | one logical call, every attempt and wait included |
/// | `backstop.calls` | counter | calls | origin, route, method, outcome, stop | calls the retry layer ran, by how they ended and why they stopped |
/// | `backstop.attempts` | counter | requests | origin, route, method, outcome | attempts the retry layer made |
/// | `backstop.attempt.duration` | histogram | seconds | origin, route, method, outcome | one attempt, from its send to its outcome |
/// | `backstop.retries` | counter | requests | origin, route, method, reason | retries scheduled, by why the outcome was retryable |
/// | `backstop.retries.skipped` | counter | requests | origin, route, method, gate | retryable outcomes not retried, by the gate that refused |
/// | `backstop.calls.refused` | counter | calls | origin, route, method, refusal | calls refused before any attempt (`circuit_open`, `budget`, `deadline`, `paused`) |
/// | `backstop.hedges` | counter | requests | origin, route, method | hedged copies sent |
/// | `backstop.hedges.won` | counter | requests | origin, route, method | hedged copies whose answer won |
/// | `backstop.hedges.cancelled` | counter | requests | origin, route, method | losers of a hedge race cancelled (the original included) |
/// | `backstop.breaker.transitions` | counter | transitions | origin, state | breaker state changes, by the state entered |
/// | `backstop.breaker.state` | gauge | — | origin | the breaker's state: 0 closed, 1 open, 2 half-open |
/// | `backstop.budget.ran_dry` | counter | events | origin | a retry or hedge took the budget's last whole retry |
/// | `backstop.budget.available` | gauge | retries | origin | whole retries left in the origin's budget, at each call's end (0 when it ran dry) |
/// | `backstop.origin.pauses` | counter | pauses | origin | origins paused by a server's wait hint (429/503 `Retry-After`, gRPC pushback) |
/// | `backstop.origin.pauses.extended` | counter | pauses | origin | ongoing pauses moved out by a later hint |
/// | `backstop.origin.resumes` | counter | pauses | origin | pauses that ended (told by the first call after the end) |
/// | `backstop.origin.paused` | gauge | — | origin | 1 while the origin is paused, 0 once resumed |
/// | `backstop.pause.wait` | histogram | seconds | origin, route, method | each wait of a call for its origin's pause (the count is the calls that waited; refused ones are `backstop.calls.refused` with `refusal="paused"`) |
///
/// The labels are bounded:
///
/// - `origin`: scheme, host and port (`https://api.example.com:8443`), never
///   user information, path or query;
/// - `route`: the route's name, present only when a route table named one;
/// - `method`: the request method, `_OTHER` for a method outside RFC 9110 and
///   RFC 5789 (as OpenTelemetry does);
/// - `outcome`: the status code (`503`) or the error kind (`connect`,
///   `timeout`, … from [`ErrorKind::as_str`](crate::policy::ErrorKind::as_str));
/// - `stop` and `gate`: [`StopReason::as_str`](crate::policy::StopReason::as_str);
///   `reason`: `server_asked`, `not_processed`, `idempotent`, `keyed`,
///   `nothing_written`; `refusal`: [`Refusal::as_str`](super::Refusal::as_str);
///   `state`: `closed`, `open`, `half-open`;
/// - `http.request.resend_count`: how many times the call's request was sent
///   again, bounded by the policy's attempts.
///
/// # Examples
///
/// ```
/// use backstop::observe::{MetricsObserver, ObserveLayer};
/// use backstop::{RetryLayer, RetryPolicy};
/// use tower::ServiceBuilder;
///
/// # let transport = tower::service_fn(|_req: http::Request<backstop::ReplayBody<http_body_util::Empty<bytes::Bytes>>>| async {
/// #     Ok::<_, std::io::Error>(http::Response::new(http_body_util::Empty::<bytes::Bytes>::new()))
/// # });
/// // Install an exporter's recorder first (metrics-exporter-prometheus, say).
/// let client = ServiceBuilder::new()
///     .layer(ObserveLayer::new(MetricsObserver::new()))
///     .layer(RetryLayer::new(RetryPolicy::default()))
///     .service(transport);
/// # let _ = client;
/// ```
#[derive(Clone, Debug, Default)]
pub struct MetricsObserver {
    _private: (),
}

impl MetricsObserver {
    /// An observer recording into the installed `metrics` recorder.
    pub fn new() -> Self {
        MetricsObserver { _private: () }
    }

    /// Describes every metric (its unit and meaning) to the installed recorder.
    /// The observer does it on its first event; call this to have the
    /// descriptions before any call (exporters list described metrics at once).
    pub fn describe(&self) {
        describe();
    }
}

static DESCRIBED: Once = Once::new();

fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_histogram!(
        "http.client.request.duration",
        Unit::Seconds,
        "Duration of a logical HTTP client call, every attempt and wait included"
    );
    describe_counter!("backstop.calls", Unit::Count, "Calls the retry layer ran");
    describe_counter!("backstop.attempts", Unit::Count, "Attempts sent");
    describe_histogram!(
        "backstop.attempt.duration",
        Unit::Seconds,
        "Duration of one attempt"
    );
    describe_counter!("backstop.retries", Unit::Count, "Retries scheduled");
    describe_counter!(
        "backstop.retries.skipped",
        Unit::Count,
        "Retryable outcomes a gate kept from being retried"
    );
    describe_counter!(
        "backstop.calls.refused",
        Unit::Count,
        "Calls refused before any attempt"
    );
    describe_counter!("backstop.hedges", Unit::Count, "Hedged copies sent");
    describe_counter!("backstop.hedges.won", Unit::Count, "Hedged copies that won");
    describe_counter!(
        "backstop.hedges.cancelled",
        Unit::Count,
        "Losers of a hedge race cancelled"
    );
    describe_counter!(
        "backstop.breaker.transitions",
        Unit::Count,
        "Circuit breaker state changes"
    );
    describe_gauge!(
        "backstop.breaker.state",
        "Circuit breaker state: 0 closed, 1 open, 2 half-open"
    );
    describe_counter!(
        "backstop.budget.ran_dry",
        Unit::Count,
        "Retry budgets that ran dry"
    );
    describe_gauge!(
        "backstop.budget.available",
        Unit::Count,
        "Whole retries left in the retry budget"
    );
    describe_counter!(
        "backstop.origin.pauses",
        Unit::Count,
        "Origins paused by a server's wait hint"
    );
    describe_counter!(
        "backstop.origin.pauses.extended",
        Unit::Count,
        "Origin pauses moved out by a later hint"
    );
    describe_counter!(
        "backstop.origin.resumes",
        Unit::Count,
        "Origin pauses that ended"
    );
    describe_gauge!(
        "backstop.origin.paused",
        "Whether the origin is paused: 1 paused, 0 resumed"
    );
    describe_histogram!(
        "backstop.pause.wait",
        Unit::Seconds,
        "Waits of calls for their origin's pause"
    );
}

/// `method` as a bounded label.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::CONNECT => "CONNECT",
        Method::OPTIONS => "OPTIONS",
        Method::TRACE => "TRACE",
        Method::PATCH => "PATCH",
        _ => "_OTHER",
    }
}

/// The labels every per-call metric carries, then `extra`.
fn labels(call: &CallInfo, extra: &[(&'static str, String)]) -> Vec<Label> {
    let mut labels = Vec::with_capacity(3 + extra.len());
    labels.push(Label::new("origin", call.origin().to_string()));
    if let Some(route) = call.route() {
        labels.push(Label::new("route", route.to_owned()));
    }
    labels.push(Label::new("method", method_label(call.method())));
    for (k, v) in extra {
        labels.push(Label::new(*k, v.clone()));
    }
    labels
}

fn origin(call: &CallInfo) -> Vec<Label> {
    vec![Label::new("origin", call.origin().to_string())]
}

fn state_value(state: State) -> f64 {
    match state {
        State::Closed => 0.0,
        State::Open => 1.0,
        State::HalfOpen => 2.0,
    }
}

impl Observer for MetricsObserver {
    fn on_event(&self, event: &Event<'_>) {
        DESCRIBED.call_once(describe);
        match event {
            Event::CallFinished(e) => {
                let outcome = outcome_label(e.outcome).into_owned();
                let resends = e.attempts.saturating_sub(1).to_string();
                histogram!(
                    "http.client.request.duration",
                    labels(
                        e.call,
                        &[
                            ("outcome", outcome.clone()),
                            ("http.request.resend_count", resends)
                        ]
                    )
                )
                .record(e.elapsed.as_secs_f64());
                counter!(
                    "backstop.calls",
                    labels(
                        e.call,
                        &[("outcome", outcome), ("stop", e.stop.as_str().to_owned())]
                    )
                )
                .increment(1);
                if let Some(available) = e.budget_available {
                    gauge!("backstop.budget.available", origin(e.call)).set(available as f64);
                }
            }
            Event::AttemptFinished(e) => {
                let outcome = outcome_label(e.outcome).into_owned();
                let labels = labels(e.call, &[("outcome", outcome)]);
                counter!("backstop.attempts", labels.clone()).increment(1);
                histogram!("backstop.attempt.duration", labels).record(e.elapsed.as_secs_f64());
            }
            Event::RetryScheduled(e) => {
                let reason = reason_label(e.reason).to_owned();
                counter!("backstop.retries", labels(e.call, &[("reason", reason)])).increment(1);
            }
            Event::RetrySkipped(e) => {
                let gate = e.gate.as_str().to_owned();
                counter!(
                    "backstop.retries.skipped",
                    labels(e.call, &[("gate", gate)])
                )
                .increment(1);
            }
            Event::CallRefused(e) => {
                let refusal = e.refusal.as_str().to_owned();
                counter!(
                    "backstop.calls.refused",
                    labels(e.call, &[("refusal", refusal)])
                )
                .increment(1);
            }
            Event::HedgeSent(e) => counter!("backstop.hedges", labels(e.call, &[])).increment(1),
            Event::HedgeWon(e) => counter!("backstop.hedges.won", labels(e.call, &[])).increment(1),
            Event::LoserCancelled(e) => {
                counter!("backstop.hedges.cancelled", labels(e.call, &[])).increment(1)
            }
            Event::BreakerStateChanged(e) => {
                let mut labels = origin(e.call);
                gauge!("backstop.breaker.state", labels.clone()).set(state_value(e.to));
                labels.push(Label::new("state", e.to.to_string()));
                counter!("backstop.breaker.transitions", labels).increment(1);
            }
            Event::BudgetRanDry(e) => {
                counter!("backstop.budget.ran_dry", origin(e.call)).increment(1);
                gauge!("backstop.budget.available", origin(e.call)).set(0.0);
            }
            Event::OriginPaused(e) => {
                counter!("backstop.origin.pauses", origin(e.call)).increment(1);
                gauge!("backstop.origin.paused", origin(e.call)).set(1.0);
            }
            Event::OriginPauseExtended(e) => {
                counter!("backstop.origin.pauses.extended", origin(e.call)).increment(1)
            }
            Event::OriginResumed(e) => {
                counter!("backstop.origin.resumes", origin(e.call)).increment(1);
                gauge!("backstop.origin.paused", origin(e.call)).set(0.0);
            }
            Event::CallWaited(e) => {
                histogram!("backstop.pause.wait", labels(e.call, &[])).record(e.wait.as_secs_f64())
            }
        }
    }
}
