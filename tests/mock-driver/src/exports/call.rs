//! What every export shares: the prologue that counts a call and applies the failure rules, the
//! panic guard, and the helpers for out-pointers, C strings and stream handles.

use std::ffi::{CStr, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

use cuda_stream_sys::{CUresult, CUstream};

use crate::state::{self, State};

pub(crate) const SUCCESS: CUresult = CUresult::CUDA_SUCCESS;
pub(crate) const INVALID_VALUE: CUresult = CUresult::CUDA_ERROR_INVALID_VALUE;
pub(crate) const INVALID_HANDLE: CUresult = CUresult::CUDA_ERROR_INVALID_HANDLE;
pub(crate) const NOT_READY: CUresult = CUresult::CUDA_ERROR_NOT_READY;

/// Runs `f`, turning a panic into `on_panic`.
pub(crate) fn guard<T>(on_panic: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(on_panic)
}

/// The common prologue of a driver function: counts the call, refuses calls from host functions
/// (`CUDA_ERROR_NOT_PERMITTED`), applies the failure rules, checks `cuInit` (unless `any_time`),
/// then runs `body` with the state locked; once answered, holds the caller if a pause was set
/// for `symbol` ([`pause_after`]).
pub(crate) fn api(
    symbol: &'static str,
    any_time: bool,
    body: impl FnOnce(MutexGuard<'static, State>) -> CUresult,
) -> CUresult {
    let rc = guard(CUresult::CUDA_ERROR_UNKNOWN, || {
        let mut st = state::lock();
        *st.calls.entry(symbol).or_default() += 1;
        if state::threads::on_worker() {
            st.counters.host_fn_api_calls += 1;
            return CUresult::CUDA_ERROR_NOT_PERMITTED;
        }
        if let Some(code) = st.injected_failure(symbol) {
            return code;
        }
        if !any_time && !st.initialized {
            return CUresult::CUDA_ERROR_NOT_INITIALIZED;
        }
        body(st)
    });
    if PAUSE_ARMED.load(Ordering::Acquire) {
        pause_point(symbol);
    }
    rc
}

/// Whether a pause is set (one load on every call when none is).
static PAUSE_ARMED: AtomicBool = AtomicBool::new(false);

/// The pause: the symbol whose next call is held, and whether a caller is held now.
#[derive(Default)]
struct Pause {
    armed: Option<&'static str>,
    held: bool,
}

static PAUSE: Mutex<Pause> = Mutex::new(Pause {
    armed: None,
    held: false,
});
static PAUSE_CHANGED: Condvar = Condvar::new();

fn pause() -> MutexGuard<'static, Pause> {
    PAUSE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Holds the caller of `symbol` if the pause is set for it, until [`resume`].
fn pause_point(symbol: &'static str) {
    let mut p = pause();
    if p.armed != Some(symbol) {
        return;
    }
    p.armed = None;
    PAUSE_ARMED.store(false, Ordering::Release);
    p.held = true;
    PAUSE_CHANGED.notify_all();
    while p.held {
        p = PAUSE_CHANGED.wait(p).unwrap_or_else(|e| e.into_inner());
    }
}

/// The next call of `symbol` (by any thread), once answered, holds its caller until [`resume`]:
/// a test decides what happens between two driver calls of another thread.
pub(crate) fn pause_after(symbol: &'static str) {
    let mut p = pause();
    p.armed = Some(symbol);
    PAUSE_ARMED.store(true, Ordering::Release);
}

/// Whether a caller is held by the pause.
pub(crate) fn paused() -> bool {
    pause().held
}

/// Lets a held caller go on, and forgets a pause that has not fired.
pub(crate) fn resume() {
    let mut p = pause();
    p.armed = None;
    PAUSE_ARMED.store(false, Ordering::Release);
    p.held = false;
    PAUSE_CHANGED.notify_all();
}

/// The graphs that explicit graph calls are using now, once per call (a graph twice: two calls
/// at once).
static GRAPHS_IN_USE: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// The prologue of an explicit graph call (`cuGraphRetainUserObject`, `cuGraphGetNodes`, ...) on
/// `graph`: as [`api`], and the driver's rule that graph objects are not synchronised (calls on
/// one graph must be serialised by the caller) is checked. The call marks the graph in use from
/// before it takes the mock's lock until after its body, yielding in between so that two
/// unserialised callers overlap; a call that finds the graph in use is counted
/// (`cuda_mock_concurrent_graph_calls`) and then runs as usual.
pub(crate) fn graph_api(
    symbol: &'static str,
    graph: usize,
    body: impl FnOnce(MutexGuard<'static, State>) -> CUresult,
) -> CUresult {
    let in_use = || GRAPHS_IN_USE.lock().unwrap_or_else(|e| e.into_inner());
    let clash = {
        let mut busy = in_use();
        let clash = busy.contains(&graph);
        busy.push(graph);
        clash
    };
    std::thread::yield_now();
    let rc = api(symbol, false, |mut st| {
        if clash {
            st.counters.concurrent_graph_calls += 1;
        }
        body(st)
    });
    let mut busy = in_use();
    if let Some(i) = busy.iter().position(|&g| g == graph) {
        busy.swap_remove(i);
    }
    rc
}

/// The prologue of a function the driver answers even from a host function (`cuGetProcAddress`):
/// counts the call and applies the failure rules, then runs `body` with the state locked.
pub(crate) fn entry_point(
    symbol: &'static str,
    body: impl FnOnce(MutexGuard<'static, State>) -> CUresult,
) -> CUresult {
    guard(CUresult::CUDA_ERROR_UNKNOWN, || {
        let mut st = state::lock();
        *st.calls.entry(symbol).or_default() += 1;
        if let Some(code) = st.injected_failure(symbol) {
            return code;
        }
        body(st)
    })
}

/// Writes `v` through the out-pointer `p`.
///
/// # Safety
///
/// `p` is non-null and valid for a write of `T` (the C contract of the calling driver function;
/// callers check for null first).
pub(crate) unsafe fn put<T>(p: *mut T, v: T) {
    // SAFETY: the caller's promise.
    unsafe { p.write(v) }
}

/// A C string argument of a control function.
///
/// # Safety
///
/// `p` is null or a NUL-terminated string valid for the call.
pub(crate) unsafe fn c_str<'a>(p: *const c_char) -> Option<&'a str> {
    if p.is_null() {
        return None;
    }
    // SAFETY: the caller's promise.
    unsafe { CStr::from_ptr(p) }.to_str().ok()
}

/// Forgets every failure rule and override, zeroes the counters (call counts included), then
pub(crate) fn read(f: impl FnOnce(&State) -> u64) -> u64 {
    guard(0, || f(&state::lock()))
}

/// The stream a `_ptsz` / `_ptds` function means by `h`: the null stream is the per-thread one.
pub(crate) fn per_thread_null(h: CUstream, per_thread: bool) -> CUstream {
    if per_thread && h.is_null() {
        std::ptr::without_provenance_mut(2)
    } else {
        h
    }
}
