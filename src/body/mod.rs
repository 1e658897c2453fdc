//! The replay body (being written).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http_body::{Body, Frame, SizeHint};

use crate::policy::{AttemptProgress, NotReplayable};
use crate::BoxError;

/// Marks a request as one whose body must never be sent twice.
///
/// Put it in the request's extensions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OneShot;

/// The body the transport receives.
#[derive(Debug)]
pub struct ReplayBody<B> {
    inner: Option<B>,
}

impl<B> ReplayBody<B>
where
    B: Body,
    B::Data: Buf,
    B::Error: Into<BoxError>,
{
    pub(crate) fn new(body: B, cap: usize) -> Self {
        let _ = cap;
        ReplayBody { inner: Some(body) }
    }
    pub(crate) fn one_shot(body: B) -> Self {
        ReplayBody { inner: Some(body) }
    }
    pub(crate) fn replay(&self) -> Self {
        ReplayBody { inner: None }
    }
    pub(crate) fn set_progress(&mut self, progress: Option<AttemptProgress>) {
        let _ = progress;
    }
    /// Whether another reader can replay the whole body.
    pub fn replayable(&self) -> Result<(), NotReplayable> {
        Ok(())
    }
    /// Whether the body is empty or every byte of it is kept.
    pub fn is_fully_kept(&self) -> bool {
        false
    }
}

impl<B> Body for ReplayBody<B>
where
    B: Body + Unpin,
    B::Data: Buf,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;
    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Poll::Ready(None)
    }
    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
