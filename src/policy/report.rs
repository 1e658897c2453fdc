//! One way to read a call's history, verdict and stop reason from its result,
//! whichever shape it has.

use std::error::Error as StdError;

use http::Response;

use super::error::{BoxError, Error};
use super::{History, StopReason};

/// An error a call's result may hold: backstop's [`Error`], or a [`BoxError`] (what a
/// tower stack of several layers returns) with one along its source chain.
pub trait CallError {
    /// The backstop error, when there is one.
    fn backstop_error(&self) -> Option<&Error>;
}

impl CallError for Error {
    fn backstop_error(&self) -> Option<&Error> {
        Some(self)
    }
}

impl CallError for BoxError {
    fn backstop_error(&self) -> Option<&Error> {
        Error::find(&**self as &(dyn StdError + 'static))
    }
}

/// What a call's result tells of its attempts: the history, the policy's verdict
/// on the last outcome and why the sequence stopped, read the same way from an
/// `Ok` response (its history rides on its extensions) and from an `Err`.
///
/// A response answered at the first attempt carries no history (so the success
/// path allocates nothing): its report says one attempt, answered, not
/// retryable.
///
/// # Examples
///
/// ```
/// use backstop::policy::{Report, StopReason};
/// # use std::convert::Infallible;
/// # use tower::{Service, ServiceBuilder, ServiceExt};
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// # let transport = tower::service_fn(|_req: http::Request<backstop::ReplayBody<String>>| async {
/// #     Ok::<_, Infallible>(http::Response::builder().status(503).body(String::new()).unwrap())
/// # });
/// let policy = backstop::RetryPolicy::builder()
///     .backoff(std::time::Duration::ZERO, std::time::Duration::ZERO)
///     .build()
///     .unwrap();
/// let mut client = ServiceBuilder::new()
///     .layer(backstop::RetryLayer::new(policy))
///     .service(transport);
/// let req = http::Request::get("http://example.com/").body(String::new()).unwrap();
/// let result = client.ready().await.unwrap().call(req).await;
///
/// let report = Report::of(&result);
/// // Three 503s: the last was still worth a retry, but the attempts ran out.
/// assert_eq!(report.attempts(), 3);
/// assert!(report.is_retryable());
/// assert_eq!(report.stop_reason(), Some(StopReason::AttemptsExhausted));
/// # }
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Report<'a> {
    history: Option<&'a History>,
    retryable: bool,
    stop: Option<StopReason>,
    error: bool,
}

impl<'a> Report<'a> {
    /// The report of a call's result.
    pub fn of<B, E: CallError>(result: &'a Result<Response<B>, E>) -> Self {
        match result {
            Ok(res) => {
                let history = res.extensions().get::<History>();
                Report {
                    history,
                    retryable: history.is_some_and(History::is_retryable),
                    stop: history.map_or(Some(StopReason::Answered), History::stop_reason),
                    error: false,
                }
            }
            Err(err) => match err.backstop_error() {
                Some(err) => Report {
                    history: err.history(),
                    retryable: err.is_retryable(),
                    stop: err.stop_reason(),
                    error: true,
                },
                None => Report {
                    history: None,
                    retryable: false,
                    stop: None,
                    error: true,
                },
            },
        }
    }

    /// The attempt history, when the call carries one.
    pub fn history(&self) -> Option<&'a History> {
        self.history
    }

    /// How many sends were made: 1 for an answer at the first attempt without a
    /// history, 0 for an error no backstop layer recorded.
    pub fn attempts(&self) -> usize {
        match self.history {
            Some(h) => h.len(),
            None if !self.error => 1,
            None => 0,
        }
    }

    /// Whether the policy judged the last outcome worth sending again (a gate then
    /// stopped it): for a returned response as [`Error::is_retryable`] is for an
    /// error.
    pub fn is_retryable(&self) -> bool {
        self.retryable
    }

    /// Why the attempt sequence stopped (or why the call was refused); `None` for
    /// an error no backstop layer recorded.
    pub fn stop_reason(&self) -> Option<StopReason> {
        self.stop
    }

    /// Whether the result is an error.
    pub fn is_error(&self) -> bool {
        self.error
    }
}
