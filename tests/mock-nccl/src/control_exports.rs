//! The `mock_nccl_*` control functions, which [`MockNccl`](crate::MockNccl) calls through the
//! loaded library.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::atomic::Ordering;

use cuda_stream_sys::nccl::ncclResult_t;

use crate::{HOOK, State, lock};

/// Forgets the failure rules, the counts and the records (communicators stay).
#[unsafe(no_mangle)]
pub extern "C" fn mock_nccl_reset() {
    let mut g = lock();
    let st = g.get_or_insert_with(State::default);
    st.fail.clear();
    st.calls.clear();
    st.last.clear();
    st.launched = 0;
}

/// Makes call `nth` of `name` (every call for 0) return `code`.
///
/// # Safety
///
/// `name` is a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mock_nccl_fail(name: *const c_char, nth: u64, code: u32) {
    // SAFETY: the caller's promise.
    let name = unsafe { CStr::from_ptr(name) }
        .to_string_lossy()
        .into_owned();
    let mut g = lock();
    let st = g.get_or_insert_with(State::default);
    st.fail.insert(name, (nth, ncclResult_t(code)));
}

/// Sets the asynchronous error `comm` reports; 1 if it is a live communicator, else 0.
#[unsafe(no_mangle)]
pub extern "C" fn mock_nccl_set_async_error(comm: usize, code: u32) -> c_int {
    let mut g = lock();
    let st = g.get_or_insert_with(State::default);
    match st.comms.get_mut(&comm) {
        Some(c) => {
            c.async_error = ncclResult_t(code);
            1
        }
        None => 0,
    }
}

/// How many times `name` was called since the last reset.
///
/// # Safety
///
/// `name` is a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mock_nccl_calls(name: *const c_char) -> u64 {
    // SAFETY: the caller's promise.
    let name = unsafe { CStr::from_ptr(name) }.to_string_lossy();
    let g = lock();
    g.as_ref()
        .and_then(|st| st.calls.get(name.as_ref()).copied())
        .unwrap_or(0)
}

/// Installs the test driver's `cuda_mock_stream_access` (null: none), to which every collective
/// reports the memory it touches.
#[unsafe(no_mangle)]
pub extern "C" fn mock_nccl_set_access_hook(hook: *const c_void) {
    HOOK.store(hook as usize, Ordering::Release);
}

/// Live communicators.
#[unsafe(no_mangle)]
pub extern "C" fn mock_nccl_live_comms() -> u64 {
    lock().as_ref().map_or(0, |st| st.comms.len() as u64)
}

/// Collectives launched since the last reset.
#[unsafe(no_mangle)]
pub extern "C" fn mock_nccl_launched() -> u64 {
    lock().as_ref().map_or(0, |st| st.launched)
}

/// Groups started and not ended.
#[unsafe(no_mangle)]
pub extern "C" fn mock_nccl_group_depth() -> c_int {
    lock().as_ref().map_or(0, |st| st.group_depth)
}

/// The last call of `name`: writes its count, datatype and stream; 0 if there was none.
///
/// # Safety
///
/// `name` is a NUL-terminated string; `out` is valid for a write of three values.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mock_nccl_last(name: *const c_char, out: *mut [usize; 3]) -> c_int {
    // SAFETY: the caller's promise.
    let name = unsafe { CStr::from_ptr(name) }.to_string_lossy();
    let g = lock();
    match g.as_ref().and_then(|st| st.last.get(name.as_ref())) {
        Some(&(count, datatype, stream)) => {
            // SAFETY: the caller's promise.
            unsafe { out.write([count, datatype as usize, stream]) };
            1
        }
        None => 0,
    }
}
