//! The request head a call keeps for its later attempts.
//!
//! Every retry layer must keep a copy of the head, because the transport takes the
//! request it sends. Cloning a `HeaderMap` allocates its index and entry tables, and
//! each header value created from a string is turned into a shared, reference-counted
//! buffer on its first clone, whose count then moves on every drop; a parsed URI's
//! parts are shared buffers too. For the usual head of a few hundred bytes it is
//! cheaper to copy the URI's and the headers' bytes into one buffer, and to parse
//! them back only when a retry is sent. A head whose headers are larger than
//! `flat::FLAT_LIMIT` is cloned as it is, and so is a URI of an unusual shape; the
//! encoding is in `flat.rs`. The usual head (up to `flat::INLINE` bytes) is written
//! straight into the allocation the call keeps for its later attempts.

use http::{Extensions, Request};

use crate::policy::{CallContext, Given};

mod flat;
#[cfg(test)]
mod tests;

use flat::HeadCopy;

/// A request's head, kept for later attempts: its extensions as [`Extras`], and the
/// rest as flat bytes in place (or, rarely, in a buffer of their own or a clone).
/// It lives on the heap beside the service for later attempts (see
/// [`Carry`](super::call::Carry)), so the future that every layer above moves stays
/// small, and the usual head costs the call one allocation in all.
#[derive(Clone)]
pub(super) struct Head {
    extras: Extras,
    kept: HeadCopy,
}

/// The request's extensions, kept for later attempts: nothing when there are none,
/// the call's context alone when that is all they hold (the usual backstop stack: a
/// few reference counts instead of a cloned map), else a clone of them all. It is
/// kept on the heap with the rest of what later attempts need (see
/// [`Carry`](super::call::Carry)), so the context is not boxed on its own.
#[derive(Clone)]
pub(super) enum Extras {
    None,
    Context(CallContext),
    All(Extensions),
}

impl Extras {
    /// Keeps what there is to keep of the extensions `given` reads. Each kind is
    /// written where it is kept; nothing is written when there is nothing to keep.
    #[inline(always)]
    fn keep(&mut self, given: &Given<'_>) {
        match given.parts() {
            (Some(all), _) => *self = Extras::All(all.clone()),
            (None, Some(context)) => *self = Extras::Context(context.clone()),
            (None, None) => {}
        }
    }

    fn into_extensions(self) -> Extensions {
        let mut ext = Extensions::new();
        match self {
            Extras::None => {}
            Extras::Context(context) => {
                ext.insert(context);
            }
            Extras::All(all) => ext = all,
        }
        ext
    }
}

impl Head {
    /// The head of `head`.
    #[cfg(test)]
    pub(super) fn of<T>(head: &Request<T>) -> Self {
        let mut kept = Head::empty();
        kept.fill(head);
        kept
    }

    /// Room for a head: built where the head is kept, then filled in place (see
    /// [`Head::fill`]), so its bytes are not moved.
    #[inline]
    pub(super) fn empty() -> Self {
        Head {
            extras: Extras::None,
            kept: HeadCopy::empty(),
        }
    }

    /// Copies `head` into this room (an empty one, see [`Head::empty`]): what there
    /// is to keep of its extensions, and the rest as flat bytes.
    #[inline]
    pub(super) fn fill<T>(&mut self, head: &Request<T>) {
        self.extras.keep(&Given::new(head.extensions()));
        self.kept
            .fill(head.method(), head.version(), head.uri(), head.headers());
    }

    /// What the layers above gave the call, read as every layer reads it.
    pub(super) fn given(&self) -> Given<'_> {
        match &self.extras {
            Extras::None => Given::none(),
            Extras::Context(context) => Given::context(context),
            Extras::All(ext) => Given::new(ext),
        }
    }

    /// The request for a later attempt; `None` only if the head does not read back
    /// (see [`HeadCopy::parts`]).
    pub(super) fn request<T>(self, body: T) -> Option<Request<T>> {
        let head = self.kept.parts()?;
        let mut req = Request::new(body);
        *req.method_mut() = head.method;
        *req.uri_mut() = head.uri;
        *req.version_mut() = head.version;
        *req.headers_mut() = head.headers;
        *req.extensions_mut() = self.extras.into_extensions();
        Some(req)
    }
}
