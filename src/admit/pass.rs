//! The pass of an admitted call: what it holds until it ends, and what it records
//! then.

use std::sync::Arc;

use http::Response;
use tokio::time::Instant;

use super::breaker::Permit;
use super::budget::Account;
use super::origin::{account_of, Origin};
use super::throttle;
use crate::observe::{pause_told, Observed};
use crate::policy::error::Error;
use crate::policy::{may_hint_pause, pause_until, BudgetAccount, BudgetHandle, CallContext};

/// An admitted call's pass, held until its state is dropped: its breaker permit
/// (which records the call's outcome once, when it ends), its budget account and
/// its throttle (which counts the outcome once: it is taken when it does).
/// Flat: each part is tested once where it is used, with no test of the whole
/// before it. (A retry layer without admission carries no pass at all.)
#[derive(Default)]
pub(crate) struct Pass {
    /// The breaker's permit, through the entry that keeps the breaker (and the
    /// account too, when one registry keeps both).
    permit: Option<Permit<Origin>>,
    /// The entry that keeps the account, when it is not the permit's.
    budget: Option<Arc<Origin>>,
    /// The call's observer, told of the pause the call's answer sets and of the
    /// breaker's changes its outcome makes; shared with the call.
    observed: Option<Arc<Observed>>,
    /// The origin's throttle, which counts the call's outcome when it ends.
    throttle: Option<Arc<throttle::Core>>,
}

impl Pass {
    /// What a call holds of these; empty when it holds none.
    #[inline]
    pub(super) fn new(
        permit: Option<Permit<Origin>>,
        budget: Option<Arc<Origin>>,
        observed: Option<Arc<Observed>>,
        throttle: Option<Arc<throttle::Core>>,
    ) -> Self {
        Pass {
            permit,
            budget,
            observed,
            throttle,
        }
    }

    /// Whether the call holds nothing.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.permit.is_none()
            && self.budget.is_none()
            && self.observed.is_none()
            && self.throttle.is_none()
    }

    /// The call's budget account, when admission has a budget.
    #[inline]
    pub(super) fn account(&self) -> Option<&Arc<Account>> {
        account_of(
            self.budget.as_deref(),
            self.permit.as_ref().map(Permit::owner),
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
        self.permit.as_ref()
    }

    /// Whether the call holds a breaker permit or a budget account (and not only
    /// an observer).
    #[inline]
    fn holds_handles(&self) -> bool {
        self.budget.is_some() || self.permit.is_some()
    }

    /// Whether the call has anything to leave in a context: handles, or the
    /// keyed mark.
    #[inline]
    pub(super) fn hands_down(&self, keyed: bool) -> bool {
        keyed || self.holds_handles()
    }

    /// Leaves the handles in the call's `context`, for the layers beneath, and
    /// the keyed mark when the call is keyed (a hedge layer beneath hedges a keyed
    /// call as the mark tells it). Returns the call's date when it left an
    /// account: read from the context (a layer above dated the call) or now, and
    /// kept there for the layers beneath.
    #[inline(always)]
    pub(super) fn hand_down(&self, context: &mut CallContext, keyed: bool) -> Option<Instant> {
        if !self.hands_down(keyed) {
            return None;
        }
        if keyed {
            context.mark_keyed();
        }
        if let Some(handle) = self.permit().and_then(Permit::handle) {
            context.set_breaker(handle);
        }
        let account = self.account()?;
        let account: Arc<dyn BudgetAccount> = account.clone();
        context.set_budget(BudgetHandle::new(account));
        Some(context.entered())
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

    /// The call's observer as admission recorded it, for the call to share.
    pub(crate) fn shared_observed(&self) -> Option<&Arc<Observed>> {
        self.observed.as_ref()
    }

    /// The call ended with a plain first answer (see [`Pass::finish`]).
    #[inline]
    pub(crate) fn answered<RB>(&mut self, res: &Response<RB>) {
        // A call holding only its own budget entry records nothing unless the
        // answer may pause its origin: checked here, without a call.
        if self.permit.is_some()
            || self.throttle.is_some()
            || self.budget.is_some() && may_hint_pause(res.status())
        {
            self.answered_held(res);
        }
    }

    #[inline(never)]
    fn answered_held<RB>(&mut self, res: &Response<RB>) {
        // The status first: most answers carry no pause, and say so without a
        // look for the account.
        if may_hint_pause(res.status()) {
            if let (Some(budget), Some(until)) = (self.budget(), pause_until(res, None)) {
                pause_told(budget, until, self.observed());
            }
        }
        // The permit is kept (it records once): the account may be reached through
        // its entry until the call ends.
        if let Some(permit) = &mut self.permit {
            permit.answered(res, self.observed.as_deref());
        }
        if let Some(throttle) = self.throttle.take() {
            throttle.answered(res);
        }
    }

    /// The call ended with `result`: the origin is paused on the hint of its final
    /// answer, and the breaker and the throttle record the outcome, once.
    #[inline]
    pub(crate) fn finish<RB>(&mut self, result: &Result<Response<RB>, Error>) {
        match result {
            Ok(res) => self.answered(res),
            Err(err) => self.failed(err),
        }
    }

    /// The call ended with `err`: the breaker and the throttle record it. Out of
    /// line, so that the answered path stays small enough to inline.
    #[inline(never)]
    fn failed(&mut self, err: &Error) {
        if let Some(permit) = &mut self.permit {
            permit.failed(err, self.observed.as_deref());
        }
        if let Some(throttle) = self.throttle.take() {
            throttle.failed(err);
        }
    }
}
