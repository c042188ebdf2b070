//! The exported C functions: the driver symbols, and the `cuda_mock_*` control functions.
//!
//! Every function runs its body under [`std::panic::catch_unwind`], so nothing unwinds into C: a
//! panic becomes `CUDA_ERROR_UNKNOWN` (or the control function's neutral answer).
//!
//! # Adding a driver function (one convention, for every flavour)
//!
//! 1. Name the Rust function after the **exported symbol** of the ABI it implements
//!    (`cuStreamDestroy_v2`, `cuEventElapsedTime`, `cuStreamQuery_ptsz`: the `symbol` of its
//!    `cuda_sys::SymbolInfo`), with the C types of that ABI (`cuda_sys::pfn::<binding>`).
//! 2. Put `#[cfg_attr(exported = "<that symbol>", unsafe(no_mangle))]` on it, never a bare
//!    `#[unsafe(no_mangle)]` (that is for the `cuda_mock_*` control functions only). The build
//!    script sets `exported = "<symbol>"` exactly for the symbols whose ABI version is no newer
//!    than the flavour being built (from cuda-sys's generated table), so the CUDA 12.2 flavour
//!    exports it only if CUDA 12.2 had it; a misspelt symbol is an `unexpected_cfgs` warning.
//! 3. Add it to [`driver_functions`], so that `cuGetProcAddress` can hand it out.
//! 4. Where the driver has older ABIs of the function with the same meaning, implement them too
//!    (one shared body taking the symbol name, as `destroy_stream` does), so that old flavours
//!    have the function at all and new ones have every ABI the real driver exports.
//! 5. Start the body with [`api`] (or [`entry_point`] for functions that may be called from a host
//!    function), passing the symbol: it counts the call, applies the failure rules and checks
//!    `cuInit`.
//!
//! The capture and graph functions live in `capture.rs` and `graph.rs`, the module, launch and
//! memory functions in `exports/kernels.rs` and `exports/memory.rs`, under the same convention
//! (and are listed in [`driver_functions`] here). A unit test
//! (`driver_exports_follow_the_convention`) checks 1 to 3 on the five files.

// The driver functions have the exported C names, also where a flavour does not export them.
#![allow(non_snake_case)]

use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{LazyLock, MutexGuard};
use std::time::Instant;

use cuda_sys::{
    CUcontext, CUdevice, CUdevice_attribute, CUdriverProcAddress_flags,
    CUdriverProcAddressQueryResult, CUevent, CUgreenCtx, CUhostFn, CUipcEventHandle, CUresult,
    CUstream, CUstreamCallback, cuuint64_t,
};

use crate::state::{
    self, Core, EventRec, GREATEST_PRIORITY, LEAST_PRIORITY, MAX_DEVICES, Object, State, StreamRec,
    Work,
};

const SUCCESS: CUresult = CUresult::CUDA_SUCCESS;
const INVALID_VALUE: CUresult = CUresult::CUDA_ERROR_INVALID_VALUE;
const INVALID_HANDLE: CUresult = CUresult::CUDA_ERROR_INVALID_HANDLE;
const NOT_READY: CUresult = CUresult::CUDA_ERROR_NOT_READY;

const CU_STREAM_NON_BLOCKING: c_uint = 1;
const CU_EVENT_BLOCKING_SYNC: c_uint = 1;
const CU_EVENT_DISABLE_TIMING: c_uint = 2;
const CU_EVENT_INTERPROCESS: c_uint = 4;
const CU_EVENT_WAIT_EXTERNAL: c_uint = 1;

/// Runs `f`, turning a panic into `on_panic`.
fn guard<T>(on_panic: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(on_panic)
}

/// The common prologue of a driver function: counts the call, refuses calls from host functions
/// (`CUDA_ERROR_NOT_PERMITTED`), applies the failure rules, checks `cuInit` (unless `any_time`),
/// then runs `body` with the state locked.
pub(crate) fn api(
    symbol: &'static str,
    any_time: bool,
    body: impl FnOnce(MutexGuard<'static, State>) -> CUresult,
) -> CUresult {
    guard(CUresult::CUDA_ERROR_UNKNOWN, || {
        let mut st = state::lock();
        *st.calls.entry(symbol).or_default() += 1;
        if state::on_worker() {
            st.counters.host_fn_api_calls += 1;
            return CUresult::CUDA_ERROR_NOT_PERMITTED;
        }
        if let Some(code) = st.injected_failure(symbol) {
            return code;
        }
        if !any_time && !st.initialized {
            return CUresult::CUDA_ERROR_NOT_INITIALIZED;
        }
        body(st)
    })
}

/// The prologue of a function the driver answers even from a host function (`cuGetProcAddress`):
/// counts the call and applies the failure rules, then runs `body` with the state locked.
fn entry_point(
    symbol: &'static str,
    body: impl FnOnce(MutexGuard<'static, State>) -> CUresult,
) -> CUresult {
    guard(CUresult::CUDA_ERROR_UNKNOWN, || {
        let mut st = state::lock();
        *st.calls.entry(symbol).or_default() += 1;
        if let Some(code) = st.injected_failure(symbol) {
            return code;
        }
        body(st)
    })
}

/// `?` for functions that return a `CUresult`.
macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(code) => return code,
        }
    };
}

/// Writes `v` through the out-pointer `p`.
///
/// # Safety
///
/// `p` is non-null and valid for a write of `T` (the C contract of the calling driver function;
/// callers check for null first).
pub(crate) unsafe fn put<T>(p: *mut T, v: T) {
    // SAFETY: the caller's promise.
    unsafe { p.write(v) }
}

// ---------------------------------------------------------------------------------------------
// Initialisation, version, errors

/// `cuInit`.
///
/// # Safety
///
/// None beyond the C contract; takes no pointers.
#[cfg_attr(exported = "cuInit", unsafe(no_mangle))]
pub unsafe extern "C" fn cuInit(flags: c_uint) -> CUresult {
    api("cuInit", true, |mut st| {
        if flags != 0 {
            return INVALID_VALUE;
        }
        if st.devices == 0 {
            return CUresult::CUDA_ERROR_NO_DEVICE;
        }
        st.initialized = true;
        SUCCESS
    })
}

/// `cuDriverGetVersion`: the configured version (default: the flavour's).
///
/// # Safety
///
/// `version` is null or valid for a write.
#[cfg_attr(exported = "cuDriverGetVersion", unsafe(no_mangle))]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> CUresult {
    api("cuDriverGetVersion", true, |st| {
        if version.is_null() {
            return INVALID_VALUE;
        }
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(version, st.version) };
        SUCCESS
    })
}

/// Static C strings for every code the header defines: (name, description).
static ERROR_STRINGS: LazyLock<Vec<(u32, CString, CString)>> = LazyLock::new(|| {
    (0..1000)
        .filter_map(|c| {
            let r = CUresult(c);
            let name = cuda_sys::result_name(r);
            if name == "CUDA_ERROR_UNKNOWN_CODE" {
                return None;
            }
            let desc = cuda_sys::result_description(r);
            Some((c, CString::new(name).ok()?, CString::new(desc).ok()?))
        })
        .collect()
});

fn error_string(
    symbol: &'static str,
    error: CUresult,
    out: *mut *const c_char,
    name: bool,
) -> CUresult {
    api(symbol, true, |_st| {
        if out.is_null() {
            return INVALID_VALUE;
        }
        let found = ERROR_STRINGS.iter().find(|e| e.0 == error.0);
        let p = found.map_or(std::ptr::null(), |e| {
            if name { e.1.as_ptr() } else { e.2.as_ptr() }
        });
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(out, p) };
        if found.is_some() {
            SUCCESS
        } else {
            INVALID_VALUE
        }
    })
}

/// `cuGetErrorName`: the enumerator's name, a string that lives as long as the process.
///
/// # Safety
///
/// `p_str` is null or valid for a write.
#[cfg_attr(exported = "cuGetErrorName", unsafe(no_mangle))]
pub unsafe extern "C" fn cuGetErrorName(error: CUresult, p_str: *mut *const c_char) -> CUresult {
    error_string("cuGetErrorName", error, p_str, true)
}

/// `cuGetErrorString`: the header's description of the code.
///
/// # Safety
///
/// `p_str` is null or valid for a write.
#[cfg_attr(exported = "cuGetErrorString", unsafe(no_mangle))]
pub unsafe extern "C" fn cuGetErrorString(error: CUresult, p_str: *mut *const c_char) -> CUresult {
    error_string("cuGetErrorString", error, p_str, false)
}

// ---------------------------------------------------------------------------------------------
// Entry points

/// `cuGetProcAddress_v2` (CUDA 12.0): the mock's function for `symbol` (a base name such as
/// `cuStreamDestroy`) of the newest ABI no newer than `cuda_version` that this flavour exports;
/// with `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`, its per-thread variant if there is one.
/// As the driver documents: `CUDA_ERROR_INVALID_VALUE` for a version above the driver's; a
/// function it does not have is `CUDA_SUCCESS` with a null pointer, and `symbol_status` says
/// `CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND`, or `_VERSION_NOT_SUFFICIENT` when only newer ABIs
/// exist. Needs no `cuInit`.
///
/// # Safety
///
/// `symbol` is null or a NUL-terminated string; `pfn` and `symbol_status` are each null or valid
/// for a write.
#[cfg_attr(exported = "cuGetProcAddress_v2", unsafe(no_mangle))]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: cuuint64_t,
    symbol_status: *mut CUdriverProcAddressQueryResult,
) -> CUresult {
    get_proc_address(
        "cuGetProcAddress_v2",
        symbol,
        pfn,
        cuda_version,
        flags,
        symbol_status,
    )
}

/// `cuGetProcAddress` (CUDA 11.3): as `_v2`, without the status, and `CUDA_ERROR_NOT_FOUND` for a
/// function it does not have.
///
/// # Safety
///
/// `symbol` is null or a NUL-terminated string; `pfn` is null or valid for a write.
#[cfg_attr(exported = "cuGetProcAddress", unsafe(no_mangle))]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: cuuint64_t,
) -> CUresult {
    get_proc_address(
        "cuGetProcAddress",
        symbol,
        pfn,
        cuda_version,
        flags,
        std::ptr::null_mut(),
    )
}

fn get_proc_address(
    entry: &'static str,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: cuuint64_t,
    symbol_status: *mut CUdriverProcAddressQueryResult,
) -> CUresult {
    type Flags = CUdriverProcAddress_flags;
    type Status = CUdriverProcAddressQueryResult;
    entry_point(entry, |st| {
        // SAFETY: the caller's promise.
        let base = unsafe { c_str(symbol) };
        let known = Flags::CU_GET_PROC_ADDRESS_LEGACY_STREAM.0
            | Flags::CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM.0;
        let (Some(base), false, false) = (base, pfn.is_null(), flags & !u64::from(known) != 0)
        else {
            return INVALID_VALUE;
        };
        if cuda_version > st.version {
            return INVALID_VALUE;
        }
        let per_thread =
            flags & u64::from(Flags::CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM.0) != 0;
        let (found, status) = match state::proc_address(base, cuda_version, per_thread) {
            Ok(address) => (address as *mut c_void, Status::CU_GET_PROC_ADDRESS_SUCCESS),
            Err(status) => (std::ptr::null_mut(), status),
        };
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(pfn, found) };
        if !symbol_status.is_null() {
            // SAFETY: as above.
            unsafe { put(symbol_status, status) };
        }
        if found.is_null() && entry == "cuGetProcAddress" {
            CUresult::CUDA_ERROR_NOT_FOUND
        } else {
            SUCCESS
        }
    })
}

/// Every driver function the mock implements, by exported symbol, with its address: what
/// `cuGetProcAddress` can hand out (of those this flavour exports). Every export with
/// `cfg_attr(exported = ..)` belongs here.
pub(crate) fn driver_functions() -> &'static [(&'static str, usize)] {
    macro_rules! table {
        ($($f:ident),* $(,)?) => {
            vec![$((stringify!($f), $f as *const () as usize)),*]
        };
    }
    use crate::capture::{
        cuEventRecordWithFlags, cuEventRecordWithFlags_ptsz, cuStreamBeginCapture,
        cuStreamBeginCapture_ptsz, cuStreamBeginCapture_v2, cuStreamBeginCapture_v2_ptsz,
        cuStreamEndCapture, cuStreamEndCapture_ptsz, cuStreamGetCaptureInfo,
        cuStreamGetCaptureInfo_ptsz, cuStreamGetCaptureInfo_v2, cuStreamGetCaptureInfo_v2_ptsz,
        cuStreamGetCaptureInfo_v3, cuStreamGetCaptureInfo_v3_ptsz, cuStreamIsCapturing,
        cuStreamIsCapturing_ptsz, cuThreadExchangeStreamCaptureMode,
    };
    use crate::graph::{
        cuGraphDebugDotPrint, cuGraphDestroy, cuGraphExecDestroy, cuGraphExecUpdate,
        cuGraphExecUpdate_v2, cuGraphGetNodes, cuGraphInstantiate, cuGraphInstantiate_v2,
        cuGraphInstantiateWithFlags, cuGraphInstantiateWithParams,
        cuGraphInstantiateWithParams_ptsz, cuGraphLaunch, cuGraphLaunch_ptsz,
        cuGraphReleaseUserObject, cuGraphRetainUserObject, cuGraphUpload, cuGraphUpload_ptsz,
        cuUserObjectCreate, cuUserObjectRelease, cuUserObjectRetain,
    };
    static TABLE: LazyLock<Vec<(&'static str, usize)>> = LazyLock::new(|| {
        table![
            cuInit,
            cuDriverGetVersion,
            cuGetErrorName,
            cuGetErrorString,
            cuGetProcAddress,
            cuGetProcAddress_v2,
            cuDeviceGetCount,
            cuDeviceGet,
            cuDeviceGetName,
            cuDeviceGetAttribute,
            cuDevicePrimaryCtxRetain,
            cuDevicePrimaryCtxGetState,
            cuDevicePrimaryCtxRelease,
            cuDevicePrimaryCtxRelease_v2,
            cuCtxGetCurrent,
            cuCtxSetCurrent,
            cuCtxPushCurrent,
            cuCtxPushCurrent_v2,
            cuCtxPopCurrent,
            cuCtxPopCurrent_v2,
            cuCtxGetDevice,
            cuCtxSynchronize,
            cuCtxGetStreamPriorityRange,
            cuStreamCreate,
            cuStreamCreateWithPriority,
            cuStreamDestroy,
            cuStreamDestroy_v2,
            cuStreamQuery,
            cuStreamQuery_ptsz,
            cuStreamSynchronize,
            cuStreamSynchronize_ptsz,
            cuStreamWaitEvent,
            cuStreamAddCallback,
            cuLaunchHostFunc,
            cuStreamGetCtx,
            cuStreamGetCtx_v2,
            cuStreamGetDevice,
            cuStreamGetFlags,
            cuStreamGetPriority,
            cuStreamGetId,
            cuEventCreate,
            cuEventDestroy,
            cuEventDestroy_v2,
            cuEventRecord,
            cuEventQuery,
            cuEventSynchronize,
            cuEventElapsedTime,
            cuEventElapsedTime_v2,
            cuIpcGetEventHandle,
            cuIpcOpenEventHandle,
            cuMemGetInfo,
            cuMemGetInfo_v2,
            // Modules, kernels and device memory (`exports/kernels.rs`, `exports/memory.rs`).
            cuModuleLoadDataEx,
            cuModuleUnload,
            cuModuleGetFunction,
            cuFuncGetAttribute,
            cuFuncSetAttribute,
            cuLaunchKernel,
            cuMemAlloc_v2,
            cuMemFree_v2,
            cuMemGetAddressRange_v2,
            cuMemsetD8Async,
            cuMemsetD16Async,
            cuMemsetD32Async,
            cuMemcpyDtoDAsync_v2,
            cuMemcpyHtoDAsync_v2,
            cuMemcpyDtoHAsync_v2,
            // Capture (capture.rs).
            cuStreamBeginCapture,
            cuStreamBeginCapture_ptsz,
            cuStreamBeginCapture_v2,
            cuStreamBeginCapture_v2_ptsz,
            cuStreamEndCapture,
            cuStreamEndCapture_ptsz,
            cuStreamIsCapturing,
            cuStreamIsCapturing_ptsz,
            cuStreamGetCaptureInfo,
            cuStreamGetCaptureInfo_ptsz,
            cuStreamGetCaptureInfo_v2,
            cuStreamGetCaptureInfo_v2_ptsz,
            cuStreamGetCaptureInfo_v3,
            cuStreamGetCaptureInfo_v3_ptsz,
            cuThreadExchangeStreamCaptureMode,
            cuEventRecordWithFlags,
            cuEventRecordWithFlags_ptsz,
            // Graphs, executable graphs, user objects (graph.rs).
            cuGraphGetNodes,
            cuGraphDestroy,
            cuGraphDebugDotPrint,
            cuGraphInstantiate,
            cuGraphInstantiate_v2,
            cuGraphInstantiateWithFlags,
            cuGraphInstantiateWithParams,
            cuGraphInstantiateWithParams_ptsz,
            cuGraphLaunch,
            cuGraphLaunch_ptsz,
            cuGraphUpload,
            cuGraphUpload_ptsz,
            cuGraphExecDestroy,
            cuGraphExecUpdate,
            cuGraphExecUpdate_v2,
            cuUserObjectCreate,
            cuUserObjectRetain,
            cuUserObjectRelease,
            cuGraphRetainUserObject,
            cuGraphReleaseUserObject,
        ]
    });
    &TABLE
}

// ---------------------------------------------------------------------------------------------
// Devices

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

fn valid_device(st: &State, dev: CUdevice) -> Result<(), CUresult> {
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

fn attribute(attrib: CUdevice_attribute, dev: CUdevice) -> Option<c_int> {
    type A = CUdevice_attribute;
    Some(match attrib {
        A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR => 9,
        A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR => 0,
        A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT => 132,
        A::CU_DEVICE_ATTRIBUTE_WARP_SIZE => 32,
        A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK => 1024,
        A::CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED
        | A::CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS
        | A::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING
        | A::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED
        | A::CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED => 1,
        A::CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT => 2,
        A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID => dev + 1,
        a if a.0 < A::CU_DEVICE_ATTRIBUTE_MAX.0 => 0,
        _ => return None,
    })
}

/// `cuDeviceGetAttribute`: an H100-like device; attributes it has no opinion on are 0.
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
        let Some(v) = attribute(attrib, dev) else {
            return INVALID_VALUE;
        };
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(pi, v) };
        SUCCESS
    })
}

// ---------------------------------------------------------------------------------------------
// Contexts

/// `cuDevicePrimaryCtxRetain`: one more reference to the device's primary context, whose handle
/// never changes.
///
/// # Safety
///
/// `pctx` is null or valid for a write.
#[cfg_attr(exported = "cuDevicePrimaryCtxRetain", unsafe(no_mangle))]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(pctx: *mut CUcontext, dev: CUdevice) -> CUresult {
    api("cuDevicePrimaryCtxRetain", false, |mut st| {
        if pctx.is_null() {
            return INVALID_VALUE;
        }
        tri!(valid_device(&st, dev));
        let Some(c) = st.device_ctx(dev) else {
            return CUresult::CUDA_ERROR_INVALID_DEVICE;
        };
        c.refs += 1;
        let h = c.handle;
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(pctx, h as CUcontext) };
        SUCCESS
    })
}

/// `cuDevicePrimaryCtxGetState`: no flags are modelled (0); active while retained.
///
/// # Safety
///
/// `flags` and `active` are each null or valid for a write.
#[cfg_attr(exported = "cuDevicePrimaryCtxGetState", unsafe(no_mangle))]
pub unsafe extern "C" fn cuDevicePrimaryCtxGetState(
    dev: CUdevice,
    flags: *mut c_uint,
    active: *mut c_int,
) -> CUresult {
    api("cuDevicePrimaryCtxGetState", false, |mut st| {
        if flags.is_null() || active.is_null() {
            return INVALID_VALUE;
        }
        tri!(valid_device(&st, dev));
        let Some(c) = st.device_ctx(dev) else {
            return CUresult::CUDA_ERROR_INVALID_DEVICE;
        };
        let on = c_int::from(c.refs > 0);
        // SAFETY: both non-null; the caller's contract makes them writable.
        unsafe {
            put(flags, 0);
            put(active, on);
        }
        SUCCESS
    })
}

fn primary_ctx_release(symbol: &'static str, dev: CUdevice) -> CUresult {
    api(symbol, false, |mut st| {
        tri!(valid_device(&st, dev));
        tri!(st.release_ctx(dev));
        SUCCESS
    })
}

/// `cuDevicePrimaryCtxRelease_v2`: at zero references the context is destroyed with every stream
/// and event still in it (counted as orphans). Releasing an unretained context is counted as a
/// bad destroy.
///
/// # Safety
///
/// None beyond the C contract; takes no pointers.
#[cfg_attr(exported = "cuDevicePrimaryCtxRelease_v2", unsafe(no_mangle))]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) -> CUresult {
    primary_ctx_release("cuDevicePrimaryCtxRelease_v2", dev)
}

/// `cuDevicePrimaryCtxRelease` (the CUDA 7.0 ABI): as `_v2`.
///
/// # Safety
///
/// None beyond the C contract; takes no pointers.
#[cfg_attr(exported = "cuDevicePrimaryCtxRelease", unsafe(no_mangle))]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease(dev: CUdevice) -> CUresult {
    primary_ctx_release("cuDevicePrimaryCtxRelease", dev)
}

/// A context handle from the caller: known, or counted as a bad use.
fn known_ctx(st: &mut State, ctx: CUcontext) -> Result<usize, CUresult> {
    let h = ctx as usize;
    if st.ctx(h).is_some() {
        Ok(h)
    } else {
        st.counters.bad_uses += 1;
        Err(CUresult::CUDA_ERROR_INVALID_CONTEXT)
    }
}

/// `cuCtxGetCurrent`: the top of the calling thread's context stack, or null.
///
/// # Safety
///
/// `pctx` is null or valid for a write.
#[cfg_attr(exported = "cuCtxGetCurrent", unsafe(no_mangle))]
pub unsafe extern "C" fn cuCtxGetCurrent(pctx: *mut CUcontext) -> CUresult {
    api("cuCtxGetCurrent", false, |_st| {
        if pctx.is_null() {
            return INVALID_VALUE;
        }
        let cur = state::current().unwrap_or(0);
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(pctx, cur as CUcontext) };
        SUCCESS
    })
}

/// `cuCtxSetCurrent`: replaces the top of the calling thread's stack (pushes onto an empty one);
/// null pops.
///
/// # Safety
///
/// None beyond the C contract; the handle is only compared, never dereferenced.
#[cfg_attr(exported = "cuCtxSetCurrent", unsafe(no_mangle))]
pub unsafe extern "C" fn cuCtxSetCurrent(ctx: CUcontext) -> CUresult {
    api("cuCtxSetCurrent", false, |mut st| {
        if ctx.is_null() {
            state::with_stack(|s| s.pop());
            return SUCCESS;
        }
        let h = tri!(known_ctx(&mut st, ctx));
        state::with_stack(|s| match s.last_mut() {
            Some(top) => *top = h,
            None => s.push(h),
        });
        SUCCESS
    })
}

/// `cuCtxPushCurrent_v2`.
///
/// # Safety
///
/// None beyond the C contract; the handle is only compared, never dereferenced.
#[cfg_attr(exported = "cuCtxPushCurrent_v2", unsafe(no_mangle))]
pub unsafe extern "C" fn cuCtxPushCurrent_v2(ctx: CUcontext) -> CUresult {
    push_current("cuCtxPushCurrent_v2", ctx)
}

/// `cuCtxPushCurrent` (the CUDA 2.0 ABI): as `_v2`.
///
/// # Safety
///
/// None beyond the C contract; the handle is only compared, never dereferenced.
#[cfg_attr(exported = "cuCtxPushCurrent", unsafe(no_mangle))]
pub unsafe extern "C" fn cuCtxPushCurrent(ctx: CUcontext) -> CUresult {
    push_current("cuCtxPushCurrent", ctx)
}

fn push_current(symbol: &'static str, ctx: CUcontext) -> CUresult {
    api(symbol, false, |mut st| {
        if ctx.is_null() {
            return CUresult::CUDA_ERROR_INVALID_CONTEXT;
        }
        let h = tri!(known_ctx(&mut st, ctx));
        state::with_stack(|s| s.push(h));
        SUCCESS
    })
}

/// `cuCtxPopCurrent_v2`: `CUDA_ERROR_INVALID_CONTEXT` on an empty stack.
///
/// # Safety
///
/// `pctx` is null or valid for a write.
#[cfg_attr(exported = "cuCtxPopCurrent_v2", unsafe(no_mangle))]
pub unsafe extern "C" fn cuCtxPopCurrent_v2(pctx: *mut CUcontext) -> CUresult {
    pop_current("cuCtxPopCurrent_v2", pctx)
}

/// `cuCtxPopCurrent` (the CUDA 2.0 ABI): as `_v2`.
///
/// # Safety
///
/// `pctx` is null or valid for a write.
#[cfg_attr(exported = "cuCtxPopCurrent", unsafe(no_mangle))]
pub unsafe extern "C" fn cuCtxPopCurrent(pctx: *mut CUcontext) -> CUresult {
    pop_current("cuCtxPopCurrent", pctx)
}

fn pop_current(symbol: &'static str, pctx: *mut CUcontext) -> CUresult {
    api(symbol, false, |_st| {
        let Some(h) = state::with_stack(|s| s.pop()).flatten() else {
            return CUresult::CUDA_ERROR_INVALID_CONTEXT;
        };
        if !pctx.is_null() {
            // SAFETY: non-null; the caller's contract makes it writable.
            unsafe { put(pctx, h as CUcontext) };
        }
        SUCCESS
    })
}

/// `cuCtxGetDevice`.
///
/// # Safety
///
/// `device` is null or valid for a write.
#[cfg_attr(exported = "cuCtxGetDevice", unsafe(no_mangle))]
pub unsafe extern "C" fn cuCtxGetDevice(device: *mut CUdevice) -> CUresult {
    api("cuCtxGetDevice", false, |st| {
        if device.is_null() {
            return INVALID_VALUE;
        }
        let ctx = tri!(st.current_ctx());
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(device, st.ctx_device(ctx)) };
        SUCCESS
    })
}

/// `cuCtxSynchronize`: waits for the host functions queued in the current context.
///
/// # Safety
///
/// None beyond the C contract; takes no pointers.
#[cfg_attr(exported = "cuCtxSynchronize", unsafe(no_mangle))]
pub unsafe extern "C" fn cuCtxSynchronize() -> CUresult {
    api("cuCtxSynchronize", false, |mut st| {
        let ctx = tri!(st.current_ctx());
        if let Some(rc) = crate::capture::on_ctx_sync(&mut st, ctx) {
            return rc;
        }
        let target = st.ctx_last_job.get(&ctx).copied().unwrap_or(0);
        drop(state::wait_until_done(st, target));
        SUCCESS
    })
}

/// `cuCtxGetStreamPriorityRange`: least 0, greatest -5; either pointer may be null.
///
/// # Safety
///
/// Each pointer is null or valid for a write.
#[cfg_attr(exported = "cuCtxGetStreamPriorityRange", unsafe(no_mangle))]
pub unsafe extern "C" fn cuCtxGetStreamPriorityRange(
    least_priority: *mut c_int,
    greatest_priority: *mut c_int,
) -> CUresult {
    api("cuCtxGetStreamPriorityRange", false, |st| {
        tri!(st.current_ctx());
        if !least_priority.is_null() {
            // SAFETY: non-null; the caller's contract makes it writable.
            unsafe { put(least_priority, LEAST_PRIORITY) };
        }
        if !greatest_priority.is_null() {
            // SAFETY: as above.
            unsafe { put(greatest_priority, GREATEST_PRIORITY) };
        }
        SUCCESS
    })
}

// ---------------------------------------------------------------------------------------------
// Streams

fn create_stream(
    symbol: &'static str,
    ph_stream: *mut CUstream,
    flags: c_uint,
    priority: c_int,
) -> CUresult {
    api(symbol, false, |mut st| {
        if ph_stream.is_null() || flags & !CU_STREAM_NON_BLOCKING != 0 {
            return INVALID_VALUE;
        }
        let ctx = tri!(st.current_ctx());
        let id = st.next_id();
        let h = st.new_handle(Object::Stream(StreamRec {
            ctx,
            flags,
            priority: priority.clamp(GREATEST_PRIORITY, LEAST_PRIORITY),
            id,
            alive: true,
        }));
        st.live_streams += 1;
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(ph_stream, h as CUstream) };
        SUCCESS
    })
}

/// `cuStreamCreate`: a new stream in the current context (flags 0 or `CU_STREAM_NON_BLOCKING`).
///
/// # Safety
///
/// `ph_stream` is null or valid for a write.
#[cfg_attr(exported = "cuStreamCreate", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamCreate(ph_stream: *mut CUstream, flags: c_uint) -> CUresult {
    create_stream("cuStreamCreate", ph_stream, flags, 0)
}

/// `cuStreamCreateWithPriority`: the priority is clamped to [-5, 0].
///
/// # Safety
///
/// `ph_stream` is null or valid for a write.
#[cfg_attr(exported = "cuStreamCreateWithPriority", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamCreateWithPriority(
    ph_stream: *mut CUstream,
    flags: c_uint,
    priority: c_int,
) -> CUresult {
    create_stream("cuStreamCreateWithPriority", ph_stream, flags, priority)
}

/// `cuStreamDestroy_v2`: host functions already queued still run. Destroying anything but a live
/// stream the mock created (null, the special handles, an event, a destroyed stream) returns
/// `CUDA_ERROR_INVALID_HANDLE` and is counted as a bad destroy.
///
/// # Safety
///
/// None beyond the C contract; the handle is only looked up, never dereferenced.
#[cfg_attr(exported = "cuStreamDestroy_v2", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamDestroy_v2(h_stream: CUstream) -> CUresult {
    destroy_stream("cuStreamDestroy_v2", h_stream)
}

/// `cuStreamDestroy` (the CUDA 2.0 ABI): as `_v2`.
///
/// # Safety
///
/// None beyond the C contract; the handle is only looked up, never dereferenced.
#[cfg_attr(exported = "cuStreamDestroy", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamDestroy(h_stream: CUstream) -> CUresult {
    destroy_stream("cuStreamDestroy", h_stream)
}

fn destroy_stream(symbol: &'static str, h_stream: CUstream) -> CUresult {
    api(symbol, false, |mut st| {
        match st.objects.get_mut(&(h_stream as usize)) {
            Some(Object::Stream(s)) if s.alive => {
                s.alive = false;
                st.live_streams -= 1;
                st.counters.destroyed_streams += 1;
                SUCCESS
            }
            _ => {
                st.counters.bad_destroys += 1;
                INVALID_HANDLE
            }
        }
    })
}

/// `cuStreamQuery`: `CUDA_ERROR_NOT_READY` while host functions (or an awaited event) queued on
/// the stream have not finished.
///
/// # Safety
///
/// None beyond the C contract; the handle is only looked up, never dereferenced.
#[cfg_attr(exported = "cuStreamQuery", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamQuery(h_stream: CUstream) -> CUresult {
    stream_query("cuStreamQuery", h_stream, false)
}

/// `cuStreamQuery_ptsz`: as `cuStreamQuery`, with the null stream meaning the calling thread's
/// per-thread default stream.
///
/// # Safety
///
/// None beyond the C contract; the handle is only looked up, never dereferenced.
#[cfg_attr(exported = "cuStreamQuery_ptsz", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamQuery_ptsz(h_stream: CUstream) -> CUresult {
    stream_query("cuStreamQuery_ptsz", h_stream, true)
}

fn stream_query(symbol: &'static str, h_stream: CUstream, per_thread: bool) -> CUresult {
    api(symbol, false, |mut st| {
        let s = tri!(st.stream(per_thread_null(h_stream, per_thread)));
        if let Some(rc) = crate::capture::on_stream_poll(&mut st, s) {
            return rc;
        }
        if st.idle(s.key) { SUCCESS } else { NOT_READY }
    })
}

/// The stream a `_ptsz` / `_ptds` function means by `h`: the null stream is the per-thread one.
pub(crate) fn per_thread_null(h: CUstream, per_thread: bool) -> CUstream {
    if per_thread && h.is_null() {
        std::ptr::without_provenance_mut(2)
    } else {
        h
    }
}

/// `cuStreamSynchronize`: waits for the stream's queued host functions.
///
/// # Safety
///
/// None beyond the C contract; the handle is only looked up, never dereferenced.
#[cfg_attr(exported = "cuStreamSynchronize", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamSynchronize(h_stream: CUstream) -> CUresult {
    stream_synchronize("cuStreamSynchronize", h_stream, false)
}

/// `cuStreamSynchronize_ptsz`: as `cuStreamSynchronize`, with the null stream meaning the
/// calling thread's per-thread default stream.
///
/// # Safety
///
/// None beyond the C contract; the handle is only looked up, never dereferenced.
#[cfg_attr(exported = "cuStreamSynchronize_ptsz", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamSynchronize_ptsz(h_stream: CUstream) -> CUresult {
    stream_synchronize("cuStreamSynchronize_ptsz", h_stream, true)
}

fn stream_synchronize(symbol: &'static str, h_stream: CUstream, per_thread: bool) -> CUresult {
    api(symbol, false, |mut st| {
        let s = tri!(st.stream(per_thread_null(h_stream, per_thread)));
        if let Some(rc) = crate::capture::on_stream_poll(&mut st, s) {
            return rc;
        }
        let target = st.last_job.get(&s.key).copied().unwrap_or(0);
        drop(state::wait_until_done(st, target));
        SUCCESS
    })
}

/// `cuStreamWaitEvent`: legal across contexts; the stream stays not-ready until the event's
/// current record completes.
///
/// # Safety
///
/// None beyond the C contract; the handles are only looked up, never dereferenced.
#[cfg_attr(exported = "cuStreamWaitEvent", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamWaitEvent(
    h_stream: CUstream,
    h_event: CUevent,
    flags: c_uint,
) -> CUresult {
    api("cuStreamWaitEvent", false, |mut st| {
        let s = tri!(st.stream(h_stream));
        let (_, _, core) = tri!(st.event(h_event as usize));
        if flags & !CU_EVENT_WAIT_EXTERNAL != 0 {
            return INVALID_VALUE;
        }
        if let Some(rc) = crate::capture::on_wait(&mut st, s, core, flags) {
            return rc;
        }
        let seq = st
            .cores
            .get(&core)
            .and_then(|c| c.record)
            .map_or(0, |r| r.0);
        if seq > st.completed {
            st.wait_for_job(s.key, s.ctx, seq);
        }
        SUCCESS
    })
}

/// `cuStreamAddCallback`: `callback(stream, CUDA_SUCCESS, user_data)` runs on the mock's one
/// host-function thread after everything queued before it.
///
/// # Safety
///
/// `callback` must be sound to call from another thread with these arguments.
#[cfg_attr(exported = "cuStreamAddCallback", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamAddCallback(
    h_stream: CUstream,
    callback: CUstreamCallback,
    user_data: *mut c_void,
    flags: c_uint,
) -> CUresult {
    api("cuStreamAddCallback", false, |mut st| {
        let s = tri!(st.stream(h_stream));
        let Some(f) = callback else {
            return INVALID_VALUE;
        };
        if flags != 0 {
            return INVALID_VALUE;
        }
        if let Some(rc) = crate::capture::on_callback(&mut st, s) {
            return rc;
        }
        tri!(st.enqueue(s, Work::Callback(f, h_stream as usize, user_data as usize)));
        SUCCESS
    })
}

/// `cuLaunchHostFunc`: `f(user_data)` runs on the mock's one host-function thread after
/// everything queued before it.
///
/// # Safety
///
/// `f` must be sound to call from another thread with `user_data`.
#[cfg_attr(exported = "cuLaunchHostFunc", unsafe(no_mangle))]
pub unsafe extern "C" fn cuLaunchHostFunc(
    h_stream: CUstream,
    f: CUhostFn,
    user_data: *mut c_void,
) -> CUresult {
    api("cuLaunchHostFunc", false, |mut st| {
        let s = tri!(st.stream(h_stream));
        let Some(f) = f else {
            return INVALID_VALUE;
        };
        if let Some(rc) = crate::capture::on_host_fn(&mut st, s, f, user_data as usize) {
            return rc;
        }
        tri!(st.enqueue(s, Work::Host(f, user_data as usize)));
        SUCCESS
    })
}

/// `cuStreamGetCtx`.
///
/// # Safety
///
/// `pctx` is null or valid for a write.
#[cfg_attr(exported = "cuStreamGetCtx", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamGetCtx(h_stream: CUstream, pctx: *mut CUcontext) -> CUresult {
    api("cuStreamGetCtx", false, |mut st| {
        let s = tri!(st.stream(h_stream));
        if pctx.is_null() {
            return INVALID_VALUE;
        }
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(pctx, s.ctx as CUcontext) };
        SUCCESS
    })
}

/// `cuStreamGetCtx_v2` (CUDA 12.5): the stream's context, and no green context (the mock has
/// none).
///
/// # Safety
///
/// `pctx` and `p_green_ctx` are each null or valid for a write.
#[cfg_attr(exported = "cuStreamGetCtx_v2", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamGetCtx_v2(
    h_stream: CUstream,
    pctx: *mut CUcontext,
    p_green_ctx: *mut CUgreenCtx,
) -> CUresult {
    api("cuStreamGetCtx_v2", false, |mut st| {
        let s = tri!(st.stream(h_stream));
        if pctx.is_null() || p_green_ctx.is_null() {
            return INVALID_VALUE;
        }
        // SAFETY: both non-null; the caller's contract makes them writable.
        unsafe {
            put(pctx, s.ctx as CUcontext);
            put(p_green_ctx, std::ptr::null_mut());
        }
        SUCCESS
    })
}

/// `cuStreamGetDevice` (CUDA 12.8).
///
/// # Safety
///
/// `device` is null or valid for a write.
#[cfg_attr(exported = "cuStreamGetDevice", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamGetDevice(h_stream: CUstream, device: *mut CUdevice) -> CUresult {
    api("cuStreamGetDevice", false, |mut st| {
        let s = tri!(st.stream(h_stream));
        if device.is_null() {
            return INVALID_VALUE;
        }
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(device, st.ctx_device(s.ctx)) };
        SUCCESS
    })
}

/// `cuStreamGetFlags`.
///
/// # Safety
///
/// `flags` is null or valid for a write.
#[cfg_attr(exported = "cuStreamGetFlags", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamGetFlags(h_stream: CUstream, flags: *mut c_uint) -> CUresult {
    api("cuStreamGetFlags", false, |mut st| {
        let s = tri!(st.stream(h_stream));
        if flags.is_null() {
            return INVALID_VALUE;
        }
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(flags, s.flags) };
        SUCCESS
    })
}

/// `cuStreamGetPriority`.
///
/// # Safety
///
/// `priority` is null or valid for a write.
#[cfg_attr(exported = "cuStreamGetPriority", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamGetPriority(h_stream: CUstream, priority: *mut c_int) -> CUresult {
    api("cuStreamGetPriority", false, |mut st| {
        let s = tri!(st.stream(h_stream));
        if priority.is_null() {
            return INVALID_VALUE;
        }
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(priority, s.priority) };
        SUCCESS
    })
}

/// `cuStreamGetId` (CUDA 12.0): unique per stream, never reused.
///
/// # Safety
///
/// `stream_id` is null or valid for a write.
#[cfg_attr(exported = "cuStreamGetId", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamGetId(
    h_stream: CUstream,
    stream_id: *mut std::ffi::c_ulonglong,
) -> CUresult {
    api("cuStreamGetId", false, |mut st| {
        let s = tri!(st.stream(h_stream));
        if stream_id.is_null() {
            return INVALID_VALUE;
        }
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(stream_id, s.id) };
        SUCCESS
    })
}

// ---------------------------------------------------------------------------------------------
// Events

fn new_event(st: &mut State, ctx: usize, flags: c_uint, core: u64) -> usize {
    st.live_events += 1;
    st.new_handle(Object::Event(EventRec {
        ctx,
        flags,
        core,
        alive: true,
    }))
}

/// `cuEventCreate`: flags are `CU_EVENT_BLOCKING_SYNC` (1), `CU_EVENT_DISABLE_TIMING` (2) and
/// `CU_EVENT_INTERPROCESS` (4, only with `DISABLE_TIMING`).
///
/// # Safety
///
/// `ph_event` is null or valid for a write.
#[cfg_attr(exported = "cuEventCreate", unsafe(no_mangle))]
pub unsafe extern "C" fn cuEventCreate(ph_event: *mut CUevent, flags: c_uint) -> CUresult {
    api("cuEventCreate", false, |mut st| {
        let known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
        if ph_event.is_null()
            || flags & !known != 0
            || (flags & CU_EVENT_INTERPROCESS != 0 && flags & CU_EVENT_DISABLE_TIMING == 0)
        {
            return INVALID_VALUE;
        }
        let ctx = tri!(st.current_ctx());
        let core = st.next_id();
        st.cores.insert(core, Core::default());
        let h = new_event(&mut st, ctx, flags, core);
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(ph_event, h as CUevent) };
        SUCCESS
    })
}

/// `cuEventDestroy_v2`: anything but a live event the mock created is counted as a bad destroy.
///
/// # Safety
///
/// None beyond the C contract; the handle is only looked up, never dereferenced.
#[cfg_attr(exported = "cuEventDestroy_v2", unsafe(no_mangle))]
pub unsafe extern "C" fn cuEventDestroy_v2(h_event: CUevent) -> CUresult {
    destroy_event("cuEventDestroy_v2", h_event)
}

/// `cuEventDestroy` (the CUDA 2.0 ABI): as `_v2`.
///
/// # Safety
///
/// None beyond the C contract; the handle is only looked up, never dereferenced.
#[cfg_attr(exported = "cuEventDestroy", unsafe(no_mangle))]
pub unsafe extern "C" fn cuEventDestroy(h_event: CUevent) -> CUresult {
    destroy_event("cuEventDestroy", h_event)
}

fn destroy_event(symbol: &'static str, h_event: CUevent) -> CUresult {
    api(symbol, false, |mut st| {
        match st.objects.get_mut(&(h_event as usize)) {
            Some(Object::Event(e)) if e.alive => {
                e.alive = false;
                st.live_events -= 1;
                st.counters.destroyed_events += 1;
                SUCCESS
            }
            _ => {
                st.counters.bad_destroys += 1;
                INVALID_HANDLE
            }
        }
    })
}

/// `cuEventRecord`: complete once everything queued on the stream before it has run. A stream of
/// another context than the event's gives `CUDA_ERROR_INVALID_HANDLE`.
///
/// # Safety
///
/// None beyond the C contract; the handles are only looked up, never dereferenced.
#[cfg_attr(exported = "cuEventRecord", unsafe(no_mangle))]
pub unsafe extern "C" fn cuEventRecord(h_event: CUevent, h_stream: CUstream) -> CUresult {
    api("cuEventRecord", false, |mut st| {
        let (ctx, _, core) = tri!(st.event(h_event as usize));
        let s = tri!(st.stream(h_stream));
        if s.ctx != ctx {
            return INVALID_HANDLE;
        }
        if let Some(rc) = crate::capture::on_event_record(&mut st, s, core) {
            return rc;
        }
        let record = if st.idle(s.key) {
            (0, Some(Instant::now()))
        } else {
            (tri!(st.enqueue(s, Work::Marker(core))), None)
        };
        if let Some(c) = st.cores.get_mut(&core) {
            c.record = Some(record);
        }
        SUCCESS
    })
}

/// The event's last record: `None` if never recorded, else (complete, when).
fn event_state(st: &State, core: u64) -> Option<(bool, Option<Instant>)> {
    let (seq, at) = st.cores.get(&core)?.record?;
    Some((seq <= st.completed, at))
}

/// `cuEventQuery`: `CUDA_SUCCESS` for a never-recorded event, as the real driver answers.
///
/// # Safety
///
/// None beyond the C contract; the handle is only looked up, never dereferenced.
#[cfg_attr(exported = "cuEventQuery", unsafe(no_mangle))]
pub unsafe extern "C" fn cuEventQuery(h_event: CUevent) -> CUresult {
    api("cuEventQuery", false, |mut st| {
        let (_, _, core) = tri!(st.event(h_event as usize));
        if let Some(rc) = crate::capture::on_event_poll(&mut st, core) {
            return rc;
        }
        match event_state(&st, core) {
            Some((false, _)) => NOT_READY,
            _ => SUCCESS,
        }
    })
}

/// `cuEventSynchronize`: waits for the event's last record to complete.
///
/// # Safety
///
/// None beyond the C contract; the handle is only looked up, never dereferenced.
#[cfg_attr(exported = "cuEventSynchronize", unsafe(no_mangle))]
pub unsafe extern "C" fn cuEventSynchronize(h_event: CUevent) -> CUresult {
    api("cuEventSynchronize", false, |mut st| {
        let (_, _, core) = tri!(st.event(h_event as usize));
        if let Some(rc) = crate::capture::on_event_poll(&mut st, core) {
            return rc;
        }
        let target = st
            .cores
            .get(&core)
            .and_then(|c| c.record)
            .map_or(0, |r| r.0);
        drop(state::wait_until_done(st, target));
        SUCCESS
    })
}

/// `cuEventElapsedTime_v2` (CUDA 12.8).
///
/// # Safety
///
/// `ms` is null or valid for a write.
#[cfg_attr(exported = "cuEventElapsedTime_v2", unsafe(no_mangle))]
pub unsafe extern "C" fn cuEventElapsedTime_v2(
    ms: *mut f32,
    h_start: CUevent,
    h_end: CUevent,
) -> CUresult {
    elapsed_time("cuEventElapsedTime_v2", ms, h_start, h_end)
}

/// `cuEventElapsedTime` (the CUDA 2.0 ABI): the same answers as `_v2` in the mock.
///
/// # Safety
///
/// `ms` is null or valid for a write.
#[cfg_attr(exported = "cuEventElapsedTime", unsafe(no_mangle))]
pub unsafe extern "C" fn cuEventElapsedTime(
    ms: *mut f32,
    h_start: CUevent,
    h_end: CUevent,
) -> CUresult {
    elapsed_time("cuEventElapsedTime", ms, h_start, h_end)
}

fn elapsed_time(symbol: &'static str, ms: *mut f32, h_start: CUevent, h_end: CUevent) -> CUresult {
    api(symbol, false, |mut st| {
        if ms.is_null() {
            return INVALID_VALUE;
        }
        let (_, start_flags, start) = tri!(st.event(h_start as usize));
        let (_, end_flags, end) = tri!(st.event(h_end as usize));
        if (start_flags | end_flags) & CU_EVENT_DISABLE_TIMING != 0 {
            return INVALID_HANDLE;
        }
        let (Some(a), Some(b)) = (event_state(&st, start), event_state(&st, end)) else {
            return INVALID_HANDLE;
        };
        let (true, Some(t0), true, Some(t1)) = (a.0, a.1, b.0, b.1) else {
            return NOT_READY;
        };
        let millis = if t1 >= t0 {
            t1.duration_since(t0).as_secs_f64() * 1e3
        } else {
            -(t0.duration_since(t1).as_secs_f64() * 1e3)
        };
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(ms, millis as f32) };
        SUCCESS
    })
}

/// The bytes of a mock IPC event handle: a tag, the process id and the event's record state.
const IPC_TAG: &[u8; 16] = b"cuda-mock-ipc-ev";

/// `cuIpcGetEventHandle`: only for events created with `CU_EVENT_INTERPROCESS`.
///
/// # Safety
///
/// `p_handle` is null or valid for a write.
#[cfg_attr(exported = "cuIpcGetEventHandle", unsafe(no_mangle))]
pub unsafe extern "C" fn cuIpcGetEventHandle(
    p_handle: *mut CUipcEventHandle,
    event: CUevent,
) -> CUresult {
    api("cuIpcGetEventHandle", false, |mut st| {
        if p_handle.is_null() {
            return INVALID_VALUE;
        }
        let (_, flags, core) = tri!(st.event(event as usize));
        if flags & CU_EVENT_INTERPROCESS == 0 {
            return INVALID_VALUE;
        }
        let mut bytes = [0u8; 64];
        bytes[..16].copy_from_slice(IPC_TAG);
        bytes[16..20].copy_from_slice(&std::process::id().to_le_bytes());
        bytes[24..32].copy_from_slice(&core.to_le_bytes());
        let handle = CUipcEventHandle {
            reserved: bytes.map(|b| b as c_char),
        };
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(p_handle, handle) };
        SUCCESS
    })
}

/// `cuIpcOpenEventHandle`: a new event handle (in the current context; destroy it with
/// `cuEventDestroy`) sharing the original's record state. Handles from this process alias the
/// original event; handles from another process open as a never-recorded event.
///
/// # Safety
///
/// `ph_event` is null or valid for a write.
#[cfg_attr(exported = "cuIpcOpenEventHandle", unsafe(no_mangle))]
pub unsafe extern "C" fn cuIpcOpenEventHandle(
    ph_event: *mut CUevent,
    handle: CUipcEventHandle,
) -> CUresult {
    api("cuIpcOpenEventHandle", false, |mut st| {
        if ph_event.is_null() {
            return INVALID_VALUE;
        }
        let bytes = handle.reserved.map(|b| b as u8);
        if &bytes[..16] != IPC_TAG {
            return INVALID_VALUE;
        }
        let ctx = tri!(st.current_ctx());
        let pid = u32::from_le_bytes([bytes[16], bytes[17], bytes[18], bytes[19]]);
        let mut core_bytes = [0u8; 8];
        core_bytes.copy_from_slice(&bytes[24..32]);
        let core = u64::from_le_bytes(core_bytes);
        let core = if pid == std::process::id() && st.cores.contains_key(&core) {
            core
        } else if pid == std::process::id() {
            return INVALID_VALUE;
        } else {
            let fresh = st.next_id();
            st.cores.insert(fresh, Core::default());
            fresh
        };
        let h = new_event(
            &mut st,
            ctx,
            CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS,
            core,
        );
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(ph_event, h as CUevent) };
        SUCCESS
    })
}

// ---------------------------------------------------------------------------------------------
// Memory

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

// ---------------------------------------------------------------------------------------------
// Control

/// A C string argument of a control function.
///
/// # Safety
///
/// `p` is null or a NUL-terminated string valid for the call.
unsafe fn c_str<'a>(p: *const c_char) -> Option<&'a str> {
    if p.is_null() {
        return None;
    }
    // SAFETY: the caller's promise.
    unsafe { CStr::from_ptr(p) }.to_str().ok()
}

/// Forgets every failure rule and override, zeroes the counters (call counts included), then
/// applies `CUDA_MOCK_CONFIG` again. Handles, contexts and queued host functions are untouched.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_reset() {
    guard((), || state::lock().reset());
}

/// Applies a configuration in `CUDA_MOCK_CONFIG` syntax on top of the current one. Returns 0, or
/// -1 (after printing why to stderr) if the string does not parse; then nothing is applied.
///
/// # Safety
///
/// `spec` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_mock_configure(spec: *const c_char) -> c_int {
    guard(-1, || {
        // SAFETY: the caller's promise.
        let Some(spec) = (unsafe { c_str(spec) }) else {
            return -1;
        };
        match state::parse_config(spec) {
            Ok(cfg) => {
                state::lock().apply(cfg);
                0
            }
            Err(e) => {
                use std::io::Write as _;
                let _ = writeln!(std::io::stderr(), "cuda_mock_configure: {e}");
                -1
            }
        }
    })
}

fn add_rule(name: *const c_char, nth: Option<u64>, code: u32) -> c_int {
    guard(-1, || {
        // SAFETY: the exported callers pass on their own caller's promise.
        let Some(symbol) = (unsafe { c_str(name) }).and_then(state::canonical) else {
            return -1;
        };
        state::lock()
            .rules
            .push(state::Rule::new(symbol, nth, CUresult(code)));
        0
    })
}

/// Fails the `nth` call (1-based, counted from now) of `name` with `code`. `name` is the exported
/// symbol or the name C code writes (`cuStreamDestroy` means `cuStreamDestroy_v2`). Returns 0, or
/// -1 for a symbol the mock does not export or `nth == 0`.
///
/// # Safety
///
/// `name` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_mock_fail(name: *const c_char, nth: u32, code: u32) -> c_int {
    if nth == 0 {
        return -1;
    }
    add_rule(name, Some(u64::from(nth)), code)
}

/// Fails every call of `name` with `code` until `cuda_mock_reset`. Returns 0 or -1 as
/// [`cuda_mock_fail`].
///
/// # Safety
///
/// `name` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_mock_fail_always(name: *const c_char, code: u32) -> c_int {
    add_rule(name, None, code)
}

/// The flavour this library was built as, such as `CUDA 12.2, no cuGetProcAddress`: a string
/// that lives as long as the process.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_flavour() -> *const c_char {
    static NAME: LazyLock<CString> =
        LazyLock::new(|| CString::new(state::FLAVOUR.name).unwrap_or_default());
    NAME.as_ptr()
}

/// 1 if this flavour exports the symbol `name` means (as for [`cuda_mock_fail`]), else 0.
///
/// # Safety
///
/// `name` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_mock_exports(name: *const c_char) -> c_int {
    // SAFETY: the caller's promise.
    let name = unsafe { c_str(name) };
    guard(0, || c_int::from(name.and_then(state::canonical).is_some()))
}

/// Sets the version `cuDriverGetVersion` reports.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_set_version(version: c_int) {
    guard((), || state::lock().version = version);
}

/// Sets how many devices there are (0 to 8). Returns 0, or -1 if out of range.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_set_device_count(count: c_int) -> c_int {
    guard(-1, || match usize::try_from(count) {
        Ok(n) if n <= MAX_DEVICES => {
            state::lock().devices = n;
            0
        }
        _ => -1,
    })
}

pub(crate) fn read(f: impl FnOnce(&State) -> u64) -> u64 {
    guard(0, || f(&state::lock()))
}

/// Streams created and not destroyed (by `cuStreamDestroy` or with their context).
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_live_streams() -> u64 {
    read(|st| st.live_streams)
}

/// Events created or opened and not destroyed.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_live_events() -> u64 {
    read(|st| st.live_events)
}

/// Primary-context references held: retains minus releases, over all devices.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_live_primary_retains() -> u64 {
    read(|st| st.ctxs.iter().map(|c| c.refs).sum())
}

/// Successful `cuStreamDestroy` calls since the last reset.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_destroyed_streams() -> u64 {
    read(|st| st.counters.destroyed_streams)
}

/// Successful `cuEventDestroy` calls since the last reset.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_destroyed_events() -> u64 {
    read(|st| st.counters.destroyed_events)
}

/// Destroys of something that was not a live handle of the right kind (unknown, already destroyed,
/// null or special) and releases of an unretained primary context, since the last reset.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_bad_destroys() -> u64 {
    read(|st| st.counters.bad_destroys)
}

/// Uses of an unknown or destroyed stream, event or context handle since the last reset.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_bad_uses() -> u64 {
    read(|st| st.counters.bad_uses)
}

/// Streams and events destroyed implicitly because their primary context's last reference was
/// released, since the last reset.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_orphans() -> u64 {
    read(|st| st.counters.orphans)
}

/// Driver calls made from inside a host function or stream callback (refused with
/// `CUDA_ERROR_NOT_PERMITTED`) since the last reset.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_host_fn_api_calls() -> u64 {
    read(|st| st.counters.host_fn_api_calls)
}

/// Host functions, callbacks and event records queued or running.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_pending_host_fns() -> u64 {
    read(State::pending_jobs)
}

/// Calls of `name` (as for [`cuda_mock_fail`]) since the last reset, failed ones included; 0 for
/// a name the mock does not export.
///
/// # Safety
///
/// `name` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuda_mock_calls(name: *const c_char) -> u64 {
    // SAFETY: the caller's promise.
    let Some(symbol) = (unsafe { c_str(name) }).and_then(state::canonical) else {
        return 0;
    };
    read(|st| st.calls.get(symbol).copied().unwrap_or(0))
}

/// Whether a stream or event handle the mock created has been destroyed: 1 destroyed (explicitly
/// or with its context), 0 alive, -1 not a handle the mock ever created.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_destroyed(handle: *mut c_void) -> c_int {
    guard(-1, || match state::lock().objects.get(&(handle as usize)) {
        Some(Object::Stream(StreamRec { alive, .. }) | Object::Event(EventRec { alive, .. })) => {
            c_int::from(!*alive)
        }
        None => -1,
    })
}

/// The creation flags of an event handle the mock created (alive or destroyed), or -1 for
/// anything else.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_event_flags(handle: *mut c_void) -> i64 {
    guard(-1, || match state::lock().objects.get(&(handle as usize)) {
        Some(Object::Event(e)) => i64::from(e.flags),
        _ => -1,
    })
}

// Modules, kernels and device memory (after the helpers above, which they use), in files of
// their own that follow the same convention.
mod kernels;
mod memory;

use kernels::{
    cuFuncGetAttribute, cuFuncSetAttribute, cuLaunchKernel, cuModuleGetFunction,
    cuModuleLoadDataEx, cuModuleUnload,
};
use memory::{
    cuMemAlloc_v2, cuMemFree_v2, cuMemGetAddressRange_v2, cuMemcpyDtoDAsync_v2,
    cuMemcpyDtoHAsync_v2, cuMemcpyHtoDAsync_v2, cuMemsetD8Async, cuMemsetD16Async,
    cuMemsetD32Async,
};

#[cfg(test)]
mod tests {
    use super::*;

    /// The convention of the module docs, checked on the text of this file and its submodules'.
    #[test]
    fn driver_exports_follow_the_convention() {
        let files = [
            include_str!("exports.rs"),
            include_str!("capture.rs"),
            include_str!("graph.rs"),
            include_str!("exports/kernels.rs"),
            include_str!("exports/memory.rs"),
        ];
        let lines: Vec<&str> = files.iter().flat_map(|f| f.lines()).collect();
        let table: Vec<&str> = driver_functions().iter().map(|(n, _)| *n).collect();
        let mut exports = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            let Some(rest) = line
                .strip_prefix("pub unsafe extern \"C\" fn ")
                .or_else(|| line.strip_prefix("pub extern \"C\" fn "))
            else {
                continue;
            };
            let name = &rest[..rest.find('(').expect("a parameter list")];
            let attr = lines[i - 1];
            if name.starts_with("cuda_mock_") {
                assert_eq!(attr, "#[unsafe(no_mangle)]", "{name}");
                continue;
            }
            assert_eq!(
                attr,
                format!("#[cfg_attr(exported = \"{name}\", unsafe(no_mangle))]"),
                "{name}: a driver function is exported only where its flavour has it"
            );
            assert!(
                cuda_sys::SymbolInfo::all()
                    .iter()
                    .any(|s| s.symbol.to_str() == Ok(name)),
                "{name} is not a symbol of the bindings"
            );
            assert!(
                table.contains(&name),
                "{name} is missing from driver_functions"
            );
            exports.push(name);
        }
        assert_eq!(
            exports.len(),
            table.len(),
            "driver_functions lists {table:?}"
        );
        assert!(exports.len() >= 85);
    }
}
