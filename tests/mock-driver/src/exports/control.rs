//! The `cuda_mock_*` control functions: reset, configuration, failure rules, and the counters of
//! streams, events, contexts and calls.

use std::ffi::{CString, c_char, c_int, c_void};
use std::sync::LazyLock;

use cuda_stream_sys::CUresult;

use super::call::{c_str, guard, pause_after, paused, read, resume};
use crate::base::config::MAX_DEVICES;
use crate::base::config::{Rule, parse_config};
use crate::base::flavour::{FLAVOUR, canonical};
use crate::model::records::{EventRec, Object, StreamRec};
use crate::state::{self, State};

/// applies `CUDA_MOCK_CONFIG` again, and lets a caller held by a pause go. Handles, contexts and
/// queued host functions are untouched.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_reset() {
    guard((), || {
        resume();
        state::lock().reset();
    });
}

/// Holds the caller of the next call of `name` (any thread), after it is answered, until
/// `cuda_mock_resume`: returns 0, or -1 for a symbol the flavour does not export.
///
/// # Safety
///
/// `name` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_mock_pause_after(name: *const c_char) -> c_int {
    // SAFETY: the caller's promise.
    let name = unsafe { c_str(name) };
    guard(-1, || match name.and_then(canonical) {
        Some(symbol) => {
            pause_after(symbol);
            0
        }
        None => -1,
    })
}

/// 1 while a caller is held by `cuda_mock_pause_after`, else 0.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_paused() -> c_int {
    guard(0, || c_int::from(paused()))
}

/// Lets the held caller go on (and forgets a pause that has not fired).
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_resume() {
    guard((), resume);
}

/// Applies a configuration in `CUDA_MOCK_CONFIG` syntax on top of the current one. Returns 0, or
/// -1 (after printing why to stderr) if the string does not parse; then nothing is applied.
///
/// # Safety
///
/// `spec` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_mock_configure(spec: *const c_char) -> c_int {
    guard(-1, || {
        // SAFETY: the caller's promise.
        let Some(spec) = (unsafe { c_str(spec) }) else {
            return -1;
        };
        match parse_config(spec) {
            Ok(cfg) => {
                state::lock().apply(cfg);
                0
            }
            Err(e) => {
                use std::io::Write as _;
                let _ = writeln!(std::io::stderr(), "cuda_mock_configure: {e}");
                -1
            }
        }
    })
}

fn add_rule(name: *const c_char, nth: Option<u64>, code: u32) -> c_int {
    guard(-1, || {
        // SAFETY: the exported callers pass on their own caller's promise.
        let Some(symbol) = (unsafe { c_str(name) }).and_then(canonical) else {
            return -1;
        };
        state::lock()
            .rules
            .push(Rule::new(symbol, nth, CUresult(code)));
        0
    })
}

/// Fails the `nth` call (1-based, counted from now) of `name` with `code`. `name` is the exported
/// symbol or the name C code writes (`cuStreamDestroy` means `cuStreamDestroy_v2`). Returns 0, or
/// -1 for a symbol the mock does not export or `nth == 0`.
///
/// # Safety
///
/// `name` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_mock_fail(name: *const c_char, nth: u32, code: u32) -> c_int {
    if nth == 0 {
        return -1;
    }
    add_rule(name, Some(u64::from(nth)), code)
}

/// Fails every call of `name` with `code` until `cuda_mock_reset`. Returns 0 or -1 as
/// [`cuda_mock_fail`].
///
/// # Safety
///
/// `name` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_mock_fail_always(name: *const c_char, code: u32) -> c_int {
    add_rule(name, None, code)
}

/// Forgets the failure rules added since the last reset (`CUDA_MOCK_CONFIG`'s stay); counters
/// and the race detector's records are untouched.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_clear_failures() {
    guard((), || {
        let mut st = state::lock();
        st.rules = st.baseline.rules.clone();
    });
}

/// The flavour this library was built as, such as `CUDA 12.2, no cuGetProcAddress`: a string
/// that lives as long as the process.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_flavour() -> *const c_char {
    static NAME: LazyLock<CString> =
        LazyLock::new(|| CString::new(FLAVOUR.name).unwrap_or_default());
    NAME.as_ptr()
}

/// 1 if this flavour exports the symbol `name` means (as for [`cuda_mock_fail`]), else 0.
///
/// # Safety
///
/// `name` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_mock_exports(name: *const c_char) -> c_int {
    // SAFETY: the caller's promise.
    let name = unsafe { c_str(name) };
    guard(0, || c_int::from(name.and_then(canonical).is_some()))
}

/// Sets the version `cuDriverGetVersion` reports.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_set_version(version: c_int) {
    guard((), || state::lock().version = version);
}

/// Sets how many devices there are (0 to 8). Returns 0, or -1 if out of range.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_set_device_count(count: c_int) -> c_int {
    guard(-1, || match usize::try_from(count) {
        Ok(n) if n <= MAX_DEVICES => {
            state::lock().devices = n;
            0
        }
        _ => -1,
    })
}

/// Streams created and not destroyed (by `cuStreamDestroy` or with their context).
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_live_streams() -> u64 {
    read(|st| st.live_streams)
}

/// Events created or opened and not destroyed.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_live_events() -> u64 {
    read(|st| st.live_events)
}

/// Primary-context references held: retains minus releases, over all devices.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_live_primary_retains() -> u64 {
    read(|st| st.ctxs.iter().map(|c| c.refs).sum())
}

/// Successful `cuStreamDestroy` calls since the last reset.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_destroyed_streams() -> u64 {
    read(|st| st.counters.destroyed_streams)
}

/// Successful `cuEventDestroy` calls since the last reset.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_destroyed_events() -> u64 {
    read(|st| st.counters.destroyed_events)
}

/// Destroys of something that was not a live handle of the right kind (unknown, already destroyed,
/// null or special) and releases of an unretained primary context, since the last reset.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_bad_destroys() -> u64 {
    read(|st| st.counters.bad_destroys)
}

/// Uses of an unknown or destroyed stream, event or context handle since the last reset.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_bad_uses() -> u64 {
    read(|st| st.counters.bad_uses)
}

/// Streams and events destroyed implicitly because their primary context's last reference was
/// released, since the last reset.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_orphans() -> u64 {
    read(|st| st.counters.orphans)
}

/// Driver calls made from inside a host function or stream callback (refused with
/// `CUDA_ERROR_NOT_PERMITTED`) since the last reset.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_host_fn_api_calls() -> u64 {
    read(|st| st.counters.host_fn_api_calls)
}

/// Host functions, callbacks and event records queued or running.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_pending_host_fns() -> u64 {
    read(State::pending_jobs)
}

/// Calls of `name` (as for [`cuda_mock_fail`]) since the last reset, failed ones included; 0 for
/// a name the mock does not export.
///
/// # Safety
///
/// `name` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_mock_calls(name: *const c_char) -> u64 {
    // SAFETY: the caller's promise.
    let Some(symbol) = (unsafe { c_str(name) }).and_then(canonical) else {
        return 0;
    };
    read(|st| st.calls.get(symbol).copied().unwrap_or(0))
}

/// Whether a stream or event handle the mock created has been destroyed: 1 destroyed (explicitly
/// or with its context), 0 alive, -1 not a handle the mock ever created.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_destroyed(handle: *mut c_void) -> c_int {
    guard(-1, || match state::lock().objects.get(&(handle as usize)) {
        Some(Object::Stream(StreamRec { alive, .. }) | Object::Event(EventRec { alive, .. })) => {
            c_int::from(!*alive)
        }
        None => -1,
    })
}

/// The creation flags of an event handle the mock created (alive or destroyed), or -1 for
/// anything else.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_event_flags(handle: *mut c_void) -> i64 {
    guard(-1, || match state::lock().objects.get(&(handle as usize)) {
        Some(Object::Event(e)) => i64::from(e.flags),
        _ => -1,
    })
}
