//! The flavour this library is built as (its CUDA version, and whether it has
//! `cuGetProcAddress`), the driver functions the mock implements, and which of them the flavour
//! exports: the answers of `cuGetProcAddress` and of the control functions that take a name.

use std::ffi::c_int;

use cuda_stream_sys::{CUdriverProcAddressQueryResult, SymbolInfo};

use crate::Flavour;

include!(concat!(env!("OUT_DIR"), "/flavour.rs"));

/// The version `cuDriverGetVersion` reports unless configured otherwise: the flavour's.
pub(crate) const DEFAULT_VERSION: i32 = FLAVOUR.version;

/// Whether this flavour exports the driver symbol `symbol`.
pub(crate) fn exported(symbol: &str) -> bool {
    EXPORTED.binary_search(&symbol).is_ok()
}

/// Calls the macro `$m` with every driver function the mock implements, by exported symbol: the
/// one list behind [`IMPLEMENTED`] (names) and the exports' `driver_functions` (addresses). Every
/// export with `cfg_attr(exported = ..)` belongs here.
macro_rules! driver_function_list {
    ($m:ident) => {
        $m![
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
            cuCtxGetLimit,
            cuCtxSetLimit,
            cuCtxGetCacheConfig,
            cuCtxSetCacheConfig,
            cuDeviceTotalMem_v2,
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
            cuModuleGetGlobal_v2,
            cuFuncGetAttribute,
            cuFuncSetAttribute,
            cuLaunchKernel,
            cuFuncGetParamInfo,
            cuLaunchKernelEx,
            cuOccupancyMaxPotentialBlockSize,
            cuOccupancyMaxActiveBlocksPerMultiprocessor,
            cuMemAlloc_v2,
            cuMemFree_v2,
            cuMemGetAddressRange_v2,
            cuMemsetD8Async,
            cuMemsetD16Async,
            cuMemsetD32Async,
            cuMemcpyDtoDAsync_v2,
            cuMemcpyHtoDAsync_v2,
            cuMemcpyDtoHAsync_v2,
            // Peers (`exports/peers.rs`).
            cuDeviceCanAccessPeer,
            cuCtxEnablePeerAccess,
            cuMemcpyPeerAsync,
            // Memory pools, stream-ordered and page-locked memory (`exports/pools.rs`).
            cuDeviceGetDefaultMemPool,
            cuMemPoolCreate,
            cuMemPoolDestroy,
            cuMemPoolGetAttribute,
            cuMemPoolSetAttribute,
            cuMemPoolTrimTo,
            cuMemPoolSetAccess,
            cuMemPoolGetAccess,
            cuMemAllocFromPoolAsync,
            cuMemAllocAsync,
            cuMemFreeAsync,
            cuMemHostAlloc,
            cuMemFreeHost,
            cuMemHostRegister_v2,
            cuMemHostUnregister,
            // Managed memory (`exports/managed.rs`).
            cuMemAllocManaged,
            cuMemPrefetchAsync,
            cuMemPrefetchAsync_v2,
            cuMemAdvise,
            cuMemAdvise_v2,
            // Capture (`exports/capture.rs`).
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
            // Graphs, executable graphs (`exports/graphs.rs`), their nodes (`graph_nodes.rs`),
            // user objects (`user_objects.rs`).
            cuGraphGetNodes,
            cuGraphNodeGetType,
            cuGraphHostNodeGetParams,
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
    };
}
pub(crate) use driver_function_list;

macro_rules! names {
    ($($f:ident),* $(,)?) => {
        [$(stringify!($f)),*]
    };
}

/// Every driver function the mock implements, by exported symbol.
pub(crate) const IMPLEMENTED: &[&str] = &driver_function_list!(names);

/// The mock's function for `symbol`, if this flavour exports it.
fn implemented(symbol: &str) -> Option<&'static str> {
    IMPLEMENTED
        .iter()
        .find(|name| **name == symbol)
        .filter(|name| exported(name))
        .copied()
}

/// The exported symbol meant by `name`: for a binding name of cuda-stream-sys, that binding's symbol
/// (the name C code writes, `cuStreamDestroy` for `cuStreamDestroy_v2`, or an ABI variant such
/// as `cuEventElapsedTime_v2000` for `cuEventElapsedTime`); for another name, the exported name
/// itself (`cuStreamDestroy_v2`). `None` unless this flavour exports it.
pub(crate) fn canonical(name: &str) -> Option<&'static str> {
    let symbol = match SymbolInfo::find(name) {
        Some(s) => s.symbol.to_str().ok()?,
        None => name,
    };
    implemented(symbol)
}

/// `cuGetProcAddress`'s search, as the driver does it: of the ABIs of the function `base` that
/// this flavour's CUDA version has (its per-thread variants, if `per_thread` and it has any), the
/// newest no newer than `version`, by exported symbol. Where the mock does not implement that ABI
/// the answer is "not found", never an older ABI in its place.
pub(crate) fn proc_address(
    base: &str,
    version: c_int,
    per_thread: bool,
) -> Result<&'static str, CUdriverProcAddressQueryResult> {
    let abis = |pt: bool| -> Vec<&'static SymbolInfo> {
        SymbolInfo::all()
            .iter()
            .filter(|s| s.base.to_str() == Ok(base) && s.per_thread == pt)
            .filter(|s| s.symbol.to_str().is_ok_and(exported))
            .collect()
    };
    let mut found = if per_thread { abis(true) } else { Vec::new() };
    if found.is_empty() {
        found = abis(false);
    }
    if found.is_empty() {
        return Err(CUdriverProcAddressQueryResult::CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    }
    let newest = found
        .into_iter()
        .filter(|s| i64::from(s.since) <= i64::from(version))
        .max_by_key(|s| s.since)
        .ok_or(CUdriverProcAddressQueryResult::CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT)?;
    newest
        .symbol
        .to_str()
        .ok()
        .and_then(implemented)
        .ok_or(CUdriverProcAddressQueryResult::CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flavour_exports_what_its_version_had() {
        assert!(EXPORTED.windows(2).all(|w| w[0] < w[1]), "sorted");
        for e in EXPORTED {
            let since = SymbolInfo::all()
                .iter()
                .filter(|s| s.symbol.to_str() == Ok(*e))
                .map(|s| s.since)
                .max();
            assert!(since.is_some_and(|v| v <= FLAVOUR.version as u32), "{e}");
        }
        assert!(exported("cuGetProcAddress_v2") && exported("cuGetProcAddress"));
    }

    #[test]
    fn proc_address_answers_by_base_name_version_and_flag() {
        type S = CUdriverProcAddressQueryResult;
        let v1 = "cuEventElapsedTime";
        let v2 = "cuEventElapsedTime_v2";
        assert_eq!(proc_address("cuEventElapsedTime", 12080, false), Ok(v2));
        assert_eq!(proc_address("cuEventElapsedTime", 13000, false), Ok(v2));
        assert_eq!(proc_address("cuEventElapsedTime", 12020, false), Ok(v1));
        assert_eq!(proc_address("cuEventElapsedTime", 2000, false), Ok(v1));
        assert_eq!(
            proc_address("cuEventElapsedTime", 1000, false),
            Err(S::CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT)
        );
        assert_eq!(
            proc_address("cuTexObjectCreate", 13000, false),
            Err(S::CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND)
        );
        let query = "cuStreamQuery";
        let query_ptsz = "cuStreamQuery_ptsz";
        assert_eq!(proc_address("cuStreamQuery", 13000, false), Ok(query));
        assert_eq!(proc_address("cuStreamQuery", 13000, true), Ok(query_ptsz));
        // No per-thread variant: the legacy one.
        let init = "cuInit";
        assert_eq!(proc_address("cuInit", 13000, true), Ok(init));
        // The 13.0 ABI of cuCtxGetDevice is not implemented: not found, not the 2.0 one.
        assert_eq!(
            proc_address("cuCtxGetDevice", 13000, false),
            Err(S::CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND)
        );
        let get_device = "cuCtxGetDevice";
        assert_eq!(proc_address("cuCtxGetDevice", 12080, false), Ok(get_device));
    }
}
