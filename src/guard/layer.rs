//! The retry layer's builder methods that give it a guard, and read the guard's
//! state: they name the layers whose work the guard does.

use std::sync::Arc;

use http::request::Parts;
use tokio::time::Instant;

use super::Guard;
use crate::budget::{BudgetPolicy, OriginAccount};
use crate::circuit_breaker::{CircuitBreakerPolicy, State};
use crate::idempotency_key::IdempotencyKeyLayer;
use crate::RetryLayer;

/// See [one layer for the whole guard](RetryLayer#one-layer-for-the-whole-guard).
impl RetryLayer {
    fn guard_mut(&mut self) -> &mut Guard {
        Arc::make_mut(&mut self.settings).guard_mut()
    }

    /// Stamps each call's idempotency key as `keys` would outside this layer (see
    /// [`idempotency_key`](crate::idempotency_key)): once per call, before the
    /// breaker is asked. See [one layer for the whole
    /// guard](RetryLayer#one-layer-for-the-whole-guard).
    pub fn idempotency_key(mut self, keys: IdempotencyKeyLayer) -> Self {
        self.guard_mut().key = Some(keys);
        self
    }

    /// Guards each call with a circuit breaker per origin, as a
    /// [`CircuitBreakerLayer`](crate::CircuitBreakerLayer) of `policy` outside this
    /// layer would (see [`circuit_breaker`](crate::circuit_breaker)): a call to an
    /// origin whose breaker is open is refused before anything is sent, retries ask
    /// the breaker, and the breaker records each call's final outcome. See [one
    /// layer for the whole guard](RetryLayer#one-layer-for-the-whole-guard).
    ///
    /// The guard's breakers (and accounts) start afresh: a layer this is called on
    /// no longer shares them with layers it was cloned from.
    pub fn circuit_breaker(mut self, policy: CircuitBreakerPolicy) -> Self {
        self.guard_mut().set_breaker(policy);
        self
    }

    /// Counts each call in its origin's retry budget account, as a
    /// [`BudgetLayer`](crate::BudgetLayer) of `policy` outside this layer would
    /// (see [`budget`](crate::budget)): retries withdraw from it, and a paused
    /// origin holds (or refuses) the call's first attempt. See [one layer for the
    /// whole guard](RetryLayer#one-layer-for-the-whole-guard).
    ///
    /// The guard's accounts (and breakers) start afresh, as with
    /// [`circuit_breaker`](RetryLayer::circuit_breaker).
    pub fn budget(mut self, policy: BudgetPolicy) -> Self {
        self.guard_mut().set_budget(policy);
        self
    }

    /// Leaves the guard's breaker and budget account, and the keyed mark of a call
    /// whose key it stamped, in every call's
    /// [context](crate::policy::CallContext), for the layers beneath that read them:
    /// a [`HedgeLayer`](crate::HedgeLayer) spends its hedges from the budget, asks
    /// the breaker, and hedges a keyed call. Without it they go only into a context
    /// the call already carries, which saves the success path an insert into the
    /// extensions.
    pub fn share_handles(mut self) -> Self {
        self.guard_mut().hand_down = true;
        self
    }

    /// The state of the guard's breaker that a call with this request head goes
    /// through, created if it is new; `None` without a
    /// [`circuit_breaker`](RetryLayer::circuit_breaker).
    pub fn breaker_state(&self, head: &Parts) -> Option<State> {
        self.settings.guard.as_ref()?.breaker_state(head)
    }

    /// When the guard's breaker that a call with this request head goes through lets
    /// its next probe through: `None` while it is closed, and without a
    /// [`circuit_breaker`](RetryLayer::circuit_breaker) (see
    /// [`CircuitBreakerLayer::next_probe_at`](crate::CircuitBreakerLayer::next_probe_at)).
    pub fn next_probe_at(&self, head: &Parts) -> Option<Instant> {
        self.settings.guard.as_ref()?.next_probe_at(head)
    }

    /// The guard's budget account that a call with this request head spends from,
    /// created if it is new (for metrics and tests); `None` without a
    /// [`budget`](RetryLayer::budget).
    pub fn budget_account(&self, head: &Parts) -> Option<OriginAccount> {
        self.settings.guard.as_ref()?.account(head)
    }

    /// How many origins (or keys) the guard keeps a breaker or an account for
    /// now, after forgetting the idle ones: those used within the breaker's or the
    /// budget's window, or that a call still holds. When the breaker and the
    /// budget partition calls differently, the entries of both are counted. Zero
    /// without a guard. Counting sweeps under a lock the calls share, so it suits
    /// a metrics scrape, not every call.
    pub fn origins(&self) -> usize {
        self.settings.guard.as_ref().map_or(0, |g| g.origins())
    }
}
