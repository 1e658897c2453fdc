//! The request head a call keeps for its later attempts.
//!
//! Every retry layer must keep a copy of the head, because the transport takes the
//! request it sends. Cloning a `HeaderMap` allocates its index and entry tables, and
//! each header value created from a string is turned into a shared, reference-counted
//! buffer on its first clone, whose count then moves on every drop; a parsed URI's
//! parts are shared buffers too. For the usual head of a few hundred bytes it is
//! cheaper to copy the URI's and the headers' bytes into one buffer, and to parse
//! them back only when a retry is sent. A head whose headers are larger than
//! [`FLAT_LIMIT`] is cloned as it is, and so is a URI of an unusual shape.

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{Extensions, HeaderMap, Method, Request, Uri, Version};

use crate::policy::{CallContext, Given};

/// Headers up to this many bytes (the URI, names, values and 9 bytes per value) are
/// copied flat; larger ones are cloned.
pub(super) const FLAT_LIMIT: usize = 4096;

/// The buffer a flat head starts with.
const FLAT_GUESS: usize = 512;

/// A request's head, kept for later attempts.
#[derive(Clone)]
pub(super) struct Head {
    method: Method,
    version: Version,
    extras: Extras,
    kept: HeadCopy,
}

#[derive(Clone)]
enum HeadCopy {
    /// The URI's text (when `uri` is `None`), then each header value as a record: a
    /// sensitivity byte, the name's and the value's lengths (`u32`, little-endian),
    /// then the name's and the value's bytes.
    Flat {
        buf: Vec<u8>,
        uri: Option<Uri>,
        uri_len: usize,
        values: usize,
    },
    /// Boxed: a head this large is rare, and the future that keeps it stays small.
    Cloned(Box<(Uri, HeaderMap)>),
}

/// The bytes one value takes in a flat record.
fn record_len(name: &HeaderName, value: &HeaderValue) -> usize {
    9 + name.as_str().len() + value.len()
}

/// The parts of `uri` whose text parses back to an equal URI, at most
/// [`FLAT_LIMIT`] bytes long: `scheme://authority` then a path from `/`, a path
/// alone (or `*`), or an authority alone. `None` for anything else, which is kept as
/// a clone:
/// - a scheme spelt with capitals (`HTTPS` set through the builder is a custom
///   scheme, which would come back as the standard `https`);
/// - an empty scheme (`://x/` parses): its text would read back as another URI,
///   even one with another host (`://https://h/p` as `https://h/p`);
/// - the authority `*` alone, which would come back as the path `*`;
/// - a URI with nothing in it, which would come back as `/`;
/// - the other shapes `Uri::from_parts` allows, and a URI whose whole text is
///   longer than `http` parses.
fn uri_text(uri: &Uri) -> Option<[&str; 3]> {
    let path = uri.path_and_query().map(|p| p.as_str());
    let text = match (uri.scheme(), uri.authority(), path) {
        (Some(scheme), Some(authority), Some(path))
            if path.starts_with('/')
                && !scheme.as_str().is_empty()
                && !scheme.as_str().bytes().any(|b| b.is_ascii_uppercase()) =>
        {
            [scheme.as_str(), authority.as_str(), path]
        }
        (None, None, Some(path))
            if (path.starts_with('/') || path == "*") && !uri.path().is_empty() =>
        {
            ["", "", path]
        }
        (None, Some(authority), None) if authority.as_str() != "*" => ["", authority.as_str(), ""],
        _ => return None,
    };
    let len = text.iter().map(|part| part.len()).sum::<usize>() + 3;
    (len <= FLAT_LIMIT).then_some(text)
}

impl HeadCopy {
    fn of(uri: &Uri, headers: &HeaderMap) -> Self {
        let text = uri_text(uri);
        // One pass, into a buffer most heads fit in: the allocator serves this size
        // as fast as a smaller one.
        let mut buf = Vec::with_capacity(FLAT_GUESS);
        if let Some([scheme, authority, path]) = text {
            if !scheme.is_empty() {
                buf.extend_from_slice(scheme.as_bytes());
                buf.extend_from_slice(b"://");
            }
            buf.extend_from_slice(authority.as_bytes());
            buf.extend_from_slice(path.as_bytes());
        }
        let uri_len = buf.len();
        for (name, value) in headers {
            if buf.len() + record_len(name, value) > FLAT_LIMIT {
                return HeadCopy::Cloned(Box::new((uri.clone(), headers.clone())));
            }
            let name = name.as_str().as_bytes();
            let value_bytes = value.as_bytes();
            let mut lead = [0; 9];
            lead[0] = u8::from(value.is_sensitive());
            // Both fit: the whole is at most FLAT_LIMIT bytes.
            lead[1..5].copy_from_slice(&(name.len() as u32).to_le_bytes());
            lead[5..].copy_from_slice(&(value_bytes.len() as u32).to_le_bytes());
            buf.extend_from_slice(&lead);
            buf.extend_from_slice(name);
            buf.extend_from_slice(value_bytes);
        }
        HeadCopy::Flat {
            buf,
            uri: text.is_none().then(|| uri.clone()),
            uri_len,
            values: headers.len(),
        }
    }

    /// The URI and the header map again; `None` if the text does not parse back,
    /// which a head built through `http`'s checked constructors never gives.
    fn parts(self) -> Option<(Uri, HeaderMap)> {
        let (buf, uri, uri_len, values) = match self {
            HeadCopy::Cloned(head) => return Some(*head),
            HeadCopy::Flat {
                buf,
                uri,
                uri_len,
                values,
            } => (buf, uri, uri_len, values),
        };
        let buf = Bytes::from(buf);
        let uri = match uri {
            Some(uri) => uri,
            None => Uri::from_maybe_shared(buf.slice(..uri_len.min(buf.len()))).ok()?,
        };
        let mut map = HeaderMap::with_capacity(values);
        let mut at = uri_len;
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
        Some((uri, map))
    }
}

fn read_len(buf: &[u8], at: usize) -> Option<usize> {
    let bytes: [u8; 4] = buf.get(at..at.checked_add(4)?)?.try_into().ok()?;
    usize::try_from(u32::from_le_bytes(bytes)).ok()
}

/// The request's extensions, kept for later attempts: nothing when there are none,
/// the call's context alone when that is all they hold (the usual backstop stack:
/// one small box and a few reference counts instead of a cloned map, and boxed so
/// the future stays small), else a clone of them all.
#[derive(Clone)]
enum Extras {
    None,
    Context(Box<CallContext>),
    All(Extensions),
}

impl Extras {
    #[inline]
    fn of(ext: &Extensions) -> Self {
        match (ext.len(), CallContext::of(ext)) {
            (0, _) => Extras::None,
            (1, Some(context)) => Extras::Context(Box::new(context.clone())),
            _ => Extras::All(ext.clone()),
        }
    }

    fn into_extensions(self) -> Extensions {
        let mut ext = Extensions::new();
        match self {
            Extras::None => {}
            Extras::Context(context) => {
                ext.insert(*context);
            }
            Extras::All(all) => ext = all,
        }
        ext
    }
}

impl Head {
    #[inline]
    pub(super) fn of<T>(req: &Request<T>) -> Self {
        Head {
            method: req.method().clone(),
            version: req.version(),
            extras: Extras::of(req.extensions()),
            kept: HeadCopy::of(req.uri(), req.headers()),
        }
    }

    /// What the layers above gave the call, read as every layer reads it.
    pub(super) fn given(&self) -> Given<'_> {
        match &self.extras {
            Extras::None => Given::none(),
            Extras::Context(context) => Given::context(context),
            Extras::All(ext) => Given::new(ext),
        }
    }

    /// The request for a later attempt; `None` only if the head does not read back
    /// (see [`HeadCopy::parts`]).
    pub(super) fn request<T>(self, body: T) -> Option<Request<T>> {
        let (uri, headers) = self.kept.parts()?;
        let mut req = Request::new(body);
        *req.method_mut() = self.method;
        *req.uri_mut() = uri;
        *req.version_mut() = self.version;
        *req.headers_mut() = headers;
        *req.extensions_mut() = self.extras.into_extensions();
        Some(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round_trip(uri: &Uri, headers: &HeaderMap) -> (Uri, HeaderMap) {
        let mut req = Request::new(());
        *req.uri_mut() = uri.clone();
        *req.headers_mut() = headers.clone();
        let back = Head::of(&req).request(()).unwrap();
        (back.uri().clone(), back.headers().clone())
    }

    fn pairs(map: &HeaderMap) -> Vec<(String, Vec<u8>, bool)> {
        map.iter()
            .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec(), v.is_sensitive()))
            .collect()
    }

    fn uri_parts(uri: &Uri) -> (Option<String>, Option<String>, Option<String>, String) {
        (
            uri.scheme_str().map(str::to_owned),
            uri.authority().map(|a| a.as_str().to_owned()),
            uri.path_and_query().map(|p| p.as_str().to_owned()),
            uri.to_string(),
        )
    }

    fn flat(kept: &HeadCopy) -> Option<bool> {
        match kept {
            HeadCopy::Flat { uri, .. } => Some(uri.is_none()),
            HeadCopy::Cloned(_) => None,
        }
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
        let uri = Uri::from_static("https://api.example.com:8443/v1/items?page=2");
        let (back_uri, back) = round_trip(&uri, &map);
        assert_eq!(pairs(&back), pairs(&map));
        assert!(back.get("authorization").unwrap().is_sensitive());
        assert_eq!(uri_parts(&back_uri), uri_parts(&uri));
    }

    #[test]
    fn every_uri_form_comes_back() {
        for text in [
            "http://a.test",
            "http://a.test/",
            "https://user:pw@A.Test:443/p/a/t/h?q=1&r=%20",
            "http://[::1]:8080/x",
            "custom+scheme://host/path",
            "/origin/form?x=y",
            "*",
            "authority.test:443",
            "/",
        ] {
            let uri: Uri = text.parse().unwrap();
            let kept = HeadCopy::of(&uri, &HeaderMap::new());
            assert_eq!(flat(&kept), Some(true), "{text} is kept as text");
            let (back, _) = round_trip(&uri, &HeaderMap::new());
            assert_eq!(back, uri, "{text}");
            assert_eq!(uri_parts(&back), uri_parts(&uri), "{text}");
        }
    }

    #[test]
    fn a_uri_whose_text_would_read_back_differently_is_cloned() {
        // `from_parts` takes `*` after an authority; `http://a.test*` would not parse
        // back to the same parts, so the URI is kept as it is.
        let mut parts = http::uri::Parts::default();
        parts.scheme = Some(http::uri::Scheme::HTTP);
        parts.authority = Some("a.test".parse().unwrap());
        parts.path_and_query = Some("*".parse().unwrap());
        let odd = Uri::from_parts(parts).unwrap();
        let kept = HeadCopy::of(&odd, &HeaderMap::new());
        assert_eq!(flat(&kept), Some(false));
        let (back, _) = round_trip(&odd, &HeaderMap::new());
        assert_eq!(uri_parts(&back), uri_parts(&odd));
    }

    #[test]
    fn uris_whose_text_would_read_back_otherwise_are_cloned_as_they_are() {
        // Within the path's own limit, over the limit of the whole text.
        let long = format!("/{}", "a".repeat(65_529));
        let cases = [
            Uri::builder()
                .scheme("")
                .authority("api.test")
                .path_and_query("/x"),
            Uri::builder().authority("*"),
            Uri::builder()
                .scheme("HTTPS")
                .authority("a.test")
                .path_and_query("/x"),
            Uri::builder()
                .scheme("Http")
                .authority("a.test")
                .path_and_query("/x"),
            Uri::builder()
                .scheme("FTP")
                .authority("a.test")
                .path_and_query("/x"),
            Uri::builder(),
            Uri::builder()
                .scheme("http")
                .authority("a.test")
                .path_and_query(long.as_str()),
        ];
        for builder in cases {
            let uri = builder.build().unwrap();
            assert_eq!(
                flat(&HeadCopy::of(&uri, &HeaderMap::new())),
                Some(false),
                "{uri}"
            );
            let (back, _) = round_trip(&uri, &HeaderMap::new());
            assert_eq!(back, uri);
            assert_eq!(back.scheme(), uri.scheme());
            assert_eq!(uri_parts(&back), uri_parts(&uri));
        }
    }

    #[test]
    fn an_empty_scheme_never_sends_a_retry_to_another_host() {
        // Scheme "", authority "https:", path "//elsewhere.test/steal": as text
        // without its scheme this would read back as https://elsewhere.test/steal.
        let uri: Uri = "://https://elsewhere.test/steal".parse().unwrap();
        assert_eq!(uri.scheme_str(), Some(""));
        assert_eq!(flat(&HeadCopy::of(&uri, &HeaderMap::new())), Some(false));
        let (back, _) = round_trip(&uri, &HeaderMap::new());
        assert_eq!(back, uri);
        assert_eq!(back.host(), uri.host());
        assert_eq!(uri_parts(&back), uri_parts(&uri));
    }

    #[test]
    fn small_heads_are_kept_flat_and_large_ones_cloned() {
        let uri = Uri::from_static("http://a.test/");
        let mut small = HeaderMap::new();
        small.insert("accept", HeaderValue::from_static("*/*"));
        assert_eq!(flat(&HeadCopy::of(&uri, &small)), Some(true));
        assert_eq!(flat(&HeadCopy::of(&uri, &HeaderMap::new())), Some(true));

        let mut large = HeaderMap::new();
        let big = "x".repeat(FLAT_LIMIT);
        large.insert("cookie", HeaderValue::from_str(&big).unwrap());
        assert_eq!(flat(&HeadCopy::of(&uri, &large)), None);
        let (back_uri, back) = round_trip(&uri, &large);
        assert_eq!(back, large);
        assert_eq!(back_uri, uri);
    }

    #[test]
    fn a_damaged_record_reads_back_as_none_or_less_not_a_panic() {
        let uri = Uri::from_static("/x");
        let mut map = HeaderMap::new();
        map.insert("accept", HeaderValue::from_static("*/*"));
        let HeadCopy::Flat {
            buf,
            uri_len,
            values,
            ..
        } = HeadCopy::of(&uri, &map)
        else {
            panic!("expected a flat head");
        };
        for cut in uri_len..buf.len() {
            let damaged = HeadCopy::Flat {
                buf: buf[..cut].to_vec(),
                uri: None,
                uri_len,
                values,
            };
            // A truncated record is refused; a cut between records loses them.
            if let Some((_, back)) = damaged.parts() {
                assert!(back.len() < map.len());
            }
        }
        let mut bad = buf.clone();
        bad[uri_len + 9] = b'\n';
        let bad = HeadCopy::Flat {
            buf: bad,
            uri: None,
            uri_len,
            values,
        };
        assert!(bad.parts().is_none());
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

    fn uri() -> impl Strategy<Value = Uri> {
        let host = "[a-zA-Z0-9][a-zA-Z0-9.-]{0,15}(:[0-9]{1,5})?";
        let path = "(/[a-zA-Z0-9._~%!$&'()*+,;=:@-]{0,10}){0,4}(\\?[a-zA-Z0-9=&%/?-]{0,12})?";
        prop_oneof![
            (
                prop_oneof![Just("http"), Just("https"), Just("ws")],
                host,
                path
            )
                .prop_map(|(s, h, p)| format!("{s}://{h}{p}")),
            path.prop_map(|p| if p.starts_with('/') {
                p
            } else {
                format!("/{p}")
            }),
            host.prop_map(|h| h.to_string()),
        ]
        .prop_filter_map("a valid URI", |text| text.parse::<Uri>().ok())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn any_head_comes_back_the_same(
            uri in uri(),
            entries in proptest::collection::vec((header_name(), header_value()), 0..24)
        ) {
            let mut map = HeaderMap::new();
            for (name, value) in entries {
                map.append(name, value);
            }
            let (back_uri, back) = round_trip(&uri, &map);
            prop_assert_eq!(pairs(&back), pairs(&map));
            prop_assert_eq!(&back_uri, &uri);
            prop_assert_eq!(uri_parts(&back_uri), uri_parts(&uri));
        }
    }
}
