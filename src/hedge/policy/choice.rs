//! The choice of hedging a call carries in its context, and the context's
//! accessors for it.

use std::any::Any;
use std::sync::Arc;

use super::HedgePolicy;
use crate::policy::{CallContext, Given};

/// Whether and how one call is hedged, when something above the hedge layer chose:
/// a [route](crate::retry::RoutePolicy) of the retry layer, or the caller. It rides in
/// the call's [`CallContext`](crate::policy::CallContext); a call with no choice there
/// is hedged as the [`HedgeLayer`](crate::hedge::HedgeLayer)'s own policy says.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use backstop::hedge::{HedgeChoice, HedgePolicy};
/// use backstop::policy::CallContext;
///
/// let mut req = http::Request::get("http://example.com/search").body(()).unwrap();
/// // This call only: hedge after 20 ms, whatever the layer's own delay.
/// CallContext::of_mut(req.extensions_mut())
///     .set_hedge(HedgeChoice::With(HedgePolicy::after(Duration::from_millis(20))));
///
/// let mut other = http::Request::get("http://example.com/report").body(()).unwrap();
/// // This one is never hedged.
/// CallContext::of_mut(other.extensions_mut()).set_hedge(HedgeChoice::Off);
/// assert!(CallContext::of(other.extensions()).unwrap().hedge().unwrap().is_off());
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum HedgeChoice {
    /// Never hedged: the request passes straight through the hedge layer.
    Off,
    /// Hedged as this policy says (its delay, copies, methods and ladder) instead of
    /// the layer's own.
    With(HedgePolicy),
}

impl HedgeChoice {
    /// Whether the call is never hedged.
    pub fn is_off(&self) -> bool {
        matches!(self, HedgeChoice::Off)
    }

    /// The policy the call is hedged with, when it is hedged.
    pub fn policy(&self) -> Option<&HedgePolicy> {
        match self {
            HedgeChoice::Off => None,
            HedgeChoice::With(policy) => Some(policy),
        }
    }
}

impl From<HedgePolicy> for HedgeChoice {
    fn from(policy: HedgePolicy) -> Self {
        HedgeChoice::With(policy)
    }
}

// The context keeps the choice without naming its type (the policy vocabulary is
// below every layer); these accessors are written here, where the type is known.
impl CallContext {
    /// Whether and how the call is hedged, when a route (or the caller) chose; a hedge
    /// layer beneath follows it instead of its own policy.
    #[inline]
    pub fn hedge(&self) -> Option<&HedgeChoice> {
        read(self.hedge_slot()?)
    }

    /// Chooses whether and how the call is hedged (see [`HedgeChoice`]).
    pub fn set_hedge(&mut self, choice: HedgeChoice) {
        self.set_hedge_slot(Arc::new(choice));
    }

    /// Chooses the hedging a route table keeps for its calls.
    #[inline]
    pub(crate) fn share_hedge(&mut self, choice: Arc<HedgeChoice>) {
        self.set_hedge_slot(choice);
    }
}

impl<'a> Given<'a> {
    /// The hedging a route or the caller chose.
    #[inline]
    pub(crate) fn hedge(&self) -> Option<&'a HedgeChoice> {
        read(self.hedge_slot()?)
    }
}

/// The choice a context keeps: only a `HedgeChoice` is ever put there.
#[inline]
fn read(slot: &dyn Any) -> Option<&HedgeChoice> {
    slot.downcast_ref()
}
