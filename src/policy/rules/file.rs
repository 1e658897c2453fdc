//! What of the rules a configuration file names and writes.

use std::sync::Arc;

use super::Rules;

impl Rules {
    /// These rules under `name`, the name a configuration file refers to them by
    /// (see [`config::Registry`](crate::config::Registry)); rules with a classifier
    /// of your own are written to a file only by their name.
    pub fn named(mut self, name: impl Into<Arc<str>>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The rules' [name](Rules::named), if they have one.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }
}

#[cfg(feature = "serde")]
mod written {
    use http::{Method, StatusCode};

    use super::super::{KindSet, Rules};
    use crate::policy::ErrorKind;

    impl Rules {
        /// Whether the rules hold code that no file can write: a classifier, or a
        /// protocol's stamp.
        pub(crate) fn has_code(&self) -> bool {
            self.classifier.is_some() || self.stamp_with.is_some()
        }

        /// The settings a file writes: retryable statuses, retryable error kinds
        /// (of those that are a setting), the idempotent methods when not RFC
        /// 9110's.
        pub(crate) fn settings(&self) -> (Vec<u16>, Vec<ErrorKind>, Option<Vec<Method>>) {
            let statuses = (400..=599)
                .filter(|c| StatusCode::from_u16(*c).is_ok_and(|s| self.statuses.contains(s)))
                .collect();
            let kinds = ErrorKind::ALL
                .into_iter()
                .filter(|k| KindSet::bit(*k).is_some() && self.errors.allows(*k))
                .collect();
            let methods = self.idempotent_methods.as_ref().map(|m| m.iter().collect());
            (statuses, kinds, methods)
        }
    }
}
