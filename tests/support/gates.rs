//! Stand-ins for the budget and breaker handles a layer above leaves in a
//! request's extensions.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use backstop::policy::{BreakerGate, BreakerHandle, BudgetAccount, BudgetHandle};

/// A budget of a fixed number of retries that counts the withdrawals it was asked
/// for and takes refunds back.
pub struct Tokens {
    left: AtomicU32,
    asked: AtomicU32,
}

impl Tokens {
    pub fn new(n: u32) -> Arc<Tokens> {
        Arc::new(Tokens {
            left: AtomicU32::new(n),
            asked: AtomicU32::new(0),
        })
    }

    /// A handle on a new budget of `n` retries, and the budget.
    pub fn handle(n: u32) -> (BudgetHandle, Arc<Tokens>) {
        let tokens = Tokens::new(n);
        (BudgetHandle::new(tokens.clone()), tokens)
    }

    pub fn left(&self) -> u32 {
        self.left.load(Ordering::SeqCst)
    }

    /// How many withdrawals were asked for, granted or not.
    pub fn asked(&self) -> u32 {
        self.asked.load(Ordering::SeqCst)
    }
}

impl BudgetAccount for Tokens {
    fn try_withdraw(&self) -> bool {
        self.asked.fetch_add(1, Ordering::SeqCst);
        self.left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    fn refund(&self) {
        self.left.fetch_add(1, Ordering::SeqCst);
    }
}

/// A breaker switched by hand: closed, it lets retries through; open, it refuses.
pub struct Switch {
    open: AtomicBool,
}

impl Switch {
    pub fn closed() -> Arc<Switch> {
        Arc::new(Switch {
            open: AtomicBool::new(false),
        })
    }

    pub fn open() -> Arc<Switch> {
        Arc::new(Switch {
            open: AtomicBool::new(true),
        })
    }

    pub fn set_open(&self, open: bool) {
        self.open.store(open, Ordering::SeqCst);
    }

    pub fn handle(self: &Arc<Self>) -> BreakerHandle {
        BreakerHandle::new(self.clone())
    }
}

impl BreakerGate for Switch {
    fn allows_retry(&self) -> bool {
        !self.open.load(Ordering::SeqCst)
    }
}
