//! Borrowing the caller's device memory (a tensor's storage) as `BorrowedBuffer`s for one call,
//! and copying between them on a stream of cuda-stream's own: the copy waits for the owner's
//! stream, and the owner's stream waits for the copy when the borrows end. The host never waits.

use cuda_stream::{BorrowedBuffer, Stream};

use crate::args::element_count;
use crate::borrow::{primary_context_of, with_stream};
use crate::error::ffi_call;

/// Copies `n` 32-bit words from `src` to `dst`, both device memory owned by the caller and used
/// on `owner` (a framework's stream), on a new stream of cuda-stream's: borrowed with
/// [`BorrowedBuffer::from_raw`], copied with `DeviceBuffer::copy_from` (which waits for the
/// owner's work so far), released (the owner's stream waits for the copy). Returns at once.
///
/// # Safety
/// `owner` as in [`csi_fill_u32`](crate::csi_fill_u32); `src` and `dst` must be device memory of
/// its context, 4-byte aligned, `n` words each, distinct, kept allocated by the caller until
/// work enqueued on `owner` after this call has run, and used meanwhile only on `owner`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn csi_borrowed_copy_u32(owner: usize, src: u64, dst: u64, n: u64) -> i32 {
    ffi_call(|| {
        let n = element_count(n)?;
        let work = |s: Stream<'_>| {
            let ctx = primary_context_of(s)?;
            let ours = ctx.new_stream()?;
            let call = ();
            // SAFETY: the caller's contract: both ranges stay allocated and are used only on
            // `owner` (`s`) while borrowed; the borrows are released below, not leaked.
            let (a, b) = unsafe {
                (
                    BorrowedBuffer::<u32>::from_raw(&ctx, src, n, s, &call)?,
                    BorrowedBuffer::<u32>::from_raw(&ctx, dst, n, s, &call)?,
                )
            };
            b.copy_from(&ours, &a)?;
            a.release()?;
            b.release()?;
            Ok(())
        };
        // SAFETY: the caller's contract on `owner`.
        unsafe { with_stream(owner, work) }
    })
}
