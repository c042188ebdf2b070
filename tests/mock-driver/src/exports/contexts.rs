//! Primary contexts, the per-thread context stack, `cuCtxSynchronize` and the priority range.

use std::ffi::{c_int, c_uint};

use cuda_stream_sys::{CUcontext, CUdevice, CUresult};

use super::call::{INVALID_VALUE, SUCCESS, api, put};
use super::devices::valid_device;
use crate::base::config::{GREATEST_PRIORITY, LEAST_PRIORITY};
use crate::state::{self, State};

/// `cuDevicePrimaryCtxRetain`: one more reference to the device's primary context, whose handle
/// never changes.
///
/// # Safety
///
/// `pctx` is null or valid for a write.
#[cfg_attr(exported = "cuDevicePrimaryCtxRetain", unsafe(no_mangle))]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(pctx: *mut CUcontext, dev: CUdevice) -> CUresult {
    api("cuDevicePrimaryCtxRetain", false, |mut st| {
        if pctx.is_null() {
            return INVALID_VALUE;
        }
        tri!(valid_device(&st, dev));
        let Some(c) = st.device_ctx(dev) else {
            return CUresult::CUDA_ERROR_INVALID_DEVICE;
        };
        c.refs += 1;
        let h = c.handle;
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(pctx, h as CUcontext) };
        SUCCESS
    })
}

/// `cuDevicePrimaryCtxGetState`: no flags are modelled (0); active while retained.
///
/// # Safety
///
/// `flags` and `active` are each null or valid for a write.
#[cfg_attr(exported = "cuDevicePrimaryCtxGetState", unsafe(no_mangle))]
pub unsafe extern "C" fn cuDevicePrimaryCtxGetState(
    dev: CUdevice,
    flags: *mut c_uint,
    active: *mut c_int,
) -> CUresult {
    api("cuDevicePrimaryCtxGetState", false, |mut st| {
        if flags.is_null() || active.is_null() {
            return INVALID_VALUE;
        }
        tri!(valid_device(&st, dev));
        let Some(c) = st.device_ctx(dev) else {
            return CUresult::CUDA_ERROR_INVALID_DEVICE;
        };
        let on = c_int::from(c.refs > 0);
        // SAFETY: both non-null; the caller's contract makes them writable.
        unsafe {
            put(flags, 0);
            put(active, on);
        }
        SUCCESS
    })
}

fn primary_ctx_release(symbol: &'static str, dev: CUdevice) -> CUresult {
    api(symbol, false, |mut st| {
        tri!(valid_device(&st, dev));
        // The last reference: the driver finishes the context's queued work before it destroys
        // the context (and with it the memory that work may still free or touch). Not on the
        // worker thread, whose own queue that would be.
        while !state::threads::on_worker() {
            let Some(handle) = st.device_ctx(dev).filter(|c| c.refs == 1).map(|c| c.handle) else {
                break;
            };
            let target = st.ctx_last_job.get(&handle).copied().unwrap_or(0);
            if st.completed >= target {
                break;
            }
            st = state::wait_until_done(st, target);
        }
        tri!(st.release_ctx(dev));
        SUCCESS
    })
}

/// `cuDevicePrimaryCtxRelease_v2`: at zero references the context's queued work is finished, then
/// the context is destroyed with every stream and event still in it (counted as orphans). Releasing an unretained context is counted as a
/// bad destroy.
///
/// # Safety
///
/// None beyond the C contract; takes no pointers.
#[cfg_attr(exported = "cuDevicePrimaryCtxRelease_v2", unsafe(no_mangle))]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) -> CUresult {
    primary_ctx_release("cuDevicePrimaryCtxRelease_v2", dev)
}

/// `cuDevicePrimaryCtxRelease` (the CUDA 7.0 ABI): as `_v2`.
///
/// # Safety
///
/// None beyond the C contract; takes no pointers.
#[cfg_attr(exported = "cuDevicePrimaryCtxRelease", unsafe(no_mangle))]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease(dev: CUdevice) -> CUresult {
    primary_ctx_release("cuDevicePrimaryCtxRelease", dev)
}

/// A context handle from the caller: known, or counted as a bad use.
pub(crate) fn known_ctx(st: &mut State, ctx: CUcontext) -> Result<usize, CUresult> {
    let h = ctx as usize;
    if st.ctx(h).is_some() {
        Ok(h)
    } else {
        st.counters.bad_uses += 1;
        crate::base::trace_bad_use(file!(), line!());
        Err(CUresult::CUDA_ERROR_INVALID_CONTEXT)
    }
}

/// `cuCtxGetCurrent`: the top of the calling thread's context stack, or null.
///
/// # Safety
///
/// `pctx` is null or valid for a write.
#[cfg_attr(exported = "cuCtxGetCurrent", unsafe(no_mangle))]
pub unsafe extern "C" fn cuCtxGetCurrent(pctx: *mut CUcontext) -> CUresult {
    api("cuCtxGetCurrent", false, |_st| {
        if pctx.is_null() {
            return INVALID_VALUE;
        }
        let cur = state::threads::current().unwrap_or(0);
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(pctx, cur as CUcontext) };
        SUCCESS
    })
}

/// `cuCtxSetCurrent`: replaces the top of the calling thread's stack (pushes onto an empty one);
/// null pops.
///
/// # Safety
///
/// None beyond the C contract; the handle is only compared, never dereferenced.
#[cfg_attr(exported = "cuCtxSetCurrent", unsafe(no_mangle))]
pub unsafe extern "C" fn cuCtxSetCurrent(ctx: CUcontext) -> CUresult {
    api("cuCtxSetCurrent", false, |mut st| {
        if ctx.is_null() {
            state::threads::with_stack(|s| s.pop());
            return SUCCESS;
        }
        let h = tri!(known_ctx(&mut st, ctx));
        state::threads::with_stack(|s| match s.last_mut() {
            Some(top) => *top = h,
            None => s.push(h),
        });
        SUCCESS
    })
}

/// `cuCtxPushCurrent_v2`.
///
/// # Safety
///
/// None beyond the C contract; the handle is only compared, never dereferenced.
#[cfg_attr(exported = "cuCtxPushCurrent_v2", unsafe(no_mangle))]
pub unsafe extern "C" fn cuCtxPushCurrent_v2(ctx: CUcontext) -> CUresult {
    push_current("cuCtxPushCurrent_v2", ctx)
}

/// `cuCtxPushCurrent` (the CUDA 2.0 ABI): as `_v2`.
///
/// # Safety
///
/// None beyond the C contract; the handle is only compared, never dereferenced.
#[cfg_attr(exported = "cuCtxPushCurrent", unsafe(no_mangle))]
pub unsafe extern "C" fn cuCtxPushCurrent(ctx: CUcontext) -> CUresult {
    push_current("cuCtxPushCurrent", ctx)
}

fn push_current(symbol: &'static str, ctx: CUcontext) -> CUresult {
    api(symbol, false, |mut st| {
        if ctx.is_null() {
            return CUresult::CUDA_ERROR_INVALID_CONTEXT;
        }
        let h = tri!(known_ctx(&mut st, ctx));
        state::threads::with_stack(|s| s.push(h));
        SUCCESS
    })
}

/// `cuCtxPopCurrent_v2`: `CUDA_ERROR_INVALID_CONTEXT` on an empty stack.
///
/// # Safety
///
/// `pctx` is null or valid for a write.
#[cfg_attr(exported = "cuCtxPopCurrent_v2", unsafe(no_mangle))]
pub unsafe extern "C" fn cuCtxPopCurrent_v2(pctx: *mut CUcontext) -> CUresult {
    pop_current("cuCtxPopCurrent_v2", pctx)
}

/// `cuCtxPopCurrent` (the CUDA 2.0 ABI): as `_v2`.
///
/// # Safety
///
/// `pctx` is null or valid for a write.
#[cfg_attr(exported = "cuCtxPopCurrent", unsafe(no_mangle))]
pub unsafe extern "C" fn cuCtxPopCurrent(pctx: *mut CUcontext) -> CUresult {
    pop_current("cuCtxPopCurrent", pctx)
}

fn pop_current(symbol: &'static str, pctx: *mut CUcontext) -> CUresult {
    api(symbol, false, |_st| {
        let Some(h) = state::threads::with_stack(|s| s.pop()).flatten() else {
            return CUresult::CUDA_ERROR_INVALID_CONTEXT;
        };
        if !pctx.is_null() {
            // SAFETY: non-null; the caller's contract makes it writable.
            unsafe { put(pctx, h as CUcontext) };
        }
        SUCCESS
    })
}

/// `cuCtxGetDevice`.
///
/// # Safety
///
/// `device` is null or valid for a write.
#[cfg_attr(exported = "cuCtxGetDevice", unsafe(no_mangle))]
pub unsafe extern "C" fn cuCtxGetDevice(device: *mut CUdevice) -> CUresult {
    api("cuCtxGetDevice", false, |st| {
        if device.is_null() {
            return INVALID_VALUE;
        }
        let ctx = tri!(st.current_ctx());
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(device, st.ctx_device(ctx)) };
        SUCCESS
    })
}

/// `cuCtxSynchronize`: waits for the host functions queued in the current context.
///
/// # Safety
///
/// None beyond the C contract; takes no pointers.
#[cfg_attr(exported = "cuCtxSynchronize", unsafe(no_mangle))]
pub unsafe extern "C" fn cuCtxSynchronize() -> CUresult {
    api("cuCtxSynchronize", false, |mut st| {
        let ctx = tri!(st.current_ctx());
        if let Some(rc) = crate::state::capture::on_ctx_sync(&mut st, ctx) {
            return rc;
        }
        let learnt = st.race_ctx_clock(ctx);
        let target = st.ctx_last_job.get(&ctx).copied().unwrap_or(0);
        state::wait_until_done(st, target).race_host_learns(&learnt);
        SUCCESS
    })
}

/// `cuCtxGetStreamPriorityRange`: least 0, greatest -5; either pointer may be null.
///
/// # Safety
///
/// Each pointer is null or valid for a write.
#[cfg_attr(exported = "cuCtxGetStreamPriorityRange", unsafe(no_mangle))]
pub unsafe extern "C" fn cuCtxGetStreamPriorityRange(
    least_priority: *mut c_int,
    greatest_priority: *mut c_int,
) -> CUresult {
    api("cuCtxGetStreamPriorityRange", false, |st| {
        tri!(st.current_ctx());
        if !least_priority.is_null() {
            // SAFETY: non-null; the caller's contract makes it writable.
            unsafe { put(least_priority, LEAST_PRIORITY) };
        }
        if !greatest_priority.is_null() {
            // SAFETY: as above.
            unsafe { put(greatest_priority, GREATEST_PRIORITY) };
        }
        SUCCESS
    })
}

/// The limits and cache configuration set on each context (by handle), over the defaults of
/// [`default_limit`]; forgotten with the process, as nothing else asks.
static SETTINGS: std::sync::Mutex<Vec<(usize, u32, usize)>> = std::sync::Mutex::new(Vec::new());
/// The cache configuration key in [`SETTINGS`] (past every `CUlimit`).
const CACHE_CONFIG: u32 = 1000;

/// An H100's defaults (driver 580): 1 KiB of stack, 1 MiB of printf FIFO, 8 MiB of malloc heap,
/// sync depth 2, 2048 pending launches, 64-byte L2 fetch granularity; `None` for a limit the
/// device does not have.
fn default_limit(limit: cuda_stream_sys::CUlimit) -> Option<usize> {
    use cuda_stream_sys::CUlimit as L;
    Some(match limit {
        L::CU_LIMIT_STACK_SIZE => 1024,
        L::CU_LIMIT_PRINTF_FIFO_SIZE => 1 << 20,
        L::CU_LIMIT_MALLOC_HEAP_SIZE => 8 << 20,
        L::CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH => 2,
        L::CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT => 2048,
        L::CU_LIMIT_MAX_L2_FETCH_GRANULARITY => 64,
        L::CU_LIMIT_PERSISTING_L2_CACHE_SIZE => 0,
        _ => return None,
    })
}

fn setting(ctx: usize, key: u32) -> Option<usize> {
    let s = SETTINGS.lock().unwrap_or_else(|e| e.into_inner());
    s.iter()
        .find(|(c, k, _)| *c == ctx && *k == key)
        .map(|e| e.2)
}

fn set_setting(ctx: usize, key: u32, value: usize) {
    let mut s = SETTINGS.lock().unwrap_or_else(|e| e.into_inner());
    s.retain(|(c, k, _)| !(*c == ctx && *k == key));
    s.push((ctx, key, value));
}

/// `cuCtxGetLimit`: the current context's limit (its default until set).
///
/// # Safety
///
/// `value` is null or valid for a write.
#[cfg_attr(exported = "cuCtxGetLimit", unsafe(no_mangle))]
pub unsafe extern "C" fn cuCtxGetLimit(
    value: *mut usize,
    limit: cuda_stream_sys::CUlimit,
) -> CUresult {
    api("cuCtxGetLimit", false, |st| {
        let ctx = tri!(st.current_ctx());
        let Some(default) = default_limit(limit) else {
            return CUresult::CUDA_ERROR_UNSUPPORTED_LIMIT;
        };
        if value.is_null() {
            return INVALID_VALUE;
        }
        let v = setting(ctx, limit.0).unwrap_or(default);
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(value, v) };
        SUCCESS
    })
}

/// `cuCtxSetLimit`: sets the current context's limit (a limit the device lacks is refused,
/// `CUDA_ERROR_UNSUPPORTED_LIMIT`).
///
/// # Safety
///
/// No pointers.
#[cfg_attr(exported = "cuCtxSetLimit", unsafe(no_mangle))]
pub unsafe extern "C" fn cuCtxSetLimit(limit: cuda_stream_sys::CUlimit, value: usize) -> CUresult {
    api("cuCtxSetLimit", false, |st| {
        let ctx = tri!(st.current_ctx());
        if default_limit(limit).is_none() {
            return CUresult::CUDA_ERROR_UNSUPPORTED_LIMIT;
        }
        set_setting(ctx, limit.0, value);
        SUCCESS
    })
}

/// `cuCtxGetCacheConfig`: the current context's preference (`PREFER_NONE` until set).
///
/// # Safety
///
/// `config` is null or valid for a write.
#[cfg_attr(exported = "cuCtxGetCacheConfig", unsafe(no_mangle))]
pub unsafe extern "C" fn cuCtxGetCacheConfig(
    config: *mut cuda_stream_sys::CUfunc_cache,
) -> CUresult {
    api("cuCtxGetCacheConfig", false, |st| {
        let ctx = tri!(st.current_ctx());
        if config.is_null() {
            return INVALID_VALUE;
        }
        let v = setting(ctx, CACHE_CONFIG).unwrap_or(0) as c_uint;
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(config, cuda_stream_sys::CUfunc_cache(v)) };
        SUCCESS
    })
}

/// `cuCtxSetCacheConfig`: sets the current context's preference (one of the four).
///
/// # Safety
///
/// No pointers.
#[cfg_attr(exported = "cuCtxSetCacheConfig", unsafe(no_mangle))]
pub unsafe extern "C" fn cuCtxSetCacheConfig(config: cuda_stream_sys::CUfunc_cache) -> CUresult {
    api("cuCtxSetCacheConfig", false, |st| {
        let ctx = tri!(st.current_ctx());
        if config.0 > 3 {
            return INVALID_VALUE;
        }
        set_setting(ctx, CACHE_CONFIG, config.0 as usize);
        SUCCESS
    })
}
