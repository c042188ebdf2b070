//! Work enqueued into a framework's graph capture: the capture status of a handle, and the add
//! kernel with a host function that counts its runs on every replay.

use std::sync::atomic::{AtomicU64, Ordering};

use cuda_stream::{CaptureStatus, Stream};

use crate::args::{element_count, write_out};
use crate::borrow::{primary_context_of, with_stream};
use crate::error::{CSI_ERR_INVALID_ARGUMENT, Fail, ffi_call};
use crate::work::launch_add;

/// Runs of the host functions `csi_capture_add_and_count` captured, over every replay.
static HOST_FN_RUNS: AtomicU64 = AtomicU64::new(0);
/// Those host functions not yet freed.
static HOST_FNS_ALIVE: AtomicU64 = AtomicU64::new(0);

/// Owned by each captured host function: counts it alive until it is freed.
struct Alive;

impl Alive {
    fn new() -> Alive {
        HOST_FNS_ALIVE.fetch_add(1, Ordering::SeqCst);
        Alive
    }
}

impl Drop for Alive {
    fn drop(&mut self) {
        HOST_FNS_ALIVE.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Writes the capture status of `stream` (0 none, 1 active, 2 invalidated) and, for a capture,
/// its id (else 0), as the driver reports them for the handle (`cuStreamGetCaptureInfo`).
///
/// # Safety
/// `stream` as in [`csi_fill_u32`](crate::csi_fill_u32); `status_out` and `id_out` must each be
/// null (an error) or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn csi_capture_status(
    stream: usize,
    status_out: *mut i32,
    id_out: *mut u64,
) -> i32 {
    ffi_call(|| {
        if status_out.is_null() || id_out.is_null() {
            return Err(Fail::new(
                CSI_ERR_INVALID_ARGUMENT,
                "status_out or id_out is a null pointer",
            ));
        }
        // SAFETY: the caller's contract on `stream`.
        let status = unsafe { with_stream(stream, |s| Ok(s.capture_status()?)) }?;
        let (code, id) = match status {
            CaptureStatus::None => (0, 0),
            CaptureStatus::Active { id } => (1, id),
            CaptureStatus::Invalidated { id } => (2, id),
        };
        // SAFETY: both are non-null and the caller promises they are writable.
        unsafe {
            write_out(status_out, code, "status_out")?;
            write_out(id_out, id, "id_out")
        }
    })
}

/// Enqueues, into the capture `stream` is part of (begun by the framework, such as PyTorch's
/// `torch.cuda.graph`), the add kernel over `n` words at `dptr` and then a host function that
/// counts its runs: both run on every replay of the framework's graph, which owns the host
/// function. `CSI_ERR_NOT_CAPTURING` if the stream is not being captured.
///
/// # Safety
/// `stream` as in [`csi_fill_u32`](crate::csi_fill_u32); `dptr` must be device memory of the
/// stream's context, readable and writable for `n` words for as long as the graph can be
/// replayed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn csi_capture_add_and_count(
    stream: usize,
    dptr: u64,
    n: u64,
    addend: u32,
) -> i32 {
    ffi_call(|| {
        let n = element_count(n)?;
        let work = |s: Stream<'_>| {
            let ctx = primary_context_of(s)?;
            s.in_capture(|cap| {
                if n > 0 {
                    // SAFETY: the capture's stream is live for this call; the caller vouches
                    // for the memory on every replay.
                    if let Err(fail) = unsafe { launch_add(&ctx, cap, dptr, n, addend) } {
                        return Ok(Err(fail));
                    }
                }
                let alive = Alive::new();
                cap.launch_host_func(move || {
                    let _alive = &alive;
                    HOST_FN_RUNS.fetch_add(1, Ordering::SeqCst);
                })?;
                Ok(Ok(()))
            })?
        };
        // SAFETY: the caller's contract on `stream`.
        unsafe { with_stream(stream, work) }
    })
}

/// How many times the host functions of `csi_capture_add_and_count` have run.
#[unsafe(no_mangle)]
pub extern "C" fn csi_host_fn_runs() -> u64 {
    HOST_FN_RUNS.load(Ordering::SeqCst)
}

/// How many host functions of `csi_capture_add_and_count` are not yet freed.
#[unsafe(no_mangle)]
pub extern "C" fn csi_host_fns_alive() -> u64 {
    HOST_FNS_ALIVE.load(Ordering::SeqCst)
}
