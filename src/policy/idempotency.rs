//! Which requests are safe to repeat.

use http::Method;

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
