//! Device memory: `cuMemGetInfo`, `cuMemAlloc_v2`, `cuMemFree_v2`, `cuMemGetAddressRange_v2`,
//! the async memsets and copies. The model is `model/device.rs`; on a capturing stream each
//! becomes a graph node (`state/capture.rs`).

use std::ffi::{c_uchar, c_uint, c_ushort, c_void};

use cuda_stream_sys::{CUdeviceptr, CUresult, CUstream};

use super::call::{INVALID_VALUE, SUCCESS, api, put};
use crate::model::device::{DeviceWork, MAX_ALLOCATION};
use crate::model::jobs::Work;
use crate::model::races::{Acc, Kind};
use crate::state::capture::on_device_work;
use crate::state::{self, State};

/// `cuMemGetInfo_v2`: 80 GiB total, 79 GiB free, in the current context.
///
/// # Safety
///
/// Each pointer is null or valid for a write.
#[cfg_attr(exported = "cuMemGetInfo_v2", unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CUresult {
    api("cuMemGetInfo_v2", false, |st| {
        if free.is_null() || total.is_null() {
            return INVALID_VALUE;
        }
        tri!(st.current_ctx());
        // SAFETY: both non-null; the caller's contract makes them writable.
        unsafe {
            put(total, 80 << 30);
            put(free, 79 << 30);
        }
        SUCCESS
    })
}

/// `cuMemGetInfo` (the CUDA 2.0 ABI, 32-bit sizes): the sizes of `_v2`, saturated to
/// `u32::MAX`.
///
/// # Safety
///
/// Each pointer is null or valid for a write.
#[cfg_attr(exported = "cuMemGetInfo", unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemGetInfo(free: *mut c_uint, total: *mut c_uint) -> CUresult {
    api("cuMemGetInfo", false, |st| {
        if free.is_null() || total.is_null() {
            return INVALID_VALUE;
        }
        tri!(st.current_ctx());
        // SAFETY: both non-null; the caller's contract makes them writable.
        unsafe {
            put(total, c_uint::MAX);
            put(free, c_uint::MAX);
        }
        SUCCESS
    })
}

/// `CUDA_ERROR_INVALID_VALUE` for a memory range that is not inside one live allocation (or a
/// range a graph's allocation node reserved: checked again when the work runs), with the use
/// counted.
pub(crate) fn check_range(st: &mut State, ptr: u64, len: usize) -> Result<(), CUresult> {
    if len == 0 || st.device.find(ptr, len).is_some() || st.device.in_graph_range(ptr, len) {
        Ok(())
    } else {
        st.counters.bad_uses += 1;
        crate::base::trace_bad_use(file!(), line!());
        Err(CUresult::CUDA_ERROR_INVALID_VALUE)
    }
}

/// `CUDA_ERROR_INVALID_VALUE` for a copy touching `[ptr, ptr + len)` while a context of another
/// device is current, where the range is pool memory whose pool has not granted that device
/// access: measured on an H100 (driver 580.159, `tests/examples/contexts.rs`), every copy of
/// pool memory (to or from pageable or pinned host memory, device to device) fails so, while
/// memsets and kernels work, and with no context current or the memory's own device's the
/// copies work. Memory from `cuMemAlloc` is not affected.
pub(crate) fn check_copy_context(st: &State, ptr: u64, len: usize) -> Result<(), CUresult> {
    let Some(current) = crate::state::threads::current() else {
        return Ok(());
    };
    let current_device = st.ctx_device(current);
    let Some((base, _)) = st.device.find(ptr, len) else {
        return Ok(());
    };
    let rec = &st.device.allocs[&base];
    let Some(pool) = rec.pool else {
        return Ok(());
    };
    let own = st.ctx_device(rec.ctx);
    let granted = st
        .device
        .pools
        .get(pool)
        .is_some_and(|p| p.access_of(current_device) != 0);
    if current_device == own || granted {
        Ok(())
    } else {
        Err(INVALID_VALUE)
    }
}

/// `cuMemAlloc_v2`: `bytesize` bytes (filled with 0xa5, so forgotten initialisation shows) in
/// the current context, at an address never handed out before. 0 bytes is
/// `CUDA_ERROR_INVALID_VALUE`; more than 1 GiB is `CUDA_ERROR_OUT_OF_MEMORY`.
///
/// # Safety
///
/// `dptr` is null or valid for a write.
#[cfg_attr(exported = "cuMemAlloc_v2", unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytesize: usize) -> CUresult {
    api("cuMemAlloc_v2", false, |mut st| {
        // Potentially unsafe during a capture (the driver documents the synchronous allocation
        // and free as such): refused on a thread a capture prohibits, which it invalidates.
        if let Some(rc) = crate::state::capture::on_unsafe_call(&mut st) {
            return rc;
        }
        if dptr.is_null() || bytesize == 0 {
            return INVALID_VALUE;
        }
        let ctx = tri!(st.current_ctx());
        if bytesize > MAX_ALLOCATION {
            return CUresult::CUDA_ERROR_OUT_OF_MEMORY;
        }
        let p = st.device.allocate(ctx, bytesize);
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(dptr, p) };
        SUCCESS
    })
}

/// `cuMemFree_v2`: frees at once, without waiting for queued work (as the driver documents no
/// ordering with streams): queued work that touches the memory later counts as a bad use. Needs a
/// current context. Anything but the start of a live allocation is `CUDA_ERROR_INVALID_VALUE`,
/// counted as a bad destroy.
///
/// # Safety
///
/// None beyond the C contract; the address is only looked up.
#[cfg_attr(exported = "cuMemFree_v2", unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemFree_v2(dptr: CUdeviceptr) -> CUresult {
    api("cuMemFree_v2", false, |mut st| {
        // Potentially unsafe during a capture (the driver documents the synchronous allocation
        // and free as such): refused on a thread a capture prohibits, which it invalidates.
        if let Some(rc) = crate::state::capture::on_unsafe_call(&mut st) {
            return rc;
        }
        tri!(st.current_ctx());
        let queued = st.device.allocs.get(&dptr).is_some_and(|a| a.freeing);
        let live = st
            .device
            .allocs
            .get(&dptr)
            .filter(|a| a.alive)
            .map(|a| a.size);
        if let (false, Some(size)) = (queued, live) {
            st.race_host_op("cuMemFree", &[Acc::device(dptr, size, Kind::Free)]);
        }
        if !queued && st.device.free(dptr) {
            SUCCESS
        } else {
            st.counters.bad_destroys += 1;
            INVALID_VALUE
        }
    })
}

/// `cuMemGetAddressRange_v2`: the base and size of the live allocation that holds `dptr`
/// (either out-pointer may be null); `CUDA_ERROR_NOT_FOUND` where none does, as the driver
/// answers for freed memory. Needs a current context.
///
/// # Safety
///
/// Each pointer is null or valid for a write.
#[cfg_attr(exported = "cuMemGetAddressRange_v2", unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemGetAddressRange_v2(
    pbase: *mut CUdeviceptr,
    psize: *mut usize,
    dptr: CUdeviceptr,
) -> CUresult {
    api("cuMemGetAddressRange_v2", false, |st| {
        tri!(st.current_ctx());
        let Some((base, _)) = st.device.find(dptr, 1) else {
            return CUresult::CUDA_ERROR_NOT_FOUND;
        };
        let size = st.device.allocs.get(&base).map_or(0, |a| a.size);
        // SAFETY: each is null or writable, by the caller's contract.
        unsafe {
            if !pbase.is_null() {
                put(pbase, base);
            }
            if !psize.is_null() {
                put(psize, size);
            }
        }
        SUCCESS
    })
}

/// A memset of `count` words of `width` bytes: checks the stream, the alignment and the range,
/// then queues it.
fn memset(
    symbol: &'static str,
    dst: CUdeviceptr,
    width: usize,
    value: u32,
    count: usize,
    h_stream: CUstream,
) -> CUresult {
    api(symbol, false, |mut st| {
        let s = tri!(st.stream(h_stream));
        if dst % width as u64 != 0 {
            return INVALID_VALUE;
        }
        let Some(bytes) = count.checked_mul(width) else {
            return INVALID_VALUE;
        };
        tri!(check_range(&mut st, dst, bytes));
        if bytes > 0 {
            let work = DeviceWork::Memset {
                dst,
                width,
                value,
                count,
            };
            if let Some(rc) = on_device_work(&mut st, s, &work) {
                return rc;
            }
            st.race_work(s, symbol, &work);
            tri!(st.enqueue(s, Work::Device(work)));
        }
        SUCCESS
    })
}

/// `cuMemsetD8Async`: queued on the stream after its earlier work.
///
/// # Safety
///
/// None beyond the C contract; the address is checked against the allocations.
#[cfg_attr(exported = "cuMemsetD8Async", unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemsetD8Async(
    dst_device: CUdeviceptr,
    uc: c_uchar,
    n: usize,
    h_stream: CUstream,
) -> CUresult {
    memset("cuMemsetD8Async", dst_device, 1, u32::from(uc), n, h_stream)
}

/// `cuMemsetD16Async`: `dst_device` must be 2-byte aligned.
///
/// # Safety
///
/// None beyond the C contract; the address is checked against the allocations.
#[cfg_attr(exported = "cuMemsetD16Async", unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemsetD16Async(
    dst_device: CUdeviceptr,
    us: c_ushort,
    n: usize,
    h_stream: CUstream,
) -> CUresult {
    memset(
        "cuMemsetD16Async",
        dst_device,
        2,
        u32::from(us),
        n,
        h_stream,
    )
}

/// `cuMemsetD32Async`: `dst_device` must be 4-byte aligned.
///
/// # Safety
///
/// None beyond the C contract; the address is checked against the allocations.
#[cfg_attr(exported = "cuMemsetD32Async", unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemsetD32Async(
    dst_device: CUdeviceptr,
    ui: c_uint,
    n: usize,
    h_stream: CUstream,
) -> CUresult {
    memset("cuMemsetD32Async", dst_device, 4, ui, n, h_stream)
}

/// `cuMemcpyDtoDAsync_v2`: both ranges inside live allocations; queued.
///
/// # Safety
///
/// None beyond the C contract; the addresses are checked against the allocations.
#[cfg_attr(exported = "cuMemcpyDtoDAsync_v2", unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemcpyDtoDAsync_v2(
    dst_device: CUdeviceptr,
    src_device: CUdeviceptr,
    byte_count: usize,
    h_stream: CUstream,
) -> CUresult {
    api("cuMemcpyDtoDAsync_v2", false, |mut st| {
        let s = tri!(st.stream(h_stream));
        tri!(check_range(&mut st, dst_device, byte_count));
        tri!(check_range(&mut st, src_device, byte_count));
        tri!(check_copy_context(&st, dst_device, byte_count));
        tri!(check_copy_context(&st, src_device, byte_count));
        if byte_count > 0 {
            let work = DeviceWork::CopyDtoD {
                dst: dst_device,
                src: src_device,
                bytes: byte_count,
            };
            if let Some(rc) = on_device_work(&mut st, s, &work) {
                return rc;
            }
            st.race_work(s, "cuMemcpyDtoDAsync", &work);
            tri!(st.enqueue(s, Work::Device(work)));
        }
        SUCCESS
    })
}

/// `cuMemcpyHtoDAsync_v2`: reads pageable host memory at the call (as the driver stages it),
/// and queues the write to the device; page-locked memory (`cuMemHostAlloc`) is read when the
/// copy runs. Captured, the node reads the host memory when it
/// runs, on every launch.
///
/// # Safety
///
/// `src_host` is valid for `byte_count` bytes of reads.
#[cfg_attr(exported = "cuMemcpyHtoDAsync_v2", unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemcpyHtoDAsync_v2(
    dst_device: CUdeviceptr,
    src_host: *const c_void,
    byte_count: usize,
    h_stream: CUstream,
) -> CUresult {
    api("cuMemcpyHtoDAsync_v2", false, |mut st| {
        let s = tri!(st.stream(h_stream));
        if src_host.is_null() && byte_count > 0 {
            return INVALID_VALUE;
        }
        tri!(check_range(&mut st, dst_device, byte_count));
        tri!(check_copy_context(&st, dst_device, byte_count));
        if byte_count > 0 {
            let captured = DeviceWork::CopyHtoDAt {
                dst: dst_device,
                src: src_host as usize,
                bytes: byte_count,
            };
            if let Some(rc) = on_device_work(&mut st, s, &captured) {
                return rc;
            }
            let work = if st.device.host.contains(src_host as usize, byte_count) {
                // Page-locked memory: read when the copy runs.
                DeviceWork::Pinned {
                    to_host: false,
                    host: src_host as usize,
                    dev: dst_device,
                    bytes: byte_count,
                }
            } else {
                // SAFETY: the caller's promise.
                let data = unsafe { std::slice::from_raw_parts(src_host.cast::<u8>(), byte_count) };
                DeviceWork::CopyHtoD {
                    dst: dst_device,
                    data: data.to_vec(),
                }
            };
            st.race_work(s, "cuMemcpyHtoDAsync", &work);
            tri!(st.enqueue(s, Work::Device(work)));
        }
        SUCCESS
    })
}

/// `cuMemcpyDtoHAsync_v2`: into pageable memory, waits for the stream's earlier work, then copies
/// before returning (the driver's behaviour for pageable memory); into page-locked memory
/// (`cuMemHostAlloc`), queued and written when it runs. Memory freed while waiting is a bad use. Captured,
/// the node writes the host memory when it runs, on every launch.
///
/// # Safety
///
/// `dst_host` is valid for `byte_count` bytes of writes.
#[cfg_attr(exported = "cuMemcpyDtoHAsync_v2", unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemcpyDtoHAsync_v2(
    dst_host: *mut c_void,
    src_device: CUdeviceptr,
    byte_count: usize,
    h_stream: CUstream,
) -> CUresult {
    api("cuMemcpyDtoHAsync_v2", false, |mut st| {
        let s = tri!(st.stream(h_stream));
        if dst_host.is_null() && byte_count > 0 {
            return INVALID_VALUE;
        }
        tri!(check_range(&mut st, src_device, byte_count));
        tri!(check_copy_context(&st, src_device, byte_count));
        if byte_count == 0 {
            return SUCCESS;
        }
        let captured = DeviceWork::CopyDtoH {
            dst: dst_host as usize,
            src: src_device,
            bytes: byte_count,
        };
        if let Some(rc) = on_device_work(&mut st, s, &captured) {
            return rc;
        }
        if st.device.host.contains(dst_host as usize, byte_count) {
            // Page-locked memory: an asynchronous copy, written when it runs.
            let work = DeviceWork::Pinned {
                to_host: true,
                host: dst_host as usize,
                dev: src_device,
                bytes: byte_count,
            };
            st.race_work(s, "cuMemcpyDtoHAsync", &work);
            tri!(st.enqueue(s, Work::Device(work)));
            return SUCCESS;
        }
        // Into pageable memory: the copy runs in stream order, and the host waits for it.
        let read = Acc::device(src_device, byte_count, Kind::Read);
        st.race_op(s, "cuMemcpyDtoHAsync", &[read]);
        let learnt = st.race_stream_clock(s);
        let target = st.last_job.get(&s.key).copied().unwrap_or(0);
        let mut st = state::wait_until_done(st, target);
        st.race_host_learns(&learnt);
        let Some(bytes) = st.device.slice_mut(src_device, byte_count) else {
            st.counters.bad_uses += 1;
            crate::base::trace_bad_use(file!(), line!());
            return INVALID_VALUE;
        };
        // SAFETY: the caller's promise; the source is the mock's own memory.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst_host.cast::<u8>(), byte_count) };
        SUCCESS
    })
}
