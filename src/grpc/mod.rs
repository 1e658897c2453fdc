//! gRPC's failure rules for the retry, hedge and breaker layers (feature `grpc`).
//!
//! A gRPC call fails inside an HTTP 200: a server that fails at once sends a
//! *trailers-only* response, whose headers carry `grpc-status`. Without these
//! rules backstop sees a 200 and returns it as an answer; with them it reads the
//! status the way gRPC's retry design (A6) does, and stays a set of [`Rules`], not
//! a layer of its own:
//!
//! - **The status** is read from the response headers of a trailers-only response
//!   (`grpc-status`, HTTP 200). A response that sent headers without a status is
//!   *committed* (its messages and trailers follow): it is an answer, never
//!   re-sent. An HTTP status other than 200, from a proxy, maps to a gRPC code as
//!   gRPC's clients map it: 429, 502, 503 and 504 are `UNAVAILABLE`.
//! - **Retryable codes** are a setting ([`GrpcRulesBuilder::retryable_codes`],
//!   `UNAVAILABLE` by default); every other code is an answer.
//! - **`grpc-retry-pushback-ms`**: a valid non-negative value replaces the backoff
//!   and is waited exactly (a value over the policy's
//!   [`max_retry_after`](crate::RetryPolicy::max_retry_after), or one the deadline
//!   leaves no time for, ends the call, as a long `Retry-After` does); a negative or
//!   unparsable value means "do not retry"
//!   ([`NoRetry::ServerDeclined`](crate::policy::NoRetry::ServerDeclined)).
//! - **The pushback pauses the origin** as a 429's `Retry-After` does, when a
//!   [`BudgetLayer`](crate::BudgetLayer) keeps the origin's account: a valid
//!   pushback above zero on an `UNAVAILABLE` or `RESOURCE_EXHAUSTED` trailers-only
//!   response keeps every call to the origin away until it ends (capped by the
//!   budget's [`max_pause`](crate::budget::BudgetPolicy::max_pause)), whether the
//!   call retries it or returns it. The response itself says it is gRPC
//!   (`content-type: application/grpc`), so the budget layer, which runs no
//!   rules, reads it too.
//! - **Idempotency** comes from the method path, not the HTTP method (every gRPC
//!   request is a POST): a list of idempotent `/package.Service/Method` paths, or a
//!   whole `/package.Service/`, or [`all_idempotent`](GrpcRulesBuilder::all_idempotent)
//!   for a [route](crate::retry::Route) of the retry layer whose methods all are.
//!   A retryable code on another method is not re-sent (a trailers-only response
//!   proves the request was written), while `REFUSED_STREAM` and `GOAWAY` still make
//!   any call re-sendable: the server did not process it.
//! - **Each attempt's `grpc-timeout`** is cut to the time the attempt has (its
//!   attempt timeout, or what is left before the call's deadline), so the server
//!   stops working on an attempt the client has given up on.
//! - **Retries carry `grpc-previous-rpc-attempts`**: the number of attempts before
//!   this one.
//!
//! Transport errors go through the built-in ladder as for any HTTP call.
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use backstop::grpc::{self, Code};
//! use backstop::{Backstop, CircuitBreakerPolicy, HedgePolicy, RetryPolicy};
//!
//! let rules = grpc::rules()
//!     .retryable_codes([Code::Unavailable, Code::ResourceExhausted])
//!     .idempotent("/shop.Catalog/")          // every method of a service
//!     .idempotent("/shop.Orders/GetOrder")   // one method
//!     .build()?;
//! let policy = RetryPolicy::builder().timeout(Duration::from_secs(2)).build()?;
//! // Given to the stack once, the rules decide for the retry policy, the hedge
//! // policy (idempotent methods are hedged) and the breaker (an UNAVAILABLE counts
//! // as a failure).
//! let stack = Backstop::builder()
//!     .retry(policy)
//!     .hedge(HedgePolicy::after(Duration::from_millis(50)))
//!     .circuit_breaker(CircuitBreakerPolicy::default())
//!     .rules(rules.clone())
//!     .build()?;
//! // With separate layers, each policy is given them: `RetryPolicy::builder().rules(rules)`.
//! # let _ = (stack, rules);
//! # Ok::<(), backstop::policy::InvalidConfig>(())
//! ```
//!
//! Over a tonic `Channel`, the retry layer sits between tonic's client and the
//! channel, with the replay body mapped back into tonic's body type (see
//! `examples/grpc.rs`):
//!
//! ```text
//! let svc = ServiceBuilder::new()
//!     .layer(RetryLayer::new(policy))
//!     .map_request(|req: http::Request<ReplayBody<tonic::body::Body>>| req.map(tonic::body::Body::new))
//!     .service(channel);
//! let mut client = tonic::client::Grpc::new(svc);
//! ```

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};

use crate::policy::grpc_status::{parse_digits, GRPC_STATUS, PUSHBACK};
use crate::policy::{Classifier, Decision, FirstError, InvalidConfig, Observed, Rules, Verdict};

// The status code and the pushback are read below every layer (the budget layer
// pauses an origin on a pushback without any rules); their public home is here.
pub use crate::policy::grpc_status::Code;

/// The header in which a trailers-only answer that ends a call carries the call's
/// [`History`](crate::policy::History), on one line (its lines joined by `; `),
/// whenever the history rides on the response: more than one attempt, or a gate
/// that stopped a retry. tonic turns such an answer into a `Status` and keeps
/// only its head's headers (as the status's metadata), so this is where a failed
/// call's history is found: `status.metadata().get("backstop-history")`. It
/// names statuses, codes and error kinds only, never a URL, a header value or a
/// body. A call that failed without an answer keeps its [`Error`](crate::Error)
/// as the status's source instead: [`Error::find`](crate::Error::find) reads it.
///
/// ```
/// assert_eq!(backstop::grpc::HISTORY_HEADER, "backstop-history");
/// ```
pub const HISTORY_HEADER: HeaderName = crate::policy::grpc_status::HISTORY;

const TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");
const PREVIOUS: HeaderName = HeaderName::from_static("grpc-previous-rpc-attempts");

/// A builder of gRPC's [`Rules`]; see the [module docs](self).
#[must_use]
pub fn rules() -> GrpcRulesBuilder {
    GrpcRulesBuilder {
        codes: Code::Unavailable.bit(),
        paths: Vec::new(),
        all: false,
    }
}

/// Builds gRPC's [`Rules`], checking every setting.
///
/// Each setter sets its own setting (each `idempotent` adds a path);
/// [`build`](GrpcRulesBuilder::build) checks them in one fixed order, so the result
/// does not depend on the order of the calls.
#[derive(Clone, Debug)]
pub struct GrpcRulesBuilder {
    codes: u32,
    /// The paths given, checked by `build`.
    paths: Vec<String>,
    all: bool,
}

/// Whether `path` is `/package.Service/Method` or `/package.Service/`.
fn is_path(path: &str) -> bool {
    path.len() > 2
        && path.starts_with('/')
        && path[1..].find('/').is_some_and(|i| i > 0)
        && path[1..].matches('/').count() == 1
        && path.is_ascii()
}

impl GrpcRulesBuilder {
    /// Replaces the retryable codes (`UNAVAILABLE` by default). `OK` is refused: it
    /// is always an answer.
    pub fn retryable_codes(mut self, codes: impl IntoIterator<Item = Code>) -> Self {
        self.codes = codes.into_iter().fold(0, |codes, code| codes | code.bit());
        self
    }

    /// Marks a method (`/package.Service/Method`) or a whole service
    /// (`/package.Service/`) idempotent: a retryable code on it is sent again.
    pub fn idempotent(mut self, path: &str) -> Self {
        self.paths.push(path.to_owned());
        self
    }

    /// Every method is idempotent: for a route whose methods all are.
    pub fn all_idempotent(mut self) -> Self {
        self.all = true;
        self
    }

    /// The rules, or the first invalid setting.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] names the setting and what is wrong with it: `OK` among
    /// the retryable codes, then a path that is not a method's or a service's,
    /// whatever the order of the calls.
    pub fn build(self) -> Result<Rules, InvalidConfig> {
        let mut error = FirstError::default();
        if self.codes & Code::Ok.bit() != 0 {
            error.fail("retryable_codes", "OK is an answer, never retried".into());
        }
        if !self.paths.iter().all(|path| is_path(path)) {
            error.fail(
                "idempotent",
                "must be /package.Service/Method or /package.Service/".into(),
            );
        }
        error.check()?;
        Rules::builder()
            .classifier(GrpcClassifier {
                codes: self.codes,
                paths: self.paths.into(),
                all: self.all,
            })
            .stamp_with(stamp)
            .build()
    }
}

/// gRPC's rules, as a classifier.
struct GrpcClassifier {
    codes: u32,
    paths: Arc<[String]>,
    all: bool,
}

impl fmt::Debug for GrpcClassifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GrpcClassifier")
            .field("codes", &self.codes)
            .field("paths", &self.paths.len())
            .field("all", &self.all)
            .finish()
    }
}

impl Classifier for GrpcClassifier {
    fn classify(&self, outcome: Observed<'_>) -> Decision {
        let Observed::Response { status, headers } = outcome else {
            // Transport errors: the built-in ladder.
            return Decision::NO_OPINION;
        };
        let code = if status == StatusCode::OK {
            match headers.get(&GRPC_STATUS) {
                Some(value) => Code::from_header(value),
                // Headers without a status: committed, the messages follow.
                None => return Verdict::Answer.into(),
            }
        } else {
            Code::from_http(status)
        };
        if code == Code::Ok || self.codes & code.bit() == 0 {
            return Verdict::Answer.into();
        }
        match headers.get(&PUSHBACK) {
            None => Verdict::IfIdempotent.into(),
            Some(value) => match parse_digits(value.as_bytes(), 19) {
                Some(ms) => Verdict::IfIdempotent.after(Duration::from_millis(ms)),
                // Negative or unparsable: do not retry.
                None => Verdict::Declined.into(),
            },
        }
    }

    fn is_idempotent(&self, _method: &Method, uri: &Uri) -> Option<bool> {
        if self.all {
            return Some(true);
        }
        let path = uri.path();
        Some(self.paths.iter().any(|p| {
            if p.ends_with('/') {
                path.starts_with(p.as_str())
            } else {
                path == p
            }
        }))
    }
}

/// Stamps one attempt's gRPC headers: `grpc-previous-rpc-attempts` on a retry, and
/// `grpc-timeout` cut to `time_left`.
pub(crate) fn stamp(headers: &mut HeaderMap, attempt: u32, time_left: Option<Duration>) {
    if attempt > 1 {
        headers.insert(PREVIOUS, HeaderValue::from(attempt - 1));
    }
    if let Some(left) = time_left {
        let own = headers.get(&TIMEOUT).and_then(parse_timeout);
        if own.is_none_or(|own| left < own) {
            headers.insert(TIMEOUT, encode_timeout(left));
        }
    }
}

/// A `grpc-timeout` value: 1 to 8 digits and a unit.
fn parse_timeout(value: &HeaderValue) -> Option<Duration> {
    let bytes = value.as_bytes();
    let (unit, digits) = bytes.split_last()?;
    let n = parse_digits(digits, 8)?;
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

/// The finest `grpc-timeout` value that fits 8 digits, rounded down (the server
/// gives up no later than the client), at least one microsecond.
fn encode_timeout(d: Duration) -> HeaderValue {
    const MAX: u128 = 99_999_999;
    let (n, unit) = if d.as_micros() <= MAX {
        (d.as_micros().max(1), 'u')
    } else if d.as_millis() <= MAX {
        (d.as_millis(), 'm')
    } else {
        (u128::from(d.as_secs()).min(MAX), 'S')
    };
    // Digits and a letter are always a valid value.
    HeaderValue::from_str(&format!("{n}{unit}")).unwrap_or(HeaderValue::from_static("1u"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::same_in_every_order;
    use crate::policy::{classify, Classification, Outcome, RequestFacts};
    use crate::policy::{NoRetry, RetryReason};
    use crate::RetryPolicy;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn a_status_past_u32_is_unknown_not_a_code_it_wraps_to() {
        let code = |v: &'static str| Code::from_header(&HeaderValue::from_static(v));
        assert_eq!(code("14"), Code::Unavailable);
        assert_eq!(code("4294967295"), Code::Unknown);
        // 2^32 + 14 would wrap to UNAVAILABLE, which is retried.
        assert_eq!(code("4294967310"), Code::Unknown);
        assert_eq!(code("9999999999"), Code::Unknown);
        assert_eq!(code("99999999999"), Code::Unknown);
    }

    #[test]
    fn the_status_is_read_from_a_trailers_only_response() {
        let rules = rules().idempotent("/a.B/Get").build().unwrap();
        let c = rules.classifier().unwrap();
        let decide = |status: u16, pairs: &[(&'static str, &'static str)]| {
            let h = headers(pairs);
            c.classify(Observed::Response {
                status: StatusCode::from_u16(status).unwrap(),
                headers: &h,
            })
        };
        let cases: Vec<(&str, Decision)> = vec![
            ("unavailable", decide(200, &[("grpc-status", "14")])),
            ("ok", decide(200, &[("grpc-status", "0")])),
            ("internal", decide(200, &[("grpc-status", "13")])),
            ("junk status", decide(200, &[("grpc-status", "x")])),
            (
                "committed",
                decide(200, &[("content-type", "application/grpc")]),
            ),
            ("proxy 503", decide(503, &[])),
            ("proxy 429", decide(429, &[])),
            ("proxy 500", decide(500, &[])),
            (
                "pushback",
                decide(
                    200,
                    &[("grpc-status", "14"), ("grpc-retry-pushback-ms", "250")],
                ),
            ),
            (
                "negative pushback",
                decide(
                    200,
                    &[("grpc-status", "14"), ("grpc-retry-pushback-ms", "-1")],
                ),
            ),
            (
                "junk pushback",
                decide(
                    200,
                    &[("grpc-status", "14"), ("grpc-retry-pushback-ms", "soon")],
                ),
            ),
        ];
        let want = [
            Decision::from(Verdict::IfIdempotent),
            Verdict::Answer.into(),
            Verdict::Answer.into(),
            Verdict::Answer.into(),
            Verdict::Answer.into(),
            Verdict::IfIdempotent.into(),
            Verdict::IfIdempotent.into(),
            Verdict::Answer.into(),
            Verdict::IfIdempotent.after(Duration::from_millis(250)),
            Verdict::Declined.into(),
            Verdict::Declined.into(),
        ];
        for ((name, got), want) in cases.into_iter().zip(want) {
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn idempotency_comes_from_the_path() {
        let rules = rules()
            .idempotent("/a.B/Get")
            .idempotent("/a.Reads/")
            .build()
            .unwrap();
        let uri = |p: &str| -> Uri { format!("http://h{p}").parse().unwrap() };
        assert!(rules.is_idempotent(&Method::POST, &uri("/a.B/Get")));
        assert!(!rules.is_idempotent(&Method::POST, &uri("/a.B/Put")));
        assert!(rules.is_idempotent(&Method::POST, &uri("/a.Reads/Any")));
        let all = super::rules().all_idempotent().build().unwrap();
        assert!(all.is_idempotent(&Method::POST, &uri("/x.Y/Z")));
        for bad in ["", "/", "a.B/Get", "/a.B", "//Get", "/a.B/Get/x"] {
            assert_eq!(
                super::rules()
                    .idempotent(bad)
                    .build()
                    .unwrap_err()
                    .setting(),
                "idempotent",
                "{bad:?}"
            );
        }
        assert!(super::rules().retryable_codes([Code::Ok]).build().is_err());
    }

    #[test]
    fn the_rules_do_not_depend_on_the_order_of_the_calls() {
        type Step = dyn Fn(GrpcRulesBuilder) -> GrpcRulesBuilder;
        let uri = |p: &str| -> Uri { format!("http://h{p}").parse().unwrap() };
        let built = |b: GrpcRulesBuilder| {
            b.build().map(|r| {
                ["/a.B/Get", "/a.B/Put", "/a.Reads/Any"]
                    .map(|p| r.is_idempotent(&Method::POST, &uri(p)))
            })
        };
        let steps: [&Step; 3] = [
            &|b| b.idempotent("/a.B/Get"),
            &|b| b.retryable_codes([Code::Unavailable, Code::Aborted]),
            &|b| b.idempotent("/a.Reads/"),
        ];
        let seen = same_in_every_order(&rules(), &steps, built);
        assert_eq!(seen, Ok([true, false, true]));
        let steps: [&Step; 2] = [&|b| b.idempotent("a.B"), &|b| b.retryable_codes([Code::Ok])];
        let err = same_in_every_order(&rules(), &steps, built).unwrap_err();
        assert_eq!(err.setting(), "retryable_codes");
    }

    #[test]
    fn write_safety_holds_for_a_method_not_listed() {
        let policy = RetryPolicy::builder()
            .rules(rules().build().unwrap())
            .build()
            .unwrap();
        let h = headers(&[("grpc-status", "14")]);
        let outcome = Outcome::Response {
            status: StatusCode::OK,
            headers: &h,
        };
        let post = RequestFacts {
            method: &Method::POST,
            keyed: false,
        };
        assert_eq!(
            classify(&policy, post, outcome, None),
            Classification::NotRetryable(NoRetry::MaybeProcessed)
        );
        let keyed = RequestFacts {
            method: &Method::POST,
            keyed: true,
        };
        assert_eq!(
            classify(&policy, keyed, outcome, None),
            Classification::Retryable(RetryReason::Keyed)
        );
    }

    #[test]
    fn timeouts_are_cut_and_attempts_counted() {
        let mut h = headers(&[("grpc-timeout", "5S")]);
        stamp(&mut h, 1, Some(Duration::from_millis(1500)));
        assert_eq!(h["grpc-timeout"], "1500000u");
        assert!(!h.contains_key("grpc-previous-rpc-attempts"));
        // A shorter timeout of the caller's own is kept.
        let mut h = headers(&[("grpc-timeout", "100m")]);
        stamp(&mut h, 3, Some(Duration::from_secs(2)));
        assert_eq!(h["grpc-timeout"], "100m");
        assert_eq!(h["grpc-previous-rpc-attempts"], "2");
        let mut h = HeaderMap::new();
        stamp(&mut h, 2, Some(Duration::from_secs(200)));
        assert_eq!(h["grpc-timeout"], "200000m");
        stamp(&mut h, 2, Some(Duration::ZERO));
        assert_eq!(h["grpc-timeout"], "1u");
        assert_eq!(encode_timeout(Duration::MAX), "99999999S");
        for (v, want) in [
            ("1H", Some(Duration::from_secs(3600))),
            ("2M", Some(Duration::from_secs(120))),
            ("7n", Some(Duration::from_nanos(7))),
            ("123456789m", None),
            ("m", None),
            ("5x", None),
        ] {
            assert_eq!(parse_timeout(&HeaderValue::from_static(v)), want, "{v}");
        }
    }
}
