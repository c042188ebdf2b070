//! The Rust types have the size and alignment `cuda.h` gives them (x86-64 / aarch64 LP64).

use core::mem::{align_of, size_of};
use cuda_stream_sys::*;
use static_assertions::{assert_eq_align, assert_eq_size, const_assert_eq};

// Handles are opaque pointers; `CUdevice` is an int; device pointers are 64-bit.
assert_eq_size!(CUstream, *mut core::ffi::c_void);
assert_eq_size!(CUevent, *mut core::ffi::c_void);
assert_eq_size!(CUcontext, *mut core::ffi::c_void);
assert_eq_size!(CUmodule, *mut core::ffi::c_void);
assert_eq_size!(CUfunction, *mut core::ffi::c_void);
assert_eq_size!(CUgreenCtx, *mut core::ffi::c_void);
assert_eq_size!(CUdevice, i32);
assert_eq_size!(CUdeviceptr, u64);
assert_eq_size!(
    CUhostFn,
    Option<unsafe extern "C" fn(*mut core::ffi::c_void)>
);
// Enums are 32-bit newtypes, so a value the header does not know is not undefined behaviour.
assert_eq_size!(CUresult, u32);
assert_eq_align!(CUresult, u32);

const_assert_eq!(size_of::<CUuuid>(), 16);
const_assert_eq!(align_of::<CUuuid>(), 1);
const_assert_eq!(size_of::<CUipcEventHandle>(), 64);
const_assert_eq!(size_of::<CUDA_LAUNCH_PARAMS>(), 56);
const_assert_eq!(align_of::<CUDA_LAUNCH_PARAMS>(), 8);
const_assert_eq!(size_of::<CUDA_KERNEL_NODE_PARAMS_v1>(), 56);
const_assert_eq!(size_of::<CUDA_KERNEL_NODE_PARAMS>(), 72);
const_assert_eq!(size_of::<CUDA_HOST_NODE_PARAMS>(), 16);
const_assert_eq!(size_of::<CUlaunchConfig>(), 56);
const_assert_eq!(align_of::<CUlaunchConfig>(), 8);
const_assert_eq!(size_of::<CUlaunchAttribute>(), 72);
const_assert_eq!(size_of::<CUDA_MEMCPY2D>(), 128);
const_assert_eq!(size_of::<CUDA_MEMCPY3D>(), 200);
const_assert_eq!(align_of::<CUDA_MEMCPY3D>(), 8);

#[test]
fn result_codes_keep_their_header_values() {
    assert_eq!(CUresult::CUDA_SUCCESS.0, 0);
    assert_eq!(CUresult::CUDA_ERROR_INVALID_CONTEXT.0, 201);
    assert_eq!(CUresult::CUDA_ERROR_NOT_READY.0, 600);
    assert_eq!(CUresult::CUDA_ERROR_INVALID_HANDLE.0, 400);
    assert_eq!(CUstream_flags::CU_STREAM_NON_BLOCKING.0, 1);
    assert_eq!(HEADER_CUDA_VERSION, 13000);
}
