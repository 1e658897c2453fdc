use std::time::Duration;

use super::*;

fn dur(text: &str) -> Result<Duration, ConfigError> {
    duration(&Node::Str(text.to_owned()), "d")
}

#[test]
fn durations_are_gep_2257s() {
    assert_eq!(dur("10s"), Ok(Duration::from_secs(10)));
    assert_eq!(dur("1h2m3s4ms"), Ok(Duration::from_millis(3_723_004)));
    assert_eq!(dur("0s"), Ok(Duration::ZERO));
    assert_eq!(dur("00060m"), Ok(Duration::from_secs(3600)));
    // Repeated units are summed, as GEP-2257 allows.
    assert_eq!(
        dur("1h2h20m10m"),
        Ok(Duration::from_secs(3 * 3600 + 30 * 60))
    );
    for bad in [
        "",
        "0",
        "1.5s",
        "-1s",
        "1us",
        "10 s",
        "123456s",
        "1h1m1s1ms1h",
        "s",
        "1sx",
        "1é",
        " 1s",
    ] {
        let err = dur(bad).unwrap_err();
        assert_eq!(err.path(), "d", "{bad:?}");
        assert!(err.message().starts_with("must be a Gateway API duration"));
    }
    assert_eq!(
        duration(&Node::Int(10), "d").unwrap_err().to_string(),
        "d: expected a string, found an integer"
    );
}

#[test]
fn paths_kubernetes_refuses_are_refused() {
    for good in ["/", "/foo", "/foo/", "/a-b_c.d~e/%20", "/v1:batch"] {
        assert_eq!(bad_path(good), None, "{good}");
    }
    for bad in [
        "foo", "//", "/a//b", "/a/./b", "/a/../b", "/a/..", "/a/.", "/a%2Fb", "/a#b", "/a b", "/ä",
    ] {
        assert!(bad_path(bad).is_some(), "{bad}");
    }
    assert!(bad_path(&format!("/{}", "a".repeat(1024))).is_some());
}

#[test]
fn ranks_order_as_gateway_api_precedence() {
    let rank = |any_host, prefix, length, any_method, object: &str, rule| Rank {
        any_host,
        prefix,
        length: Reverse(length),
        any_method,
        object: object.to_owned(),
        document: 1,
        rule,
        matched: 0,
    };
    let mut ranks = [
        rank(true, true, 1, true, "a", 0),
        rank(true, true, 4, true, "a", 0),
        rank(true, true, 4, false, "a", 1),
        rank(true, false, 2, true, "b", 0),
        rank(false, true, 1, true, "z", 0),
        rank(true, true, 4, false, "a", 0),
    ];
    ranks.sort();
    let order: Vec<_> = ranks
        .iter()
        .map(|r| (r.any_host, r.prefix, r.length.0, r.any_method, r.rule))
        .collect();
    assert_eq!(
        order,
        [
            (false, true, 1, true, 0),
            (true, false, 2, true, 0),
            (true, true, 4, false, 0),
            (true, true, 4, false, 1),
            (true, true, 4, true, 0),
            (true, true, 1, true, 0),
        ]
    );
}
