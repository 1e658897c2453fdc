//! A fleet store in Redis: two Lua scripts, each one round trip for every key a
//! replica knows, atomic on the server.

use std::fmt;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, RedisError, Script};

use super::store::{
    FleetStore, LeaseReport, PauseReport, StoreError, StoreErrorKind, StoreFuture, Totals,
};
use crate::policy::InvalidConfig;

/// Moves each pause forward, never back; a pause expires when it ends.
/// KEYS: the pause keys. ARGV: now (Unix ms), then each key's new end (0: none).
const PAUSES: &str = r"
local now = tonumber(ARGV[1])
local out = {}
for i, key in ipairs(KEYS) do
  local want = tonumber(ARGV[i + 1])
  local cur = tonumber(redis.call('GET', key) or '0')
  if cur <= now then cur = 0 end
  if want > now and want > cur then
    redis.call('SET', key, want, 'PXAT', want)
    cur = want
  end
  out[i] = cur
end
return out
";

/// Adds each key's counts to the slot of now, notes the replica as live, and
/// sums the window. Counts expire a slot after the window; replicas after their
/// time to live.
/// KEYS: each key's prefix. ARGV: now (Unix ms), replica, replica ttl (ms), then
/// per key: first attempts, spent retries, slot length (ms), slots.
const TOTALS: &str = r"
local now = tonumber(ARGV[1])
local replica = ARGV[2]
local ttl = tonumber(ARGV[3])
local out = {}
for i, base in ipairs(KEYS) do
  local j = 4 + (i - 1) * 4
  local counts = { f = tonumber(ARGV[j]), s = tonumber(ARGV[j + 1]) }
  local slot_ms = tonumber(ARGV[j + 2])
  local slots = tonumber(ARGV[j + 3])
  local slot = math.floor(now / slot_ms)
  for kind, n in pairs(counts) do
    if n > 0 then
      local key = base .. ':' .. kind .. ':' .. string.format('%d', slot)
      redis.call('INCRBY', key, n)
      redis.call('PEXPIRE', key, slot_ms * (slots + 1))
    end
  end
  local live = base .. ':r'
  redis.call('ZADD', live, now, replica)
  redis.call('ZREMRANGEBYSCORE', live, '-inf', now - ttl)
  redis.call('PEXPIRE', live, ttl)
  local f, s = 0, 0
  for k = slot - slots + 1, slot do
    local at = string.format('%d', k)
    f = f + tonumber(redis.call('GET', base .. ':f:' .. at) or '0')
    s = s + tonumber(redis.call('GET', base .. ':s:' .. at) or '0')
  end
  out[i] = { f, s, redis.call('ZCARD', live) }
end
return out
";

/// A [`FleetStore`] in one Redis (version 6.2 or later) that every replica of
/// the fleet reaches.
///
/// Each exchange is one Lua script for every key the replica knows, so updates
/// are atomic on the server and a pause only ever moves forward; every key
/// expires (a pause when it ends, counts a slot after the budget's window,
/// replicas three leases after their last report), so nothing outlives its use.
/// Keys are `<prefix>:{<hash of the partition key>}…`: no URL reaches Redis.
///
/// The connection is made by the fleet's task on its first exchange and
/// reconnects by itself (redis's `ConnectionManager`); a call never waits for it.
/// Not for Redis Cluster: one script touches the keys of every origin.
///
/// Built on the `redis` crate (tokio, connection manager, scripts; no default
/// features): the most used async Redis client for Rust, kept by the Redis
/// project, with reconnection built in.
///
/// # Examples
///
/// ```
/// use backstop::budget::BudgetPolicy;
/// use backstop::fleet::{Fleet, RedisStore};
///
/// let store = RedisStore::new("redis://127.0.0.1:6379/")?.prefix("checkout");
/// let budget = BudgetPolicy::builder().fleet(Fleet::builder(store).build()?).build()?;
/// # let _ = budget;
/// assert!(RedisStore::new("not a url").is_err());
/// # Ok::<(), backstop::policy::InvalidConfig>(())
/// ```
pub struct RedisStore {
    client: Client,
    prefix: String,
    connection: Mutex<Option<ConnectionManager>>,
    pauses: Script,
    totals: Script,
}

impl RedisStore {
    /// A store at `url` (`redis://host:port/db`, `rediss://` with TLS when the
    /// `redis` crate has it, `unix://`); no connection is made yet.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] when the URL cannot be read (the message does not
    /// repeat it: it may hold a password).
    pub fn new(url: &str) -> Result<Self, InvalidConfig> {
        let client = Client::open(url)
            .map_err(|_| InvalidConfig::new("redis_url", "is not a Redis URL".to_owned()))?;
        Ok(RedisStore {
            client,
            prefix: "backstop".to_owned(),
            connection: Mutex::new(None),
            pauses: Script::new(PAUSES),
            totals: Script::new(TOTALS),
        })
    }

    /// The prefix of every key (default `backstop`): fleets that must not share
    /// use different prefixes.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    fn key(&self, key: &str) -> String {
        format!("{}:{{{}}}", self.prefix, key)
    }

    /// The connection, made on first use. Its own timeouts are short; the
    /// fleet's timeout bounds each exchange anyway.
    fn connection(&self) -> Result<ConnectionManager, StoreError> {
        let mut connection = self
            .connection
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(c) = &*connection {
            return Ok(c.clone());
        }
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_millis(200)))
            .set_response_timeout(Some(Duration::from_millis(200)))
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_secs(1));
        let made =
            ConnectionManager::new_lazy_with_config(self.client.clone(), config).map_err(error)?;
        *connection = Some(made.clone());
        Ok(made)
    }
}

/// The kind of a Redis failure; its message is dropped (it may hold values).
fn error(e: RedisError) -> StoreError {
    let kind = if e.is_timeout() {
        StoreErrorKind::Timeout
    } else if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() {
        StoreErrorKind::Unavailable
    } else {
        StoreErrorKind::Protocol
    };
    StoreError::new(kind)
}

impl FleetStore for RedisStore {
    fn pauses<'a>(&'a self, now_ms: u64, pauses: &'a [PauseReport]) -> StoreFuture<'a, Vec<u64>> {
        Box::pin(async move {
            let mut connection = self.connection()?;
            let mut call = self.pauses.prepare_invoke();
            call.arg(now_ms);
            for p in pauses {
                call.key(format!("{}:p", self.key(&p.key))).arg(p.until);
            }
            call.invoke_async(&mut connection).await.map_err(error)
        })
    }

    fn totals<'a>(&'a self, report: &'a LeaseReport) -> StoreFuture<'a, Vec<Totals>> {
        Box::pin(async move {
            let mut connection = self.connection()?;
            let mut call = self.totals.prepare_invoke();
            call.arg(report.now_ms)
                .arg(report.replica)
                .arg(report.replica_ttl_ms);
            for c in &report.counts {
                call.key(self.key(&c.key))
                    .arg(c.firsts)
                    .arg(c.spent)
                    .arg(c.slot_ms.max(1))
                    .arg(c.slots.max(1));
            }
            let sums: Vec<(u64, u64, u64)> =
                call.invoke_async(&mut connection).await.map_err(error)?;
            Ok(sums
                .into_iter()
                .map(|(firsts, spent, replicas)| Totals {
                    firsts,
                    spent,
                    replicas,
                })
                .collect())
        })
    }
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Not the URL: it may hold a password.
        f.debug_struct("RedisStore")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}
