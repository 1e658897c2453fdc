//! The idempotency key's part of admission: which calls get a key, in which
//! header, and the keys themselves.

use std::sync::Arc;

use http::header::{HeaderName, HeaderValue};
use http::{Method, Request};
use rand::RngCore;

use crate::policy::MethodSet;

/// A key a caller gives for one call, put into its request's extensions: the layer
/// sends it instead of a fresh one (a key already in the headers wins over both).
///
/// # Examples
///
/// ```
/// use backstop::idempotency_key::CallKey;
/// use http::HeaderValue;
///
/// let mut req = http::Request::post("http://example.com/orders").body(()).unwrap();
/// req.extensions_mut()
///     .insert(CallKey(HeaderValue::from_static("order-7f3a")));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallKey(pub HeaderValue);

pub(crate) type Generator = Arc<dyn Fn() -> HeaderValue + Send + Sync>;

/// Which calls get a key, in which header, made how.
#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) header: HeaderName,
    pub(crate) methods: MethodSet,
    pub(crate) generator: Option<Generator>,
}

impl Default for Config {
    /// Keys for POST and PATCH, under `Idempotency-Key`, as random UUID v4 strings.
    fn default() -> Self {
        Config {
            header: crate::policy::IDEMPOTENCY_KEY_HEADER,
            methods: [Method::POST, Method::PATCH].into_iter().collect(),
            generator: None,
        }
    }
}

impl Config {
    /// Stamps a key on `req` when its method gets one and it has none (the
    /// caller's [`CallKey`], else a fresh one); whether the call is keyed.
    #[inline]
    pub(crate) fn stamp<B>(&self, req: &mut Request<B>) -> bool {
        if !self.methods.contains(req.method()) {
            return false;
        }
        self.put(req);
        true
    }

    /// Puts a key on a request whose method gets one, unless it has one.
    #[inline(never)]
    fn put<B>(&self, req: &mut Request<B>) {
        if !req.headers().contains_key(&self.header) {
            let key = match req.extensions_mut().remove::<CallKey>() {
                Some(CallKey(key)) => key,
                None => match &self.generator {
                    Some(generate) => generate(),
                    None => new_key(),
                },
            };
            req.headers_mut().insert(self.header.clone(), key);
        }
    }
}

/// A fresh idempotency key: 128 random bits from a thread-local generator seeded by
/// the operating system, written as a UUID v4 (`8-4-4-4-12` lower-case hex digits).
///
/// # Examples
///
/// ```
/// let key = backstop::idempotency_key::new_key();
/// let text = key.to_str().unwrap();
/// assert_eq!(text.len(), 36);
/// assert_eq!(&text[14..15], "4");
/// ```
pub fn new_key() -> HeaderValue {
    let text = uuid_v4();
    // Hex digits and dashes are always a valid header value.
    HeaderValue::from_bytes(&text).unwrap_or_else(|_| HeaderValue::from_static("invalid-key"))
}

/// [`new_key`] as a `String`.
pub fn new_key_string() -> String {
    String::from_utf8_lossy(&uuid_v4()).into_owned()
}

fn uuid_v4() -> [u8; 36] {
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    bytes[6] = (bytes[6] & 0x0f) | 0x40; // version 4
    bytes[8] = (bytes[8] & 0x3f) | 0x80; // RFC 4122 variant
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; 36];
    let mut i = 0;
    for (n, byte) in bytes.iter().enumerate() {
        if matches!(n, 4 | 6 | 8 | 10) {
            out[i] = b'-';
            i += 1;
        }
        out[i] = HEX[(byte >> 4) as usize];
        out[i + 1] = HEX[(byte & 0x0f) as usize];
        i += 2;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn keys_are_uuid_v4() {
        for _ in 0..1000 {
            let key = new_key_string();
            let parts: Vec<_> = key.split('-').map(str::len).collect();
            assert_eq!(parts, [8, 4, 4, 4, 12], "{key}");
            assert!(key
                .bytes()
                .all(|b| b == b'-' || b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
            assert_eq!(&key[14..15], "4", "{key}");
            assert!(matches!(&key[19..20], "8" | "9" | "a" | "b"), "{key}");
        }
    }

    #[test]
    fn keys_do_not_repeat() {
        let keys: HashSet<_> = (0..10_000).map(|_| new_key_string()).collect();
        assert_eq!(keys.len(), 10_000);
    }
}
