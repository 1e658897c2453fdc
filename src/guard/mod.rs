//! The guard of a retry layer: the idempotency key, the circuit breaker and the
//! retry budget of each call, run in the retry layer's own call and future instead
//! of in three layers around it (see [`RetryLayer::circuit_breaker`]).
//!
//! Layers share nothing but `policy`; this module is the one place that stands on
//! several of them, because doing their work in one future is its job. It uses their
//! own pieces (the key layer's stamp, the breaker's permit and refusal, the budget's
//! account and hold), so each behaviour stays written once, in its layer. The retry
//! layer sees only what this module hands it: [`Entered`], [`Admitted`],
//! [`Guarded`] and [`Paused`].
//!
//! The guard keeps each origin's breaker and budget account side by side in one
//! registry entry, so a call finds both with one lookup (two when the breaker and
//! the budget partition calls differently).
//!
//! [`RetryLayer::circuit_breaker`]: crate::RetryLayer::circuit_breaker

mod layer;

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::request::Parts;
use http::{Request, Response};
use tokio::time::Instant;

use crate::budget::{Account, BudgetPolicy, Hold, OriginAccount};
use crate::circuit_breaker::{refusal, BreakerOwner, CircuitBreakerPolicy, Core, Permit, State};
use crate::error::Error;
use crate::idempotency_key::IdempotencyKeyLayer;
use crate::observe::Observed;
use crate::origin::{Entry, Partition, Registry};
use crate::policy::{
    call_deadline, pause_told, pause_until, BreakerGate, BreakerHandle, BudgetAccount,
    BudgetHandle, CallContext, Given, RetryPolicy,
};

/// What a retry layer guards its calls with: the work of the layers it stands
/// for, and the state of each origin.
#[derive(Clone, Default)]
pub(crate) struct Guard {
    pub(crate) key: Option<IdempotencyKeyLayer>,
    breaker: Option<Arc<CircuitBreakerPolicy>>,
    budget: Option<BudgetPolicy>,
    /// Each origin's breaker and account: one registry when the two partition
    /// calls alike (or only one is set), else one each. Shared by the layer's
    /// clones and services.
    origins: Arc<[Registry<Origin>]>,
    /// The breaker's and the budget's handles go into every call's context, for a
    /// hedge layer beneath; without it, only into a context the call has already.
    pub(crate) hand_down: bool,
}

/// What the guard keeps of one origin (or key): its breaker and its budget
/// account, each when the guard has one. A call holds one reference to the entry
/// for both, which saves two atomic operations a call over a reference to each
/// part. The parts are shared on their own only with what outlives a call or
/// leaves it (the handles a call hands down, a held call's wait, the layer's
/// inspection methods), so the entry counts as used while anything holds it or
/// either part.
pub(crate) struct Origin {
    breaker: Option<Arc<Core>>,
    account: Option<Arc<Account>>,
}

/// The entries of a call's origin: one reference each, so a call whose breaker and
/// account share an entry (the usual guard) holds one reference for both.
#[derive(Default)]
struct Found {
    /// The entry that keeps the call's breaker, and its account too when one
    /// registry keeps both.
    breaker: Option<Arc<Origin>>,
    /// The entry that keeps the call's account, when it is not the breaker's.
    account: Option<Arc<Origin>>,
}

impl Found {
    /// Takes a reference to `origin`, found in one of the guard's registries.
    #[inline]
    fn take_from(&mut self, origin: &Arc<Origin>) {
        if origin.breaker.is_some() {
            self.breaker = Some(origin.clone());
        } else if origin.account.is_some() {
            self.account = Some(origin.clone());
        }
    }

    /// The call's breaker.
    fn core(&self) -> Option<&Arc<Core>> {
        self.breaker.as_deref()?.breaker.as_ref()
    }

    /// The call's account, wherever it is kept.
    fn account(&self) -> Option<&Arc<Account>> {
        account_of(self.account.as_deref(), self.breaker.as_deref())
    }
}

/// The account kept by `own` (an entry of the budget's own), else by `breaker`'s
/// entry (when one registry keeps both).
#[inline]
fn account_of<'a>(
    own: Option<&'a Origin>,
    breaker: Option<&'a Origin>,
) -> Option<&'a Arc<Account>> {
    own.or(breaker)?.account.as_ref()
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
        match (breaker, account) {
            (Some(a), Some(b)) => a.max(b),
            (a, b) => a.or(b).unwrap_or_else(Instant::now),
        }
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
        breaker.max(account)
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
    }
}

impl Guard {
    /// Guards calls with a circuit breaker of these settings.
    pub(crate) fn set_breaker(&mut self, policy: CircuitBreakerPolicy) {
        self.breaker = Some(Arc::new(policy));
        self.rebuild();
    }

    /// Guards calls with a retry budget of these numbers.
    pub(crate) fn set_budget(&mut self, policy: BudgetPolicy) {
        self.budget = Some(policy);
        self.rebuild();
    }

    /// Fresh registries for the breaker and budget set now: one whose entries hold
    /// both when they partition calls alike, else one for each.
    fn rebuild(&mut self) {
        fn registry(
            partition: &Partition,
            breaker: Option<&Arc<CircuitBreakerPolicy>>,
            budget: Option<&BudgetPolicy>,
        ) -> Registry<Origin> {
            let (breaker, budget) = (breaker.cloned(), budget.cloned());
            Registry::new(partition.clone(), move |label| Origin {
                breaker: breaker
                    .as_ref()
                    .map(|p| Arc::new(Core::new(p.clone(), label))),
                account: budget.as_ref().map(|p| Arc::new(Account::new(p))),
            })
        }
        self.origins = match (&self.breaker, &self.budget) {
            (Some(b), Some(a)) if b.partition.same_as(&a.partition) => {
                vec![registry(&b.partition, Some(b), Some(a))]
            }
            (b, a) => b
                .iter()
                .map(|b| registry(&b.partition, Some(b), None))
                .chain(a.iter().map(|a| registry(&a.partition, None, Some(a))))
                .collect(),
        }
        .into();
    }

    /// The breaker and account of the call whose head is `head`.
    fn origin_of(&self, head: &Parts) -> Found {
        let mut found = Found::default();
        for registry in self.origins.iter() {
            found.take_from(&registry.get(head));
        }
        found
    }

    /// The state of the breaker of the origin of `head`, if the guard has a breaker.
    pub(crate) fn breaker_state(&self, head: &Parts) -> Option<State> {
        self.origin_of(head).core().map(|b| b.state())
    }

    /// When the breaker of the origin of `head` lets its next probe through, if
    /// the guard has a breaker and it is open.
    pub(crate) fn next_probe_at(&self, head: &Parts) -> Option<Instant> {
        self.origin_of(head).core()?.next_probe_at()
    }

    /// The budget account of the origin of `head`, if the guard has a budget.
    pub(crate) fn account(&self, head: &Parts) -> Option<OriginAccount> {
        self.origin_of(head).account().cloned().map(OriginAccount)
    }

    /// How many entries the guard holds, after forgetting the idle ones.
    pub(crate) fn origins(&self) -> usize {
        self.origins.iter().map(Registry::len).sum()
    }
}

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guard")
            .field("key", &self.key)
            .field("breaker", &self.breaker)
            .field("budget", &self.budget)
            .field("hand_down", &self.hand_down)
            .finish()
    }
}

/// What a guarded call holds until its state is dropped: its breaker permit (which
/// records the call's outcome once, when it ends) and its budget account. Empty for
/// a call that is not guarded, which is then one word to check where it drops.
#[derive(Default)]
pub(crate) struct Guarded(Option<Holdings>);

/// What a guarded call holds, when it holds anything.
struct Holdings {
    /// The breaker's permit, through the entry that keeps the breaker (and the
    /// account too, when one registry keeps both).
    permit: Option<Permit<Origin>>,
    /// The entry that keeps the account, when it is not the permit's.
    budget: Option<Arc<Origin>>,
    /// The call's observer, told of the pause the call's answer sets; shared with
    /// the permit and the call.
    observed: Option<Arc<Observed>>,
}

/// A call the guard let through: what it holds, whether the guard stamped a key on
/// it, and when the guard dated it (the budget's window), so the call's start
/// reads no second clock.
#[derive(Default)]
pub(crate) struct Admitted {
    pub(crate) guarded: Guarded,
    pub(crate) keyed: bool,
    pub(crate) at: Option<Instant>,
}

/// How a guarded call goes on after its guard.
pub(crate) enum Entered {
    /// Its first attempt goes now.
    Go(Admitted),
    /// Its origin is paused: the first attempt waits for its share of the end.
    Held { admitted: Admitted, paused: Paused },
    /// The breaker or the origin's pause refused it; the call holds what must
    /// still see its end (the breaker permit, given back as the call sent nothing).
    Refused { guarded: Guarded, error: Error },
}

impl Guard {
    /// Runs the guard on a call, in the order of the layers it stands for: the key
    /// is stamped, the breaker admits the call, the budget counts it and meets its
    /// origin's pause, holding it no longer than its deadline and the policy's
    /// total `timeout` allow.
    #[inline]
    pub(crate) fn enter<B>(&self, req: &mut Request<B>, policy: &RetryPolicy) -> Entered {
        let keyed = self.key.as_ref().is_some_and(|key| key.config.stamp(req));
        let context = CallContext::of(req.extensions());
        let has_context = context.is_some();
        let observer = context.and_then(CallContext::observer).cloned();
        // When a layer above dated the call already.
        let entered = context.and_then(|c| Given::context(c).entered());
        // One record of the call for whatever tells its observer: the breaker's permit,
        // the guard's pause, and the retry's own events.
        let observed = observer.map(|o| Arc::new(Observed::new(o, req)));
        // One lookup finds both (unless they partition calls differently).
        let mut found = Found::default();
        for registry in self.origins.iter() {
            registry.visit_for(req, |origin| found.take_from(origin));
        }
        // `Found` files here only an entry that keeps a breaker.
        let permit = match found.breaker {
            Some(origin) => match origin.breaker.as_deref() {
                Some(core) => match core.admit() {
                    Ok(ticket) => Some(Permit::new(origin, ticket, observed.clone())),
                    Err(next_probe_at) => {
                        let error = refusal(req, core.label(), next_probe_at);
                        return Entered::Refused {
                            guarded: Guarded::default(),
                            error,
                        };
                    }
                },
                None => None,
            },
            None => None,
        };
        let guarded = Guarded::new(permit, found.account, observed);
        guarded.hand_down(req, self.hand_down || has_context, keyed);
        let Some(account) = guarded.account() else {
            return Entered::Go(Admitted {
                guarded,
                keyed,
                at: None,
            });
        };
        // Dated once: by a layer above that dated the call already, else now. It
        // counts as a first attempt when it goes (a refused call sent nothing).
        let now = entered.unwrap_or_else(Instant::now);
        let Some(pause) = account.paused_now(guarded.observed()) else {
            account.deposit_at(now);
            return Entered::Go(Admitted {
                guarded,
                keyed,
                at: Some(now),
            });
        };
        let account = account.clone();
        // A paused origin: the first attempt is held (or refused) here, its retries
        // by the gates, which ask the same account. The call's total timeout counts
        // from its date, the hold included, so the hold ends by the call's deadline:
        // the request's or the policy's timeout from the date, whichever is earlier.
        // (Its history and events time it from the start of its first attempt, as
        // behind a budget layer.)
        let dated = now;
        let deadline = call_deadline(
            Given::new(req.extensions()).deadline(),
            policy.timeout(),
            dated,
        );
        let now = Instant::now();
        match Hold::meet(pause, now, deadline, &account, guarded.observed()) {
            Ok(hold) => Entered::Held {
                admitted: Admitted {
                    guarded,
                    keyed,
                    at: Some(dated),
                },
                paused: Paused { account, hold },
            },
            Err(error) => Entered::Refused { guarded, error },
        }
    }
}

/// A held call's wait for its share of the end of its origin's pause.
pub(crate) struct Paused {
    account: Arc<Account>,
    hold: Hold,
}

impl Paused {
    /// Counts the held call, dated `at`, as a first attempt: it goes.
    pub(crate) fn deposit_at(&self, at: Instant) {
        self.account.deposit_at(at);
    }

    /// Waits out the hold: ready when the first attempt may go, or with the error
    /// that refuses the call (see [`Hold::poll`]).
    pub(crate) fn poll(
        &mut self,
        cx: &mut Context<'_>,
        observed: Option<&Observed>,
    ) -> Poll<Result<(), Error>> {
        self.hold.poll(cx, &self.account, observed)
    }
}

impl Guarded {
    /// What a call holds of these; empty when it holds none.
    fn new(
        permit: Option<Permit<Origin>>,
        budget: Option<Arc<Origin>>,
        observed: Option<Arc<Observed>>,
    ) -> Self {
        if permit.is_none() && budget.is_none() && observed.is_none() {
            return Guarded(None);
        }
        Guarded(Some(Holdings {
            permit,
            budget,
            observed,
        }))
    }

    /// Whether the call holds nothing of a guard.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// The call's budget account, when the guard has a budget.
    #[inline]
    fn account(&self) -> Option<&Arc<Account>> {
        let held = self.0.as_ref()?;
        account_of(
            held.budget.as_deref(),
            held.permit.as_ref().map(Permit::owner),
        )
    }

    /// The call's budget account, as the retry's gates ask it.
    #[inline]
    pub(crate) fn budget(&self) -> Option<&dyn BudgetAccount> {
        self.account().map(|a| &**a as &dyn BudgetAccount)
    }

    /// The breaker's permit, when the call has one.
    #[inline]
    fn permit(&self) -> Option<&Permit<Origin>> {
        self.0.as_ref()?.permit.as_ref()
    }

    /// The same, mutably.
    #[inline]
    fn permit_mut(&mut self) -> Option<&mut Permit<Origin>> {
        self.0.as_mut()?.permit.as_mut()
    }

    /// Whether the call holds a breaker permit or a budget account (and not only
    /// an observer).
    #[inline]
    fn holds_handles(&self) -> bool {
        self.0
            .as_ref()
            .is_some_and(|held| held.budget.is_some() || held.permit.is_some())
    }

    /// Leaves the handles in the call's context, for the layers beneath, when
    /// `hand_down`, and the keyed mark when the guard stamped the call's key (a
    /// hedge layer beneath hedges a keyed call as the key layer's mark tells it).
    fn hand_down<B>(&self, req: &mut Request<B>, hand_down: bool, keyed: bool) {
        if !hand_down || (!self.holds_handles() && !keyed) {
            return;
        }
        let context = CallContext::of_mut(req.extensions_mut());
        if keyed {
            context.mark_keyed();
        }
        if let Some(account) = self.account() {
            let account: Arc<dyn BudgetAccount> = account.clone();
            context.set_budget(BudgetHandle::new(account));
        }
        if let Some(handle) = self.permit().and_then(Permit::handle) {
            context.set_breaker(handle);
        }
    }

    /// Whether the breaker, when the call has one, lets an extra attempt through.
    #[inline]
    pub(crate) fn allows_retry(&self) -> Option<bool> {
        self.permit().map(Permit::allows_retry)
    }

    /// The call's observer, for the pause its answer sets.
    pub(crate) fn observed(&self) -> Option<&Observed> {
        self.shared_observed().map(|o| &**o)
    }

    /// The call's observer as the guard recorded it, for the call to share.
    pub(crate) fn shared_observed(&self) -> Option<&Arc<Observed>> {
        self.0.as_ref()?.observed.as_ref()
    }

    /// The call ended with a plain first answer (see [`Guarded::finish`]).
    #[inline]
    pub(crate) fn answered<RB>(&mut self, res: &Response<RB>) {
        if self.holds_handles() {
            self.answered_guarded(res);
        }
    }

    #[inline(never)]
    fn answered_guarded<RB>(&mut self, res: &Response<RB>) {
        if let (Some(budget), Some(until)) = (self.budget(), pause_until(res, None)) {
            pause_told(budget, until, self.observed());
        }
        // The permit is kept (it records once): the account may be reached through
        // its entry until the call ends.
        if let Some(permit) = self.permit_mut() {
            permit.answered(res);
        }
    }

    /// The call ended with `result`: the origin is paused on the hint of its
    /// answer, and the breaker records it, as the layers it stands for would.
    #[inline]
    pub(crate) fn finish<RB>(&mut self, result: &Result<Response<RB>, Error>) {
        match result {
            Ok(res) => self.answered(res),
            Err(_) => {
                if let Some(permit) = self.permit_mut() {
                    permit.finish(result);
                }
            }
        }
    }
}
