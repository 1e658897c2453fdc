//! The breaker's state machine: one atomic word, moved by compare-and-swap.

use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

use super::CircuitBreakerPolicy;
use crate::origin::{nanos, Entry, Ring};
use crate::policy::circuit::State;
use crate::policy::BreakerGate;

// The layout of the state word:
//
// | bits   | Closed | Open                      | HalfOpen                |
// |--------|--------|---------------------------|-------------------------|
// | 0..2   | 0      | 1                         | 2                       |
// | 2..6   | 0      | failed probes in a row    | failed probes in a row  |
// | 6..24  | generation (wrapping)                                        |
// | 24..64 | 0      | end of cooldown, ms since the breaker's origin | 24..40 probes in flight, 40..56 probes succeeded |
//
// Every transition changes the generation, so an outcome can tell whether the
// state it was admitted in is still the current one.
const KIND_MASK: u64 = 0b11;
const CLOSED: u64 = 0;
const OPEN: u64 = 1;
const HALF_OPEN: u64 = 2;
const LEVEL_SHIFT: u32 = 2;
const LEVEL_MAX: u32 = 15;
const GEN_SHIFT: u32 = 6;
const GEN_MASK: u64 = (1 << 18) - 1;
const PAYLOAD_SHIFT: u32 = 24;
const UNTIL_MAX: u64 = (1 << 40) - 1;
const COUNT_MASK: u64 = 0xFFFF;
const SUCCEEDED_SHIFT: u32 = 40;

#[derive(Clone, Copy, PartialEq, Eq)]
struct Word(u64);

impl Word {
    fn kind(self) -> u64 {
        self.0 & KIND_MASK
    }
    fn level(self) -> u32 {
        ((self.0 >> LEVEL_SHIFT) & 0xF) as u32
    }
    fn gen(self) -> u32 {
        ((self.0 >> GEN_SHIFT) & GEN_MASK) as u32
    }
    fn next_gen(self) -> u32 {
        ((u64::from(self.gen()) + 1) & GEN_MASK) as u32
    }
    fn until_ms(self) -> u64 {
        self.0 >> PAYLOAD_SHIFT
    }
    fn in_flight(self) -> u32 {
        ((self.0 >> PAYLOAD_SHIFT) & COUNT_MASK) as u32
    }
    fn succeeded(self) -> u32 {
        ((self.0 >> SUCCEEDED_SHIFT) & COUNT_MASK) as u32
    }
    fn head(kind: u64, level: u32, gen: u32) -> u64 {
        kind | (u64::from(level.min(LEVEL_MAX)) << LEVEL_SHIFT) | (u64::from(gen) << GEN_SHIFT)
    }
    fn closed(gen: u32) -> Word {
        Word(Word::head(CLOSED, 0, gen))
    }
    fn open(gen: u32, level: u32, until_ms: u64) -> Word {
        Word(Word::head(OPEN, level, gen) | (until_ms.min(UNTIL_MAX) << PAYLOAD_SHIFT))
    }
    fn half_open(gen: u32, level: u32, in_flight: u32, succeeded: u32) -> Word {
        Word(
            Word::head(HALF_OPEN, level, gen)
                | (u64::from(in_flight) << PAYLOAD_SHIFT)
                | (u64::from(succeeded) << SUCCEEDED_SHIFT),
        )
    }
    fn state(self) -> State {
        match self.kind() {
            CLOSED => State::Closed,
            OPEN => State::Open,
            _ => State::HalfOpen,
        }
    }
}

/// What a call was admitted as: the generation of the state that admitted it, and
/// whether it holds a probe slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ticket {
    gen: u32,
    pub(crate) probe: bool,
    /// Admitting this call moved the breaker from open to half-open.
    pub(crate) half_opened: bool,
}

impl Ticket {
    /// The generation of the state that admitted the call.
    #[inline]
    pub(crate) fn gen(self) -> u32 {
        self.gen
    }

    /// The ticket a call admitted in generation `gen` (as a probe or not) holds
    /// once its admission is told.
    #[inline]
    pub(crate) fn held(gen: u32, probe: bool) -> Ticket {
        Ticket {
            gen,
            probe,
            half_opened: false,
        }
    }
}

/// A state change, for the call's observer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Change {
    pub(crate) from: State,
    pub(crate) to: State,
    /// When an open breaker lets the next probe through.
    pub(crate) next_probe_at: Option<Instant>,
}

/// One bit of a window slot counts a failure, the upper half counts a call.
const CALL: u64 = 1 << 32;
const FAILURES_MASK: u64 = CALL - 1;

/// The shared state of one breaker (one origin's, by default).
pub(crate) struct Core {
    pub(crate) config: Arc<CircuitBreakerPolicy>,
    /// A name for logs: scheme, host and port.
    label: String,
    origin: Instant,
    word: AtomicU64,
    /// Failed calls in a row while closed.
    run: AtomicU32,
    /// Calls and failures while closed, per slot.
    window: Ring,
    /// When (ms since the origin, rounded up) a probe was last admitted, recorded
    /// or given back; closed calls are dated by the window, refused ones by the
    /// end of the cooldown.
    probed_ms: AtomicU64,
}

impl Core {
    pub(crate) fn new(config: Arc<CircuitBreakerPolicy>, label: String) -> Self {
        Core {
            window: Ring::new(config.window),
            config,
            label,
            origin: Instant::now(),
            word: AtomicU64::new(Word::closed(0).0),
            run: AtomicU32::new(0),
            probed_ms: AtomicU64::new(0),
        }
    }

    /// Dates a probe's admission, outcome or release.
    fn probed(&self, now: Instant) {
        let ms = self.nanos(now).div_ceil(1_000_000);
        self.probed_ms.fetch_max(ms, Ordering::Relaxed);
    }

    #[inline]
    fn load(&self) -> Word {
        Word(self.word.load(Ordering::Acquire))
    }

    fn cas(&self, current: Word, new: Word) -> Result<(), Word> {
        self.word
            .compare_exchange(current.0, new.0, Ordering::AcqRel, Ordering::Acquire)
            .map(drop)
            .map_err(Word)
    }

    fn nanos(&self, now: Instant) -> u64 {
        nanos(now.saturating_duration_since(self.origin))
    }

    fn instant_of_ms(&self, ms: u64) -> Instant {
        self.origin + Duration::from_millis(ms)
    }

    /// The end of a cooldown starting at `now` after `level` failed probes in a
    /// row, in whole milliseconds since the origin (rounded up, so never early).
    fn cooldown_end(&self, now: Instant, level: u32) -> u64 {
        let base = self.config.cooldown_at(level);
        let jitter = self.config.jitter;
        let cooldown = if jitter > 0.0 {
            base.mul_f64(rand::rng().random_range(1.0 - jitter..=1.0 + jitter))
        } else {
            base
        };
        let end = self.nanos(now).saturating_add(nanos(cooldown));
        end.div_ceil(1_000_000)
    }

    /// The current state (an open breaker whose cooldown is over still reads
    /// `Open` until a call arrives).
    pub(crate) fn state(&self) -> State {
        self.load().state()
    }

    /// When an open breaker will let the next probe through.
    pub(crate) fn next_probe_at(&self) -> Option<Instant> {
        let w = self.load();
        (w.kind() == OPEN).then(|| self.instant_of_ms(w.until_ms()))
    }

    /// Admits a call, or refuses it with the time the next probe is allowed
    /// (`None` when half-open probes are in flight).
    #[inline]
    pub(crate) fn admit(&self) -> Result<Ticket, Option<Instant>> {
        let w = self.load();
        if w.kind() == CLOSED {
            return Ok(Ticket {
                gen: w.gen(),
                probe: false,
                half_opened: false,
            });
        }
        self.admit_not_closed(w)
    }

    /// [`admit`](Core::admit) when the breaker was not closed at first look.
    #[cold]
    fn admit_not_closed(&self, mut w: Word) -> Result<Ticket, Option<Instant>> {
        let mut now = None;
        loop {
            match w.kind() {
                CLOSED => {
                    return Ok(Ticket {
                        gen: w.gen(),
                        probe: false,
                        half_opened: false,
                    })
                }
                OPEN => {
                    let now = *now.get_or_insert_with(Instant::now);
                    let until = w.until_ms();
                    if self.nanos(now) < until.saturating_mul(1_000_000) {
                        return Err(Some(self.instant_of_ms(until)));
                    }
                    // The cooldown is over: this call is the first probe.
                    let gen = w.next_gen();
                    match self.cas(w, Word::half_open(gen, w.level(), 1, 0)) {
                        Ok(()) => {
                            self.probed(now);
                            tracing::info!(origin = %self.label, "circuit half-open");
                            return Ok(Ticket {
                                gen,
                                probe: true,
                                half_opened: true,
                            });
                        }
                        Err(actual) => w = actual,
                    }
                }
                _ => {
                    let (in_flight, succeeded) = (w.in_flight(), w.succeeded());
                    if in_flight + succeeded >= self.config.probes {
                        return Err(None);
                    }
                    let next = Word::half_open(w.gen(), w.level(), in_flight + 1, succeeded);
                    match self.cas(w, next) {
                        Ok(()) => {
                            self.probed(Instant::now());
                            return Ok(Ticket {
                                gen: w.gen(),
                                probe: true,
                                half_opened: false,
                            });
                        }
                        Err(actual) => w = actual,
                    }
                }
            }
        }
    }

    /// The breaker's name for logs: scheme, host and port.
    pub(crate) fn label(&self) -> &str {
        &self.label
    }

    /// The change a call admitted as the first probe made.
    pub(crate) fn state_change_to_half_open(&self) -> Change {
        Change {
            from: State::Open,
            to: State::HalfOpen,
            next_probe_at: None,
        }
    }

    /// Records the final outcome of an admitted call; the state change it made,
    /// if any.
    #[inline]
    pub(crate) fn record(&self, ticket: Ticket, failed: bool) -> Option<Change> {
        if ticket.probe {
            self.record_probe(ticket.gen, failed)
        } else if failed {
            self.record_closed_failure(ticket.gen)
        } else {
            self.record_closed_success(ticket.gen);
            None
        }
    }

    /// A success while closed: counted in the window, and the run of failures
    /// ends. It changes no state.
    #[inline]
    fn record_closed_success(&self, gen: u32) {
        let w = self.load();
        if w.kind() != CLOSED || w.gen() != gen {
            // The breaker opened since the call was admitted: its outcome is old news.
            return;
        }
        let slot = self.window.current(Instant::now(), drop);
        slot.fetch_add(CALL, Ordering::Relaxed);
        if self.run.load(Ordering::Relaxed) != 0 {
            self.run.store(0, Ordering::Relaxed);
        }
    }

    /// A failure while closed: counted in the window, and the breaker opens if the
    /// run of failures or the window's ratio says so.
    #[cold]
    fn record_closed_failure(&self, gen: u32) -> Option<Change> {
        let w = self.load();
        if w.kind() != CLOSED || w.gen() != gen {
            // The breaker opened since the call was admitted: its outcome is old news.
            return None;
        }
        let now = Instant::now();
        let slot = self.window.current(now, drop);
        slot.fetch_add(CALL | 1, Ordering::Relaxed);
        let run = self.run.fetch_add(1, Ordering::Relaxed).saturating_add(1);
        let config = &*self.config;
        let mut trip = config.consecutive_failures != 0 && run >= config.consecutive_failures;
        if !trip {
            let (calls, failures) = self.window.values().fold((0u64, 0u64), |(c, f), v| {
                (c + (v >> 32), f + (v & FAILURES_MASK))
            });
            trip = calls >= u64::from(config.min_calls)
                && failures.saturating_mul(1_000_000) >= config.ratio_ppm.saturating_mul(calls);
        }
        if trip {
            let until = self.cooldown_end(now, 0);
            if self.cas(w, Word::open(w.next_gen(), 0, until)).is_ok() {
                tracing::info!(
                    origin = %self.label,
                    cooldown_ms = until.saturating_sub(self.nanos(now) / 1_000_000),
                    "circuit opened"
                );
                return Some(Change {
                    from: State::Closed,
                    to: State::Open,
                    next_probe_at: Some(self.instant_of_ms(until)),
                });
            }
        }
        None
    }

    fn record_probe(&self, gen: u32, failed: bool) -> Option<Change> {
        let mut w = self.load();
        let now = Instant::now();
        self.probed(now);
        let mut until = None;
        loop {
            if w.kind() != HALF_OPEN || w.gen() != gen || w.in_flight() == 0 {
                return None;
            }
            let next = if failed {
                let level = (w.level() + 1).min(LEVEL_MAX);
                let until = *until.get_or_insert_with(|| self.cooldown_end(now, level));
                Word::open(w.next_gen(), level, until)
            } else if w.succeeded() + 1 >= self.config.probes {
                Word::closed(w.next_gen())
            } else {
                Word::half_open(gen, w.level(), w.in_flight() - 1, w.succeeded() + 1)
            };
            match self.cas(w, next) {
                Ok(()) => {
                    match next.kind() {
                        OPEN => tracing::info!(
                            origin = %self.label,
                            failed_probes = next.level(),
                            "circuit opened again: a probe failed"
                        ),
                        CLOSED => {
                            // A fresh start: what was counted before the breaker
                            // opened says nothing about the recovered upstream.
                            self.window.clear();
                            self.run.store(0, Ordering::Relaxed);
                            tracing::info!(origin = %self.label, "circuit closed");
                        }
                        _ => return None,
                    }
                    return Some(Change {
                        from: State::HalfOpen,
                        to: next.state(),
                        next_probe_at: (next.kind() == OPEN)
                            .then(|| self.instant_of_ms(next.until_ms())),
                    });
                }
                Err(actual) => w = actual,
            }
        }
    }

    /// Gives back the probe slot of a call dropped before its outcome.
    pub(crate) fn release(&self, ticket: Ticket) {
        if !ticket.probe {
            return;
        }
        self.probed(Instant::now());
        let mut w = self.load();
        loop {
            if w.kind() != HALF_OPEN || w.gen() != ticket.gen || w.in_flight() == 0 {
                return;
            }
            let next = Word::half_open(w.gen(), w.level(), w.in_flight() - 1, w.succeeded());
            match self.cas(w, next) {
                Ok(()) => return,
                Err(actual) => w = actual,
            }
        }
    }
}

impl BreakerGate for Core {
    /// Retries flow only while the breaker is closed: a half-open breaker's probe
    /// is one test of the upstream, not a sequence of attempts.
    fn allows_retry(&self) -> bool {
        self.load().kind() == CLOSED
    }
}

impl Entry for Core {
    /// The latest of: the last outcome counted while closed, the end of the
    /// cooldown while open (a call after it would have become a probe and changed
    /// the state), and the last probe's admission, outcome or release.
    fn last_used(&self) -> Instant {
        let w = self.load();
        let mut ms = self.probed_ms.load(Ordering::Relaxed);
        if w.kind() == OPEN {
            ms = ms.max(w.until_ms());
        }
        self.instant_of_ms(ms).max(self.window.last_used())
    }

    /// A closed breaker whose last call did not fail (or that does not count
    /// failures in a row) knows only its window's counts, gone once the window has
    /// passed since its last use: a fresh breaker would decide the same. A run of
    /// failures, and an open breaker's failed probes (they lengthen its next
    /// cooldown up to the longest), are kept for the window or the longest
    /// cooldown, whichever is longer. Past both, whatever failed last no longer
    /// says anything about the upstream, and a fresh breaker starts closed.
    fn keeps_for(&self) -> Duration {
        let counts_only = self.load().kind() == CLOSED
            && (self.config.consecutive_failures == 0 || self.run.load(Ordering::Relaxed) == 0);
        if counts_only {
            return self.window.holds_for();
        }
        self.config.window.max(self.config.max_cooldown)
    }
}

impl fmt::Debug for Core {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Breaker")
            .field("origin", &self.label)
            .field("state", &self.state())
            .finish()
    }
}

#[cfg(test)]
mod tests;
