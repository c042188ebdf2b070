//! The driver calls of `allocation` that touch no state of its own: a stream-ordered allocation
//! from a pool, host waits for events and polls of them, and the plain free.

use crate::base::capture_mode::CaptureMode;
use crate::base::error::{Result, check, driver_fn, lookup};
use crate::driver::context::{Context, bind};
use crate::ffi;
use crate::graph::capture_mode_guard::exchange_capture_mode;
use crate::stream::view::bind_if_special;

/// `cuMemAllocFromPoolAsync` of `bytes` from `pool` on `stream` (of `ctx`).
pub(crate) fn alloc_from_pool(
    ctx: &Context,
    stream: ffi::CUstream,
    bytes: usize,
    pool: ffi::CUmemoryPool,
) -> Result<ffi::CUdeviceptr> {
    let mut ptr = 0;
    let f = driver_fn!(cuMemAllocFromPoolAsync);
    let _bound = bind_if_special(stream, ctx.raw())?;
    // SAFETY: `ptr` is a valid out-pointer; the pool is live and of the stream's device; the
    // stream is live (the caller's borrow) and of `ctx`.
    let rc = unsafe { f(&mut ptr, bytes, pool, stream) };
    check(rc, "cuMemAllocFromPoolAsync")?;
    Ok(ptr)
}

pub(crate) fn synchronize_events(events: &[ffi::CUevent]) -> Result<()> {
    let f = driver_fn!(cuEventSynchronize);
    for &ev in events {
        // SAFETY: the event is live (the tracker's) and of the memory's context.
        check(unsafe { f(ev) }, "cuEventSynchronize")?;
    }
    Ok(())
}

/// Whether every event of `events` has completed. The thread's capture mode is relaxed for the
/// queries: this is a poll the caller did not ask for (at an allocation or a free), which the
/// driver would otherwise refuse, invalidating the capture, on a thread that is capturing, or on
/// any thread during a global-mode capture. A query fails nothing: a capture is never joined or
/// broken by one. If the mode cannot be set, the events count as not done (polled later).
pub(crate) fn all_done(events: &[(Context, ffi::CUevent)]) -> bool {
    if events.is_empty() {
        return true;
    }
    let Ok(_relaxed) = exchange_capture_mode(CaptureMode::Relaxed) else {
        return false;
    };
    events.iter().all(|(_, ev)| event_done(*ev))
}

/// Whether `ev` has completed (`cuEventQuery` succeeds). An error does not say the work is
/// done: the free keeps waiting (freeing could free memory a copy or kernel still uses), and is
/// asked again at the next poll.
fn event_done(ev: ffi::CUevent) -> bool {
    let Ok(f) = lookup("cuEventQuery", ffi::fns::cuEventQuery) else {
        return false;
    };
    // SAFETY: the event is live (owned by the pending free).
    let rc = unsafe { f(ev) };
    rc == ffi::CUresult::CUDA_SUCCESS
}

pub(crate) fn free_plain_now(ctx: &Context, ptr: ffi::CUdeviceptr) -> Result<()> {
    let _bound = bind(ctx.raw())?;
    let f = driver_fn!(cuMemFree);
    // SAFETY: the allocation is ours and freed once; every recorded use has completed.
    check(unsafe { f(ptr) }, "cuMemFree")
}
