//! The budget layer's response future: a call sent at once, or held while its
//! origin is paused.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use pin_project_lite::pin_project;
use tokio::time::{sleep_until, Instant, Sleep};
use tower_service::Service;

use super::account::Account;
use super::events::{emit, PauseEvent};
use crate::error::{BoxError, Error};
use crate::observe::{CallRefused, CallWaited, Event, Observed, Refusal};
use crate::policy::{meet, pause_told, pause_until, paused_told, Pause};

pin_project! {
    /// Response future of [`Budget`](super::Budget).
    pub struct ResponseFuture<S, B>
    where
        S: Service<Request<B>>,
    {
        #[pin]
        pub(super) state: State<S::Future, Held<S, B>>,
        // The call's account, for the hint of its final answer.
        pub(super) account: Arc<Account>,
        // The call's observer, when one rides in its context (boxed: most calls
        // have none, and the future stays small).
        pub(super) observed: Option<Box<Observed>>,
    }
}

/// A call held while its origin is paused: the request, and a clone of the inner
/// service to send it with (the one the caller drove ready is left to the next
/// call, so no readiness, such as a concurrency permit, is held during the wait).
pub(super) struct Held<S, B> {
    service: S,
    request: Option<Request<B>>,
    hold: Hold,
    /// When the call was dated: its deposit's time, made once it goes.
    dated: Instant,
}

/// A call's first attempt held until its share of the end of its origin's pause.
pub(crate) struct Hold {
    deadline: Option<Instant>,
    release: Pin<Box<Sleep>>,
}

impl Hold {
    /// Meets the pause at `now` for a call whose deadline is `deadline`: a hold
    /// until the call's release, or the error that refuses the call.
    pub(crate) fn meet(
        pause: Pause,
        now: Instant,
        deadline: Option<Instant>,
        account: &Account,
        observed: Option<&Observed>,
    ) -> Result<Hold, Error> {
        match meet(&pause, now, deadline, account.pause_min_attempt_time()) {
            Ok(release) => {
                waited(observed, release.saturating_duration_since(now));
                Ok(Hold {
                    deadline,
                    release: Box::pin(sleep_until(release)),
                })
            }
            Err(()) => Err(refuse(pause, now, observed)),
        }
    }

    /// Waits out the hold: ready when the attempt may go, or with the error that
    /// refuses the call when a later hint moved the pause's end past what the
    /// call may wait.
    pub(crate) fn poll(
        &mut self,
        cx: &mut Context<'_>,
        account: &Account,
        observed: Option<&Observed>,
    ) -> Poll<Result<(), Error>> {
        loop {
            ready!(self.release.as_mut().poll(cx));
            let now = Instant::now();
            let Some(pause) = paused_told(account, now, observed) else {
                return Poll::Ready(Ok(()));
            };
            match meet(&pause, now, self.deadline, account.pause_min_attempt_time()) {
                Ok(release) => {
                    waited(observed, release.saturating_duration_since(now));
                    self.release.as_mut().reset(release);
                }
                Err(()) => return Poll::Ready(Err(refuse(pause, now, observed))),
            }
        }
    }
}

pin_project! {
    #[project = StateProj]
    pub(super) enum State<F, H> {
        // Waiting for the inner service's answer.
        Called { #[pin] future: F },
        // Waiting for the origin's pause to end (the call's release), then for the
        // held service to be ready.
        Held { held: Box<H> },
        // Refused without calling the inner service, or finished.
        Done { error: Option<Error> },
    }
}

impl<S, B> ResponseFuture<S, B>
where
    S: Service<Request<B>>,
{
    /// A call whose origin is paused now: held until its release, or refused.
    /// `dated` is when the call was dated, its deposit's time once it goes.
    pub(super) fn paused(
        service: S,
        request: Request<B>,
        pause: Pause,
        dated: Instant,
        account: Arc<Account>,
        observed: Option<Box<Observed>>,
    ) -> Self {
        let now = Instant::now();
        let deadline = crate::policy::Given::new(request.extensions()).deadline();
        let state = match Hold::meet(pause, now, deadline, &account, observed.as_deref()) {
            Ok(hold) => State::Held {
                held: Box::new(Held {
                    service,
                    request: Some(request),
                    hold,
                    dated,
                }),
            },
            Err(error) => State::Done { error: Some(error) },
        };
        ResponseFuture {
            state,
            account,
            observed,
        }
    }
}

/// Tells that a call waits `wait` for its origin's pause before its attempt.
fn waited(observed: Option<&Observed>, wait: Duration) {
    emit(PauseEvent::Waited { wait });
    if let Some(observed) = observed {
        observed.tell(|call| Event::CallWaited(CallWaited { call, wait }));
    }
}

fn refuse(pause: Pause, now: Instant, observed: Option<&Observed>) -> Error {
    emit(PauseEvent::Refused {
        left: pause.until().saturating_duration_since(now),
    });
    if let Some(observed) = observed {
        let refusal = Refusal::Paused {
            until: pause.until(),
        };
        observed.tell(|call| Event::CallRefused(CallRefused { call, refusal }));
    }
    Error::paused(pause.until(), now)
}

impl<S, B, RB> Future for ResponseFuture<S, B>
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Error: Into<BoxError>,
{
    type Output = Result<Response<RB>, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Called { future } => {
                    let res = ready!(future.poll(cx)).map_err(|e| Error::from_inner(e.into()));
                    // The hint of the call's final answer pauses the origin (a retry
                    // layer inside paused it on each answer it retried after).
                    if let Some(until) = res.as_ref().ok().and_then(|r| pause_until(r, None)) {
                        pause_told(&**this.account, until, this.observed.as_deref());
                    }
                    this.state.set(State::Done { error: None });
                    return Poll::Ready(res);
                }
                StateProj::Held { held } => {
                    let observed = this.observed.as_deref();
                    if let Err(error) = ready!(held.hold.poll(cx, this.account, observed)) {
                        this.state.set(State::Done { error: Some(error) });
                        continue;
                    }
                    if let Err(e) = ready!(held.service.poll_ready(cx)) {
                        let error = Error::from_inner(e.into());
                        this.state.set(State::Done { error: Some(error) });
                        continue;
                    }
                    let Some(request) = held.request.take() else {
                        this.state.set(State::Done { error: None });
                        continue;
                    };
                    // It goes: it counts as a first attempt now.
                    this.account.deposit_at(held.dated);
                    let future = held.service.call(request);
                    this.state.set(State::Called { future });
                }
                StateProj::Done { error } => {
                    return Poll::Ready(Err(error
                        .take()
                        .unwrap_or_else(|| Error::polled_after_completion("budget"))))
                }
            }
        }
    }
}

impl<S, B> fmt::Debug for ResponseFuture<S, B>
where
    S: Service<Request<B>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
