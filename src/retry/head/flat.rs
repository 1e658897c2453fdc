//! The flat copy of a request head: the method and version as tags, then the
//! URI's text and each header value's bytes, in one buffer written in one pass and
//! read back into a `Uri` and a `HeaderMap` only when a retry is sent. A head this
//! encoding cannot keep exactly (an extension method, a URI of an unusual shape,
//! headers over [`FLAT_LIMIT`]) is cloned as it is.

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, Method, Uri, Version};

/// Headers up to this many bytes (the URI, names, values and 9 bytes per value) are
/// copied flat; larger ones are cloned.
pub(super) const FLAT_LIMIT: usize = 4096;

// The large variant is the point: the copy lives in the block a call keeps for its
// later attempts, and the usual head fits in place there.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
pub(super) enum HeadCopy {
    /// The usual head, in place: a prelude (the method's and the version's tags,
    /// the URI's length and the number of header values, see [`Prelude`]), the
    /// URI's text, then each header value as a record: a sensitivity byte, the
    /// name's and the value's lengths (`u32`, little-endian), then the name's and
    /// the value's bytes. It lives where the call keeps its head, on the heap with
    /// the service for later attempts, so it costs no allocation of its own.
    Inline(Inline),
    /// The same encoding, for a head longer than [`INLINE`] bytes.
    Flat(Box<[u8]>),
    /// Boxed: a head this large or unusual is rare.
    Cloned(Box<Cloned>),
}

/// A flat head of at most [`INLINE`] bytes, in place.
#[derive(Clone)]
pub(super) struct Inline {
    buf: [u8; INLINE],
    len: usize,
}

impl Inline {
    pub(super) fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// A head kept as it is: an extension method, a URI of an unusual shape, or
/// headers over [`FLAT_LIMIT`].
#[derive(Clone)]
pub(super) struct Cloned {
    pub(super) method: Method,
    pub(super) version: Version,
    pub(super) uri: Uri,
    pub(super) headers: HeaderMap,
}

/// The standard methods, by their tag in a flat head.
pub(super) use crate::policy::STANDARD_METHODS as METHODS;

/// The versions, by their tag in a flat head.
pub(super) const VERSIONS: [Version; 5] = [
    Version::HTTP_09,
    Version::HTTP_10,
    Version::HTTP_11,
    Version::HTTP_2,
    Version::HTTP_3,
];

/// The bytes of a flat head kept in place; a longer one is allocated. A URI and
/// a handful of usual headers take 100 to 200.
pub(super) const INLINE: usize = 256;

/// The bytes of a flat head before the URI: method tag, version tag, the URI's
/// length and the number of values (`u32`, little-endian).
pub(super) const PRELUDE: usize = 10;

/// The first bytes of a flat head, read back.
struct Prelude {
    method: Method,
    version: Version,
    uri_len: usize,
    values: usize,
}

/// The tag of a standard method (its index in [`METHODS`]); `None` for an
/// extension method.
pub(super) use crate::policy::standard_index as method_tag;

/// The tag of a version; `None` for one `http` may add.
#[inline]
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
#[inline]
fn uri_text(uri: &Uri) -> Option<[&str; 3]> {
    let path = uri.path_and_query().map(|p| p.as_str());
    let text = match (uri.scheme(), uri.authority(), path) {
        (Some(scheme), Some(authority), Some(path)) if path.starts_with('/') => {
            let text = scheme.as_str();
            // `http` and `https` parse to http's own schemes, spelt in lower case;
            // any other is read. (Compared as text: a custom scheme is never spelt
            // `http` or `https`, and two constant compares cost less than `Scheme`'s
            // own equality, which is a call.)
            let own = matches!(text, "http" | "https");
            if !own && (text.is_empty() || text.bytes().any(|b| b.is_ascii_uppercase())) {
                return None;
            }
            [text, authority.as_str(), path]
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
    #[cfg(test)]
    pub(super) fn of(method: &Method, version: Version, uri: &Uri, headers: &HeaderMap) -> Self {
        let mut copy = HeadCopy::empty();
        copy.fill(method, version, uri, headers);
        copy
    }

    /// Room for a head, to be filled in where it is kept.
    #[inline]
    pub(super) fn empty() -> Self {
        HeadCopy::Inline(Inline {
            buf: [0; INLINE],
            len: 0,
        })
    }

    /// Makes this the copy of a head: flat if the encoding keeps it exactly, else a
    /// clone.
    #[inline]
    pub(super) fn fill(
        &mut self,
        method: &Method,
        version: Version,
        uri: &Uri,
        headers: &HeaderMap,
    ) {
        if self.fill_flat(method, version, uri, headers).is_none() {
            *self = HeadCopy::Cloned(Box::new(Cloned {
                method: method.clone(),
                version,
                uri: uri.clone(),
                headers: headers.clone(),
            }));
        }
    }

    /// The flat copy: written in place while it fits (most heads do), else written
    /// again into a buffer that grows. `None` when the head must be cloned.
    #[inline]
    fn fill_flat(
        &mut self,
        method: &Method,
        version: Version,
        uri: &Uri,
        headers: &HeaderMap,
    ) -> Option<()> {
        let prelude = [method_tag(method)?, version_tag(version)?];
        let text = uri_text(uri)?;
        if let HeadCopy::Inline(inline) = self {
            inline.len = 0;
            if write(inline, prelude, text, headers)? {
                return Some(());
            }
        }
        let mut grown = Vec::with_capacity(4 * INLINE);
        write(&mut grown, prelude, text, headers)?;
        *self = HeadCopy::Flat(grown.into_boxed_slice());
        Some(())
    }

    /// The head's parts again; `None` if the text does not parse back, which a
    /// head built through `http`'s checked constructors never gives.
    pub(super) fn parts(self) -> Option<Cloned> {
        let buf = match self {
            HeadCopy::Cloned(head) => return Some(*head),
            HeadCopy::Flat(buf) => Bytes::from(buf),
            HeadCopy::Inline(inline) => Bytes::copy_from_slice(inline.bytes()),
        };
        let prelude = Prelude::of(&buf)?;
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
    /// The next `n` bytes, to be written; `None` when they do not fit (nothing is
    /// taken then).
    fn room(&mut self, n: usize) -> Option<&mut [u8]>;
    fn len(&self) -> usize;
}

impl Sink for Inline {
    #[inline(always)]
    fn room(&mut self, n: usize) -> Option<&mut [u8]> {
        let start = self.len;
        let dst = self.buf.get_mut(start..start.checked_add(n)?)?;
        self.len = start + n;
        Some(dst)
    }

    #[inline(always)]
    fn len(&self) -> usize {
        self.len
    }
}

impl Sink for Vec<u8> {
    fn room(&mut self, n: usize) -> Option<&mut [u8]> {
        let start = Vec::len(self);
        self.resize(start.checked_add(n)?, 0);
        self.get_mut(start..)
    }

    fn len(&self) -> usize {
        Vec::len(self)
    }
}

/// Copies `src` into `dst`, which is as long. The parts of a head are mostly
/// a few bytes to a few dozen: those are copied as two overlapping words, without
/// a call into `memcpy`.
#[inline(always)]
fn copy_short(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    if n > 32 {
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

/// Copies the parts into `dst`, one after the other; `dst` is as long as they are.
#[inline(always)]
fn copy_parts<const N: usize>(dst: &mut [u8], parts: [&[u8]; N]) {
    let mut at = 0;
    for part in parts {
        let end = at + part.len();
        copy_short(&mut dst[at..end], part);
        at = end;
    }
}

/// Writes a flat head (see [`HeadCopy::Inline`]) into `sink`: `Some(false)` when it
/// did not fit there, `None` when its headers are over [`FLAT_LIMIT`]. Each part
/// (the prelude and URI, then each header value's record) takes its room at once
/// and is written into it.
#[inline(always)]
fn write<S: Sink>(
    sink: &mut S,
    [method, version]: [u8; 2],
    [scheme, authority, path]: [&str; 3],
    headers: &HeaderMap,
) -> Option<bool> {
    let sep: &[u8] = if scheme.is_empty() { b"" } else { b"://" };
    let uri = [
        scheme.as_bytes(),
        sep,
        authority.as_bytes(),
        path.as_bytes(),
    ];
    let uri_len: usize = uri.iter().map(|part| part.len()).sum();
    let Some(dst) = sink.room(PRELUDE + uri_len) else {
        return Some(false);
    };
    let (prelude, text) = dst.split_at_mut(PRELUDE);
    prelude[0] = method;
    prelude[1] = version;
    prelude[2..6].copy_from_slice(&(uri_len as u32).to_le_bytes());
    prelude[6..].copy_from_slice(&(headers.len() as u32).to_le_bytes());
    copy_parts(text, uri);
    for (name, value) in headers {
        let name = name.as_str().as_bytes();
        let value_bytes = value.as_bytes();
        let record = 9 + name.len() + value_bytes.len();
        if sink.len() - PRELUDE + record > FLAT_LIMIT {
            return None;
        }
        // It fits: the whole is at most FLAT_LIMIT bytes.
        let Some(dst) = sink.room(record) else {
            return Some(false);
        };
        let (lead, rest) = dst.split_at_mut(9);
        lead[0] = u8::from(value.is_sensitive());
        lead[1..5].copy_from_slice(&(name.len() as u32).to_le_bytes());
        lead[5..].copy_from_slice(&(value_bytes.len() as u32).to_le_bytes());
        copy_parts(rest, [name, value_bytes]);
    }
    Some(true)
}

fn read_len(buf: &[u8], at: usize) -> Option<usize> {
    let bytes: [u8; 4] = buf.get(at..at.checked_add(4)?)?.try_into().ok()?;
    usize::try_from(u32::from_le_bytes(bytes)).ok()
}
