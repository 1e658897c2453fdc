//! The middleware: runs one [`Backstop`] stack for each call over the rest of the
//! middleware chain.

use std::future::poll_fn;
use std::sync::Arc;

use http::Extensions;
use reqwest_middleware::{ClientWithMiddleware, Next};
use tower_layer::Layer;
use tower_service::Service;

use super::send::{AnsweredExtensions, AttemptResponse, BodyKind, CallParts, SendNext};
use crate::body::OneShot;
use crate::budget::{BudgetLayer, BudgetPolicy};
use crate::circuit_breaker::{CircuitBreakerLayer, CircuitBreakerPolicy};
use crate::hedge::HedgePolicy;
use crate::idempotency_key::IdempotencyKeyLayer;
use crate::observe::Observer;
use crate::policy::{Deadline, Keyed, Rules};
use crate::retry::{RetryPolicy, Routes};
use crate::stack::{Backstop, BackstopLayer, WithHedge};
use crate::throttle::{ThrottleLayer, ThrottlePolicy};

/// backstop for a [`reqwest_middleware::ClientWithMiddleware`]: the same attempt
/// loop, budget, circuit breaker, hedging and idempotency keys as the tower layers.
/// See the [module docs](super).
///
/// Each call runs one [`Backstop`] stack (admission: the idempotency key, the
/// circuit breaker and the budget; then retry and hedge) over a service that sends
/// every attempt down the rest of the middleware chain. Clones share everything,
/// budget accounts and breaker states included; give the same [`BudgetLayer`] or
/// [`CircuitBreakerLayer`] to several middlewares (or to a tower stack) to share
/// those across clients.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use backstop::reqwest::BackstopMiddleware;
/// use backstop::{BudgetPolicy, CircuitBreakerPolicy, RetryPolicy};
///
/// let middleware = BackstopMiddleware::new(RetryPolicy::default())
///     .with_budget(BudgetPolicy::default())
///     .with_circuit_breaker(CircuitBreakerPolicy::default())
///     .with_idempotency_keys();
/// // reqwest's own retry off, so every attempt is the middleware's.
/// let client = middleware.into_client()?;
/// # let _ = client;
/// # Ok::<(), reqwest::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct BackstopMiddleware {
    inner: Arc<Inner>,
}

#[derive(Clone, Debug)]
struct Inner {
    /// What the stack is built from, kept to build it again when a setting changes.
    config: Config,
    /// The stack every call runs.
    stack: Stack,
}

/// The stack, hedging or not (a stack's type says whether it hedges).
#[derive(Clone, Debug)]
enum Stack {
    Plain(BackstopLayer),
    Hedged(BackstopLayer<WithHedge>),
}

impl Stack {
    /// The retry policy of the route `req` takes.
    fn policy_for<B>(&self, req: &http::Request<B>) -> &RetryPolicy {
        match self {
            Stack::Plain(layer) => layer.policy_for(req),
            Stack::Hedged(layer) => layer.policy_for(req),
        }
    }
}

/// The middleware's settings. The breakers and the accounts live in the layers, so
/// that a stack built again (and every clone, and whatever else was given the
/// layers) keeps them.
#[derive(Clone)]
struct Config {
    routes: Routes,
    hedge: Option<HedgePolicy>,
    key: Option<IdempotencyKeyLayer>,
    breaker: Option<CircuitBreakerLayer>,
    /// The settings of the breaker when it is the middleware's own
    /// ([`with_circuit_breaker`](BackstopMiddleware::with_circuit_breaker)): its
    /// layer is built again with the rules when they are given.
    own_breaker: Option<CircuitBreakerPolicy>,
    budget: Option<BudgetLayer>,
    throttle: Option<ThrottleLayer>,
    rules: Option<Rules>,
    observer: Option<Arc<dyn Observer>>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("routes", &self.routes)
            .field("hedge", &self.hedge)
            .field("key", &self.key)
            .field("breaker", &self.breaker)
            .field("own_breaker", &self.own_breaker.is_some())
            .field("budget", &self.budget)
            .field("throttle", &self.throttle)
            .field("rules", &self.rules)
            .field("observer", &self.observer.is_some())
            .finish()
    }
}

impl Config {
    /// The layer of a breaker of the middleware's own, with `policy`, deciding by
    /// the rules when they are given.
    fn own_breaker_layer(&self, policy: &CircuitBreakerPolicy) -> CircuitBreakerLayer {
        let policy = match &self.rules {
            Some(rules) => policy.clone().with_rules(rules.clone()),
            None => policy.clone(),
        };
        CircuitBreakerLayer::new(policy)
    }

    /// The stack these settings make.
    fn stack(&self) -> Stack {
        // Routes that hedge without a hedge policy of the middleware's: a hedge
        // layer that only they use (every other route is never hedged).
        let (routes, hedge) = match &self.hedge {
            None if self.routes.hedges() => (
                self.routes.clone().unhedged_unless_chosen(),
                Some(HedgePolicy::default()),
            ),
            _ => (self.routes.clone(), self.hedge.clone()),
        };
        let mut builder = Backstop::builder().routes(routes);
        if let Some(key) = &self.key {
            builder = builder.idempotency_key(key.clone());
        }
        if let Some(breaker) = &self.breaker {
            builder = builder.circuit_breaker_of(breaker);
        }
        if let Some(throttle) = &self.throttle {
            builder = builder.throttle_of(throttle);
        }
        builder = match &self.budget {
            Some(budget) => builder.budget_of(budget),
            None => builder.no_budget(),
        };
        if let Some(rules) = &self.rules {
            builder = builder.rules(rules.clone());
        }
        if let Some(observer) = &self.observer {
            builder = builder.shared_observer(observer.clone());
        }
        let built = match hedge {
            Some(hedge) => builder.hedge(hedge).build().map(Stack::Hedged),
            None => builder.build().map(Stack::Plain),
        };
        match built {
            Ok(stack) => stack,
            // Routes alone (hedging only with the stack's hedge layer), one budget
            // (or none) and one breaker (or none).
            Err(_) => unreachable!("the middleware's settings are a valid stack"),
        }
    }
}

impl BackstopMiddleware {
    /// Retries by `policy`, with no budget, breaker, hedging or keys until they are
    /// added.
    pub fn new(policy: RetryPolicy) -> Self {
        BackstopMiddleware::with_routes(Routes::new(policy))
    }

    /// Retries by route (path prefix, method, host): see [`Routes`].
    pub fn with_routes(routes: Routes) -> Self {
        let config = Config {
            routes,
            hedge: None,
            key: None,
            breaker: None,
            own_breaker: None,
            budget: None,
            throttle: None,
            rules: None,
            observer: None,
        };
        let stack = config.stack();
        BackstopMiddleware {
            inner: Arc::new(Inner { config, stack }),
        }
    }

    /// This middleware with one setting changed, and its stack built again.
    fn set(mut self, change: impl FnOnce(&mut Config)) -> Self {
        let inner = Arc::make_mut(&mut self.inner);
        change(&mut inner.config);
        inner.stack = inner.config.stack();
        self
    }

    /// A retry budget per origin, with these numbers, for this middleware and its
    /// clones.
    pub fn with_budget(self, budget: BudgetPolicy) -> Self {
        self.with_budget_layer(BudgetLayer::new(budget))
    }

    /// The accounts of `layer`: every middleware and tower stack given a clone of
    /// the same layer spends from the same accounts.
    pub fn with_budget_layer(self, layer: BudgetLayer) -> Self {
        self.set(|config| config.budget = Some(layer))
    }

    /// A circuit breaker per origin, with this configuration, for this middleware
    /// and its clones. It decides by the [rules](BackstopMiddleware::with_rules)
    /// when they are given, before or after this call.
    pub fn with_circuit_breaker(self, policy: CircuitBreakerPolicy) -> Self {
        self.set(|config| {
            config.breaker = Some(config.own_breaker_layer(&policy));
            config.own_breaker = Some(policy);
        })
    }

    /// The breakers of `layer`: every middleware and tower stack given a clone of
    /// the same layer sees the same breaker states. They decide by the rules the
    /// layer's policy was built with, not by
    /// [`with_rules`](BackstopMiddleware::with_rules): the layer is shared.
    pub fn with_circuit_breaker_layer(self, layer: CircuitBreakerLayer) -> Self {
        self.set(|config| {
            config.breaker = Some(layer);
            config.own_breaker = None;
        })
    }

    /// The rules that decide for every policy of the middleware, given once: the
    /// retry policy (and each route's), the hedge policy, and the breaker of its
    /// own ([`with_circuit_breaker`](BackstopMiddleware::with_circuit_breaker)),
    /// whichever order they are given in; as
    /// [`BackstopBuilder::rules`](crate::stack::BackstopBuilder::rules). (The
    /// breaker asks the rules' classifier what a failure is.)
    ///
    /// A breaker of the middleware's own decides by the rules it was made with, so
    /// rules given after [`with_circuit_breaker`](BackstopMiddleware::with_circuit_breaker)
    /// make it again, with the same settings and no state: a handle taken from
    /// [`circuit_breaker`](BackstopMiddleware::circuit_breaker) before, or a clone
    /// of the middleware made before, keeps the old one. Give the rules while
    /// configuring, before any call.
    ///
    /// ```
    /// use backstop::policy::{classify_fn, Decision, Observed, Rules, Verdict};
    /// use backstop::reqwest::BackstopMiddleware;
    /// use backstop::{CircuitBreakerPolicy, HedgePolicy, RetryPolicy};
    /// use std::time::Duration;
    ///
    /// // A 200 with `x-busy` is retried, and counts as a failure for the breaker.
    /// let rules = Rules::builder()
    ///     .classifier(classify_fn(|outcome: Observed<'_>| -> Decision {
    ///         match outcome {
    ///             Observed::Response { headers, .. } if headers.contains_key("x-busy") => {
    ///                 Verdict::IfIdempotent.into()
    ///             }
    ///             _ => Verdict::NoOpinion.into(),
    ///         }
    ///     }))
    ///     .build()?;
    /// let middleware = BackstopMiddleware::new(RetryPolicy::default())
    ///     .with_rules(rules)
    ///     .with_hedge(HedgePolicy::after(Duration::from_millis(50)))
    ///     .with_circuit_breaker(CircuitBreakerPolicy::default());
    /// # let _ = middleware;
    /// # Ok::<(), backstop::policy::InvalidConfig>(())
    /// ```
    pub fn with_rules(self, rules: Rules) -> Self {
        self.set(|config| {
            config.rules = Some(rules);
            if let Some(policy) = config.own_breaker.clone() {
                config.breaker = Some(config.own_breaker_layer(&policy));
            }
        })
    }

    /// Adaptive throttling per origin, with these settings, for this middleware and
    /// its clones: a call to an origin that has been rejecting calls for overload
    /// is shed before it is sent (see [`ThrottlePolicy`]).
    pub fn with_throttle(self, policy: ThrottlePolicy) -> Self {
        self.with_throttle_layer(ThrottleLayer::new(policy))
    }

    /// The throttles of `layer`: every middleware and tower stack given a clone of
    /// the same layer counts in the same windows.
    pub fn with_throttle_layer(self, layer: ThrottleLayer) -> Self {
        self.set(|config| config.throttle = Some(layer))
    }

    /// Hedges slow idempotent (or keyed) requests as `policy` says. Every hedge
    /// spends the call's budget and asks its breaker.
    pub fn with_hedge(self, policy: HedgePolicy) -> Self {
        self.set(|config| config.hedge = Some(policy))
    }

    /// Stamps an `Idempotency-Key` on each POST and PATCH call that has none, once
    /// per call, so every attempt carries the same key and may be re-sent.
    pub fn with_idempotency_keys(self) -> Self {
        self.with_idempotency_key_layer(IdempotencyKeyLayer::new())
    }

    /// Stamps idempotency keys as `layer` is configured (header, methods, key
    /// generator).
    pub fn with_idempotency_key_layer(self, layer: IdempotencyKeyLayer) -> Self {
        self.set(|config| config.key = Some(layer))
    }

    /// Tells `observer` what the middleware decides for each call (see
    /// [`observe`](crate::observe)): the same events, and with feature `metrics` the
    /// same [`MetricsObserver`](crate::observe::MetricsObserver), as a tower stack.
    /// For several, give [`Observers`](crate::observe::Observers).
    pub fn with_observer(self, observer: impl Observer) -> Self {
        let observer: Arc<dyn Observer> = Arc::new(observer);
        self.set(|config| config.observer = Some(observer))
    }

    /// A client with this middleware over a reqwest client from
    /// [`client_builder`](super::client_builder): reqwest's own retry off, so
    /// every attempt is this middleware's.
    ///
    /// # Errors
    ///
    /// When reqwest cannot build its client (its TLS backend fails to start).
    ///
    /// # Examples
    ///
    /// ```
    /// use backstop::reqwest::BackstopMiddleware;
    /// use backstop::{BudgetPolicy, RetryPolicy};
    ///
    /// let client = BackstopMiddleware::new(RetryPolicy::default())
    ///     .with_budget(BudgetPolicy::default())
    ///     .into_client()?;
    /// # let _ = client;
    /// # Ok::<(), reqwest::Error>(())
    /// ```
    pub fn into_client(self) -> Result<ClientWithMiddleware, reqwest::Error> {
        let client = super::client_builder().build()?;
        Ok(reqwest_middleware::ClientBuilder::new(client)
            .with(self)
            .build())
    }

    /// The budget layer, to read an origin's account.
    pub fn budget(&self) -> Option<&BudgetLayer> {
        self.inner.config.budget.as_ref()
    }

    /// The circuit breaker layer, to read an origin's state.
    pub fn circuit_breaker(&self) -> Option<&CircuitBreakerLayer> {
        self.inner.config.breaker.as_ref()
    }

    /// The throttle layer, to read an origin's probability of shedding a call.
    pub fn throttle(&self) -> Option<&ThrottleLayer> {
        self.inner.config.throttle.as_ref()
    }

    /// Runs one call through the stack.
    async fn run(
        &self,
        req: reqwest::Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let url = req.url().clone();
        let body = match req.body() {
            None => BodyKind::None,
            Some(body) if body.as_bytes().is_some() => BodyKind::Buffered,
            Some(_) => BodyKind::Streamed,
        };
        // The request's own extensions (reqwest's per-request timeout among them)
        // come along and reach every attempt. A URL `http::Uri` cannot hold fails
        // here: reqwest's own error, without the URL.
        let mut req = http::Request::<reqwest::Body>::try_from(req)
            .map_err(|e| reqwest_middleware::Error::Reqwest(e.without_url()))?;
        carry_overrides(extensions, req.extensions_mut());
        self.keep_buffered(&mut req);

        let send = SendNext::new(
            next,
            CallParts {
                url,
                extensions: extensions.clone(),
                body,
            },
        );
        let result = match &self.inner.stack {
            Stack::Plain(layer) => run(layer.layer(send), req).await,
            Stack::Hedged(layer) => run(layer.layer(send), req).await,
        };
        match result {
            Ok(res) => Ok(answer(res, extensions)),
            Err(e) => Err(reqwest_middleware::Error::Middleware(anyhow::Error::new(e))),
        }
    }

    /// A buffered body is already in memory whole, and keeping its one chunk for a
    /// re-send costs nothing: the call's replay cap is raised to its length, so a
    /// buffered body is re-sent whatever its size.
    fn keep_buffered(&self, req: &mut http::Request<reqwest::Body>) {
        let Some(len) = req.body().as_bytes().map(<[u8]>::len) else {
            return;
        };
        let policy = match req.extensions().get::<RetryPolicy>() {
            Some(policy) => policy,
            None => self.inner.stack.policy_for(req),
        };
        if policy.max_attempts() > 1 && len > policy.replay_cap() {
            let raised = policy.with_replay_cap(len);
            req.extensions_mut().insert(raised);
        }
    }
}

/// Sends `req` through `stack`, once it is ready.
async fn run<S>(mut stack: S, req: http::Request<reqwest::Body>) -> Result<S::Response, S::Error>
where
    S: Service<http::Request<reqwest::Body>>,
{
    poll_fn(|cx| stack.poll_ready(cx)).await?;
    stack.call(req).await
}

/// Per-call overrides put in the middleware chain's extensions
/// (`RequestBuilder::with_extension`) reach the stack as they would in a tower one.
fn carry_overrides(from: &Extensions, to: &mut Extensions) {
    fn carry<T: Clone + Send + Sync + 'static>(from: &Extensions, to: &mut Extensions) {
        if let Some(value) = from.get::<T>() {
            to.insert(value.clone());
        }
    }
    carry::<RetryPolicy>(from, to);
    carry::<Deadline>(from, to);
    carry::<OneShot>(from, to);
    carry::<Keyed>(from, to);
}

/// The answer as reqwest gives it: its URL, status, headers, version and
/// extensions (with the attempt history after a retry); the chain's extensions
/// are those of the attempt that answered.
fn answer(mut res: AttemptResponse, extensions: &mut Extensions) -> reqwest::Response {
    if let Some(AnsweredExtensions(answered)) = res.extensions_mut().remove() {
        *extensions = answered;
    }
    reqwest::Response::from(res)
}

#[async_trait::async_trait]
impl reqwest_middleware::Middleware for BackstopMiddleware {
    async fn handle(
        &self,
        req: reqwest::Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        self.run(req, extensions, next).await
    }
}
