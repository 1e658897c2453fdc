//! Integration tests of the `Backstop` stack: admission run inside its retry layer,
//! and what the composition guarantees (a hedge spends the budget and asks the
//! breaker, rules given once reach retry, hedge and breaker, a held call is
//! bounded alike).

#[path = "../support/mod.rs"]
mod support;

#[path = "../observe/record.rs"]
mod record;

mod admission;
mod composition;
mod migration;
#[cfg(feature = "test-util")]
mod throttle;
mod tower_http;
