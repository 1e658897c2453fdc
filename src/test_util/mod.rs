//! A loopback upstream with scripted faults, for tests (and, with the `redis`
//! feature, a [`RedisServer`] of a test's own for fleet tests).
//!
//! [`Upstream`] is a real HTTP server on `127.0.0.1` (an ephemeral port) that speaks
//! HTTP/1.1 or HTTP/2 with prior knowledge (h2c), and handles each request according to
//! a *script*: a list of [`Step`]s. It records what every request that reached it sent,
//! so a test can assert what the server actually processed, not only what the client saw.
//!
//! # Steps
//!
//! Each arriving request takes the next step of the script; the counter is shared by all
//! connections, so the order is the order in which requests reach the server. Once the
//! script is used up every request takes the fallback step set with
//! [`UpstreamBuilder::then`] (by default `200 OK` with an empty body).
//!
//! | step | the server… | processed? |
//! | --- | --- | --- |
//! | [`Step::Reply`] | reads the whole body, waits [`Reply::delay`], sends the response (optionally stalling its body) | yes |
//! | [`Step::Reply`] with [`Reply::before_body`] | answers as soon as the head arrived, reading none of the body; HTTP/2 then resets the stream with `NO_ERROR`, HTTP/1.1 closes the connection | no |
//! | [`Step::RefuseConnection`] | closes the next *accepted connection* before reading anything | no request recorded |
//! | [`Step::CloseOnHead`] | closes the connection as soon as the request head arrived, reading none of the body | no |
//! | [`Step::CloseAfterBodyBytes`]`(n)` | reads `n` bytes of the body, then closes the connection without answering | no (unless the body is that short) |
//! | [`Step::CloseAfterBody`] | reads the whole body, then closes the connection without answering: the answer is lost | yes |
//! | [`Step::CloseAfterHead`] | reads the whole body, sends a `200` head and half of the announced body, then closes the connection | yes |
//! | [`Step::RefusedStream`] | HTTP/2: resets the stream with `REFUSED_STREAM`, reading none of the body | no |
//! | [`Step::GoAway`] | HTTP/2: sends a `GOAWAY` whose last-stream-id is below this request's stream, then closes the connection | no |
//! | [`Step::ResetStream`] | HTTP/2: reads the whole body, then resets the stream with `INTERNAL_ERROR` | yes |
//!
//! HTTP/1.1 has no streams: there [`Step::RefusedStream`] and [`Step::GoAway`] behave
//! like [`Step::CloseOnHead`] (the connection is closed, nothing was processed), and
//! [`Step::ResetStream`] behaves like [`Step::CloseAfterBody`].
//!
//! Every close is a clean TCP close (`FIN`): the server first sends whatever it had
//! written, then shuts its side down and keeps reading (and discarding) until the client
//! closes too, so the client never sees a reset that races with the data before it.
//!
//! ## How [`Step::RefuseConnection`] consumes steps
//!
//! When a connection is accepted, the server looks at the next step: if it is
//! [`Step::RefuseConnection`], the connection consumes it and is closed at once (no request
//! is recorded for it); any other step is left for the next request. A request that finds
//! [`Step::RefuseConnection`] as its step (because its connection was accepted earlier, e.g.
//! a kept-alive one) consumes it and behaves like [`Step::CloseOnHead`]. A connection that
//! a client opens speculatively also counts as accepted, so put this step where the
//! client is known to open a new connection (the first request, or right after a step that
//! closed the connection).
//!
//! # Recording
//!
//! [`Upstream::requests`] returns one [`Recorded`] per request that reached the handler,
//! in arrival order: method, path, headers (and the `idempotency-key` value), the body
//! bytes the server read, whether it read the body to its end, the connection it came
//! on, the protocol and the step it took. A request is *processed* when the server read its
//! whole body ([`Recorded::processed`], [`Upstream::processed_count`]).
//! [`Upstream::connections`] counts accepted TCP connections.
//!
//! Dropping the [`Upstream`] stops the server: its listener and every connection task end.
//!
//! # What a hyper client sees
//!
//! With `hyper_util`'s legacy client (hyper 1), walking the error's `source()` chain:
//!
//! | step | HTTP/1.1 | HTTP/2 |
//! | --- | --- | --- |
//! | `CloseOnHead`, `CloseAfterBodyBytes`, `CloseAfterBody` | `hyper::Error::is_incomplete_message` | `hyper::Error` whose source is an `io::Error` of kind `BrokenPipe` |
//! | `CloseAfterHead` | response, then a body error: `hyper::Error` whose source is an `io::Error` of kind `UnexpectedEof` | response, then a body error: `hyper::Error` whose source is an `h2::Error` with `is_io()` (`BrokenPipe`) |
//! | `RefusedStream` | as `CloseOnHead` | `h2::Error`: `reason() == Some(REFUSED_STREAM)`, `is_reset() && is_remote()` |
//! | `GoAway` | as `CloseOnHead` | `h2::Error`: `is_go_away() && is_remote()`, `reason() == Some(NO_ERROR)` |
//! | `ResetStream` | as `CloseAfterBody` | `h2::Error`: `reason() == Some(INTERNAL_ERROR)`, `is_reset() && is_remote()` |
//! | `RefuseConnection` | a race: `is_incomplete_message`, or `is_canceled` (source: `is_incomplete_message`) when hyper saw the close before writing | a race: `is_canceled`, `is_closed`, or `BrokenPipe` as above |
//!
//! # Example
//!
//! ```rust
//! use backstop::test_util::{Protocol, Reply, Step, Upstream};
//! use bytes::Bytes;
//! use http_body_util::Full;
//! use hyper_util::client::legacy::Client;
//! use hyper_util::rt::TokioExecutor;
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let upstream = Upstream::builder()
//!     .protocol(Protocol::Http1)
//!     .script([
//!         Step::CloseAfterBody,
//!         Reply::status(503).header("retry-after", "1").into(),
//!     ])
//!     .then(Reply::ok().body("done"))
//!     .start()
//!     .await?;
//!
//! let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
//! let post = |body: &'static str| {
//!     http::Request::post(upstream.uri("/orders"))
//!         .header("idempotency-key", "k-1")
//!         .body(Full::new(Bytes::from(body)))
//! };
//!
//! // The server read the body, then closed the connection without answering.
//! assert!(client.request(post("first")?).await.is_err());
//! // Then it answers 503 with a Retry-After, then 200 for good.
//! assert_eq!(client.request(post("second")?).await?.status(), 503);
//! assert_eq!(client.request(post("third")?).await?.status(), 200);
//!
//! let seen = upstream.requests();
//! assert_eq!(seen.len(), 3);
//! assert!(seen[0].processed());
//! assert_eq!(seen[0].body, "first");
//! assert_eq!(seen[0].step, Step::CloseAfterBody);
//! assert_eq!(seen[1].idempotency_key.as_deref(), Some("k-1"));
//! assert_eq!(upstream.processed_count(), 3);
//! assert!(upstream.connections() >= 2); // the first one was closed
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::{Bytes, BytesMut};
use http::header::HeaderMap;
use http::Method;

mod io_tap;
#[cfg(feature = "redis")]
mod redis;
mod script;
mod server;

#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use redis::RedisServer;
use script::Stall;
pub use script::{Reply, Step};

/// The protocol an [`Upstream`] speaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Protocol {
    /// HTTP/1.1, with keep-alive.
    #[default]
    Http1,
    /// HTTP/2 over cleartext with prior knowledge (h2c): clients must be HTTP/2-only.
    Http2,
}

/// What the server saw of one request. Returned by [`Upstream::requests`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Recorded {
    /// The ordinal of the step this request took: its position in the script, or a
    /// number at least the script's length once the fallback applies. Steps consumed by
    /// [`Step::RefuseConnection`] at accept time count too.
    pub step_index: usize,
    /// The step that was applied.
    pub step: Step,
    /// The connection the request came on: accepted connections are numbered from 0.
    pub connection: usize,
    /// The protocol of the connection.
    pub protocol: Protocol,
    /// The request method.
    pub method: Method,
    /// The request path (without the query).
    pub path: String,
    /// The query string, if any.
    pub query: Option<String>,
    /// The request headers.
    pub headers: HeaderMap,
    /// The `idempotency-key` header, if present (lossily decoded as UTF-8).
    pub idempotency_key: Option<String>,
    /// The body bytes the server read.
    pub body: Bytes,
    /// Whether the server read the body to its end.
    pub body_complete: bool,
}

impl Recorded {
    /// Whether the server processed the request: it read the whole body.
    pub fn processed(&self) -> bool {
        self.body_complete
    }
}

/// Builds and starts an [`Upstream`]. Made by [`Upstream::builder`].
#[derive(Clone, Debug)]
pub struct UpstreamBuilder {
    protocol: Protocol,
    script: Vec<Step>,
    fallback: Step,
}

impl UpstreamBuilder {
    /// Sets the protocol (default: [`Protocol::Http1`]).
    pub fn protocol(mut self, protocol: Protocol) -> Self {
        self.protocol = protocol;
        self
    }

    /// Appends steps to the script.
    ///
    /// Steps can be given as [`Step`]s or as [`Reply`]s; a list that mixes both needs
    /// `.into()` on the replies (`[Step::CloseAfterBody, Reply::ok().into()]`).
    pub fn script<I>(mut self, steps: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<Step>,
    {
        self.script.extend(steps.into_iter().map(Into::into));
        self
    }

    /// Sets the step taken once the script is used up (default: `200 OK`, empty body).
    pub fn then(mut self, step: impl Into<Step>) -> Self {
        self.fallback = step.into();
        self
    }

    /// Binds `127.0.0.1` on an ephemeral port and starts serving.
    ///
    /// Fails with [`io::ErrorKind::InvalidInput`] if a [`Reply`] has an invalid status
    /// code or header, and with [`io::ErrorKind::Other`] outside a Tokio runtime.
    pub async fn start(self) -> io::Result<Upstream> {
        for (index, step) in self.script.iter().chain([&self.fallback]).enumerate() {
            if let Step::Reply(Reply {
                invalid: Some(why), ..
            }) = step
            {
                let which = if index < self.script.len() {
                    format!("script step {index}")
                } else {
                    "fallback step".to_owned()
                };
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("test_util: {which}: {why}"),
                ));
            }
        }
        let runtime = tokio::runtime::Handle::try_current().map_err(io::Error::other)?;
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            protocol: self.protocol,
            script: self.script,
            fallback: self.fallback,
            state: Mutex::new(State::default()),
        });
        let task = runtime.spawn(server::accept_loop(listener, shared.clone()));
        Ok(Upstream { addr, shared, task })
    }
}

/// A loopback HTTP server that follows a script of faults. See the [module docs](self).
///
/// Dropping it stops the server and every connection task.
pub struct Upstream {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl fmt::Debug for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.lock();
        f.debug_struct("Upstream")
            .field("addr", &self.addr)
            .field("protocol", &self.shared.protocol)
            .field("steps_taken", &state.taken)
            .field("requests", &state.requests.len())
            .field("connections", &state.connections)
            .finish()
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Upstream {
    /// Starts building an upstream.
    pub fn builder() -> UpstreamBuilder {
        UpstreamBuilder {
            protocol: Protocol::Http1,
            script: Vec::new(),
            fallback: Step::Reply(Reply::ok()),
        }
    }

    /// The address the server listens on (`127.0.0.1` and an ephemeral port).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The protocol the server speaks.
    pub fn protocol(&self) -> Protocol {
        self.shared.protocol
    }

    /// An `http://127.0.0.1:PORT` URI with this path (and query). A missing leading `/`
    /// is added and bytes not allowed in a URI path are percent-encoded.
    pub fn uri(&self, path_and_query: &str) -> http::Uri {
        let mut target = String::with_capacity(path_and_query.len() + 1);
        if !path_and_query.starts_with('/') {
            target.push('/');
        }
        for byte in path_and_query.bytes() {
            let plain = byte.is_ascii_graphic()
                && !matches!(
                    byte,
                    b'"' | b'<' | b'>' | b'\\' | b'^' | b'`' | b'{' | b'|' | b'}' | b'#'
                );
            if plain {
                target.push(char::from(byte));
            } else {
                target.push_str(&format!("%{byte:02X}"));
            }
        }
        let authority = self.addr.to_string();
        http::Uri::builder()
            .scheme("http")
            .authority(authority.as_str())
            .path_and_query(target)
            .build()
            .or_else(|_| {
                http::Uri::builder()
                    .scheme("http")
                    .authority(authority.as_str())
                    .path_and_query("/")
                    .build()
            })
            .unwrap_or_default()
    }

    /// One entry per request that reached the server, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        let state = self.shared.lock();
        state
            .requests
            .iter()
            .map(|entry| {
                let mut recorded = entry.recorded.clone();
                recorded.body = Bytes::copy_from_slice(&entry.body);
                recorded
            })
            .collect()
    }

    /// How many requests the server processed (read the whole body of).
    pub fn processed_count(&self) -> usize {
        let state = self.shared.lock();
        state
            .requests
            .iter()
            .filter(|entry| entry.recorded.body_complete)
            .count()
    }

    /// How many TCP connections the server accepted (refused ones included).
    pub fn connections(&self) -> usize {
        self.shared.lock().connections
    }

    /// How many steps were taken so far, by requests and by refused connections.
    pub fn steps_taken(&self) -> usize {
        self.shared.lock().taken
    }
}

/// State shared by the accept loop, the connection tasks and the [`Upstream`].
struct Shared {
    protocol: Protocol,
    script: Vec<Step>,
    fallback: Step,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Steps taken so far.
    taken: usize,
    /// Connections accepted so far.
    connections: usize,
    requests: Vec<Entry>,
}

/// A recorded request; the body is kept apart so that appending to it is cheap.
struct Entry {
    recorded: Recorded,
    body: BytesMut,
}

/// Where a request's record lives in [`State::requests`].
#[derive(Clone, Copy, Debug)]
struct Slot(usize);

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn step_at(&self, index: usize) -> &Step {
        self.script.get(index).unwrap_or(&self.fallback)
    }

    /// Numbers a newly accepted connection; `true` if it takes a
    /// [`Step::RefuseConnection`] step and must be closed.
    fn accept(&self) -> (usize, bool) {
        let mut state = self.lock();
        let id = state.connections;
        state.connections += 1;
        let refuse = matches!(self.step_at(state.taken), Step::RefuseConnection);
        if refuse {
            state.taken += 1;
        }
        (id, refuse)
    }

    /// Takes the next step for a request that just arrived, and records it.
    fn begin(&self, head: &http::request::Parts, connection: usize) -> (Slot, Step) {
        let mut state = self.lock();
        let step_index = state.taken;
        state.taken += 1;
        let step = self.step_at(step_index).clone();
        let idempotency_key = head
            .headers
            .get("idempotency-key")
            .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned());
        state.requests.push(Entry {
            recorded: Recorded {
                step_index,
                step: step.clone(),
                connection,
                protocol: self.protocol,
                method: head.method.clone(),
                path: head.uri.path().to_owned(),
                query: head.uri.query().map(str::to_owned),
                headers: head.headers.clone(),
                idempotency_key,
                body: Bytes::new(),
                body_complete: false,
            },
            body: BytesMut::new(),
        });
        (Slot(state.requests.len() - 1), step)
    }

    fn append_body(&self, slot: Slot, data: &[u8]) {
        if let Some(entry) = self.lock().requests.get_mut(slot.0) {
            entry.body.extend_from_slice(data);
        }
    }

    fn body_complete(&self, slot: Slot) {
        if let Some(entry) = self.lock().requests.get_mut(slot.0) {
            entry.recorded.body_complete = true;
        }
    }
}
