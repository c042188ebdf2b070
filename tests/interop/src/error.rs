//! The error codes the entry points return, and the ABI boundary: [`ffi_call`] turns a result or a
//! panic into a code, and keeps its message for [`csi_last_error`].

use std::cell::RefCell;
use std::ffi::{CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

use cuda_stream::Error;
use cuda_stream_sys as sys;

/// No usable CUDA driver, or the driver lacks a function this call needs.
pub const CSI_ERR_NO_DRIVER: i32 = -1;
/// A null out-pointer or an argument out of range.
pub const CSI_ERR_INVALID_ARGUMENT: i32 = -2;
/// A default-stream value (0x0, 0x1, 0x2) with no context current on the thread, or a stream of
/// a context that is not its device's primary context.
pub const CSI_ERR_CONTEXT: i32 = -3;
/// `csi_stream_wait_and_check` / `csi_stream_destroy` got a handle `csi_stream_create` did not
/// return (or one already destroyed).
pub const CSI_ERR_UNKNOWN_HANDLE: i32 = -4;
/// `csi_stream_wait_and_check` found elements that differ from the expected value.
pub const CSI_ERR_MISMATCH: i32 = -5;
/// A panic inside the library (caught at the boundary).
pub const CSI_ERR_PANIC: i32 = -6;
/// Any other error of `cuda-stream`.
pub const CSI_ERR_OTHER: i32 = -7;
/// `csi_capture_add_and_count` on a stream that is not being captured.
pub const CSI_ERR_NOT_CAPTURING: i32 = -8;

/// A failed call: the code returned across the ABI and the message `csi_last_error` gives.
#[derive(Debug)]
pub(crate) struct Fail {
    pub(crate) code: i32,
    pub(crate) message: String,
}

impl Fail {
    pub(crate) fn new(code: i32, message: impl Into<String>) -> Fail {
        Fail {
            code,
            message: message.into(),
        }
    }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        let code = match &e {
            Error::Driver { code, .. } => code.0.0 as i32,
            Error::Load(_) | Error::Unsupported { .. } => CSI_ERR_NO_DRIVER,
            Error::SpecialHandle { .. } | Error::NullHandle { .. } | Error::NoSuchDevice { .. } => {
                CSI_ERR_INVALID_ARGUMENT
            }
            Error::ContextMismatch { .. } => CSI_ERR_CONTEXT,
            Error::NotCapturing { .. } => CSI_ERR_NOT_CAPTURING,
            _ => CSI_ERR_OTHER,
        };
        // The whole chain: `no usable CUDA driver: no CUDA driver library could be loaded; ...`.
        let mut message = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            message.push_str(": ");
            message.push_str(&s.to_string());
            source = s.source();
        }
        Fail::new(code, message)
    }
}

/// `Ok` for `CUDA_SUCCESS`, else the code and the driver's name and description of it.
pub(crate) fn check(rc: sys::CUresult, call: &str) -> Result<(), Fail> {
    if rc == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Fail::new(
            rc.0 as i32,
            format!(
                "{call}: {} ({})",
                sys::result_name(rc),
                sys::result_description(rc)
            ),
        ))
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: &str) {
    let c = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

/// Runs one ABI call: 0 on success, else the failure's code with its message stored for
/// `csi_last_error`. A panic never unwinds into the C caller.
pub(crate) fn ffi_call(f: impl FnOnce() -> Result<(), Fail>) -> i32 {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => {
            set_last_error("");
            0
        }
        Ok(Err(fail)) => {
            set_last_error(&fail.message);
            fail.code
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic payload".to_owned());
            set_last_error(&format!("panic in cuda-stream-interop: {what}"));
            CSI_ERR_PANIC
        }
    }
}

/// The message of the calling thread's last failed call ("" after a successful one). The string
/// is valid until the thread's next call into this library.
#[unsafe(no_mangle)]
pub extern "C" fn csi_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}
