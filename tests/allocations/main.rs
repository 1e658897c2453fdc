//! What the retry layer allocates when the first attempt is answered: one buffer for
//! the request head it keeps, and nothing else. Its own binary, because it counts
//! allocations with a global allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::convert::Infallible;
use std::future::{ready, Future, Ready};
use std::pin::pin;
use std::task::{Context, Poll};

use backstop::{ReplayBody, RetryLayer, RetryPolicy};
use bytes::Bytes;
use futures_util::task::noop_waker_ref;
use http::{Request, Response};
use http_body_util::Full;
use tower::{Layer, Service};

/// Counts the allocations made on each thread (tests run on several).
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        System.alloc(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn request(extra_header_bytes: usize) -> Request<Full<Bytes>> {
    Request::get("http://127.0.0.1:8080/items/42?view=full")
        .header("accept", "application/json")
        .header("user-agent", "backstop-test")
        .header("x-padding", "p".repeat(extra_header_bytes))
        .body(Full::default())
        .unwrap()
}

fn ok<B>(_: Request<B>) -> Ready<Result<Response<Full<Bytes>>, Infallible>> {
    ready(Ok(Response::new(Full::default())))
}

/// Allocations made by building a request, sending it through `svc` (whose answer
/// is ready at once) and dropping the response.
fn allocations_of_one_call<S>(svc: &mut S, extra_header_bytes: usize) -> usize
where
    S: Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>>,
    S::Error: std::fmt::Debug,
{
    let mut cx = Context::from_waker(noop_waker_ref());
    let before = ALLOCATIONS.with(Cell::get);
    assert!(svc.poll_ready(&mut cx).is_ready());
    let fut = pin!(svc.call(request(extra_header_bytes)));
    match fut.poll(&mut cx) {
        Poll::Ready(res) => drop(res.unwrap()),
        Poll::Pending => panic!("the answer is ready at once"),
    }
    ALLOCATIONS.with(Cell::get) - before
}

#[test]
fn a_first_answer_costs_one_allocation_for_the_kept_head() {
    let mut bare = tower::service_fn(ok::<Full<Bytes>>);
    let mut retry = RetryLayer::new(RetryPolicy::default())
        .layer(tower::service_fn(ok::<ReplayBody<Full<Bytes>>>));
    // The first calls register tracing's call sites. (With no subscriber the span is
    // `Span::none()` and is not kept; a build that turns on tracing's `log` feature
    // keeps a disabled span for its log output, one more allocation.)
    allocations_of_one_call(&mut bare, 10);
    allocations_of_one_call(&mut retry, 10);

    let bare_count = allocations_of_one_call(&mut bare, 10);
    let retry_count = allocations_of_one_call(&mut retry, 10);
    assert_eq!(retry_count, bare_count + 1, "bare {bare_count}");
}

#[test]
fn a_head_over_the_flat_limit_is_cloned_and_still_answered() {
    let mut bare = tower::service_fn(ok::<Full<Bytes>>);
    let mut retry = RetryLayer::new(RetryPolicy::default())
        .layer(tower::service_fn(ok::<ReplayBody<Full<Bytes>>>));
    allocations_of_one_call(&mut retry, 10);

    // Cloning a header map allocates its tables and a shared buffer per value made
    // from a string, and boxes the clone: more than the flat copy's one.
    let bare_count = allocations_of_one_call(&mut bare, 5000);
    let retry_count = allocations_of_one_call(&mut retry, 5000);
    assert!(
        retry_count > bare_count + 1,
        "bare {bare_count}, retry {retry_count}"
    );
}
