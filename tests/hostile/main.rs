//! What bad input and hostile servers get: raw loopback servers that send heads too
//! large or malformed, bodies and heads that never end, nothing at all, and
//! `Retry-After` values no one should obey; and the deadline's word on an attempt it
//! cut short.

#[path = "../support/mod.rs"]
mod support;

mod deadline;
mod servers;
