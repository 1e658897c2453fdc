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

#[test]
fn the_renamed_vocabulary_keeps_its_old_names() {
    use backstop::policy;
    use std::sync::Arc;
    assert!(same::<policy::Unsafe, policy::NoRetry>());
    assert_eq!(
        policy::Unsafe::MaybeProcessed,
        policy::NoRetry::MaybeProcessed
    );
    assert!(same::<policy::IdempotencyKey, policy::Keyed>());
    assert!(same::<policy::AttemptProgress, policy::AttemptLog>());
    // The marker as a value, as it was inserted before.
    let mut ext = http::Extensions::new();
    ext.insert(policy::IdempotencyKey);
    assert!(ext.get::<policy::Keyed>().is_some());

    // The old traits: every account and gate is one, usable as before.
    struct Account;
    impl policy::BudgetAccount for Account {
        fn try_withdraw(&self) -> bool {
            true
        }
    }
    struct Gate;
    impl policy::BreakerGate for Gate {
        fn allows_retry(&self) -> bool {
            false
        }
    }
    let account: Arc<dyn policy::Budget> = Arc::new(Account);
    let gate: &dyn policy::Breaker = &Gate;
    assert!(account.try_withdraw());
    assert!(!gate.allows_retry());
}
