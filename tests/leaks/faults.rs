//! Upstreams that fail each call in a different way, and the policies that meet them.

use std::net::SocketAddr;
use std::time::Duration;

use backstop::circuit_breaker::CircuitBreakerPolicy;
use backstop::test_util::{Protocol, Reply, Step, Upstream};
use backstop::RetryPolicy;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::secrets::closed_port;

/// An upstream that fails every call: where it listens, and what keeps it up.
pub struct Failing {
    pub name: &'static str,
    pub addr: SocketAddr,
    _upstream: Option<Upstream>,
}

/// One upstream for each kind of failure, speaking `protocol`: nothing listening
/// (connection refused), a server that answers a cut-off head and closes, one that
/// reads the request and closes without answering, and one too slow for the
/// attempt's timeout.
pub async fn failing(protocol: Protocol) -> Vec<Failing> {
    let scripted = |name, step: Step| async move {
        let up = Upstream::builder()
            .protocol(protocol)
            .then(step)
            .start()
            .await
            .expect("upstream starts");
        Failing {
            name,
            addr: up.addr(),
            _upstream: Some(up),
        }
    };
    vec![
        Failing {
            name: "connection refused",
            addr: closed_port(),
            _upstream: None,
        },
        Failing {
            name: "closed mid-response",
            addr: cut_mid_head().await,
            _upstream: None,
        },
        scripted("closed after the request", Step::CloseAfterBody).await,
        scripted(
            "timed out",
            Reply::ok().delay(Duration::from_secs(30)).into(),
        )
        .await,
    ]
}

/// A server that reads what a request sends first, answers the start of a head
/// (`HTTP/1.1 200 OK` and half a header) and closes.
async fn cut_mid_head() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("an address");
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = tcp.read(&mut buf).await;
                let _ = tcp.write_all(b"HTTP/1.1 200 OK\r\nContent-Le").await;
                let _ = tcp.shutdown().await;
                while matches!(tcp.read(&mut buf).await, Ok(n) if n > 0) {}
            });
        }
    });
    addr
}

/// Two attempts, a short backoff, and an attempt timeout the slow upstream
/// outlasts.
pub fn policy() -> RetryPolicy {
    RetryPolicy::builder()
        .max_attempts(2)
        .backoff(Duration::from_millis(1), Duration::from_millis(5))
        .attempt_timeout(Duration::from_millis(300))
        .build()
        .expect("a valid policy")
}

/// A breaker that opens on the first failed call and stays open for the test.
pub fn breaker() -> CircuitBreakerPolicy {
    crate::support::policies::breaker(1, Duration::from_secs(600))
}
