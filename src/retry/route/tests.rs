use super::*;
use http::Method;

fn req(method: Method, uri: &str) -> Request<()> {
    Request::builder().method(method).uri(uri).body(()).unwrap()
}

#[test]
fn path_prefix_matches_whole_segments() {
    let r = Route::path_prefix("/pay/");
    assert!(r.matches(&req(Method::GET, "http://h/pay")));
    assert!(r.matches(&req(Method::GET, "http://h/pay/42")));
    assert!(!r.matches(&req(Method::GET, "http://h/payments")));
    assert!(!r.matches(&req(Method::GET, "http://h/")));
    assert!(Route::path_prefix("/").matches(&req(Method::GET, "http://h/x")));
}

#[test]
fn host_from_uri_or_header() {
    let r = Route::host("API.example.com");
    assert!(r.matches(&req(Method::GET, "http://api.example.com/")));
    let mut relative = req(Method::GET, "/x");
    assert!(!r.matches(&relative));
    relative
        .headers_mut()
        .insert(http::header::HOST, "api.example.com:8080".parse().unwrap());
    assert!(r.matches(&relative));
}

#[test]
fn first_matching_route_wins() {
    let routes = Routes::new(RetryPolicy::default())
        .route(
            Route::for_method(Method::POST).and_path_prefix("/a"),
            RetryPolicy::none(),
        )
        .route(
            Route::path_prefix("/a"),
            RetryPolicy::builder().max_attempts(5).build().unwrap(),
        );
    assert_eq!(
        routes
            .policy_for(&req(Method::POST, "http://h/a/1"))
            .max_attempts(),
        1
    );
    assert_eq!(
        routes
            .policy_for(&req(Method::GET, "http://h/a/1"))
            .max_attempts(),
        5
    );
    assert_eq!(
        routes
            .policy_for(&req(Method::GET, "http://h/b"))
            .max_attempts(),
        3
    );
}

#[test]
fn choosing_leaves_the_name_and_hedging_in_the_context() {
    let routes = Routes::new(RetryPolicy::default())
        .route(
            Route::path_prefix("/pay").named("payments"),
            RetryPolicy::none(),
        )
        .route(
            Route::path_prefix("/cat").named("catalog"),
            RoutePolicy::new(RetryPolicy::default()).no_hedging(),
        );
    let mut pay = req(Method::GET, "http://h/pay/1");
    assert_eq!(routes.choose(&mut pay, None).max_attempts(), 1);
    let ctx = CallContext::of(pay.extensions()).unwrap();
    assert_eq!(ctx.route(), Some("payments"));
    assert!(ctx.hedge().unwrap().is_off());

    // A name the caller gave is kept.
    let mut cat = req(Method::GET, "http://h/cat/1");
    CallContext::of_mut(cat.extensions_mut()).set_route("mine".into());
    routes.choose(&mut cat, None);
    let ctx = CallContext::of(cat.extensions()).unwrap();
    assert_eq!(ctx.route(), Some("mine"));
    assert!(ctx.hedge().unwrap().is_off());

    // The default route, unnamed and hedged as the layer says, adds nothing.
    let mut other = req(Method::GET, "http://h/other");
    assert_eq!(routes.choose(&mut other, None).max_attempts(), 3);
    assert!(CallContext::of(other.extensions()).is_none());
    assert!(routes.route_for(&other).is_none());

    // A given policy of one attempt is never hedged, whatever the route says.
    let mut given = req(Method::GET, "http://h/other");
    routes.choose(&mut given, Some(RetryPolicy::none()));
    assert!(CallContext::of(given.extensions())
        .unwrap()
        .hedge()
        .unwrap()
        .is_off());
}

#[test]
fn an_exact_path_covers_that_path_only() {
    let route = Route::path_exact("/helloworld.Greeter/SayHello");
    let req = |path: &str| req(Method::POST, &format!("http://grpc.test{path}"));
    assert!(route.matches(&req("/helloworld.Greeter/SayHello")));
    assert!(!route.matches(&req("/helloworld.Greeter/SayHello/x")));
    assert!(!route.matches(&req("/helloworld.Greeter/SayHelloAgain")));
    assert!(!route.matches(&req("/helloworld.Greeter")));
    assert_eq!(
        route.path(),
        Some(&PathMatch::Exact("/helloworld.Greeter/SayHello".into()))
    );
}

#[test]
fn a_route_with_methods_covers_any_of_them_and_a_later_path_replaces_the_first() {
    let route = Route::path_exact("/x")
        .and_path_prefix("/catalog/")
        .methods([Method::GET, Method::HEAD, Method::GET]);
    assert_eq!(route.method_list(), &[Method::GET, Method::HEAD]);
    assert_eq!(route.path(), Some(&PathMatch::Prefix("/catalog".into())));
    for (method, covered) in [
        (Method::GET, true),
        (Method::HEAD, true),
        (Method::POST, false),
    ] {
        let req = Request::builder()
            .method(method)
            .uri("http://shop.test/catalog/1")
            .body(())
            .unwrap();
        assert_eq!(route.matches(&req), covered);
    }
    // `method` sets one method, as before.
    assert_eq!(route.method(Method::PUT).method_list(), &[Method::PUT]);
}
