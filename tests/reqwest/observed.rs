//! The middleware tells an observer what it decides, as a tower stack does.

use std::sync::{Arc, Mutex};

use backstop::observe::{Event, Observers};
use backstop::reqwest::BackstopMiddleware;
use backstop::test_util::Reply;

use crate::kit::{client, quick, upstream, url};
use crate::support::wire::{within_10s, BOTH};

#[tokio::test]
async fn a_retried_call_through_reqwest_is_observed() {
    within_10s(async {
        for protocol in BOTH {
            let seen = Arc::new(Mutex::new(Vec::new()));
            let into = seen.clone();
            let counted = Arc::new(Mutex::new(0usize));
            let count = counted.clone();
            let observers = Observers::new()
                .with(move |event: &Event<'_>| {
                    let kind = format!("{event:?}");
                    into.lock()
                        .unwrap()
                        .push(kind.split('(').next().unwrap_or_default().to_owned());
                })
                .with(move |_: &Event<'_>| *count.lock().unwrap() += 1);
            let up = upstream(protocol, vec![Reply::status(503).into()]).await;
            let middleware = BackstopMiddleware::new(quick()).with_observer(observers);
            let res = client(protocol, middleware)
                .get(url(&up, "/"))
                .send()
                .await
                .unwrap();
            assert_eq!(res.status(), 200, "{protocol:?}");
            let seen = seen.lock().unwrap().clone();
            let attempts = seen.iter().filter(|k| *k == "AttemptFinished").count();
            assert_eq!(attempts, 2, "{protocol:?}: {seen:?}");
            assert!(seen.iter().any(|k| k == "RetryScheduled"), "{seen:?}");
            assert_eq!(seen.last().map(String::as_str), Some("CallFinished"));
            assert_eq!(*counted.lock().unwrap(), seen.len());
        }
    })
    .await;
}
