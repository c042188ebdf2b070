//! `csi_nccl_all_reduce_u32` (feature `nccl`): an NCCL all-reduce on the caller's borrowed
//! stream, one rank on the stream's device, its result copied into the caller's memory.

use cuda_stream::nccl::{Communicator, ReduceOp};
use cuda_stream::{DeviceBuffer, Stream, memcpy_dtod_async};

use crate::args::element_count;
use crate::borrow::{primary_context_of, with_stream};
use crate::error::ffi_call;

/// Fills a new buffer with `value` on `stream`, all-reduces it (sum, one rank: NCCL on the
/// stream's device) into a second buffer on `stream`, copies that into the `n` words at `dptr`
/// on `stream`, and waits for the stream, so the caller reads `value` everywhere. All of it is
/// ordered after the work the caller enqueued on `stream` before the call.
///
/// # Safety
/// As [`csi_fill_u32`](crate::csi_fill_u32): `stream` live for the call, `dptr` device memory of
/// its context writable for `n` words.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn csi_nccl_all_reduce_u32(
    stream: usize,
    dptr: u64,
    n: u64,
    value: u32,
) -> i32 {
    ffi_call(|| {
        let n = element_count(n)?;
        let work = |s: Stream<'_>| {
            let ctx = primary_context_of(s)?;
            let comm = Communicator::init_all(&[ctx.device()])?.remove(0);
            let x = DeviceBuffer::<u32>::alloc_on(&ctx, &s, n)?;
            x.fill(&s, value)?;
            let mut y = DeviceBuffer::<u32>::alloc_on(&ctx, &s, n)?;
            comm.all_reduce(&s, &x, &mut y, ReduceOp::Sum)?;
            // SAFETY: `y` holds `n` words and lives until the stream is synchronised below; the
            // caller vouches for `dptr`.
            unsafe { memcpy_dtod_async(&s, dptr, y.device_ptr(), n * 4) }?;
            s.synchronize()?;
            Ok(())
        };
        // SAFETY: the caller's contract on `stream`.
        unsafe { with_stream(stream, work) }
    })
}
