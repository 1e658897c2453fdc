//! Tower middleware that makes HTTP client retries **safe** and **worthwhile**.
//!
//! A retry that repeats a write the server already processed charges a card twice;
//! a retry storm turns a short outage into a long one. backstop re-sends a request
//! only when that is safe (the server did not process it, or repeating it is
//! harmless) and worthwhile (the failure is transient, the deadline leaves time, the
//! retry budget allows it and the origin's circuit breaker is not refusing).
//!
//! # Quick start
//!
//! ```no_run
//! use backstop::{Backstop, ProgressTrackingLayer, ReplayBody};
//! use bytes::Bytes;
//! use http_body_util::Full;
//! use hyper_util::client::legacy::{connect::HttpConnector, Client};
//! use hyper_util::rt::TokioExecutor;
//! use tower::{Service, ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! // The transport is declared once, for the replay body that carries your body type.
//! let transport: Client<HttpConnector, ReplayBody<Full<Bytes>>> =
//!     Client::builder(TokioExecutor::new()).build_http();
//!
//! // The whole stack, every policy given once (here the defaults: retries within
//! // a 20 % budget per origin).
//! let mut client = ServiceBuilder::new()
//!     .layer(Backstop::builder().build()?)
//!     .layer(ProgressTrackingLayer::new())
//!     .service(transport);
//!
//! let req = http::Request::get("http://127.0.0.1:8080/").body(Full::default())?;
//! let res = client.ready().await?.call(req).await?;
//! println!("{}", res.status());
//! # Ok(()) }
//! ```
//!
//! # The stack
//!
//! [`Backstop`] (module [`stack`]) is one service that runs everything, configured
//! once. Inside it a call meets, outer to inner:
//!
//! ```text
//!  caller
//!    │   admission              the key stamped, the breaker asked, the throttle asked
//!    │                          (if set), the budget counted, the origin pause met:
//!    │                          once per call, one origin lookup
//!    ▼   retry                  the attempt loop: classify, gates, wait, re-send
//!        hedge                  extra copies of a slow idempotent attempt
//!        ProgressTrackingLayer  (yours, around a hyper-util client) how far each attempt got
//!        transport              hyper-util Client, or any Service<Request<ReplayBody<B>>>
//! ```
//!
//! Each part is also a layer of its own, for a stack you compose yourself
//! ([`IdempotencyKeyLayer`], [`CircuitBreakerLayer`], [`ThrottleLayer`],
//! [`BudgetLayer`], [`RetryLayer`], [`HedgeLayer`], [`ProgressTrackingLayer`]); the
//! key, breaker, throttle and budget layers run the same admission code as the
//! stack. A call held for a paused origin is bounded by its retry policy's total
//! timeout in both: a [`BudgetLayer`] above a [`RetryLayer`] hands the hold down to
//! it, once a call has shown it that a retry layer is beneath (see
//! [`budget`](budget#the-origin-pause) for the first calls of a new service).
//!
//! The layers share one value per call, the [`CallContext`](policy::CallContext)
//! in the request's extensions: the outermost backstop layer puts it there and the
//! others fill in their part (the idempotency mark, the origin's
//! [`BreakerHandle`](policy::BreakerHandle) and [`BudgetHandle`](policy::BudgetHandle),
//! the deadline, and the current attempt's [`AttemptLog`](policy::AttemptLog)). The
//! retry layer copies that one value into each attempt. Its types, like the rest of
//! the shared vocabulary, are in [`policy`]; a layer that finds no handle skips its
//! check.
//!
//! ## With tower-http
//!
//! A layer between the retry layer and [`ProgressTrackingLayer`] (tower-http's
//! `TraceLayer`, say) sees each attempt. [`ProgressTrackingLayer`] itself stays directly
//! around the hyper-util client: it reads the client's connection capture, which only
//! the client fills ([`progress::CapturesConnection`]). tower-http's `TimeoutLayer`
//! bounds the whole call above the retry layer or the stack; it answers a timeout with
//! a 408 whose body is the response body's `Default`, which hyper's `Incoming` has
//! not, so box the body beneath it:
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use backstop::{Backstop, ProgressTrackingLayer, ReplayBody};
//! use bytes::Bytes;
//! use http::StatusCode;
//! use http_body_util::{BodyExt, Full};
//! use hyper_util::client::legacy::{connect::HttpConnector, Client};
//! use hyper_util::rt::TokioExecutor;
//! use tower::{ServiceBuilder, ServiceExt};
//! use tower_http::map_response_body::MapResponseBodyLayer;
//! use tower_http::timeout::TimeoutLayer;
//! use tower_http::trace::TraceLayer;
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let transport: Client<HttpConnector, ReplayBody<Full<Bytes>>> =
//!     Client::builder(TokioExecutor::new()).build_http();
//! let client = ServiceBuilder::new()
//!     .layer(TimeoutLayer::with_status_code(StatusCode::REQUEST_TIMEOUT, Duration::from_secs(10)))
//!     .layer(MapResponseBodyLayer::new(BodyExt::boxed))
//!     .layer(Backstop::builder().build()?)
//!     .layer(TraceLayer::new_for_http())
//!     .layer(ProgressTrackingLayer::new())
//!     .service(transport);
//!
//! let req = http::Request::get("http://127.0.0.1:8080/").body(Full::default())?;
//! let res = client.oneshot(req).await?;
//! println!("{}", res.status());
//! # Ok(()) }
//! ```
//!
//! [`ProgressTrackingLayer`] over `TraceLayer` does not compile: the trait bound
//! `Trace<…>: CapturesConnection` is not satisfied.
//!
//! ```compile_fail
//! # use backstop::{ProgressTrackingLayer, ReplayBody};
//! # use bytes::Bytes;
//! # use http_body_util::Full;
//! # use hyper_util::client::legacy::{connect::HttpConnector, Client};
//! # use hyper_util::rt::TokioExecutor;
//! # use tower::Layer;
//! # use tower_http::trace::TraceLayer;
//! # let transport: Client<HttpConnector, ReplayBody<Full<Bytes>>> =
//! #     Client::builder(TokioExecutor::new()).build_http();
//! let traced = TraceLayer::new_for_http().layer(transport);
//! let client = ProgressTrackingLayer::new().layer(traced);
//! ```
//!
//! # Seeing what it decides
//!
//! An [`ObserveLayer`] put outermost leaves one [`Observer`](observe::Observer) in
//! each call's context; every layer inside tells it what it decided (calls and
//! attempts finished, retries scheduled and skipped, refusals, hedges, breaker
//! state changes, a budget that ran dry), each event naming the call's origin,
//! route and method. See [`observe`].
//!
//! # When is a request sent again?
//!
//! The decision ladder ([`policy::classify`]) runs in this order, the first match
//! deciding:
//!
//! 0. your own [`Classifier`](policy::Classifier), when the [`Rules`](policy::Rules)
//!    have one and it has an opinion (see below);
//! 1. a `2xx` is always an answer (`x-should-retry` is not read on it); a response
//!    whose status is not retryable is an answer, returned as it is;
//! 2. a failure re-sending cannot cure (invalid request, configuration, a
//!    certificate, a failed request body, a response head too large or malformed)
//!    is never re-sent, nor an error of a kind the rules leave out;
//! 3. `x-should-retry: true|false` decides when present;
//! 4. a request the server did not process (425, HTTP/2 `REFUSED_STREAM`, a stream
//!    refused by `GOAWAY`, canceled or refused before it started, a name that did not
//!    resolve, a TLS handshake cut off) is retryable for every method;
//! 5. an idempotent method, or a request with an idempotency key, is retryable;
//! 6. anything else (a POST or PATCH without a key) only when nothing of it was
//!    written.
//!
//! A retryable outcome must then pass the gates, each refusal recorded as the
//! [`StopReason`](policy::StopReason): attempts left, a replayable body, the
//! `Retry-After` cap, the deadline, the breaker and the budget.
//!
//! ## Your own rules
//!
//! A [`Classifier`](policy::Classifier) (a closure through
//! [`classify_fn`](policy::classify_fn) is enough) is asked first about every
//! response (status and headers) and every error (with its source chain) and
//! answers in the ladder's words, [`Verdict`](policy::Verdict), with an optional
//! wait hint that replaces the backoff the way `Retry-After` does (same cap, same
//! deadline). It cannot make an unsafe retry: "retryable when idempotent" on a
//! POST without a key still needs proof that nothing was written. Give the
//! [`Rules`](policy::Rules) to the stack once
//! ([`BackstopBuilder::rules`](stack::BackstopBuilder::rules)) and they decide for the
//! retry policy, the hedge policy and the breaker; with separate layers, give the same
//! rules to each:
//!
//! ```
//! use std::time::Duration;
//! use backstop::policy::{classify_fn, Observed, Rules, Verdict};
//! use backstop::{Backstop, CircuitBreakerPolicy, HedgePolicy, RetryPolicy};
//!
//! // This API answers "busy" with a 200 and `x-busy: <seconds>`.
//! let rules = Rules::builder()
//!     .classifier(classify_fn(|outcome: Observed<'_>| match outcome {
//!         Observed::Response { headers, .. } => match headers.get("x-busy") {
//!             Some(secs) => {
//!                 let secs = secs.to_str().ok().and_then(|s| s.parse().ok()).unwrap_or(1);
//!                 Verdict::IfIdempotent.after(Duration::from_secs(secs))
//!             }
//!             None => Verdict::NoOpinion.into(),
//!         },
//!         // A failure the application knows is harmless to repeat.
//!         Observed::Error { error: Some(e), .. } if e.to_string() == "lock held" => {
//!             Verdict::NotProcessed.into()
//!         }
//!         Observed::Error { .. } => Verdict::NoOpinion.into(),
//!     }))
//!     .build()?;
//! // Given once: the retry policy, the hedge policy and the breaker decide by them.
//! let stack = Backstop::builder()
//!     .hedge(HedgePolicy::after(Duration::from_millis(50)))
//!     .circuit_breaker(CircuitBreakerPolicy::default())
//!     .rules(rules.clone())
//!     .build()?;
//! # let _ = stack;
//! // With separate layers, each policy is given the same rules.
//! let retry = RetryPolicy::builder().rules(rules.clone()).build()?;
//! let hedge = HedgePolicy::builder().rules(rules.clone()).build()?;
//! let breaker = CircuitBreakerPolicy::builder().rules(rules).build()?;
//! # let _ = (retry, hedge, breaker);
//! # Ok::<(), backstop::policy::InvalidConfig>(())
//! ```
//!
//! gRPC is such a set of rules (feature `grpc`, module `grpc`): the status of a
//! trailers-only response, `grpc-retry-pushback-ms`, idempotency by method path,
//! `grpc-timeout` cut per attempt.
//!
//! Whatever the result's shape, [`Report::of`](policy::Report::of) reads its
//! history, the policy's verdict on the last outcome and the stop reason.
//!
//! ## How transport errors are read
//!
//! [`policy::classify_error`] walks the error's source chain:
//!
//! | signal | kind | re-sent |
//! |---|---|---|
//! | hyper-util `is_connect()` with io refused / reset / not connected / unreachable, or a TLS handshake cut off (`UnexpectedEof`, also inside an `io::Error` that wraps it, as hyper-rustls does) | `Connect` | any method |
//! | hyper-util `is_connect()` with io timed out | `ConnectTimeout` | any method |
//! | hyper-util `is_connect()` whose cause is the connector's `dns error` | `Dns` | any method |
//! | hyper-util `is_connect()` otherwise (a certificate, TLS configuration, invalid URL) | `Config` | never |
//! | hyper-util error without a cause (unsupported method/version, relative URI) | `Config` | never |
//! | hyper `is_canceled()` | `Canceled` | any method |
//! | h2 remote reset `REFUSED_STREAM` | `RefusedStream` | any method |
//! | h2 remote `GOAWAY` | `GoAway` | any method |
//! | hyper user error with a cause (the request body failed) | `BodyWrite` | never |
//! | hyper `is_parse()`: a response head too large, an invalid status line or header | `InvalidResponse` | never: the same server sends it again (a 2 MB header block is not downloaded once per attempt) |
//! | hyper `is_incomplete_message()`, io reset / broken pipe, other h2 resets | `Closed` | idempotent or keyed; any method when [`progress`] proves nothing was written |
//! | an attempt timeout, hyper `is_timeout()`, tokio's or tower's `Elapsed` | `Timeout` | idempotent or keyed; any method when [`progress`] proves nothing was written |
//! | (feature `reqwest-middleware`) `reqwest::Error` with `is_connect()`: refused, reset, unreachable, a name that did not resolve, timed out while connecting | `Connect`, `Dns`, `ConnectTimeout` | any method |
//! | `reqwest::Error` with `is_connect()` otherwise (a certificate, TLS configuration), or `is_builder()` | `Config` | never |
//! | `reqwest::Error` with `is_timeout()` after connecting | `Timeout` | idempotent or keyed |
//!
//! # Feature flags
//!
//! - `hyper` (default): recognise hyper, hyper-util and h2 errors when classifying,
//!   and [`progress`], which reads hyper-util's connection capture.
//! - `grpc`: gRPC's rules for the retry, hedge and breaker layers (no tonic
//!   dependency).
//! - `metrics`: `observe::MetricsObserver`, which records what the layers decide
//!   through the `metrics` facade.
//! - `test-util`: [`test_util`], a loopback upstream with scripted faults for tests.
//! - `reqwest-middleware`: [`reqwest`](mod@crate::reqwest), backstop as a
//!   `reqwest-middleware` middleware (reqwest 0.13, reqwest-middleware 0.5), and
//!   reqwest's native retry configured from a [`RetryPolicy`]; it turns on `hyper`.
//! - `redis`: `fleet::RedisStore`, through which the replicas of a [`fleet`] share
//!   origin pauses and one leased retry budget (the `redis` crate, tokio, its
//!   reconnecting connection manager). The [`fleet`] module itself, and its
//!   in-process store, are always compiled.
//!
//! The other layers need nothing beyond the core dependencies, so they are always
//! compiled.
//!
//! # Replicas
//!
//! Each process keeps its own budget and pauses unless its budget is given a
//! [`fleet::Fleet`]: then the replicas that share its store learn a server's pause
//! once for the fleet and lease one retry budget (the ratio of the fleet's first
//! attempts plus one floor), with no network round trip on a call's path and
//! falling back to their own state when the store is slow or down. Breakers stay
//! local. See [`fleet`].

#![forbid(unsafe_code)]
#![warn(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]
#![cfg_attr(docsrs, feature(doc_cfg))]

/// `get_ref`, `get_mut` and `into_inner` for a middleware whose inner service is
/// its `inner` field: written once for every layer.
macro_rules! inner_accessors {
    () => {
        /// The inner service.
        pub fn get_ref(&self) -> &S {
            &self.inner
        }

        /// The inner service, mutably.
        pub fn get_mut(&mut self) -> &mut S {
            &mut self.inner
        }

        /// The inner service.
        pub fn into_inner(self) -> S {
            self.inner
        }
    };
}
pub(crate) use inner_accessors;

mod admit;
pub mod body;
pub mod budget;
pub mod circuit_breaker;
pub mod config;
pub mod fleet;
#[cfg(feature = "grpc")]
#[cfg_attr(docsrs, doc(cfg(feature = "grpc")))]
pub mod grpc;
pub mod hedge;
pub mod idempotency_key;
pub mod observe;
mod origin;
pub mod policy;
#[cfg(feature = "hyper")]
#[cfg_attr(docsrs, doc(cfg(feature = "hyper")))]
pub mod progress;
#[cfg(feature = "reqwest-middleware")]
#[cfg_attr(docsrs, doc(cfg(feature = "reqwest-middleware")))]
pub mod reqwest;
pub mod retry;
pub mod stack;
pub mod throttle;

pub use body::{OneShot, ReplayBody};
pub use budget::{BudgetLayer, BudgetPolicy};
pub use circuit_breaker::{CircuitBreakerLayer, CircuitBreakerPolicy};
pub use hedge::{HedgeLayer, HedgePolicy};
pub use idempotency_key::IdempotencyKeyLayer;
pub use observe::ObserveLayer;
pub use origin::Partition;
pub use policy::error::{BoxError, Error, OriginPaused, TimedOut};
#[cfg(feature = "hyper")]
pub use progress::ProgressTrackingLayer;
pub use retry::{Retry, RetryLayer, RetryPolicy};
pub use stack::{Backstop, BackstopLayer};
pub use throttle::{ThrottleLayer, ThrottlePolicy};

/// The old name of [`BudgetPolicy`].
#[deprecated(since = "0.1.0", note = "renamed `BudgetPolicy`")]
pub type RetryBudget = BudgetPolicy;

/// The old name of [`CircuitBreakerPolicy`] (the breaker's settings).
/// `circuit_breaker::CircuitBreaker` is the service, as tower names services.
#[deprecated(
    since = "0.1.0",
    note = "the settings are `CircuitBreakerPolicy`; `circuit_breaker::CircuitBreaker` is the service"
)]
pub type CircuitBreaker = CircuitBreakerPolicy;

/// The old name of [`HedgePolicy`] (the hedge layer's settings). `hedge::Hedge` is
/// the service, as tower names services.
#[deprecated(
    since = "0.1.0",
    note = "the settings are `HedgePolicy`; `hedge::Hedge` is the service"
)]
pub type Hedge = HedgePolicy;

/// The old name of [`ProgressTrackingLayer`].
#[cfg(feature = "hyper")]
#[deprecated(since = "0.1.0", note = "renamed `ProgressTrackingLayer`")]
pub type ProgressLayer = ProgressTrackingLayer;

#[cfg(feature = "test-util")]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub mod test_util;

// The README's examples include the reqwest one, so they run with its feature (the
// README's test command runs `cargo test --all-features`).
#[cfg(all(doctest, feature = "reqwest-middleware"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
