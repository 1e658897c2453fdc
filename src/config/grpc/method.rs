//! One `methodConfig` entry: the methods it names, and the route policy its
//! `retryPolicy`, `hedgingPolicy` and `timeout` make.

use std::time::Duration;

use super::json::{error, Field, Object};
use crate::config::{ConfigError, Unmapped};
use crate::grpc::{self, Code};
use crate::hedge::HedgePolicy;
use crate::policy::{Backoff, InvalidConfig};
use crate::retry::{RetryPolicy, RoutePolicy};

/// gRPC's own limit on `maxAttempts`, of a retry or a hedging policy: a larger
/// value is read as this one.
pub(super) const MAX_ATTEMPTS: u64 = 5;

/// What a method entry's name covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Name {
    /// `{}`: every method no other entry names.
    Default,
    /// `{"service": "pkg.Service"}`: every method of the service.
    Service(String),
    /// `{"service": "pkg.Service", "method": "Method"}`.
    Method(String, String),
}

impl Name {
    /// The method path (or its prefix) the name covers, as gRPC keys it: `""`,
    /// `/pkg.Service/` or `/pkg.Service/Method`.
    pub(super) fn key(&self) -> String {
        match self {
            Name::Default => String::new(),
            Name::Service(service) => format!("/{service}/"),
            Name::Method(service, method) => format!("/{service}/{method}"),
        }
    }
}

/// One entry of `methodConfig`.
#[derive(Debug)]
pub(super) struct Entry {
    /// Each name with its path in the file.
    pub(super) names: Vec<(Name, String)>,
    pub(super) policy: RoutePolicy,
    /// The hedging policy, when the entry has one.
    pub(super) hedge: Option<HedgePolicy>,
}

/// Fields of a method entry that backstop has no setting for.
const UNMAPPED: &[(&str, &str)] = &[
    (
        "waitForReady",
        "backstop does not wait for a connection to be ready; the transport's connect \
         behaviour applies",
    ),
    (
        "maxRequestMessageBytes",
        "message sizes are the gRPC client's to limit (tonic's `max_encoding_message_size`)",
    ),
    (
        "maxResponseMessageBytes",
        "message sizes are the gRPC client's to limit (tonic's `max_decoding_message_size`)",
    ),
];

/// Reads one `methodConfig` entry.
pub(super) fn entry(field: &Field<'_>, unmapped: &mut Vec<Unmapped>) -> Result<Entry, ConfigError> {
    let mut object = field.object()?;
    let names = match object.take("name")? {
        Some(list) => list
            .list()?
            .iter()
            .map(|name| Ok((self::name(name, unmapped)?, name.path.clone())))
            .collect::<Result<Vec<_>, ConfigError>>()?,
        None => Vec::new(),
    };
    let timeout = object.take("timeout")?.map(|t| t.duration()).transpose()?;
    let retry = object.take("retryPolicy")?;
    let hedging = object.take("hedgingPolicy")?;
    let timeout_path = format!("{}.timeout", object.path());
    let (policy, hedge) = match (retry, hedging) {
        (Some(retry), Some(hedging)) => {
            return Err(error(
                &hedging.path,
                format!(
                    "a method has a retry policy or a hedging policy, not both (`{}` is given too)",
                    last_key(&retry.path)
                ),
            ))
        }
        (Some(retry), None) => {
            let policy = retry_policy(&retry, timeout, &timeout_path, unmapped)?;
            (RoutePolicy::new(policy).no_hedging(), None)
        }
        (None, Some(hedging)) => {
            let (retry, hedge) = hedging_policy(&hedging, timeout, &timeout_path, unmapped)?;
            let policy = RoutePolicy::new(retry)
                .hedge(hedge.clone())
                .map_err(|e| error(&hedging.path, e.to_string()))?;
            (policy, Some(hedge))
        }
        (None, None) => {
            let retry = transparent(timeout).map_err(|e| error(&timeout_path, e.to_string()))?;
            (RoutePolicy::new(retry).no_hedging(), None)
        }
    };
    if names.is_empty() {
        unmapped.push(Unmapped::new(
            field.path.clone(),
            "has no name, so it applies to no method (gRPC skips it)",
        ));
    }
    object.rest(UNMAPPED, unmapped);
    Ok(Entry {
        names,
        policy,
        hedge,
    })
}

/// The last key of a path, for a message that names a sibling field.
fn last_key(path: &str) -> &str {
    path.rsplit('.').next().unwrap_or(path)
}

/// One `{service, method}` name.
fn name(field: &Field<'_>, unmapped: &mut Vec<Unmapped>) -> Result<Name, ConfigError> {
    let mut object = field.object()?;
    let mut part = |key: &str| -> Result<String, ConfigError> {
        let Some(part) = object.take(key)? else {
            return Ok(String::new());
        };
        let text = part.string()?;
        if text.contains('/') || text.trim() != text || text.chars().any(char::is_control) {
            return Err(error(
                &part.path,
                "a service or method name has no `/`, no control character and no space around it",
            ));
        }
        Ok(text.to_owned())
    };
    let service = part("service")?;
    let method = part("method")?;
    object.rest(&[], unmapped);
    Ok(match (service.is_empty(), method.is_empty()) {
        (true, true) => Name::Default,
        (true, false) => {
            return Err(error(
                &field.path,
                "a method needs its service (a name with neither is the default)",
            ))
        }
        (false, true) => Name::Service(service),
        (false, false) => Name::Method(service, method),
    })
}

/// A field the policy cannot do without.
fn required<'a>(object: &mut Object<'a>, key: &str) -> Result<Field<'a>, ConfigError> {
    object
        .take(key)?
        .ok_or_else(|| error(&format!("{}.{key}", object.path()), "is required"))
}

/// `maxAttempts`: at least 2, and at most gRPC's limit of 5 (a larger value is
/// read as 5, as gRPC reads it).
fn max_attempts(object: &mut Object<'_>) -> Result<u32, ConfigError> {
    let n = required(object, "maxAttempts")?.count(2)?;
    Ok(n.min(MAX_ATTEMPTS) as u32)
}

/// A duration that must be more than zero.
fn positive(object: &mut Object<'_>, key: &str) -> Result<Duration, ConfigError> {
    let field = required(object, key)?;
    let d = field.duration()?;
    if d.is_zero() {
        return Err(error(&field.path, "must be more than zero"));
    }
    Ok(d)
}

/// A list of status codes; `required` ones must not be empty.
fn codes(field: Option<Field<'_>>, path: &str, required: bool) -> Result<Vec<Code>, ConfigError> {
    let codes = match field {
        Some(field) => field
            .list()?
            .iter()
            .map(Field::code)
            .collect::<Result<Vec<_>, _>>()?,
        None => Vec::new(),
    };
    if required && codes.is_empty() {
        return Err(error(path, "must list at least one status code"));
    }
    Ok(codes)
}

/// gRPC's rules retrying (or, for a hedge, surviving) `codes`, on every method:
/// the service config declares its methods safe to send again.
fn rules_for(codes: Vec<Code>, path: &str) -> Result<crate::policy::Rules, ConfigError> {
    grpc::rules()
        .retryable_codes(codes)
        .all_idempotent()
        .build()
        .map_err(|e| error(path, e.to_string()))
}

/// `retryPolicy`.
fn retry_policy(
    field: &Field<'_>,
    timeout: Option<Duration>,
    timeout_path: &str,
    unmapped: &mut Vec<Unmapped>,
) -> Result<RetryPolicy, ConfigError> {
    let mut object = field.object()?;
    let attempts = max_attempts(&mut object)?;
    let initial = positive(&mut object, "initialBackoff")?;
    let max = positive(&mut object, "maxBackoff")?;
    let multiplier = required(&mut object, "backoffMultiplier")?;
    let factor = multiplier.number()?;
    if factor <= 0.0 {
        return Err(error(&multiplier.path, "must be more than zero"));
    }
    let codes_path = format!("{}.retryableStatusCodes", object.path());
    let codes = codes(object.take("retryableStatusCodes")?, &codes_path, true)?;
    // gRPC's wait is random(0, min(initial · multiplier^(n−1), max)): full jitter
    // with the multiplier. Backstop's multiplier is from 1 to 10; with the first
    // ceiling at the cap already, every multiplier gives the same waits.
    let within = factor.clamp(1.0, Backoff::MAX_MULTIPLIER);
    if within != factor && initial < max {
        unmapped.push(Unmapped::new(
            multiplier.path.clone(),
            format!("backstop's backoff multiplier is from 1 to 10; {factor} is read as {within}"),
        ));
    }
    object.rest(&[], unmapped);
    let mut builder = RetryPolicy::builder()
        .max_attempts(attempts)
        // gRPC caps each wait at maxBackoff, even the first.
        .backoff(initial.min(max), max)
        .backoff_multiplier(within)
        .rules(rules_for(codes, &codes_path)?);
    if let Some(timeout) = timeout {
        builder = builder.timeout(timeout);
    }
    builder.build().map_err(|e| {
        let path = if e.setting() == "timeout" {
            timeout_path.to_owned()
        } else {
            field.path.clone()
        };
        error(&path, e.to_string())
    })
}

/// `hedgingPolicy`: the hedge policy, and the retry policy of the method that
/// hedges.
///
/// The hedge layer sends copies within one attempt, and ends it when every copy
/// sent has failed, even before the next copy is due; gRPC sends the next copy at
/// once when one fails with a non-fatal code. So the retry policy retries the
/// non-fatal codes at once (no backoff), up to `maxAttempts` attempts, each hedged
/// again. Its rules are the hedge's, on every method: the service config declares
/// a method that hedges safe to send twice, and the hedge layer copies only a call
/// its retry policy finds idempotent.
fn hedging_policy(
    field: &Field<'_>,
    timeout: Option<Duration>,
    timeout_path: &str,
    unmapped: &mut Vec<Unmapped>,
) -> Result<(RetryPolicy, HedgePolicy), ConfigError> {
    let mut object = field.object()?;
    let attempts = max_attempts(&mut object)?;
    let delay = object
        .take("hedgingDelay")?
        .map(|d| d.duration())
        .transpose()?
        .unwrap_or(Duration::ZERO);
    let codes_path = format!("{}.nonFatalStatusCodes", object.path());
    let codes = codes(object.take("nonFatalStatusCodes")?, &codes_path, false)?;
    object.rest(&[], unmapped);
    let rules = rules_for(codes, &codes_path)?;
    let mut retry = RetryPolicy::builder()
        .max_attempts(attempts)
        .backoff(Duration::ZERO, Duration::ZERO)
        .rules(rules.clone());
    if let Some(timeout) = timeout {
        retry = retry.timeout(timeout);
    }
    let retry = retry
        .build()
        .map_err(|e| error(timeout_path, e.to_string()))?;
    let hedge = HedgePolicy::builder()
        .after(delay)
        .max_extra(attempts - 1)
        .rules(rules)
        .build()
        .map_err(|e| error(&field.path, e.to_string()))?;
    Ok((retry, hedge))
}

/// The policy of a method without a retry or hedging policy: no status code is
/// retried, as gRPC retries none, but a call the server never processed (a
/// refused stream, a `GOAWAY`, a failed connect) is sent once more, as gRPC's
/// transparent retry does.
pub(super) fn transparent(timeout: Option<Duration>) -> Result<RetryPolicy, InvalidConfig> {
    let mut builder = RetryPolicy::builder()
        .max_attempts(2)
        .rules(grpc::rules().retryable_codes([]).build()?);
    if let Some(timeout) = timeout {
        builder = builder.timeout(timeout);
    }
    builder.build()
}
