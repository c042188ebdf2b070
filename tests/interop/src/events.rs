//! Events across the ABI: recording one on a borrowed stream, destroying it, and making a stream
//! wait for one.

use cuda_stream::Stream;
use cuda_stream_sys as sys;

use crate::args::write_out;
use crate::borrow::with_stream;
use crate::error::{CSI_ERR_INVALID_ARGUMENT, Fail, check, ffi_call};

/// Records a new event (timing disabled) on `stream` after the work enqueued so far and writes
/// its handle to `event_out`; the caller destroys it with [`csi_destroy_event`].
///
/// # Safety
/// `stream` as in [`csi_fill_u32`](crate::csi_fill_u32); `event_out` must be null (an error) or
/// valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn csi_record_event(stream: usize, event_out: *mut usize) -> i32 {
    ffi_call(|| {
        if event_out.is_null() {
            return Err(Fail::new(
                CSI_ERR_INVALID_ARGUMENT,
                "event_out is a null pointer",
            ));
        }
        // SAFETY: the caller's contract on `stream`.
        let event = unsafe { with_stream(stream, |s| Ok(s.record_event()?)) }?;
        let raw = event.into_raw() as usize;
        // SAFETY: `event_out` is not null and the caller promises it is writable.
        unsafe { write_out(event_out, raw, "event_out") }
    })
}

/// Destroys an event from [`csi_record_event`] (`cuEventDestroy`). Work already waiting on it is
/// unaffected.
///
/// # Safety
/// `event` must be a live event handle that nothing uses after this call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn csi_destroy_event(event: usize) -> i32 {
    ffi_call(|| {
        if event == 0 {
            return Err(Fail::new(CSI_ERR_INVALID_ARGUMENT, "null event handle"));
        }
        // SAFETY: the caller hands over a live event it no longer uses.
        let rc = unsafe { sys::cuEventDestroy(event as sys::CUevent) };
        check(rc, "cuEventDestroy")
    })
}

/// Makes work enqueued on `stream` from now on wait for `event` (`cuStreamWaitEvent`).
///
/// # Safety
/// `stream` as in [`csi_fill_u32`](crate::csi_fill_u32); `event` must be a live event handle
/// during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn csi_wait_event(stream: usize, event: usize) -> i32 {
    ffi_call(|| {
        if event == 0 {
            return Err(Fail::new(CSI_ERR_INVALID_ARGUMENT, "null event handle"));
        }
        let work = |s: Stream<'_>| {
            // SAFETY: the caller promises `event` is live during the call.
            unsafe { s.wait_event_raw(event as sys::CUevent) }?;
            Ok(())
        };
        // SAFETY: the caller's contract on `stream`.
        unsafe { with_stream(stream, work) }
    })
}
