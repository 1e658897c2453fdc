//! The secrets every request carries, and the check that no error text shows one.

use std::error::Error as StdError;
use std::net::SocketAddr;

/// One secret in each place a request carries one: its path, its query, its user
/// information, a header and its body.
pub const SECRETS: [&str; 5] = [
    "s3cret-path",
    "s3cret-query",
    "s3cret-pass",
    "s3cret-bearer",
    "s3cret-body",
];

/// The path and query, with their secrets.
pub const PATH: &str = "/private/s3cret-path?token=s3cret-query";

/// The `Authorization` header's value.
pub const BEARER: &str = "Bearer s3cret-bearer";

/// The request body.
pub const BODY: &str = "card=s3cret-body";

/// A URL to `addr` with a secret in its user information, path and query.
pub fn url(addr: SocketAddr) -> String {
    format!("http://user:s3cret-pass@{addr}{PATH}")
}

/// Asserts that `err` and every error along its `source()` chain show none of the
/// secrets in their `Display` (plain and alternate, as error-chain reporters print
/// it) and `Debug` (plain and pretty).
pub fn assert_clean(what: &str, err: &(dyn StdError + 'static)) {
    let mut next = Some(err);
    let mut depth = 0;
    while let Some(e) = next {
        for text in [
            format!("{e}"),
            format!("{e:#}"),
            format!("{e:?}"),
            format!("{e:#?}"),
        ] {
            for secret in SECRETS {
                assert!(
                    !text.contains(secret),
                    "{what}: source {depth} shows `{secret}`: {text}"
                );
            }
        }
        next = e.source();
        depth += 1;
    }
}

/// An address nothing listens on: a port bound, then let go.
pub fn closed_port() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("an address")
}
