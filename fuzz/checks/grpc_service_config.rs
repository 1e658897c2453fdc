//! `grpc_service_config`: arbitrary bytes read as a gRPC service config by
//! `backstop::config::grpc::from_json`. Never a panic, and:
//!
//! - an error is one line, and so is every unmapped field's path;
//! - a config that was read builds a stack (with its hedge policy when it has one);
//! - keys are read without regard to ASCII case, as the docs say: the same
//!   document with every key in upper case gives the same result (the same routes
//!   and unmapped fields, or an error at the same path), whenever upper-casing
//!   makes no two keys of an object the same.

use backstop::config::grpc::from_json;
use backstop::config::{ConfigError, StackConfig};
use serde_json::{Map, Value};

/// What a result comes to, with paths in lower case.
#[derive(Debug, PartialEq)]
enum Seen {
    Read {
        routes: usize,
        unmapped: Vec<String>,
    },
    Refused(String),
}

fn seen(result: Result<backstop::config::Imported<StackConfig>, ConfigError>) -> Seen {
    match result {
        Ok(imported) => {
            let mut unmapped: Vec<String> = imported
                .unmapped()
                .iter()
                .map(|u| {
                    assert!(!u.to_string().contains(['\n', '\r']), "{u:?}");
                    u.path().to_ascii_lowercase()
                })
                .collect();
            unmapped.sort();
            let config = imported.lenient();
            let routes = config.routes.iter().len();
            if let Err(e) = super::build(config) {
                panic!("a config that was read does not build: {e}");
            }
            Seen::Read { routes, unmapped }
        }
        Err(e) => {
            super::one_line(&e);
            Seen::Refused(e.path().to_ascii_lowercase())
        }
    }
}

/// `value` with every key in ASCII upper case; `None` when two keys of an object
/// become the same.
fn upper(value: &Value) -> Option<Value> {
    Some(match value {
        Value::Object(map) => {
            let mut out = Map::new();
            for (key, value) in map {
                if out
                    .insert(key.to_ascii_uppercase(), upper(value)?)
                    .is_some()
                {
                    return None;
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(upper).collect::<Option<_>>()?),
        other => other.clone(),
    })
}

pub fn check(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let first = super::in_runtime(|| seen(from_json(&text)));
    let Ok(value) = serde_json::from_str::<Value>(&text) else {
        return;
    };
    let Some(shouted) = upper(&value) else {
        return;
    };
    let again = super::in_runtime(|| seen(from_json(&shouted.to_string())));
    assert_eq!(first, again, "keys in upper case read differently");
}
