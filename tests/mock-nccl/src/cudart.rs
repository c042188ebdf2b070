//! What the CUDA runtime does to the calling thread's current context when NCCL asks it for the
//! current device and sets one, against the mock driver the tests load (named by
//! `mock_nccl_use_driver`; without it nothing is emulated).
//!
//! Measured with NCCL 2.28.9 on two H100s (`tests/examples/contexts.rs`): NCCL asks which
//! device is current (`cudaGetDevice`: the current context's device, and device 0 when no
//! context is current), makes the communicator's device current for its work (`cudaSetDevice`:
//! that device's primary context, retained and made current) and makes the device it found
//! current again. So `ncclCommInitAll` and a collective called with no context current leave
//! device 0's primary context current, and `ncclCommInitRank` called so makes a communicator of
//! device 0.

use std::ffi::{CStr, c_char, c_int};
use std::ptr;
use std::sync::{Mutex, OnceLock};

use cuda_stream_sys::{CUcontext, CUresult, Driver};

static DRIVER: OnceLock<Driver> = OnceLock::new();
/// The primary contexts retained by `set_device`, by device (the runtime keeps them for the
/// life of the process).
static RETAINED: Mutex<Vec<(c_int, usize)>> = Mutex::new(Vec::new());

/// Emulates the runtime against the driver at `path` from now on.
pub(crate) fn use_driver(path: &std::ffi::OsStr) -> bool {
    if DRIVER.get().is_some() {
        return true;
    }
    // SAFETY: the path the test passes is the mock driver it loaded itself.
    match unsafe { Driver::open(path) } {
        Ok(d) => DRIVER.set(d).is_ok() || DRIVER.get().is_some(),
        Err(_) => false,
    }
}

fn ok(rc: CUresult) -> bool {
    rc == CUresult::CUDA_SUCCESS
}

/// `cudaGetDevice`: the current context's device, 0 with none (or without a driver).
pub(crate) fn get_device() -> c_int {
    let Some(d) = DRIVER.get() else { return 0 };
    let (Ok(get), Ok(device)) = (d.cuCtxGetCurrent(), d.cuCtxGetDevice()) else {
        return 0;
    };
    let mut cur: CUcontext = ptr::null_mut();
    // SAFETY: a valid out-pointer.
    if !ok(unsafe { get(&mut cur) }) || cur.is_null() {
        return 0;
    }
    let mut dev = 0;
    // SAFETY: a valid out-pointer; a context is current.
    if ok(unsafe { device(&mut dev) }) {
        dev
    } else {
        0
    }
}

/// `cudaSetDevice`: retains `dev`'s primary context (once) and makes it current.
pub(crate) fn set_device(dev: c_int) {
    let Some(d) = DRIVER.get() else { return };
    let (Ok(retain), Ok(set)) = (d.cuDevicePrimaryCtxRetain(), d.cuCtxSetCurrent()) else {
        return;
    };
    let mut retained = RETAINED.lock().unwrap_or_else(|e| e.into_inner());
    let ctx = match retained.iter().find(|(r, _)| *r == dev) {
        Some(&(_, c)) => c as CUcontext,
        None => {
            let mut c: CUcontext = ptr::null_mut();
            // SAFETY: a valid out-pointer; the mock checks the ordinal.
            if !ok(unsafe { retain(&mut c, dev) }) {
                return;
            }
            retained.push((dev, c as usize));
            c
        }
    };
    // SAFETY: a live (retained) context.
    unsafe { set(ctx) };
}

/// Runs `f` with each of `devices` made current in turn (`f` gets the device), as NCCL does,
/// then makes the device that was current before current again.
pub(crate) fn on_devices<R>(devices: &[c_int], mut f: impl FnMut(c_int) -> R) -> Vec<R> {
    if DRIVER.get().is_none() {
        return devices.iter().map(|&d| f(d)).collect();
    }
    let saved = get_device();
    let out = devices
        .iter()
        .map(|&d| {
            if get_device() != d {
                set_device(d);
            }
            f(d)
        })
        .collect();
    if get_device() != saved {
        set_device(saved);
    }
    out
}

/// Emulates the CUDA runtime's current device (see `cudart`) against the driver library at
/// `path` (the mock driver the test loaded): 1 if it opened.
///
/// # Safety
///
/// `path` is a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mock_nccl_use_driver(path: *const c_char) -> c_int {
    if path.is_null() {
        return 0;
    }
    // SAFETY: the caller's contract.
    let path = unsafe { CStr::from_ptr(path) };
    let path = std::ffi::OsString::from(path.to_string_lossy().into_owned());
    c_int::from(use_driver(&path))
}
