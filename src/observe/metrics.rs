//! An observer that records through the `metrics` facade.

use std::sync::{Arc, Once};

use metrics::{counter, gauge, histogram, Label, SharedString, Unit};

use super::otel::{error_type, method_name, server_port, status_str};
use super::{reason_label, CallInfo, Event, Observer, Refusal};
use crate::policy::circuit::State;
use crate::policy::event::CallLabels;
use crate::policy::{AttemptOutcome, NoRetry, StopReason};

/// Records what the layers decide through the [`metrics`](https://docs.rs/metrics)
/// facade, so Prometheus, OpenTelemetry, StatsD and the other exporters of that
/// facade see it. Feature `metrics`.
///
/// Each request sent is recorded under OpenTelemetry's HTTP client convention,
/// exactly: `http.client.request.duration`, once per attempt and once per hedged
/// copy, with the convention's attributes and no other. What only backstop knows
/// (the call as a whole, its retries and why one was skipped) has a `backstop.*`
/// name of its own, so the two never give one name two meanings.
///
/// | name | kind | unit | attributes | when |
/// |---|---|---|---|---|
/// | `http.client.request.duration` | histogram | s | `http.request.method`, `server.address`, `server.port`, `url.scheme`, `http.response.status_code`, `error.type` | each request sent ends: each attempt, each hedged copy (a loser cancelled included) |
/// | `backstop.call.duration` | histogram | s | *request*, `route`, `http.response.status_code`, `error.type`, `stop` | each call the retry layer ran ends, every attempt and wait included |
/// | `backstop.calls` | counter | {call} | *request*, `route`, `http.response.status_code`, `error.type`, `stop` | each call ends: the same as `backstop.call.duration`, and each call refused before any attempt (`stop` and `error.type` name the refusal) |
/// | `backstop.attempts` | counter | {request} | *request*, `route`, `http.response.status_code`, `error.type` | each request sent ends (as `http.client.request.duration`, with the route) |
/// | `backstop.retries` | counter | {retry} | *request*, `route`, `reason` | a retry is scheduled; `reason` says why the outcome may be sent again |
/// | `backstop.retries.skipped` | counter | {retry} | *request*, `route`, `reason` | a retryable outcome is not sent again; `reason` says what refused |
/// | `backstop.hedges` | counter | {request} | *request*, `route` | a hedged copy is sent |
/// | `backstop.hedges.won` | counter | {request} | *request*, `route` | a hedged copy's answer wins |
/// | `backstop.hedges.cancelled` | counter | {request} | *request*, `route` | a loser of a hedge race is cancelled (the original included) |
/// | `backstop.breaker.transitions` | counter | {transition} | *server*, `state` | a breaker changes state, by the state entered |
/// | `backstop.breaker.state` | gauge | — | *server* | the breaker's state: 0 closed, 1 open, 2 half-open |
/// | `backstop.budget.ran_dry` | counter | {event} | *server* | a retry or hedge takes the budget's last whole retry |
/// | `backstop.budget.available` | gauge | {retry} | *server* | whole retries left in the origin's budget, at each call's end (0 when it ran dry) |
/// | `backstop.origin.pauses` | counter | {pause} | *server* | an origin is paused by a server's wait hint (429/503 `Retry-After`, gRPC pushback) |
/// | `backstop.origin.pauses.extended` | counter | {pause} | *server* | an ongoing pause is moved out by a later hint |
/// | `backstop.origin.resumes` | counter | {pause} | *server* | a pause ends (told by the first call after its end) |
/// | `backstop.origin.paused` | gauge | — | *server* | 1 while the origin is paused, 0 once resumed |
/// | `backstop.throttle.rejections` | counter | {call} | *server* | the adaptive throttle sheds a call (also counted in `backstop.calls` with `stop="throttled"`) |
/// | `backstop.pause.wait` | histogram | s | *request*, `route` | a call waits for its origin's pause (calls refused by it are `backstop.calls` with `stop="paused"`) |
/// | `grpc.client.call.retries` | histogram | {retry} | `grpc.method`, `grpc.target` | a gRPC call with a history ends, when it made retries (not counting transparent ones) |
/// | `grpc.client.call.transparent_retries` | histogram | {transparent_retry} | `grpc.method`, `grpc.target` | the same, when it made retries of attempts the server did not process or that wrote nothing |
/// | `grpc.client.call.hedges` | histogram | {hedge} | `grpc.method`, `grpc.target` | the same, when it sent hedged copies |
/// | `grpc.client.call.retry_delay` | histogram | s | `grpc.method`, `grpc.target` | a gRPC call with a history ends: its time with no attempt in flight (waits, a hold) |
///
/// The `grpc.*` instruments are gRPC's own retry metrics (gRFC A96), for calls
/// whose request is `application/grpc`: as gRPC, a count of zero is not
/// reported, and a call answered at its first attempt records none of them.
/// `grpc.method` is the route's name (`other` without one: a method path is
/// never a label, as gRPC records an unregistered method), `grpc.target` the
/// call's origin (`http://host:port`, from the request's URI rather than the
/// channel's target string).
///
/// *server* is `server.address`, `server.port` and `url.scheme`; *request* is
/// `http.request.method` and *server*. Every attribute is bounded, and none holds
/// a path, a query, user information, a header value or a body:
///
/// - `http.request.method`: the method, `_OTHER` for one outside RFC 9110 and RFC
///   5789;
/// - `server.address`: the URI's host; `server.port`: its port, or the scheme's
///   (80, 443) when it names none; `url.scheme`: `http`, `https`;
/// - `http.response.status_code`: the status, when a response came (left out for
///   an error or a cancelled loser);
/// - `error.type`: the error kind
///   ([`ErrorKind::as_str`](crate::policy::ErrorKind::as_str): `connect`,
///   `timeout`, …) when the request failed, the status code (`"503"`) for a 4xx
///   or 5xx response, as the convention asks of a client; left out for any other
///   answer and for a hedge loser cancelled (the convention does not count an
///   intended cancellation as an error); for a refused call, the refusal;
/// - `route`: the route's name, present only when a route table named one;
/// - `stop`: why the call's attempts stopped,
///   [`StopReason::as_str`](crate::policy::StopReason::as_str) (`answered`,
///   `not_retryable`, `attempts_exhausted`, `deadline`, …), or for a refused call
///   [`Refusal::as_str`](super::Refusal::as_str) (`circuit_open`, `budget`,
///   `deadline`, `paused`, `throttled`);
/// - `reason` of `backstop.retries`: `server_asked`, `not_processed`,
///   `idempotent`, `keyed`, `nothing_written`;
/// - `reason` of `backstop.retries.skipped`: `method` (a keyless non-idempotent
///   request, a POST say, may have been processed: its 503 or timeout is not sent
///   again), `server_declined` (`x-should-retry: false`, a negative gRPC
///   pushback), `non_replayable` (the body cannot be sent again), `deadline`,
///   `budget`, `circuit_open`, `paused`, `attempts_exhausted`,
///   `retry_after_too_long`;
/// - `state`: `closed`, `open`, `half-open`.
///
/// `http.request.resend_count` is a span attribute in the convention: it is
/// never a label here (it would multiply the series); the retry layer's spans carry
/// it (see the crate's README, "Spans").
///
/// [`describe`](Self::describe) gives each instrument its unit: with
/// `metrics-exporter-prometheus`'s `with_recommended_naming(true)`, Prometheus sees
/// `http_client_request_duration_seconds` and `backstop_calls_total`. The facade
/// has no annotated units, so a counter's `{call}` reaches OpenTelemetry as `1`.
///
/// # Cost
///
/// A call's labels are made once, at its first event, from static and shared
/// strings; each instrument then copies them (one allocation) and the facade
/// hashes its key. `INSTR_STACK=backstop_stack_metrics` in `benches/instructions.rs`
/// counts what the observer adds per call.
///
/// Requests sent are told by the retry layer (a hedge layer's sends through it):
/// a stack without one records no `http.client.request.duration`. Two things are
/// the facade's, not the convention's: every label is a string (`server.port` and
/// `http.response.status_code` reach an OpenTelemetry exporter as `"443"`, not
/// `443`), and histogram buckets are the exporter's to set (the convention
/// advises `0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5,
/// 7.5, 10` seconds).
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
        "Duration of HTTP client requests."
    );
    describe_histogram!(
        "backstop.call.duration",
        Unit::Seconds,
        "Duration of a call, every attempt and wait included"
    );
    describe_counter!("backstop.calls", Unit::Count, "Calls ended or refused");
    describe_counter!("backstop.attempts", Unit::Count, "Requests sent");
    describe_counter!("backstop.retries", Unit::Count, "Retries scheduled");
    describe_counter!(
        "backstop.retries.skipped",
        Unit::Count,
        "Retryable outcomes not sent again"
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
    describe_counter!(
        "backstop.throttle.rejections",
        Unit::Count,
        "Calls the adaptive throttle shed"
    );
    super::grpc_metrics::describe();
}

/// The call's labels, made once per call (see [`CallLabels`]): every value is
/// static or shared, so each event copies them without allocating a string.
fn call_labels(call: &CallInfo) -> CallLabels {
    let origin = call.origin();
    let mut all = Vec::with_capacity(5);
    if let Some(host) = origin.host() {
        all.push(Label::new("server.address", Arc::<str>::from(host)));
    }
    if let Some(port) = server_port(origin.port(), origin.scheme()) {
        let port: SharedString = match port {
            80 => SharedString::const_str("80"),
            443 => SharedString::const_str("443"),
            other => Arc::<str>::from(other.to_string()).into(),
        };
        all.push(Label::new("server.port", port));
    }
    if let Some(scheme) = origin.scheme() {
        let scheme: SharedString = match scheme {
            "http" => SharedString::const_str("http"),
            "https" => SharedString::const_str("https"),
            other => Arc::<str>::from(other).into(),
        };
        all.push(Label::new("url.scheme", scheme));
    }
    let server = all.len();
    all.push(Label::new(
        "http.request.method",
        method_name(call.method()),
    ));
    if let Some(route) = call.route_shared() {
        all.push(Label::new("route", route.clone()));
    }
    CallLabels { all, server }
}

/// The first `n` of the call's labels, with room for the ones an event adds.
fn first(call: &CallInfo, n: impl FnOnce(&CallLabels) -> usize) -> Vec<Label> {
    let labels = call.labels(call_labels);
    let n = n(labels).min(labels.all.len());
    let mut out = Vec::with_capacity(labels.all.len() + 3);
    out.extend_from_slice(&labels.all[..n]);
    out
}

/// *server*: `server.address`, `server.port` (the scheme's when the URI names
/// none) and `url.scheme`, as far as the call's URI has them.
fn server(call: &CallInfo) -> Vec<Label> {
    first(call, |labels| labels.server)
}

/// *request*: *server* and `http.request.method`; with `route` when the call's
/// route has a name.
fn request(call: &CallInfo, route: bool) -> Vec<Label> {
    first(call, |labels| match route {
        true => labels.all.len(),
        false => labels.server + 1,
    })
}

/// Adds `http.response.status_code` and `error.type` as the convention sets them
/// for `outcome`.
fn outcome(labels: &mut Vec<Label>, outcome: AttemptOutcome) {
    if let AttemptOutcome::Status(status) = outcome {
        labels.push(Label::new("http.response.status_code", status_str(status)));
    }
    if let Some(error) = error_type(outcome) {
        labels.push(Label::new("error.type", error));
    }
}

/// The `reason` of a skipped retry.
fn skipped(gate: StopReason) -> &'static str {
    match gate {
        StopReason::NotRetryable(NoRetry::MaybeProcessed) => "method",
        StopReason::NotRetryable(NoRetry::ServerDeclined) => "server_declined",
        StopReason::BodyNotReplayable(_) => "non_replayable",
        other => other.as_str(),
    }
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
            Event::AttemptFinished(e) => {
                let mut labels = request(e.call, false);
                outcome(&mut labels, e.outcome);
                histogram!("http.client.request.duration", labels.clone())
                    .record(e.elapsed.as_secs_f64());
                if let Some(name) = e.call.route_shared() {
                    labels.push(Label::new("route", name.clone()));
                }
                counter!("backstop.attempts", labels).increment(1);
            }
            Event::CallFinished(e) => {
                if let Some(available) = e.budget_available {
                    gauge!("backstop.budget.available", server(e.call)).set(available as f64);
                }
                // A call refused before any attempt was counted when it was refused.
                if e.attempts == 0 {
                    return;
                }
                let mut labels = request(e.call, true);
                outcome(&mut labels, e.outcome);
                labels.push(Label::new("stop", e.stop.as_str()));
                histogram!("backstop.call.duration", labels.clone())
                    .record(e.elapsed.as_secs_f64());
                counter!("backstop.calls", labels).increment(1);
                super::grpc_metrics::call_finished(e);
            }
            Event::CallRefused(e) => {
                if let Refusal::Throttled { .. } = e.refusal {
                    counter!("backstop.throttle.rejections", server(e.call)).increment(1);
                }
                let mut labels = request(e.call, true);
                labels.push(Label::new("error.type", e.refusal.as_str()));
                labels.push(Label::new("stop", e.refusal.as_str()));
                counter!("backstop.calls", labels).increment(1);
            }
            Event::RetryScheduled(e) => {
                let mut labels = request(e.call, true);
                labels.push(Label::new("reason", reason_label(e.reason)));
                counter!("backstop.retries", labels).increment(1);
            }
            Event::RetrySkipped(e) => {
                let mut labels = request(e.call, true);
                labels.push(Label::new("reason", skipped(e.gate)));
                counter!("backstop.retries.skipped", labels).increment(1);
            }
            Event::HedgeSent(e) => counter!("backstop.hedges", request(e.call, true)).increment(1),
            Event::HedgeWon(e) => {
                counter!("backstop.hedges.won", request(e.call, true)).increment(1)
            }
            Event::LoserCancelled(e) => {
                counter!("backstop.hedges.cancelled", request(e.call, true)).increment(1)
            }
            Event::BreakerStateChanged(e) => {
                let mut labels = server(e.call);
                gauge!("backstop.breaker.state", labels.clone()).set(state_value(e.to));
                labels.push(Label::new("state", e.to.to_string()));
                counter!("backstop.breaker.transitions", labels).increment(1);
            }
            Event::BudgetRanDry(e) => {
                counter!("backstop.budget.ran_dry", server(e.call)).increment(1);
                gauge!("backstop.budget.available", server(e.call)).set(0.0);
            }
            Event::OriginPaused(e) => {
                counter!("backstop.origin.pauses", server(e.call)).increment(1);
                gauge!("backstop.origin.paused", server(e.call)).set(1.0);
            }
            Event::OriginPauseExtended(e) => {
                counter!("backstop.origin.pauses.extended", server(e.call)).increment(1)
            }
            Event::OriginResumed(e) => {
                counter!("backstop.origin.resumes", server(e.call)).increment(1);
                gauge!("backstop.origin.paused", server(e.call)).set(0.0);
            }
            Event::CallWaited(e) => histogram!("backstop.pause.wait", request(e.call, true))
                .record(e.wait.as_secs_f64()),
        }
    }
}
