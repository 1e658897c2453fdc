//! The adaptive throttle in a configuration file: set like the breaker and the
//! budget, written and read back, refused at its field's path.

use std::time::Duration;

use backstop::config::{self, StackConfig};
use backstop::throttle::ThrottlePolicy;

#[test]
fn the_throttle_is_off_unless_a_file_turns_it_on() {
    assert!(config::from_toml("").unwrap().throttle.is_none());
    assert!(config::from_toml("throttle = false")
        .unwrap()
        .throttle
        .is_none());
    let on = config::from_toml("throttle = true").unwrap();
    assert_eq!(on.throttle, Some(ThrottlePolicy::default()));
    assert!(StackConfig::default().throttle.is_none());
}

#[test]
fn a_throttle_set_in_a_file_round_trips_in_every_format() {
    let text = "[throttle]\nk = 1.5\nwindow = \"30s\"\nmax_rejection = 0.9\nseed = 7\n";
    let config = config::from_toml(text).unwrap();
    let want = ThrottlePolicy::builder()
        .k(1.5)
        .window(Duration::from_secs(30))
        .max_rejection(0.9)
        .seed(7)
        .build()
        .unwrap();
    assert_eq!(config.throttle, Some(want.clone()));
    // The whole stack written and read back, in TOML and JSON.
    let toml_text = config::to_toml(&config).unwrap();
    assert!(toml_text.contains("[throttle]"), "{toml_text}");
    assert_eq!(
        config::from_toml(&toml_text).unwrap().throttle,
        Some(want.clone())
    );
    let json = serde_json::to_string(&config).unwrap();
    assert_eq!(
        config::from_json(&json).unwrap().throttle,
        Some(want.clone())
    );
    let yaml = serde_saphyr::to_string(&want).unwrap();
    let from_yaml: ThrottlePolicy = serde_saphyr::from_str(&yaml).unwrap();
    assert_eq!(from_yaml, want);
    // Without a seed, none is written.
    let unseeded = serde_json::to_string(&ThrottlePolicy::default()).unwrap();
    assert_eq!(unseeded, r#"{"k":2.0,"window":"2m","max_rejection":1.0}"#);
    // And it builds a stack that throttles.
    let layer = config.builder().build().unwrap();
    let head = http::Request::get("http://a.test/")
        .body(())
        .unwrap()
        .into_parts()
        .0;
    assert_eq!(layer.throttle_probability(&head), Some(0.0));
}

#[test]
fn a_bad_throttle_setting_is_refused_at_its_path() {
    let cases = [
        (
            "[throttle]\nk = 0.5",
            "throttle.k",
            "must be from 1 to 1000",
        ),
        (
            "[throttle]\nwindow = \"1ms\"",
            "throttle.window",
            "10ms to 1h",
        ),
        (
            "[throttle]\nmax_rejection = 0.0",
            "throttle.max_rejection",
            "more than 0",
        ),
        (
            "[throttle]\nmultiplier = 2.0",
            "throttle.multiplier",
            "unknown field",
        ),
        ("[throttle]\nk = \"two\"", "throttle.k", "invalid type"),
    ];
    for (file, path, says) in cases {
        let err = config::from_toml(file).expect_err(file);
        assert_eq!(err.path(), path, "{file}: {err}");
        assert!(err.message().contains(says), "{file}: {err}");
        assert_eq!(err.to_string().lines().count(), 1, "{err}");
    }
}
