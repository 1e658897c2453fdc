//! Tracing output, in a test binary of its own: `tracing` caches per call site whether
//! anyone listens, so a subscriber set for one test must not race with other tests'
//! call sites in the same process.

#[path = "../support/mod.rs"]
mod support;

mod admission;
mod breaker;
mod pause;
mod retry;
mod routes;
mod throttle;

use std::io;
use std::sync::Arc;

/// `text` without the request spans' `server.address="upstream.test"`: the one
/// place the host of the tests' URLs may be told (a host, never a URL).
pub(crate) fn without_server_address(text: &str) -> String {
    text.replace("server.address=\"upstream.test\"", "")
}

/// A `tracing` writer that keeps everything in memory.
#[derive(Clone, Default)]
pub(crate) struct Captured(pub(crate) Arc<std::sync::Mutex<Vec<u8>>>);

impl Captured {
    /// Everything traced at `DEBUG` and above on this thread, in plain text, until
    /// the guard is dropped.
    pub(crate) fn debug() -> (Captured, tracing::subscriber::DefaultGuard) {
        let out = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(out.clone())
            .finish();
        (out.clone(), tracing::subscriber::set_default(subscriber))
    }
}

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}
