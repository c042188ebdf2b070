//! Devices: their count, handles, names and attributes.

use std::ffi::{c_char, c_int};

use cuda_stream_sys::{CUdevice, CUdevice_attribute, CUresult};

use super::call::{INVALID_VALUE, SUCCESS, api, put};
use crate::base::config::MAX_DEVICES;
use crate::state::State;

/// `cuDeviceGetCount`.
///
/// # Safety
///
/// `count` is null or valid for a write.
#[cfg_attr(exported = "cuDeviceGetCount", unsafe(no_mangle))]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CUresult {
    api("cuDeviceGetCount", false, |st| {
        if count.is_null() {
            return INVALID_VALUE;
        }
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(count, st.devices as c_int) };
        SUCCESS
    })
}

pub(crate) fn valid_device(st: &State, dev: CUdevice) -> Result<(), CUresult> {
    if dev >= 0 && (dev as usize) < st.devices.min(MAX_DEVICES) {
        Ok(())
    } else {
        Err(CUresult::CUDA_ERROR_INVALID_DEVICE)
    }
}

/// `cuDeviceGet`: device `ordinal` is the `CUdevice` `ordinal`.
///
/// # Safety
///
/// `device` is null or valid for a write.
#[cfg_attr(exported = "cuDeviceGet", unsafe(no_mangle))]
pub unsafe extern "C" fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) -> CUresult {
    api("cuDeviceGet", false, |st| {
        if device.is_null() {
            return INVALID_VALUE;
        }
        tri!(valid_device(&st, ordinal));
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(device, ordinal) };
        SUCCESS
    })
}

/// `cuDeviceGetName`: `Mock CUDA Device N`, truncated to `len - 1` bytes.
///
/// # Safety
///
/// `name` is null or valid for writes of `len` bytes.
#[cfg_attr(exported = "cuDeviceGetName", unsafe(no_mangle))]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) -> CUresult {
    api("cuDeviceGetName", false, |st| {
        if name.is_null() || len <= 0 {
            return INVALID_VALUE;
        }
        tri!(valid_device(&st, dev));
        let text = format!("Mock CUDA Device {dev}");
        let n = text.len().min(len as usize - 1);
        // SAFETY: `name` has room for `len` bytes and `n < len`; the source is a live String.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), name, n);
            put(name.add(n), 0);
        }
        SUCCESS
    })
}

fn attribute(st: &State, attrib: CUdevice_attribute, dev: CUdevice) -> Option<c_int> {
    type A = CUdevice_attribute;
    Some(match attrib {
        A::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED => {
            c_int::from(st.device.pools.supported(dev))
        }
        A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR => 9,
        A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR => 0,
        A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT => 132,
        A::CU_DEVICE_ATTRIBUTE_WARP_SIZE => 32,
        A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK => 1024,
        A::CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED
        | A::CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS
        | A::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING
        | A::CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED
        | A::CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH
        | A::CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH => 1,
        A::CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT => 2,
        A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID => dev + 1,
        A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X | A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y => 1024,
        A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z => 64,
        A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X => i32::MAX,
        A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y | A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z => 65535,
        A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK => 48 << 10,
        A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN => 227 << 10,
        A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR => 228 << 10,
        A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK => 65536,
        A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR => 2048,
        A::CU_DEVICE_ATTRIBUTE_CLOCK_RATE => 1_980_000,
        A::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE => 2_619_000,
        A::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH => 5120,
        A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE => 50 << 20,
        A::CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY
        | A::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS
        | A::CU_DEVICE_ATTRIBUTE_ECC_ENABLED => 1,
        a if a.0 < A::CU_DEVICE_ATTRIBUTE_MAX.0 => 0,
        _ => return None,
    })
}

/// `cuDeviceTotalMem_v2`: 80 GiB, as an H100 (`cuMemGetInfo_v2` answers the same total).
///
/// # Safety
///
/// `bytes` is null or valid for a write.
#[cfg_attr(exported = "cuDeviceTotalMem_v2", unsafe(no_mangle))]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) -> CUresult {
    api("cuDeviceTotalMem_v2", false, |st| {
        if bytes.is_null() {
            return INVALID_VALUE;
        }
        tri!(valid_device(&st, dev));
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(bytes, 80 << 30) };
        SUCCESS
    })
}

/// `cuDeviceGetAttribute`: an H100-like device; attributes it has no opinion on are 0.
/// `CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED` is 1 unless switched off (`exports/pools.rs`).
///
/// # Safety
///
/// `pi` is null or valid for a write.
#[cfg_attr(exported = "cuDeviceGetAttribute", unsafe(no_mangle))]
pub unsafe extern "C" fn cuDeviceGetAttribute(
    pi: *mut c_int,
    attrib: CUdevice_attribute,
    dev: CUdevice,
) -> CUresult {
    api("cuDeviceGetAttribute", false, |st| {
        if pi.is_null() {
            return INVALID_VALUE;
        }
        tri!(valid_device(&st, dev));
        let Some(v) = attribute(&st, attrib, dev) else {
            return INVALID_VALUE;
        };
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(pi, v) };
        SUCCESS
    })
}
