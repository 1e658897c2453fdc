use super::*;
use crate::policy::classify_error;
use crate::RetryPolicy;
use http::HeaderValue;
use std::error::Error as StdError;
use std::io;

fn progress(tracked: bool, bytes: u64) -> Progress {
    Progress {
        tracked,
        body_bytes: bytes,
        write_began: bytes > 0,
        ..Progress::default()
    }
}

/// Every rung of the ladder, in order, with the verdict it must give.
#[test]
fn ladder_table() {
    let policy = RetryPolicy::default();
    let plain = HeaderMap::new();
    let mut yes = HeaderMap::new();
    yes.insert(X_SHOULD_RETRY, HeaderValue::from_static("true"));
    let mut no = HeaderMap::new();
    no.insert(X_SHOULD_RETRY, HeaderValue::from_static("FALSE"));
    let mut junk = HeaderMap::new();
    junk.insert(X_SHOULD_RETRY, HeaderValue::from_static("maybe"));

    let s = |code: u16| StatusCode::from_u16(code).unwrap();
    let resp = |code: u16, headers| Outcome::Response {
        status: s(code),
        headers,
    };
    use Classification::*;
    use ErrorKind as K;
    use RetryReason as R;
    let get = (Method::GET, false);
    let post = (Method::POST, false);
    let keyed_post = (Method::POST, true);
    let patch = (Method::PATCH, false);

    #[rustfmt::skip]
    type Case<'a> = (&'a str, (Method, bool), Outcome<'a>, Option<Progress>, Classification);
    let cases: Vec<Case<'_>> = vec![
        // 1. an answer
        ("200 GET", get.clone(), resp(200, &plain), None, Answer),
        ("404 GET", get.clone(), resp(404, &plain), None, Answer),
        (
            "500 GET (opt-in)",
            get.clone(),
            resp(500, &plain),
            None,
            Answer,
        ),
        ("200 POST", post.clone(), resp(200, &plain), None, Answer),
        (
            "200 with x-should-retry: false",
            get.clone(),
            resp(200, &no),
            None,
            Answer,
        ),
        // A 2xx is always an answer, whatever x-should-retry says.
        (
            "201 POST x-should-retry: true",
            post.clone(),
            resp(201, &yes),
            None,
            Answer,
        ),
        (
            "204 GET x-should-retry: true",
            get.clone(),
            resp(204, &yes),
            None,
            Answer,
        ),
        // x-should-retry still decides for other statuses.
        (
            "404 x-should-retry: true",
            get.clone(),
            resp(404, &yes),
            None,
            Retryable(R::ServerAsked),
        ),
        // 2. never curable
        (
            "config GET",
            get.clone(),
            Outcome::Error(K::Config),
            None,
            NotRetryable(NoRetry::Permanent),
        ),
        (
            "config POST nothing written",
            post.clone(),
            Outcome::Error(K::Config),
            Some(progress(true, 0)),
            NotRetryable(NoRetry::Permanent),
        ),
        (
            "body write GET",
            get.clone(),
            Outcome::Error(K::BodyWrite),
            None,
            NotRetryable(NoRetry::BodyFailed),
        ),
        // 3. the server's word
        (
            "500 x-should-retry: true",
            get.clone(),
            resp(500, &yes),
            None,
            Retryable(R::ServerAsked),
        ),
        (
            "500 POST x-should-retry: true",
            post.clone(),
            resp(500, &yes),
            None,
            Retryable(R::ServerAsked),
        ),
        (
            "503 x-should-retry: false",
            get.clone(),
            resp(503, &no),
            None,
            NotRetryable(NoRetry::ServerDeclined),
        ),
        (
            "503 x-should-retry: junk",
            get.clone(),
            resp(503, &junk),
            None,
            Retryable(R::Idempotent),
        ),
        // 4. not processed, every method
        (
            "425 POST",
            post.clone(),
            resp(425, &plain),
            None,
            Retryable(R::NotProcessed),
        ),
        (
            "refused stream POST",
            post.clone(),
            Outcome::Error(K::RefusedStream),
            None,
            Retryable(R::NotProcessed),
        ),
        (
            "goaway PATCH",
            patch.clone(),
            Outcome::Error(K::GoAway),
            None,
            Retryable(R::NotProcessed),
        ),
        (
            "canceled POST",
            post.clone(),
            Outcome::Error(K::Canceled),
            None,
            Retryable(R::NotProcessed),
        ),
        (
            "connect POST",
            post.clone(),
            Outcome::Error(K::Connect),
            None,
            Retryable(R::NotProcessed),
        ),
        (
            "dns POST",
            post.clone(),
            Outcome::Error(K::Dns),
            None,
            Retryable(R::NotProcessed),
        ),
        (
            "connect timeout PATCH",
            patch.clone(),
            Outcome::Error(K::ConnectTimeout),
            None,
            Retryable(R::NotProcessed),
        ),
        // 5. idempotent or keyed
        (
            "503 GET",
            get.clone(),
            resp(503, &plain),
            None,
            Retryable(R::Idempotent),
        ),
        (
            "429 PUT",
            (Method::PUT, false),
            resp(429, &plain),
            None,
            Retryable(R::Idempotent),
        ),
        (
            "closed DELETE",
            (Method::DELETE, false),
            Outcome::Error(K::Closed),
            None,
            Retryable(R::Idempotent),
        ),
        (
            "timeout GET",
            get.clone(),
            Outcome::Error(K::Timeout),
            None,
            Retryable(R::Idempotent),
        ),
        (
            "503 keyed POST",
            keyed_post.clone(),
            resp(503, &plain),
            None,
            Retryable(R::Keyed),
        ),
        (
            "closed keyed POST",
            keyed_post.clone(),
            Outcome::Error(K::Closed),
            Some(progress(true, 10)),
            Retryable(R::Keyed),
        ),
        // 6. anything else: only when nothing was written
        (
            "503 POST",
            post.clone(),
            resp(503, &plain),
            None,
            NotRetryable(NoRetry::MaybeProcessed),
        ),
        (
            "503 POST even with a clean record",
            post.clone(),
            resp(503, &plain),
            Some(progress(true, 0)),
            NotRetryable(NoRetry::MaybeProcessed),
        ),
        (
            "closed POST untracked",
            post.clone(),
            Outcome::Error(K::Closed),
            None,
            NotRetryable(NoRetry::MaybeProcessed),
        ),
        (
            "closed POST untracked record",
            post.clone(),
            Outcome::Error(K::Closed),
            Some(progress(false, 0)),
            NotRetryable(NoRetry::MaybeProcessed),
        ),
        (
            "closed POST tracked, nothing written",
            post.clone(),
            Outcome::Error(K::Closed),
            Some(progress(true, 0)),
            Retryable(R::NothingWritten),
        ),
        (
            "closed POST tracked, body written",
            post.clone(),
            Outcome::Error(K::Closed),
            Some(progress(true, 5)),
            NotRetryable(NoRetry::MaybeProcessed),
        ),
        (
            "timeout PATCH tracked, nothing written",
            patch.clone(),
            Outcome::Error(K::Timeout),
            Some(progress(true, 0)),
            Retryable(R::NothingWritten),
        ),
        (
            "timeout PATCH untracked",
            patch.clone(),
            Outcome::Error(K::Timeout),
            None,
            NotRetryable(NoRetry::MaybeProcessed),
        ),
        (
            "other POST untracked",
            post.clone(),
            Outcome::Error(K::Other),
            None,
            NotRetryable(NoRetry::MaybeProcessed),
        ),
    ];
    for (name, (method, keyed), outcome, progress, want) in cases {
        let facts = RequestFacts {
            method: &method,
            keyed,
        };
        assert_eq!(classify(&policy, facts, outcome, progress), want, "{name}");
    }
}

#[test]
fn configured_methods_and_statuses_feed_the_ladder() {
    let policy = RetryPolicy::builder()
        .idempotent_methods([Method::GET, Method::POST])
        .retry_on(500)
        .build()
        .unwrap();
    let headers = HeaderMap::new();
    let facts = RequestFacts {
        method: &Method::POST,
        keyed: false,
    };
    let outcome = Outcome::Response {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        headers: &headers,
    };
    assert_eq!(
        classify(&policy, facts, outcome, None),
        Classification::Retryable(RetryReason::Idempotent)
    );
}

/// The classifier's verdicts, and how each meets write safety: the request
/// (idempotent, keyed, neither) and what the record proves.
#[test]
fn classifier_verdicts_table() {
    use crate::policy::{classify_fn, Decision, Observed, Rules, Verdict};
    use Classification::*;
    use RetryReason as R;

    let verdicts = [
        Verdict::Answer,
        Verdict::NeverCurable,
        Verdict::Declined,
        Verdict::NotProcessed,
        Verdict::IfIdempotent,
        Verdict::IfNothingWritten,
    ];
    let clean = Some(progress(true, 0));
    let written = Some(progress(true, 5));
    let maybe = NotRetryable(NoRetry::MaybeProcessed);
    let headers = HeaderMap::new();
    let response = Outcome::Response {
        status: StatusCode::OK,
        headers: &headers,
    };
    let error = Outcome::Error(ErrorKind::Closed);
    // (verdict, outcome, idempotent, keyed, progress, want)
    #[rustfmt::skip]
    let cases: Vec<(Verdict, Outcome<'_>, bool, bool, Option<Progress>, Classification)> = vec![
        (Verdict::Answer, response, true, false, None, Answer),
        (Verdict::Answer, error, true, false, clean, Answer),
        (Verdict::NeverCurable, response, true, false, None, NotRetryable(NoRetry::Permanent)),
        (Verdict::NeverCurable, error, false, false, clean, NotRetryable(NoRetry::Permanent)),
        (Verdict::Declined, response, true, true, None, NotRetryable(NoRetry::ServerDeclined)),
        // Not processed: any method, even after a response.
        (Verdict::NotProcessed, response, false, false, None, Retryable(R::NotProcessed)),
        (Verdict::NotProcessed, error, false, false, written, Retryable(R::NotProcessed)),
        // Retryable when idempotent or keyed...
        (Verdict::IfIdempotent, response, true, false, None, Retryable(R::Idempotent)),
        (Verdict::IfIdempotent, response, false, true, None, Retryable(R::Keyed)),
        (Verdict::IfIdempotent, error, true, false, written, Retryable(R::Idempotent)),
        // ...and for a keyless POST it falls to "only if nothing was written".
        (Verdict::IfIdempotent, response, false, false, None, maybe),
        (Verdict::IfIdempotent, response, false, false, clean, maybe),
        (Verdict::IfIdempotent, error, false, false, None, maybe),
        (Verdict::IfIdempotent, error, false, false, written, maybe),
        (Verdict::IfIdempotent, error, false, false, clean, Retryable(R::NothingWritten)),
        // Only if nothing was written, whatever the method.
        (Verdict::IfNothingWritten, error, true, false, clean, Retryable(R::NothingWritten)),
        (Verdict::IfNothingWritten, error, true, true, written, maybe),
        (Verdict::IfNothingWritten, error, true, false, None, maybe),
        (Verdict::IfNothingWritten, response, true, false, clean, maybe),
    ];
    for (verdict, outcome, idempotent, keyed, progress, want) in cases {
        let wait = std::time::Duration::from_millis(300);
        let rules = Rules::builder()
            .classifier(classify_fn(move |_: Observed<'_>| verdict.after(wait)))
            .build()
            .unwrap();
        let (got, hint) = ladder(&rules, idempotent, keyed, outcome, None, progress);
        let name =
            format!("{verdict:?} {outcome:?} idempotent={idempotent} keyed={keyed} {progress:?}");
        assert_eq!(got, want, "{name}");
        // The hint rides only with a retryable verdict.
        assert_eq!(hint, got.is_retryable().then_some(wait), "{name}");
    }
    assert_eq!(verdicts.len(), 6);

    // No opinion: the built-in rules, every rung of them.
    let none = Rules::builder()
        .classifier(classify_fn(|_: Observed<'_>| Decision::NO_OPINION))
        .build()
        .unwrap();
    let unavailable = Outcome::Response {
        status: StatusCode::SERVICE_UNAVAILABLE,
        headers: &headers,
    };
    for (outcome, idempotent, want) in [
        (unavailable, true, Retryable(R::Idempotent)),
        (unavailable, false, maybe),
        (response, true, Answer),
        (
            Outcome::Error(ErrorKind::Config),
            true,
            NotRetryable(NoRetry::Permanent),
        ),
        (
            Outcome::Error(ErrorKind::GoAway),
            false,
            Retryable(R::NotProcessed),
        ),
    ] {
        let (got, hint) = ladder(&none, idempotent, false, outcome, None, None);
        assert_eq!(got, want, "{outcome:?}");
        assert_eq!(hint, None);
        assert_eq!(
            got,
            ladder(&Rules::default(), idempotent, false, outcome, None, None).0
        );
    }
}

#[test]
fn the_classifier_reads_the_error_chain() {
    use crate::policy::{classify_fn, Observed, Rules, Verdict};
    let rules = Rules::builder()
        .classifier(classify_fn(|o: Observed<'_>| match o {
            Observed::Error { error: Some(e), .. }
                if crate::policy::chain(e).any(|e| e.is::<fmt::Error>()) =>
            {
                Verdict::NotProcessed
            }
            _ => Verdict::NoOpinion,
        }))
        .build()
        .unwrap();
    let err = Wrapper(Box::new(fmt::Error));
    let other = Outcome::Error(ErrorKind::Other);
    let (class, _) = ladder(&rules, false, false, other, Some(&err), None);
    assert_eq!(class, Classification::Retryable(RetryReason::NotProcessed));
    let (class, _) = ladder(&rules, false, false, other, None, None);
    assert_eq!(class, Classification::NotRetryable(NoRetry::MaybeProcessed));
}

#[test]
fn error_kinds_left_out_are_not_retried() {
    let rules = crate::policy::Rules::builder()
        .retryable_errors([ErrorKind::Connect])
        .build()
        .unwrap();
    let excluded = Classification::NotRetryable(NoRetry::KindExcluded);
    for (kind, want) in [
        (
            ErrorKind::Connect,
            Classification::Retryable(RetryReason::NotProcessed),
        ),
        (ErrorKind::Dns, excluded),
        (ErrorKind::Timeout, excluded),
        (ErrorKind::Closed, excluded),
        (
            ErrorKind::GoAway,
            Classification::Retryable(RetryReason::NotProcessed),
        ),
        (
            ErrorKind::Config,
            Classification::NotRetryable(NoRetry::Permanent),
        ),
    ] {
        let (got, _) = ladder(&rules, true, false, Outcome::Error(kind), None, None);
        assert_eq!(got, want, "{kind:?}");
    }
}

#[test]
fn tower_elapsed_and_unreachable_are_recognised() {
    let elapsed = tower::timeout::error::Elapsed::new();
    assert_eq!(classify_error(&elapsed), ErrorKind::Timeout);
    let boxed: Box<dyn StdError + Send + Sync> = Box::new(elapsed);
    assert_eq!(classify_error(&Wrapper(boxed)), ErrorKind::Timeout);
    // The same text on another type is not tower's.
    assert_eq!(
        classify_error(&io::Error::other("request timed out")),
        ErrorKind::Other
    );
    assert_eq!(
        classify_error(&io::Error::from(io::ErrorKind::HostUnreachable)),
        ErrorKind::Connect
    );
    assert_eq!(
        classify_error(&io::Error::from(io::ErrorKind::NetworkUnreachable)),
        ErrorKind::Connect
    );
}

#[test]
fn io_errors_by_kind() {
    use io::ErrorKind as I;
    let cases = [
        (I::ConnectionRefused, ErrorKind::Connect),
        (I::ConnectionReset, ErrorKind::Closed),
        (I::BrokenPipe, ErrorKind::Closed),
        (I::UnexpectedEof, ErrorKind::Closed),
        (I::TimedOut, ErrorKind::Timeout),
        (I::InvalidInput, ErrorKind::Config),
        (I::Other, ErrorKind::Other),
    ];
    for (io_kind, want) in cases {
        assert_eq!(
            classify_error(&io::Error::from(io_kind)),
            want,
            "{io_kind:?}"
        );
    }
}

#[derive(Debug)]
struct Wrapper(Box<dyn StdError + Send + Sync>);
impl fmt::Display for Wrapper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("wrapper")
    }
}
impl StdError for Wrapper {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&*self.0)
    }
}

#[test]
fn source_chain_is_walked() {
    let err = Wrapper(Box::new(io::Error::from(io::ErrorKind::ConnectionRefused)));
    assert_eq!(classify_error(&err), ErrorKind::Connect);
    let bad_uri = "http://exa mple".parse::<http::Uri>().unwrap_err();
    assert_eq!(
        classify_error(&Wrapper(Box::new(bad_uri))),
        ErrorKind::Config
    );
    let wrapped_io = io::Error::other(Wrapper(Box::new(io::Error::from(
        io::ErrorKind::ConnectionReset,
    ))));
    assert_eq!(classify_error(&wrapped_io), ErrorKind::Closed);
    assert_eq!(
        classify_error(&Wrapper(Box::new(fmt::Error))),
        ErrorKind::Other
    );
}

#[cfg(feature = "hyper")]
#[test]
fn h2_errors() {
    let refused = h2::Error::from(h2::Reason::REFUSED_STREAM);
    // A reason built locally is not the server's word.
    assert_eq!(classify_error(&refused), ErrorKind::Closed);
}
