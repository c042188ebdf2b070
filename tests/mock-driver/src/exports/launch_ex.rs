//! What the driver says about a kernel's parameters and occupancy, and launches with
//! attributes: `cuFuncGetParamInfo` (answered from the PTX's `.entry` list),
//! `cuOccupancyMaxPotentialBlockSize`, `cuOccupancyMaxActiveBlocksPerMultiprocessor` and
//! `cuLaunchKernelEx` (the body of `cuLaunchKernel` in `kernels.rs`, after its attributes).

use std::ffi::{c_int, c_void};

use cuda_stream_sys::{
    CUfunction, CUlaunchAttributeID, CUlaunchConfig, CUoccupancyB2DSize, CUresult,
};

use super::call::{INVALID_VALUE, SUCCESS, api, put};
use super::kernels::{Launch, launch_kernel, live_function};
use crate::state::State;

/// The mock device's multiprocessors (`CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT`).
const MULTIPROCESSORS: u32 = 132;
/// Threads resident on one multiprocessor.
const THREADS_PER_MULTIPROCESSOR: u32 = 2048;
/// Blocks resident on one multiprocessor.
const BLOCKS_PER_MULTIPROCESSOR: u32 = 32;

/// The most threads a block of `f` may have, and its parameters' sizes.
fn kernel(st: &mut State, f: CUfunction) -> Result<(u32, Vec<usize>), CUresult> {
    let (module, entry) = live_function(st, f)?;
    let e = &st.device.modules[&module].entries[entry];
    Ok((e.max_threads.unwrap_or(1024).min(1024), e.params.clone()))
}

/// Blocks of `threads` threads that fit on one multiprocessor.
fn blocks_per_multiprocessor(threads: u32) -> u32 {
    (THREADS_PER_MULTIPROCESSOR / threads.max(1)).min(BLOCKS_PER_MULTIPROCESSOR)
}

/// `cuFuncGetParamInfo`: parameter `index`'s offset (each aligned to its size, up to 8 bytes,
/// as the PTX lays them out) and size; `CUDA_ERROR_INVALID_VALUE` past the last one.
///
/// # Safety
///
/// `offset` and `size` are null or valid for a write.
#[cfg_attr(exported = "cuFuncGetParamInfo", unsafe(no_mangle))]
pub unsafe extern "C" fn cuFuncGetParamInfo(
    func: CUfunction,
    index: usize,
    offset: *mut usize,
    size: *mut usize,
) -> CUresult {
    api("cuFuncGetParamInfo", false, |mut st| {
        let (_, params) = tri!(kernel(&mut st, func));
        if index >= params.len() || (offset.is_null() && size.is_null()) {
            return INVALID_VALUE;
        }
        let mut at = 0usize;
        for (i, &p) in params.iter().enumerate() {
            at = at.next_multiple_of(p.clamp(1, 8));
            if i == index {
                break;
            }
            at += p;
        }
        // SAFETY: each is null or writable (the caller's contract).
        unsafe {
            if !offset.is_null() {
                put(offset, at);
            }
            if !size.is_null() {
                put(size, params[index]);
            }
        }
        SUCCESS
    })
}

/// `cuOccupancyMaxPotentialBlockSize`: the kernel's most threads a block (1024, or what
/// `.maxntid` allows), with the grid that fills 132 multiprocessors of 2048 threads (at most 32
/// blocks each). The callback, if any, is not called; a `block_size_limit` above 0 caps the
/// block.
///
/// # Safety
///
/// `min_grid` and `block` are null or valid for a write.
#[cfg_attr(exported = "cuOccupancyMaxPotentialBlockSize", unsafe(no_mangle))]
pub unsafe extern "C" fn cuOccupancyMaxPotentialBlockSize(
    min_grid: *mut c_int,
    block: *mut c_int,
    func: CUfunction,
    _block_size_to_dynamic_smem: CUoccupancyB2DSize,
    _dynamic_smem: usize,
    block_size_limit: c_int,
) -> CUresult {
    api("cuOccupancyMaxPotentialBlockSize", false, |mut st| {
        if min_grid.is_null() || block.is_null() || block_size_limit < 0 {
            return INVALID_VALUE;
        }
        let (max, _) = tri!(kernel(&mut st, func));
        let threads = match block_size_limit {
            0 => max,
            l => max.min(l as u32),
        };
        let grid = MULTIPROCESSORS * blocks_per_multiprocessor(threads);
        // SAFETY: non-null; the caller's contract makes them writable.
        unsafe {
            put(block, threads as c_int);
            put(min_grid, grid as c_int);
        }
        SUCCESS
    })
}

/// `cuOccupancyMaxActiveBlocksPerMultiprocessor`: 2048 threads and 32 blocks a
/// multiprocessor; 0 for a block larger than the kernel allows; `CUDA_ERROR_INVALID_VALUE` for
/// a block size of 0 or less.
///
/// # Safety
///
/// `num_blocks` is null or valid for a write.
#[rustfmt::skip] // the attribute stays on one line (`driver_exports_follow_the_convention`)
#[cfg_attr(exported = "cuOccupancyMaxActiveBlocksPerMultiprocessor", unsafe(no_mangle))]
pub unsafe extern "C" fn cuOccupancyMaxActiveBlocksPerMultiprocessor(
    num_blocks: *mut c_int,
    func: CUfunction,
    block_size: c_int,
    _dynamic_smem: usize,
) -> CUresult {
    api(
        "cuOccupancyMaxActiveBlocksPerMultiprocessor",
        false,
        |mut st| {
            if num_blocks.is_null() || block_size <= 0 {
                return INVALID_VALUE;
            }
            let (max, _) = tri!(kernel(&mut st, func));
            let n = if block_size as u32 > max {
                0
            } else {
                blocks_per_multiprocessor(block_size as u32)
            };
            // SAFETY: non-null; the caller's contract makes it writable.
            unsafe { put(num_blocks, n as c_int) };
            SUCCESS
        },
    )
}

/// `cuLaunchKernelEx`: `cuLaunchKernel` with attributes, of which it takes cluster dimensions
/// (each dividing the grid's, at most 8 blocks: `CUDA_ERROR_CLUSTER_SIZE_EXCEEDED`... here
/// `CUDA_ERROR_INVALID_VALUE`), a cooperative launch (at most as many blocks as fit on the
/// device at once: `CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE`), programmatic stream
/// serialisation and a priority; any other attribute is `CUDA_ERROR_INVALID_VALUE`. The
/// attributes are kept for `cuda_mock_last_launch_attribute`.
///
/// # Safety
///
/// `config` is null or valid, its `attrs` valid for `numAttrs` reads; the rest as for
/// `cuLaunchKernel`.
#[cfg_attr(exported = "cuLaunchKernelEx", unsafe(no_mangle))]
pub unsafe extern "C" fn cuLaunchKernelEx(
    config: *const CUlaunchConfig,
    f: CUfunction,
    kernel_params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    api("cuLaunchKernelEx", false, |mut st| {
        if config.is_null() {
            return INVALID_VALUE;
        }
        // SAFETY: non-null; the caller's contract.
        let c = unsafe { &*config };
        if c.numAttrs > 0 && c.attrs.is_null() {
            return INVALID_VALUE;
        }
        let grid = [c.gridDimX, c.gridDimY, c.gridDimZ];
        let block = [c.blockDimX, c.blockDimY, c.blockDimZ];
        let mut attrs = Vec::new();
        for i in 0..c.numAttrs as usize {
            // SAFETY: `attrs` holds `numAttrs` entries.
            let a = unsafe { &*c.attrs.add(i) };
            type Id = CUlaunchAttributeID;
            // SAFETY: each arm reads the union field its id selects; all are plain integers.
            let v = unsafe {
                match a.id {
                    Id::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION => {
                        let d = a.value.clusterDim;
                        [d.x, d.y, d.z]
                    }
                    Id::CU_LAUNCH_ATTRIBUTE_COOPERATIVE => [a.value.cooperative as u32, 0, 0],
                    Id::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION => {
                        [a.value.programmaticStreamSerializationAllowed as u32, 0, 0]
                    }
                    Id::CU_LAUNCH_ATTRIBUTE_PRIORITY => [a.value.priority as u32, 0, 0],
                    _ => return INVALID_VALUE,
                }
            };
            match a.id {
                Id::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION => {
                    let fits = v.iter().zip(&grid).all(|(&c, &g)| c != 0 && g % c == 0);
                    if !fits || v.iter().product::<u32>() > 8 {
                        return INVALID_VALUE;
                    }
                }
                Id::CU_LAUNCH_ATTRIBUTE_COOPERATIVE if v[0] != 0 => {
                    let threads: u32 = block.iter().product();
                    let blocks: u64 = grid.iter().map(|&g| u64::from(g)).product();
                    let fit = MULTIPROCESSORS * blocks_per_multiprocessor(threads);
                    if blocks > u64::from(fit) {
                        return CUresult::CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
                    }
                }
                _ => {}
            }
            attrs.push([a.id.0, v[0], v[1], v[2]]);
        }
        let launch = Launch {
            call: "cuLaunchKernelEx",
            f,
            grid,
            block,
            shared: c.sharedMemBytes,
            stream: c.hStream,
            attrs,
        };
        // SAFETY: the caller's contract.
        unsafe { launch_kernel(&mut st, launch, kernel_params, extra) }
    })
}

/// Writes attribute `i` of the last launch (its `CUlaunchAttributeID` and up to three values,
/// as `cuLaunchKernelEx` took it) to `out[0..4]`. Returns 0, or -1 if there is none.
///
/// # Safety
///
/// `out` is null or valid for 4 writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_mock_last_launch_attribute(i: u32, out: *mut u32) -> c_int {
    super::call::guard(-1, || {
        let st = crate::state::lock();
        let Some(a) = st
            .device
            .last_launch
            .as_ref()
            .and_then(|l| l.attrs.get(i as usize))
        else {
            return -1;
        };
        if out.is_null() {
            return -1;
        }
        // SAFETY: the caller's promise: 4 writable values.
        unsafe { std::ptr::copy_nonoverlapping(a.as_ptr(), out, 4) };
        0
    })
}
