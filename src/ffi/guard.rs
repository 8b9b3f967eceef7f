//! Panic and error containment for every C entry point: a panic becomes ncclInternalError plus a
//! WARN line, an error its ncclResult_t plus a WARN line; nothing unwinds into NCCL.

use std::panic::{catch_unwind, AssertUnwindSafe};

use super::sys::ncclResult_t;
use dqplb_transport::{ErrorCode, NetResult};

pub fn code(c: ErrorCode) -> ncclResult_t {
    match c {
        ErrorCode::SystemError => ncclResult_t::ncclSystemError,
        ErrorCode::InternalError => ncclResult_t::ncclInternalError,
        ErrorCode::InvalidArgument => ncclResult_t::ncclInvalidArgument,
        ErrorCode::InvalidUsage => ncclResult_t::ncclInvalidUsage,
        ErrorCode::RemoteError => ncclResult_t::ncclRemoteError,
    }
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

/// Runs one entry point's body. `on_error` runs (inside the guard) after a failure or panic so
/// output pointers are always left in a defined state.
pub fn guard(
    entry: &str,
    body: impl FnOnce() -> NetResult<()>,
    on_error: impl FnOnce(),
) -> ncclResult_t {
    let r = catch_unwind(AssertUnwindSafe(body));
    let result = match r {
        Ok(Ok(())) => return ncclResult_t::ncclSuccess,
        Ok(Err(e)) => {
            tracing::warn!(target: "dqplb::net", "{entry}: {}", e.msg);
            code(e.code)
        }
        Err(p) => {
            // Logging itself must not unwind out of here.
            let text = panic_text(p.as_ref());
            let _ = catch_unwind(AssertUnwindSafe(|| {
                tracing::warn!(target: "dqplb::net", "{entry}: internal error (panic: {text})");
            }));
            ncclResult_t::ncclInternalError
        }
    };
    let _ = catch_unwind(AssertUnwindSafe(on_error));
    result
}
