//! Raw TCP servers on 127.0.0.1 that write whatever bytes a test gives them: the
//! hostile servers a hyper server cannot be made to imitate (a head too large or
//! malformed, a head or body one byte at a time, a server that never answers).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// A loopback server running one handler per connection. Dropping it stops the
/// server and every connection's handler.
pub struct RawServer {
    addr: SocketAddr,
    counts: Arc<Counts>,
    accept: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct Counts {
    connections: AtomicUsize,
    requests: AtomicUsize,
}

/// One accepted connection, as its handler sees it.
pub struct Conn {
    stream: TcpStream,
    counts: Arc<Counts>,
    /// Bytes read past the last request head.
    buffered: Vec<u8>,
}

impl Conn {
    /// Reads the next request head (a request without a body); `false` once the
    /// client closed the connection.
    pub async fn next_request(&mut self) -> bool {
        loop {
            if let Some(end) = self.buffered.windows(4).position(|w| w == b"\r\n\r\n") {
                self.buffered.drain(..end + 4);
                self.counts.requests.fetch_add(1, Ordering::SeqCst);
                return true;
            }
            let mut chunk = [0u8; 4096];
            match self.stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => self.buffered.extend_from_slice(&chunk[..n]),
            }
        }
    }

    pub async fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes).await
    }

    /// Waits until the client closes the connection, answering nothing.
    pub async fn hold(mut self) {
        let mut chunk = [0u8; 4096];
        while matches!(self.stream.read(&mut chunk).await, Ok(n) if n > 0) {}
    }
}

impl RawServer {
    /// Serves each connection with `handler`.
    pub async fn start<F, Fut>(handler: F) -> RawServer
    where
        F: Fn(Conn) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1");
        let addr = listener.local_addr().expect("a local address");
        let counts = Arc::new(Counts::default());
        let accept_counts = Arc::clone(&counts);
        let accept = tokio::spawn(async move {
            let mut conns = JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                accept_counts.connections.fetch_add(1, Ordering::SeqCst);
                conns.spawn(handler(Conn {
                    stream,
                    counts: Arc::clone(&accept_counts),
                    buffered: Vec::new(),
                }));
            }
        });
        RawServer {
            addr,
            counts,
            accept,
        }
    }

    pub fn uri(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn connections(&self) -> usize {
        self.counts.connections.load(Ordering::SeqCst)
    }

    pub fn requests(&self) -> usize {
        self.counts.requests.load(Ordering::SeqCst)
    }
}

impl Drop for RawServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}
