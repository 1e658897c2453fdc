//! A budget account: integer accounting over a sliding window.

use std::fmt;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

use super::config::{PauseMode, PauseSettings};
use super::events::{emit, PauseEvent};
use super::BudgetPolicy;
use crate::fleet::{Lease, Member, Numbers};
use crate::observe::{paused_told, Observed};
use crate::origin::{Entry, Ring};
use crate::policy::{later, BudgetAccount, BudgetHandle, Pause, PauseChange};

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
    /// How long an event counts.
    window: Duration,
    /// The origin's pause.
    pause: PauseState,
    /// The account's share of its fleet, when the budget has one: while its
    /// lease holds, retries are spent from the lease.
    fleet: Option<Arc<Lease>>,
}

/// Until when no attempt may reach the account's origin: a server's hint.
struct PauseState {
    /// When the pause ends, in nanoseconds after `base`; 0 when not paused.
    until: AtomicU64,
    base: Instant,
    settings: PauseSettings,
}

impl PauseState {
    fn new(settings: PauseSettings) -> Self {
        PauseState {
            until: AtomicU64::new(0),
            base: Instant::now(),
            settings,
        }
    }

    /// `at` as stored: nanoseconds after `base`, at least 1 (0 means none).
    fn encode(&self, at: Instant) -> u64 {
        let nanos = at.saturating_duration_since(self.base).as_nanos();
        nanos.clamp(1, u128::from(u64::MAX)) as u64
    }

    fn decode(&self, nanos: u64) -> Instant {
        later(self.base, Duration::from_nanos(nanos))
    }

    /// Pauses until `until`, capped at the settings' maximum from now; a pause
    /// already set that ends later is kept. Says what changed.
    fn pause(&self, until: Instant) -> Option<PauseChange> {
        if self.settings.mode == PauseMode::Off {
            return None;
        }
        let now = Instant::now();
        let until = until.min(later(now, self.settings.max));
        if until <= now {
            return None;
        }
        let new = self.encode(until);
        let old = self.until.fetch_max(new, Ordering::AcqRel);
        if old >= new {
            return None;
        }
        let old_end = (old != 0).then(|| self.decode(old)).filter(|&e| e > now);
        let change = match old_end {
            Some(end) => PauseChange::Extended { by: until - end },
            None => PauseChange::Paused { pause: until - now },
        };
        emit(PauseEvent::Account(change));
        Some(change)
    }

    /// The pause at `now`, with this call's release drawn over the spread; `None`
    /// when not paused. The first call to find a pause over clears it, and is
    /// told [`PauseChange::Resumed`].
    #[inline]
    fn paused(&self, now: Instant) -> (Option<Pause>, Option<PauseChange>) {
        loop {
            let stored = self.until.load(Ordering::Acquire);
            if stored == 0 {
                return (None, None);
            }
            let until = self.decode(stored);
            if until > now {
                let spread = self.settings.spread.as_nanos().min(u128::from(u64::MAX)) as u64;
                let jitter = match spread {
                    0 => Duration::ZERO,
                    n => Duration::from_nanos(rand::rng().random_range(0..n)),
                };
                let pause = Pause::new(until)
                    .with_release(later(until, jitter))
                    .fail_fast(self.settings.mode == PauseMode::FailFast);
                return (Some(pause), None);
            }
            // Over: clear it, unless a new pause was set meanwhile (then look again).
            if self
                .until
                .compare_exchange(stored, 0, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                emit(PauseEvent::Account(PauseChange::Resumed));
                return (None, Some(PauseChange::Resumed));
            }
        }
    }

    /// When the pause set last ends, if one is set.
    fn end(&self) -> Option<Instant> {
        let stored = self.until.load(Ordering::Acquire);
        (stored != 0).then(|| self.decode(stored))
    }
}

impl Account {
    /// The account of the partition key `label` (which only a fleet reads, as
    /// a hash), shared with the budget's fleet when it has one.
    pub(crate) fn new(budget: &BudgetPolicy, label: &str) -> Arc<Self> {
        let numbers = Numbers {
            deposit: budget.deposit_units,
            floor: budget.floor_units,
            unit: UNIT,
            window: budget.window,
        };
        let account = Arc::new(Account {
            ring: Ring::new(budget.window),
            balance: AtomicI64::new(budget.floor_units),
            deposit: budget.deposit_units,
            window: budget.window,
            pause: PauseState::new(budget.pause),
            fleet: budget.fleet.as_ref().map(|f| f.lease(label, numbers)),
        });
        if let (Some(fleet), Some(lease)) = (&budget.fleet, &account.fleet) {
            let member: Arc<dyn Member> = account.clone();
            fleet.join(Arc::downgrade(lease), Arc::downgrade(&member));
        }
        account
    }

    /// The account's lease, if it has a fleet and the lease holds at `now`.
    #[inline]
    fn leased(&self, now: Instant) -> Option<&Lease> {
        self.fleet.as_deref().filter(|lease| lease.fresh(now))
    }

    /// Pauses the origin until `until` (capped by the budget's `max_pause`), for
    /// a hint learned here; says what changed. A pause learned here reaches the
    /// fleet at once (one learned from the fleet is set through `Member::pause`,
    /// and not pushed back).
    pub(crate) fn pause_until(&self, until: Instant) -> Option<PauseChange> {
        let change = self.pause.pause(until);
        if let (Some(_), Some(lease)) = (&change, &self.fleet) {
            lease.learned_pause();
        }
        change
    }

    /// The origin's pause now, if it is paused; reads the clock only when a pause
    /// is set, so an account that was never paused costs one atomic load.
    #[inline]
    pub(crate) fn paused_now(&self, observed: Option<&Observed>) -> Option<Pause> {
        if self.pause.until.load(Ordering::Relaxed) == 0 {
            return None;
        }
        paused_told(self, Instant::now(), observed)
    }

    /// The least time a call must have left after a pause to wait for it.
    pub(crate) fn pause_min_attempt_time(&self) -> Duration {
        self.pause.settings.min_attempt_time
    }

    fn expire(&self, expired: u64) {
        // The slots hold signed sums; a wrapping cast gives them back.
        self.balance.fetch_sub(expired as i64, Ordering::Relaxed);
    }

    /// Counts one first attempt, made at `now`.
    #[inline]
    pub(crate) fn deposit_at(&self, now: Instant) {
        let slot = self.ring.current(now, |e| self.expire(e));
        if let Some(lease) = &self.fleet {
            lease.count_first();
        }
        if self.deposit != 0 {
            self.balance.fetch_add(self.deposit, Ordering::Relaxed);
            slot.fetch_add(self.deposit as u64, Ordering::Relaxed);
        }
    }

    /// Spends one retry if the balance holds a whole one: the fleet's lease
    /// while it holds, else the account's own balance.
    pub(crate) fn withdraw(&self) -> bool {
        let now = Instant::now();
        let slot = self.ring.current(now, |e| self.expire(e));
        let spent = match self.leased(now) {
            // The lease decides; the balance still counts the retry, so the
            // account is ready to decide alone the moment the lease ends.
            Some(lease) => {
                let spent = lease.take();
                if spent {
                    self.balance.fetch_sub(UNIT, Ordering::Relaxed);
                }
                spent
            }
            // The balance is the one place withdrawals meet, so two callers can
            // never both spend the last retry.
            None => self
                .balance
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                    (b >= UNIT).then_some(b - UNIT)
                })
                .is_ok(),
        };
        if spent {
            slot.fetch_sub(UNIT as u64, Ordering::Relaxed);
        }
        spent
    }

    /// Gives back one retry withdrawn at `withdrawn` (a time read before the
    /// withdrawal) but not sent: to the slot the withdrawal was taken from, so the
    /// two leave the window together; not at all once that slot has left it, as
    /// the withdrawal has then been given back by its expiry.
    pub(crate) fn refund_withdrawal(&self, withdrawn: Instant) {
        let now = Instant::now();
        if let Some(lease) = self.leased(now) {
            lease.give_back();
        }
        if self
            .ring
            .add_if_live(withdrawn, now, UNIT as u64, |e| self.expire(e))
        {
            self.balance.fetch_add(UNIT, Ordering::Relaxed);
        }
    }

    /// Gives back one retry that was withdrawn but not sent, as one withdrawn now.
    pub(crate) fn refund(&self) {
        self.refund_withdrawal(Instant::now());
    }

    /// Whole retries available now: the fleet's lease's while it holds.
    pub(crate) fn available(&self) -> u64 {
        let now = Instant::now();
        self.ring.current(now, |e| self.expire(e));
        if let Some(lease) = self.leased(now) {
            return lease.available();
        }
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

    fn refund_withdrawal(&self, withdrawn: Instant) {
        Account::refund_withdrawal(self, withdrawn)
    }

    fn pause(&self, until: Instant) {
        self.pause_until(until);
    }

    fn paused(&self, now: Instant) -> Option<Pause> {
        self.pause.paused(now).0
    }

    fn available(&self) -> Option<u64> {
        Some(Account::available(self))
    }

    fn pause_reporting(&self, until: Instant) -> Option<PauseChange> {
        self.pause_until(until)
    }

    fn paused_reporting(&self, now: Instant) -> (Option<Pause>, Option<PauseChange>) {
        self.pause.paused(now)
    }
}

impl Member for Account {
    fn pause_end(&self) -> Option<Instant> {
        self.pause.end()
    }

    fn pause(&self, until: Instant) {
        self.pause.pause(until);
    }
}

impl Entry for Account {
    /// Every deposit, withdrawal, refund and reading moves the window to its slot;
    /// a pause counts as a use until it ends, so a paused origin is not forgotten.
    fn last_used(&self) -> Instant {
        let used = self.ring.last_used();
        match self.pause.end() {
            Some(end) => used.max(end),
            None => used,
        }
    }

    /// Once every slot has expired the balance is the floor again: a fresh
    /// account would be no different.
    fn keeps_for(&self) -> Duration {
        self.window
    }
}

/// A retry budget account: the first attempts it has seen and the retries it has
/// paid for, over the budget's window.
///
/// [`BudgetLayer`](crate::BudgetLayer) keeps one per origin and leaves its
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
        self.0.deposit_at(Instant::now());
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

    /// Gives back one retry withdrawn at `withdrawn` (a time read before
    /// [`try_withdraw`](OriginAccount::try_withdraw)) but not sent: to the part of
    /// the window it was taken from, so the two leave the window together, and not
    /// at all once that part has left it (its expiry gave the retry back already).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), backstop::policy::InvalidConfig> {
    /// use std::time::Duration;
    /// use backstop::budget::BudgetPolicy;
    /// use tokio::time::{advance, Instant};
    ///
    /// let budget = BudgetPolicy::builder().ratio(1.0).min_per_second(0.0).build()?;
    /// let account = budget.account();
    /// account.deposit();
    /// let withdrawn = Instant::now();
    /// assert!(account.try_withdraw());
    /// // Near the end of the window the retry is given back, unsent.
    /// advance(Duration::from_millis(9_500)).await;
    /// account.refund_withdrawal(withdrawn);
    /// assert_eq!(account.available(), 1);
    /// // The first attempt that paid for it leaves the window with it.
    /// advance(Duration::from_millis(500)).await;
    /// assert_eq!(account.available(), 0);
    /// # Ok(()) }
    /// ```
    pub fn refund_withdrawal(&self, withdrawn: Instant) {
        self.0.refund_withdrawal(withdrawn);
    }

    /// How many retries the account would allow now.
    pub fn available(&self) -> u64 {
        self.0.available()
    }

    /// Pauses the account's origin until `until`, as a 429 or 503 with a wait
    /// hint does (capped by the budget's [`max_pause`](BudgetPolicy::max_pause);
    /// a pause that ends later is kept). Does nothing with
    /// [`PauseMode::Off`](super::PauseMode::Off).
    pub fn pause(&self, until: Instant) {
        self.0.pause_until(until);
    }

    /// Until when the account's origin is paused, if it is paused now.
    pub fn paused_until(&self) -> Option<Instant> {
        self.0.paused_now(None).map(|p| p.until())
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
            .field("paused_until", &self.paused_until())
            .finish()
    }
}
