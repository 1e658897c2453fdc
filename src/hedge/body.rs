use bytes::Buf;
use http_body::Body;
use http_body_util::{Empty, Full};

use crate::body::ReplayBody;
use crate::policy::error::BoxError;

/// A request body the hedge layer can send more than once at the same time.
///
/// A hedge is a second reader of the same body while the first may still be
/// reading, so only a body whose bytes are all at hand can be hedged. The layer
/// asks twice:
///
/// 1. when the request arrives, [`hedge_handle`](HedgeBody::hedge_handle): a
///    handle kept beside the request while it is in flight, or `None` when the
///    body can never be sent twice (then the request passes straight through);
/// 2. when a hedge is due, [`hedge_copy`](HedgeBody::hedge_copy) on that handle:
///    a body for the copy, or `None` when it cannot be read beside the first
///    reader *now* (then no hedge is sent for this request).
///
/// It is implemented for [`ReplayBody`] (what the transport receives beneath
/// [`RetryLayer`](crate::RetryLayer)), and for [`Full`], [`Empty`] and `String`
/// so that the hedge layer also works alone over a client of such bodies.
///
/// # Examples
///
/// ```
/// use backstop::hedge::HedgeBody;
/// use bytes::Bytes;
/// use http_body_util::Full;
///
/// let body = Full::new(Bytes::from_static(b"{}"));
/// let handle = body.hedge_handle().expect("a full body can be copied");
/// assert!(handle.hedge_copy().is_some());
/// ```
pub trait HedgeBody: Body + Sized {
    /// A handle to make copies from, taken before the request is sent; `None` when
    /// this body must never be sent twice.
    fn hedge_handle(&self) -> Option<Self>;

    /// A body for one more copy, made from the handle; `None` when a second
    /// reader cannot read it beside the first one now.
    fn hedge_copy(&self) -> Option<Self>;
}

/// A replay body is hedged only when it is empty or its original body has ended
/// with every chunk kept: a second reader then never waits on the first one, and
/// never finds a chunk that was not kept. So a body that goes on past the chunk
/// crossing the replay cap gets no copy (its chunks are never all kept; one chunk
/// over the cap, read whole, is), whatever its size hint said, and a body
/// the caller marked one-shot, one read past the replay cap, or one beneath a
/// retry policy of a single attempt passes straight through. A copy reads beside
/// the send it was made from; a retry above takes the body over from both.
impl<B> HedgeBody for ReplayBody<B>
where
    B: Body,
    B::Data: Buf,
    B::Error: Into<BoxError>,
{
    fn hedge_handle(&self) -> Option<Self> {
        self.replayable().ok()?;
        Some(self.replay())
    }

    fn hedge_copy(&self) -> Option<Self> {
        self.is_fully_kept().then(|| self.replay())
    }
}

impl<D> HedgeBody for Full<D>
where
    D: Buf + Clone,
{
    fn hedge_handle(&self) -> Option<Self> {
        Some(self.clone())
    }

    fn hedge_copy(&self) -> Option<Self> {
        Some(self.clone())
    }
}

impl<D: Buf> HedgeBody for Empty<D> {
    fn hedge_handle(&self) -> Option<Self> {
        Some(Empty::new())
    }

    fn hedge_copy(&self) -> Option<Self> {
        Some(Empty::new())
    }
}

impl HedgeBody for String {
    fn hedge_handle(&self) -> Option<Self> {
        Some(self.clone())
    }

    fn hedge_copy(&self) -> Option<Self> {
        Some(self.clone())
    }
}
