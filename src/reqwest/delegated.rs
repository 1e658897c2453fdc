//! Delegated mode: reqwest's own retry (`reqwest::retry`), configured from a
//! backstop [`RetryPolicy`].

use http::{HeaderMap, StatusCode};

use crate::policy::{classify_error, ladder, Outcome};
use crate::retry::RetryPolicy;

/// reqwest's native retry for requests to `host`, judged by backstop's decision
/// ladder: give it to `reqwest::ClientBuilder::retry`.
///
/// Translated from `policy`:
///
/// - the attempt count: `max_attempts - 1` retries per request;
/// - the classifier: the [ladder](crate::policy::classify) on each outcome, with
///   the policy's retryable statuses and idempotent methods; a request reqwest
///   sent twice is one the ladder would re-send;
/// - the scope: reqwest's policy applies to one host, as backstop's budget and
///   breaker apply to one origin (the classifier checks the host too: reqwest's
///   own scope check lets an out-of-scope request's first retry through); reqwest's
///   own budget (20 % extra load over
///   10 s, the same numbers as [`BudgetPolicy::default`](crate::BudgetPolicy))
///   stays on (`.max_extra_load(ratio)` changes it, `.no_budget()` drops it).
///
/// What cannot be translated, because the attempts happen below the seam where
/// backstop could see them:
///
/// - **no wait**: reqwest re-sends at once, with no backoff and no `Retry-After`
///   (its classifier sees no response headers, so `x-should-retry` is not read
///   either);
/// - **no write progress**: a POST or PATCH without a key is re-sent only after a
///   connect-phase or not-processed failure, and a keyed one is judged as keyless
///   (the classifier sees no request headers);
/// - **no deadline cuts, no breaker, no hedging**, and bodies reqwest cannot
///   clone (streams) are never re-sent;
/// - **no history**: the response carries no [`History`](crate::policy::History)
///   and an error no stop reason. That absence is honest: backstop never saw the
///   attempts.
///
/// For those, use [`BackstopMiddleware`](super::BackstopMiddleware) instead, and
/// keep reqwest's own retry off (`reqwest::retry::never()`) so the two do not
/// multiply.
///
/// # Examples
///
/// ```
/// use backstop::RetryPolicy;
///
/// let policy = RetryPolicy::builder().max_attempts(3).retry_on(500).build()?;
/// let client = reqwest::Client::builder()
///     .retry(backstop::reqwest::native_retry("api.example.com", &policy))
///     .build()?;
/// # let _ = client;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn native_retry<S>(host: S, policy: &RetryPolicy) -> reqwest::retry::Builder
where
    S: for<'a> PartialEq<&'a str> + Clone + Send + Sync + 'static,
{
    let classify = policy.clone();
    let scope = host.clone();
    reqwest::retry::for_host(host)
        .max_retries_per_request(policy.max_attempts().saturating_sub(1))
        .classify_fn(move |rr| {
            // reqwest checks the scope from the second retry on; the classifier
            // checks it for the first too, so another host is never re-sent.
            let in_scope = scope == rr.uri().host().unwrap_or("");
            if in_scope && should_resend(&classify, rr.method(), rr.status(), rr.error()) {
                rr.retryable()
            } else {
                rr.success()
            }
        })
}

/// The ladder's verdict on one outcome reqwest's retry shows: no headers either
/// way, no progress record.
fn should_resend(
    policy: &RetryPolicy,
    method: &http::Method,
    status: Option<StatusCode>,
    error: Option<&(dyn std::error::Error + 'static)>,
) -> bool {
    let headers = HeaderMap::new();
    let outcome = match (status, error) {
        (Some(status), _) => Outcome::Response {
            status,
            headers: &headers,
        },
        (None, Some(err)) => Outcome::Error(classify_error(err)),
        (None, None) => return false,
    };
    let idempotent = policy.is_idempotent_method(method);
    ladder(policy.rules(), idempotent, false, outcome, error, None)
        .0
        .is_retryable()
}

#[cfg(test)]
mod tests {
    use std::io;

    use http::Method;

    use super::*;

    #[test]
    fn the_ladder_decides() {
        let policy = RetryPolicy::default();
        let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
        let reset = io::Error::from(io::ErrorKind::ConnectionReset);
        let unavailable = Some(StatusCode::SERVICE_UNAVAILABLE);
        assert!(should_resend(&policy, &Method::GET, unavailable, None));
        assert!(!should_resend(&policy, &Method::POST, unavailable, None));
        assert!(should_resend(
            &policy,
            &Method::GET,
            Some(StatusCode::TOO_EARLY),
            None
        ));
        assert!(should_resend(
            &policy,
            &Method::POST,
            Some(StatusCode::TOO_EARLY),
            None
        ));
        assert!(!should_resend(
            &policy,
            &Method::GET,
            Some(StatusCode::OK),
            None
        ));
        assert!(!should_resend(
            &policy,
            &Method::GET,
            Some(StatusCode::NOT_FOUND),
            None
        ));
        assert!(should_resend(&policy, &Method::POST, None, Some(&refused)));
        assert!(should_resend(&policy, &Method::GET, None, Some(&reset)));
        assert!(!should_resend(&policy, &Method::POST, None, Some(&reset)));
        assert!(!should_resend(&policy, &Method::GET, None, None));
    }

    #[test]
    fn statuses_follow_the_policy() {
        let policy = RetryPolicy::builder().retry_on(500).build().unwrap();
        let error = Some(StatusCode::INTERNAL_SERVER_ERROR);
        assert!(should_resend(&policy, &Method::PUT, error, None));
        assert!(!should_resend(
            &RetryPolicy::default(),
            &Method::PUT,
            error,
            None
        ));
    }
}
