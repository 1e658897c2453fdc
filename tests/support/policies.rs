//! Policies the tests share.

use std::time::Duration;

use backstop::circuit_breaker::CircuitBreakerPolicy;

/// A breaker that trips on `consecutive` failures in a row (the ratio signal off),
/// with a fixed `cooldown` and no jitter.
pub fn breaker(consecutive: u32, cooldown: Duration) -> CircuitBreakerPolicy {
    CircuitBreakerPolicy::builder()
        .consecutive_failures(consecutive)
        .min_calls(u32::MAX)
        .cooldown(cooldown)
        .max_cooldown(cooldown)
        .jitter(0.0)
        .build()
        .unwrap()
}

/// Three attempts, 10 to 50 ms apart, within a total `timeout`.
pub fn three_within(timeout: Duration) -> backstop::RetryPolicy {
    backstop::RetryPolicy::builder()
        .max_attempts(3)
        .backoff(Duration::from_millis(10), Duration::from_millis(50))
        .timeout(timeout)
        .build()
        .unwrap()
}
