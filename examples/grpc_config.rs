//! A gRPC service config read into backstop's stack: the routes and policies it
//! maps to, and the fields it could not map.
//!
//! ```text
//! cargo run --example grpc_config --features grpc,json [-- path/to/service_config.json]
//! ```
//!
//! Without a path it reads `examples/service_config.json`. It prints each route
//! with its retry policy (attempts, backoff, timeout, the status codes it
//! retries) and hedging, the budget, and every unmapped field with its path; then
//! it builds the stack and ends.

use std::error::Error;

use backstop::config::grpc;
use backstop::grpc::Code;
use backstop::policy::Rules;
use backstop::retry::{PathMatch, RoutePolicy};

fn main() -> Result<(), Box<dyn Error>> {
    let path = std::env::args().nth(1).unwrap_or_else(|| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/examples/service_config.json").to_owned()
    });
    let text = std::fs::read_to_string(&path)?;
    let imported = grpc::from_json(&text).map_err(|e| format!("{path}: {e}"))?;

    println!("unmapped fields:");
    for field in imported.unmapped() {
        println!("  {field}");
    }
    let config = imported.lenient();

    println!("routes, tried in this order:");
    for (route, policy) in config.routes.iter() {
        let matches = match route.path() {
            Some(PathMatch::Exact(path)) => path.clone(),
            Some(PathMatch::Prefix(prefix)) => format!("{prefix}/*"),
            _ => "any".to_owned(),
        };
        println!("  {:<28} {matches}", route.name().unwrap_or("-"));
        describe(policy);
    }
    println!("  {:<28} every other call", "(default)");
    describe(config.routes.default_policy());

    if let Some(budget) = &config.budget {
        println!(
            "budget: {} retries per first attempt, at least {} per {:?}",
            budget.ratio(),
            budget.floor(),
            budget.window()
        );
    }

    // The stack: with the hedge layer its hedging routes need.
    let built = match config.hedge.clone() {
        Some(hedge) => config.builder().hedge(hedge).build().map(|_| ()),
        None => config.builder().build().map(|_| ()),
    };
    built?;
    println!("the stack is built");
    Ok(())
}

fn describe(policy: &RoutePolicy) {
    let retry = policy.retry_policy();
    let backoff = retry.backoff();
    println!(
        "      {} attempts, backoff {:?} doubling to {:?}, timeout {}",
        retry.max_attempts(),
        backoff.base(),
        backoff.max(),
        retry
            .timeout()
            .map_or("none".to_owned(), |t| format!("{t:?}")),
    );
    println!(
        "      retries {} (and a call the server never processed)",
        codes(retry)
    );
    match policy.hedging().and_then(|h| h.policy()) {
        Some(hedge) => println!(
            "      hedged: up to {} extra copies, which keep running past {}",
            hedge.max_extra(),
            codes(hedge.rules())
        ),
        None => println!("      not hedged"),
    }
}

/// The status codes `rules` retry (or, a hedge's, survive).
fn codes(rules: &(impl AsRef<Rules> + ?Sized)) -> String {
    let retried: Vec<String> = (1..=16)
        .filter_map(|n: u32| n.to_string().parse::<Code>().ok())
        .filter(|code| grpc::retries_code(rules, *code))
        .map(|code| code.to_string())
        .collect();
    if retried.is_empty() {
        "no status code".to_owned()
    } else {
        retried.join(", ")
    }
}
