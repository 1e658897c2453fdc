use super::flat::{method_tag, HeadCopy, FLAT_LIMIT, INLINE, METHODS, PRELUDE, VERSIONS};
use super::*;
use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, Method, Uri, Version};
use proptest::prelude::*;

fn round_trip(uri: &Uri, headers: &HeaderMap) -> (Uri, HeaderMap) {
    let mut req = Request::new(());
    *req.uri_mut() = uri.clone();
    *req.headers_mut() = headers.clone();
    let back = Head::of(&req).request(()).unwrap();
    (back.uri().clone(), back.headers().clone())
}

fn pairs(map: &HeaderMap) -> Vec<(String, Vec<u8>, bool)> {
    map.iter()
        .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec(), v.is_sensitive()))
        .collect()
}

fn uri_parts(uri: &Uri) -> (Option<String>, Option<String>, Option<String>, String) {
    (
        uri.scheme_str().map(str::to_owned),
        uri.authority().map(|a| a.as_str().to_owned()),
        uri.path_and_query().map(|p| p.as_str().to_owned()),
        uri.to_string(),
    )
}

fn flat(kept: &HeadCopy) -> bool {
    matches!(kept, HeadCopy::Flat(_) | HeadCopy::Inline(_))
}

/// The copy of a GET's head.
fn copy(uri: &Uri, headers: &HeaderMap) -> HeadCopy {
    HeadCopy::of(&Method::GET, Version::HTTP_11, uri, headers)
}

#[test]
fn headers_come_back_in_order_with_every_value_and_flag() {
    let mut map = HeaderMap::new();
    map.append("accept", HeaderValue::from_static("text/html"));
    map.append("x-custom-name", HeaderValue::from_static("one"));
    map.append("accept", HeaderValue::from_static("application/json"));
    let mut secret = HeaderValue::from_static("Bearer t0ken");
    secret.set_sensitive(true);
    map.append("authorization", secret);
    map.append("x-empty", HeaderValue::from_static(""));
    map.append("x-obs", HeaderValue::from_bytes(b"caf\xe9").unwrap());
    let uri = Uri::from_static("https://api.example.com:8443/v1/items?page=2");
    let (back_uri, back) = round_trip(&uri, &map);
    assert_eq!(pairs(&back), pairs(&map));
    assert!(back.get("authorization").unwrap().is_sensitive());
    assert_eq!(uri_parts(&back_uri), uri_parts(&uri));
}

#[test]
fn every_uri_form_comes_back() {
    for text in [
        "http://a.test",
        "http://a.test/",
        "https://user:pw@A.Test:443/p/a/t/h?q=1&r=%20",
        "http://[::1]:8080/x",
        "custom+scheme://host/path",
        "/origin/form?x=y",
        "*",
        "authority.test:443",
        "/",
    ] {
        let uri: Uri = text.parse().unwrap();
        let kept = copy(&uri, &HeaderMap::new());
        assert!(flat(&kept), "{text} is kept as text");
        let (back, _) = round_trip(&uri, &HeaderMap::new());
        assert_eq!(back, uri, "{text}");
        assert_eq!(uri_parts(&back), uri_parts(&uri), "{text}");
    }
}

#[test]
fn a_uri_whose_text_would_read_back_differently_is_cloned() {
    // `from_parts` takes `*` after an authority; `http://a.test*` would not parse
    // back to the same parts, so the URI is kept as it is.
    let mut parts = http::uri::Parts::default();
    parts.scheme = Some(http::uri::Scheme::HTTP);
    parts.authority = Some("a.test".parse().unwrap());
    parts.path_and_query = Some("*".parse().unwrap());
    let odd = Uri::from_parts(parts).unwrap();
    let kept = copy(&odd, &HeaderMap::new());
    assert!(!flat(&kept));
    let (back, _) = round_trip(&odd, &HeaderMap::new());
    assert_eq!(uri_parts(&back), uri_parts(&odd));
}

#[test]
fn uris_whose_text_would_read_back_otherwise_are_cloned_as_they_are() {
    // Within the path's own limit, over the limit of the whole text.
    let long = format!("/{}", "a".repeat(65_529));
    let cases = [
        Uri::builder()
            .scheme("")
            .authority("api.test")
            .path_and_query("/x"),
        Uri::builder().authority("*"),
        Uri::builder()
            .scheme("HTTPS")
            .authority("a.test")
            .path_and_query("/x"),
        Uri::builder()
            .scheme("Http")
            .authority("a.test")
            .path_and_query("/x"),
        Uri::builder()
            .scheme("FTP")
            .authority("a.test")
            .path_and_query("/x"),
        Uri::builder(),
        Uri::builder()
            .scheme("http")
            .authority("a.test")
            .path_and_query(long.as_str()),
    ];
    for builder in cases {
        let uri = builder.build().unwrap();
        assert!(!flat(&copy(&uri, &HeaderMap::new())), "{uri}");
        let (back, _) = round_trip(&uri, &HeaderMap::new());
        assert_eq!(back, uri);
        assert_eq!(back.scheme(), uri.scheme());
        assert_eq!(uri_parts(&back), uri_parts(&uri));
    }
}

#[test]
fn an_empty_scheme_never_sends_a_retry_to_another_host() {
    // Scheme "", authority "https:", path "//elsewhere.test/steal": as text
    // without its scheme this would read back as https://elsewhere.test/steal.
    let uri: Uri = "://https://elsewhere.test/steal".parse().unwrap();
    assert_eq!(uri.scheme_str(), Some(""));
    assert!(!flat(&copy(&uri, &HeaderMap::new())));
    let (back, _) = round_trip(&uri, &HeaderMap::new());
    assert_eq!(back, uri);
    assert_eq!(back.host(), uri.host());
    assert_eq!(uri_parts(&back), uri_parts(&uri));
}

#[test]
fn small_heads_are_kept_flat_and_large_ones_cloned() {
    let uri = Uri::from_static("http://a.test/");
    let mut small = HeaderMap::new();
    small.insert("accept", HeaderValue::from_static("*/*"));
    assert!(flat(&copy(&uri, &small)));
    assert!(flat(&copy(&uri, &HeaderMap::new())));

    let mut large = HeaderMap::new();
    let big = "x".repeat(FLAT_LIMIT);
    large.insert("cookie", HeaderValue::from_str(&big).unwrap());
    assert!(!flat(&copy(&uri, &large)));
    let (back_uri, back) = round_trip(&uri, &large);
    assert_eq!(back, large);
    assert_eq!(back_uri, uri);
}

#[test]
fn a_damaged_record_reads_back_as_none_or_less_not_a_panic() {
    let uri = Uri::from_static("/x");
    let mut map = HeaderMap::new();
    map.insert("accept", HeaderValue::from_static("*/*"));
    let HeadCopy::Inline(inline) = copy(&uri, &map) else {
        panic!("expected a flat head in place");
    };
    let buf = inline.bytes();
    let uri_end = PRELUDE + 2;
    for cut in 0..buf.len() {
        let damaged = HeadCopy::Flat(buf[..cut].into());
        // A cut prelude or URI is refused, a truncated record too; a cut
        // between records loses them.
        if let Some(back) = damaged.parts() {
            assert!(cut >= uri_end && back.headers.len() < map.len());
        }
    }
    let mut bad = buf.to_vec();
    bad[uri_end + 9] = b'\n';
    assert!(HeadCopy::Flat(bad.into()).parts().is_none());
    for tag in [0, 1] {
        let mut bad = buf.to_vec();
        bad[tag] = 200;
        assert!(HeadCopy::Flat(bad.into()).parts().is_none(), "tag {tag}");
    }
}

#[test]
fn a_head_longer_than_the_inline_buffer_is_flat_in_a_buffer_of_its_own() {
    let uri = Uri::from_static("https://a.test/p?q=1");
    let mut map = HeaderMap::new();
    for i in 0..8 {
        let value = HeaderValue::from_str(&format!("{i}").repeat(200)).unwrap();
        map.append("x-big", value);
    }
    let kept = copy(&uri, &map);
    assert!(matches!(kept, HeadCopy::Flat(_)));
    let back = kept.parts().unwrap();
    assert_eq!(pairs(&back.headers), pairs(&map));
    assert_eq!(back.uri, uri);
}

#[test]
fn a_head_of_exactly_the_inline_size_is_kept_in_place_and_one_more_byte_is_not() {
    let uri = Uri::from_static("/p");
    // Prelude, the URI, then one record: 9 bytes, the name, the value.
    let room = INLINE - PRELUDE - 2 - 9 - "x-fill".len();
    for (len, inline) in [(room, true), (room + 1, false)] {
        let mut map = HeaderMap::new();
        map.insert("x-fill", HeaderValue::from_str(&"v".repeat(len)).unwrap());
        let kept = copy(&uri, &map);
        assert_eq!(
            matches!(kept, HeadCopy::Inline(_)),
            inline,
            "value of {len}"
        );
        assert!(flat(&kept));
        let back = kept.parts().unwrap();
        assert_eq!(pairs(&back.headers), pairs(&map));
    }
}

#[test]
fn every_method_and_version_comes_back_and_an_extension_method_is_cloned() {
    let uri = Uri::from_static("http://a.test/x");
    for method in METHODS
        .iter()
        .chain([&Method::from_bytes(b"PURGE").unwrap()])
    {
        for version in VERSIONS {
            let kept = HeadCopy::of(method, version, &uri, &HeaderMap::new());
            assert_eq!(flat(&kept), method_tag(method).is_some(), "{method}");
            let back = kept.parts().unwrap();
            assert_eq!((&back.method, back.version), (method, version));
            assert_eq!(back.uri, uri);
        }
    }
}

fn header_name() -> impl Strategy<Value = HeaderName> {
    prop_oneof![
        Just(http::header::ACCEPT),
        Just(http::header::USER_AGENT),
        Just(http::header::COOKIE),
        "[a-z][a-z0-9-]{0,20}".prop_map(|s| HeaderName::from_bytes(s.as_bytes()).unwrap()),
    ]
}

fn header_value() -> impl Strategy<Value = HeaderValue> {
    (
        proptest::collection::vec(
            prop_oneof![Just(b'\t'), 0x20u8..0x7f, 0x80u8..=0xff],
            0..200,
        ),
        any::<bool>(),
    )
        .prop_map(|(bytes, sensitive)| {
            let mut v = HeaderValue::from_bytes(&bytes).unwrap();
            v.set_sensitive(sensitive);
            v
        })
}

fn uri() -> impl Strategy<Value = Uri> {
    let host = "[a-zA-Z0-9][a-zA-Z0-9.-]{0,15}(:[0-9]{1,5})?";
    let path = "(/[a-zA-Z0-9._~%!$&'()*+,;=:@-]{0,10}){0,4}(\\?[a-zA-Z0-9=&%/?-]{0,12})?";
    prop_oneof![
        (
            prop_oneof![Just("http"), Just("https"), Just("ws")],
            host,
            path
        )
            .prop_map(|(s, h, p)| format!("{s}://{h}{p}")),
        path.prop_map(|p| if p.starts_with('/') {
            p
        } else {
            format!("/{p}")
        }),
        host.prop_map(|h| h.to_string()),
    ]
    .prop_filter_map("a valid URI", |text| text.parse::<Uri>().ok())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn any_head_comes_back_the_same(
        uri in uri(),
        entries in proptest::collection::vec((header_name(), header_value()), 0..24)
    ) {
        let mut map = HeaderMap::new();
        for (name, value) in entries {
            map.append(name, value);
        }
        let (back_uri, back) = round_trip(&uri, &map);
        prop_assert_eq!(pairs(&back), pairs(&map));
        prop_assert_eq!(&back_uri, &uri);
        prop_assert_eq!(uri_parts(&back_uri), uri_parts(&uri));
    }
}
