use std::fmt;
use std::sync::Arc;

use http::request::Parts;
use tower_layer::Layer;

use super::{Budget, BudgetPolicy, OriginAccount};
use crate::admit::Admission;

/// Applies [`Budget`] to a service: counts each call as a first attempt in
/// its origin's account and leaves the account's handle in the request
/// extensions, for the retry and hedge layers inside to withdraw from.
///
/// Clones of the layer, and every service it makes, share the accounts.
#[derive(Clone)]
pub struct BudgetLayer {
    pub(crate) admission: Arc<Admission>,
}

impl BudgetLayer {
    /// A layer with these numbers; its accounts are created as calls arrive.
    pub fn new(budget: BudgetPolicy) -> Self {
        // The budget's part of admission, handing its account down to the layers
        // beneath (that is its job).
        let admission = Admission::new(None, None, Some(budget), None, true);
        BudgetLayer {
            admission: Arc::new(admission),
        }
    }

    /// The numbers the layer applies.
    pub fn budget(&self) -> &BudgetPolicy {
        match self.admission.budget() {
            Some(budget) => budget,
            None => unreachable!("a budget layer's admission has a budget"),
        }
    }

    /// The account that a call with this request head spends from, created if it is
    /// new: for metrics ([`available`](OriginAccount::available)) and tests.
    pub fn account(&self, head: &Parts) -> OriginAccount {
        match self.admission.account(head) {
            Some(account) => account,
            None => unreachable!("a budget layer's admission has a budget"),
        }
    }

    /// How many accounts the layer (with its clones and services) holds now,
    /// after forgetting the idle ones: one per origin (or key) used within the budget's
    /// window, or whose handle a call still holds. With [`Partition::global`]
    /// it is always one.
    ///
    /// Counting sweeps the accounts under a lock the calls share, so it suits a
    /// metrics scrape, not every call.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use backstop::{BudgetLayer, BudgetPolicy};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let layer = BudgetLayer::new(BudgetPolicy::default());
    /// let head = |uri| http::Request::get(uri).body(()).unwrap().into_parts().0;
    /// layer.account(&head("http://a.test/")).deposit();
    /// layer.account(&head("http://b.test/")).deposit();
    /// assert_eq!(layer.origins(), 2);
    /// // Unused for longer than the window (10 s by default), both are forgotten.
    /// tokio::time::advance(Duration::from_secs(20)).await;
    /// assert_eq!(layer.origins(), 0);
    /// # }
    /// ```
    ///
    /// [`Partition::global`]: crate::Partition::global
    pub fn origins(&self) -> usize {
        self.admission.origins()
    }
}

impl Default for BudgetLayer {
    /// [`BudgetPolicy::default()`]: 20 % of first attempts plus 10 retries a second,
    /// over 10 s, per origin.
    fn default() -> Self {
        BudgetLayer::new(BudgetPolicy::default())
    }
}

impl<S> Layer<S> for BudgetLayer {
    type Service = Budget<S>;

    fn layer(&self, inner: S) -> Budget<S> {
        Budget::from_shared(inner, self.admission.clone())
    }
}

impl fmt::Debug for BudgetLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BudgetLayer")
            .field("budget", self.budget())
            .finish()
    }
}
