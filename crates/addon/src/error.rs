//! Engine errors as JavaScript errors: `err.code` is the engine's stable code string
//! (IMAGE_UNSUPPORTED, OVERLOADED, ...), `err.message` the human-readable detail.

use face_engine::EngineError;
use napi::bindgen_prelude::*;
use napi::{Env, JsDeferred, JsError};

/// Builds a JS `Error` whose `code` is the engine code, wrapped so that napi rejects promises
/// with this exact object.
pub fn js_error(env: &Env, e: &EngineError) -> Error {
    let status: Error<&'static str> = Error::new(e.code(), e.to_string());
    let value = JsError::from(status).into_unknown(*env);
    Error::from(value)
}

type Settle<T> = Box<dyn FnOnce(Env) -> Result<T>>;

/// Settles `deferred` on the JavaScript thread: `to_js` converts a success, an engine error
/// becomes a coded rejection.
pub fn settle_later<R, T, F>(deferred: JsDeferred<T, Settle<T>>, result: std::result::Result<R, EngineError>, to_js: F)
where
    R: Send + 'static,
    T: ToNapiValue + 'static,
    F: FnOnce(Env, R) -> Result<T> + Send + 'static,
{
    deferred.resolve(Box::new(move |env: Env| match result {
        Ok(value) => to_js(env, value),
        Err(e) => Err(js_error(&env, &e)),
    }));
}

/// Rejects a promise that was just created on the JavaScript thread and returns it, so that
/// argument errors also arrive as rejections (never as synchronous throws).
pub fn reject_now<'env, T: ToNapiValue + 'static>(
    deferred: JsDeferred<T, Settle<T>>,
    promise: Object<'env>,
    e: EngineError,
) -> Result<Object<'env>> {
    settle_later::<(), T, _>(deferred, Err(e), |_, _| unreachable!("only errors reach here"));
    Ok(promise)
}
