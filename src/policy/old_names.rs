//! The old names of items this module renamed, kept so code written against them
//! still compiles, with a warning that names the new item. The CHANGELOG's
//! "Migrating" section lists them.

use super::{AttemptLog, BreakerGate, BudgetAccount, Keyed, NoRetry};

/// The old name of [`NoRetry`]. Its variants are reached through it
/// (`Unsafe::MaybeProcessed`), but not imported from it: `use
/// backstop::policy::Unsafe::MaybeProcessed` names [`NoRetry`] instead.
#[deprecated(since = "0.1.0", note = "renamed `NoRetry`")]
pub type Unsafe = NoRetry;

/// The old name of [`Keyed`], the idempotency marker.
#[deprecated(since = "0.1.0", note = "renamed `Keyed`")]
pub type IdempotencyKey = Keyed;

/// The old name of the marker [`Keyed`], as a value (`extensions.insert(IdempotencyKey)`).
#[deprecated(since = "0.1.0", note = "renamed `Keyed`")]
#[allow(non_upper_case_globals)]
pub const IdempotencyKey: Keyed = Keyed;

/// The old name of [`AttemptLog`].
#[deprecated(since = "0.1.0", note = "renamed `AttemptLog`")]
pub type AttemptProgress = AttemptLog;

/// The old name of [`BudgetAccount`]. A trait has no alias: this one is a
/// [`BudgetAccount`] under its old name, implemented for every budget account, so
/// a bound or a `dyn Budget` written against it still compiles. An account
/// implements [`BudgetAccount`] itself.
///
/// ```
/// #![allow(deprecated)]
/// use backstop::policy::{Budget, BudgetAccount};
///
/// struct Unlimited;
/// impl BudgetAccount for Unlimited {
///     fn try_withdraw(&self) -> bool {
///         true
///     }
/// }
/// fn spend(account: &dyn Budget) -> bool {
///     account.try_withdraw()
/// }
/// assert!(spend(&Unlimited));
/// ```
#[deprecated(since = "0.1.0", note = "renamed `BudgetAccount`")]
pub trait Budget: BudgetAccount {}

#[allow(deprecated)]
impl<T: BudgetAccount + ?Sized> Budget for T {}

/// The old name of [`BreakerGate`], as [`Budget`] is of [`BudgetAccount`]:
/// implemented for every gate; a gate implements [`BreakerGate`] itself.
#[deprecated(since = "0.1.0", note = "renamed `BreakerGate`")]
pub trait Breaker: BreakerGate {}

#[allow(deprecated)]
impl<T: BreakerGate + ?Sized> Breaker for T {}
