//! Rules a program registers by name, for files to refer to: a classifier is
//! code, so a file names the rules that hold it and never carries it.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use crate::policy::Rules;

/// Rules registered by name, which a file refers to (`rules = { name = "payments" }`):
/// a classifier of your own is code, so a file can name the rules that hold it, and
/// never carries or loses it.
///
/// Every registry knows `"default"` ([`Rules::default()`]) and, with feature
/// `grpc`, `"grpc"` (gRPC's [rules](crate::grpc::rules), retrying `UNAVAILABLE`).
/// Read a file through a registry ([`Registry::from_toml`] and the like), or run
/// any `serde` deserialization inside [`Registry::scope`]; outside both, a file
/// can name only the rules every registry knows.
///
/// # Examples
///
/// ```
/// use backstop::config::Registry;
/// use backstop::policy::{classify_fn, Observed, Rules, Verdict};
///
/// let teapots = Rules::builder()
///     .classifier(classify_fn(|outcome: Observed<'_>| match outcome {
///         Observed::Response { status, .. } if status.as_u16() == 418 => {
///             Verdict::IfIdempotent
///         }
///         _ => Verdict::NoOpinion,
///     }))
///     .build()?;
/// let registry = Registry::new().rules("teapots", teapots);
/// assert!(registry.get("teapots").is_some_and(|r| r.has_classifier()));
/// assert_eq!(registry.get("teapots").and_then(|r| r.name()), Some("teapots"));
/// # Ok::<(), backstop::policy::InvalidConfig>(())
/// ```
#[derive(Clone, Debug)]
pub struct Registry {
    rules: HashMap<String, Rules>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry::new()
    }
}

impl Registry {
    /// A registry of the built-in rules.
    pub fn new() -> Self {
        let mut rules = HashMap::new();
        rules.insert("default".to_owned(), Rules::default().named("default"));
        #[cfg(feature = "grpc")]
        if let Ok(grpc) = crate::grpc::rules().build() {
            rules.insert("grpc".to_owned(), grpc.named("grpc"));
        }
        Registry { rules }
    }

    /// Registers `rules` under `name` (naming them so, so a policy that uses them
    /// is written with the name), replacing any rules of that name.
    pub fn rules(mut self, name: &str, rules: Rules) -> Self {
        self.rules.insert(name.to_owned(), rules.named(name));
        self
    }

    /// The rules registered under `name`.
    pub fn get(&self, name: &str) -> Option<&Rules> {
        self.rules.get(name)
    }

    /// Runs `f` with this registry as the one files' rule names are looked up
    /// in, on this thread: for a `serde` deserialization of backstop's policies
    /// inside a structure of your own.
    pub fn scope<R>(&self, f: impl FnOnce() -> R) -> R {
        let previous = CURRENT.with(|c| c.replace(Some(Rc::new(self.clone()))));
        // Put back on the way out, even if `f` panics.
        struct Restore(Option<Rc<Registry>>);
        impl Drop for Restore {
            fn drop(&mut self) {
                let previous = self.0.take();
                CURRENT.with(|c| *c.borrow_mut() = previous);
            }
        }
        let _restore = Restore(previous);
        f()
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Rc<Registry>>> = const { RefCell::new(None) };
}

/// The rules named `name` in the registry in scope (else the built-in ones).
pub(crate) fn named(name: &str) -> Result<Rules, String> {
    static BUILT_IN: std::sync::LazyLock<Registry> = std::sync::LazyLock::new(Registry::new);
    let found = CURRENT.with(|c| c.borrow().as_ref().map(|r| r.get(name).cloned()));
    let found = match found {
        Some(found) => found,
        None => BUILT_IN.get(name).cloned(),
    };
    found.ok_or_else(|| {
        "no rules are registered under this name (register them with config::Registry)".to_owned()
    })
}
