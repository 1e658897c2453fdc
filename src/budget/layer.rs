use std::fmt;
use std::sync::Arc;

use http::request::Parts;
use tower_layer::Layer;

use super::account::Account;
use super::partition::{Cache, Registry};
use super::{Budget, BudgetPolicy, OriginAccount};

/// Applies [`Budget`] to a service: counts each call as a first attempt in
/// its origin's account and leaves the account's handle in the request
/// extensions, for the retry and hedge layers inside to withdraw from.
///
/// Clones of the layer, and every service it makes, share the accounts.
#[derive(Clone)]
pub struct BudgetLayer {
    pub(crate) shared: Arc<Shared>,
}

pub(crate) struct Shared {
    pub(crate) budget: BudgetPolicy,
    pub(crate) accounts: Registry<Account>,
}

impl BudgetLayer {
    /// A layer with these numbers; its accounts are created as calls arrive.
    pub fn new(budget: BudgetPolicy) -> Self {
        let numbers = budget.clone();
        let accounts = Registry::new(budget.partition.clone(), move |_| Account::new(&numbers));
        BudgetLayer {
            shared: Arc::new(Shared { budget, accounts }),
        }
    }

    /// The numbers the layer applies.
    pub fn budget(&self) -> &BudgetPolicy {
        &self.shared.budget
    }

    /// The account that a call with this request head spends from, created if it is
    /// new: for metrics ([`available`](OriginAccount::available)) and tests.
    pub fn account(&self, head: &Parts) -> OriginAccount {
        OriginAccount(self.shared.accounts.get(head, &mut Cache::new()))
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
        Budget::from_shared(inner, self.shared.clone())
    }
}

impl fmt::Debug for BudgetLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BudgetLayer")
            .field("budget", &self.shared.budget)
            .finish()
    }
}
