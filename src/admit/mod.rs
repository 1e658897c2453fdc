//! Admission, written once: what happens around a call's attempts. The idempotency
//! key is stamped, the breaker admits the call (or refuses it), the adaptive
//! throttle lets it through (or sheds it), the budget counts it and meets its
//! origin's pause (holding or refusing it), the handles are handed down to the
//! layers beneath, and the call's outcome is recorded once when it ends.
//!
//! One [`Admission`] runs whichever parts it was given, in that order, with one
//! origin lookup for the breaker, the throttle and the budget together (one per
//! partition when they partition calls differently). The
//! [`IdempotencyKeyLayer`](crate::IdempotencyKeyLayer),
//! [`CircuitBreakerLayer`](crate::CircuitBreakerLayer),
//! [`ThrottleLayer`](crate::throttle::ThrottleLayer) and
//! [`BudgetLayer`](crate::BudgetLayer) are each a front-end over one part (their
//! service calls [`Admission::enter`]; the breaker's, the throttle's and the
//! budget's future is [`ResponseFuture`], the key's is its inner service's); the
//! [`Backstop`](crate::Backstop) stack runs all parts inside its retry layer's own
//! future. The same code serves every shape, so the shapes cannot disagree.
//!
//! The parts' own machinery lives here too, below every layer: the breaker's state
//! machine and settings ([`breaker`]), the budget's accounts, numbers and hold
//! ([`budget`]), the throttle's windows and settings ([`throttle`]), and the key's
//! settings ([`key`]). The layers re-export what users name. Where a held call
//! waits, and which layer holds it, is `paused`: a budget layer above a retry layer
//! hands the hold down, so the retry layer bounds it by its policy's timeout, as
//! the stack does.

pub(crate) mod breaker;
pub(crate) mod budget;
mod future;
pub(crate) mod key;
mod origin;
mod pass;
mod paused;
pub(crate) mod throttle;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::request::Parts;
use http::Request;
use tokio::time::Instant;

use crate::observe::Observed;
use crate::origin::Registry;
use crate::policy::circuit::State;
use crate::policy::error::Error;
use crate::policy::{CallContext, Given, Pause};
use breaker::{refusal, CircuitBreakerPolicy, Permit};
use budget::{Account, BudgetPolicy, OriginAccount};
pub(crate) use future::{Held, NeverHeld, ResponseFuture};
use origin::{registries, Found, Origin};
pub(crate) use pass::Pass;
pub(crate) use paused::{Beneath, Deferred, Note, Paused};
use throttle::ThrottlePolicy;

/// The parts of admission a layer or a stack runs, and the state of each origin.
#[derive(Clone, Default)]
pub(crate) struct Admission {
    key: Option<Arc<key::Config>>,
    breaker: Option<Arc<CircuitBreakerPolicy>>,
    budget: Option<BudgetPolicy>,
    throttle: Option<ThrottlePolicy>,
    /// Each origin's breaker, account and throttle: one registry for the parts
    /// that partition calls alike (the throttle's is always per origin), else one
    /// for each partition. Shared by clones, and with the standalone layers whose
    /// part this admission [adopted](Admission::adopt).
    origins: Arc<[Arc<Registry<Origin>>]>,
    /// Whether the handles (and the keyed mark) go into every call's context, for
    /// the layers beneath; without it, only into a context the call carries
    /// already. A standalone layer hands down always (that is its job); a stack
    /// whenever a hedge layer beneath may read them.
    hand_down: bool,
}

/// A call admission let through: what it holds, whether it is keyed, and when
/// admission dated it (the budget's window), so the call reads no second clock.
#[derive(Default)]
pub(crate) struct Admitted {
    pub(crate) pass: Pass,
    pub(crate) keyed: bool,
    pub(crate) at: Option<Instant>,
}

/// How a call goes on after admission.
pub(crate) enum Entered {
    /// Its first attempt goes now.
    Go(Admitted),
    /// Its origin is paused: the first attempt waits for its share of the end.
    Held {
        admitted: Admitted,
        paused: Box<Paused>,
    },
    /// Its origin is paused, and the retry layer beneath meets the pause within
    /// its policy's timeout (a budget layer's call, handed down).
    Deferred {
        admitted: Admitted,
        hold: Box<Deferred>,
    },
    /// The breaker or the origin's pause refused it; the call holds what must
    /// still see its end (the breaker permit, given back as the call sent nothing).
    Refused { pass: Pass, error: Error },
}

impl Admission {
    /// Admission of these parts. `hand_down`: see the field.
    pub(crate) fn new(
        key: Option<Arc<key::Config>>,
        breaker: Option<CircuitBreakerPolicy>,
        budget: Option<BudgetPolicy>,
        throttle: Option<ThrottlePolicy>,
        hand_down: bool,
    ) -> Self {
        let breaker = breaker.map(Arc::new);
        let origins = registries(breaker.as_ref(), budget.as_ref(), throttle.as_ref());
        Admission {
            key,
            breaker,
            budget,
            throttle,
            origins,
            hand_down,
        }
    }

    /// Whether the handles go into every call's context (see the field).
    pub(crate) fn hand_down_always(&mut self, hand_down: bool) {
        self.hand_down = hand_down;
    }

    /// Takes on the breaker or the budget of `other` (a standalone layer's
    /// admission), whichever it has: the same settings and the same entries, so
    /// calls through either count in one breaker or spend from one account. This
    /// admission must not have that part of its own; its entries are then found
    /// with one lookup in each registry.
    pub(crate) fn adopt(&mut self, other: &Admission) {
        debug_assert!(other.breaker.is_none() || self.breaker.is_none());
        debug_assert!(other.budget.is_none() || self.budget.is_none());
        debug_assert!(other.throttle.is_none() || self.throttle.is_none());
        if other.breaker.is_some() {
            self.breaker = other.breaker.clone();
        }
        if other.budget.is_some() {
            self.budget = other.budget.clone();
        }
        if other.throttle.is_some() {
            self.throttle = other.throttle.clone();
        }
        self.origins = self
            .origins
            .iter()
            .chain(other.origins.iter())
            .cloned()
            .collect();
    }

    /// The breaker's settings, when admission has a breaker.
    pub(crate) fn breaker(&self) -> Option<&CircuitBreakerPolicy> {
        self.breaker.as_deref()
    }

    /// The budget's numbers, when admission has a budget.
    pub(crate) fn budget(&self) -> Option<&BudgetPolicy> {
        self.budget.as_ref()
    }

    /// The throttle's settings, when admission has a throttle.
    pub(crate) fn throttle(&self) -> Option<&ThrottlePolicy> {
        self.throttle.as_ref()
    }

    /// The probability that the throttle of the origin of `head` sheds a call
    /// now, if admission has a throttle.
    pub(crate) fn throttle_probability(&self, head: &Parts) -> Option<f64> {
        let found = self.origin_of(head);
        Some(found.throttle()?.probability(Instant::now()))
    }

    /// The key's settings, when admission stamps keys.
    pub(crate) fn key(&self) -> Option<&key::Config> {
        self.key.as_deref()
    }

    /// The same, to change before the admission is shared.
    pub(crate) fn key_mut(&mut self) -> &mut key::Config {
        Arc::make_mut(self.key.get_or_insert_with(Default::default))
    }

    /// The breaker and account of the call whose head is `head`.
    fn origin_of(&self, head: &Parts) -> Found {
        let mut found = Found::default();
        for registry in self.origins.iter() {
            found.take_from(&registry.get(head));
        }
        found
    }

    /// The state of the breaker of the origin of `head`, if admission has a breaker.
    pub(crate) fn breaker_state(&self, head: &Parts) -> Option<State> {
        self.origin_of(head).core().map(|b| b.state())
    }

    /// When the breaker of the origin of `head` lets its next probe through, if
    /// admission has a breaker and it is open.
    pub(crate) fn next_probe_at(&self, head: &Parts) -> Option<Instant> {
        self.origin_of(head).core()?.next_probe_at()
    }

    /// The budget account of the origin of `head`, if admission has a budget.
    pub(crate) fn account(&self, head: &Parts) -> Option<OriginAccount> {
        self.origin_of(head).account().cloned().map(OriginAccount)
    }

    /// How many entries admission holds, after forgetting the idle ones.
    pub(crate) fn origins(&self) -> usize {
        self.origins.iter().map(|registry| registry.len()).sum()
    }

    /// The key's part of admission: stamps the call's key when it needs one, and
    /// says whether the call is keyed. With no other part (the key layer's own
    /// admission), it also marks a keyed call for the layers beneath, since
    /// nothing else will. [`enter`](Admission::enter) starts with it; the key
    /// layer runs it alone, as the rest of admission lets every call go there.
    #[inline(always)]
    pub(crate) fn stamp<B>(&self, req: &mut Request<B>) -> bool {
        let keyed = self.key.as_ref().is_some_and(|key| key.stamp(req));
        if keyed && self.origins.is_empty() {
            mark_keyed(req, self.hand_down);
        }
        keyed
    }

    /// [`enter`](Admission::enter), out of line: for the stack's retry layer.
    #[inline(never)]
    pub(crate) fn enter_call<B>(&self, req: &mut Request<B>, timeout: Option<Duration>) -> Entered {
        self.enter(req, timeout, None)
    }

    /// [`enter`](Admission::enter), out of line: for a front-end layer's service,
    /// which knows no timeout (the retry layer beneath bounds a hold it hands down).
    #[inline(never)]
    pub(crate) fn enter_front<B>(
        &self,
        req: &mut Request<B>,
        beneath: Option<&Beneath>,
    ) -> Entered {
        self.enter(req, None, beneath)
    }

    /// Runs admission on a call, part by part: the key is stamped, the breaker
    /// admits the call, the budget counts it and meets its origin's pause, holding
    /// it no longer than its deadline and `timeout` from its date allow; or, for a
    /// budget layer's service that knows a retry layer is `beneath` it, leaving
    /// the pause for the retry layer to meet within its own policy's timeout (a
    /// service that does not know yet asks, with its call).
    ///
    /// Called through [`Admission::enter_call`] (the stack's retry layer) and
    /// [`Admission::enter_front`] (a front-end's service), each out of line: a
    /// retry layer without admission carries none of it, and a front-end's `call`
    /// stays small enough that the inner future is built in place around it.
    #[inline(always)]
    pub(crate) fn enter<B>(
        &self,
        req: &mut Request<B>,
        timeout: Option<Duration>,
        beneath: Option<&Beneath>,
    ) -> Entered {
        let keyed = self.stamp(req);
        if self.origins.is_empty() {
            // The key alone: nothing to look up, hold or record.
            return Entered::Go(Admitted {
                pass: Pass::default(),
                keyed,
                at: None,
            });
        }
        // One lookup finds both (unless they partition calls differently).
        let mut found = Found::default();
        for registry in self.origins.iter() {
            registry.visit_for(req, |origin| found.take_from(origin));
        }
        // The call's context, looked up once: read for its observer and its date
        // (when a layer above dated the call already), written with the handles.
        let mut context = req.extensions_mut().get_mut::<CallContext>();
        // One record of the call for whatever tells its observer: the breaker's
        // permit, the pause, and the retry's own events.
        let observed = match context.as_deref().and_then(CallContext::observer) {
            None => None,
            Some(observer) => {
                let observer = observer.clone();
                let observed = Arc::new(Observed::new(observer, req));
                context = req.extensions_mut().get_mut::<CallContext>();
                Some(observed)
            }
        };
        let entered = context.as_deref().and_then(|c| Given::context(c).entered());
        // `Found` files here only an entry that keeps a breaker.
        let Found {
            breaker,
            account,
            throttle: throttle_entry,
        } = found;
        let permit = match breaker {
            Some(origin) => match origin.breaker.as_deref() {
                Some(core) => match core.admit() {
                    Ok(ticket) => Some(Permit::new(origin, ticket, observed.as_deref())),
                    Err(next_probe_at) => {
                        let error = refusal(req, core.label(), next_probe_at);
                        return Entered::Refused {
                            pass: Pass::default(),
                            error,
                        };
                    }
                },
                None => None,
            },
            None => None,
        };
        // The throttle, after the breaker: a call the breaker refused is not
        // counted; a call it sheds gives the breaker's permit back (dropped). Off,
        // it costs this branch.
        let throttle = match self.throttle {
            Some(_) => {
                let entries = [throttle_entry.as_deref(), account.as_deref()];
                match throttled(entries, permit.as_ref()) {
                    Ok(core) => core,
                    Err(shed) => {
                        return Entered::Refused {
                            pass: Pass::default(),
                            error: throttle::refusal(req, shed),
                        }
                    }
                }
            }
            None => None,
        };
        let pass = Pass::new(permit, account, observed, throttle);
        // Into the context the call carries, else into a new one when admission
        // hands down always.
        let dated = match context {
            Some(context) => pass.hand_down(context, keyed),
            None if self.hand_down && pass.hands_down(keyed) => {
                pass.hand_down(CallContext::of_mut(req.extensions_mut()), keyed)
            }
            None => None,
        };
        // Dated once: by a layer above that dated the call already, else now. It
        // counts as a first attempt when it goes (a refused call sent nothing).
        // One return of a call that goes, so its pass is written once.
        let at = match pass.account() {
            None => None,
            Some(account) => {
                let now = dated.or(entered).unwrap_or_else(Instant::now);
                match account.paused_now(pass.observed()) {
                    None => {
                        account.deposit_at(now);
                        // Until a budget layer's service knows what is beneath it,
                        // its calls ask (asked here, where the request is already
                        // written to).
                        if let Some(beneath) = beneath.filter(|b| !b.known()) {
                            Note::ask(req, beneath);
                        }
                        Some(now)
                    }
                    Some(pause) => {
                        let paused = (account.clone(), pause);
                        let admitted = Admitted {
                            pass,
                            keyed,
                            at: Some(now),
                        };
                        return Admission::enter_paused(
                            req, timeout, beneath, admitted, now, paused,
                        );
                    }
                }
            }
        };
        Entered::Go(Admitted { pass, keyed, at })
    }

    /// The rest of [`enter`](Admission::enter) for an `admitted` call, `dated`,
    /// whose origin's `account` is paused: held here, or its hold handed down to a
    /// retry layer `beneath`, or refused. Out of line: the success path carries
    /// none of it.
    #[cold]
    #[inline(never)]
    fn enter_paused<B>(
        req: &mut Request<B>,
        timeout: Option<Duration>,
        beneath: Option<&Beneath>,
        admitted: Admitted,
        dated: Instant,
        (account, pause): (Arc<Account>, Pause),
    ) -> Entered {
        // A paused origin: the first attempt is held (or refused) here, its retries
        // by the retry's gates, which ask the same account. The total timeout counts
        // from the call's date, the hold included, so the hold ends by the call's
        // deadline: the request's or `timeout` from the date, whichever is earlier.
        let hold = Deferred {
            account,
            pause,
            dated,
            deadline: Given::new(req.extensions()).deadline(),
            observed: admitted.pass.shared_observed().cloned(),
        };
        if beneath.is_some_and(Beneath::hands_down) {
            let hold = Box::new(hold);
            return Entered::Deferred { admitted, hold };
        }
        // Met here as the retry layer beneath a budget layer meets a hold handed
        // down: the same bound, counted here when the call goes.
        match hold.meet(timeout, true, true) {
            Ok(paused) => Entered::Held {
                admitted,
                paused: Box::new(paused),
            },
            Err(error) => Entered::Refused {
                pass: admitted.pass,
                error,
            },
        }
    }
}

/// Asks the origin's throttle about a call now (its entry is one of `entries`, or
/// the breaker's permit's): the throttle back when it lets the call through, else
/// why it shed it. Out of line: a stack without a throttle carries none of this in
/// its admission.
#[inline(never)]
fn throttled(
    entries: [Option<&Origin>; 2],
    permit: Option<&Permit<Origin>>,
) -> Result<Option<Arc<throttle::Core>>, throttle::Shed> {
    let owner = permit.map(Permit::owner);
    let core = entries
        .into_iter()
        .chain([owner])
        .find_map(|entry| entry?.throttle.as_ref());
    let Some(core) = core else {
        return Ok(None);
    };
    core.admit(Instant::now())?;
    Ok(Some(core.clone()))
}

/// Marks a keyed call in its context: the one it carries, else a new one when
/// admission hands down always.
#[inline]
fn mark_keyed<B>(req: &mut Request<B>, hand_down: bool) {
    let extensions = req.extensions_mut();
    match extensions.get_mut::<CallContext>() {
        Some(context) => context.mark_keyed(),
        None if hand_down => CallContext::of_mut(extensions).mark_keyed(),
        None => {}
    }
}

impl fmt::Debug for Admission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Admission")
            .field("key", &self.key.is_some())
            .field("breaker", &self.breaker)
            .field("budget", &self.budget)
            .field("throttle", &self.throttle)
            .field("hand_down", &self.hand_down)
            .finish()
    }
}
