//! Initialisation, the driver version and the error strings.

use std::ffi::{CString, c_char, c_int, c_uint};
use std::sync::LazyLock;

use cuda_stream_sys::CUresult;

use super::call::{INVALID_VALUE, SUCCESS, api, put};

/// `cuInit`.
///
/// # Safety
///
/// None beyond the C contract; takes no pointers.
#[cfg_attr(exported = "cuInit", unsafe(no_mangle))]
pub unsafe extern "C" fn cuInit(flags: c_uint) -> CUresult {
    api("cuInit", true, |mut st| {
        if flags != 0 {
            return INVALID_VALUE;
        }
        if st.devices == 0 {
            return CUresult::CUDA_ERROR_NO_DEVICE;
        }
        st.initialized = true;
        SUCCESS
    })
}

/// `cuDriverGetVersion`: the configured version (default: the flavour's).
///
/// # Safety
///
/// `version` is null or valid for a write.
#[cfg_attr(exported = "cuDriverGetVersion", unsafe(no_mangle))]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> CUresult {
    api("cuDriverGetVersion", true, |st| {
        if version.is_null() {
            return INVALID_VALUE;
        }
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(version, st.version) };
        SUCCESS
    })
}

/// Static C strings for every code the header defines: (name, description).
static ERROR_STRINGS: LazyLock<Vec<(u32, CString, CString)>> = LazyLock::new(|| {
    (0..1000)
        .filter_map(|c| {
            let r = CUresult(c);
            let name = cuda_stream_sys::result_name(r);
            if name == "CUDA_ERROR_UNKNOWN_CODE" {
                return None;
            }
            let desc = cuda_stream_sys::result_description(r);
            Some((c, CString::new(name).ok()?, CString::new(desc).ok()?))
        })
        .collect()
});

fn error_string(
    symbol: &'static str,
    error: CUresult,
    out: *mut *const c_char,
    name: bool,
) -> CUresult {
    api(symbol, true, |_st| {
        if out.is_null() {
            return INVALID_VALUE;
        }
        let found = ERROR_STRINGS.iter().find(|e| e.0 == error.0);
        let p = found.map_or(std::ptr::null(), |e| {
            if name { e.1.as_ptr() } else { e.2.as_ptr() }
        });
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(out, p) };
        if found.is_some() {
            SUCCESS
        } else {
            INVALID_VALUE
        }
    })
}

/// `cuGetErrorName`: the enumerator's name, a string that lives as long as the process.
///
/// # Safety
///
/// `p_str` is null or valid for a write.
#[cfg_attr(exported = "cuGetErrorName", unsafe(no_mangle))]
pub unsafe extern "C" fn cuGetErrorName(error: CUresult, p_str: *mut *const c_char) -> CUresult {
    error_string("cuGetErrorName", error, p_str, true)
}

/// `cuGetErrorString`: the header's description of the code.
///
/// # Safety
///
/// `p_str` is null or valid for a write.
#[cfg_attr(exported = "cuGetErrorString", unsafe(no_mangle))]
pub unsafe extern "C" fn cuGetErrorString(error: CUresult, p_str: *mut *const c_char) -> CUresult {
    error_string("cuGetErrorString", error, p_str, false)
}
