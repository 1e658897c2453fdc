//! The registry that finds a call's entry, and forgets entries nobody uses.

use std::collections::HashMap;
use std::fmt;
use std::hash::BuildHasherDefault;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use http::request::Parts;
use http::{Request, Uri};
use tokio::time::Instant;

use super::partition::{Hasher, Key, KeyFn, KeyRef, Kind};
use super::Partition;

/// What a registry keeps per key: a budget account, a breaker, a latency
/// estimator.
pub(crate) trait Entry: Send + Sync + 'static {
    /// When the entry was last used, as far as its own state tells (it may round
    /// up, never down).
    fn last_used(&self) -> Instant;

    /// How long after its last use the entry can still matter: once that long
    /// has passed, a fresh entry would serve the next call as well.
    fn keeps_for(&self) -> Duration;

    /// Whether something outside the registry still holds the entry (a call in
    /// flight), so it is kept however long it went unused. An entry that lends out
    /// parts of itself says whether those are held.
    fn in_use(this: &Arc<Self>) -> bool {
        Arc::strong_count(this) > 1
    }
}

/// The entries of one layer (and of all its clones), found by the call's key.
///
/// There is one lookup: the key is hashed (without allocating), the map is
/// read-locked, and the entries of that hash are compared with the call's key.
/// Only a new key takes the write lock. The per-call work on an entry is done on
/// its own atomics. Nothing caches entries in front of the map: callers commonly
/// clone the service for each call (`svc.clone().oneshot(req)`, as the benchmarks
/// do), and a cache kept in a service clone would then start empty every time.
///
/// Entries are forgotten once they have gone unused for longer than they keep
/// for ([`Entry`]) and nothing outside the registry holds them (a call in flight
/// holds its entry). The map is swept under the write lock it takes anyway to
/// insert, whenever it has doubled since the last sweep, and whenever it is
/// counted ([`len`](Registry::len)).
pub(crate) struct Registry<T> {
    partition: Partition,
    /// The one entry of a global partition.
    global: Option<Arc<T>>,
    hasher: Hasher,
    map: RwLock<Map<T>>,
    /// Creates the entry of a new key, given a label for logs.
    make: Box<dyn Fn(String) -> T + Send + Sync>,
}

struct Map<T> {
    /// The entries by the hash of their key; more than one only when two keys
    /// share a hash.
    entries: HashMap<u64, Vec<Slot<T>>, BuildHasherDefault<Prehashed>>,
    /// How many entries the map holds.
    len: usize,
    /// The map is swept when it reaches this many entries.
    sweep_at: usize,
}

struct Slot<T> {
    key: Key,
    entry: Arc<T>,
}

/// The map's hasher: its keys are hashes already.
#[derive(Default)]
struct Prehashed(u64);

impl std::hash::Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `u64` keys are hashed; this is not reached.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, hash: u64) {
        self.0 = hash;
    }
}

/// The least size at which the map is swept on insert.
const SWEEP_FLOOR: usize = 256;

impl<T: Entry> Registry<T> {
    /// A registry; `make` creates the entry of a new key, given a label for logs.
    pub(crate) fn new(
        partition: Partition,
        make: impl Fn(String) -> T + Send + Sync + 'static,
    ) -> Self {
        let global = match partition.0 {
            Kind::Global => Some(Arc::new(make("global".to_owned()))),
            _ => None,
        };
        Registry {
            partition,
            global,
            hasher: Hasher::new(),
            map: RwLock::new(Map {
                entries: HashMap::default(),
                len: 0,
                sweep_at: SWEEP_FLOOR,
            }),
            make: Box::new(make),
        }
    }

    /// The entry of the call whose head is `head`, created if it is new.
    pub(crate) fn get(&self, head: &Parts) -> Arc<T> {
        self.visit_head(head, Arc::clone)
    }

    /// Lends `visit` the entry of `req`'s call (created if it is new) and returns
    /// what it returns: a caller that takes only parts of the entry clones no
    /// reference to the entry itself.
    #[inline(always)]
    pub(crate) fn visit_for<B, R>(
        &self,
        req: &mut Request<B>,
        visit: impl FnOnce(&Arc<T>) -> R,
    ) -> R {
        self.visit_head(req, visit)
    }

    /// The entry of `uri`'s origin, created if it is new.
    #[inline]
    pub(crate) fn for_origin(&self, uri: &Uri) -> Arc<T> {
        self.visit(KeyRef::origin(uri), Arc::clone)
    }

    /// Lends `visit` the entry of the call whose head `head` gives.
    #[inline(always)]
    fn visit_head<R>(&self, mut head: impl HeadOf, visit: impl FnOnce(&Arc<T>) -> R) -> R {
        match &self.partition.0 {
            Kind::Origin => self.visit(KeyRef::origin(head.uri()), visit),
            Kind::Global => match &self.global {
                Some(entry) => visit(entry),
                // A global registry is built with its entry; this is not reached.
                None => self.visit(KeyRef::Custom(""), visit),
            },
            Kind::Custom(key) => {
                let key = head.key(&**key);
                self.visit(KeyRef::Custom(&key), visit)
            }
        }
    }

    /// Lends `visit` the entry of `key`, under the read lock when it is there.
    #[inline]
    fn visit<R>(&self, key: KeyRef<'_>, visit: impl FnOnce(&Arc<T>) -> R) -> R {
        let hash = self.hasher.hash(key);
        {
            let map = self.map.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(entry) = map.find(hash, key) {
                return visit(entry);
            }
        }
        visit(&self.insert(hash, key))
    }

    /// Creates the entry of a new key (unless another call just did), after
    /// sweeping the map if it has doubled.
    #[cold]
    #[inline(never)]
    fn insert(&self, hash: u64, key: KeyRef<'_>) -> Arc<T> {
        let mut map = self.map.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = map.find(hash, key) {
            return entry.clone();
        }
        if map.len >= map.sweep_at {
            map.sweep(Instant::now());
            map.sweep_at = SWEEP_FLOOR.max(map.len * 2);
        }
        let entry = Arc::new((self.make)(key.label()));
        map.entries.entry(hash).or_default().push(Slot {
            key: key.to_key(),
            entry: entry.clone(),
        });
        map.len += 1;
        entry
    }

    /// How many entries the registry holds, after forgetting the idle ones (a
    /// global registry holds one).
    pub(crate) fn len(&self) -> usize {
        if self.global.is_some() {
            return 1;
        }
        let mut map = self.map.write().unwrap_or_else(PoisonError::into_inner);
        map.sweep(Instant::now());
        map.len
    }
}

impl<T: Entry> Map<T> {
    #[inline]
    fn find(&self, hash: u64, key: KeyRef<'_>) -> Option<&Arc<T>> {
        let slots = self.entries.get(&hash)?;
        slots.iter().find(|s| key.is(&s.key)).map(|s| &s.entry)
    }

    /// Forgets the entries that nothing outside the map holds and that have gone
    /// unused for longer than they keep for.
    fn sweep(&mut self, now: Instant) {
        let mut len = 0;
        self.entries.retain(|_, slots| {
            slots.retain(|s| {
                T::in_use(&s.entry)
                    || now.saturating_duration_since(s.entry.last_used()) < s.entry.keeps_for()
            });
            len += slots.len();
            !slots.is_empty()
        });
        self.len = len;
        if self.entries.capacity() > 2 * self.entries.len().max(SWEEP_FLOOR) {
            self.entries.shrink_to(self.entries.len() * 2);
        }
    }
}

/// What a call's entry is found by: a request head, or a request.
trait HeadOf {
    fn uri(&self) -> &Uri;

    /// The call's custom key.
    fn key(&mut self, key: &KeyFn) -> String;
}

impl HeadOf for &Parts {
    fn uri(&self) -> &Uri {
        &self.uri
    }

    fn key(&mut self, key: &KeyFn) -> String {
        key(self)
    }
}

/// Only a custom key reads the head as `Parts`; the request is lent to it field by
/// field, so the usual partitions neither take the request apart nor move it.
impl<B> HeadOf for &mut Request<B> {
    fn uri(&self) -> &Uri {
        Request::uri(self)
    }

    fn key(&mut self, key: &KeyFn) -> String {
        let (mut head, ()) = Request::new(()).into_parts();
        swap_head(self, &mut head);
        let key = key(&head);
        swap_head(self, &mut head);
        key
    }
}

/// Exchanges a request's head with `head`.
fn swap_head<B>(req: &mut Request<B>, head: &mut Parts) {
    std::mem::swap(req.method_mut(), &mut head.method);
    std::mem::swap(req.uri_mut(), &mut head.uri);
    std::mem::swap(req.version_mut(), &mut head.version);
    std::mem::swap(req.headers_mut(), &mut head.headers);
    std::mem::swap(req.extensions_mut(), &mut head.extensions);
}

impl<T> fmt::Debug for Registry<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("partition", &self.partition)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    /// An entry used when it is made and whenever [`touch`](Counter::touch) says.
    struct Counter {
        origin: Instant,
        used_ms: AtomicU64,
    }

    impl Counter {
        fn new() -> Self {
            Counter {
                origin: Instant::now(),
                used_ms: AtomicU64::new(0),
            }
        }

        fn touch(&self) {
            let ms = Instant::now().duration_since(self.origin).as_millis() as u64;
            self.used_ms.store(ms, Ordering::Relaxed);
        }
    }

    impl Entry for Counter {
        fn last_used(&self) -> Instant {
            self.origin + Duration::from_millis(self.used_ms.load(Ordering::Relaxed))
        }

        fn keeps_for(&self) -> Duration {
            Duration::from_secs(10)
        }
    }

    fn head(uri: &str) -> Parts {
        http::Request::get(uri).body(()).unwrap().into_parts().0
    }

    fn registry(partition: Partition) -> Registry<Counter> {
        Registry::new(partition, |_| Counter::new())
    }

    #[test]
    fn origins_get_their_own_entries() {
        let reg = registry(Partition::origin());
        let a = reg.get(&head("http://a.test/x"));
        let a2 = reg.get(&head("http://A.test/y?q=1"));
        let b = reg.get(&head("http://b.test/x"));
        let https = reg.get(&head("https://a.test/x"));
        let relative = reg.get(&head("/x"));
        assert!(Arc::ptr_eq(&a, &a2));
        assert!(!Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &https));
        assert!(Arc::ptr_eq(&relative, &reg.get(&head("/y"))));
        assert_eq!(reg.len(), 4);
    }

    #[test]
    fn global_is_one_entry() {
        let reg = registry(Partition::global());
        let a = reg.get(&head("http://a.test/"));
        let b = reg.get(&head("http://b.test/"));
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(reg.len(), 1);
    }

    #[test]
    fn custom_keys() {
        let reg = registry(Partition::by_key(|h: &Parts| h.uri.path().to_owned()));
        let a = reg.get(&head("http://a.test/x"));
        let b = reg.get(&head("http://b.test/x"));
        let c = reg.get(&head("http://a.test/y"));
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &c));
        let mut req = http::Request::get("http://c.test/x").body(()).unwrap();
        assert!(Arc::ptr_eq(&a, &reg.visit_for(&mut req, Arc::clone)));
        assert_eq!(
            req.uri(),
            "http://c.test/x",
            "the request is given back whole"
        );
    }

    #[test]
    fn keys_that_share_a_hash_are_told_apart() {
        let reg = registry(Partition::origin());
        let a = reg.get(&head("http://a.test/"));
        // Put b under a's hash, as a collision would.
        let a_hash = reg
            .hasher
            .hash(KeyRef::origin(&"http://a.test/".parse().unwrap()));
        let b_uri: Uri = "http://b.test/".parse().unwrap();
        let b = Arc::new(Counter::new());
        {
            let mut map = reg.map.write().unwrap();
            map.entries.get_mut(&a_hash).unwrap().push(Slot {
                key: KeyRef::origin(&b_uri).to_key(),
                entry: b.clone(),
            });
            map.len += 1;
        }
        assert!(Arc::ptr_eq(&a, &reg.get(&head("http://A.TEST/"))));
        assert!(!Arc::ptr_eq(&b, &reg.get(&head("http://b.test/"))));
        let mut map = reg.map.write().unwrap();
        let b_found = map.find(a_hash, KeyRef::origin(&b_uri)).unwrap();
        assert!(Arc::ptr_eq(&b, b_found));
        map.sweep(Instant::now());
        assert_eq!(map.len, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn entries_unused_for_their_time_are_forgotten() {
        let reg = registry(Partition::origin());
        let held = reg.get(&head("http://held.test/"));
        let used = reg.get(&head("http://used.test/"));
        drop(reg.get(&head("http://idle.test/")));
        tokio::time::advance(Duration::from_secs(6)).await;
        used.touch();
        drop(used);
        tokio::time::advance(Duration::from_secs(4)).await;
        // idle.test was last used 10 s ago; used.test 4 s ago; held.test is held.
        assert_eq!(reg.len(), 2);
        tokio::time::advance(Duration::from_secs(6)).await;
        assert_eq!(reg.len(), 1);
        assert!(Arc::ptr_eq(&held, &reg.get(&head("http://held.test/"))));
        // Once let go, held.test counts from its last use (when it was made).
        drop(held);
        assert_eq!(reg.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn inserts_sweep_when_the_map_doubles() {
        let reg = registry(Partition::origin());
        for i in 0..SWEEP_FLOOR {
            drop(reg.get(&head(&format!("http://h{i}.test/"))));
        }
        tokio::time::advance(Duration::from_secs(10)).await;
        // The next new origin finds a full map of idle entries and sweeps it.
        drop(reg.get(&head("http://new.test/")));
        {
            let map = reg.map.read().unwrap();
            assert_eq!((map.len, map.sweep_at), (1, SWEEP_FLOOR));
        }
        // Live entries are kept, and the next sweep waits until the map doubles.
        for i in 0..(SWEEP_FLOOR * 2) {
            drop(reg.get(&head(&format!("http://l{i}.test/"))));
        }
        let map = reg.map.read().unwrap();
        assert_eq!(map.len, SWEEP_FLOOR * 2 + 1);
        assert_eq!(map.sweep_at, SWEEP_FLOOR * 4);
    }
}
