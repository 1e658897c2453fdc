//! Whether a stack hedges: a type parameter, so a stack that does not hedge has no
//! hedge layer to pass through.

use crate::hedge::{Hedge, HedgePolicy};
use crate::policy::Rules;

mod sealed {
    pub trait Sealed {}
}

/// Whether a [`Backstop`](super::Backstop) stack hedges: [`NoHedge`] (the default)
/// or [`WithHedge`]. Sealed: the stack's builder chooses it
/// ([`BackstopBuilder::hedge`](super::BackstopBuilder::hedge)).
pub trait HedgeMode: sealed::Sealed + Clone + Send + Sync + 'static {
    /// What the retry layer sends its attempts through: the transport, or a hedge
    /// layer over it.
    #[doc(hidden)]
    type Over<S>;

    /// Puts the hedge layer, if any, over `inner`.
    #[doc(hidden)]
    fn over<S>(&self, inner: S) -> Self::Over<S>;

    /// The transport under the hedge layer, if any.
    #[doc(hidden)]
    fn inner_ref<S>(over: &Self::Over<S>) -> &S;

    /// The same, mutably.
    #[doc(hidden)]
    fn inner_mut<S>(over: &mut Self::Over<S>) -> &mut S;

    /// The same, taken.
    #[doc(hidden)]
    fn into_inner<S>(over: Self::Over<S>) -> S;

    /// Whether a hedge may go beneath the retry layer.
    #[doc(hidden)]
    fn hedges(&self) -> bool;

    /// The same, its policy deciding by `rules`.
    #[doc(hidden)]
    fn with_rules(self, rules: &Rules) -> Self;
}

/// A stack that does not hedge: its retry layer sends each attempt straight to the
/// transport.
#[derive(Clone, Copy, Debug, Default)]
#[non_exhaustive]
pub struct NoHedge;

/// A stack that hedges slow idempotent (or keyed) attempts: its retry layer sends
/// each attempt through a hedge layer, which follows the stack's hedge policy, or
/// the route's.
#[derive(Clone, Debug)]
pub struct WithHedge {
    pub(super) policy: HedgePolicy,
}

impl sealed::Sealed for NoHedge {}
impl sealed::Sealed for WithHedge {}

impl HedgeMode for NoHedge {
    type Over<S> = S;

    fn over<S>(&self, inner: S) -> S {
        inner
    }

    fn inner_ref<S>(over: &S) -> &S {
        over
    }

    fn inner_mut<S>(over: &mut S) -> &mut S {
        over
    }

    fn into_inner<S>(over: S) -> S {
        over
    }

    fn hedges(&self) -> bool {
        false
    }

    fn with_rules(self, _: &Rules) -> Self {
        self
    }
}

impl HedgeMode for WithHedge {
    type Over<S> = Hedge<S>;

    fn over<S>(&self, inner: S) -> Hedge<S> {
        Hedge::new(inner, self.policy.clone())
    }

    fn inner_ref<S>(over: &Hedge<S>) -> &S {
        over.get_ref()
    }

    fn inner_mut<S>(over: &mut Hedge<S>) -> &mut S {
        over.get_mut()
    }

    fn into_inner<S>(over: Hedge<S>) -> S {
        over.into_inner()
    }

    fn hedges(&self) -> bool {
        true
    }

    fn with_rules(self, rules: &Rules) -> Self {
        WithHedge {
            policy: self.policy.with_rules(rules.clone()),
        }
    }
}
