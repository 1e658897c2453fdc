//! No URL, header value or body in any error backstop returns, through every
//! adapter (a hyper-util client under a `Backstop` stack, reqwest through the
//! reqwest-middleware adapter, a tonic channel under a `Backstop` stack), for every
//! kind of failure; and no backtrace captured for a failed call.
#![cfg(feature = "test-util")]

#[path = "../support/mod.rs"]
mod support;

mod backtrace;
mod faults;
mod secrets;
mod through_hyper;
#[cfg(feature = "reqwest-middleware")]
mod through_reqwest;
mod through_tonic;
