//! Which calls share an entry, and the keys entries are found by.

use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;

use http::request::Parts;
use http::uri::{Authority, Scheme};
use http::Uri;

pub(super) type KeyFn = dyn Fn(&Parts) -> String + Send + Sync;

/// Which calls share a retry budget account or a circuit breaker.
///
/// By default every origin (scheme and authority of the request URI) has its own,
/// so one failing upstream neither spends the retries of a healthy one nor gets it
/// refused. Requests whose URI has no authority (a relative URI) share one entry.
///
/// Entries are created as calls arrive and forgotten once they have gone unused
/// for longer than they can matter (a budget's window; a closed breaker's window
/// when its last call did not fail, else its window or its longest cooldown,
/// whichever is longer), so a client that meets many origins does not grow without
/// bound.
///
/// # Examples
///
/// ```
/// use backstop::{BudgetPolicy, CircuitBreakerPolicy, Partition};
///
/// // One account for every call the layer sees.
/// let global = BudgetPolicy::builder().partition(Partition::global()).build()?;
///
/// // One breaker per tenant, named by a header (or the origin when it is missing).
/// let per_tenant = Partition::by_key(|head: &http::request::Parts| {
///     match head.headers.get("x-tenant").and_then(|v| v.to_str().ok()) {
///         Some(tenant) => tenant.to_owned(),
///         None => head.uri.authority().map_or_else(String::new, |a| a.to_string()),
///     }
/// });
/// let breaker = CircuitBreakerPolicy::builder().partition(per_tenant).build()?;
/// # let _ = (global, breaker);
/// # Ok::<(), backstop::policy::InvalidConfig>(())
/// ```
#[derive(Clone, Default)]
pub struct Partition(pub(super) Kind);

#[derive(Clone, Default)]
pub(super) enum Kind {
    #[default]
    Origin,
    Global,
    Custom(Arc<KeyFn>),
}

impl Partition {
    /// One entry per origin: the scheme and authority of the request URI (the
    /// default). Host names compare case-insensitively; `example.com` and
    /// `example.com:80` are two origins.
    pub fn origin() -> Self {
        Partition(Kind::Origin)
    }

    /// One entry for every call.
    pub fn global() -> Self {
        Partition(Kind::Global)
    }

    /// The partition's name in a configuration file; `None` for one made with
    /// [`by_key`](Partition::by_key), which is code.
    #[cfg(feature = "serde")]
    pub(crate) fn file_name(&self) -> Option<&'static str> {
        match self.0 {
            Kind::Origin => Some("origin"),
            Kind::Global => Some("global"),
            Kind::Custom(_) => None,
        }
    }

    /// One entry per key that `key` returns for the request head.
    ///
    /// The function runs on every call, so keep it cheap; it must not block. Keys
    /// compare byte for byte. The key names the breaker in its log events, so it
    /// must not carry a credential.
    pub fn by_key<F>(key: F) -> Self
    where
        F: Fn(&Parts) -> String + Send + Sync + 'static,
    {
        Partition(Kind::Custom(Arc::new(key)))
    }
}

impl Partition {
    /// Whether `self` and `other` partition every call alike: the same kind, and
    /// for keys of your own the same function.
    pub(crate) fn same_as(&self, other: &Partition) -> bool {
        match (&self.0, &other.0) {
            (Kind::Origin, Kind::Origin) | (Kind::Global, Kind::Global) => true,
            (Kind::Custom(a), Kind::Custom(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl fmt::Debug for Partition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            Kind::Origin => "Partition::Origin",
            Kind::Global => "Partition::Global",
            Kind::Custom(_) => "Partition::Custom",
        })
    }
}

/// What an entry is found by, as the registry keeps it.
pub(super) enum Key {
    Origin(Option<Scheme>, Option<Authority>),
    Custom(Box<str>),
}

/// A call's key, borrowed from its request (or from its custom key).
#[derive(Clone, Copy)]
pub(super) enum KeyRef<'a> {
    Origin(Option<&'a Scheme>, Option<&'a Authority>),
    Custom(&'a str),
}

impl<'a> KeyRef<'a> {
    #[inline]
    pub(super) fn origin(uri: &'a Uri) -> Self {
        KeyRef::Origin(uri.scheme(), uri.authority())
    }

    /// Whether `key` is this key. An origin's authority compares its bytes first,
    /// which is what a client sending to one origin again and again meets; then
    /// without regard to ASCII case, as `Authority` compares (and `Scheme`).
    #[inline]
    pub(super) fn is(self, key: &Key) -> bool {
        match (self, key) {
            (KeyRef::Origin(scheme, authority), Key::Origin(s, a)) => {
                let same_scheme = match (scheme, s) {
                    (Some(x), Some(y)) => x == y,
                    (None, None) => true,
                    _ => false,
                };
                let same_authority = match (authority, a) {
                    (Some(x), Some(y)) => x.as_str() == y.as_str() || x == y,
                    (None, None) => true,
                    _ => false,
                };
                same_scheme && same_authority
            }
            (KeyRef::Custom(k), Key::Custom(kept)) => k == &**kept,
            _ => false,
        }
    }

    /// The key to keep for a new entry (reference-counted copies of the URI's
    /// parts, or the custom key).
    pub(super) fn to_key(self) -> Key {
        match self {
            KeyRef::Origin(scheme, authority) => Key::Origin(scheme.cloned(), authority.cloned()),
            KeyRef::Custom(k) => Key::Custom(k.into()),
        }
    }

    /// A name for logs: the scheme, host and port, never user information.
    pub(super) fn label(self) -> String {
        match self {
            KeyRef::Origin(scheme, authority) => {
                let mut label = String::new();
                if let Some(scheme) = scheme {
                    label.push_str(scheme.as_str());
                    label.push_str("://");
                }
                match authority {
                    Some(a) => {
                        label.push_str(a.host());
                        if let Some(port) = a.port_u16() {
                            label.push(':');
                            label.push_str(&port.to_string());
                        }
                    }
                    None => label.push_str("(no authority)"),
                }
                label
            }
            KeyRef::Custom(key) => key.to_owned(),
        }
    }
}

/// The hash of a key: one multiplication per sixteen bytes (one for a usual
/// authority), with every byte's
/// `0x20` bit set so that spellings differing in ASCII case hash alike (other
/// bytes that this folds together only share a bucket; the comparison tells them
/// apart). The seed is random per registry, so the buckets of one process cannot
/// be predicted from outside.
#[derive(Clone, Copy)]
pub(super) struct Hasher {
    seed: u64,
}

/// Odd constants with well-spread bits (the fractional digits of π).
const K0: u64 = 0x243f_6a88_85a3_08d3;
const K1: u64 = 0x1319_8a2e_0370_7344;
const FOLD: u64 = 0x2020_2020_2020_2020;

/// The 128-bit product of `a` and `b`, its halves xored: every bit of the
/// result depends on every bit of both.
#[inline]
fn mix(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

#[inline]
fn word(bytes: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(w)
}

#[inline]
fn half(bytes: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&bytes[at..at + 4]);
    u64::from(u32::from_le_bytes(w))
}

impl Hasher {
    pub(super) fn new() -> Self {
        Hasher {
            seed: RandomState::new().hash_one(0u64),
        }
    }

    /// Hashes `bytes` on top of `h`: the words of up to sixteen bytes go through one
    /// multiplication together, longer keys one per sixteen bytes more. Words are
    /// read whole, the last ones overlapping those before when the length is not a
    /// multiple of eight, and the length is mixed in, so every byte counts and equal
    /// bytes always hash alike.
    #[inline]
    fn bytes(&self, h: u64, bytes: &[u8]) -> u64 {
        let len = bytes.len();
        let mut state = h ^ self.seed;
        let (a, b) = if len > 16 {
            let mut at = 0;
            // Every pair of words passes through a multiplication before the next
            // is xored in, so that no difference in one can cancel one in another.
            while len - at > 16 {
                state = mix(
                    (word(bytes, at) | FOLD) ^ K0,
                    (word(bytes, at + 8) | FOLD) ^ state,
                );
                at += 16;
            }
            (word(bytes, len - 16), word(bytes, len - 8))
        } else if len >= 8 {
            (word(bytes, 0), word(bytes, len - 8))
        } else if len >= 4 {
            (half(bytes, 0), half(bytes, len - 4))
        } else if len > 0 {
            let w = u64::from(bytes[0])
                | u64::from(bytes[len / 2]) << 8
                | u64::from(bytes[len - 1]) << 16;
            (w, 0)
        } else {
            (0, 0)
        };
        mix((a | FOLD) ^ K0 ^ len as u64, (b | FOLD) ^ K1 ^ state)
    }

    #[inline]
    pub(super) fn hash(&self, key: KeyRef<'_>) -> u64 {
        match key {
            KeyRef::Origin(scheme, authority) => {
                // The standard schemes are told apart by a number; another scheme
                // hashes its bytes. Only the standard schemes read `http` and `https`:
                // `http` keeps no custom scheme spelt exactly so.
                let h = match scheme.map(Scheme::as_str) {
                    None => 0,
                    Some("http") => 1,
                    Some("https") => 2,
                    Some(s) => self.bytes(3, s.as_bytes()),
                };
                self.bytes(h, authority.map_or(&b""[..], |a| a.as_str().as_bytes()))
            }
            KeyRef::Custom(key) => self.bytes(K1, key.as_bytes()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uri(s: &str) -> Uri {
        s.parse().unwrap()
    }

    #[test]
    fn spellings_of_one_origin_are_one_key() {
        let hasher = Hasher::new();
        let a = uri("http://Example.COM:8080/x");
        let b = uri("HTTP://example.com:8080/y?q");
        let (ka, kb) = (KeyRef::origin(&a), KeyRef::origin(&b));
        assert!(ka.is(&kb.to_key()));
        assert_eq!(hasher.hash(ka), hasher.hash(kb));
    }

    #[test]
    fn different_origins_are_different_keys() {
        let hasher = Hasher::new();
        let uris = [
            "http://a.test/",
            "https://a.test/",
            "http://a.test:80/",
            "http://b.test/",
            "http://user@a.test/",
            "/relative",
        ];
        for (i, x) in uris.iter().enumerate() {
            for (j, y) in uris.iter().enumerate() {
                let (x, y) = (uri(x), uri(y));
                let (kx, ky) = (KeyRef::origin(&x), KeyRef::origin(&y));
                assert_eq!(kx.is(&ky.to_key()), i == j, "{x} {y}");
                if i != j {
                    assert_ne!(hasher.hash(kx), hasher.hash(ky), "{x} {y}");
                }
            }
        }
        let other = [
            uri("foo://a.test/"),
            uri("FOO://a.test/"),
            uri("bar://a.test/"),
        ];
        let keys = other.each_ref().map(KeyRef::origin);
        assert!(keys[0].is(&keys[1].to_key()) && !keys[0].is(&keys[2].to_key()));
        assert_eq!(hasher.hash(keys[0]), hasher.hash(keys[1]));
        assert_ne!(hasher.hash(keys[0]), hasher.hash(keys[2]));
        let custom = KeyRef::Custom("http://a.test");
        let a = uri("http://a.test/");
        assert!(!custom.is(&KeyRef::origin(&a).to_key()));
        assert!(!KeyRef::Custom("A").is(&KeyRef::Custom("a").to_key()));
    }

    #[test]
    fn twenty_thousand_similar_origins_hash_apart() {
        let hasher = Hasher::new();
        let mut seen = std::collections::HashSet::new();
        for scheme in ["http", "https"] {
            for port in ["", ":8080"] {
                for i in 0..5_000 {
                    let uri = uri(&format!("{scheme}://o{i}.test{port}/"));
                    assert!(seen.insert(hasher.hash(KeyRef::origin(&uri))), "{uri}");
                }
            }
        }
    }

    #[test]
    fn long_keys_hash_every_byte() {
        let hasher = Hasher::new();
        let a = "tenant-0123456789abcdef-x";
        let b = "tenant-0123456789abcdef-y";
        assert_ne!(
            hasher.hash(KeyRef::Custom(a)),
            hasher.hash(KeyRef::Custom(b))
        );
        assert_ne!(
            hasher.hash(KeyRef::Custom("12345678")),
            hasher.hash(KeyRef::Custom("12345678\0"))
        );
    }

    #[test]
    fn every_length_hashes_case_blind_and_every_byte_counts() {
        let hasher = Hasher::new();
        let hash = |s: &str| hasher.hash(KeyRef::Custom(s));
        for len in 0..=40 {
            let lower: String = (0..len)
                .map(|i| (b'a' + (i * 7 % 26) as u8) as char)
                .collect();
            assert_eq!(hash(&lower), hash(&lower.to_ascii_uppercase()), "{lower}");
            for i in 0..len {
                let mut other = lower.clone().into_bytes();
                other[i] = if other[i] == b'z' { b'y' } else { other[i] + 1 };
                let other = String::from_utf8(other).unwrap();
                assert_ne!(hash(&lower), hash(&other), "{lower} {other}");
            }
        }
    }

    #[test]
    fn labels_carry_no_user_information() {
        let a = uri("https://user:secret@example.com:8443/");
        assert_eq!(KeyRef::origin(&a).label(), "https://example.com:8443");
        let relative = uri("/x");
        assert_eq!(KeyRef::origin(&relative).label(), "(no authority)");
    }
}
