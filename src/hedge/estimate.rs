//! The adaptive hedge delay: a latency percentile per origin over a recent window.
//!
//! Each origin (scheme + authority) has an [`Estimator`]: two log-linear histograms
//! of atomic counters, the window being written and the one before it, rotated
//! every `window`. The percentile is read over both, so a full window is always in
//! view once warmed up. Recording is a few relaxed atomic adds; the percentile is
//! computed every [`RECOMPUTE_EVERY`] samples (or [`RECOMPUTE_AFTER`] of time, or
//! at a rotation) and cached in an atomic, so reading the delay is one load.
//!
//! Estimators are found through the same per-origin registry as the budget
//! accounts and the circuit breakers, which forgets an estimator unused for two
//! windows.

use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::Uri;
use tokio::time::Instant;

use crate::origin::{Entry, Partition, Registry};

/// Linear sub-buckets per power of two: 16, so a bucket is at most 6.25 % wide.
const SUB_BITS: u32 = 4;
const SUB: usize = 1 << SUB_BITS;
/// The largest power of two with its own buckets: 2^27 µs, about 134 s. Longer
/// latencies share the last bucket.
const MAX_EXP: u32 = 27;
const BUCKETS: usize = SUB + (MAX_EXP - SUB_BITS + 1) as usize * SUB;

/// The cached percentile is recomputed after this many samples…
pub(crate) const RECOMPUTE_EVERY: u32 = 16;
/// …or when this much time passed since the last computation.
pub(crate) const RECOMPUTE_AFTER: Duration = Duration::from_millis(100);

/// The histogram bucket of a latency in microseconds.
fn bucket(us: u64) -> usize {
    if us < SUB as u64 {
        return us as usize;
    }
    let exp = 63 - us.leading_zeros();
    if exp > MAX_EXP {
        return BUCKETS - 1;
    }
    let sub = (us >> (exp - SUB_BITS)) as usize & (SUB - 1);
    SUB + (exp - SUB_BITS) as usize * SUB + sub
}

/// The exclusive upper edge of bucket `i`, in microseconds: a latency recorded
/// there had certainly ended by then.
fn upper_edge(i: usize) -> u64 {
    if i < SUB {
        return i as u64 + 1;
    }
    let j = i - SUB;
    let exp = (j / SUB) as u32 + SUB_BITS;
    let sub = (j % SUB) as u64;
    (SUB as u64 + sub + 1) << (exp - SUB_BITS)
}

/// The settings of the adaptive delay.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Adaptive {
    pub(crate) percentile: f64,
    pub(crate) fallback: Duration,
    pub(crate) min_samples: u32,
    pub(crate) window: Duration,
}

struct Window {
    counts: Box<[AtomicU32]>,
    total: AtomicU32,
}

impl Window {
    fn new() -> Self {
        Window {
            counts: (0..BUCKETS).map(|_| AtomicU32::new(0)).collect(),
            total: AtomicU32::new(0),
        }
    }

    fn clear(&self) {
        for c in self.counts.iter() {
            c.store(0, Ordering::Relaxed);
        }
        self.total.store(0, Ordering::Relaxed);
    }
}

/// The latency estimate of one origin.
pub(crate) struct Estimator {
    settings: Adaptive,
    base: Instant,
    windows: [Window; 2],
    /// The window being written is `windows[epoch & 1]`.
    epoch: AtomicU64,
    /// When (µs after `base`) the next rotation is due.
    next_rotation: AtomicU64,
    /// The cached percentile in µs; 0 while there are too few samples.
    cached: AtomicU64,
    since_compute: AtomicU32,
    /// When (µs after `base`) the percentile was last computed.
    computed_at: AtomicU64,
}

impl Estimator {
    pub(crate) fn new(settings: Adaptive) -> Self {
        Estimator {
            settings,
            base: Instant::now(),
            windows: [Window::new(), Window::new()],
            epoch: AtomicU64::new(0),
            next_rotation: AtomicU64::new(micros(settings.window)),
            cached: AtomicU64::new(0),
            since_compute: AtomicU32::new(0),
            computed_at: AtomicU64::new(0),
        }
    }

    fn us_at(&self, at: Instant) -> u64 {
        micros(at.saturating_duration_since(self.base))
    }

    /// Whether no sample came for two windows by `now_us`.
    fn is_stale(&self, now_us: u64) -> bool {
        let stale_at = self
            .next_rotation
            .load(Ordering::Relaxed)
            .saturating_add(micros(self.settings.window));
        now_us >= stale_at
    }

    /// The hedge delay: the cached percentile, or the fallback while there are
    /// too few samples, or when none came for two windows (the next sample
    /// clears them).
    #[cfg(test)]
    fn delay(&self) -> Duration {
        self.delay_at(Instant::now())
    }

    /// [`delay`](Self::delay) at `now`, read by the caller.
    pub(crate) fn delay_at(&self, now: Instant) -> Duration {
        match self.cached.load(Ordering::Relaxed) {
            0 => self.settings.fallback,
            _ if self.is_stale(self.us_at(now)) => self.settings.fallback,
            us => Duration::from_micros(us),
        }
    }

    /// Whether the delay is still the fallback.
    #[cfg(test)]
    fn warming_up(&self) -> bool {
        self.cached.load(Ordering::Relaxed) == 0
    }

    /// Records one latency.
    #[cfg(test)]
    fn record(&self, latency: Duration) {
        self.record_at(latency, Instant::now());
    }

    /// Records one latency that ended at `at`, read by the caller.
    pub(crate) fn record_at(&self, latency: Duration, at: Instant) {
        let now = self.us_at(at);
        let rotated = self.maybe_rotate(now);
        let w = &self.windows[(self.epoch.load(Ordering::Acquire) & 1) as usize];
        w.counts[bucket(micros(latency))].fetch_add(1, Ordering::Relaxed);
        w.total.fetch_add(1, Ordering::Relaxed);
        let n = self.since_compute.fetch_add(1, Ordering::Relaxed) + 1;
        let stale =
            now.saturating_sub(self.computed_at.load(Ordering::Relaxed)) >= micros(RECOMPUTE_AFTER);
        let warming = self.cached.load(Ordering::Relaxed) == 0;
        if rotated || warming || stale || n >= RECOMPUTE_EVERY {
            self.since_compute.store(0, Ordering::Relaxed);
            self.computed_at.store(now, Ordering::Relaxed);
            self.recompute();
        }
    }

    /// Starts a new window when the current one is over; `true` if this call did.
    fn maybe_rotate(&self, now: u64) -> bool {
        let due = self.next_rotation.load(Ordering::Acquire);
        if now < due {
            return false;
        }
        let window = micros(self.settings.window).max(1);
        let late = (now - due) / window;
        let next = due.saturating_add((late + 1).saturating_mul(window));
        if self
            .next_rotation
            .compare_exchange(due, next, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // Another thread rotates.
            return false;
        }
        let epoch = self.epoch.load(Ordering::Acquire);
        let current = (epoch & 1) as usize;
        // The window before the current one becomes the new current one, cleared;
        // after two windows or more without a sample, both are stale.
        self.windows[current ^ 1].clear();
        if late >= 1 {
            self.windows[current].clear();
        }
        self.epoch.store(epoch.wrapping_add(1), Ordering::Release);
        true
    }

    fn recompute(&self) {
        let [a, b] = &self.windows;
        let total =
            u64::from(a.total.load(Ordering::Relaxed)) + u64::from(b.total.load(Ordering::Relaxed));
        if total < u64::from(self.settings.min_samples) || total == 0 {
            self.cached.store(0, Ordering::Relaxed);
            return;
        }
        // The smallest latency that at least `percentile` of the samples did not
        // exceed.
        let rank = ((self.settings.percentile * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0u64;
        let mut edge = upper_edge(BUCKETS - 1);
        for i in 0..BUCKETS {
            seen += u64::from(a.counts[i].load(Ordering::Relaxed))
                + u64::from(b.counts[i].load(Ordering::Relaxed));
            if seen >= rank {
                edge = upper_edge(i);
                break;
            }
        }
        self.cached.store(edge.max(1), Ordering::Relaxed);
    }
}

impl fmt::Debug for Estimator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Estimator")
            .field("delay", &self.delay_at(Instant::now()))
            .finish_non_exhaustive()
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// The estimators of one hedge configuration, one per origin, in the registry the
/// budget and breaker layers use.
pub(crate) struct Estimators {
    settings: Adaptive,
    origins: Registry<Estimator>,
}

impl Estimators {
    pub(crate) fn new(settings: Adaptive) -> Self {
        Estimators {
            settings,
            origins: Registry::new(Partition::origin(), move |_| Estimator::new(settings)),
        }
    }

    /// The settings of the adaptive delay.
    #[cfg(feature = "serde")]
    pub(crate) fn settings(&self) -> Adaptive {
        self.settings
    }

    /// The estimator of `uri`'s origin.
    pub(crate) fn get(&self, uri: &Uri) -> Arc<Estimator> {
        self.origins.for_origin(uri)
    }
}

impl Entry for Estimator {
    /// The end of the window the last sample fell in (every sample rotates the
    /// windows up to its own), or the end of the first window when none came.
    fn last_used(&self) -> Instant {
        self.base + Duration::from_micros(self.next_rotation.load(Ordering::Relaxed))
    }

    /// One window past the last sample's, the estimator is stale: a fresh one
    /// would give the same delay.
    fn keeps_for(&self) -> Duration {
        self.settings.window
    }
}

impl fmt::Debug for Estimators {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Estimators")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Adaptive {
        Adaptive {
            percentile: 0.95,
            fallback: Duration::from_millis(7),
            min_samples: 20,
            window: Duration::from_secs(10),
        }
    }

    #[test]
    fn buckets_are_monotonic_and_narrow() {
        let mut last = 0;
        for us in (0..5_000u64).chain((5_000..1u64 << 30).step_by(9_973)) {
            let i = bucket(us);
            assert!(i >= last, "{us}");
            last = i;
            let edge = upper_edge(i);
            if us < 1 << (MAX_EXP + 1) {
                assert!(edge > us, "{us} -> {i} -> {edge}");
                // At most 1/16 above the value (the bucket's width).
                assert!(edge - us <= us / 16 + 1, "{us} -> {edge}");
            }
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn falls_back_until_enough_samples() {
        let e = Estimator::new(settings());
        for _ in 0..19 {
            e.record(Duration::from_millis(1));
            assert_eq!(e.delay(), Duration::from_millis(7));
        }
        e.record(Duration::from_millis(1));
        assert!(!e.warming_up());
        assert!(e.delay() <= Duration::from_micros(1_063));
    }

    #[test]
    fn percentile_of_known_latencies() {
        let e = Estimator::new(settings());
        // 1..=100 ms: p95 is 95 ms. The cached value may be a few samples old.
        for _ in 0..4 {
            for ms in 1..=100 {
                e.record(Duration::from_millis(ms));
            }
        }
        let d = e.delay();
        assert!(d >= Duration::from_micros(95_000 * 15 / 16), "{d:?}");
        assert!(d <= Duration::from_micros(95_000 * 17 / 16), "{d:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn windows_rotate_and_go_stale() {
        let e = Estimator::new(settings());
        for _ in 0..40 {
            e.record(Duration::from_millis(3));
        }
        assert!(e.delay() < Duration::from_millis(4));
        // One window later the samples are still in view…
        tokio::time::advance(Duration::from_secs(10)).await;
        e.record(Duration::from_millis(3));
        assert!(e.delay() < Duration::from_millis(4));
        // …and a faster origin pulls the percentile down within two windows.
        tokio::time::advance(Duration::from_secs(10)).await;
        for _ in 0..40 {
            e.record(Duration::from_micros(500));
        }
        assert!(e.delay() < Duration::from_micros(600), "{:?}", e.delay());
        // After two idle windows nothing is known: the fallback again, before and
        // after the next sample.
        tokio::time::advance(Duration::from_secs(25)).await;
        assert_eq!(e.delay(), Duration::from_millis(7));
        e.record(Duration::from_millis(1));
        assert_eq!(e.delay(), Duration::from_millis(7));
    }

    #[test]
    fn origins_are_told_apart() {
        let all = Estimators::new(settings());
        let uri = |uri: &str| uri.parse::<Uri>().unwrap();
        let a = all.get(&uri("http://a.test/x"));
        let a2 = all.get(&uri("http://A.test/y?q"));
        let b = all.get(&uri("https://a.test/x"));
        assert!(Arc::ptr_eq(&a, &a2));
        assert!(!Arc::ptr_eq(&a, &b));
    }

    #[tokio::test(start_paused = true)]
    async fn estimators_are_forgotten_two_windows_after_their_last_sample() {
        let all = Estimators::new(settings());
        let uri = |uri: &str| uri.parse::<Uri>().unwrap();
        all.get(&uri("http://a.test/"))
            .record(Duration::from_millis(1));
        drop(all.get(&uri("http://b.test/")));
        tokio::time::advance(Duration::from_secs(15)).await;
        // a.test's sample rotates it into the second window.
        all.get(&uri("http://a.test/"))
            .record(Duration::from_millis(1));
        assert_eq!(all.origins.len(), 2);
        // b.test never had a sample: forgotten once its first window is a window old.
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(all.origins.len(), 1);
        // a.test's last sample fell in the window ending at 20 s: stale at 30 s.
        tokio::time::advance(Duration::from_millis(9_999)).await;
        assert_eq!(all.origins.len(), 1);
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(all.origins.len(), 0);
    }
}
