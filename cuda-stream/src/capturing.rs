//! The two driver queries about a stream's capture that the layers above share: whether it is
//! capturing (`host.rs` refuses run-once host functions then) and its capture status and graph
//! (`capture.rs`). Each call is made in one place, so that choosing the newest binding the driver
//! has (`cuStreamGetCaptureInfo_v3`, else `_v2`) is a local change.

use std::ptr;

use crate::capture_mode::CaptureStatus;
use crate::error::{Result, check, driver_fn};
use crate::ffi;

/// Whether `raw` is in a capture (`cuStreamIsCapturing`, one call, CUDA 10.0 and later). The
/// caller makes the context current for a default stream.
#[inline]
pub(crate) fn is_capturing(raw: ffi::CUstream) -> Result<bool> {
    let f = driver_fn!(cuStreamIsCapturing);
    let mut status = ffi::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: the caller's stream is live; `status` is a valid out-pointer.
    check(unsafe { f(raw, &mut status) }, "cuStreamIsCapturing")?;
    Ok(status != ffi::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
}

/// The stream's capture status and the graph being captured into (null when not capturing), from
/// `cuStreamGetCaptureInfo` (today's binding: the CUDA 12.3 `_v3` signature; on older drivers the
/// `_v2` signature of CUDA 11.3 gives the same two answers). The graph is owned by the capture.
pub(crate) fn capture_info(raw: ffi::CUstream) -> Result<(CaptureStatus, ffi::CUgraph)> {
    let f = driver_fn!(cuStreamGetCaptureInfo);
    let mut status = ffi::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let mut id: ffi::cuuint64_t = 0;
    let mut graph = ptr::null_mut();
    // SAFETY: the caller's stream is live; the three out-pointers are valid; the dependency
    // outputs are optional and passed as null.
    let rc = unsafe {
        f(
            raw,
            &mut status,
            &mut id,
            &mut graph,
            ptr::null_mut(),
            ptr::null_mut(),
            ptr::null_mut(),
        )
    };
    check(rc, "cuStreamGetCaptureInfo")?;
    let status = CaptureStatus::from_raw(status, id);
    if !status.is_capturing() {
        graph = ptr::null_mut();
    }
    Ok((status, graph))
}
