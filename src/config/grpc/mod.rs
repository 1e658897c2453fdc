//! gRPC's service config, read into a [`StackConfig`] (features `json` and
//! `grpc`).
//!
//! A gRPC client is configured with a *service config*: JSON that says, per
//! method, how calls are retried or hedged and how long they may take (gRPC's
//! retry design, A6). [`from_json`] reads one, as gRPC's clients read it, into
//! backstop's routes and policies, and returns every field it could not map
//! beside them ([`Imported`]): call [`strict`](Imported::strict) to refuse a file
//! with any, or read them with [`unmapped`](Imported::unmapped).
//!
//! (Backstop's own format, in JSON, is read by [`config::from_json`](super::from_json).)
//!
//! Where gRPC would quietly ignore a policy it finds illegal (and the client would
//! never retry), the file is refused with an error that names the field.
//!
//! # The mapping
//!
//! | service config | backstop | exact? |
//! |---|---|---|
//! | `methodConfig[].name[]` `{service, method}` | a route [`Route::path_exact`]`("/service/method")`, named `service/method` | yes |
//! | `name[]` `{service}` | a route [`Route::path_prefix`]`("/service")`, named `service`, tried after every method's route | yes: the most specific name wins, as in gRPC |
//! | `name[]` `{}` (or an empty `service`) | the routes' [default](Routes::new) | yes |
//! | no default entry | the default retries no status code; a call the server never processed (refused stream, `GOAWAY`, failed connect) is sent once more | gRPC's transparent retry, approximately |
//! | `retryPolicy.maxAttempts` | [`RetryPolicyBuilder::max_attempts`]; at least 2, and a value over 5 is read as 5, as gRPC reads it | yes |
//! | `initialBackoff`, `maxBackoff` | [`RetryPolicyBuilder::backoff`]`(initial, max)`: full jitter, as gRPC's `random(0, min(initial · multiplier^(n−1), max))` | yes |
//! | `backoffMultiplier` | [`RetryPolicyBuilder::backoff_multiplier`]; one below 1 or above 10 (outside backstop's range) is read as 1 or 10 and reported unmapped, unless `initialBackoff` ≥ `maxBackoff`, where every multiplier gives the same waits | from 1 to 10 |
//! | `retryableStatusCodes` | [`grpc::rules()`](crate::grpc::rules)[`.retryable_codes(…)`](crate::grpc::GrpcRulesBuilder::retryable_codes)[`.all_idempotent()`](crate::grpc::GrpcRulesBuilder::all_idempotent): the service config declares its methods safe to send again | yes |
//! | `hedgingPolicy` | the route's own [`HedgePolicy`] ([`RoutePolicy::hedge`]): `maxAttempts − 1` extra copies ([`max_extra`](crate::hedge::HedgePolicyBuilder::max_extra), 5 at most as in gRPC), each `hedgingDelay` (default 0) after the one before ([`after`](crate::hedge::HedgePolicyBuilder::after)) | see below |
//! | `hedgingPolicy.nonFatalStatusCodes` | the codes that leave the other copies running (the hedge's rules' retryable codes), and that the route retries at once when every copy sent has failed; any other code ends the call | see below |
//! | `timeout` | [`RetryPolicyBuilder::timeout`]: the whole call's, every attempt and wait included | yes |
//! | `retryThrottling {maxTokens, tokenRatio}` | [`StackConfig::budget`]: a [`BudgetPolicy`] with [`ratio`](crate::budget::BudgetPolicyBuilder::ratio) `tokenRatio` and a floor of `maxTokens / 2` retries per 10 s window ([`min_per_second`](crate::budget::BudgetPolicyBuilder::min_per_second) `maxTokens / 20`) | approximately, see below |
//! | no `retryThrottling` | backstop's default budget stays (gRPC would not throttle): set [`StackConfig::budget`] to `None` for none | no |
//! | `waitForReady`, `maxRequestMessageBytes`, `maxResponseMessageBytes`, `loadBalancingConfig`, `loadBalancingPolicy`, `healthCheckConfig`, unknown fields, an entry without a name | [`Unmapped`], with its path | — |
//!
//! Where it is approximate:
//!
//! - **Hedging**: backstop's hedge layer sends copies within one attempt and
//!   ends it once every copy sent has failed, where gRPC sends the next copy at
//!   once on a non-fatal code. So a method that hedges also retries its non-fatal
//!   codes, at once, up to `maxAttempts` attempts, each hedged again: a copy that
//!   fails fast is followed by another at once, as in gRPC, but each attempt
//!   starts its own `hedgingDelay`, so an attempt answered later than that (after
//!   a fast failure too) is copied again, and sends can add up to more than
//!   `maxAttempts` (each paid from the budget; at most `maxAttempts` squared). A
//!   fatal code ends the call, as in gRPC. The method is taken as idempotent (its
//!   service config declares it safe to send twice). Every route
//!   (and the default) chooses its own hedging, so [`StackConfig::hedge`] is set,
//!   to the first entry's hedging policy, only to give the stack the hedge layer
//!   its routes need: give it to
//!   [`BackstopBuilder::hedge`](crate::stack::BackstopBuilder::hedge).
//! - **Throttling**: gRPC keeps one token bucket per channel that failures
//!   empty and successes refill by `tokenRatio`, and stops retrying below half of
//!   `maxTokens`; backstop counts per origin over a 10 s window, allowing
//!   `tokenRatio` retries per first attempt plus the floor. Both let about
//!   `tokenRatio` retries per call through and cut them off in an outage; the
//!   bucket remembers an outage until successes refill it, the window forgets it
//!   within 10 s.
//! - **Retry decisions** are backstop's: a pushback (`grpc-retry-pushback-ms`)
//!   is honoured as gRPC's is, and every attempt's `grpc-timeout` is cut to the
//!   time left (see [`grpc`](crate::grpc)).
//!
//! Keys are read as gRPC reads them: without regard to case, `_` or `-`
//! (`methodConfig`, `MethodConfig`, `method_config`). Durations are proto-JSON's
//! (`"0.1s"`, `".01s"`, `"1.000340012s"`). Status codes are names (`"UNAVAILABLE"`,
//! any case) or numbers (`14`).
//!
//! # Examples
//!
//! ```
//! use backstop::config::grpc;
//! use http::Request;
//!
//! let imported = grpc::from_json(r#"{
//!   "methodConfig": [{
//!     "name": [{"service": "grpc.examples.echo.Echo"}],
//!     "waitForReady": true,
//!     "retryPolicy": {
//!       "MaxAttempts": 4,
//!       "InitialBackoff": ".01s",
//!       "MaxBackoff": ".01s",
//!       "BackoffMultiplier": 1.0,
//!       "RetryableStatusCodes": ["UNAVAILABLE"]
//!     }
//!   }]
//! }"#)?;
//! // backstop has no `waitForReady`: it is reported, with its path.
//! assert_eq!(imported.unmapped()[0].path(), "methodConfig[0].waitForReady");
//! assert!(imported.clone().strict().is_err());
//!
//! let config = imported.lenient();
//! let call = Request::post("http://echo.test/grpc.examples.echo.Echo/UnaryEcho")
//!     .body(())
//!     .unwrap();
//! assert_eq!(config.routes.policy_for(&call).max_attempts(), 4);
//! let layer = config.builder().build()?;
//! # let _ = layer;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashMap;

use http::{HeaderMap, HeaderValue, Method, StatusCode};
use serde_json::Value;

#[cfg(doc)]
use super::MAX_FILE;
use super::{ConfigError, Imported, StackConfig, Unmapped};
use crate::admit::budget::BudgetPolicy;
use crate::grpc::Code;
use crate::hedge::HedgePolicy;
use crate::policy::{classify, Classification, Outcome, RequestFacts, Rules};
#[cfg(doc)]
use crate::retry::{RetryPolicy, RetryPolicyBuilder};
use crate::retry::{Route, RoutePolicy, Routes};

mod json;
mod method;

use json::{error, Field};
use method::{Entry, Name};

/// The budget's window, over which `maxTokens / 2` is the floor of retries.
const WINDOW: std::time::Duration = std::time::Duration::from_secs(10);

/// Top-level fields backstop has no setting for.
const UNMAPPED: &[(&str, &str)] = &[
    (
        "loadBalancingConfig",
        "load balancing is the gRPC channel's, not backstop's",
    ),
    (
        "loadBalancingPolicy",
        "load balancing is the gRPC channel's, not backstop's",
    ),
    (
        "healthCheckConfig",
        "health checking is the gRPC channel's, not backstop's",
    ),
];

/// Reads a gRPC service config (JSON) into a [`StackConfig`], with the fields
/// it could not map. See the [module docs](self) for the mapping.
///
/// The unmapped fields come in the document's order, each object's keys in
/// alphabetical order; the text is read whole (at most [`MAX_FILE`] bytes).
///
/// # Errors
///
/// A [`ConfigError`] in one line that names the field's path and shows nothing of
/// the file but field names: a text over [`MAX_FILE`], malformed JSON (with its
/// line and column), a value of the wrong type, a policy gRPC calls illegal (a
/// `maxAttempts` under 2, a zero or missing backoff, no retryable code), an
/// unknown status code or `OK` among the retryable ones, a method with both a
/// retry and a hedging policy, a name given twice, a value out of backstop's
/// range (a `timeout` over one day).
///
/// # Examples
///
/// ```
/// use backstop::config::grpc;
///
/// let err = grpc::from_json(r#"{"methodConfig": [{"name": [{"service": "a.B"}],
///     "retryPolicy": {"maxAttempts": 1, "initialBackoff": "0.1s",
///     "maxBackoff": "1s", "backoffMultiplier": 2,
///     "retryableStatusCodes": ["UNAVAILABLE"]}}]}"#).unwrap_err();
/// assert_eq!(err.path(), "methodConfig[0].retryPolicy.maxAttempts");
/// ```
pub fn from_json(text: &str) -> Result<Imported<StackConfig>, ConfigError> {
    super::load::refuse_large(text)?;
    let value: Value = serde_json::from_str(text).map_err(|e| {
        let what = match e.classify() {
            serde_json::error::Category::Eof => "the JSON ends too early",
            _ => "malformed JSON",
        };
        ConfigError::new(
            "",
            format!("{what} at line {} column {}", e.line(), e.column()),
        )
    })?;
    let root = Field {
        path: String::new(),
        value: &value,
    };
    let mut unmapped = Vec::new();
    let mut object = root.object()?;
    let entries = match object.take("methodConfig")? {
        Some(list) => list
            .list()?
            .iter()
            .map(|entry| method::entry(entry, &mut unmapped))
            .collect::<Result<Vec<_>, _>>()?,
        None => Vec::new(),
    };
    let budget = match object.take("retryThrottling")? {
        Some(throttling) => Some(budget(&throttling, &mut unmapped)?),
        None => StackConfig::default().budget,
    };
    object.rest(UNMAPPED, &mut unmapped);
    let (routes, hedge) = routes(entries)?;
    let config = StackConfig {
        routes,
        hedge,
        budget,
        ..StackConfig::default()
    };
    Ok(Imported::new(config, unmapped))
}

/// Whether `rules` retry a gRPC call that failed with `code` (a trailers-only
/// response), on a method they take as idempotent: what a file's
/// `retryableStatusCodes` became, given a route's [`RetryPolicy`]; or its
/// `nonFatalStatusCodes`, given a hedge policy's [`rules`](HedgePolicy::rules)
/// (the codes that leave the other copies running).
///
/// # Examples
///
/// ```
/// use backstop::config::grpc;
/// use backstop::grpc::Code;
///
/// let config = grpc::from_json(r#"{"methodConfig": [{"name": [{}],
///     "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.1s",
///     "maxBackoff": "1s", "backoffMultiplier": 2,
///     "retryableStatusCodes": ["UNAVAILABLE"]}}]}"#)?.strict()?;
/// let policy = config.routes.default_policy().retry_policy();
/// assert!(grpc::retries_code(policy, Code::Unavailable));
/// assert!(!grpc::retries_code(policy, Code::Internal));
/// # Ok::<(), backstop::config::ConfigError>(())
/// ```
pub fn retries_code(rules: &(impl AsRef<Rules> + ?Sized), code: Code) -> bool {
    let mut headers = HeaderMap::new();
    headers.insert("grpc-status", HeaderValue::from(code as u32));
    let outcome = Outcome::Response {
        status: StatusCode::OK,
        headers: &headers,
    };
    // GET: a method the ladder takes as idempotent, so the code alone decides.
    let facts = RequestFacts {
        method: &Method::GET,
        keyed: false,
    };
    matches!(
        classify(rules, facts, outcome, None),
        Classification::Retryable(_)
    )
}

/// The routes of every entry: each method's first, then each service's, then
/// the default, so the most specific name wins as in gRPC.
/// The stack's hedge policy comes with them: the first hedging entry's.
fn routes(entries: Vec<Entry>) -> Result<(Routes, Option<HedgePolicy>), ConfigError> {
    let mut seen: HashMap<String, String> = HashMap::new();
    let mut methods = Vec::new();
    let mut services = Vec::new();
    let mut default = None;
    let mut hedge = None;
    for entry in entries {
        if entry.hedge.is_some() && hedge.is_none() && !entry.names.is_empty() {
            hedge = entry.hedge.clone();
        }
        for (name, path) in entry.names {
            if let Some(first) = seen.insert(name.key(), path.clone()) {
                return Err(error(
                    &path,
                    format!("names the same methods as {first}; each name is given once"),
                ));
            }
            let policy = entry.policy.clone();
            match name {
                Name::Default => default = Some(policy),
                Name::Service(service) => services.push((
                    Route::path_prefix(format!("/{service}")).named(service),
                    policy,
                )),
                Name::Method(service, method) => methods.push((
                    Route::path_exact(format!("/{service}/{method}"))
                        .named(format!("{service}/{method}")),
                    policy,
                )),
            }
        }
    }
    let default = match default {
        Some(policy) => policy,
        None => RoutePolicy::new(method::transparent(None).map_err(|e| error("", e.to_string()))?)
            .no_hedging(),
    };
    let routes = methods
        .into_iter()
        .chain(services)
        .fold(Routes::new(default), |routes, (route, policy)| {
            routes.route(route, policy)
        });
    Ok((routes, hedge))
}

/// `retryThrottling`: a ratio budget (see the module docs for how close it is).
fn budget(field: &Field<'_>, unmapped: &mut Vec<Unmapped>) -> Result<BudgetPolicy, ConfigError> {
    let mut object = field.object()?;
    let number = |object: &mut json::Object<'_>, key: &str| -> Result<(f64, String), ConfigError> {
        let path = format!("{}.{key}", object.path());
        let field = object
            .take(key)?
            .ok_or_else(|| error(&path, "is required"))?;
        Ok((field.number()?, path))
    };
    let (max_tokens, tokens_path) = number(&mut object, "maxTokens")?;
    let (ratio, ratio_path) = number(&mut object, "tokenRatio")?;
    if !(max_tokens > 0.0 && max_tokens <= 1000.0) {
        return Err(error(&tokens_path, "must be more than 0 and at most 1000"));
    }
    if ratio <= 0.0 {
        return Err(error(&ratio_path, "must be more than zero"));
    }
    object.rest(&[], unmapped);
    BudgetPolicy::builder()
        .ratio(ratio)
        .min_per_second(max_tokens / 20.0)
        .window(WINDOW)
        .build()
        .map_err(|e| error(&ratio_path, e.to_string()))
}

#[cfg(test)]
mod tests;
