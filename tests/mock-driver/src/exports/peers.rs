//! Peers: whether two devices can be peers (any two distinct devices can), enabling peer access
//! per pair of contexts (`CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED` the second time), and peer
//! copies, which run like device-to-device copies (memory is one host address space here).

use std::ffi::{c_int, c_uint};

use cuda_stream_sys::{CUcontext, CUdevice, CUdeviceptr, CUresult, CUstream};

use super::call::{INVALID_VALUE, SUCCESS, api, put};
use super::devices::valid_device;
use super::memory::check_range;
use crate::model::device::DeviceWork;
use crate::model::jobs::Work;
use crate::state::State;
use crate::state::capture::on_device_work;

/// `cuDeviceCanAccessPeer`: 1 for two distinct valid devices, 0 for a device and itself.
///
/// # Safety
///
/// `can_access_peer` is null or valid for a write.
#[cfg_attr(exported = "cuDeviceCanAccessPeer", unsafe(no_mangle))]
pub unsafe extern "C" fn cuDeviceCanAccessPeer(
    can_access_peer: *mut c_int,
    dev: CUdevice,
    peer_dev: CUdevice,
) -> CUresult {
    api("cuDeviceCanAccessPeer", false, |st| {
        if can_access_peer.is_null() {
            return INVALID_VALUE;
        }
        tri!(valid_device(&st, dev));
        tri!(valid_device(&st, peer_dev));
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(can_access_peer, c_int::from(dev != peer_dev)) };
        SUCCESS
    })
}

/// A live context's handle, or `CUDA_ERROR_INVALID_CONTEXT`.
fn live_ctx(st: &State, ctx: CUcontext) -> Result<usize, CUresult> {
    match st.ctx(ctx as usize) {
        Some(c) if c.refs > 0 => Ok(ctx as usize),
        _ => Err(CUresult::CUDA_ERROR_INVALID_CONTEXT),
    }
}

/// `cuCtxEnablePeerAccess`: flags must be 0; the peer must be a live context of another device
/// (`CUDA_ERROR_INVALID_DEVICE` for the same device); a pair already enabled answers
/// `CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED`. Released with the current context.
///
/// # Safety
///
/// None beyond the C contract; takes no pointers.
#[cfg_attr(exported = "cuCtxEnablePeerAccess", unsafe(no_mangle))]
pub unsafe extern "C" fn cuCtxEnablePeerAccess(peer_context: CUcontext, flags: c_uint) -> CUresult {
    api("cuCtxEnablePeerAccess", false, |mut st| {
        if flags != 0 {
            return INVALID_VALUE;
        }
        let ctx = tri!(st.current_ctx());
        let peer = tri!(live_ctx(&st, peer_context));
        if st.ctx_device(ctx) == st.ctx_device(peer) {
            return CUresult::CUDA_ERROR_INVALID_DEVICE;
        }
        if st.peers.contains(&(ctx, peer)) {
            return CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
        }
        st.peers.push((ctx, peer));
        SUCCESS
    })
}

/// `cuMemcpyPeerAsync`: both contexts live, both ranges inside live allocations; queued as a
/// device-to-device copy on the stream (with or without peer access, as the driver stages it).
/// On a capturing stream `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`, the capture invalidated.
/// With no context current it is `CUDA_ERROR_INVALID_CONTEXT`, counted as a bad use: the real
/// driver crashed there.
///
/// # Safety
///
/// None beyond the C contract; the addresses are checked against the allocations.
#[cfg_attr(exported = "cuMemcpyPeerAsync", unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemcpyPeerAsync(
    dst_device: CUdeviceptr,
    dst_context: CUcontext,
    src_device: CUdeviceptr,
    src_context: CUcontext,
    byte_count: usize,
    h_stream: CUstream,
) -> CUresult {
    api("cuMemcpyPeerAsync", false, |mut st| {
        // The real driver (580.159) crashed the process here with no context current (a copy
        // of pool memory without a grant, `tests/examples/contexts.rs`): an error, counted.
        if crate::state::threads::current().is_none() {
            st.counters.bad_uses += 1;
            crate::base::trace_bad_use(file!(), line!());
            return CUresult::CUDA_ERROR_INVALID_CONTEXT;
        }
        let s = tri!(st.stream(h_stream));
        // Not capturable: the driver (580, two H200s) answered
        // `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` on a capturing stream.
        if let Some(rc) = crate::state::capture::on_callback(&mut st, s) {
            return rc;
        }
        tri!(live_ctx(&st, dst_context));
        tri!(live_ctx(&st, src_context));
        tri!(check_range(&mut st, dst_device, byte_count));
        tri!(check_range(&mut st, src_device, byte_count));
        if byte_count > 0 {
            let work = DeviceWork::CopyDtoD {
                dst: dst_device,
                src: src_device,
                bytes: byte_count,
            };
            if let Some(rc) = on_device_work(&mut st, s, &work) {
                return rc;
            }
            st.race_work(s, "cuMemcpyPeerAsync", &work);
            tri!(st.enqueue(s, Work::Device(work)));
        }
        SUCCESS
    })
}
