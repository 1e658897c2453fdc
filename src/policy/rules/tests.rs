use super::*;
use crate::policy::{same_in_every_order, InvalidConfig};
use proptest::prelude::*;

#[test]
fn defaults_retry_the_transient_statuses_and_kinds() {
    let r = Rules::default();
    for code in [408, 429, 502, 503, 504] {
        assert!(r.is_retryable_status(StatusCode::from_u16(code).unwrap()));
    }
    for code in [200, 400, 404, 500, 501, 599] {
        assert!(!r.is_retryable_status(StatusCode::from_u16(code).unwrap()));
    }
    for kind in SETTABLE_KINDS {
        assert!(r.is_retryable_error(kind), "{kind:?}");
    }
    assert!(!r.is_retryable_error(ErrorKind::Config));
    assert!(!r.is_retryable_error(ErrorKind::BodyWrite));
    assert_eq!(format!("{:?}", r.statuses), "{408, 429, 502, 503, 504}");
}

#[test]
fn error_kinds_are_a_setting() {
    let r = Rules::builder()
        .retryable_errors([ErrorKind::Connect, ErrorKind::Dns])
        .build()
        .unwrap();
    assert!(r.is_retryable_error(ErrorKind::Connect));
    assert!(r.is_retryable_error(ErrorKind::Dns));
    assert!(!r.is_retryable_error(ErrorKind::Timeout));
    assert!(!r.is_retryable_error(ErrorKind::Closed));
    // Not processed: always.
    assert!(r.is_retryable_error(ErrorKind::RefusedStream));
    assert_eq!(format!("{:?}", r.errors), r#"{"connect", "dns"}"#);
    let err = Rules::builder()
        .retryable_errors([ErrorKind::Config])
        .build()
        .unwrap_err();
    assert_eq!(err.setting(), "retryable_errors");
    let err = Rules::builder().retry_on(302).build().unwrap_err();
    assert_eq!(err.setting(), "retry_on");
}

#[test]
fn the_classifier_decides_idempotency_when_it_knows() {
    struct Paths;
    impl Classifier for Paths {
        fn classify(&self, _: Observed<'_>) -> Decision {
            Decision::NO_OPINION
        }
        fn is_idempotent(&self, _: &Method, uri: &Uri) -> Option<bool> {
            Some(uri.path() == "/read")
        }
    }
    let r = Rules::builder().classifier(Paths).build().unwrap();
    let read: Uri = "http://h/read".parse().unwrap();
    let write: Uri = "http://h/write".parse().unwrap();
    assert!(r.is_idempotent(&Method::POST, &read));
    assert!(!r.is_idempotent(&Method::GET, &write));
    assert!(Rules::default().is_idempotent(&Method::GET, &write));
}

type Step<'a> = dyn Fn(RulesBuilder) -> RulesBuilder + 'a;

fn built(b: RulesBuilder) -> Result<String, InvalidConfig> {
    b.build().map(|r| format!("{r:?}"))
}

#[test]
fn the_rules_do_not_depend_on_the_order_of_the_calls() {
    let steps: [&Step<'_>; 7] = [
        &|b| b.retryable_statuses([500, 503]),
        &|b| b.retry_on(418),
        &|b| b.retry_on(429),
        &|b| b.retryable_errors([ErrorKind::Connect, ErrorKind::Dns]),
        &|b| b.idempotent_methods([Method::GET]),
        &|b| b.idempotency_header(HeaderName::from_static("x-key")),
        &|b| b.attempt_header(HeaderName::from_static("x-attempt")),
    ];
    let rules = same_in_every_order(&Rules::builder(), &steps, built).unwrap();
    // `retry_on` adds to the list `retryable_statuses` gives, before or after it.
    assert!(rules.contains("statuses: {418, 429, 500, 503}"), "{rules}");
    assert!(rules.contains(r#"errors: {"connect", "dns"}"#), "{rules}");
    assert!(rules.contains("idempotent_methods: Some([GET])"), "{rules}");
    // A setter given twice keeps its last value; each `retry_on` adds one status.
    let twice = Rules::builder()
        .retryable_statuses([500])
        .retry_on(418)
        .retryable_statuses([503])
        .build()
        .unwrap();
    assert_eq!(format!("{:?}", twice.statuses), "{418, 503}");
}

#[test]
fn the_first_invalid_setting_does_not_depend_on_the_order_of_the_calls() {
    struct Nothing;
    impl Classifier for Nothing {
        fn classify(&self, _: Observed<'_>) -> Decision {
            Decision::NO_OPINION
        }
    }
    let shared: Arc<dyn Classifier> = Arc::new(Nothing);
    let steps: [&Step<'_>; 5] = [
        &|b| b.retry_on(99),
        &|b| b.retryable_statuses([503, 600]),
        &|b| b.retry_on(302),
        &|b| b.retryable_errors([ErrorKind::Config]),
        &|b| b.classifier(Nothing),
    ];
    let err = same_in_every_order(&Rules::builder(), &steps, built).unwrap_err();
    // The smallest status out of range, whichever call gave it.
    assert_eq!(
        err.to_string(),
        "invalid retry_on: status must be 400 to 599, got 99"
    );
    let err = same_in_every_order(&Rules::builder(), &steps[1..], built).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid retry_on: status must be 400 to 599, got 302"
    );
    let err = same_in_every_order(&Rules::builder(), &steps[3..], built).unwrap_err();
    assert_eq!(err.setting(), "retryable_errors");
    // `classifier` and `shared_classifier` set the same classifier: refused together.
    let pair: [&Step<'_>; 2] = [&|b| b.classifier(Nothing), &|b| {
        b.shared_classifier(shared.clone())
    }];
    let err = same_in_every_order(&Rules::builder(), &pair, built).unwrap_err();
    assert_eq!(err.setting(), "classifier");
    assert!(err.to_string().contains("`shared_classifier`"), "{err}");
    assert!(Rules::builder()
        .shared_classifier(shared)
        .build()
        .unwrap()
        .has_classifier());
}

/// One call of a rules builder's status settings.
#[derive(Clone, Debug)]
enum StatusCall {
    Replace(Vec<u16>),
    Add(u16),
}

fn status_calls() -> impl Strategy<Value = (Vec<StatusCall>, Vec<StatusCall>)> {
    let code = prop_oneof![8 => 400u16..600, 1 => 0u16..1000];
    let list = proptest::collection::vec(code.clone(), 0..6);
    (
        proptest::option::of(list),
        proptest::collection::vec(code, 0..6),
    )
        .prop_flat_map(|(replace, added)| {
            let calls: Vec<StatusCall> = replace
                .into_iter()
                .map(StatusCall::Replace)
                .chain(added.into_iter().map(StatusCall::Add))
                .collect();
            (Just(calls.clone()), Just(calls).prop_shuffle())
        })
}

fn apply(calls: &[StatusCall]) -> Result<String, InvalidConfig> {
    let b = calls.iter().fold(Rules::builder(), |b, call| match call {
        StatusCall::Replace(list) => b.retryable_statuses(list.clone()),
        StatusCall::Add(code) => b.retry_on(*code),
    });
    built(b)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// `retryable_statuses` and any number of `retry_on`, in any order: the same
    /// rules, or the same refusal.
    #[test]
    fn statuses_do_not_depend_on_the_order_of_the_calls((given, shuffled) in status_calls()) {
        prop_assert_eq!(apply(&given), apply(&shuffled));
    }
}
