//! The guard of a retry layer: the idempotency key, the circuit breaker and the
//! retry budget of each call, run in the retry layer's own call and future instead
//! of in three layers around it (see [`RetryLayer::circuit_breaker`]).
//!
//! [`RetryLayer::circuit_breaker`]: super::RetryLayer::circuit_breaker

use std::sync::Arc;

use http::{Request, Response};
use tokio::time::Instant;

use crate::budget::{Account, BudgetLayer, Hold};
use crate::circuit_breaker::{refusal, CircuitBreakerLayer, Permit};
use crate::error::Error;
use crate::idempotency_key::IdempotencyKeyLayer;
use crate::observe::Observed;
use crate::policy::{BudgetHandle, CallContext, Given};

/// What a retry layer guards its calls with: the layers it does the work of.
#[derive(Clone, Debug, Default)]
pub(crate) struct Guard {
    pub(super) key: Option<IdempotencyKeyLayer>,
    pub(super) breaker: Option<CircuitBreakerLayer>,
    pub(super) budget: Option<BudgetLayer>,
    /// The breaker's and the budget's handles go into every call's context, for a
    /// hedge layer beneath; without it, only into a context the call has already.
    pub(super) hand_down: bool,
}

/// What a guarded call holds until it ends: its breaker permit and its budget
/// account. Empty for a call that is not guarded.
#[derive(Default)]
pub(crate) struct Guarded {
    pub(super) budget: Option<BudgetHandle>,
    pub(super) permit: Option<Permit>,
    /// The call's observer, told of the pause the call's answer sets.
    observed: Option<Box<Observed>>,
}

/// A call the guard let through: what it holds, whether the guard stamped a key on
/// it, and when the guard dated it (the budget's window), so the call's start
/// reads no second clock.
#[derive(Default)]
pub(crate) struct Admitted {
    pub(super) guarded: Guarded,
    pub(super) keyed: bool,
    pub(super) at: Option<Instant>,
}

/// How a guarded call goes on after its guard.
pub(super) enum Entered {
    /// Its first attempt goes now.
    Go(Admitted),
    /// Its origin is paused: the first attempt waits for its share of the end.
    Held {
        admitted: Admitted,
        account: Arc<Account>,
        hold: Hold,
    },
    /// The breaker or the origin's pause refused it; the call holds what must
    /// still see its end (a refused pause still counts for the breaker).
    Refused { guarded: Guarded, error: Error },
}

impl Guard {
    /// Runs the guard on a call, in the order of the layers it stands for: the key
    /// is stamped, the breaker admits the call, the budget counts it and meets its
    /// origin's pause.
    #[inline]
    pub(super) fn enter<B>(&self, req: &mut Request<B>) -> Entered {
        let keyed = self.key.as_ref().is_some_and(|key| key.config.stamp(req));
        let context = CallContext::of(req.extensions());
        let has_context = context.is_some();
        let observer = context.and_then(CallContext::observer).cloned();
        let observed = |req: &Request<B>| observer.clone().map(|o| Box::new(Observed::new(o, req)));
        let permit = match &self.breaker {
            Some(layer) => {
                let breaker = layer.shared.breakers.get_for(req);
                match breaker.admit() {
                    Ok(ticket) => Some(Permit::new(breaker, ticket, observed(req))),
                    Err(next_probe_at) => {
                        let error = refusal(req, breaker.label(), next_probe_at);
                        return Entered::Refused {
                            guarded: Guarded::default(),
                            error,
                        };
                    }
                }
            }
            None => None,
        };
        let mut guarded = Guarded {
            budget: None,
            permit,
            observed: observed(req),
        };
        let hand_down = self.hand_down || has_context;
        let Some(layer) = &self.budget else {
            guarded.hand_down(req, hand_down, keyed);
            return Entered::Go(Admitted {
                guarded,
                keyed,
                at: None,
            });
        };
        let account = layer.shared.accounts.get_for(req);
        let now = Instant::now();
        account.deposit_at(now);
        let pause = account.paused_now(guarded.observed.as_deref());
        guarded.budget = Some(BudgetHandle::new(account.clone()));
        guarded.hand_down(req, hand_down, keyed);
        let Some(pause) = pause else {
            return Entered::Go(Admitted {
                guarded,
                keyed,
                at: Some(now),
            });
        };
        // A paused origin: the first attempt is held (or refused) here, its retries
        // by the gates, which ask the same account.
        let deadline = Given::new(req.extensions()).deadline();
        let now = Instant::now();
        match Hold::meet(pause, now, deadline, &account, guarded.observed.as_deref()) {
            Ok(hold) => Entered::Held {
                admitted: Admitted {
                    guarded,
                    keyed,
                    at: None,
                },
                account,
                hold,
            },
            Err(error) => Entered::Refused { guarded, error },
        }
    }
}

impl Guarded {
    /// Whether the call holds nothing of a guard.
    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.budget.is_none() && self.permit.is_none() && self.observed.is_none()
    }

    /// Leaves the handles in the call's context, for the layers beneath, when
    /// `hand_down`, and the keyed mark when the guard stamped the call's key (a
    /// hedge layer beneath hedges a keyed call as the key layer's mark tells it).
    fn hand_down<B>(&self, req: &mut Request<B>, hand_down: bool, keyed: bool) {
        if !hand_down || (self.budget.is_none() && self.permit.is_none() && !keyed) {
            return;
        }
        let context = CallContext::of_mut(req.extensions_mut());
        if keyed {
            context.mark_keyed();
        }
        if let Some(budget) = &self.budget {
            context.set_budget(budget.clone());
        }
        if let Some(permit) = &self.permit {
            context.set_breaker(permit.handle());
        }
    }

    /// Whether the breaker, when the call has one, lets an extra attempt through.
    #[inline]
    pub(super) fn allows_retry(&self) -> Option<bool> {
        self.permit.as_ref().map(Permit::allows_retry)
    }

    /// The call's observer, for the pause its answer sets.
    pub(super) fn observed(&self) -> Option<&Observed> {
        self.observed.as_deref()
    }

    /// The call ended with a plain first answer (see [`Guarded::finish`]).
    #[inline]
    pub(super) fn answered<RB>(&mut self, res: &Response<RB>) {
        if let Some(budget) = &self.budget {
            super::call::pause_on_hint(budget, res, Instant::now(), self.observed.as_deref());
        }
        if let Some(permit) = self.permit.take() {
            permit.answered(res);
        }
    }

    /// The call ended with `result`: the origin is paused on the hint of its
    /// answer, and the breaker records it, as the layers it stands for would.
    #[inline]
    pub(super) fn finish<RB>(&mut self, result: &Result<Response<RB>, Error>) {
        if let (Some(budget), Ok(res)) = (&self.budget, result) {
            super::call::pause_on_hint(budget, res, Instant::now(), self.observed.as_deref());
        }
        if let Some(permit) = self.permit.take() {
            permit.finish(result);
        }
    }
}
