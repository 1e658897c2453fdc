//! Which calls share a budget account or a circuit breaker, and the registry that
//! finds a call's entry.

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use http::request::Parts;
use http::uri::{Authority, Scheme};
use http::{Request, Uri};
use tokio::time::Instant;

type KeyFn = dyn Fn(&Parts) -> String + Send + Sync;

/// Which calls share a retry budget account or a circuit breaker.
///
/// By default every origin (scheme and authority of the request URI) has its own,
/// so one failing upstream neither spends the retries of a healthy one nor gets it
/// refused. Requests whose URI has no authority (a relative URI) share one entry.
///
/// # Examples
///
/// ```
/// use backstop::budget::{Partition, BudgetPolicy};
///
/// // One account for every call the layer sees.
/// let global = BudgetPolicy::builder().partition(Partition::global()).build()?;
///
/// // One account per tenant, named by a header (or the origin when it is missing).
/// let per_tenant = Partition::by_key(|head: &http::request::Parts| {
///     match head.headers.get("x-tenant").and_then(|v| v.to_str().ok()) {
///         Some(tenant) => tenant.to_owned(),
///         None => head.uri.authority().map_or_else(String::new, |a| a.to_string()),
///     }
/// });
/// let budget = BudgetPolicy::builder().partition(per_tenant).build()?;
/// # let _ = (global, budget);
/// # Ok::<(), backstop::policy::InvalidConfig>(())
/// ```
#[derive(Clone, Default)]
pub struct Partition(Kind);

#[derive(Clone, Default)]
enum Kind {
    #[default]
    Origin,
    Global,
    Custom(Arc<KeyFn>),
}

impl Partition {
    /// One entry per origin: the scheme and authority of the request URI (the
    /// default). Host names compare case-insensitively; `example.com` and
    /// `example.com:80` are two origins.
    pub fn origin() -> Self {
        Partition(Kind::Origin)
    }

    /// One entry for every call.
    pub fn global() -> Self {
        Partition(Kind::Global)
    }

    /// One entry per key that `key` returns for the request head.
    ///
    /// The function runs on every call and its key is compared with the previous
    /// call's, so keep it cheap; it must not block. The key names the breaker in
    /// its log events, so it must not carry a credential.
    pub fn by_key<F>(key: F) -> Self
    where
        F: Fn(&Parts) -> String + Send + Sync + 'static,
    {
        Partition(Kind::Custom(Arc::new(key)))
    }
}

impl fmt::Debug for Partition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            Kind::Origin => "Partition::Origin",
            Kind::Global => "Partition::Global",
            Kind::Custom(_) => "Partition::Custom",
        })
    }
}

/// What an entry is found by.
#[derive(Clone, PartialEq, Eq, Hash)]
enum Key {
    Origin(Option<Scheme>, Option<Authority>),
    Custom(String),
}

impl Key {
    /// A name for logs: the scheme, host and port, never user information.
    fn label(&self) -> String {
        match self {
            Key::Origin(scheme, authority) => {
                let mut label = String::new();
                if let Some(scheme) = scheme {
                    label.push_str(scheme.as_str());
                    label.push_str("://");
                }
                match authority {
                    Some(a) => {
                        label.push_str(a.host());
                        if let Some(port) = a.port_u16() {
                            label.push(':');
                            label.push_str(&port.to_string());
                        }
                    }
                    None => label.push_str("(no authority)"),
                }
                label
            }
            Key::Custom(key) => key.clone(),
        }
    }
}

/// An entry that can be forgotten when it holds nothing a fresh one would not.
pub(crate) trait Entry: Send + Sync + 'static {
    /// Whether the entry is in the state a new one would start in.
    fn is_idle(&self, now: Instant) -> bool;
}

/// The last entry a service clone used under a custom key, so that a run of calls
/// with one key finds its entry without touching the shared map. (Origins have the
/// per-thread cache.)
pub(crate) struct Cache<T>(Option<(Key, Arc<T>)>);

impl<T> Cache<T> {
    pub(crate) fn new() -> Self {
        Cache(None)
    }
}

impl<T> Clone for Cache<T> {
    fn clone(&self) -> Self {
        Cache(self.0.clone())
    }
}

impl<T> fmt::Debug for Cache<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "Cache(1)"
        } else {
            "Cache(0)"
        })
    }
}

/// The entries of one layer (and of all its clones).
///
/// The map is only read-locked to find an entry that a service clone's [`Cache`]
/// does not hold, and write-locked to create one; the per-call work on an entry is
/// done on its own atomics.
pub(crate) struct Registry<T> {
    /// Tells this registry's entries apart in the per-thread cache.
    id: usize,
    partition: Partition,
    global: Option<Arc<T>>,
    map: RwLock<Map<T>>,
    /// Creates the entry of a new key, given a label for logs.
    make: Box<dyn Fn(String) -> T + Send + Sync>,
}

struct Map<T> {
    entries: HashMap<Key, Arc<T>>,
    /// Idle entries are pruned when the map reaches this size.
    prune_at: usize,
}

/// Numbers registries for the per-thread cache.
static NEXT_REGISTRY: AtomicUsize = AtomicUsize::new(0);

/// The entries each thread used last, by registry and origin: a call finds its
/// entry without a lock or an allocation even through a service cloned per call.
mod recent {
    use std::any::Any;
    use std::cell::RefCell;
    use std::sync::{Arc, Weak};

    use http::uri::{Authority, Scheme};
    use http::Uri;

    /// How many entries a thread remembers. Every registry shares them (a budget,
    /// a breaker and a hedge estimator each take one per origin), so a full stack
    /// calling ten origins in turn still finds all of its entries here.
    const SLOTS: usize = 32;

    struct Slot {
        registry: usize,
        scheme: Option<Scheme>,
        authority: Option<Authority>,
        entry: Weak<dyn Any + Send + Sync>,
    }

    thread_local! {
        static RECENT: RefCell<(Vec<Slot>, usize)> = const { RefCell::new((Vec::new(), 0)) };
    }

    pub(super) fn find<T: Any + Send + Sync>(registry: usize, uri: &Uri) -> Option<Arc<T>> {
        RECENT.with(|recent| {
            let recent = recent.borrow();
            let slot = recent.0.iter().find(|s| {
                s.registry == registry
                    && s.scheme.as_ref() == uri.scheme()
                    && same_authority(s.authority.as_ref(), uri.authority())
            })?;
            slot.entry.upgrade()?.downcast::<T>().ok()
        })
    }

    /// `Authority`'s own comparison ignores case byte by byte; the same spelling,
    /// which is what a client sends to one origin again and again, is one `memcmp`.
    fn same_authority(kept: Option<&Authority>, uri: Option<&Authority>) -> bool {
        match (kept, uri) {
            (Some(a), Some(b)) => a.as_str() == b.as_str() || a == b,
            (None, None) => true,
            _ => false,
        }
    }

    pub(super) fn remember<T: Any + Send + Sync>(registry: usize, uri: &Uri, entry: &Arc<T>) {
        let erased: Arc<dyn Any + Send + Sync> = entry.clone();
        let slot = Slot {
            registry,
            scheme: uri.scheme().cloned(),
            authority: uri.authority().cloned(),
            entry: Arc::downgrade(&erased),
        };
        RECENT.with(|recent| {
            let (slots, next) = &mut *recent.borrow_mut();
            if slots.len() < SLOTS {
                slots.push(slot);
            } else {
                slots[*next] = slot;
                *next = (*next + 1) % SLOTS;
            }
        });
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

/// The least size at which the map is pruned of idle entries.
const PRUNE_FLOOR: usize = 256;

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
            id: NEXT_REGISTRY.fetch_add(1, Ordering::Relaxed),
            partition,
            global,
            map: RwLock::new(Map {
                entries: HashMap::new(),
                prune_at: PRUNE_FLOOR,
            }),
            make: Box::new(make),
        }
    }

    /// The entry of the call whose head is `head`, created if it is new.
    pub(crate) fn get(&self, head: &Parts, cache: &mut Cache<T>) -> Arc<T> {
        if let Some(global) = &self.global {
            return global.clone();
        }
        let key = match &self.partition.0 {
            // Unreachable: a global registry is built with its entry.
            Kind::Global => Key::Custom(String::new()),
            Kind::Origin => return self.for_origin(&head.uri),
            Kind::Custom(f) => {
                let key = f(head);
                if let Some((Key::Custom(cached), entry)) = &cache.0 {
                    if *cached == key {
                        return entry.clone();
                    }
                }
                Key::Custom(key)
            }
        };
        let entry = self.lookup(key.clone());
        cache.0 = Some((key, entry.clone()));
        entry
    }

    /// The entry of `req`'s call, created if it is new. Only a custom key
    /// reads the head as `Parts`; the request is lent to it field by field, so the
    /// usual partitions neither take the request apart nor move it.
    pub(crate) fn get_for<B>(&self, req: &mut Request<B>, cache: &mut Cache<T>) -> Arc<T> {
        if let Some(global) = &self.global {
            return global.clone();
        }
        if let Kind::Origin = self.partition.0 {
            return self.for_origin(req.uri());
        }
        let (mut head, ()) = Request::new(()).into_parts();
        swap_head(req, &mut head);
        let entry = self.get(&head, cache);
        swap_head(req, &mut head);
        entry
    }

    /// The entry of `uri`'s origin: found in this thread's recent entries without a
    /// lock or an allocation, else in the shared map.
    pub(crate) fn for_origin(&self, uri: &Uri) -> Arc<T> {
        if let Some(entry) = recent::find(self.id, uri) {
            return entry;
        }
        let key = Key::Origin(uri.scheme().cloned(), uri.authority().cloned());
        let entry = self.lookup(key);
        recent::remember(self.id, uri, &entry);
        entry
    }

    fn lookup(&self, key: Key) -> Arc<T> {
        {
            let map = self.map.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(entry) = map.entries.get(&key) {
                return entry.clone();
            }
        }
        let mut map = self.map.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = map.entries.get(&key) {
            return entry.clone();
        }
        if map.entries.len() >= map.prune_at {
            // Forget entries no service clone holds and that hold nothing a fresh
            // one would not, so a client that meets many origins does not grow
            // without bound.
            let now = Instant::now();
            map.entries
                .retain(|_, entry| Arc::strong_count(entry) > 1 || !entry.is_idle(now));
            map.prune_at = PRUNE_FLOOR.max(map.entries.len() * 2);
        }
        let entry = Arc::new((self.make)(key.label()));
        map.entries.insert(key, entry.clone());
        entry
    }

    /// How many entries the registry holds (the global one counts as one).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        if self.global.is_some() {
            return 1;
        }
        self.map
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .entries
            .len()
    }
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
    use super::*;

    struct Counter;
    impl Entry for Counter {
        fn is_idle(&self, _: Instant) -> bool {
            true
        }
    }

    fn head(uri: &str) -> Parts {
        http::Request::get(uri).body(()).unwrap().into_parts().0
    }

    #[test]
    fn origins_get_their_own_entries() {
        let reg = Registry::new(Partition::origin(), |_| Counter);
        let mut cache = Cache::new();
        let a = reg.get(&head("http://a.test/x"), &mut cache);
        let a2 = reg.get(&head("http://A.test/y?q=1"), &mut Cache::new());
        let b = reg.get(&head("http://b.test/x"), &mut cache);
        let https = reg.get(&head("https://a.test/x"), &mut cache);
        assert!(Arc::ptr_eq(&a, &a2));
        assert!(!Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &https));
        assert_eq!(reg.len(), 3);
    }

    #[test]
    fn global_is_one_entry() {
        let reg = Registry::new(Partition::global(), |_| Counter);
        let a = reg.get(&head("http://a.test/"), &mut Cache::new());
        let b = reg.get(&head("http://b.test/"), &mut Cache::new());
        assert!(Arc::ptr_eq(&a, &b));
    }

    #[test]
    fn custom_keys() {
        let reg = Registry::new(
            Partition::by_key(|h: &Parts| h.uri.path().to_owned()),
            |_| Counter,
        );
        let mut cache = Cache::new();
        let a = reg.get(&head("http://a.test/x"), &mut cache);
        let b = reg.get(&head("http://b.test/x"), &mut cache);
        let c = reg.get(&head("http://a.test/y"), &mut cache);
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &c));
    }

    #[test]
    fn labels_carry_no_user_information() {
        let key = Key::Origin(
            Some(Scheme::HTTPS),
            Some(Authority::from_static("user:secret@example.com:8443")),
        );
        assert_eq!(key.label(), "https://example.com:8443");
    }

    #[test]
    fn idle_entries_are_pruned() {
        let reg = Registry::new(Partition::origin(), |_| Counter);
        let held = reg.get(&head("http://held.test/"), &mut Cache::new());
        for i in 0..(PRUNE_FLOOR * 3) {
            let uri = format!("http://h{i}.test/");
            drop(reg.get(&head(&uri), &mut Cache::new()));
        }
        assert!(reg.len() <= PRUNE_FLOOR * 2, "{}", reg.len());
        let again = reg.get(&head("http://held.test/"), &mut Cache::new());
        assert!(Arc::ptr_eq(&held, &again));
    }
}
