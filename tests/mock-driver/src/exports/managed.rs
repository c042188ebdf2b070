//! Managed memory: `cuMemAllocManaged`, `cuMemPrefetchAsync` (the CUDA 12.2 form with a
//! `CUmemLocation`, and the CUDA 8.0 one with a device ordinal) and `cuMemAdvise` (both forms).
//! The model is `model/device.rs`: managed memory is host memory whose address is its device
//! address, so the host reads what queued work wrote; a prefetch is queued work that reads the
//! range (for the race detector) and changes nothing; advice is checked and ignored.

use std::ffi::{c_int, c_uint};

use cuda_stream_sys::{
    CUdevice, CUdeviceptr, CUmem_advise, CUmemLocation, CUmemLocationType, CUresult, CUstream,
};

use super::call::{INVALID_VALUE, SUCCESS, api, put};
use super::memory::check_range;
use crate::model::device::{DeviceWork, MAX_ALLOCATION};
use crate::model::jobs::Work;
use crate::model::races::{Acc, Kind};
use crate::state::State;
use crate::state::capture::on_device_work;

/// `cuMemAllocManaged`: `bytesize` (> 0) bytes with a current context; flags
/// `CU_MEM_ATTACH_GLOBAL` (1) or `CU_MEM_ATTACH_HOST` (2), else `CUDA_ERROR_INVALID_VALUE`.
///
/// # Safety
///
/// `dptr` is null or valid for a write.
#[cfg_attr(exported = "cuMemAllocManaged", unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemAllocManaged(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    flags: c_uint,
) -> CUresult {
    api("cuMemAllocManaged", false, |mut st| {
        if let Some(rc) = crate::state::capture::on_unsafe_call(&mut st) {
            return rc;
        }
        if dptr.is_null() || bytesize == 0 || !(flags == 1 || flags == 2) {
            return INVALID_VALUE;
        }
        let ctx = tri!(st.current_ctx());
        if bytesize > MAX_ALLOCATION {
            return CUresult::CUDA_ERROR_OUT_OF_MEMORY;
        }
        let at = st.device.allocate_managed(ctx, bytesize);
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(dptr, at) };
        SUCCESS
    })
}

/// A location of the CUDA 12.2 forms: a device ordinal, or -1 for the host.
fn location_ordinal(st: &State, location: CUmemLocation) -> Result<c_int, CUresult> {
    match location.type_ {
        CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE => {
            super::devices::valid_device(st, location.id)?;
            Ok(location.id)
        }
        CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST => Ok(-1),
        _ => Err(INVALID_VALUE),
    }
}

/// Where a prefetch or an advice points, in either form.
#[derive(Clone, Copy)]
enum To {
    /// The CUDA 12.2 forms.
    Location(CUmemLocation),
    /// The CUDA 8.0 forms: a device ordinal, or -1 for the host.
    Ordinal(c_int),
}

/// `to` checked: a device ordinal, or -1 for the host.
fn resolve(st: &State, to: To) -> Result<c_int, CUresult> {
    match to {
        To::Location(l) => location_ordinal(st, l),
        To::Ordinal(-1) => Ok(-1),
        To::Ordinal(d) => super::devices::valid_device(st, d).map(|()| d),
    }
}

/// The shared body of both prefetch forms: the range must lie in one managed allocation.
fn prefetch(
    symbol: &'static str,
    ptr: CUdeviceptr,
    count: usize,
    to: To,
    stream: CUstream,
) -> CUresult {
    api(symbol, false, |mut st| {
        let s = tri!(st.stream(stream));
        tri!(resolve(&st, to));
        tri!(check_range(&mut st, ptr, count));
        if count == 0 || !st.device.is_managed(ptr, count) {
            return INVALID_VALUE;
        }
        let work = DeviceWork::External {
            name: "cuMemPrefetchAsync",
            accesses: vec![Acc::device(ptr, count, Kind::Read)],
        };
        if let Some(rc) = on_device_work(&mut st, s, &work) {
            return rc;
        }
        st.race_work(s, "cuMemPrefetchAsync", &work);
        tri!(st.enqueue(s, Work::Device(work)));
        SUCCESS
    })
}

/// `cuMemPrefetchAsync_v2` (CUDA 12.2): to a device or the host, flags 0.
///
/// # Safety
///
/// None beyond the C contract; the range is checked against the allocations.
#[cfg_attr(exported = "cuMemPrefetchAsync_v2", unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemPrefetchAsync_v2(
    dev_ptr: CUdeviceptr,
    count: usize,
    location: CUmemLocation,
    flags: c_uint,
    h_stream: CUstream,
) -> CUresult {
    if flags != 0 {
        return INVALID_VALUE;
    }
    prefetch(
        "cuMemPrefetchAsync_v2",
        dev_ptr,
        count,
        To::Location(location),
        h_stream,
    )
}

/// `cuMemPrefetchAsync` (CUDA 8.0): to device `dst_device`, or the host (`CU_DEVICE_CPU`, -1).
///
/// # Safety
///
/// None beyond the C contract; the range is checked against the allocations.
#[cfg_attr(exported = "cuMemPrefetchAsync", unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemPrefetchAsync(
    dev_ptr: CUdeviceptr,
    count: usize,
    dst_device: CUdevice,
    h_stream: CUstream,
) -> CUresult {
    prefetch(
        "cuMemPrefetchAsync",
        dev_ptr,
        count,
        To::Ordinal(dst_device),
        h_stream,
    )
}

/// The shared body of both advice forms: a known advice on a range of one managed allocation.
fn advise(
    symbol: &'static str,
    ptr: CUdeviceptr,
    count: usize,
    advice: CUmem_advise,
    at: To,
) -> CUresult {
    api(symbol, false, |mut st| {
        tri!(st.current_ctx());
        if !(1..=6).contains(&advice.0) {
            return INVALID_VALUE;
        }
        tri!(resolve(&st, at));
        tri!(check_range(&mut st, ptr, count));
        if count == 0 || !st.device.is_managed(ptr, count) {
            return INVALID_VALUE;
        }
        SUCCESS
    })
}

/// `cuMemAdvise_v2` (CUDA 12.2): advice for a location.
///
/// # Safety
///
/// None beyond the C contract; the range is checked against the allocations.
#[cfg_attr(exported = "cuMemAdvise_v2", unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemAdvise_v2(
    dev_ptr: CUdeviceptr,
    count: usize,
    advice: CUmem_advise,
    location: CUmemLocation,
) -> CUresult {
    advise(
        "cuMemAdvise_v2",
        dev_ptr,
        count,
        advice,
        To::Location(location),
    )
}

/// `cuMemAdvise` (CUDA 8.0): advice for device `device` (or the host, -1).
///
/// # Safety
///
/// None beyond the C contract; the range is checked against the allocations.
#[cfg_attr(exported = "cuMemAdvise", unsafe(no_mangle))]
pub unsafe extern "C" fn cuMemAdvise(
    dev_ptr: CUdeviceptr,
    count: usize,
    advice: CUmem_advise,
    device: CUdevice,
) -> CUresult {
    advise("cuMemAdvise", dev_ptr, count, advice, To::Ordinal(device))
}
