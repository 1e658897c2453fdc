//! The Google SRE book (chapters 21–22): against a backend that fails every
//! request, 3 attempts without a budget give 3× its load, a 10 % retry budget
//! 1.1×.

use std::time::Duration;

use crate::amplification::{offer, Budget, Load, ATTEMPTS, LENGTH};

/// The whole run in tokio time, on the paused clock: the offered load, then the
/// last calls' retries.
async fn bounded(budget: Budget) -> Load {
    tokio::time::timeout(LENGTH + Duration::from_secs(10), offer(budget))
        .await
        .expect("the calls end")
        .expect("the stack builds and every call ends with the backend's 503")
}

#[tokio::test(start_paused = true)]
async fn without_a_budget_every_call_makes_every_attempt() {
    let load = bounded(Budget::Off).await;
    assert!(load.calls > 0);
    assert_eq!(load.requests, u64::from(ATTEMPTS) * load.calls, "{load:?}");
}

#[tokio::test(start_paused = true)]
async fn a_ten_percent_budget_holds_the_load_to_one_point_one() {
    let load = bounded(Budget::TenPercent).await;
    // The budget's arithmetic is exact (millionths of a retry): each first attempt
    // deposits a tenth of a retry, and against a backend that fails everything a
    // retry is always waiting to spend it: the backend sees exactly 1.1× the calls.
    assert!(load.calls > 0);
    assert_eq!(load.requests * 10, load.calls * 11, "{load:?}");
}
