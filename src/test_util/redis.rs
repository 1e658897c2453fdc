//! A `redis-server` of a test's own on 127.0.0.1, for fleet tests.

use std::io;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What to do when `redis-server` is missing: the test fails saying so.
const INSTALL: &str = "redis-server not found on PATH: install it (Debian/Ubuntu: \
     `apt-get install redis-server`), or run `scripts/test-deps`, which does";

/// A `redis-server` on 127.0.0.1 on a free port, with nothing saved to disk
/// (`--save '' --appendonly no`), killed when dropped. It can be killed and
/// restarted on the same port mid-test, as an outage.
///
/// # Examples
///
/// ```no_run
/// use backstop::test_util::RedisServer;
///
/// let mut redis = RedisServer::start()?;
/// let url = redis.url(); // redis://127.0.0.1:<port>/
/// redis.kill();
/// redis.restart()?;
/// # let _ = url;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a server on a free port and waits (at most 5 s) until it accepts
    /// connections.
    ///
    /// # Errors
    ///
    /// When `redis-server` is not installed (the error says what to install), or
    /// does not start in time.
    pub fn start() -> io::Result<Self> {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
            .local_addr()?
            .port();
        let mut server = RedisServer { port, child: None };
        server.restart()?;
        Ok(server)
    }

    /// The server's URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills the server (an outage); [`restart`](RedisServer::restart) brings
    /// it back, empty, on the same port.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on its port (killing it first if it runs).
    ///
    /// # Errors
    ///
    /// As [`start`](RedisServer::start).
    pub fn restart(&mut self) -> io::Result<()> {
        self.kill();
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => io::Error::new(io::ErrorKind::NotFound, INSTALL),
                _ => e,
            })?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(5);
        while TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)).is_err() {
            if Instant::now() > deadline {
                self.kill();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "redis-server did not accept connections within 5s",
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}
