//! A budget account: integer accounting over a sliding window.

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use tokio::time::Instant;

use super::partition::Entry;
use super::window::Ring;
use super::BudgetPolicy;
use crate::policy::{BudgetAccount, BudgetHandle};

/// Units of one retry: a first attempt deposits `ratio · UNIT` units (the ratio
/// rounded to a millionth), a retry withdraws `UNIT`.
pub(crate) const UNIT: i64 = 1_000_000;

/// The shared state of one account.
pub(crate) struct Account {
    /// The net units of the events in each slot (two's complement in a `u64`).
    ring: Ring,
    /// The floor plus the net units of the live slots: what may still be spent.
    balance: AtomicI64,
    /// Units a first attempt deposits.
    deposit: i64,
}

impl Account {
    pub(crate) fn new(budget: &BudgetPolicy) -> Self {
        Account {
            ring: Ring::new(budget.window),
            balance: AtomicI64::new(budget.floor_units),
            deposit: budget.deposit_units,
        }
    }

    fn expire(&self, expired: u64) {
        // The slots hold signed sums; a wrapping cast gives them back.
        self.balance.fetch_sub(expired as i64, Ordering::Relaxed);
    }

    /// Counts one first attempt.
    pub(crate) fn deposit(&self) {
        let slot = self.ring.current(Instant::now(), |e| self.expire(e));
        if self.deposit != 0 {
            self.balance.fetch_add(self.deposit, Ordering::Relaxed);
            slot.fetch_add(self.deposit as u64, Ordering::Relaxed);
        }
    }

    /// Spends one retry if the balance holds a whole one.
    pub(crate) fn withdraw(&self) -> bool {
        let slot = self.ring.current(Instant::now(), |e| self.expire(e));
        // The balance is the one place withdrawals meet, so two callers can never
        // both spend the last retry.
        let spent = self
            .balance
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                (b >= UNIT).then_some(b - UNIT)
            })
            .is_ok();
        if spent {
            slot.fetch_sub(UNIT as u64, Ordering::Relaxed);
        }
        spent
    }

    /// Gives back one retry that was withdrawn but not sent.
    pub(crate) fn refund(&self) {
        let slot = self.ring.current(Instant::now(), |e| self.expire(e));
        self.balance.fetch_add(UNIT, Ordering::Relaxed);
        slot.fetch_add(UNIT as u64, Ordering::Relaxed);
    }

    /// Whole retries available now.
    pub(crate) fn available(&self) -> u64 {
        self.ring.current(Instant::now(), |e| self.expire(e));
        (self.balance.load(Ordering::Relaxed).max(0) / UNIT) as u64
    }
}

impl BudgetAccount for Account {
    fn try_withdraw(&self) -> bool {
        self.withdraw()
    }

    fn refund(&self) {
        Account::refund(self)
    }

    fn available(&self) -> Option<u64> {
        Some(Account::available(self))
    }
}

impl Entry for Account {
    fn is_idle(&self, now: Instant) -> bool {
        // Once every slot has expired the balance is the floor again: a fresh
        // account would be no different.
        self.ring.is_expired(now)
    }
}

/// A retry budget account: the first attempts it has seen and the retries it has
/// paid for, over the budget's window.
///
/// [`BudgetLayer`](super::BudgetLayer) keeps one per origin and leaves its
/// [`handle`](OriginAccount::handle) in each call's extensions. An account can also
/// be used on its own, made by [`BudgetPolicy::account`], for example by an adapter
/// for another HTTP client. Clones share the account.
///
/// # Examples
///
/// ```
/// use backstop::budget::BudgetPolicy;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), backstop::policy::InvalidConfig> {
/// let account = BudgetPolicy::builder().ratio(0.3).min_per_second(0.0).build()?.account();
/// for _ in 0..10 {
///     account.deposit();
/// }
/// // Exactly three retries for ten first attempts.
/// assert_eq!(account.available(), 3);
/// assert!(account.try_withdraw() && account.try_withdraw() && account.try_withdraw());
/// assert!(!account.try_withdraw());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct OriginAccount(pub(crate) Arc<Account>);

impl OriginAccount {
    /// Counts one first attempt: it adds the budget's ratio of a retry.
    pub fn deposit(&self) {
        self.0.deposit();
    }

    /// Spends one retry (or hedge) if the account holds a whole one; `false` means
    /// the extra attempt must not be sent.
    pub fn try_withdraw(&self) -> bool {
        self.0.withdraw()
    }

    /// Gives back one retry that was withdrawn but not sent after all.
    pub fn refund(&self) {
        self.0.refund();
    }

    /// How many retries the account would allow now.
    pub fn available(&self) -> u64 {
        self.0.available()
    }

    /// The handle the retry and hedge layers look for in request extensions.
    pub fn handle(&self) -> BudgetHandle {
        BudgetHandle::new(self.0.clone())
    }
}

impl fmt::Debug for OriginAccount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OriginAccount")
            .field("available", &self.available())
            .finish()
    }
}
