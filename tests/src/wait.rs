//! Bounded waiting: the only way tests wait for a cluster to reach a state.
//!
//! A check is an async closure that is called again and again until it
//! succeeds or the deadline passes. The deadline bounds the whole wait,
//! including a check that is still running when it passes (that attempt is
//! dropped), so a hung request cannot stretch a wait beyond its timeout.
//!
//! A check returns either `Option<T>` (`None`: not yet) or `Result<T, E>`
//! with `E: Display` (`Err`: not yet, and why). The last reason is part of
//! the panic message of [`eventually`], which makes a timeout readable.

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// What a check returns: a value, or a description of why there is none yet.
pub trait Attempt {
    /// The value a successful check produces.
    type Output;

    /// The value, or why there is none yet.
    fn into_result(self) -> Result<Self::Output, String>;
}

impl<T> Attempt for Option<T> {
    type Output = T;

    fn into_result(self) -> Result<T, String> {
        self.ok_or_else(|| "the condition did not hold".to_owned())
    }
}

impl<T, E: Display> Attempt for Result<T, E> {
    type Output = T;

    fn into_result(self) -> Result<T, String> {
        self.map_err(|error| error.to_string())
    }
}

/// Calls `check` every `poll_interval` until it succeeds, for at most `timeout`.
///
/// Returns the value, or the last reason the check gave once the deadline has
/// passed. The check runs at least once, even with a zero timeout.
pub async fn poll_until<F, Fut, A>(
    timeout: Duration,
    poll_interval: Duration,
    mut check: F,
) -> Result<A::Output, String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = A>,
    A: Attempt,
{
    let deadline = Instant::now() + timeout;
    let mut last = String::from("no attempt finished");
    loop {
        match tokio::time::timeout_at(deadline, check()).await {
            Ok(outcome) => match outcome.into_result() {
                Ok(value) => return Ok(value),
                Err(reason) => last = reason,
            },
            Err(_elapsed) => {
                return Err(format!(
                    "{last} (the last attempt was still running at the deadline)"
                ));
            }
        }
        let next = Instant::now() + poll_interval;
        if next >= deadline {
            return Err(last);
        }
        tokio::time::sleep_until(next).await;
    }
}

/// Calls `check` every `poll_interval` until it succeeds and returns its value.
///
/// # Panics
///
/// When `timeout` passes first; the message names `what` was awaited and the
/// last reason the check gave.
pub async fn eventually<F, Fut, A>(
    what: &str,
    timeout: Duration,
    poll_interval: Duration,
    check: F,
) -> A::Output
where
    F: FnMut() -> Fut,
    Fut: Future<Output = A>,
    A: Attempt,
{
    match poll_until(timeout, poll_interval, check).await {
        Ok(value) => value,
        Err(last) => panic!("timed out after {timeout:?} waiting for {what}; last: {last}"),
    }
}
