//! Streams: creation and destruction, queries and synchronisation, waits on events, host
//! functions and callbacks, and their properties.

use std::ffi::{c_int, c_uint, c_void};

use cuda_stream_sys::{
    CUcontext, CUdevice, CUevent, CUgreenCtx, CUhostFn, CUresult, CUstream, CUstreamCallback,
};

use super::call::{INVALID_HANDLE, INVALID_VALUE, NOT_READY, SUCCESS, api, per_thread_null, put};
use crate::base::config::{GREATEST_PRIORITY, LEAST_PRIORITY};
use crate::model::jobs::Work;
use crate::model::records::{Object, StreamRec};
use crate::state::{self};

const CU_STREAM_NON_BLOCKING: c_uint = 1;
const CU_EVENT_WAIT_EXTERNAL: c_uint = 1;

fn create_stream(
    symbol: &'static str,
    ph_stream: *mut CUstream,
    flags: c_uint,
    priority: c_int,
) -> CUresult {
    api(symbol, false, |mut st| {
        if ph_stream.is_null() || flags & !CU_STREAM_NON_BLOCKING != 0 {
            return INVALID_VALUE;
        }
        let ctx = tri!(st.current_ctx());
        let id = st.next_id();
        let h = st.new_handle(Object::Stream(StreamRec {
            ctx,
            flags,
            priority: priority.clamp(GREATEST_PRIORITY, LEAST_PRIORITY),
            id,
            alive: true,
        }));
        st.live_streams += 1;
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(ph_stream, h as CUstream) };
        SUCCESS
    })
}

/// `cuStreamCreate`: a new stream in the current context (flags 0 or `CU_STREAM_NON_BLOCKING`).
///
/// # Safety
///
/// `ph_stream` is null or valid for a write.
#[cfg_attr(exported = "cuStreamCreate", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamCreate(ph_stream: *mut CUstream, flags: c_uint) -> CUresult {
    create_stream("cuStreamCreate", ph_stream, flags, 0)
}

/// `cuStreamCreateWithPriority`: the priority is clamped to [-5, 0].
///
/// # Safety
///
/// `ph_stream` is null or valid for a write.
#[cfg_attr(exported = "cuStreamCreateWithPriority", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamCreateWithPriority(
    ph_stream: *mut CUstream,
    flags: c_uint,
    priority: c_int,
) -> CUresult {
    create_stream("cuStreamCreateWithPriority", ph_stream, flags, priority)
}

/// `cuStreamDestroy_v2`: host functions already queued still run. Destroying anything but a live
/// stream the mock created (null, the special handles, an event, a destroyed stream) returns
/// `CUDA_ERROR_INVALID_HANDLE` and is counted as a bad destroy.
///
/// # Safety
///
/// None beyond the C contract; the handle is only looked up, never dereferenced.
#[cfg_attr(exported = "cuStreamDestroy_v2", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamDestroy_v2(h_stream: CUstream) -> CUresult {
    destroy_stream("cuStreamDestroy_v2", h_stream)
}

/// `cuStreamDestroy` (the CUDA 2.0 ABI): as `_v2`.
///
/// # Safety
///
/// None beyond the C contract; the handle is only looked up, never dereferenced.
#[cfg_attr(exported = "cuStreamDestroy", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamDestroy(h_stream: CUstream) -> CUresult {
    destroy_stream("cuStreamDestroy", h_stream)
}

fn destroy_stream(symbol: &'static str, h_stream: CUstream) -> CUresult {
    api(symbol, false, |mut st| {
        match st.objects.get_mut(&(h_stream as usize)) {
            Some(Object::Stream(s)) if s.alive => {
                s.alive = false;
                st.live_streams -= 1;
                st.counters.destroyed_streams += 1;
                SUCCESS
            }
            _ => {
                st.counters.bad_destroys += 1;
                INVALID_HANDLE
            }
        }
    })
}

/// `cuStreamQuery`: `CUDA_ERROR_NOT_READY` while host functions (or an awaited event) queued on
/// the stream have not finished.
///
/// # Safety
///
/// None beyond the C contract; the handle is only looked up, never dereferenced.
#[cfg_attr(exported = "cuStreamQuery", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamQuery(h_stream: CUstream) -> CUresult {
    stream_query("cuStreamQuery", h_stream, false)
}

/// `cuStreamQuery_ptsz`: as `cuStreamQuery`, with the null stream meaning the calling thread's
/// per-thread default stream.
///
/// # Safety
///
/// None beyond the C contract; the handle is only looked up, never dereferenced.
#[cfg_attr(exported = "cuStreamQuery_ptsz", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamQuery_ptsz(h_stream: CUstream) -> CUresult {
    stream_query("cuStreamQuery_ptsz", h_stream, true)
}

fn stream_query(symbol: &'static str, h_stream: CUstream, per_thread: bool) -> CUresult {
    api(symbol, false, |mut st| {
        let s = tri!(st.stream(per_thread_null(h_stream, per_thread)));
        if let Some(rc) = crate::state::capture::on_stream_poll(&mut st, s) {
            return rc;
        }
        if !st.idle(s.key) {
            return NOT_READY;
        }
        let learnt = st.race_stream_clock(s);
        st.race_host_learns(&learnt);
        SUCCESS
    })
}
/// `cuStreamSynchronize`: waits for the stream's queued host functions.
///
/// # Safety
///
/// None beyond the C contract; the handle is only looked up, never dereferenced.
#[cfg_attr(exported = "cuStreamSynchronize", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamSynchronize(h_stream: CUstream) -> CUresult {
    stream_synchronize("cuStreamSynchronize", h_stream, false)
}

/// `cuStreamSynchronize_ptsz`: as `cuStreamSynchronize`, with the null stream meaning the
/// calling thread's per-thread default stream.
///
/// # Safety
///
/// None beyond the C contract; the handle is only looked up, never dereferenced.
#[cfg_attr(exported = "cuStreamSynchronize_ptsz", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamSynchronize_ptsz(h_stream: CUstream) -> CUresult {
    stream_synchronize("cuStreamSynchronize_ptsz", h_stream, true)
}

fn stream_synchronize(symbol: &'static str, h_stream: CUstream, per_thread: bool) -> CUresult {
    api(symbol, false, |mut st| {
        let s = tri!(st.stream(per_thread_null(h_stream, per_thread)));
        if let Some(rc) = crate::state::capture::on_stream_poll(&mut st, s) {
            return rc;
        }
        let learnt = st.race_stream_clock(s);
        let target = st.last_job.get(&s.key).copied().unwrap_or(0);
        state::wait_until_done(st, target).race_host_learns(&learnt);
        SUCCESS
    })
}

/// `cuStreamWaitEvent`: legal across contexts; the stream stays not-ready until the event's
/// current record completes.
///
/// # Safety
///
/// None beyond the C contract; the handles are only looked up, never dereferenced.
#[cfg_attr(exported = "cuStreamWaitEvent", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamWaitEvent(
    h_stream: CUstream,
    h_event: CUevent,
    flags: c_uint,
) -> CUresult {
    api("cuStreamWaitEvent", false, |mut st| {
        let s = tri!(st.stream(h_stream));
        let (_, _, core) = tri!(st.event(h_event as usize));
        if flags & !CU_EVENT_WAIT_EXTERNAL != 0 {
            return INVALID_VALUE;
        }
        if let Some(rc) = crate::state::capture::on_wait(&mut st, s, core, flags) {
            return rc;
        }
        st.race_wait(s, core);
        let seq = st
            .cores
            .get(&core)
            .and_then(|c| c.record)
            .map_or(0, |r| r.0);
        if seq > st.completed {
            st.wait_for_job(s.key, s.ctx, seq);
        }
        SUCCESS
    })
}

/// `cuStreamAddCallback`: `callback(stream, CUDA_SUCCESS, user_data)` runs on the mock's one
/// host-function thread after everything queued before it.
///
/// # Safety
///
/// `callback` must be sound to call from another thread with these arguments.
#[cfg_attr(exported = "cuStreamAddCallback", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamAddCallback(
    h_stream: CUstream,
    callback: CUstreamCallback,
    user_data: *mut c_void,
    flags: c_uint,
) -> CUresult {
    api("cuStreamAddCallback", false, |mut st| {
        let s = tri!(st.stream(h_stream));
        let Some(f) = callback else {
            return INVALID_VALUE;
        };
        if flags != 0 {
            return INVALID_VALUE;
        }
        if let Some(rc) = crate::state::capture::on_callback(&mut st, s) {
            return rc;
        }
        st.race_op(s, "cuStreamAddCallback", &[]);
        tri!(st.enqueue(s, Work::Callback(f, h_stream as usize, user_data as usize)));
        SUCCESS
    })
}

/// `cuLaunchHostFunc`: `f(user_data)` runs on the mock's one host-function thread after
/// everything queued before it.
///
/// # Safety
///
/// `f` must be sound to call from another thread with `user_data`.
#[cfg_attr(exported = "cuLaunchHostFunc", unsafe(no_mangle))]
pub unsafe extern "C" fn cuLaunchHostFunc(
    h_stream: CUstream,
    f: CUhostFn,
    user_data: *mut c_void,
) -> CUresult {
    api("cuLaunchHostFunc", false, |mut st| {
        let s = tri!(st.stream(h_stream));
        let Some(f) = f else {
            return INVALID_VALUE;
        };
        if let Some(rc) = crate::state::capture::on_host_fn(&mut st, s, f, user_data as usize) {
            return rc;
        }
        st.race_op(s, "cuLaunchHostFunc", &[]);
        tri!(st.enqueue(s, Work::Host(f, user_data as usize)));
        SUCCESS
    })
}

/// `cuStreamGetCtx`.
///
/// # Safety
///
/// `pctx` is null or valid for a write.
#[cfg_attr(exported = "cuStreamGetCtx", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamGetCtx(h_stream: CUstream, pctx: *mut CUcontext) -> CUresult {
    api("cuStreamGetCtx", false, |mut st| {
        let s = tri!(st.stream(h_stream));
        if pctx.is_null() {
            return INVALID_VALUE;
        }
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(pctx, s.ctx as CUcontext) };
        SUCCESS
    })
}

/// `cuStreamGetCtx_v2` (CUDA 12.5): the stream's context, and no green context (the mock has
/// none).
///
/// # Safety
///
/// `pctx` and `p_green_ctx` are each null or valid for a write.
#[cfg_attr(exported = "cuStreamGetCtx_v2", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamGetCtx_v2(
    h_stream: CUstream,
    pctx: *mut CUcontext,
    p_green_ctx: *mut CUgreenCtx,
) -> CUresult {
    api("cuStreamGetCtx_v2", false, |mut st| {
        let s = tri!(st.stream(h_stream));
        if pctx.is_null() || p_green_ctx.is_null() {
            return INVALID_VALUE;
        }
        // SAFETY: both non-null; the caller's contract makes them writable.
        unsafe {
            put(pctx, s.ctx as CUcontext);
            put(p_green_ctx, std::ptr::null_mut());
        }
        SUCCESS
    })
}

/// `cuStreamGetDevice` (CUDA 12.8).
///
/// # Safety
///
/// `device` is null or valid for a write.
#[cfg_attr(exported = "cuStreamGetDevice", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamGetDevice(h_stream: CUstream, device: *mut CUdevice) -> CUresult {
    api("cuStreamGetDevice", false, |mut st| {
        let s = tri!(st.stream(h_stream));
        if device.is_null() {
            return INVALID_VALUE;
        }
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(device, st.ctx_device(s.ctx)) };
        SUCCESS
    })
}

/// `cuStreamGetFlags`.
///
/// # Safety
///
/// `flags` is null or valid for a write.
#[cfg_attr(exported = "cuStreamGetFlags", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamGetFlags(h_stream: CUstream, flags: *mut c_uint) -> CUresult {
    api("cuStreamGetFlags", false, |mut st| {
        let s = tri!(st.stream(h_stream));
        if flags.is_null() {
            return INVALID_VALUE;
        }
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(flags, s.flags) };
        SUCCESS
    })
}

/// `cuStreamGetPriority`.
///
/// # Safety
///
/// `priority` is null or valid for a write.
#[cfg_attr(exported = "cuStreamGetPriority", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamGetPriority(h_stream: CUstream, priority: *mut c_int) -> CUresult {
    api("cuStreamGetPriority", false, |mut st| {
        let s = tri!(st.stream(h_stream));
        if priority.is_null() {
            return INVALID_VALUE;
        }
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(priority, s.priority) };
        SUCCESS
    })
}

/// `cuStreamGetId` (CUDA 12.0): unique per stream, never reused.
///
/// # Safety
///
/// `stream_id` is null or valid for a write.
#[cfg_attr(exported = "cuStreamGetId", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamGetId(
    h_stream: CUstream,
    stream_id: *mut std::ffi::c_ulonglong,
) -> CUresult {
    api("cuStreamGetId", false, |mut st| {
        let s = tri!(st.stream(h_stream));
        if stream_id.is_null() {
            return INVALID_VALUE;
        }
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(stream_id, s.id) };
        SUCCESS
    })
}
