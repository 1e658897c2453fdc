//! The two shapes of a guarded client, so one test body states a behaviour for
//! both: the stack of layers
//! `IdempotencyKeyLayer → CircuitBreakerLayer → BudgetLayer → RetryLayer → inner`,
//! and one `RetryLayer` given the same layers as its guard (with and without
//! `share_handles`).

use backstop::budget::BudgetLayer;
use backstop::circuit_breaker::CircuitBreakerLayer;
use backstop::idempotency_key::IdempotencyKeyLayer;
use backstop::RetryLayer;

/// How a [`Stack`] is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Each guard a layer of its own, around the retry layer.
    Layers,
    /// The retry layer given the guard's layers.
    Guarded,
    /// The same, with `share_handles()`.
    Shared,
}

/// Every shape, for a test that loops over them.
pub const SHAPES: [Shape; 3] = [Shape::Layers, Shape::Guarded, Shape::Shared];

/// What a client is made of, whatever its shape.
#[derive(Clone)]
pub struct Stack {
    pub keys: Option<IdempotencyKeyLayer>,
    pub breaker: Option<CircuitBreakerLayer>,
    pub budget: Option<BudgetLayer>,
    pub retry: RetryLayer,
}

impl Stack {
    pub fn new(retry: RetryLayer) -> Self {
        Stack {
            keys: None,
            breaker: None,
            budget: None,
            retry,
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

    pub fn budget(mut self, budget: &BudgetLayer) -> Self {
        self.budget = Some(budget.clone());
        self
    }

    /// The retry layer of the guarded shapes: `None` for [`Shape::Layers`].
    pub fn guarded(&self, shape: Shape) -> Option<RetryLayer> {
        if shape == Shape::Layers {
            return None;
        }
        let mut retry = self.retry.clone();
        if let Some(keys) = &self.keys {
            retry = retry.idempotency_key(keys.clone());
        }
        if let Some(breaker) = &self.breaker {
            retry = retry.circuit_breaker(breaker.clone());
        }
        if let Some(budget) = &self.budget {
            retry = retry.budget(budget.clone());
        }
        if shape == Shape::Shared {
            retry = retry.share_handles();
        }
        Some(retry)
    }
}

/// `$stack` built in `$shape` over `$inner`, as a `BoxCloneService` (a macro, so
/// the services' long bounds are checked where the types are known).
#[macro_export]
macro_rules! shaped {
    ($shape:expr, $stack:expr, $inner:expr) => {{
        let stack: &$crate::support::shape::Stack = &$stack;
        let inner = $inner;
        match stack.guarded($shape) {
            None => tower::util::BoxCloneService::new(
                tower::ServiceBuilder::new()
                    .option_layer(stack.keys.clone())
                    .option_layer(stack.breaker.clone())
                    .option_layer(stack.budget.clone())
                    .layer(stack.retry.clone())
                    .service(inner),
            ),
            Some(retry) => tower::util::BoxCloneService::new(tower::Layer::layer(&retry, inner)),
        }
    }};
}

/// A test run once per shape: `over_shapes! { #[attr] async fn name(shape) { .. } }`
/// makes a module `name` with one test per shape (`Layers`, `Guarded`, `Shared`);
/// `over_shapes! { only(Layers, Shared) #[attr] async fn .. }` runs those only.
#[macro_export]
macro_rules! over_shapes {
    (only($($s:ident),+) #[$attr:meta] async fn $name:ident($shape:ident) $body:block) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            use $crate::support::shape::Shape;

            async fn run($shape: Shape) $body

            $(
                #[$attr]
                #[allow(non_snake_case)]
                async fn $s() {
                    run(Shape::$s).await
                }
            )+
        }
    };
    (#[$attr:meta] async fn $name:ident($shape:ident) $body:block) => {
        $crate::over_shapes! {
            only(Layers, Guarded, Shared) #[$attr] async fn $name($shape) $body
        }
    };
}

/// Every shape with every one of `xs` (a protocol, say), for a test that loops.
pub fn with_every<T: Copy>(xs: impl IntoIterator<Item = T>) -> Vec<(Shape, T)> {
    let xs: Vec<T> = xs.into_iter().collect();
    SHAPES
        .iter()
        .flat_map(|&shape| xs.iter().map(move |&x| (shape, x)))
        .collect()
}
