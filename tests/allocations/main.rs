//! What the retry layer allocates when the first attempt is answered: one block for
//! what a retry would need (the request head it keeps, beside a clone of the inner
//! service), and nothing else. Its own binary, because it counts
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

/// Allocations made by sending `req` (built beforehand) through `svc`, whose answer
/// is ready at once, and dropping the response.
fn allocations_of<S>(svc: &mut S, req: Request<Full<Bytes>>) -> usize
where
    S: Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>>,
    S::Error: std::fmt::Debug,
{
    let mut cx = Context::from_waker(noop_waker_ref());
    let before = ALLOCATIONS.with(Cell::get);
    assert!(svc.poll_ready(&mut cx).is_ready());
    let fut = pin!(svc.call(req));
    match fut.poll(&mut cx) {
        Poll::Ready(res) => drop(res.unwrap()),
        Poll::Pending => panic!("the answer is ready at once"),
    }
    ALLOCATIONS.with(Cell::get) - before
}

/// The same for a GET with the usual headers and `extra_header_bytes` of padding.
fn allocations_of_one_call<S>(svc: &mut S, extra_header_bytes: usize) -> usize
where
    S: Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>>,
    S::Error: std::fmt::Debug,
{
    allocations_of(svc, request(extra_header_bytes))
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

/// The same for a GET of `uri` with no headers.
fn allocations_of_a_call_to<S>(svc: &mut S, uri: &str) -> usize
where
    S: Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>>,
    S::Error: std::fmt::Debug,
{
    allocations_of(svc, Request::get(uri).body(Full::default()).unwrap())
}

#[test]
fn finding_an_origins_breaker_and_account_allocates_nothing() {
    use backstop::{
        BudgetLayer, BudgetPolicy, CircuitBreakerLayer, CircuitBreakerPolicy, Partition,
    };

    let stack = |partition: Partition| {
        let breaker = CircuitBreakerPolicy::builder()
            .partition(partition.clone())
            .build()
            .unwrap();
        let budget = BudgetPolicy::builder()
            .partition(partition)
            .build()
            .unwrap();
        CircuitBreakerLayer::new(breaker)
            .layer(BudgetLayer::new(budget).layer(tower::service_fn(ok::<Full<Bytes>>)))
    };
    // One entry for every call, so no lookup at all; and one entry per origin,
    // found in the registry once the first call made it.
    let mut global = stack(Partition::global());
    let mut per_origin = stack(Partition::origin());
    allocations_of_a_call_to(&mut global, "http://example.test/");
    assert!(allocations_of_a_call_to(&mut per_origin, "http://example.test/") > 0);

    let global_count = allocations_of_a_call_to(&mut global, "http://example.test/x");
    for uri in ["http://example.test/x", "HTTP://EXAMPLE.Test/y?q"] {
        let count = allocations_of_a_call_to(&mut per_origin, uri);
        assert_eq!(count, global_count, "{uri}");
    }
}

/// The same for a PUT with a five-byte body, which the inner service does not read.
fn allocations_of_a_put<S>(svc: &mut S) -> usize
where
    S: Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>>,
    S::Error: std::fmt::Debug,
{
    let req = Request::put("http://127.0.0.1:8080/items/42")
        .body(Full::from("hello"))
        .unwrap();
    allocations_of(svc, req)
}

#[test]
fn a_body_costs_its_reader_and_what_replays_need_and_no_more() {
    let mut bare = tower::service_fn(ok::<Full<Bytes>>);
    let mut retry = RetryLayer::new(RetryPolicy::default())
        .layer(tower::service_fn(ok::<ReplayBody<Full<Bytes>>>));
    let mut once = RetryLayer::new(RetryPolicy::none())
        .layer(tower::service_fn(ok::<ReplayBody<Full<Bytes>>>));
    allocations_of_a_put(&mut retry);
    allocations_of_a_put(&mut once);

    let bare_count = allocations_of_a_put(&mut bare);
    // Kept for replays: the block for later attempts, the shared state, its
    // fan-out waker and the original body in it; and the first attempt's reader,
    // boxed so that a replay body is no larger than the body it stands for.
    assert_eq!(
        allocations_of_a_put(&mut retry),
        bare_count + 5,
        "bare {bare_count}"
    );
    // Read straight through: the reader and the original body it holds; and the
    // call's context, which tells a hedge layer beneath that a call sent once is
    // never hedged (the extensions' map, its table, the context).
    assert_eq!(
        allocations_of_a_put(&mut once),
        bare_count + 5,
        "bare {bare_count}"
    );
}

/// A call in the stack records itself for its observer once, for the breaker's permit,
/// the pause and the retry's own events alike: an observer costs a call through
/// the stack what it costs the retry layer alone.
#[test]
fn a_stacked_call_records_itself_once_for_its_observer() {
    use backstop::observe::{Event, ObserveLayer, Observer};
    use backstop::{BudgetPolicy, CircuitBreakerPolicy};

    struct Quiet;
    impl Observer for Quiet {
        fn on_event(&self, _: &Event<'_>) {}
    }
    let retry = || RetryLayer::new(RetryPolicy::default());
    let stack = || {
        backstop::Backstop::builder()
            .circuit_breaker(CircuitBreakerPolicy::default())
            .budget(BudgetPolicy::default())
            .build()
            .unwrap()
    };
    let inner = || tower::service_fn(ok::<ReplayBody<Full<Bytes>>>);
    let observed = ObserveLayer::new(Quiet);
    let mut plain = retry().layer(inner());
    let mut plain_observed = observed.layer(retry().layer(inner()));
    let mut stacked = stack().layer(inner());
    let mut stack_observed = observed.layer(stack().layer(inner()));
    // The first call through a stack makes its origin's entry.
    allocations_of_one_call(&mut stacked, 0);
    allocations_of_one_call(&mut stack_observed, 0);

    let observer_alone =
        allocations_of_one_call(&mut plain_observed, 0) - allocations_of_one_call(&mut plain, 0);
    let observer_stacked =
        allocations_of_one_call(&mut stack_observed, 0) - allocations_of_one_call(&mut stacked, 0);
    assert!(observer_alone > 0);
    assert_eq!(observer_stacked, observer_alone);
}

#[test]
fn a_stack_that_holds_nothing_for_a_call_keeps_no_block_for_it() {
    use backstop::IdempotencyKeyLayer;

    // One attempt: nothing is kept for later attempts. A stack with only a key holds
    // nothing for the call either (no breaker permit, no budget account, no
    // observer), so it costs the call no block of its own: a GET is not stamped, so
    // the stack allocates what the plain retry layer does.
    let inner = || tower::service_fn(ok::<ReplayBody<Full<Bytes>>>);
    let mut plain = RetryLayer::new(RetryPolicy::none()).layer(inner());
    let mut keyed = backstop::Backstop::builder()
        .retry(RetryPolicy::none())
        .idempotency_key(IdempotencyKeyLayer::new())
        .no_budget()
        .build()
        .unwrap()
        .layer(inner());
    allocations_of_one_call(&mut plain, 10);
    allocations_of_one_call(&mut keyed, 10);

    let plain_count = allocations_of_one_call(&mut plain, 10);
    let keyed_count = allocations_of_one_call(&mut keyed, 10);
    assert_eq!(keyed_count, plain_count, "plain {plain_count}");
}
