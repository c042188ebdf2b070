//! The driver functions the mock exports, each ABI of them, and which ones a run called.

use cuda_mock_driver::MockDriver;
use cuda_stream_sys::SymbolInfo;

/// Every driver function the mock exports, by the name C code writes (the name `cuda-stream`'s
/// errors use: `cuStreamDestroy` for the symbol `cuStreamDestroy_v2`, and whichever ABI of it is
/// called, see [`abis`]).
pub(crate) const FUNCTIONS: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuGetErrorName",
    "cuGetErrorString",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetAttribute",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxGetState",
    "cuDevicePrimaryCtxRelease",
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    "cuCtxPushCurrent",
    "cuCtxPopCurrent",
    "cuCtxGetDevice",
    "cuCtxSynchronize",
    "cuCtxGetStreamPriorityRange",
    "cuCtxGetLimit",
    "cuCtxSetLimit",
    "cuCtxGetCacheConfig",
    "cuCtxSetCacheConfig",
    "cuDeviceTotalMem",
    "cuStreamCreate",
    "cuStreamCreateWithPriority",
    "cuStreamDestroy",
    "cuStreamQuery",
    "cuStreamSynchronize",
    "cuStreamWaitEvent",
    "cuStreamAddCallback",
    "cuLaunchHostFunc",
    "cuStreamGetCtx",
    "cuStreamGetDevice",
    "cuStreamGetFlags",
    "cuStreamGetPriority",
    "cuStreamGetId",
    "cuEventCreate",
    "cuEventDestroy",
    "cuEventRecord",
    "cuEventQuery",
    "cuEventSynchronize",
    "cuEventElapsedTime",
    "cuIpcGetEventHandle",
    "cuIpcOpenEventHandle",
    "cuMemGetInfo",
    "cuModuleLoadDataEx",
    "cuModuleUnload",
    "cuModuleGetFunction",
    "cuModuleGetGlobal",
    "cuFuncGetAttribute",
    "cuFuncSetAttribute",
    "cuLaunchKernel",
    "cuFuncGetParamInfo",
    "cuLaunchKernelEx",
    "cuOccupancyMaxPotentialBlockSize",
    "cuOccupancyMaxActiveBlocksPerMultiprocessor",
    "cuMemAlloc",
    "cuMemFree",
    "cuMemGetAddressRange",
    "cuMemsetD8Async",
    "cuMemsetD16Async",
    "cuMemsetD32Async",
    "cuMemcpyDtoDAsync",
    "cuMemcpyHtoDAsync",
    "cuMemcpyDtoHAsync",
    "cuDeviceCanAccessPeer",
    "cuCtxEnablePeerAccess",
    "cuMemcpyPeerAsync",
    "cuDeviceGetDefaultMemPool",
    "cuMemPoolCreate",
    "cuMemPoolDestroy",
    "cuMemPoolGetAttribute",
    "cuMemPoolSetAttribute",
    "cuMemPoolTrimTo",
    "cuMemPoolSetAccess",
    "cuMemPoolGetAccess",
    "cuMemAllocFromPoolAsync",
    "cuMemAllocAsync",
    "cuMemFreeAsync",
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuMemHostRegister",
    "cuMemHostUnregister",
    "cuMemAllocManaged",
    "cuMemPrefetchAsync",
    "cuMemAdvise",
    "cuStreamBeginCapture",
    "cuStreamEndCapture",
    "cuStreamIsCapturing",
    "cuStreamGetCaptureInfo",
    "cuThreadExchangeStreamCaptureMode",
    "cuEventRecordWithFlags",
    "cuGraphGetNodes",
    "cuGraphNodeGetType",
    "cuGraphHostNodeGetParams",
    "cuGraphDestroy",
    "cuGraphDebugDotPrint",
    "cuGraphInstantiate",
    "cuGraphInstantiateWithParams",
    "cuGraphLaunch",
    "cuGraphUpload",
    "cuGraphExecDestroy",
    "cuGraphExecUpdate",
    "cuUserObjectCreate",
    "cuUserObjectRetain",
    "cuUserObjectRelease",
    "cuGraphRetainUserObject",
    "cuGraphReleaseUserObject",
];

/// The bindings of the ABIs of `function` that the flavour exports (`cuEventElapsedTime_v2000`
/// and `cuEventElapsedTime` for `cuEventElapsedTime` on CUDA 13.0), one per exported symbol.
pub(crate) fn abis(m: &MockDriver, function: &str) -> Vec<&'static str> {
    SymbolInfo::abis(function)
        .iter()
        .filter(|s| m.exports(s.name))
        .map(|s| s.name)
        .collect()
}

/// The driver functions `run` called since the last reset: `(function, the binding of the ABI
/// called, calls)`.
pub(crate) fn called(m: &MockDriver) -> Vec<(&'static str, &'static str, u64)> {
    FUNCTIONS
        .iter()
        .flat_map(|&f| abis(m, f).into_iter().map(move |b| (f, b)))
        .map(|(f, b)| (f, b, m.calls(b)))
        .filter(|&(_, _, n)| n > 0)
        .collect()
}

/// Bindings that were called but whose function is missing from [`FUNCTIONS`].
pub(crate) fn called_outside_the_list(m: &MockDriver) -> Vec<&'static str> {
    let listed: Vec<_> = FUNCTIONS
        .iter()
        .flat_map(|f| SymbolInfo::abis(f))
        .map(|i| i.symbol)
        .collect();
    SymbolInfo::all()
        .iter()
        .filter(|i| !listed.contains(&i.symbol) && m.calls(i.name) > 0)
        .map(|i| i.name)
        .collect()
}
