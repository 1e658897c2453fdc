//! The shared vocabulary of every backstop layer, and its pure decision functions.
//!
//! Layers talk through request extensions, never by naming each other; the types of
//! the handles they leave there live here, together with the decision ladder that
//! says whether an outcome may be sent again, the [`Rules`] it reads (statuses,
//! methods, error kinds and a [`Classifier`] of your own, shared by the retry,
//! hedge and breaker layers), the backoff, the `Retry-After` parser and the attempt
//! history ([`Report`] reads it from any call's result). Nothing here needs a
//! runtime or a network.

mod backoff;
mod call_info;
pub(crate) mod circuit;
mod classify;
mod config;
mod context;
mod deadline;
pub(crate) mod error;
mod error_kind;
pub(crate) mod event;
#[cfg(feature = "grpc")]
pub(crate) mod grpc_status;
mod handles;
mod hedged;
mod history;
mod idempotency;
mod old_names;
mod pause;
mod progress;
mod report;
mod retry_after;
mod rules;

pub use classify::{classify, Classification, Outcome, RequestFacts, RetryReason};
pub use error_kind::{classify_error, ErrorKind, UnknownName};

pub use backoff::{Backoff, Jitter, Waits};
pub(crate) use classify::{is_answer_under, ladder};
#[cfg(test)]
pub(crate) use config::same_in_every_order;
pub(crate) use config::FirstError;
pub use config::InvalidConfig;
pub use context::CallContext;
pub(crate) use context::Given;
pub use deadline::Deadline;
pub(crate) use deadline::{call_deadline, later, MIN_ATTEMPT_TIME};
pub(crate) use error_kind::chain;
#[cfg(all(feature = "json", feature = "grpc"))]
pub(crate) use error_kind::same_name;
pub use handles::{BreakerGate, BreakerHandle, BudgetAccount, BudgetHandle};
pub use hedged::{Hedged, NotHedged, Sent};
pub use history::{AttemptOutcome, AttemptRecord, History, NoRetry, NotReplayable, StopReason};

pub(crate) use idempotency::{
    carries_key, standard_index, MethodSet, IDEMPOTENCY_KEY_HEADER, STANDARD_METHODS,
};
pub use idempotency::{is_idempotent, Keyed};
#[allow(deprecated)]
pub use old_names::{AttemptProgress, Breaker, Budget, IdempotencyKey, Unsafe};
pub(crate) use pause::{is_overloaded, may_hint_pause, meet, pause_hint, pause_until, HintTaken};
pub use pause::{Pause, PauseChange};
pub use progress::{AttemptLog, Progress};
pub use report::{CallError, Report};
pub use retry_after::{parse_retry_after, RETRY_AFTER_MS};
pub use rules::{
    classify_fn, Classifier, ClassifyFn, Decision, Observed, Rules, RulesBuilder, Verdict,
};
