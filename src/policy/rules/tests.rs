use super::*;

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
