//! The route table and the whole stack in a file: each route names what it
//! matches and overrides only the settings it names, over the default policy.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::ser::{self, Serializer};
use serde::{Deserialize, Serialize};

use super::policies::{BreakerSpec, BudgetSpec, HedgeSpec, KeySpec, RetrySpec, RulesSpec};
use super::throttle::ThrottleSpec;
use super::values::Meth;
use super::{ConfigError, StackConfig};
use crate::hedge::HedgeChoice;
use crate::retry::{PathMatch, Route, RoutePolicy, Routes};

/// A part that is off (`false`), on with its defaults (`true`) or set (a table).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Toggle<T> {
    Off,
    On,
    With(T),
}

impl<T> Toggle<T> {
    /// The spec of an optional part: absent (written as nothing) or set.
    fn of<P>(
        part: Option<&P>,
        spec: impl FnOnce(&P) -> Result<T, String>,
    ) -> Result<Option<Self>, String> {
        part.map(|p| spec(p).map(Toggle::With)).transpose()
    }

    /// An optional part, off unless the file turns it on (`true`: its defaults)
    /// or sets it.
    fn build<P: Default>(
        toggle: Option<Self>,
        build: impl FnOnce(T) -> Result<P, ConfigError>,
    ) -> Result<Option<P>, ConfigError> {
        match toggle {
            None | Some(Toggle::Off) => Ok(None),
            Some(Toggle::On) => Ok(Some(P::default())),
            Some(Toggle::With(t)) => build(t).map(Some),
        }
    }
}

impl<T: Serialize> Serialize for Toggle<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Toggle::Off => s.serialize_bool(false),
            Toggle::On => s.serialize_bool(true),
            Toggle::With(t) => t.serialize(s),
        }
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Toggle<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Toggle<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("false, true or a table of settings")
            }
            fn visit_bool<E: de::Error>(self, on: bool) -> Result<Toggle<T>, E> {
                Ok(if on { Toggle::On } else { Toggle::Off })
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Toggle<T>, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map)).map(Toggle::With)
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

spec!(
    /// What a route matches: a path (prefix or exact), methods, a host.
    MatchSpec {
        name: String,
        path_prefix: String,
        path: String,
        methods: Vec<Meth>,
        host: String,
    }
);

impl MatchSpec {
    fn of(route: &Route) -> Self {
        let (path_prefix, path) = match route.path() {
            Some(PathMatch::Prefix(p)) => (Some(p.clone()), None),
            Some(PathMatch::Exact(p)) => (None, Some(p.clone())),
            None => (None, None),
        };
        MatchSpec {
            name: route.name().map(str::to_owned),
            path_prefix,
            path,
            methods: Some(route.method_list().iter().cloned().map(Meth).collect())
                .filter(|m: &Vec<Meth>| !m.is_empty()),
            host: route.host_name().map(str::to_owned),
        }
    }

    fn build(self) -> Result<Route, String> {
        let mut route = match (self.path_prefix, self.path) {
            (Some(_), Some(_)) => {
                return Err("a route matches a path_prefix or a path, not both".into())
            }
            (Some(prefix), None) => Route::path_prefix(prefix),
            (None, Some(path)) => Route::path_exact(path),
            (None, None) => Route::any(),
        };
        if let Some(host) = self.host {
            route = route.and_host(host);
        }
        if let Some(name) = self.name {
            route = route.named(name);
        }
        Ok(route.methods(self.methods.into_iter().flatten().map(|m| m.0)))
    }
}

impl Serialize for Route {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        MatchSpec::of(self).serialize(s)
    }
}

impl<'de> Deserialize<'de> for Route {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        MatchSpec::deserialize(d)?
            .build()
            .map_err(de::Error::custom)
    }
}

spec!(
    /// A route in a file: what it matches, and the settings it overrides.
    RouteSpec {
        name: String,
        path_prefix: String,
        path: String,
        methods: Vec<Meth>,
        host: String,
        retry: RetrySpec,
        hedge: Toggle<HedgeSpec>,
    }
);

spec!(
    /// The routes of a table, with its default: the part of a stack's file that
    /// [`Routes`] reads and writes on its own.
    RoutesSpec {
        retry: RetrySpec,
        hedging: Toggle<HedgeSpec>,
        routes: Vec<RouteSpec>,
    }
);

/// How a route (or the default) hedges, as a file writes it: absent (the stack's
/// hedge policy), `false` (never), or its own policy.
fn hedging_of(policy: &RoutePolicy) -> Result<Option<Toggle<HedgeSpec>>, String> {
    Ok(match policy.hedging() {
        None => None,
        Some(HedgeChoice::Off) => Some(Toggle::Off),
        Some(HedgeChoice::With(h)) => Some(Toggle::With(HedgeSpec::of(h)?)),
    })
}

/// A route policy from its retry spec and hedging; `hedge_base` is the stack's
/// hedge spec a route's own hedge settings are merged over.
fn route_policy(
    retry: RetrySpec,
    hedging: Option<Toggle<HedgeSpec>>,
    hedge_base: Option<&HedgeSpec>,
    at: &str,
) -> Result<RoutePolicy, ConfigError> {
    let retry = retry.build().map_err(|e| e.under(&join(at, "retry")))?;
    let policy = RoutePolicy::new(retry);
    match hedging {
        None | Some(Toggle::On) => Ok(policy),
        Some(Toggle::Off) => Ok(policy.no_hedging()),
        Some(Toggle::With(spec)) => {
            let spec = match hedge_base {
                Some(base) => spec.merged_over(base),
                None => spec,
            };
            let hedge = spec.build().map_err(|e| e.under(&join(at, "hedge")))?;
            policy
                .hedge(hedge)
                .map_err(|e| ConfigError::new(join(at, "hedge"), e.to_string()))
        }
    }
}

/// `at.field`, or `field` at the top.
fn join(at: &str, field: &str) -> String {
    if at.is_empty() {
        field.to_owned()
    } else {
        format!("{at}.{field}")
    }
}

impl RoutesSpec {
    fn of(routes: &Routes) -> Result<Self, String> {
        let default = routes.default_policy();
        Ok(RoutesSpec {
            retry: Some(RetrySpec::of(default.retry_policy())?),
            hedging: hedging_of(default)?,
            routes: Some(
                routes
                    .iter()
                    .map(|(route, policy)| {
                        let m = MatchSpec::of(route);
                        Ok(RouteSpec {
                            name: m.name,
                            path_prefix: m.path_prefix,
                            path: m.path,
                            methods: m.methods,
                            host: m.host,
                            retry: Some(RetrySpec::of(policy.retry_policy())?),
                            hedge: hedging_of(policy)?,
                        })
                    })
                    .collect::<Result<Vec<_>, String>>()?,
            )
            .filter(|r| !r.is_empty()),
        })
    }

    /// The table: each route's retry settings over the default's, its hedge
    /// settings over `hedge_base`'s. `at` is where the table is in the file.
    fn build(self, hedge_base: Option<&HedgeSpec>, at: &str) -> Result<Routes, ConfigError> {
        let default_retry = self.retry.unwrap_or_default();
        let default = route_policy(default_retry.clone(), self.hedging, hedge_base, at)?;
        let mut routes = Routes::new(default);
        for (i, r) in self.routes.into_iter().flatten().enumerate() {
            let here = join(at, &format!("routes[{i}]"));
            let matches = MatchSpec {
                name: r.name,
                path_prefix: r.path_prefix,
                path: r.path,
                methods: r.methods,
                host: r.host,
            };
            let route = matches
                .build()
                .map_err(|m| ConfigError::new(here.clone(), m))?;
            let retry = r.retry.unwrap_or_default().merged_over(&default_retry);
            routes = routes.route(route, route_policy(retry, r.hedge, hedge_base, &here)?);
        }
        Ok(routes)
    }
}

impl Serialize for Routes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        RoutesSpec::of(self)
            .map_err(ser::Error::custom)?
            .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Routes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        RoutesSpec::deserialize(d)?
            .build(None, "")
            .map_err(de::Error::custom)
    }
}

spec!(
    /// The whole stack in a file.
    StackSpec {
        retry: RetrySpec,
        hedging: Toggle<HedgeSpec>,
        routes: Vec<RouteSpec>,
        hedge: HedgeSpec,
        budget: Toggle<BudgetSpec>,
        circuit_breaker: Toggle<BreakerSpec>,
        throttle: Toggle<ThrottleSpec>,
        idempotency_key: Toggle<KeySpec>,
        rules: RulesSpec,
    }
);

impl StackSpec {
    pub(crate) fn of(c: &StackConfig) -> Result<Self, String> {
        let routes = RoutesSpec::of(&c.routes)?;
        Ok(StackSpec {
            retry: routes.retry,
            hedging: routes.hedging,
            routes: routes.routes,
            hedge: c.hedge.as_ref().map(HedgeSpec::of).transpose()?,
            budget: Some(match &c.budget {
                None => Toggle::Off,
                Some(b) => Toggle::With(BudgetSpec::of(b)?),
            }),
            circuit_breaker: Toggle::of(c.circuit_breaker.as_ref(), BreakerSpec::of)?,
            throttle: Toggle::of(c.throttle.as_ref(), ThrottleSpec::of)?,
            idempotency_key: Toggle::of(c.idempotency_key.as_ref(), KeySpec::of)?,
            rules: c.rules.as_ref().map(RulesSpec::of).transpose()?,
        })
    }

    /// The stack's settings, each built and checked by its builder; the first
    /// refused one is the error, at its path.
    pub(crate) fn build(self) -> Result<StackConfig, ConfigError> {
        let at = |field: &'static str| move |e: ConfigError| e.under(field);
        let hedge = self.hedge.clone().map(HedgeSpec::build).transpose();
        let hedge = hedge.map_err(at("hedge"))?;
        let table = RoutesSpec {
            retry: self.retry,
            hedging: self.hedging,
            routes: self.routes,
        };
        let routes = table.build(self.hedge.as_ref(), "")?;
        let budget = match self.budget {
            Some(Toggle::Off) => None,
            None | Some(Toggle::On) => Some(Default::default()),
            Some(Toggle::With(b)) => Some(b.build().map_err(at("budget"))?),
        };
        let circuit_breaker = Toggle::build(self.circuit_breaker, BreakerSpec::build);
        let circuit_breaker = circuit_breaker.map_err(at("circuit_breaker"))?;
        let throttle = Toggle::build(self.throttle, ThrottleSpec::build);
        let throttle = throttle.map_err(at("throttle"))?;
        let idempotency_key = Toggle::build(self.idempotency_key, KeySpec::build);
        let idempotency_key = idempotency_key.map_err(at("idempotency_key"))?;
        let rules = self.rules.map(RulesSpec::build).transpose();
        Ok(StackConfig {
            routes,
            hedge,
            budget,
            circuit_breaker,
            throttle,
            idempotency_key,
            rules: rules.map_err(at("rules"))?,
        })
    }
}

impl Serialize for StackConfig {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        StackSpec::of(self)
            .map_err(ser::Error::custom)?
            .serialize(s)
    }
}

impl<'de> Deserialize<'de> for StackConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        StackSpec::deserialize(d)?
            .build()
            .map_err(de::Error::custom)
    }
}
