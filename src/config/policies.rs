//! `Serialize` and `Deserialize` for each policy: a policy is read into its spec
//! (every field optional, unknown fields refused), which its builder turns into
//! the policy, so a file is checked exactly as code is; a policy is written as its
//! spec with every setting it has.

use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize};

use super::values::{BackoffSpec, Dur, Header, Meth, Statuses};
use super::{registry, ConfigError};
use crate::admit::breaker::CircuitBreakerPolicy;
use crate::admit::budget::{BudgetPolicy, PauseMode};
use crate::hedge::HedgePolicy;
use crate::idempotency_key::IdempotencyKeyLayer;
use crate::origin::Partition;
use crate::policy::{ErrorKind, Rules};
use crate::retry::RetryPolicy;

/// A builder's refusal as a file's error, at the field of the setting it names
/// (relative to the spec's table).
pub(crate) fn refused(e: crate::policy::InvalidConfig) -> ConfigError {
    let field = match e.setting() {
        // The rules' statuses, whichever setter gave them.
        "retry_on" => "retryable_statuses",
        // The backoff's settings, in its own table.
        "backoff_multiplier" => "backoff.multiplier",
        "jitter" => "backoff.jitter",
        setting => setting,
    };
    ConfigError::new(field, e.to_string())
}

/// The name of registered rules, checked against the registry in scope as it is
/// read (so an unknown name is an error at its own path).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(transparent)]
pub(crate) struct RulesName(String);

impl<'de> Deserialize<'de> for RulesName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        registry::named(&name).map_err(de::Error::custom)?;
        Ok(RulesName(name))
    }
}

spec!(
    /// [`Rules`]: registered rules by name, with settings on top.
    RulesSpec {
        name: RulesName,
        retryable_statuses: Statuses,
        retryable_errors: Vec<ErrorKind>,
        idempotent_methods: Vec<Meth>,
        idempotency_header: Header,
        attempt_header: Header,
    }
);

impl RulesSpec {
    pub(crate) fn of(rules: &Rules) -> Result<Self, String> {
        if rules.has_code() && rules.name().is_none() {
            return Err(
                "rules with a classifier of their own are written by name: name them \
                        (Rules::named) and register them (config::Registry)"
                    .into(),
            );
        }
        let (statuses, kinds, methods) = rules.settings();
        Ok(RulesSpec {
            name: rules.name().map(|n| RulesName(n.to_owned())),
            retryable_statuses: Some(Statuses(statuses)),
            retryable_errors: Some(kinds),
            idempotent_methods: methods.map(|m| m.into_iter().map(Meth).collect()),
            idempotency_header: Some(Header(rules.idempotency_header().clone())),
            attempt_header: rules.attempt_header().cloned().map(Header),
        })
    }

    pub(crate) fn build(self) -> Result<Rules, ConfigError> {
        let base = match &self.name {
            Some(RulesName(name)) => {
                registry::named(name).map_err(|m| ConfigError::new("name", m))?
            }
            None => Rules::default(),
        };
        let mut b = Rules::builder();
        if let Some(Statuses(codes)) = self.retryable_statuses {
            b = b.retryable_statuses(codes);
        }
        if let Some(kinds) = self.retryable_errors {
            b = b.retryable_errors(kinds);
        }
        if let Some(methods) = self.idempotent_methods {
            b = b.idempotent_methods(methods.into_iter().map(|m| m.0));
        }
        if let Some(Header(name)) = self.idempotency_header {
            b = b.idempotency_header(name);
        }
        if let Some(Header(name)) = self.attempt_header {
            b = b.attempt_header(name);
        }
        b.build_on(base).map_err(refused)
    }
}
through_spec!(Rules, RulesSpec);

/// How much of a failed response's body is drained.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DrainSpec {
    bytes: usize,
    timeout: Dur,
}

spec!(
    /// [`RetryPolicy`]. A timeout of `"0s"` is no timeout.
    RetrySpec {
        max_attempts: u32,
        backoff: BackoffSpec,
        rules: RulesSpec,
        max_retry_after: Dur,
        attempt_timeout: Dur,
        timeout: Dur,
        min_attempt_time: Dur,
        replay_cap: usize,
        drain: DrainSpec,
    }
);

impl RetrySpec {
    pub(crate) fn of(p: &RetryPolicy) -> Result<Self, String> {
        let none = std::time::Duration::ZERO;
        Ok(RetrySpec {
            max_attempts: Some(p.max_attempts()),
            backoff: Some(BackoffSpec::of(p.backoff())),
            rules: Some(RulesSpec::of(p.rules())?),
            max_retry_after: Some(Dur(p.max_retry_after())),
            attempt_timeout: Some(Dur(p.attempt_timeout().unwrap_or(none))),
            timeout: Some(Dur(p.timeout().unwrap_or(none))),
            min_attempt_time: Some(Dur(p.min_attempt_time())),
            replay_cap: Some(p.replay_cap()),
            drain: Some(DrainSpec {
                bytes: p.drain_limit(),
                timeout: Dur(p.drain_timeout()),
            }),
        })
    }

    pub(crate) fn build(self) -> Result<RetryPolicy, ConfigError> {
        let mut b = RetryPolicy::builder();
        if let Some(rules) = self.rules {
            b = b.rules(rules.build().map_err(|e| e.under("rules"))?);
        }
        if let Some(n) = self.max_attempts {
            b = b.max_attempts(n);
        }
        if let Some(backoff) = self.backoff {
            b = backoff.apply(b);
        }
        if let Some(d) = self.max_retry_after {
            b = b.max_retry_after(d.0);
        }
        if let Some(d) = self.attempt_timeout.filter(|d| !d.0.is_zero()) {
            b = b.attempt_timeout(d.0);
        }
        if let Some(d) = self.timeout.filter(|d| !d.0.is_zero()) {
            b = b.timeout(d.0);
        }
        if let Some(d) = self.min_attempt_time {
            b = b.min_attempt_time(d.0);
        }
        if let Some(n) = self.replay_cap {
            b = b.replay_cap(n);
        }
        if let Some(DrainSpec { bytes, timeout }) = self.drain {
            b = b.drain(bytes, timeout.0);
        }
        b.build().map_err(refused)
    }
}
through_spec!(RetryPolicy, RetrySpec);

/// An adaptive hedge delay.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AdaptiveSpec {
    fallback: Dur,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    percentile: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    min_samples: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    window: Option<Dur>,
}

spec!(
    /// [`HedgePolicy`]: a fixed `delay` or an `adaptive` one.
    HedgeSpec {
        delay: Dur,
        adaptive: AdaptiveSpec,
        max_extra: u32,
        methods: Vec<Meth>,
        rules: RulesSpec,
        min_attempt_time: Dur,
    }
);

impl HedgeSpec {
    pub(crate) fn of(p: &HedgePolicy) -> Result<Self, String> {
        let (delay, adaptive) = match p.delay_setting() {
            Ok(delay) => (Some(Dur(delay)), None),
            Err((fallback, percentile, min_samples, window)) => (
                None,
                Some(AdaptiveSpec {
                    fallback: Dur(fallback),
                    percentile: Some(percentile),
                    min_samples: Some(min_samples),
                    window: Some(Dur(window)),
                }),
            ),
        };
        Ok(HedgeSpec {
            delay,
            adaptive,
            max_extra: Some(p.max_extra()),
            methods: p
                .method_setting()
                .map(|m| m.into_iter().map(Meth).collect()),
            rules: Some(RulesSpec::of(p.rules())?),
            min_attempt_time: Some(Dur(p.min_attempt_time())),
        })
    }

    pub(crate) fn build(self) -> Result<HedgePolicy, ConfigError> {
        let mut b = HedgePolicy::builder();
        if let Some(d) = self.delay {
            b = b.after(d.0);
        }
        if let Some(a) = self.adaptive {
            b = b.adaptive(a.fallback.0);
            if let Some(p) = a.percentile {
                b = b.percentile(p);
            }
            if let Some(n) = a.min_samples {
                b = b.min_samples(n);
            }
            if let Some(w) = a.window {
                b = b.window(w.0);
            }
        }
        if let Some(n) = self.max_extra {
            b = b.max_extra(n);
        }
        if let Some(methods) = self.methods {
            b = b.methods(methods.into_iter().map(|m| m.0));
        }
        if let Some(rules) = self.rules {
            b = b.rules(rules.build().map_err(|e| e.under("rules"))?);
        }
        if let Some(d) = self.min_attempt_time {
            b = b.min_attempt_time(d.0);
        }
        b.build().map_err(refused)
    }
}
through_spec!(HedgePolicy, HedgeSpec);

/// A partition by name: `"origin"` or `"global"` (one made by key is code).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum PartitionName {
    Origin,
    Global,
}

impl PartitionName {
    fn of(p: &Partition) -> Result<Self, String> {
        match p.file_name() {
            Some("global") => Ok(PartitionName::Global),
            Some(_) => Ok(PartitionName::Origin),
            None => Err("a partition by key is code and is not written to a file".into()),
        }
    }

    fn partition(self) -> Partition {
        match self {
            PartitionName::Origin => Partition::origin(),
            PartitionName::Global => Partition::global(),
        }
    }
}

/// [`PauseMode`] by name: `"wait"`, `"fail_fast"`, `"off"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum PauseName {
    Wait,
    FailFast,
    Off,
}

spec!(
    /// [`BudgetPolicy`].
    BudgetSpec {
        ratio: f64,
        min_per_second: f64,
        window: Dur,
        partition: PartitionName,
        pause_mode: PauseName,
        max_pause: Dur,
        pause_spread: Dur,
        pause_min_attempt_time: Dur,
    }
);

impl BudgetSpec {
    pub(crate) fn of(p: &BudgetPolicy) -> Result<Self, String> {
        Ok(BudgetSpec {
            ratio: Some(p.ratio()),
            min_per_second: Some(p.min_per_second()),
            window: Some(Dur(p.window())),
            partition: Some(PartitionName::of(p.partition())?),
            pause_mode: Some(match p.pause_mode() {
                PauseMode::FailFast => PauseName::FailFast,
                PauseMode::Off => PauseName::Off,
                _ => PauseName::Wait,
            }),
            max_pause: Some(Dur(p.max_pause())),
            pause_spread: Some(Dur(p.pause_spread())),
            pause_min_attempt_time: Some(Dur(p.pause_min_attempt_time())),
        })
    }

    pub(crate) fn build(self) -> Result<BudgetPolicy, ConfigError> {
        let mut b = BudgetPolicy::builder();
        if let Some(r) = self.ratio {
            b = b.ratio(r);
        }
        if let Some(r) = self.min_per_second {
            b = b.min_per_second(r);
        }
        if let Some(w) = self.window {
            b = b.window(w.0);
        }
        if let Some(p) = self.partition {
            b = b.partition(p.partition());
        }
        if let Some(m) = self.pause_mode {
            b = b.pause_mode(match m {
                PauseName::Wait => PauseMode::Wait,
                PauseName::FailFast => PauseMode::FailFast,
                PauseName::Off => PauseMode::Off,
            });
        }
        if let Some(d) = self.max_pause {
            b = b.max_pause(d.0);
        }
        if let Some(d) = self.pause_spread {
            b = b.pause_spread(d.0);
        }
        if let Some(d) = self.pause_min_attempt_time {
            b = b.pause_min_attempt_time(d.0);
        }
        b.build().map_err(refused)
    }
}
through_spec!(BudgetPolicy, BudgetSpec);

spec!(
    /// [`CircuitBreakerPolicy`]. Its failure rule, when it is code of your own, is
    /// not written: give the rules' classifier the decision instead.
    BreakerSpec {
        failure_ratio: f64,
        min_calls: u32,
        window: Dur,
        consecutive_failures: u32,
        cooldown: Dur,
        max_cooldown: Dur,
        jitter: f64,
        probes: u32,
        rules: RulesSpec,
        partition: PartitionName,
    }
);

impl BreakerSpec {
    pub(crate) fn of(p: &CircuitBreakerPolicy) -> Result<Self, String> {
        if p.failure_if.is_some() {
            return Err(
                "a breaker's failure rule of your own (failure_if) is code: \
                        give the decision to named rules instead"
                    .into(),
            );
        }
        Ok(BreakerSpec {
            failure_ratio: Some(p.failure_ratio()),
            min_calls: Some(p.min_calls()),
            window: Some(Dur(p.window())),
            consecutive_failures: Some(p.consecutive_failures()),
            cooldown: Some(Dur(p.cooldown())),
            max_cooldown: Some(Dur(p.max_cooldown())),
            jitter: Some(p.jitter()),
            probes: Some(p.probes()),
            rules: p.rules.as_ref().map(RulesSpec::of).transpose()?,
            partition: Some(PartitionName::of(p.partition())?),
        })
    }

    pub(crate) fn build(self) -> Result<CircuitBreakerPolicy, ConfigError> {
        let mut b = CircuitBreakerPolicy::builder();
        if let Some(r) = self.failure_ratio {
            b = b.failure_ratio(r);
        }
        if let Some(n) = self.min_calls {
            b = b.min_calls(n);
        }
        if let Some(w) = self.window {
            b = b.window(w.0);
        }
        if let Some(n) = self.consecutive_failures {
            b = b.consecutive_failures(n);
        }
        if let Some(d) = self.cooldown {
            b = b.cooldown(d.0);
        }
        if let Some(d) = self.max_cooldown {
            b = b.max_cooldown(d.0);
        }
        if let Some(j) = self.jitter {
            b = b.jitter(j);
        }
        if let Some(n) = self.probes {
            b = b.probes(n);
        }
        if let Some(rules) = self.rules {
            b = b.rules(rules.build().map_err(|e| e.under("rules"))?);
        }
        if let Some(p) = self.partition {
            b = b.partition(p.partition());
        }
        b.build().map_err(refused)
    }
}
through_spec!(CircuitBreakerPolicy, BreakerSpec);

spec!(
    /// [`IdempotencyKeyLayer`]: the header and the methods that get a key. A key
    /// generator of your own is code and is not written.
    KeySpec {
        header: Header,
        methods: Vec<Meth>,
    }
);

impl KeySpec {
    pub(crate) fn of(layer: &IdempotencyKeyLayer) -> Result<Self, String> {
        let config = layer.config();
        if config.generator.is_some() {
            return Err("a key generator of your own is code and is not written".into());
        }
        Ok(KeySpec {
            header: Some(Header(config.header.clone())),
            methods: Some(config.methods.iter().map(Meth).collect()),
        })
    }

    pub(crate) fn build(self) -> Result<IdempotencyKeyLayer, ConfigError> {
        let mut layer = IdempotencyKeyLayer::new();
        if let Some(Header(name)) = self.header {
            layer = layer.header(name);
        }
        if let Some(methods) = self.methods {
            layer = layer.methods(methods.into_iter().map(|m| m.0));
        }
        Ok(layer)
    }
}
through_spec!(IdempotencyKeyLayer, KeySpec);
