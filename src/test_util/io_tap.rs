//! The socket wrapper the protocol drivers write through, and the clean close.
//!
//! The driver (hyper's HTTP/1.1 server or the `h2` server) owns a [`Tap`], but the
//! socket itself stays in an `Arc` the connection task keeps. So when the driver is done
//! (or gives up on a fault), the task still holds the socket and closes it on its own
//! terms: flush what the driver wrote, optionally append raw bytes (a `GOAWAY` frame the
//! `h2` server cannot express), send `FIN`, and read until the client closes too. Closing
//! with unread input would make the kernel send a reset instead, which can overtake the
//! last bytes sent and makes the client's error depend on timing.
//!
//! A write is always accepted whole into the out buffer (and pushed to the socket as far
//! as it goes), so a driver never leaves half a frame behind when it stops being polled;
//! the [`FrameTracker`] checks that an HTTP/2 frame boundary was reached anyway.

use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// How long a close may take to flush and to wait for the client to close.
const LINGER: Duration = Duration::from_secs(5);

/// The socket and what was written to it but not sent yet.
pub(super) struct Socket {
    stream: TcpStream,
    out: BytesMut,
    frames: FrameTracker,
}

pub(super) type SharedSocket = Arc<Mutex<Socket>>;

pub(super) fn shared(stream: TcpStream) -> SharedSocket {
    Arc::new(Mutex::new(Socket {
        stream,
        out: BytesMut::new(),
        frames: FrameTracker::default(),
    }))
}

fn lock(socket: &SharedSocket) -> MutexGuard<'_, Socket> {
    socket.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Socket {
    /// Sends the out buffer as far as the socket takes it.
    fn push(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.out.is_empty() {
            let n = ready!(Pin::new(&mut self.stream).poll_write(cx, &self.out))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.out.advance(n);
        }
        Poll::Ready(Ok(()))
    }
}

/// The driver's handle on a [`SharedSocket`].
pub(super) struct Tap(pub(super) SharedSocket);

impl AsyncRead for Tap {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut lock(&self.0).stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Tap {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut socket = lock(&self.0);
        socket.frames.track(buf);
        socket.out.extend_from_slice(buf);
        if let Poll::Ready(Err(e)) = socket.push(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut socket = lock(&self.0);
        ready!(socket.push(cx))?;
        Pin::new(&mut socket.stream).poll_flush(cx)
    }

    /// Only flushes: the connection task shuts the socket down itself, after the driver.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_flush(cx)
    }
}

/// Closes the socket cleanly once the driver let go of it: sends what is buffered and
/// then `extra` (only if the bytes sent so far end on an HTTP/2 frame boundary), sends
/// `FIN`, and reads until the client closes, for at most [`LINGER`].
pub(super) async fn close(socket: SharedSocket, extra: Option<&[u8]>) {
    // The driver is gone, so this is normally the last handle. If it is not, dropping
    // ours leaves the socket to whoever still has it.
    let Ok(socket) = Arc::try_unwrap(socket) else {
        return;
    };
    let mut socket = socket.into_inner().unwrap_or_else(PoisonError::into_inner);
    if let Some(extra) = extra {
        if socket.frames.at_boundary() {
            socket.out.extend_from_slice(extra);
        }
    }
    let _ = tokio::time::timeout(LINGER, async move {
        let flushed = poll_fn(|cx| {
            ready!(socket.push(cx))?;
            Pin::new(&mut socket.stream).poll_shutdown(cx)
        })
        .await;
        if flushed.is_err() {
            return;
        }
        let mut scratch = [0_u8; 4096];
        loop {
            let read = poll_fn(|cx| {
                let mut buf = ReadBuf::new(&mut scratch);
                ready!(Pin::new(&mut socket.stream).poll_read(cx, &mut buf))?;
                Poll::Ready(Ok::<_, io::Error>(buf.filled().len()))
            })
            .await;
            match read {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
}

/// Follows the HTTP/2 frames in the bytes written (a server writes nothing but frames),
/// to tell whether the bytes so far end on a frame boundary.
#[derive(Default)]
struct FrameTracker {
    head: [u8; 9],
    head_len: usize,
    payload_left: usize,
}

impl FrameTracker {
    fn track(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.payload_left > 0 {
                let n = self.payload_left.min(bytes.len());
                self.payload_left -= n;
                bytes = &bytes[n..];
                continue;
            }
            let n = (self.head.len() - self.head_len).min(bytes.len());
            self.head[self.head_len..self.head_len + n].copy_from_slice(&bytes[..n]);
            self.head_len += n;
            bytes = &bytes[n..];
            if self.head_len == self.head.len() {
                self.head_len = 0;
                self.payload_left = usize::from(self.head[0]) << 16
                    | usize::from(self.head[1]) << 8
                    | usize::from(self.head[2]);
            }
        }
    }

    fn at_boundary(&self) -> bool {
        self.head_len == 0 && self.payload_left == 0
    }
}

/// A `GOAWAY` frame: no flags, stream 0, the last stream id and the error code.
pub(super) fn go_away_frame(last_stream_id: u32, error_code: u32) -> [u8; 17] {
    let mut frame = [0_u8; 17];
    frame[2] = 8; // payload length
    frame[3] = 0x7; // GOAWAY
    frame[9..13].copy_from_slice(&(last_stream_id & 0x7fff_ffff).to_be_bytes());
    frame[13..17].copy_from_slice(&error_code.to_be_bytes());
    frame
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracker_follows_frames_split_anywhere() {
        let frame = go_away_frame(5, 0);
        let mut stream = Vec::new();
        stream.extend_from_slice(&frame);
        stream.extend_from_slice(&[0, 0, 0, 4, 1, 0, 0, 0, 0]); // empty SETTINGS ACK
        stream.extend_from_slice(&frame);
        for split in 0..stream.len() {
            let mut tracker = FrameTracker::default();
            tracker.track(&stream[..split]);
            let boundary = matches!(split, 0 | 17 | 26);
            assert_eq!(tracker.at_boundary(), boundary, "split at {split}");
            tracker.track(&stream[split..]);
            assert!(tracker.at_boundary());
        }
    }
}
