//! The request head a call keeps for its later attempts.
//!
//! Every retry layer must keep a copy of the head, because the transport takes the
//! request it sends. Cloning a `HeaderMap` allocates its index and entry tables, and
//! each header value created from a string is turned into a shared, reference-counted
//! buffer on its first clone, whose count then moves on every drop. For the usual
//! head of a few hundred bytes it is cheaper to copy the headers' bytes into one
//! buffer, and to rebuild a map from it only when a retry is sent. A head whose
//! headers are larger than [`FLAT_LIMIT`] is cloned as it is.

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{Extensions, HeaderMap, Method, Request, Uri, Version};

/// Headers up to this many bytes (names, values and 9 bytes per value) are copied
/// flat; larger ones are cloned.
pub(super) const FLAT_LIMIT: usize = 4096;

/// A request's head, kept for later attempts.
#[derive(Clone)]
pub(super) struct Head {
    method: Method,
    uri: Uri,
    version: Version,
    headers: Kept,
    extensions: Extensions,
}

#[derive(Clone)]
enum Kept {
    /// Each value as a record: a sensitivity byte, the name's and the value's
    /// lengths (`u32`, little-endian), then the name's and the value's bytes.
    Flat { buf: Bytes, values: usize },
    /// Boxed: a head this large is rare, and the future that keeps it stays small.
    Map(Box<HeaderMap>),
}

/// The bytes one value takes in a flat record.
fn record_len(name: &HeaderName, value: &HeaderValue) -> usize {
    9 + name.as_str().len() + value.len()
}

impl Kept {
    fn of(headers: &HeaderMap) -> Self {
        let mut size = 0;
        for (name, value) in headers {
            size += record_len(name, value);
            if size > FLAT_LIMIT {
                return Kept::Map(Box::new(headers.clone()));
            }
        }
        if size == 0 {
            return Kept::Flat {
                buf: Bytes::new(),
                values: 0,
            };
        }
        let mut buf = Vec::with_capacity(size);
        for (name, value) in headers {
            let name = name.as_str().as_bytes();
            let value_bytes = value.as_bytes();
            buf.push(u8::from(value.is_sensitive()));
            // Both fit: the whole is at most FLAT_LIMIT bytes.
            buf.extend_from_slice(&(name.len() as u32).to_le_bytes());
            buf.extend_from_slice(&(value_bytes.len() as u32).to_le_bytes());
            buf.extend_from_slice(name);
            buf.extend_from_slice(value_bytes);
        }
        Kept::Flat {
            values: headers.len(),
            buf: Bytes::from(buf),
        }
    }

    /// The header map again; `None` if a record does not read back as a valid name
    /// and value, which a map built through `http`'s checked constructors never
    /// gives.
    fn map(self) -> Option<HeaderMap> {
        let (buf, values) = match self {
            Kept::Map(map) => return Some(*map),
            Kept::Flat { buf, values } => (buf, values),
        };
        let mut map = HeaderMap::with_capacity(values);
        let mut at = 0;
        while at < buf.len() {
            let sensitive = *buf.get(at)? != 0;
            let name_len = read_len(&buf, at + 1)?;
            let value_len = read_len(&buf, at + 5)?;
            let name_at = at + 9;
            let value_at = name_at.checked_add(name_len)?;
            let end = value_at.checked_add(value_len)?;
            let name = HeaderName::from_bytes(buf.get(name_at..value_at)?).ok()?;
            if end > buf.len() {
                return None;
            }
            let mut value = HeaderValue::from_maybe_shared(buf.slice(value_at..end)).ok()?;
            value.set_sensitive(sensitive);
            map.append(name, value);
            at = end;
        }
        Some(map)
    }
}

fn read_len(buf: &[u8], at: usize) -> Option<usize> {
    let bytes: [u8; 4] = buf.get(at..at.checked_add(4)?)?.try_into().ok()?;
    usize::try_from(u32::from_le_bytes(bytes)).ok()
}

impl Head {
    #[inline]
    pub(super) fn of<T>(req: &Request<T>) -> Self {
        Head {
            method: req.method().clone(),
            uri: req.uri().clone(),
            version: req.version(),
            headers: Kept::of(req.headers()),
            extensions: req.extensions().clone(),
        }
    }

    /// A value a layer above put into the request's extensions.
    pub(super) fn extension<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.extensions.get::<T>()
    }

    /// The request for a later attempt; `None` only if the headers do not read
    /// back (see [`Kept::map`]).
    pub(super) fn request<T>(self, body: T) -> Option<Request<T>> {
        let headers = self.headers.map()?;
        let mut req = Request::new(body);
        *req.method_mut() = self.method;
        *req.uri_mut() = self.uri;
        *req.version_mut() = self.version;
        *req.headers_mut() = headers;
        *req.extensions_mut() = self.extensions;
        Some(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round_trip(headers: &HeaderMap) -> HeaderMap {
        let req = {
            let mut req = Request::new(());
            *req.headers_mut() = headers.clone();
            req
        };
        Head::of(&req).request(()).unwrap().headers().clone()
    }

    fn pairs(map: &HeaderMap) -> Vec<(String, Vec<u8>, bool)> {
        map.iter()
            .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec(), v.is_sensitive()))
            .collect()
    }

    #[test]
    fn headers_come_back_in_order_with_every_value_and_flag() {
        let mut map = HeaderMap::new();
        map.append("accept", HeaderValue::from_static("text/html"));
        map.append("x-custom-name", HeaderValue::from_static("one"));
        map.append("accept", HeaderValue::from_static("application/json"));
        let mut secret = HeaderValue::from_static("Bearer t0ken");
        secret.set_sensitive(true);
        map.append("authorization", secret);
        map.append("x-empty", HeaderValue::from_static(""));
        map.append("x-obs", HeaderValue::from_bytes(b"caf\xe9").unwrap());
        let back = round_trip(&map);
        assert_eq!(pairs(&back), pairs(&map));
        assert!(back.get("authorization").unwrap().is_sensitive());
    }

    #[test]
    fn small_heads_are_kept_flat_and_large_ones_as_a_map() {
        let mut small = HeaderMap::new();
        small.insert("accept", HeaderValue::from_static("*/*"));
        assert!(matches!(Kept::of(&small), Kept::Flat { values: 1, .. }));
        assert!(matches!(
            Kept::of(&HeaderMap::new()),
            Kept::Flat { values: 0, .. }
        ));

        let mut large = HeaderMap::new();
        let big = "x".repeat(FLAT_LIMIT);
        large.insert("cookie", HeaderValue::from_str(&big).unwrap());
        assert!(matches!(Kept::of(&large), Kept::Map(_)));
        assert_eq!(round_trip(&large), large);
    }

    #[test]
    fn a_damaged_record_reads_back_as_none_not_a_panic() {
        let mut map = HeaderMap::new();
        map.insert("accept", HeaderValue::from_static("*/*"));
        let Kept::Flat { buf, values } = Kept::of(&map) else {
            panic!("expected a flat head");
        };
        for cut in 0..buf.len() {
            let damaged = Kept::Flat {
                buf: buf.slice(..cut),
                values,
            };
            // A truncated buffer either reads back as fewer records or not at all.
            if let Some(back) = damaged.map() {
                assert!(back.len() < map.len() || cut == 0);
            }
        }
        let mut bad = buf.to_vec();
        bad[9] = b'\n';
        assert!(Kept::Flat {
            buf: Bytes::from(bad),
            values
        }
        .map()
        .is_none());
    }

    fn header_name() -> impl Strategy<Value = HeaderName> {
        prop_oneof![
            Just(http::header::ACCEPT),
            Just(http::header::USER_AGENT),
            Just(http::header::COOKIE),
            "[a-z][a-z0-9-]{0,20}".prop_map(|s| HeaderName::from_bytes(s.as_bytes()).unwrap()),
        ]
    }

    fn header_value() -> impl Strategy<Value = HeaderValue> {
        (
            proptest::collection::vec(
                prop_oneof![Just(b'\t'), 0x20u8..0x7f, 0x80u8..=0xff],
                0..200,
            ),
            any::<bool>(),
        )
            .prop_map(|(bytes, sensitive)| {
                let mut v = HeaderValue::from_bytes(&bytes).unwrap();
                v.set_sensitive(sensitive);
                v
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn any_header_map_comes_back_the_same(
            entries in proptest::collection::vec((header_name(), header_value()), 0..24)
        ) {
            let mut map = HeaderMap::new();
            for (name, value) in entries {
                map.append(name, value);
            }
            let back = round_trip(&map);
            prop_assert_eq!(pairs(&back), pairs(&map));
        }
    }
}
