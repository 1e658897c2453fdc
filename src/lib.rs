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
//! use backstop::{ReplayBody, RetryLayer, RetryPolicy};
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
//! let mut client = ServiceBuilder::new()
//!     .layer(RetryLayer::new(RetryPolicy::default()))
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
//! The layers talk through request extensions, never by naming each other; each
//! works alone. Outer to inner:
//!
//! ```text
//!  caller
//!    │   IdempotencyKeyLayer    one key per POST/PATCH call, before any attempt
//!    │   CircuitBreakerLayer    per origin; one outcome per call
//!    │   BudgetLayer            per origin; retries ≤ ratio of first attempts
//!    ▼   RetryLayer             the attempt loop: classify, gates, wait, re-send
//!        HedgeLayer             extra copies of a slow idempotent attempt
//!        ProgressTrackingLayer          records how far each attempt got onto the wire
//!        transport              hyper-util Client, or any Service<Request<ReplayBody<B>>>
//! ```
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
//! 1. a response whose status is not retryable is an answer, returned as it is;
//! 2. a failure re-sending cannot cure (invalid request, configuration, TLS, a
//!    failed request body) is never re-sent;
//! 3. `x-should-retry: true|false` decides when present;
//! 4. a request the server did not process (425, HTTP/2 `REFUSED_STREAM`, a stream
//!    refused by `GOAWAY`, canceled or refused before it started) is retryable for
//!    every method;
//! 5. an idempotent method, or a request with an idempotency key, is retryable;
//! 6. anything else (a POST or PATCH without a key) only when nothing of it was
//!    written.
//!
//! A retryable outcome must then pass the gates, each refusal recorded as the
//! [`StopReason`](policy::StopReason): attempts left, a replayable body, the
//! `Retry-After` cap, the deadline, the breaker and the budget.
//!
//! ## How transport errors are read
//!
//! [`policy::classify_error`] walks the error's source chain:
//!
//! | signal | kind | re-sent |
//! |---|---|---|
//! | hyper-util `is_connect()` with io refused / reset / timed out / not connected | `Connect` | any method |
//! | hyper-util `is_connect()` otherwise (DNS, TLS, invalid URL) | `Config` | never |
//! | hyper-util error without a cause (unsupported method/version, relative URI) | `Config` | never |
//! | hyper `is_canceled()` | `Canceled` | any method |
//! | h2 remote reset `REFUSED_STREAM` | `RefusedStream` | any method |
//! | h2 remote `GOAWAY` | `GoAway` | any method |
//! | hyper user error with a cause (the request body failed) | `BodyWrite` | never |
//! | hyper `is_incomplete_message()`, io reset / broken pipe, other h2 resets | `Closed` | idempotent or keyed; any method when [`progress`] proves nothing was written |
//! | an attempt timeout, hyper `is_timeout()`, tokio `Elapsed` | `Timeout` | idempotent or keyed; any method when [`progress`] proves nothing was written |
//!
//! # Feature flags
//!
//! - `hyper` (default): recognise hyper, hyper-util and h2 errors when classifying,
//!   and [`progress`], which reads hyper-util's connection capture.
//! - `metrics`: `observe::MetricsObserver`, which records what the layers decide
//!   through the `metrics` facade.
//! - `test-util`: [`test_util`], a loopback upstream with scripted faults for tests.
//!
//! The other layers need nothing beyond the core dependencies, so they are always
//! compiled.

#![forbid(unsafe_code)]
#![warn(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod body;
pub mod budget;
pub mod circuit_breaker;
mod error;
pub mod hedge;
pub mod idempotency_key;
pub mod observe;
pub mod policy;
#[cfg(feature = "hyper")]
#[cfg_attr(docsrs, doc(cfg(feature = "hyper")))]
pub mod progress;
pub mod retry;

pub use body::{OneShot, ReplayBody};
pub use budget::{BudgetLayer, BudgetPolicy, Partition};
pub use circuit_breaker::{CircuitBreakerLayer, CircuitBreakerPolicy};
pub use error::{BoxError, Error, TimedOut};
pub use hedge::{HedgeLayer, HedgePolicy};
pub use idempotency_key::IdempotencyKeyLayer;
pub use observe::ObserveLayer;
pub use policy::RetryPolicy;
#[cfg(feature = "hyper")]
pub use progress::ProgressTrackingLayer;
pub use retry::{Retry, RetryLayer};

#[cfg(feature = "test-util")]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub mod test_util;

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
