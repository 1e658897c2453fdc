//! Delegated mode: reqwest's own retry, configured from a backstop policy.

use backstop::policy::History;
use backstop::test_util::{Protocol, Reply, Step};

use crate::kit::{builder, quick, upstream, url};
use crate::support::wire::within_10s;

fn native(host: &'static str) -> reqwest::Client {
    builder(Protocol::Http1)
        .retry(backstop::reqwest::native_retry(host, &quick()))
        .build()
        .unwrap()
}

#[tokio::test]
async fn the_ladder_decides_what_reqwest_sends_again() {
    within_10s(async {
        // A GET after a 503 is sent again, by reqwest itself.
        let up = upstream(Protocol::Http1, vec![Reply::status(503).into()]).await;
        let res = native("127.0.0.1").get(url(&up, "/")).send().await.unwrap();
        assert_eq!(res.status(), 200);
        assert_eq!(up.requests().len(), 2);
        // The attempts happened below the seam: no history.
        assert!(res.extensions().get::<History>().is_none());

        // A keyless POST after a 503 is the answer.
        let up = upstream(Protocol::Http1, vec![Reply::status(503).into()]).await;
        let res = native("127.0.0.1")
            .post(url(&up, "/orders"))
            .body("pay 10")
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 503);
        assert_eq!(up.requests().len(), 1);

        // Nor after its body was written and the answer lost.
        let up = upstream(Protocol::Http1, vec![Step::CloseAfterBody]).await;
        let sent = native("127.0.0.1")
            .post(url(&up, "/orders"))
            .body("pay 10")
            .send()
            .await;
        assert!(sent.is_err());
        assert_eq!(up.requests().len(), 1);
    })
    .await
}

#[tokio::test]
async fn attempts_and_scope_are_translated() {
    within_10s(async {
        // Three attempts at most: two retries.
        let up = upstream(
            Protocol::Http1,
            vec![
                Reply::status(503).into(),
                Reply::status(503).into(),
                Reply::status(503).into(),
            ],
        )
        .await;
        let res = native("127.0.0.1").get(url(&up, "/")).send().await.unwrap();
        assert_eq!(res.status(), 503);
        assert_eq!(up.requests().len(), 3);

        // Another host is out of scope: never sent again.
        let up = upstream(Protocol::Http1, vec![Reply::status(503).into()]).await;
        let res = native("api.example.com")
            .get(url(&up, "/"))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 503);
        assert_eq!(up.requests().len(), 1);
    })
    .await
}
