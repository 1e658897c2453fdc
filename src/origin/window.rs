//! A sliding time window of counters, shared by the budget accounts and the breakers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// How many slots a window is cut into: events expire a slot at a time.
const SLOTS: u64 = 10;

/// `d` in nanoseconds, saturating at `u64::MAX` (about 584 years).
#[inline]
pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A window of `SLOTS` counters, each covering `window / SLOTS` of time.
///
/// An event is added to the slot of the current time; a slot's events expire
/// together, one `window` after the slot began, so an event counts for between
/// nine tenths of the window and all of it.
///
/// The slots are rotated lazily by whichever call first sees that the clock has
/// moved into a new slot. Rotation takes a mutex of this window only, about once
/// per slot; every other operation is one or two atomic operations. A caller only
/// touches the slot of the head it observed after the rotation that made it
/// current was published, so an event never lands in a slot that is being
/// cleared (unless the caller stalls for a whole window between reading the head
/// and adding to the slot); a refund, which may reach back to an older slot, adds
/// under the rotation's lock ([`add_if_live`](Ring::add_if_live)).
pub(crate) struct Ring {
    origin: Instant,
    slot_nanos: u64,
    /// The number of the current slot, counted from `origin`.
    head: AtomicU64,
    slots: [AtomicU64; SLOTS as usize],
    rotating: Mutex<()>,
}

impl Ring {
    /// A window of length `window` starting now. `window` must be at least
    /// `SLOTS` nanoseconds (the builders ask for far more).
    pub(crate) fn new(window: Duration) -> Self {
        let nanos = nanos(window);
        Ring {
            origin: Instant::now(),
            slot_nanos: (nanos / SLOTS).max(1),
            head: AtomicU64::new(0),
            slots: Default::default(),
            rotating: Mutex::new(()),
        }
    }

    /// When slot `n` ends, in nanoseconds from the origin.
    #[inline]
    fn end_of(&self, n: u64) -> u64 {
        n.saturating_add(1).saturating_mul(self.slot_nanos)
    }

    #[cfg(test)]
    fn slot_of(&self, now: Instant) -> u64 {
        nanos(now.saturating_duration_since(self.origin)) / self.slot_nanos
    }

    /// The slot to add an event at `now` to, after expiring the slots that left
    /// the window. `expired` receives the (wrapping) sum of the values expired, when
    /// any slot was.
    #[inline]
    pub(crate) fn current(&self, now: Instant, expired: impl FnOnce(u64)) -> &AtomicU64 {
        let elapsed = nanos(now.saturating_duration_since(self.origin));
        let head = self.head.load(Ordering::Acquire);
        // `now` is in the head's slot (or before it) when it is before the head's
        // end: a multiplication, where finding its slot takes a division, which
        // costs several times more (most calls land in the head's slot).
        if elapsed >= self.end_of(head) {
            return self.rotate(elapsed / self.slot_nanos, expired);
        }
        &self.slots[(head % SLOTS) as usize]
    }

    /// Adds `value` to the slot an event made at `at` was added to, when that slot
    /// is still in the window after moving the window to `now` (expiring the slots
    /// that left it, as [`current`](Ring::current) does); whether it was. An event
    /// is added to the slot of the time read before it, or to a later one when the
    /// window had moved on meanwhile: for such an event this is the slot before its
    /// own, whose expiry comes first. The slot is found and added to under the
    /// rotation's lock, so a rotation cannot clear it in between (this is for the
    /// rare refund, which may reach back to the oldest slot).
    pub(crate) fn add_if_live(
        &self,
        at: Instant,
        now: Instant,
        value: u64,
        expired: impl FnOnce(u64),
    ) -> bool {
        self.current(now, expired);
        let _rotating = self.rotating.lock().unwrap_or_else(PoisonError::into_inner);
        let head = self.head.load(Ordering::Acquire);
        let n = (nanos(at.saturating_duration_since(self.origin)) / self.slot_nanos).min(head);
        if head - n >= SLOTS {
            return false;
        }
        self.slots[(n % SLOTS) as usize].fetch_add(value, Ordering::Relaxed);
        true
    }

    /// [`current`](Ring::current) when the clock has moved into a new slot.
    #[cold]
    fn rotate(&self, now_slot: u64, expired: impl FnOnce(u64)) -> &AtomicU64 {
        let mut head;
        {
            let _rotating = self.rotating.lock().unwrap_or_else(PoisonError::into_inner);
            head = self.head.load(Ordering::Acquire);
            if now_slot > head {
                let first = (head + 1).max(now_slot.saturating_sub(SLOTS - 1));
                let mut sum = 0u64;
                for n in first..=now_slot {
                    sum = sum
                        .wrapping_add(self.slots[(n % SLOTS) as usize].swap(0, Ordering::Relaxed));
                }
                expired(sum);
                // Publishes the cleared slots: whoever reads this head touches only
                // cleared or live slots.
                self.head.store(now_slot, Ordering::Release);
                head = now_slot;
            }
        }
        &self.slots[(head % SLOTS) as usize]
    }

    /// The values of the live slots. Call [`current`](Ring::current) first so that
    /// expired slots are cleared.
    pub(crate) fn values(&self) -> impl Iterator<Item = u64> + '_ {
        self.slots.iter().map(|s| s.load(Ordering::Relaxed))
    }

    /// Clears every slot; returns the (wrapping) sum of what they held.
    pub(crate) fn clear(&self) -> u64 {
        let _rotating = self.rotating.lock().unwrap_or_else(PoisonError::into_inner);
        self.slots.iter().fold(0u64, |sum, s| {
            sum.wrapping_add(s.swap(0, Ordering::Relaxed))
        })
    }

    /// Whether every event has left the window by `now`.
    #[cfg(test)]
    pub(crate) fn is_expired(&self, now: Instant) -> bool {
        self.slot_of(now) >= self.head.load(Ordering::Acquire).saturating_add(SLOTS)
    }

    /// How long after [`last_used`](Ring::last_used) the window still holds an
    /// event: a slot's events expire a window after the slot began, so those of the
    /// last slot used leave nine slots after it ends.
    pub(crate) fn holds_for(&self) -> Duration {
        Duration::from_nanos(self.slot_nanos.saturating_mul(SLOTS - 1))
    }

    /// The end of the slot the window was last used in (an event added, or the
    /// slots read): no later than a slot after the last use. A window unused for
    /// one `window` since then holds nothing any more.
    pub(crate) fn last_used(&self) -> Instant {
        let head = self.head.load(Ordering::Acquire);
        self.origin + Duration::from_nanos(self.end_of(head))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn slots_expire_one_window_after_they_began() {
        let ring = Ring::new(Duration::from_secs(10));
        ring.current(Instant::now(), |_| panic!("nothing to expire"))
            .fetch_add(1, Ordering::Relaxed);
        tokio::time::advance(Duration::from_millis(500)).await;
        ring.current(Instant::now(), |_| panic!("same slot"))
            .fetch_add(2, Ordering::Relaxed);
        tokio::time::advance(Duration::from_millis(9_499)).await;
        let mut seen = None;
        ring.current(Instant::now(), |e| seen = Some(e));
        assert_eq!(seen, Some(0), "slots 1..=9 were empty");
        assert_eq!(ring.values().sum::<u64>(), 3);
        tokio::time::advance(Duration::from_millis(1)).await;
        let mut seen = None;
        ring.current(Instant::now(), |e| seen = Some(e));
        assert_eq!(seen, Some(3));
        assert_eq!(ring.values().sum::<u64>(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_long_gap_expires_everything_once() {
        let ring = Ring::new(Duration::from_secs(1));
        for _ in 0..10 {
            ring.current(Instant::now(), |_| {})
                .fetch_add(1, Ordering::Relaxed);
            tokio::time::advance(Duration::from_millis(100)).await;
        }
        assert!(!ring.is_expired(Instant::now()));
        let last = ring.last_used();
        assert_eq!(last, ring.origin + Duration::from_secs(1));
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert!(ring.is_expired(Instant::now()));
        assert_eq!(ring.last_used(), last, "reading the state is not a use");
        assert_eq!(ring.holds_for(), Duration::from_millis(900));
        let mut seen = None;
        ring.current(Instant::now(), |e| seen = Some(e));
        assert_eq!(seen, Some(10));
    }
}
