//! `head_copy`: a request with an arbitrary method, version, URI (parsed from
//! arbitrary text, or built from arbitrary parts) and up to a hundred headers
//! (repeated names, values past the flat-head limit, sensitive values), answered
//! first with 425 Too Early so the retry layer sends it again whatever its method.
//! The re-sent request's method, URI (equal, every part equal, the same text),
//! version, headers (the same names and value bytes in the same order, the same
//! sensitivity) and the caller's extensions equal the original's exactly.

use std::convert::Infallible;
use std::future::{ready, Future, Ready};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use backstop::{ReplayBody, RetryLayer, RetryPolicy};
use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderMap, Method, Request, Response, StatusCode, Uri, Version};
use http_body_util::Empty;
use tower_layer::Layer;
use tower_service::Service;

use super::input::Input;

/// A value of the caller's that must ride along unchanged.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Marker(u64);

const NAMES: [&str; 8] = [
    "host",
    "content-type",
    "authorization",
    "cookie",
    "idempotency-key",
    "x-a",
    "accept",
    "traceparent",
];

fn method(input: &mut Input<'_>) -> Method {
    const STANDARD: [Method; 9] = [
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
    let pick = input.u8();
    if pick < 200 {
        return STANDARD[usize::from(pick) % STANDARD.len()].clone();
    }
    Method::from_bytes(input.short_bytes()).unwrap_or(Method::POST)
}

fn version(input: &mut Input<'_>) -> Version {
    [
        Version::HTTP_09,
        Version::HTTP_10,
        Version::HTTP_11,
        Version::HTTP_2,
        Version::HTTP_3,
    ][input.upto(4)]
}

/// Bytes of the input, or a long run of one byte.
fn text(input: &mut Input<'_>) -> Vec<u8> {
    let mut bytes = input.short_bytes().to_vec();
    if bytes.first() == Some(&b'~') {
        let fill = bytes.get(1).copied().unwrap_or(b'a');
        bytes.resize(usize::from(input.u16() % 6000), fill);
    }
    bytes
}

fn uri(input: &mut Input<'_>) -> Uri {
    let parsed = match input.u8() % 3 {
        0 => Uri::try_from(text(input)).ok(),
        1 => {
            let mut parts = http::uri::Parts::default();
            if input.bool() {
                parts.scheme = Scheme::try_from(&text(input)[..]).ok();
            }
            if input.bool() {
                parts.authority = Authority::try_from(&text(input)[..]).ok();
            }
            if input.bool() {
                parts.path_and_query = PathAndQuery::try_from(&text(input)[..]).ok();
            }
            Uri::from_parts(parts).ok()
        }
        _ => {
            let mut s = b"http://".to_vec();
            s.extend(text(input));
            Uri::try_from(s).ok()
        }
    };
    parsed.unwrap_or_else(|| Uri::from_static("/"))
}

fn headers(input: &mut Input<'_>) -> HeaderMap {
    let mut map = HeaderMap::new();
    for _ in 0..input.upto(100) {
        let name = match input.u8() {
            n if n < 160 => HeaderName::from_static(NAMES[usize::from(n) % NAMES.len()]),
            _ => match HeaderName::from_bytes(input.short_bytes()) {
                Ok(name) => name,
                Err(_) => continue,
            },
        };
        let Ok(mut value) = HeaderValue::from_bytes(&text(input)) else {
            continue;
        };
        value.set_sensitive(input.bool());
        map.append(name, value);
    }
    map
}

/// What a request's head is, compared part by part.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    method: Method,
    version: Version,
    uri: Uri,
    uri_text: String,
    scheme: Option<String>,
    authority: Option<String>,
    path: String,
    query: Option<String>,
    path_and_query: Option<String>,
    port: Option<u16>,
    headers: Vec<(String, Vec<u8>, bool)>,
    header_count: usize,
    marker: Option<Marker>,
}

impl Seen {
    fn of<B>(req: &Request<B>) -> Self {
        let uri = req.uri();
        Seen {
            method: req.method().clone(),
            version: req.version(),
            uri: uri.clone(),
            uri_text: uri.to_string(),
            scheme: uri.scheme_str().map(str::to_owned),
            authority: uri.authority().map(|a| a.as_str().to_owned()),
            path: uri.path().to_owned(),
            query: uri.query().map(str::to_owned),
            path_and_query: uri.path_and_query().map(|p| p.as_str().to_owned()),
            port: uri.port_u16(),
            headers: req
                .headers()
                .iter()
                .map(|(n, v)| {
                    (
                        n.as_str().to_owned(),
                        v.as_bytes().to_vec(),
                        v.is_sensitive(),
                    )
                })
                .collect(),
            header_count: req.headers().len(),
            marker: req.extensions().get::<Marker>().cloned(),
        }
    }
}

#[derive(Clone, Default)]
struct Inner(Arc<Mutex<Vec<Seen>>>);

impl Service<Request<ReplayBody<Empty<Bytes>>>> for Inner {
    type Response = Response<Empty<Bytes>>;
    type Error = Infallible;
    type Future = Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<ReplayBody<Empty<Bytes>>>) -> Self::Future {
        let mut seen = self.0.lock().unwrap();
        seen.push(Seen::of(&req));
        let mut res = Response::new(Empty::new());
        if seen.len() == 1 {
            *res.status_mut() = StatusCode::TOO_EARLY;
        }
        ready(Ok(res))
    }
}

#[derive(Default)]
struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

pub fn check(data: &[u8]) {
    super::in_runtime(|| check_in_runtime(data));
}

fn check_in_runtime(data: &[u8]) {
    let mut input = Input::new(data);
    let mut req = Request::new(Empty::<Bytes>::new());
    *req.method_mut() = method(&mut input);
    *req.version_mut() = version(&mut input);
    *req.uri_mut() = uri(&mut input);
    *req.headers_mut() = headers(&mut input);
    req.extensions_mut().insert(Marker(input.u64()));
    let original = Seen::of(&req);

    let policy = RetryPolicy::builder()
        .max_attempts(2)
        .backoff(Duration::ZERO, Duration::ZERO)
        .build()
        .expect("a valid policy");
    let inner = Inner::default();
    let mut svc = RetryLayer::new(policy).layer(inner.clone());
    let waker = Waker::from(Arc::new(Flag::default()));
    let mut cx = Context::from_waker(&waker);
    assert!(svc.poll_ready(&mut cx).is_ready());
    let mut call = pin!(svc.call(req));
    let Poll::Ready(result) = call.as_mut().poll(&mut cx) else {
        panic!("the call did not end at once");
    };
    let res = result.expect("the call answers");
    assert_eq!(res.status(), StatusCode::OK);

    let seen = inner.0.lock().unwrap();
    assert_eq!(seen.len(), 2, "the 425 was not retried");
    assert_eq!(seen[0], original, "the first attempt's head");
    assert_eq!(seen[1], original, "the re-sent head");
}
