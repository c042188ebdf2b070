//! Borrowing the caller's stream handle for one call: a framework's stream, or 0x0 / 0x1 / 0x2 for
//! a default stream of the thread's current primary context.

use cuda_stream::{Context, Stream};
use cuda_stream_sys as sys;

use crate::args::write_out;
use crate::error::{CSI_ERR_CONTEXT, CSI_ERR_INVALID_ARGUMENT, Fail, ffi_call};

/// Borrows `handle` as a `Stream<'_>` for the duration of `f`.
///
/// # Safety
/// `handle` must be 0x0, 0x1, 0x2 or a live stream handle that stays live until this returns.
pub(crate) unsafe fn with_stream<R>(
    handle: usize,
    f: impl FnOnce(Stream<'_>) -> Result<R, Fail>,
) -> Result<R, Fail> {
    if handle <= 2 {
        // A default stream of whatever context the caller's thread has current.
        let current = cuda_stream::current_context_raw()?;
        if current.is_null() {
            return Err(Fail::new(
                CSI_ERR_CONTEXT,
                format!(
                    "stream {handle:#x} names a default stream of the current context, \
                     but no context is current on this thread"
                ),
            ));
        }
        let ctx = Context::retain_if_primary(current)?.ok_or_else(|| {
            Fail::new(
                CSI_ERR_CONTEXT,
                format!(
                    "stream {handle:#x} names a default stream of the current context, \
                     which is not a primary context"
                ),
            )
        })?;
        let stream = match handle {
            0 => ctx.null_stream(),
            1 => ctx.legacy_stream(),
            _ => ctx.per_thread_stream(),
        };
        return f(stream);
    }
    // The caller keeps the stream alive for this call; `call` stands for that call.
    let call = ();
    // SAFETY: the caller promises `handle` is a live stream until this function returns, and the
    // view cannot outlive `call`, a local of this function.
    let stream = unsafe { Stream::borrow_raw(handle as sys::CUstream, &call) }?;
    f(stream)
}

/// The primary context that `stream` belongs to, retained.
pub(crate) fn primary_context_of(stream: Stream<'_>) -> Result<Context, Fail> {
    Context::retain_if_primary(stream.context_raw())?.ok_or_else(|| {
        Fail::new(
            CSI_ERR_CONTEXT,
            "the stream's context is not its device's primary context",
        )
    })
}

/// Writes the ordinal of the device `stream`'s work runs on, as discovered from the handle.
///
/// # Safety
/// `stream` as in [`csi_fill_u32`](crate::csi_fill_u32); `device_out` must be null (an error) or
/// valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn csi_stream_device(stream: usize, device_out: *mut i32) -> i32 {
    ffi_call(|| {
        if device_out.is_null() {
            return Err(Fail::new(
                CSI_ERR_INVALID_ARGUMENT,
                "device_out is a null pointer",
            ));
        }
        // SAFETY: the caller's contract on `stream`.
        let device = unsafe { with_stream(stream, |s| Ok(s.device()?.raw())) }?;
        // SAFETY: `device_out` is not null and the caller promises it is writable.
        unsafe { write_out(device_out, device, "device_out") }
    })
}
