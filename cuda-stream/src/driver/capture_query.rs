//! The two driver queries about a stream's capture that the layers above share: whether it is
//! capturing (`stream::host_fn` refuses run-once host functions then) and its capture status
//! and graph (`graph::capture`). Each call is made in one place, which chooses the newest ABI
//! the driver has (`cuStreamGetCaptureInfo_v3`, else `_v2`). Also the wait for an event that a
//! capturing thread may make: polled, since a blocking wait would invalidate its capture.

use std::ptr;

use crate::base::capture_mode::CaptureStatus;
use crate::base::error::{Result, check, driver_fn};
use crate::base::newest_abi::Newest;
use crate::ffi;

/// Whether `raw` is in a capture (`cuStreamIsCapturing`, one call, CUDA 10.0 and later). The
/// caller makes the context current for a default stream.
#[inline(always)]
pub(crate) fn is_capturing(raw: ffi::CUstream) -> Result<bool> {
    let f = driver_fn!(cuStreamIsCapturing);
    let mut status = ffi::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: the caller's stream is live; `status` is a valid out-pointer.
    check(unsafe { f(raw, &mut status) }, "cuStreamIsCapturing")?;
    Ok(status != ffi::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
}

/// The stream's capture status and the graph being captured into (null when not capturing), from
/// `cuStreamGetCaptureInfo`: its CUDA 12.3 ABI (`_v3`) where the driver has it, else the CUDA
/// 11.3 one (`_v2`), which gives the same answers without the edge data asked for as null here.
/// The graph is owned by the capture.
pub(crate) fn capture_info(raw: ffi::CUstream) -> Result<(CaptureStatus, ffi::CUgraph)> {
    // Each looked up once: on a CUDA 12.3 or later driver a call costs one load, before it two.
    static V3: Newest<ffi::pfn::cuStreamGetCaptureInfo> = Newest::new();
    static V2: Newest<ffi::pfn::cuStreamGetCaptureInfo_v11030> = Newest::new();
    let mut status = ffi::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let mut id: ffi::cuuint64_t = 0;
    let mut graph = ptr::null_mut();
    let call = "cuStreamGetCaptureInfo";
    let rc = if let Ok(f) = V3.get(call, &[ffi::fns::cuStreamGetCaptureInfo]) {
        // SAFETY: the caller's stream is live; the three out-pointers are valid; the dependency
        // outputs are optional and passed as null.
        unsafe {
            f(
                raw,
                &mut status,
                &mut id,
                &mut graph,
                ptr::null_mut(),
                ptr::null_mut(),
                ptr::null_mut(),
            )
        }
    } else {
        // Inside a host function this is refused too.
        let f = V2.get(call, &[ffi::fns::cuStreamGetCaptureInfo_v11030])?;
        // SAFETY: as above, for the CUDA 11.3 signature (no edge data).
        unsafe {
            f(
                raw,
                &mut status,
                &mut id,
                &mut graph,
                ptr::null_mut(),
                ptr::null_mut(),
            )
        }
    };
    check(rc, "cuStreamGetCaptureInfo")?;
    let status = CaptureStatus::from_raw(status, id);
    if !status.is_capturing() {
        graph = ptr::null_mut();
    }
    Ok((status, graph))
}

/// Polls `ev` (`cuEventQuery`) until it has completed, sleeping a little longer each time.
pub(crate) fn poll_until_done(ev: ffi::CUevent) -> Result<()> {
    let query = driver_fn!(cuEventQuery);
    let mut pause = std::time::Duration::from_micros(1);
    loop {
        // SAFETY: the event is live (the caller's, of any context).
        let rc = unsafe { query(ev) };
        if rc != ffi::CUresult::CUDA_ERROR_NOT_READY {
            return check(rc, "cuEventQuery");
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(std::time::Duration::from_micros(200));
    }
}
