//! One `HTTPRoute`: its rules' policies, and a backstop route for each of its
//! matches (and each of its exact hostnames).

use std::cmp::Reverse;
use std::time::Duration;

use http::Method;

use super::node::{Fields, Node};
use crate::config::{parse_duration, ConfigError, Unmapped};
use crate::policy::InvalidConfig;
use crate::retry::{Route, RoutePolicy};
use crate::RetryPolicy;

/// A route read from a file, with where Gateway API's precedence puts it.
pub(super) struct Candidate {
    pub(super) route: Route,
    pub(super) policy: RoutePolicy,
    pub(super) rank: Rank,
}

/// Gateway API's precedence, first to last (derived `Ord`, smallest first): a
/// route with an exact hostname, an exact path, the longest prefix, a method;
/// then the `HTTPRoute`'s `{namespace}/{name}`, the order of the documents, of
/// the rules and of the matches.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Rank {
    any_host: bool,
    prefix: bool,
    length: Reverse<usize>,
    any_method: bool,
    object: String,
    document: usize,
    rule: usize,
    matched: usize,
}

/// The methods an `HTTPRouteMatch` may name.
const METHODS: [Method; 9] = [
    Method::GET,
    Method::HEAD,
    Method::POST,
    Method::PUT,
    Method::DELETE,
    Method::CONNECT,
    Method::OPTIONS,
    Method::TRACE,
    Method::PATCH,
];

/// Reads the `HTTPRoute` whose top-level fields are `top` (at `path`), the
/// `document`-th of the file, into `out`; what it cannot map goes to `unmapped`.
pub(super) fn read(
    mut top: Fields<'_>,
    document: usize,
    out: &mut Vec<Candidate>,
    unmapped: &mut Vec<Unmapped>,
) -> Result<(), ConfigError> {
    if let Some((version, at)) = top.take("apiVersion") {
        match version.str(&at)? {
            "gateway.networking.k8s.io/v1" | "gateway.networking.k8s.io/v1beta1" => {}
            _ => {
                return Err(ConfigError::new(
                    at,
                    "an HTTPRoute is read from gateway.networking.k8s.io/v1 or v1beta1",
                ))
            }
        }
    }
    let object = match top.take("metadata") {
        Some((meta, at)) => object_name(meta, &at)?,
        None => return Err(ConfigError::new(top.child("metadata"), "required")),
    };
    // What the cluster reports, not configuration.
    let _ = top.take("status");
    let Some((spec, at)) = top.take("spec") else {
        return Err(ConfigError::new(top.child("spec"), "required"));
    };
    top.done()?;

    let mut spec = Fields::of(spec, &at)?;
    for key in ["parentRefs", "useDefaultGateways"] {
        if let Some((node, at)) = spec.take(key) {
            if !node.is_empty() {
                unmapped.push(Unmapped::new(
                    at,
                    "the Gateways a route attaches to: a client stack has none",
                ));
            }
        }
    }
    let hosts = match spec.take("hostnames") {
        Some((names, at)) => hostnames(names, &at, unmapped)?,
        None => vec![None],
    };
    let rules = spec.take("rules");
    spec.done()?;
    let Some((rules, at)) = rules else {
        return Ok(());
    };
    for (i, node) in rules.seq(&at)?.iter().enumerate() {
        let at = format!("{at}[{i}]");
        let rule = Rule {
            object: &object,
            document,
            index: i,
            hosts: &hosts,
        };
        rule.read(node, &at, out, unmapped)?;
    }
    Ok(())
}

/// `{namespace}/{name}`, or `{name}`.
fn object_name(meta: &Node, at: &str) -> Result<String, ConfigError> {
    let mut meta = Fields::of(meta, at)?;
    let name = match meta.take("name") {
        Some((name, at)) => name.str(&at)?.to_owned(),
        None => return Err(ConfigError::new(meta.child("name"), "required")),
    };
    let namespace = match meta.take("namespace") {
        Some((ns, at)) => Some(ns.str(&at)?.to_owned()),
        None => None,
    };
    // Labels, annotations and what the cluster adds are not configuration.
    meta.rest_ignored();
    Ok(match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name,
    })
}

/// The exact hostnames (lower case); a wildcard one is recorded, not mapped.
fn hostnames(
    names: &Node,
    at: &str,
    unmapped: &mut Vec<Unmapped>,
) -> Result<Vec<Option<String>>, ConfigError> {
    let names = names.seq(at)?;
    if names.is_empty() {
        return Ok(vec![None]);
    }
    let mut hosts = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let at = format!("{at}[{i}]");
        let name = name.str(&at)?;
        let (wildcard, rest) = match name.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, name),
        };
        let valid = !rest.is_empty()
            && rest.len() <= 253
            && rest.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            });
        if !valid {
            return Err(ConfigError::new(
                at,
                "must be a hostname (RFC 1123), optionally under a wildcard label `*.`",
            ));
        }
        if wildcard {
            unmapped.push(Unmapped::new(
                at,
                "a wildcard hostname: backstop matches exact hosts, so the route's matches \
                 under it are not imported",
            ));
        } else {
            hosts.push(Some(name.to_ascii_lowercase()));
        }
    }
    Ok(hosts)
}

/// One rule of an `HTTPRoute`, and where it is.
struct Rule<'a> {
    object: &'a str,
    document: usize,
    index: usize,
    hosts: &'a [Option<String>],
}

impl Rule<'_> {
    fn read(
        &self,
        node: &Node,
        at: &str,
        out: &mut Vec<Candidate>,
        unmapped: &mut Vec<Unmapped>,
    ) -> Result<(), ConfigError> {
        let mut rule = Fields::of(node, at)?;
        let mut name = format!("{}/rules[{}]", self.object, self.index);
        if let Some((rule_name, at)) = rule.take("name") {
            name = format!("{name}/{}", rule_name.str(&at)?);
        }
        for (key, reason) in [
            (
                "backendRefs",
                "where a gateway forwards: a client sends to the request's URI",
            ),
            (
                "filters",
                "filters change requests and responses, not their retries",
            ),
            (
                "sessionPersistence",
                "session persistence is not a retry setting",
            ),
        ] {
            if let Some((node, at)) = rule.take(key) {
                if !node.is_empty() {
                    unmapped.push(Unmapped::new(at, reason));
                }
            }
        }
        let policy = RoutePolicy::new(policy(&mut rule)?);
        let matches = rule.take("matches");
        rule.done()?;

        let default = Node::Null;
        let matches: Vec<(&Node, String)> = match &matches {
            Some((node, at)) if !node.is_empty() => node
                .seq(at)?
                .iter()
                .enumerate()
                .map(|(j, m)| (m, format!("{at}[{j}]")))
                .collect(),
            // No match: a prefix match on "/", every request.
            _ => vec![(&default, format!("{at}.matches[0]"))],
        };
        for (j, (node, at)) in matches.into_iter().enumerate() {
            let Some((route, rank)) = self.matched(node, &at, j, unmapped)? else {
                continue;
            };
            for host in self.hosts {
                let (route, any_host) = match host {
                    Some(host) => (route.clone().and_host(host.as_str()), false),
                    None => (route.clone(), true),
                };
                out.push(Candidate {
                    route: route.named(name.as_str()),
                    policy: policy.clone(),
                    rank: Rank {
                        any_host,
                        ..rank.clone()
                    },
                });
            }
        }
        Ok(())
    }

    /// The route of one `HTTPRouteMatch`; `None` when a part of it is not mapped
    /// (it is skipped, never widened).
    fn matched(
        &self,
        node: &Node,
        at: &str,
        j: usize,
        unmapped: &mut Vec<Unmapped>,
    ) -> Result<Option<(Route, Rank)>, ConfigError> {
        let mut m = Fields::of(node, at)?;
        let mut skipped = false;
        for (key, what) in [("headers", "header"), ("queryParams", "query parameter")] {
            if let Some((node, at)) = m.take(key) {
                if !node.seq(&at)?.is_empty() {
                    unmapped.push(Unmapped::new(
                        at,
                        format!("{what} matches are not mapped: the match is skipped"),
                    ));
                    skipped = true;
                }
            }
        }
        let method = match m.take("method") {
            Some((method, at)) => {
                let method = method.str(&at)?;
                let found = METHODS.iter().find(|m| m.as_str() == method);
                Some(found.cloned().ok_or_else(|| {
                    ConfigError::new(
                        at,
                        "must be one of GET, HEAD, POST, PUT, DELETE, CONNECT, OPTIONS, TRACE, PATCH",
                    )
                })?)
            }
            None => None,
        };
        let path = m.take("path");
        m.done()?;
        let (route, prefix, length) = match path {
            None => (Route::path_prefix("/"), true, 1),
            Some((path, at)) => match path_match(path, &at)? {
                Some(read) => read,
                None => {
                    unmapped.push(Unmapped::new(
                        at,
                        "regular-expression paths are not mapped: the match is skipped",
                    ));
                    return Ok(None);
                }
            },
        };
        if skipped {
            return Ok(None);
        }
        let route = match &method {
            Some(method) => route.method(method.clone()),
            None => route,
        };
        let rank = Rank {
            any_host: true,
            prefix,
            length: Reverse(length),
            any_method: method.is_none(),
            object: self.object.to_owned(),
            document: self.document,
            rule: self.index,
            matched: j,
        };
        Ok(Some((route, rank)))
    }
}

/// An `HTTPPathMatch`: the route, whether it is a prefix, and its length; `None`
/// for a regular expression.
fn path_match(node: &Node, at: &str) -> Result<Option<(Route, bool, usize)>, ConfigError> {
    let mut path = Fields::of(node, at)?;
    let kind = match path.take("type") {
        Some((kind, at)) => match kind.str(&at)? {
            "PathPrefix" => Some(true),
            "Exact" => Some(false),
            "RegularExpression" => None,
            _ => {
                return Err(ConfigError::new(
                    at,
                    "must be Exact, PathPrefix or RegularExpression",
                ))
            }
        },
        None => Some(true),
    };
    let (value, at) = match path.take("value") {
        Some((value, at)) => (value.str(&at)?, at),
        None => ("/", path.child("value")),
    };
    path.done()?;
    let Some(prefix) = kind else {
        return Ok(None);
    };
    if let Some(problem) = bad_path(value) {
        return Err(ConfigError::new(at, problem));
    }
    Ok(Some(if prefix {
        let route = Route::path_prefix(value);
        let length = match route.path() {
            Some(crate::retry::PathMatch::Prefix(p)) => p.len(),
            _ => value.len(),
        };
        (route, true, length)
    } else {
        (Route::path_exact(value), false, value.len())
    }))
}

/// What Gateway API refuses in an `Exact` or `PathPrefix` value, if anything.
fn bad_path(value: &str) -> Option<&'static str> {
    let valid_byte = |b: u8| b.is_ascii_alphanumeric() || b"-/._~!$&'()*+,;=:@%".contains(&b);
    if !value.starts_with('/') {
        Some("must be an absolute path, starting with `/`")
    } else if value.len() > 1024 {
        Some("must be at most 1024 characters")
    } else if !value.bytes().all(valid_byte)
        || ["//", "/./", "/../", "%2f", "%2F", "#"]
            .iter()
            .any(|bad| value.contains(bad))
        || value.ends_with("/..")
        || value.ends_with("/.")
    {
        Some("must be a normalized path of URI characters (no `//`, `/./`, `/../`, `%2F`)")
    } else {
        None
    }
}

/// The rule's retry policy: backstop's defaults, with what its `retry` and
/// `timeouts` say.
fn policy(rule: &mut Fields<'_>) -> Result<RetryPolicy, ConfigError> {
    let mut builder = RetryPolicy::builder();
    // Where each builder setting came from, to name it in the builder's errors.
    let mut origin: Vec<(&'static str, String)> = Vec::new();
    let rule_path = rule.path().to_owned();
    if let Some((retry, at)) = rule.take("retry") {
        let mut retry = Fields::of(retry, &at)?;
        if let Some((codes, at)) = retry.take("codes") {
            let mut statuses = Vec::new();
            for (i, code) in codes.seq(&at)?.iter().enumerate() {
                let at = format!("{at}[{i}]");
                match u16::try_from(code.int(&at)?) {
                    Ok(code @ 400..=599) => statuses.push(code),
                    _ => return Err(ConfigError::new(at, "must be a status from 400 to 599")),
                }
            }
            if !statuses.is_empty() {
                builder = builder.retryable_statuses(statuses);
            }
            origin.push(("retryable_statuses", at));
        }
        if let Some((attempts, at)) = retry.take("attempts") {
            match u32::try_from(attempts.int(&at)?) {
                // `attempts` counts retries; backstop counts the first attempt too.
                Ok(n @ 1..=99) => builder = builder.max_attempts(n + 1),
                _ => return Err(ConfigError::new(at, "must be from 1 to 99 retries")),
            }
            origin.push(("max_attempts", at));
        }
        if let Some((backoff, at)) = retry.take("backoff") {
            let base = duration(backoff, &at)?;
            let max = RetryPolicy::default().backoff().max().max(base);
            builder = builder.backoff(base, max);
            origin.push(("backoff", at));
        }
        retry.done()?;
    }
    if let Some((timeouts, at)) = rule.take("timeouts") {
        let mut timeouts = Fields::of(timeouts, &at)?;
        let mut request = None;
        if let Some((node, at)) = timeouts.take("request") {
            request = Some(duration(node, &at)?).filter(|d| !d.is_zero());
            if let Some(total) = request {
                builder = builder.timeout(total);
            }
            origin.push(("timeout", at.clone()));
            origin.push(("min_attempt_time", at));
        }
        if let Some((node, at)) = timeouts.take("backendRequest") {
            // "0s" turns the timeout off.
            if let Some(each) = Some(duration(node, &at)?).filter(|d| !d.is_zero()) {
                if request.is_some_and(|total| each > total) {
                    return Err(ConfigError::new(at, "must be no more than `request`"));
                }
                builder = builder.attempt_timeout(each);
            }
            origin.push(("attempt_timeout", at));
        }
        timeouts.done()?;
    }
    builder.build().map_err(|e: InvalidConfig| {
        let at = origin
            .iter()
            .find(|(setting, _)| *setting == e.setting())
            .map_or(rule_path, |(_, at)| at.clone());
        ConfigError::new(at, e.to_string())
    })
}

/// A Gateway API duration (GEP-2257): one to four `<1-5 digits><h|m|s|ms>`
/// parts, summed.
fn duration(node: &Node, at: &str) -> Result<Duration, ConfigError> {
    let text = node.str(at)?;
    let refuse = || {
        ConfigError::new(
            at,
            "must be a Gateway API duration: 1 to 4 parts of 1 to 5 digits and h, m, s or ms \
             (\"10s\", \"1m30s\", \"500ms\")",
        )
    };
    let mut total = Duration::ZERO;
    let mut rest = text;
    let mut parts = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let unit = rest[digits..]
            .bytes()
            .take_while(u8::is_ascii_alphabetic)
            .count();
        let (part, next) = rest.split_at(digits + unit);
        if !(1..=5).contains(&digits) || !matches!(&part[digits..], "h" | "m" | "s" | "ms") {
            return Err(refuse());
        }
        parts += 1;
        total += parse_duration(part).map_err(|_| refuse())?;
        rest = next;
    }
    if parts == 0 || parts > 4 {
        return Err(refuse());
    }
    Ok(total)
}

#[cfg(test)]
#[path = "route_tests.rs"]
mod tests;
