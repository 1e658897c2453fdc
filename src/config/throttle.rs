//! `Serialize` and `Deserialize` for the adaptive throttle, through its spec.

use super::policies::refused;
use super::values::Dur;
use super::ConfigError;
use crate::admit::throttle::ThrottlePolicy;

spec!(
    /// [`ThrottlePolicy`]. Its seed is written when it has one (a simulation's
    /// file), and read back.
    ThrottleSpec {
        k: f64,
        window: Dur,
        max_rejection: f64,
        seed: u64,
    }
);

impl ThrottleSpec {
    pub(crate) fn of(p: &ThrottlePolicy) -> Result<Self, String> {
        Ok(ThrottleSpec {
            k: Some(p.k()),
            window: Some(Dur(p.window())),
            max_rejection: Some(p.max_rejection()),
            seed: p.seed(),
        })
    }

    pub(crate) fn build(self) -> Result<ThrottlePolicy, ConfigError> {
        let mut b = ThrottlePolicy::builder();
        if let Some(k) = self.k {
            b = b.k(k);
        }
        if let Some(w) = self.window {
            b = b.window(w.0);
        }
        if let Some(m) = self.max_rejection {
            b = b.max_rejection(m);
        }
        if let Some(seed) = self.seed {
            b = b.seed(seed);
        }
        b.build().map_err(refused)
    }
}
through_spec!(ThrottlePolicy, ThrottleSpec);
