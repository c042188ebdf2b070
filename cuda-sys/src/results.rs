//! Names and descriptions of `CUresult` codes, with or without a driver.

use std::ffi::{CStr, c_char};

use crate::generated::results::RESULTS;
use crate::generated::types::CUresult;
use crate::loader::Driver;

fn table(r: CUresult) -> Option<&'static (u32, &'static str, &'static str)> {
    RESULTS
        .binary_search_by_key(&r.0, |e| e.0)
        .ok()
        .map(|i| &RESULTS[i])
}

/// The enumerator's name, such as `CUDA_ERROR_INVALID_CONTEXT`. Works without a driver: the names
/// come from the header. For a code newer than the header, asks the process-wide driver's
/// `cuGetErrorName` if a driver is already loaded, else returns `CUDA_ERROR_UNKNOWN_CODE`.
pub fn result_name(r: CUresult) -> &'static str {
    if let Some(e) = table(r) {
        return e.1;
    }
    driver_string(r, true).unwrap_or("CUDA_ERROR_UNKNOWN_CODE")
}

/// A sentence describing the code: the driver's `cuGetErrorString` when a driver is loaded, else
/// the header's documentation of the enumerator.
pub fn result_description(r: CUresult) -> &'static str {
    if let Some(s) = driver_string(r, false) {
        return s;
    }
    table(r).map_or("unrecognized CUresult", |e| e.2)
}

fn driver_string(r: CUresult, name: bool) -> Option<&'static str> {
    let d = Driver::global_if_loaded()?;
    let mut p: *const c_char = std::ptr::null();
    let rc = if name {
        let f = d.cuGetErrorName().ok()?;
        // SAFETY: `p` is a valid out-pointer; the driver accepts any code and reports
        // CUDA_ERROR_INVALID_VALUE for unknown ones.
        unsafe { f(r, &mut p) }
    } else {
        let f = d.cuGetErrorString().ok()?;
        // SAFETY: as above.
        unsafe { f(r, &mut p) }
    };
    if rc != CUresult::CUDA_SUCCESS || p.is_null() {
        return None;
    }
    // SAFETY: the driver returns a pointer to a static NUL-terminated string it owns for the
    // life of the process (the global driver is never unloaded).
    unsafe { CStr::from_ptr(p) }.to_str().ok()
}
