#![cfg(all(feature = "grpc", feature = "test-util"))]
//! A failed gRPC call's history, reached through the `tonic::Status` it ends as.

use std::error::Error as _;

use crate::grpc::{call, client, grpc_server, policy, Answer, Svc};
use crate::support::wire::within_10s;
use backstop::grpc::HISTORY_HEADER;
use backstop::policy::{AttemptOutcome, ErrorKind, StopReason};
use backstop::{ReplayBody, RetryLayer};
use http::Request;
use tower::ServiceBuilder;

#[tokio::test]
async fn a_trailers_only_status_carries_the_history_in_its_metadata() {
    within_10s(async {
        let (addr, seen) = grpc_server(vec![
            Answer::TrailersOnly(14, Some("20")),
            Answer::TrailersOnly(14, None),
            Answer::TrailersOnly(14, Some("5")),
        ])
        .await;
        let (mut grpc, caught) = client(addr, policy()).await;
        let status = call(&mut grpc, "/echo.Echo/Get").await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unavailable);
        assert_eq!(seen.lock().unwrap().len(), 3);
        let history = caught.lock().unwrap()[0].clone().expect("history");
        assert_eq!(history.stop_reason(), Some(StopReason::AttemptsExhausted));

        // tonic kept the head's headers as the status's metadata: the history is
        // there, on one line, exactly the history's own text.
        let line = status
            .metadata()
            .get(HISTORY_HEADER.as_str())
            .expect("the history header")
            .to_str()
            .unwrap()
            .to_owned();
        assert_eq!(line, history.to_string().replace('\n', "; "));
        let parts: Vec<&str> = line.split("; ").collect();
        assert_eq!(parts.len(), 4, "{line}");
        assert!(
            parts[0].starts_with("attempt 1/3: 200 OK, grpc-status 14 UNAVAILABLE (pushback 20ms)"),
            "{line}"
        );
        assert!(
            parts[1].starts_with("attempt 2/3: 200 OK, grpc-status 14 UNAVAILABLE after"),
            "{line}"
        );
        assert_eq!(parts[3], "stopped: attempts exhausted");
        // Statuses and codes only: nothing of the request.
        assert!(!line.contains("echo"), "{line}");
    })
    .await;
}

#[tokio::test]
async fn a_first_answer_carries_no_history_header() {
    within_10s(async {
        let (addr, _) = grpc_server(vec![Answer::TrailersOnly(5, None)]).await;
        let (mut grpc, caught) = client(addr, policy()).await;
        let status = call(&mut grpc, "/echo.Echo/Get").await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::NotFound);
        assert!(caught.lock().unwrap()[0].is_none());
        assert!(status.metadata().get(HISTORY_HEADER.as_str()).is_none());
    })
    .await;
}

#[tokio::test]
async fn a_call_that_failed_without_an_answer_keeps_its_error_as_the_source() {
    within_10s(async {
        // A port nothing listens on: every attempt's connection is refused.
        let closed = {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            listener.local_addr().unwrap()
        };
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{closed}"))
            .unwrap()
            .connect_lazy();
        let svc = ServiceBuilder::new()
            .layer(RetryLayer::new(policy()))
            .map_request(|req: Request<ReplayBody<tonic::body::Body>>| {
                req.map(tonic::body::Body::new)
            })
            .service(channel);
        let mut grpc = tonic::client::Grpc::new(Svc::new(svc));
        let status = call(&mut grpc, "/echo.Echo/Get").await.unwrap_err();
        let source = status
            .source()
            .expect("tonic keeps the error as the source");
        let error = backstop::Error::find(source).expect("backstop's error");
        assert_eq!(error.kind(), ErrorKind::Connect);
        let history = error.history().expect("history");
        assert_eq!(history.len(), 3, "{history}");
        assert_eq!(history.stop_reason(), Some(StopReason::AttemptsExhausted));
        assert!(history
            .attempts()
            .iter()
            .all(|a| a.outcome == AttemptOutcome::Error(ErrorKind::Connect)));
    })
    .await;
}
