//! Cancelling a request: a token the caller cancels when its client goes away or its deadline
//! passes, checked by the work between stages and watched by whoever waits for the answer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{EngineError, Result};

/// A request's way of saying it is no longer wanted: the client went away or its deadline
/// passed. Cheap to clone; every clone sees the same state.
///
/// Work checks it between stages and stops early; whoever waits on the result registers a
/// hook with [`CancelToken::on_cancel`] so that the answer (a rejection) goes out at once
/// rather than when the work would have finished.
#[derive(Clone, Default)]
pub struct CancelToken(Arc<CancelState>);

#[derive(Default)]
struct CancelState {
    cancelled: AtomicBool,
    hooks: Mutex<Vec<Box<dyn FnOnce() + Send>>>,
}

impl CancelToken {
    pub fn new() -> CancelToken {
        CancelToken::default()
    }

    /// Marks the work cancelled and runs the hooks, once; later calls do nothing.
    pub fn cancel(&self) {
        if self.0.cancelled.swap(true, Ordering::AcqRel) {
            return;
        }
        let hooks = self.0.hooks.lock().map(|mut h| std::mem::take(&mut *h)).unwrap_or_default();
        for hook in hooks {
            hook();
        }
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.cancelled.load(Ordering::Acquire)
    }

    /// `Err(Cancelled)` once cancelled: for `?` between stages of the work.
    pub fn check(&self) -> Result<()> {
        if self.is_cancelled() { Err(EngineError::Cancelled) } else { Ok(()) }
    }

    /// Runs `hook` when the token is cancelled (at once if it already is).
    pub fn on_cancel(&self, hook: impl FnOnce() + Send + 'static) {
        if let Ok(mut hooks) = self.0.hooks.lock() {
            if !self.is_cancelled() {
                hooks.push(Box::new(hook));
                return;
            }
        }
        hook();
    }
}
