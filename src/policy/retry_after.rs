//! Parsing of `Retry-After` and `retry-after-ms` (being written).

use std::time::{Duration, SystemTime};

use http::HeaderMap;

/// The name of the `retry-after-ms` header.
pub const RETRY_AFTER_MS: &str = "retry-after-ms";

/// The server's wait hint, if any is valid.
pub fn parse_retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let _ = (headers, now);
    None
}
