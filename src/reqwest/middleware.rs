//! The middleware: builds backstop's tower stack for each call over the rest of the
//! middleware chain.

use std::future::poll_fn;
use std::sync::Arc;

use http::Extensions;
use reqwest_middleware::Next;
use tower_service::Service;

use super::send::{AnsweredExtensions, AttemptResponse, BodyKind, CallParts, SendNext};
use super::stack::maybe;
use crate::body::OneShot;
use crate::budget::{BudgetLayer, BudgetPolicy};
use crate::circuit_breaker::{CircuitBreakerLayer, CircuitBreakerPolicy};
use crate::hedge::{HedgeLayer, HedgePolicy};
use crate::idempotency_key::IdempotencyKeyLayer;
use crate::policy::{Deadline, Keyed};
use crate::retry::RetryPolicy;
use crate::retry::Settings;
use crate::retry::{Retry, Routes};

/// backstop for a [`reqwest_middleware::ClientWithMiddleware`]: the same attempt
/// loop, budget, circuit breaker, hedging and idempotency keys as the tower layers.
/// See the [module docs](super).
///
/// Each call runs backstop's own stack (idempotency key, circuit breaker, budget,
/// retry, hedge) over a service that sends every attempt down the rest of the
/// middleware chain. Clones share everything, budget accounts and breaker states
/// included; give the same [`BudgetLayer`] or [`CircuitBreakerLayer`] to several
/// middlewares (or to a tower stack) to share those across clients.
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
/// let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
///     .with(middleware)
///     .build();
/// # let _ = client;
/// ```
#[derive(Clone, Debug)]
pub struct BackstopMiddleware {
    layers: Arc<Layers>,
}

#[derive(Clone, Debug)]
struct Layers {
    key: Option<IdempotencyKeyLayer>,
    breaker: Option<CircuitBreakerLayer>,
    budget: Option<BudgetLayer>,
    retry: Arc<Settings>,
    hedge: Option<HedgeLayer>,
}

impl BackstopMiddleware {
    /// Retries by `policy`, with no budget, breaker, hedging or keys until they are
    /// added.
    pub fn new(policy: RetryPolicy) -> Self {
        BackstopMiddleware::with_routes(Routes::new(policy))
    }

    /// Retries by route (path prefix, method, host): see [`Routes`].
    pub fn with_routes(routes: Routes) -> Self {
        BackstopMiddleware {
            layers: Arc::new(Layers {
                key: None,
                breaker: None,
                budget: None,
                retry: Arc::new(Settings::new(routes)),
                hedge: None,
            }),
        }
    }

    fn layers_mut(&mut self) -> &mut Layers {
        Arc::make_mut(&mut self.layers)
    }

    /// A retry budget per origin, with these numbers, for this middleware and its
    /// clones.
    pub fn with_budget(self, budget: BudgetPolicy) -> Self {
        self.with_budget_layer(BudgetLayer::new(budget))
    }

    /// The accounts of `layer`: every middleware and tower stack given a clone of
    /// the same layer spends from the same accounts.
    pub fn with_budget_layer(mut self, layer: BudgetLayer) -> Self {
        self.layers_mut().budget = Some(layer);
        self
    }

    /// A circuit breaker per origin, with this configuration, for this middleware
    /// and its clones.
    pub fn with_circuit_breaker(self, policy: CircuitBreakerPolicy) -> Self {
        self.with_circuit_breaker_layer(CircuitBreakerLayer::new(policy))
    }

    /// The breakers of `layer`: every middleware and tower stack given a clone of
    /// the same layer sees the same breaker states.
    pub fn with_circuit_breaker_layer(mut self, layer: CircuitBreakerLayer) -> Self {
        self.layers_mut().breaker = Some(layer);
        self
    }

    /// Hedges slow idempotent (or keyed) requests as `policy` says.
    pub fn with_hedge(mut self, policy: HedgePolicy) -> Self {
        self.layers_mut().hedge = Some(HedgeLayer::new(policy));
        self
    }

    /// Stamps an `Idempotency-Key` on each POST and PATCH call that has none, once
    /// per call, so every attempt carries the same key and may be re-sent.
    pub fn with_idempotency_keys(self) -> Self {
        self.with_idempotency_key_layer(IdempotencyKeyLayer::new())
    }

    /// Stamps idempotency keys as `layer` is configured (header, methods, key
    /// generator).
    pub fn with_idempotency_key_layer(mut self, layer: IdempotencyKeyLayer) -> Self {
        self.layers_mut().key = Some(layer);
        self
    }

    /// The budget layer, to read an origin's account.
    pub fn budget(&self) -> Option<&BudgetLayer> {
        self.layers.budget.as_ref()
    }

    /// The circuit breaker layer, to read an origin's state.
    pub fn circuit_breaker(&self) -> Option<&CircuitBreakerLayer> {
        self.layers.breaker.as_ref()
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
        // come along and reach every attempt.
        let mut req = http::Request::<reqwest::Body>::try_from(req)?;
        carry_overrides(extensions, req.extensions_mut());
        self.keep_buffered(&mut req);

        let layers = &*self.layers;
        let send = SendNext::new(
            next,
            CallParts {
                url,
                extensions: extensions.clone(),
                body,
            },
        );
        let retry = Retry::from_settings(maybe(layers.hedge.as_ref(), send), layers.retry.clone());
        let mut stack = maybe(
            layers.key.as_ref(),
            maybe(
                layers.breaker.as_ref(),
                maybe(layers.budget.as_ref(), retry),
            ),
        );
        let result = match poll_fn(|cx| stack.poll_ready(cx)).await {
            Ok(()) => stack.call(req).await,
            Err(e) => Err(e),
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
            None => self.layers.retry.routes.policy_for(req),
        };
        if policy.max_attempts() > 1 && len > policy.replay_cap() {
            let raised = policy.with_replay_cap(len);
            req.extensions_mut().insert(raised);
        }
    }
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
