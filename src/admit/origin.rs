//! What admission keeps of one origin (or key): its breaker, its budget account and
//! its throttle, side by side in one registry entry, so a call finds all with one
//! lookup; and the registries that keep them.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::breaker::{BreakerOwner, CircuitBreakerPolicy, Core};
use super::budget::{Account, BudgetPolicy};
use super::throttle::{self, ThrottlePolicy};
use crate::origin::{Entry, Partition, Registry};
use crate::policy::{BreakerGate, BreakerHandle};

/// An origin's breaker, budget account and throttle, each when the admission has
/// one (and partitions calls as this entry's registry does). A call
/// holds one reference to the entry for both, which saves two atomic operations a
/// call over a reference to each part. The parts are shared on their own only with
/// what outlives a call or leaves it (the handles a call hands down, a held call's
/// wait, the inspection methods), so the entry counts as used while anything holds
/// it or either part.
pub(crate) struct Origin {
    pub(super) breaker: Option<Arc<Core>>,
    pub(super) account: Option<Arc<Account>>,
    pub(super) throttle: Option<Arc<throttle::Core>>,
}

/// The entries of a call's origin: one reference each, so a call whose breaker and
/// account share an entry (the usual case) holds one reference for both.
#[derive(Default)]
pub(super) struct Found {
    /// The entry that keeps the call's breaker, and its account too when one
    /// registry keeps both.
    pub(super) breaker: Option<Arc<Origin>>,
    /// The entry that keeps the call's account, when it is not the breaker's.
    pub(super) account: Option<Arc<Origin>>,
    /// The entry that keeps the call's throttle, when it keeps neither a breaker
    /// nor an account.
    pub(super) throttle: Option<Arc<Origin>>,
}

impl Found {
    /// Takes a reference to `origin`, found in one of the admission's registries.
    /// (An entry keeps at least one part: one that keeps neither a breaker nor an
    /// account keeps a throttle.)
    #[inline(always)]
    pub(super) fn take_from(&mut self, origin: &Arc<Origin>) {
        let slot = if origin.breaker.is_some() {
            &mut self.breaker
        } else if origin.account.is_some() {
            &mut self.account
        } else {
            &mut self.throttle
        };
        *slot = Some(origin.clone());
    }

    /// The call's throttle, wherever it is kept.
    #[inline]
    pub(super) fn throttle(&self) -> Option<&Arc<throttle::Core>> {
        [&self.throttle, &self.account, &self.breaker]
            .into_iter()
            .find_map(|origin| origin.as_deref()?.throttle.as_ref())
    }

    /// The call's breaker.
    pub(super) fn core(&self) -> Option<&Arc<Core>> {
        self.breaker.as_deref()?.breaker.as_ref()
    }

    /// The call's account, wherever it is kept.
    pub(super) fn account(&self) -> Option<&Arc<Account>> {
        account_of(self.account.as_deref(), self.breaker.as_deref())
    }
}

/// The account kept by `own` (an entry of the budget's own), else by `breaker`'s
/// entry (when one registry keeps both).
#[inline]
pub(super) fn account_of<'a>(
    own: Option<&'a Origin>,
    breaker: Option<&'a Origin>,
) -> Option<&'a Arc<Account>> {
    own.or(breaker)?.account.as_ref()
}

/// Fresh registries for a breaker, a budget and a throttle: one whose entries hold
/// every part that partitions calls alike, one per partition.
pub(super) fn registries(
    breaker: Option<&Arc<CircuitBreakerPolicy>>,
    budget: Option<&BudgetPolicy>,
    throttle: Option<&ThrottlePolicy>,
) -> Arc<[Arc<Registry<Origin>>]> {
    /// The parts whose entries one registry keeps.
    #[derive(Default)]
    struct Parts {
        breaker: Option<Arc<CircuitBreakerPolicy>>,
        budget: Option<BudgetPolicy>,
        throttle: Option<ThrottlePolicy>,
    }
    /// The parts of the registry of `partition`, added when it is new.
    fn of<'a>(groups: &'a mut Vec<(Partition, Parts)>, partition: &Partition) -> &'a mut Parts {
        let i = match groups.iter().position(|(p, _)| p.same_as(partition)) {
            Some(i) => i,
            None => {
                groups.push((partition.clone(), Parts::default()));
                groups.len() - 1
            }
        };
        &mut groups[i].1
    }
    let mut groups = Vec::new();
    if let Some(b) = breaker {
        of(&mut groups, &b.partition).breaker = Some(b.clone());
    }
    if let Some(a) = budget {
        of(&mut groups, &a.partition).budget = Some(a.clone());
    }
    if let Some(t) = throttle {
        of(&mut groups, &Partition::origin()).throttle = Some(t.clone());
    }
    groups
        .into_iter()
        .map(|(partition, parts)| {
            Arc::new(Registry::new(partition, move |label| {
                let account = parts.budget.as_ref().map(|p| Account::new(p, &label));
                Origin {
                    breaker: parts
                        .breaker
                        .as_ref()
                        .map(|p| Arc::new(Core::new(p.clone(), label))),
                    account,
                    throttle: parts
                        .throttle
                        .as_ref()
                        .map(|p| Arc::new(throttle::Core::new(p))),
                }
            }))
        })
        .collect()
}

impl BreakerOwner for Origin {
    #[inline]
    fn breaker(&self) -> Option<&Core> {
        self.breaker.as_deref()
    }

    fn handle(this: &Arc<Self>) -> Option<BreakerHandle> {
        let core: Arc<dyn BreakerGate> = this.breaker.clone()?;
        Some(BreakerHandle::new(core))
    }
}

impl Entry for Origin {
    fn last_used(&self) -> Instant {
        let breaker = self.breaker.as_deref().map(Entry::last_used);
        let account = self.account.as_deref().map(Entry::last_used);
        let throttle = self.throttle.as_deref().map(Entry::last_used);
        [breaker, account, throttle]
            .into_iter()
            .flatten()
            .max()
            .unwrap_or_else(Instant::now)
    }

    fn keeps_for(&self) -> Duration {
        let breaker = self
            .breaker
            .as_deref()
            .map_or(Duration::ZERO, Entry::keeps_for);
        let account = self
            .account
            .as_deref()
            .map_or(Duration::ZERO, Entry::keeps_for);
        let throttle = self
            .throttle
            .as_deref()
            .map_or(Duration::ZERO, Entry::keeps_for);
        breaker.max(account).max(throttle)
    }

    fn in_use(this: &Arc<Self>) -> bool {
        Arc::strong_count(this) > 1
            || this
                .breaker
                .as_ref()
                .is_some_and(|b| Arc::strong_count(b) > 1)
            || this
                .account
                .as_ref()
                .is_some_and(|a| Arc::strong_count(a) > 1)
            || this
                .throttle
                .as_ref()
                .is_some_and(|t| Arc::strong_count(t) > 1)
    }
}
