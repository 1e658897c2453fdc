//! The retry amplification of the Google SRE book (chapters 21 and 22, "Handling
//! Overload" and "Addressing Cascading Failures"), measured through backstop's
//! real stack: `examples/amplification.rs` prints it, `tests/overload` checks it.
//! Both load this file by path, so there is one model.
//!
//! A backend that fails every request: a transport beneath a `Backstop` stack
//! that counts each request it gets and answers it at once with 503 Service
//! Unavailable. Callers offer it [`RATE`] GET calls a second (an open loop: a
//! call starts on its tick whatever happened to the earlier ones) for
//! [`LENGTH`], on tokio's paused clock, through one of two stacks:
//!
//! - [`Budget::Off`]: 3 attempts per call (`RetryPolicy::builder().max_attempts(3)`)
//!   and no budget (`no_budget()`), the book's "just below 3×" (below it because
//!   some calls succeed on a retry; against a backend that fails everything, a
//!   call makes all three);
//! - [`Budget::TenPercent`]: the same, with a retry budget of 10 % of first
//!   attempts (`BudgetPolicy::builder().ratio(0.1)`), the book's "1.1×". The
//!   budget's floor is set to 0 (`min_per_second(0.0)`), so the figure is the
//!   ratio's alone; the default floor (10 retries a second over a 10 s window)
//!   would add up to 10 / [`RATE`] = 2 % at this load.
//!
//! The load is the requests the backend saw per call offered, once every call has
//! finished.

#![allow(dead_code)]

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use backstop::{Backstop, BoxError, BudgetPolicy, ReplayBody, RetryPolicy};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use tower::{Layer, Service, ServiceExt};

/// Calls offered per second.
pub const RATE: u32 = 500;
/// How long the calls are offered for.
pub const LENGTH: Duration = Duration::from_secs(20);
/// Attempts per call, the book's.
pub const ATTEMPTS: u32 = 3;

/// The retry budget of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Budget {
    /// No budget: every call may make all its attempts.
    Off,
    /// Retries may add 10 % of the first attempts, with no floor.
    TenPercent,
}

impl Budget {
    /// Both budgets, in the order the example prints them.
    pub const ALL: [Budget; 2] = [Budget::Off, Budget::TenPercent];

    /// The name the example prints.
    pub fn name(self) -> &'static str {
        match self {
            Budget::Off => "off",
            Budget::TenPercent => "10pct",
        }
    }
}

/// What a run counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Load {
    /// Calls offered.
    pub calls: u64,
    /// Requests the backend saw.
    pub requests: u64,
}

impl Load {
    /// Requests the backend saw per call offered.
    pub fn ratio(&self) -> f64 {
        self.requests as f64 / self.calls.max(1) as f64
    }
}

/// Offers the load through a stack with `budget` to a backend that answers 503
/// to everything. Run it on a paused clock (it spans [`LENGTH`] of tokio time).
pub async fn offer(budget: Budget) -> Result<Load, BoxError> {
    let retry = RetryPolicy::builder()
        .max_attempts(ATTEMPTS)
        .backoff(Duration::from_millis(10), Duration::from_millis(100))
        .build()?;
    let builder = Backstop::builder().retry(retry);
    let layer = match budget {
        Budget::Off => builder.no_budget(),
        Budget::TenPercent => builder.budget(
            BudgetPolicy::builder()
                .ratio(0.1)
                .min_per_second(0.0)
                .build()?,
        ),
    }
    .build()?;

    let requests = Arc::new(AtomicU64::new(0));
    let seen = requests.clone();
    let backend = tower::service_fn(move |_: Request<ReplayBody<Full<Bytes>>>| {
        seen.fetch_add(1, Ordering::Relaxed);
        let mut res = Response::new(Full::<Bytes>::default());
        *res.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        async move { Ok::<_, Infallible>(res) }
    });
    let client = layer.layer(backend);

    let calls = u64::from(RATE) * LENGTH.as_secs();
    let mut tick = tokio::time::interval(Duration::from_secs(1) / RATE);
    let mut in_flight = Vec::with_capacity(calls as usize);
    for _ in 0..calls {
        tick.tick().await;
        let mut client = client.clone();
        in_flight.push(tokio::spawn(async move {
            let req = Request::get("http://backend.test/")
                .body(Full::<Bytes>::default())
                .expect("a valid request");
            let res = client.ready().await?.call(req).await?;
            Ok::<_, BoxError>(res.status())
        }));
    }
    for call in in_flight {
        let status = call.await??;
        if status != StatusCode::SERVICE_UNAVAILABLE {
            return Err(format!("the backend answers 503 only, the call ended {status}").into());
        }
    }
    Ok(Load {
        calls,
        requests: requests.load(Ordering::Relaxed),
    })
}
