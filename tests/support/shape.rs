//! The two shapes of a client: the separate layers
//! `IdempotencyKeyLayer → CircuitBreakerLayer → BudgetLayer → RetryLayer → inner`,
//! and the `Backstop` stack built with the same policies. Both run the same
//! admission code. A behaviour test builds one of them ([`stacked!`] for the
//! stack); the composition suite in `tests/stack/` builds both ([`shaped!`]) and
//! compares. The kit's `CircuitBreakerLayer` and `BudgetLayer` read the state of
//! whichever shape ran.

use std::sync::{Arc, OnceLock};

use backstop::budget::{BudgetPolicy, OriginAccount};
use backstop::circuit_breaker::{CircuitBreakerPolicy, State};
use backstop::idempotency_key::IdempotencyKeyLayer;
use backstop::stack::WithHedge;
use backstop::{Backstop, BackstopLayer, HedgeLayer, HedgePolicy, RetryLayer, RetryPolicy};
use http::request::Parts;
use tokio::time::Instant;

/// How a [`Stack`] is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Each part a layer of its own, around the retry layer.
    Layers,
    /// The `Backstop` stack.
    Stack,
}

/// The stack layer whose breakers and accounts every stack built with the same
/// breaker and budget shares, once one is built. With it, whether it was built with
/// a breaker and with a budget.
type StackCell = Arc<OnceLock<(Built, bool, bool)>>;

/// A stack layer, hedging or not.
#[derive(Clone)]
pub enum Built {
    Plain(BackstopLayer),
    Hedged(BackstopLayer<WithHedge>),
}

impl Built {
    pub fn breaker_state(&self, head: &Parts) -> Option<State> {
        match self {
            Built::Plain(l) => l.breaker_state(head),
            Built::Hedged(l) => l.breaker_state(head),
        }
    }

    pub fn next_probe_at(&self, head: &Parts) -> Option<Instant> {
        match self {
            Built::Plain(l) => l.next_probe_at(head),
            Built::Hedged(l) => l.next_probe_at(head),
        }
    }

    pub fn budget_account(&self, head: &Parts) -> Option<OriginAccount> {
        match self {
            Built::Plain(l) => l.budget_account(head),
            Built::Hedged(l) => l.budget_account(head),
        }
    }

    pub fn origins(&self) -> usize {
        match self {
            Built::Plain(l) => l.origins(),
            Built::Hedged(l) => l.origins(),
        }
    }

    /// The same stack (sharing its breakers and accounts) with `policy`.
    pub fn retry(&self, policy: RetryPolicy) -> Built {
        match self {
            Built::Plain(l) => Built::Plain(l.clone().retry(policy)),
            Built::Hedged(l) => Built::Hedged(l.clone().retry(policy)),
        }
    }
}

/// A circuit breaker under test: backstop's layer in the [`Shape::Layers`] shape,
/// the breakers of the stack built with it in the [`Shape::Stack`] one. It reads as the
/// layer does, whichever shape the test runs.
#[derive(Clone)]
pub struct CircuitBreakerLayer {
    layer: backstop::CircuitBreakerLayer,
    stack: StackCell,
}

impl CircuitBreakerLayer {
    pub fn new(policy: CircuitBreakerPolicy) -> Self {
        CircuitBreakerLayer {
            layer: backstop::CircuitBreakerLayer::new(policy),
            stack: StackCell::default(),
        }
    }

    pub fn state(&self, head: &Parts) -> State {
        match self.stack.get() {
            Some((stack, ..)) => stack.breaker_state(head).expect("the stack has a breaker"),
            None => self.layer.state(head),
        }
    }

    pub fn next_probe_at(&self, head: &Parts) -> Option<Instant> {
        match self.stack.get() {
            Some((stack, ..)) => stack.next_probe_at(head),
            None => self.layer.next_probe_at(head),
        }
    }

    /// The breakers held; for a stack, its entries (a breaker and an account each
    /// when both partition by origin).
    pub fn origins(&self) -> usize {
        match self.stack.get() {
            Some((stack, ..)) => stack.origins(),
            None => self.layer.origins(),
        }
    }
}

impl Default for CircuitBreakerLayer {
    fn default() -> Self {
        CircuitBreakerLayer::new(CircuitBreakerPolicy::default())
    }
}

impl<S> tower::Layer<S> for CircuitBreakerLayer {
    type Service = backstop::circuit_breaker::CircuitBreaker<S>;

    fn layer(&self, inner: S) -> Self::Service {
        self.layer.layer(inner)
    }
}

/// A retry budget under test, as [`CircuitBreakerLayer`] is a breaker.
#[derive(Clone)]
pub struct BudgetLayer {
    layer: backstop::BudgetLayer,
    stack: StackCell,
}

impl BudgetLayer {
    pub fn new(policy: BudgetPolicy) -> Self {
        BudgetLayer {
            layer: backstop::BudgetLayer::new(policy),
            stack: StackCell::default(),
        }
    }

    pub fn account(&self, head: &Parts) -> OriginAccount {
        match self.stack.get() {
            Some((stack, ..)) => stack.budget_account(head).expect("the stack has a budget"),
            None => self.layer.account(head),
        }
    }

    /// The accounts held; for a stack, its entries (see
    /// [`CircuitBreakerLayer::origins`]).
    pub fn origins(&self) -> usize {
        match self.stack.get() {
            Some((stack, ..)) => stack.origins(),
            None => self.layer.origins(),
        }
    }
}

impl Default for BudgetLayer {
    fn default() -> Self {
        BudgetLayer::new(BudgetPolicy::default())
    }
}

impl<S> tower::Layer<S> for BudgetLayer {
    type Service = backstop::budget::Budget<S>;

    fn layer(&self, inner: S) -> Self::Service {
        self.layer.layer(inner)
    }
}

/// What a client is made of, whatever its shape.
#[derive(Clone)]
pub struct Stack {
    pub keys: Option<IdempotencyKeyLayer>,
    pub breaker: Option<CircuitBreakerLayer>,
    pub budget: Option<BudgetLayer>,
    pub hedge: Option<HedgePolicy>,
    pub policy: RetryPolicy,
}

impl Stack {
    pub fn new(policy: RetryPolicy) -> Self {
        Stack {
            keys: None,
            breaker: None,
            budget: None,
            hedge: None,
            policy,
        }
    }

    pub fn keys(mut self, keys: IdempotencyKeyLayer) -> Self {
        self.keys = Some(keys);
        self
    }

    pub fn breaker(mut self, breaker: &CircuitBreakerLayer) -> Self {
        self.breaker = Some(breaker.clone());
        self
    }

    /// Hedging beneath the retry layer: a `HedgeLayer` in the layers, the stack's
    /// own hedge policy in the stack.
    pub fn hedge(mut self, hedge: HedgePolicy) -> Self {
        self.hedge = Some(hedge);
        self
    }

    pub fn budget(mut self, budget: &BudgetLayer) -> Self {
        self.budget = Some(budget.clone());
        self
    }

    /// The layers of the [`Shape::Layers`] shape.
    pub fn layers(
        &self,
    ) -> (
        Option<IdempotencyKeyLayer>,
        Option<backstop::CircuitBreakerLayer>,
        Option<backstop::BudgetLayer>,
        RetryLayer,
        Option<HedgeLayer>,
    ) {
        (
            self.keys.clone(),
            self.breaker.as_ref().map(|b| b.layer.clone()),
            self.budget.as_ref().map(|b| b.layer.clone()),
            RetryLayer::new(self.policy.clone()),
            self.hedge.clone().map(HedgeLayer::new),
        )
    }

    /// The stack of the [`Shape::Stack`] shape: `None` for [`Shape::Layers`]. Every
    /// stack built with the same breaker (or budget) shares one state.
    pub fn stack_for(&self, shape: Shape) -> Option<Built> {
        if shape == Shape::Layers {
            return None;
        }
        let cells: Vec<&StackCell> = [
            self.breaker.as_ref().map(|b| &b.stack),
            self.budget.as_ref().map(|b| &b.stack),
        ]
        .into_iter()
        .flatten()
        .collect();
        let pieces = (self.breaker.is_some(), self.budget.is_some());
        let base = match cells.iter().find_map(|c| c.get()) {
            Some((base, breaker, budget)) => {
                assert_eq!(
                    (*breaker, *budget),
                    pieces,
                    "a breaker or budget under test is used in stacks of other pieces"
                );
                base.clone()
            }
            None => {
                let mut base = Backstop::builder().retry(RetryPolicy::none());
                if let Some(breaker) = &self.breaker {
                    base = base.circuit_breaker(breaker.layer.config().clone());
                }
                match &self.budget {
                    Some(budget) => base = base.budget(budget.layer.budget().clone()),
                    None => base = base.no_budget(),
                }
                if let Some(keys) = &self.keys {
                    base = base.idempotency_key(keys.clone());
                }
                match &self.hedge {
                    Some(hedge) => Built::Hedged(
                        base.hedge(hedge.clone())
                            .build()
                            .expect("the stack's policies are valid"),
                    ),
                    None => Built::Plain(base.build().expect("the stack's policies are valid")),
                }
            }
        };
        for cell in cells {
            let _ = cell.set((base.clone(), pieces.0, pieces.1));
        }
        Some(base.retry(self.policy.clone()))
    }
}

/// `$stack` built in `$shape` over `$inner`, as a `BoxCloneService` (a macro, so
/// the services' long bounds are checked where the types are known).
#[macro_export]
macro_rules! shaped {
    ($shape:expr, $stack:expr, $inner:expr) => {{
        let stack: &$crate::support::shape::Stack = &$stack;
        let inner = $inner;
        match stack.stack_for($shape) {
            None => {
                let (keys, breaker, budget, retry, hedge) = stack.layers();
                let outer = tower::ServiceBuilder::new()
                    .option_layer(keys)
                    .option_layer(breaker)
                    .option_layer(budget)
                    .layer(retry);
                match hedge {
                    Some(hedge) => {
                        tower::util::BoxCloneService::new(outer.layer(hedge).service(inner))
                    }
                    None => tower::util::BoxCloneService::new(outer.service(inner)),
                }
            }
            Some($crate::support::shape::Built::Plain(stack)) => {
                tower::util::BoxCloneService::new(tower::Layer::layer(&stack, inner))
            }
            Some($crate::support::shape::Built::Hedged(stack)) => {
                tower::util::BoxCloneService::new(tower::Layer::layer(&stack, inner))
            }
        }
    }};
}

/// `$stack` built as the `Backstop` stack over `$inner`, as a `BoxCloneService`.
#[macro_export]
macro_rules! stacked {
    ($stack:expr, $inner:expr) => {
        $crate::shaped!($crate::support::shape::Shape::Stack, $stack, $inner)
    };
}
