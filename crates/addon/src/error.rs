//! Core errors as JavaScript errors: `err.code` is the crate's stable code string
//! (IMAGE_UNSUPPORTED, OVERLOADED, BAD_PARAM, ...), `err.message` the human-readable detail.

use face_engine::EngineError;
use face_index::IndexError;
use std::sync::{Arc, Mutex};

use napi::bindgen_prelude::*;
use napi::{Env, JsDeferred, JsError};

/// An error of one of the wrapped crates: each maps its variants to a stable code once.
pub trait Coded: std::fmt::Display + Send + 'static {
    fn code(&self) -> &'static str;
}

impl Coded for EngineError {
    fn code(&self) -> &'static str {
        EngineError::code(self)
    }
}

impl Coded for IndexError {
    fn code(&self) -> &'static str {
        IndexError::code(self)
    }
}

/// Builds a JS `Error` whose `code` is the crate's code, wrapped so that napi rejects promises
/// (or throws) with this exact object.
pub fn js_error<E: Coded + ?Sized>(env: &Env, e: &E) -> Error {
    let status: Error<&'static str> = Error::new(e.code(), e.to_string());
    let value = JsError::from(status).into_unknown(*env);
    Error::from(value)
}

type Settle<T> = Box<dyn FnOnce(Env) -> Result<T>>;

/// Settles `deferred` on the JavaScript thread: `to_js` converts a success, a crate error
/// becomes a coded rejection.
pub fn settle_later<R, T, F, E>(deferred: JsDeferred<T, Settle<T>>, result: std::result::Result<R, E>, to_js: F)
where
    R: Send + 'static,
    T: ToNapiValue + 'static,
    F: FnOnce(Env, R) -> Result<T> + Send + 'static,
    E: Coded,
{
    deferred.resolve(Box::new(move |env: Env| match result {
        Ok(value) => to_js(env, value),
        Err(e) => Err(js_error(&env, &e)),
    }));
}

/// Rejects a promise that was just created on the JavaScript thread and returns it, so that
/// argument errors also arrive as rejections (never as synchronous throws).
pub fn reject_now<'env, T: ToNapiValue + 'static, E: Coded>(
    deferred: JsDeferred<T, Settle<T>>,
    promise: Object<'env>,
    e: E,
) -> Result<Object<'env>> {
    settle_later::<(), T, _, E>(deferred, Err(e), |_, _| unreachable!("only errors reach here"));
    Ok(promise)
}

/// A new promise, already rejected with `e`: for arguments refused before any work starts.
pub fn rejected<'env, T: ToNapiValue + 'static, E: Coded>(env: &'env Env, e: E) -> Result<Object<'env>> {
    let (deferred, promise) = env.create_deferred::<T, Settle<T>>()?;
    reject_now(deferred, promise, e)
}

/// A promise that more than one party may settle: the work when it finishes, or the code that
/// handed the work over when the hand-over is refused (a full queue) or the caller cancels.
/// Whoever comes first settles it; later attempts do nothing. Cheap to clone.
pub struct PendingPromise<T: ToNapiValue + 'static>(Arc<Mutex<Option<JsDeferred<T, Settle<T>>>>>);

impl<T: ToNapiValue + 'static> Clone for PendingPromise<T> {
    fn clone(&self) -> Self {
        PendingPromise(Arc::clone(&self.0))
    }
}

impl<T: ToNapiValue + 'static> PendingPromise<T> {
    /// A new promise (returned to JavaScript) and the handle that settles it.
    pub fn new<'env>(env: &'env Env) -> Result<(PendingPromise<T>, Object<'env>)> {
        let (deferred, promise) = env.create_deferred::<T, Settle<T>>()?;
        Ok((PendingPromise(Arc::new(Mutex::new(Some(deferred)))), promise))
    }

    fn take(&self) -> Option<JsDeferred<T, Settle<T>>> {
        self.0.lock().ok().and_then(|mut d| d.take())
    }

    /// Settles with `result` (converted by `to_js` on the JavaScript thread), unless already settled.
    pub fn settle<R, F, E>(&self, result: std::result::Result<R, E>, to_js: F)
    where
        R: Send + 'static,
        F: FnOnce(Env, R) -> Result<T> + Send + 'static,
        E: Coded,
    {
        if let Some(deferred) = self.take() {
            settle_later(deferred, result, to_js);
        }
    }

    /// Rejects with `e`, unless already settled.
    pub fn reject<E: Coded>(&self, e: E) {
        self.settle::<(), _, E>(Err(e), |_, _| unreachable!("only errors reach here"));
    }
}
