//! The reqwest client to put under the middleware: reqwest's own retry off.

/// A `reqwest::ClientBuilder` with reqwest's own retry off: the client to put under
/// a [`BackstopMiddleware`](super::BackstopMiddleware).
///
/// A reqwest 0.13 client re-sends some failures by itself, below every middleware:
/// by default an HTTP/2 `REFUSED_STREAM` or graceful `GOAWAY`, up to twice more per
/// request. Under backstop, each of its attempts could then reach the server up to
/// three times, outside its attempt count, budget, breaker and history. This
/// builder is `reqwest::Client::builder().retry(reqwest::retry::never())`, so every
/// attempt is backstop's; configure the rest (timeouts, TLS, proxies) on it as
/// usual, and leave `.retry(..)` alone.
/// [`BackstopMiddleware::into_client`](super::BackstopMiddleware::into_client)
/// builds the whole client from it when nothing else needs configuring.
///
/// # Examples
///
/// ```
/// use backstop::reqwest::BackstopMiddleware;
/// use backstop::RetryPolicy;
/// use std::time::Duration;
///
/// let client = backstop::reqwest::client_builder()
///     .connect_timeout(Duration::from_secs(2))
///     .build()?;
/// let client = reqwest_middleware::ClientBuilder::new(client)
///     .with(BackstopMiddleware::new(RetryPolicy::default()))
///     .build();
/// # let _ = client;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn client_builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder().retry(reqwest::retry::never())
}
