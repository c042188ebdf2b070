//! The driver calls of `allocation` that touch no state of its own: a stream-ordered allocation
//! from a pool (on a private stream, with its epoch's end locked: a kept block or a new
//! allocation), host waits for events and polls of them, and the plain free.

use crate::base::capture_mode::CaptureMode;
use crate::base::error::{Error, Result, check, driver_fn, lookup};
use crate::driver::capture_query::is_capturing;
use crate::driver::context::{Context, bind};
use crate::ffi;
use crate::graph::capture_mode_guard::exchange_capture_mode;
use crate::stream::known_streams::{self, StreamEnd};
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

/// Memory of `bytes` bytes from `pool` on the private stream of `end` (of `ctx`), with the
/// end locked throughout: a block kept there, or a new allocation (refused on a capturing stream
/// with `refuse`), made while the epoch lasts, so that its lazy write is covered by whatever
/// ends the epoch (a settling event recorded after the allocation). `None` when the epoch has
/// ended (the caller treats the stream as any other). An allocation that runs out of memory
/// frees every block kept in the context (not under this lock) and is made once more.
pub(crate) fn on_private(
    ctx: &Context,
    end: &StreamEnd,
    bytes: usize,
    pool: ffi::CUmemoryPool,
    refuse: Option<&'static str>,
) -> Result<Option<ffi::CUdeviceptr>> {
    let stream = end.stream();
    let mut retried = false;
    loop {
        let mut guard = end.lock();
        let Some(blocks) = guard.blocks() else {
            return Ok(None);
        };
        // A kept block: every use of it is ordered before the stream's later work, and the new
        // buffer's first use is a write on `stream`, like a fresh allocation's. No capture
        // check: while this crate captures the stream no block is kept in its epoch (see
        // `stream::block_cache`).
        if let Some(ptr) = blocks.take(pool, bytes) {
            return Ok(Some(ptr));
        }
        refuse_capturing(ctx, stream, refuse)?;
        match alloc_from_pool(ctx, stream, bytes, pool) {
            Err(e) if out_of_memory(&e) && !retried => {
                drop(guard);
                // The kept blocks are freed, in their streams' order, which `stream` then
                // follows: once more.
                if known_streams::free_kept_blocks_before(ctx.raw(), stream) == 0 {
                    return Err(e);
                }
                retried = true;
            }
            r => return r.map(Some),
        }
    }
}

/// Refuses (`Error::Capturing { op }`, with `refuse` = `Some(op)`) an allocation on `stream` (of
/// `ctx`) while it is being captured, where it would be a graph memory node.
pub(crate) fn refuse_capturing(
    ctx: &Context,
    stream: ffi::CUstream,
    refuse: Option<&'static str>,
) -> Result<()> {
    if let Some(op) = refuse {
        let _bound = bind_if_special(stream, ctx.raw())?;
        if is_capturing(stream)? {
            return Err(Error::Capturing { op });
        }
    }
    Ok(())
}

/// Whether the driver refused for lack of memory.
pub(crate) fn out_of_memory(e: &Error) -> bool {
    e.driver_code() == Some(ffi::CUresult::CUDA_ERROR_OUT_OF_MEMORY)
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
