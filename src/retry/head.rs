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

use crate::policy::{CallContext, Deadline, Given};

/// Headers up to this many bytes (the URI, names, values and 9 bytes per value) are
/// copied flat; larger ones are cloned.
pub(super) const FLAT_LIMIT: usize = 4096;

/// A request's head, kept for later attempts: its extensions as [`Extras`], and the
/// rest as one flat buffer (or, rarely, a clone). It is a few words, so the future
/// that keeps it stays small.
#[derive(Clone)]
pub(super) struct Head {
    extras: Extras,
    kept: HeadCopy,
}

#[derive(Clone)]
enum HeadCopy {
    /// One allocation: a prelude (the method's and the
    /// version's tags, the URI's length and the number of header values, see
    /// [`Prelude`]), the URI's text, then each header value as a record: a
    /// sensitivity byte, the name's and the value's lengths (`u32`, little-endian),
    /// then the name's and the value's bytes.
    Flat(Box<[u8]>),
    /// Boxed: a head this large or unusual is rare.
    Cloned(Box<Cloned>),
}

/// A head kept as it is: an extension method, a URI of an unusual shape, or
/// headers over [`FLAT_LIMIT`].
#[derive(Clone)]
struct Cloned {
    method: Method,
    version: Version,
    uri: Uri,
    headers: HeaderMap,
}

/// The standard methods, by their tag in a flat head.
const METHODS: [Method; 9] = [
    Method::GET,
    Method::POST,
    Method::PUT,
    Method::DELETE,
    Method::HEAD,
    Method::OPTIONS,
    Method::CONNECT,
    Method::PATCH,
    Method::TRACE,
];

/// The versions, by their tag in a flat head.
const VERSIONS: [Version; 5] = [
    Version::HTTP_09,
    Version::HTTP_10,
    Version::HTTP_11,
    Version::HTTP_2,
    Version::HTTP_3,
];

/// The bytes of a flat head written on the stack before it is allocated.
const ON_STACK: usize = 512;

/// The bytes of a flat head before the URI: method tag, version tag, the URI's
/// length and the number of values (`u32`, little-endian).
const PRELUDE: usize = 10;

/// The first bytes of a flat head, read back.
struct Prelude {
    method: Method,
    version: Version,
    uri_len: usize,
    values: usize,
}

/// The tag of a standard method; `None` for an extension method.
fn method_tag(method: &Method) -> Option<u8> {
    METHODS.iter().position(|m| m == method).map(|i| i as u8)
}

/// The tag of a version; `None` for one `http` may add.
fn version_tag(version: Version) -> Option<u8> {
    VERSIONS.iter().position(|&v| v == version).map(|i| i as u8)
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
    fn of(method: &Method, version: Version, uri: &Uri, headers: &HeaderMap) -> Self {
        match Self::flat(method, version, uri, headers) {
            Some(flat) => HeadCopy::Flat(flat),
            None => HeadCopy::Cloned(Box::new(Cloned {
                method: method.clone(),
                version,
                uri: uri.clone(),
                headers: headers.clone(),
            })),
        }
    }

    /// The flat copy: written into an array on the stack while it fits (most
    /// heads do), then copied once into an allocation of exactly its size; a
    /// larger head is written again into a buffer that grows. `None` when the head
    /// must be cloned.
    #[inline]
    fn flat(
        method: &Method,
        version: Version,
        uri: &Uri,
        headers: &HeaderMap,
    ) -> Option<Box<[u8]>> {
        let prelude = [method_tag(method)?, version_tag(version)?];
        let text = uri_text(uri)?;
        let mut stack = OnStack {
            buf: [0; ON_STACK],
            len: 0,
        };
        if write(&mut stack, prelude, text, headers)? {
            return Some(stack.buf[..stack.len].into());
        }
        let mut grown = Vec::with_capacity(2 * ON_STACK);
        write(&mut grown, prelude, text, headers)?;
        Some(grown.into_boxed_slice())
    }

    /// The head's parts again; `None` if the text does not parse back, which a
    /// head built through `http`'s checked constructors never gives.
    fn parts(self) -> Option<Cloned> {
        let buf = match self {
            HeadCopy::Cloned(head) => return Some(*head),
            HeadCopy::Flat(buf) => buf,
        };
        let prelude = Prelude::of(&buf)?;
        let buf = Bytes::from(buf);
        let uri_end = PRELUDE.checked_add(prelude.uri_len)?;
        if uri_end > buf.len() {
            return None;
        }
        let uri = Uri::from_maybe_shared(buf.slice(PRELUDE..uri_end)).ok()?;
        let mut map = HeaderMap::with_capacity(prelude.values);
        let mut at = uri_end;
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
        Some(Cloned {
            method: prelude.method,
            version: prelude.version,
            uri,
            headers: map,
        })
    }
}

impl Prelude {
    fn of(buf: &[u8]) -> Option<Self> {
        Some(Prelude {
            method: METHODS.get(usize::from(*buf.first()?))?.clone(),
            version: *VERSIONS.get(usize::from(*buf.get(1)?))?,
            uri_len: read_len(buf, 2)?,
            values: read_len(buf, 6)?,
        })
    }
}

/// Where a flat head is written.
trait Sink {
    /// Appends `bytes`; `false` when they do not fit (nothing is written then).
    fn put(&mut self, bytes: &[u8]) -> bool;
    fn len(&self) -> usize;
    /// Overwrites the four bytes at `at`, written before.
    fn patch(&mut self, at: usize, bytes: [u8; 4]);
}

/// A head being written on the stack.
struct OnStack {
    buf: [u8; ON_STACK],
    len: usize,
}

impl Sink for OnStack {
    #[inline(always)]
    fn put(&mut self, bytes: &[u8]) -> bool {
        let Some(dst) = self.buf.get_mut(self.len..self.len + bytes.len()) else {
            return false;
        };
        copy_short(dst, bytes);
        self.len += bytes.len();
        true
    }

    #[inline(always)]
    fn len(&self) -> usize {
        self.len
    }

    #[inline(always)]
    fn patch(&mut self, at: usize, bytes: [u8; 4]) {
        self.buf[at..at + 4].copy_from_slice(&bytes);
    }
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) -> bool {
        self.extend_from_slice(bytes);
        true
    }

    fn len(&self) -> usize {
        Vec::len(self)
    }

    fn patch(&mut self, at: usize, bytes: [u8; 4]) {
        self[at..at + 4].copy_from_slice(&bytes);
    }
}

/// Copies `src` into `dst` (of the same length). The parts of a head are mostly
/// a few bytes to a few dozen: those are copied as two overlapping words, without
/// a call into `memcpy`.
#[inline(always)]
fn copy_short(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    if n > 32 || dst.len() != n {
        dst.copy_from_slice(src);
    } else if n >= 16 {
        dst[..16].copy_from_slice(&src[..16]);
        dst[n - 16..].copy_from_slice(&src[n - 16..]);
    } else if n >= 8 {
        dst[..8].copy_from_slice(&src[..8]);
        dst[n - 8..].copy_from_slice(&src[n - 8..]);
    } else if n >= 4 {
        dst[..4].copy_from_slice(&src[..4]);
        dst[n - 4..].copy_from_slice(&src[n - 4..]);
    } else if n > 0 {
        dst[0] = src[0];
        dst[n / 2] = src[n / 2];
        dst[n - 1] = src[n - 1];
    }
}

/// Writes a flat head (see [`HeadCopy::Flat`]) into `sink`: `Some(false)` when it
/// did not fit there, `None` when its headers are over [`FLAT_LIMIT`].
#[inline(always)]
fn write<S: Sink>(
    sink: &mut S,
    [method, version]: [u8; 2],
    [scheme, authority, path]: [&str; 3],
    headers: &HeaderMap,
) -> Option<bool> {
    // The lengths are filled in at the end.
    let mut fits = sink.put(&[method, version, 0, 0, 0, 0, 0, 0, 0, 0]);
    if !scheme.is_empty() {
        fits &= sink.put(scheme.as_bytes()) && sink.put(b"://");
    }
    fits &= sink.put(authority.as_bytes()) && sink.put(path.as_bytes());
    if !fits {
        return Some(false);
    }
    let uri_len = sink.len() - PRELUDE;
    for (name, value) in headers {
        let name = name.as_str().as_bytes();
        let value_bytes = value.as_bytes();
        if sink.len() - PRELUDE + 9 + name.len() + value_bytes.len() > FLAT_LIMIT {
            return None;
        }
        // Both fit: the whole is at most FLAT_LIMIT bytes.
        let mut lead = [0; 9];
        lead[0] = u8::from(value.is_sensitive());
        lead[1..5].copy_from_slice(&(name.len() as u32).to_le_bytes());
        lead[5..].copy_from_slice(&(value_bytes.len() as u32).to_le_bytes());
        if !(sink.put(&lead) && sink.put(name) && sink.put(value_bytes)) {
            return Some(false);
        }
    }
    sink.patch(2, (uri_len as u32).to_le_bytes());
    sink.patch(6, (headers.len() as u32).to_le_bytes());
    Some(true)
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
pub(super) enum Extras {
    None,
    Context(Box<CallContext>),
    All(Extensions),
}

impl Extras {
    /// What to keep of the extensions `given` reads.
    #[inline]
    pub(super) fn of(given: &Given<'_>) -> Self {
        match given.parts() {
            (Some(all), _) => Extras::All(all.clone()),
            (None, Some(context)) => Extras::Context(Box::new(context.clone())),
            (None, None) => Extras::None,
        }
    }

    /// Sets the call's deadline in the kept context, as in the request's.
    pub(super) fn set_deadline(&mut self, deadline: Deadline) {
        match self {
            Extras::None => {
                let mut context = CallContext::default();
                context.set_deadline(deadline);
                *self = Extras::Context(Box::new(context));
            }
            Extras::Context(context) => context.set_deadline(deadline),
            Extras::All(all) => CallContext::of_mut(all).set_deadline(deadline),
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
    /// The head of `head`, with `extras` kept of its extensions.
    #[inline]
    pub(super) fn of(head: &http::request::Parts, extras: Extras) -> Self {
        Head {
            extras,
            kept: HeadCopy::of(&head.method, head.version, &head.uri, &head.headers),
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
        let head = self.kept.parts()?;
        let mut req = Request::new(body);
        *req.method_mut() = head.method;
        *req.uri_mut() = head.uri;
        *req.version_mut() = head.version;
        *req.headers_mut() = head.headers;
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
        let (parts, ()) = req.into_parts();
        let extras = Extras::of(&Given::new(&parts.extensions));
        let back = Head::of(&parts, extras).request(()).unwrap();
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

    fn flat(kept: &HeadCopy) -> bool {
        matches!(kept, HeadCopy::Flat(_))
    }

    /// The copy of a GET's head.
    fn copy(uri: &Uri, headers: &HeaderMap) -> HeadCopy {
        HeadCopy::of(&Method::GET, Version::HTTP_11, uri, headers)
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
            let kept = copy(&uri, &HeaderMap::new());
            assert!(flat(&kept), "{text} is kept as text");
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
        let kept = copy(&odd, &HeaderMap::new());
        assert!(!flat(&kept));
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
            assert!(!flat(&copy(&uri, &HeaderMap::new())), "{uri}");
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
        assert!(!flat(&copy(&uri, &HeaderMap::new())));
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
        assert!(flat(&copy(&uri, &small)));
        assert!(flat(&copy(&uri, &HeaderMap::new())));

        let mut large = HeaderMap::new();
        let big = "x".repeat(FLAT_LIMIT);
        large.insert("cookie", HeaderValue::from_str(&big).unwrap());
        assert!(!flat(&copy(&uri, &large)));
        let (back_uri, back) = round_trip(&uri, &large);
        assert_eq!(back, large);
        assert_eq!(back_uri, uri);
    }

    #[test]
    fn a_damaged_record_reads_back_as_none_or_less_not_a_panic() {
        let uri = Uri::from_static("/x");
        let mut map = HeaderMap::new();
        map.insert("accept", HeaderValue::from_static("*/*"));
        let HeadCopy::Flat(buf) = copy(&uri, &map) else {
            panic!("expected a flat head");
        };
        let uri_end = PRELUDE + 2;
        for cut in 0..buf.len() {
            let damaged = HeadCopy::Flat(buf[..cut].into());
            // A cut prelude or URI is refused, a truncated record too; a cut
            // between records loses them.
            if let Some(back) = damaged.parts() {
                assert!(cut >= uri_end && back.headers.len() < map.len());
            }
        }
        let mut bad = buf.to_vec();
        bad[uri_end + 9] = b'\n';
        assert!(HeadCopy::Flat(bad.into()).parts().is_none());
        for tag in [0, 1] {
            let mut bad = buf.to_vec();
            bad[tag] = 200;
            assert!(HeadCopy::Flat(bad.into()).parts().is_none(), "tag {tag}");
        }
    }

    #[test]
    fn a_head_larger_than_the_stack_buffer_is_still_flat() {
        let uri = Uri::from_static("https://a.test/p?q=1");
        let mut map = HeaderMap::new();
        for i in 0..8 {
            let value = HeaderValue::from_str(&format!("{i}").repeat(200)).unwrap();
            map.append("x-big", value);
        }
        let kept = copy(&uri, &map);
        assert!(flat(&kept));
        let back = kept.parts().unwrap();
        assert_eq!(pairs(&back.headers), pairs(&map));
        assert_eq!(back.uri, uri);
    }

    #[test]
    fn every_method_and_version_comes_back_and_an_extension_method_is_cloned() {
        let uri = Uri::from_static("http://a.test/x");
        for method in METHODS
            .iter()
            .chain([&Method::from_bytes(b"PURGE").unwrap()])
        {
            for version in VERSIONS {
                let kept = HeadCopy::of(method, version, &uri, &HeaderMap::new());
                assert_eq!(flat(&kept), method_tag(method).is_some(), "{method}");
                let back = kept.parts().unwrap();
                assert_eq!((&back.method, back.version), (method, version));
                assert_eq!(back.uri, uri);
            }
        }
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
