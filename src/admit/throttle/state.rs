//! Each origin's throttle: its requests and accepts over a sliding window, the
//! draw that sheds a call, and the outcome a call records when it ends.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http::Response;
use rand::Rng;
use tokio::time::Instant;

use super::ThrottlePolicy;
use crate::origin::{Entry, Ring};
use crate::policy::error::Error;
use crate::policy::{is_overloaded, ErrorKind};

/// One request, in a slot's low half.
const REQUEST: u64 = 1;
/// One accept, in a slot's high half.
const ACCEPT: u64 = 1 << 32;

/// The requests and accepts of an origin's window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) requests: u64,
    pub(crate) accepts: u64,
}

/// An origin's throttle.
pub(crate) struct Core {
    /// Per slot, the requests (low 32 bits) and accepts (high 32 bits) counted in
    /// it: one atomic addition counts a call's request and its accept together. A
    /// slot is a tenth of the window (at most 6 min): 2³² calls in one would take
    /// 12 million calls a second to one origin.
    ring: Ring,
    policy: ThrottlePolicy,
    draws: Draws,
}

/// Where the draws come from: the thread's generator, or a seeded sequence.
enum Draws {
    Thread,
    /// A SplitMix64 sequence: its counter moves by one step a draw, so draws stay
    /// distinct and in order under concurrency without a lock.
    Seeded(AtomicU64),
}

const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

impl Draws {
    /// A number drawn uniformly from `[0, 1)`.
    fn draw(&self) -> f64 {
        match self {
            Draws::Thread => rand::rng().random::<f64>(),
            Draws::Seeded(state) => {
                let mut z = state
                    .fetch_add(GOLDEN, Ordering::Relaxed)
                    .wrapping_add(GOLDEN);
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                z ^= z >> 31;
                // The top 53 bits, as `rand` makes an `f64`.
                (z >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
            }
        }
    }
}

/// Why the throttle shed a call: the window's counts before it, and the
/// probability they gave.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shed {
    pub(crate) counts: Counts,
    pub(crate) probability: f64,
}

impl Core {
    pub(crate) fn new(policy: &ThrottlePolicy) -> Self {
        Core {
            ring: Ring::new(policy.window),
            policy: policy.clone(),
            draws: match policy.seed {
                Some(seed) => Draws::Seeded(AtomicU64::new(seed)),
                None => Draws::Thread,
            },
        }
    }

    /// The requests and accepts of the window at `now`.
    pub(crate) fn counts(&self, now: Instant) -> Counts {
        self.ring.current(now, |_| {});
        self.ring
            .values()
            .fold(Counts::default(), |c, slot| Counts {
                requests: c.requests + (slot & (ACCEPT - 1)),
                accepts: c.accepts + (slot >> 32),
            })
    }

    /// The probability of shedding a call at `now`.
    pub(crate) fn probability(&self, now: Instant) -> f64 {
        let c = self.counts(now);
        self.policy.rejection_probability(c.requests, c.accepts)
    }

    /// Admits a call at `now`, or sheds it. A shed call counts as a request at
    /// once; an admitted one counts when it ends ([`Core::finish`]).
    #[inline]
    pub(crate) fn admit(&self, now: Instant) -> Result<(), Shed> {
        let counts = self.counts(now);
        let probability = self
            .policy
            .rejection_probability(counts.requests, counts.accepts);
        if probability > 0.0 && self.draws.draw() < probability {
            self.ring
                .current(now, |_| {})
                .fetch_add(REQUEST, Ordering::Relaxed);
            return Err(Shed {
                counts,
                probability,
            });
        }
        Ok(())
    }

    /// Counts a call that ended with the answer `res`: a request, and an accept
    /// unless the origin rejected it for overload.
    #[inline]
    pub(crate) fn answered<RB>(&self, res: &Response<RB>) {
        self.count(!is_overloaded(res.status(), res.headers()), Instant::now());
    }

    /// Counts a call that ended with `err`: a request, and an accept unless the
    /// origin rejected it for overload. A call that sent nothing counts neither
    /// way.
    pub(crate) fn failed(&self, err: &Error) {
        if !err.sent_nothing() {
            self.count(!rejected(err.kind()), Instant::now());
        }
    }

    /// Counts a request at `now`, with its accept when `accepted`.
    pub(crate) fn count(&self, accepted: bool, now: Instant) {
        let value = if accepted { REQUEST + ACCEPT } else { REQUEST };
        self.ring
            .current(now, |_| {})
            .fetch_add(value, Ordering::Relaxed);
    }
}

/// Whether an error of `kind` is the origin rejecting the call for overload: it
/// refused the connection or the stream, or did not answer in time.
fn rejected(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::Connect
            | ErrorKind::ConnectTimeout
            | ErrorKind::RefusedStream
            | ErrorKind::Timeout
    )
}

impl Entry for Core {
    fn last_used(&self) -> Instant {
        self.ring.last_used()
    }

    fn keeps_for(&self) -> Duration {
        self.ring.holds_for()
    }
}
