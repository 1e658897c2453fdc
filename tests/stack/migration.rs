//! The old names still resolve, to the items they named (deprecated aliases).
#![allow(deprecated)]

use std::any::TypeId;

fn same<A: 'static, B: 'static>() -> bool {
    TypeId::of::<A>() == TypeId::of::<B>()
}

#[test]
fn every_renamed_item_keeps_its_old_name() {
    use backstop::{budget, circuit_breaker, hedge, idempotency_key, progress};
    type S = ();
    assert!(same::<backstop::RetryBudget, backstop::BudgetPolicy>());
    assert!(same::<
        backstop::CircuitBreaker,
        backstop::CircuitBreakerPolicy,
    >());
    assert!(same::<backstop::Hedge, backstop::HedgePolicy>());
    assert!(same::<
        backstop::ProgressLayer,
        backstop::ProgressTrackingLayer,
    >());
    assert!(same::<budget::RetryBudget, budget::BudgetPolicy>());
    assert!(same::<
        budget::RetryBudgetBuilder,
        budget::BudgetPolicyBuilder,
    >());
    assert!(same::<budget::BudgetAccount, budget::OriginAccount>());
    assert!(same::<budget::BudgetService<S>, budget::Budget<S>>());
    assert!(same::<budget::Partition, backstop::Partition>());
    assert!(same::<
        circuit_breaker::CircuitBreakerBuilder,
        circuit_breaker::CircuitBreakerPolicyBuilder,
    >());
    assert!(same::<
        circuit_breaker::CircuitBreakerService<S>,
        circuit_breaker::CircuitBreaker<S>,
    >());
    assert!(same::<hedge::HedgeBuilder, hedge::HedgePolicyBuilder>());
    assert!(same::<hedge::Hedging<S>, hedge::Hedge<S>>());
    assert!(same::<
        idempotency_key::IdempotencyKeys<S>,
        idempotency_key::IdempotencyKey<S>,
    >());
    assert!(same::<
        progress::ProgressLayer,
        progress::ProgressTrackingLayer,
    >());
}
