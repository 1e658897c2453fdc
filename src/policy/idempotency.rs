//! Which requests are safe to repeat.

use std::fmt;
use std::sync::Arc;

use http::header::HeaderName;
use http::Method;

use super::{Given, Rules};

/// The header an idempotency key travels in by default.
pub(crate) const IDEMPOTENCY_KEY_HEADER: HeaderName = HeaderName::from_static("idempotency-key");

/// Whether RFC 9110 calls `method` idempotent: GET, HEAD, OPTIONS, TRACE, PUT and
/// DELETE. Repeating such a request has the same effect on the server as sending it
/// once, so a retry is harmless even when the first attempt was processed.
///
/// # Examples
///
/// ```
/// use backstop::policy::is_idempotent;
/// use http::Method;
///
/// assert!(is_idempotent(&Method::PUT));
/// assert!(!is_idempotent(&Method::POST));
/// ```
pub fn is_idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

/// Marks a request as carrying an idempotency key, so the server deduplicates
/// repeats and the retry layer treats the request like an idempotent one.
///
/// The idempotency-key layer puts it into the extensions of each request it stamps;
/// a caller that sets its own key header may insert it too. The retry layer also
/// treats a request as keyed when the policy's idempotency-key header is present.
///
/// # Examples
///
/// ```
/// use backstop::policy::Keyed;
///
/// let mut req = http::Request::post("http://example.com/charges")
///     .header("idempotency-key", "3f0c2f8e-6c7a-4b7e-9d55-2a1e0b6a7c11")
///     .body(())
///     .unwrap();
/// req.extensions_mut().insert(Keyed);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Keyed;

/// Whether a request carries the [`Keyed`] marker or the rules'
/// idempotency-key header, whatever its method.
#[inline]
pub(crate) fn carries_key(
    rules: &Rules,
    headers: &http::HeaderMap,
    extensions: &http::Extensions,
) -> bool {
    Given::new(extensions).keyed() || headers.contains_key(rules.idempotency_header())
}

/// A set of methods, asked on every call: a standard method is one bit, found
/// without comparing methods; an extension method is looked for in a list.
#[derive(Clone, Default)]
pub(crate) struct MethodSet {
    standard: u16,
    extensions: Arc<[Method]>,
}

/// The standard methods, each at its index (see [`standard_index`]).
pub(crate) const STANDARD_METHODS: [Method; 9] = [
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

/// The index of a standard method in [`STANDARD_METHODS`]; `None` for an extension
/// method.
#[inline]
pub(crate) fn standard_index(method: &Method) -> Option<u8> {
    Some(match *method {
        Method::GET => 0,
        Method::POST => 1,
        Method::PUT => 2,
        Method::DELETE => 3,
        Method::HEAD => 4,
        Method::OPTIONS => 5,
        Method::CONNECT => 6,
        Method::PATCH => 7,
        Method::TRACE => 8,
        _ => return None,
    })
}

/// The bit of a standard method in a [`MethodSet`].
#[inline]
fn standard_bit(method: &Method) -> Option<u16> {
    standard_index(method).map(|i| 1 << i)
}

impl MethodSet {
    /// Whether `method` is in the set.
    #[inline]
    pub(crate) fn contains(&self, method: &Method) -> bool {
        match standard_bit(method) {
            Some(bit) => self.standard & bit != 0,
            None => self.extensions.contains(method),
        }
    }

    /// The methods in the set: the standard ones in the order of
    /// [`STANDARD_METHODS`], then the others in the order they were given.
    pub(crate) fn iter(&self) -> impl Iterator<Item = Method> + '_ {
        STANDARD_METHODS
            .into_iter()
            .filter(|m| self.contains(m))
            .chain(self.extensions.iter().cloned())
    }
}

impl FromIterator<Method> for MethodSet {
    fn from_iter<I: IntoIterator<Item = Method>>(methods: I) -> Self {
        let mut standard = 0;
        let mut extensions = Vec::new();
        for method in methods {
            match standard_bit(&method) {
                Some(bit) => standard |= bit,
                None if !extensions.contains(&method) => extensions.push(method),
                None => {}
            }
        }
        MethodSet {
            standard,
            extensions: extensions.into(),
        }
    }
}

impl fmt::Debug for MethodSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_standard_method_is_at_its_index() {
        for (i, method) in STANDARD_METHODS.iter().enumerate() {
            assert_eq!(standard_index(method), Some(i as u8), "{method}");
        }
        assert_eq!(standard_index(&Method::from_bytes(b"PURGE").unwrap()), None);
    }

    #[test]
    fn a_method_set_holds_standard_and_extension_methods() {
        let purge = Method::from_bytes(b"PURGE").unwrap();
        let set: MethodSet = [Method::PATCH, purge.clone(), Method::POST, Method::POST]
            .into_iter()
            .collect();
        for (method, held) in [
            (Method::POST, true),
            (Method::PATCH, true),
            (purge.clone(), true),
            (Method::GET, false),
            (Method::PUT, false),
            (Method::from_bytes(b"LOCK").unwrap(), false),
        ] {
            assert_eq!(set.contains(&method), held, "{method}");
        }
        assert_eq!(
            set.iter().collect::<Vec<_>>(),
            [Method::POST, Method::PATCH, purge]
        );
        assert_eq!(format!("{set:?}"), "[POST, PATCH, PURGE]");
        assert!(!MethodSet::default().contains(&Method::GET));
    }
}
