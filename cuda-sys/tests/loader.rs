//! Loader behaviour without a GPU: missing libraries and symbols are error values, never panics.

use cuda_sys::*;

#[test]
fn missing_file_is_a_not_found_error_naming_the_candidate() {
    let err = Driver::open("/nonexistent/libcuda.so.1").unwrap_err();
    match &err {
        LoadError::NotFound { tried } => {
            assert_eq!(tried.len(), 1);
            assert_eq!(tried[0].path, "/nonexistent/libcuda.so.1");
            assert!(!tried[0].reason.is_empty());
        }
        other => panic!("expected NotFound, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("/nonexistent/libcuda.so.1"), "{msg}");
    assert_eq!(
        err.to_cuda_result(),
        CUresult::CUDA_ERROR_SHARED_OBJECT_INIT_FAILED
    );
}

fn libm() -> Driver {
    Driver::open("libm.so.6").expect("libm is on every Linux machine")
}

#[test]
fn a_library_without_the_symbols_reports_each_missing_symbol() {
    let d = libm();
    let err = d.cuInit().unwrap_err();
    match &err {
        LoadError::MissingSymbol {
            name,
            symbol,
            since,
            driver_version,
        } => {
            assert_eq!(*name, "cuInit");
            assert_eq!(*symbol, "cuInit");
            assert_eq!(*since, 2000);
            // libm has no cuDriverGetVersion either, so no version can be named.
            assert_eq!(*driver_version, None);
        }
        other => panic!("expected MissingSymbol, got {other:?}"),
    }
    assert_eq!(
        err.to_string(),
        "cuInit is not exported by the CUDA driver; it needs CUDA 2.0 or later"
    );
    assert_eq!(err.to_cuda_result(), CUresult::CUDA_ERROR_NOT_FOUND);
    // Asking again is answered from the cache, with the same error.
    assert_eq!(d.cuInit().unwrap_err(), err);
    assert!(!d.has("cuStreamCreate"));
    assert_eq!(d.version(), Err(d.cuDriverGetVersion().unwrap_err()));
}

#[test]
fn versioned_symbols_keep_the_header_meaning() {
    let d = libm();
    match d.cuStreamGetDevice().unwrap_err() {
        LoadError::MissingSymbol { since, .. } => assert_eq!(since, 12080),
        e => panic!("{e:?}"),
    }
    let destroy = SymbolInfo::find("cuStreamDestroy").unwrap();
    assert_eq!(destroy.symbol.to_str().unwrap(), "cuStreamDestroy_v2");
    assert_eq!(destroy.since, 4000);
    let ctx = SymbolInfo::find("cuCtxCreate").unwrap();
    assert_eq!(ctx.symbol.to_str().unwrap(), "cuCtxCreate_v4");
    let elapsed = SymbolInfo::find("cuEventElapsedTime").unwrap();
    assert_eq!(elapsed.symbol.to_str().unwrap(), "cuEventElapsedTime_v2");
    // A C name means what a default build calls; the per-thread-default-stream variants are
    // bound too, under their exported names.
    for s in SymbolInfo::all() {
        let symbol = s.symbol.to_str().unwrap();
        if symbol.ends_with("_ptsz") || symbol.ends_with("_ptds") {
            assert_eq!(s.name, symbol, "{s:?}");
        } else {
            assert!(
                !s.name.ends_with("_ptsz") && !s.name.ends_with("_ptds"),
                "{s:?}"
            );
        }
    }
    let ptsz = SymbolInfo::find("cuMemcpyHtoDAsync_v2_ptsz").unwrap();
    assert_eq!(ptsz.since, 7000);
    assert_eq!(
        SymbolInfo::find("cuMemcpyHtoDAsync")
            .unwrap()
            .symbol
            .to_str()
            .unwrap(),
        "cuMemcpyHtoDAsync_v2"
    );
    assert!(SymbolInfo::find("cuStreamQuery_ptsz").is_some());
    assert!(SymbolInfo::find("cuMemcpy_ptds").is_some());
    assert!(SymbolInfo::find("cuStreamDestroy_v2").is_none());
}

#[test]
fn the_bindings_cover_the_whole_header() {
    assert_eq!(SymbolInfo::all().len(), SYMBOL_COUNT);
    const { assert!(SYMBOL_COUNT >= 530) };
    for name in [
        "cuInit",
        "cuDriverGetVersion",
        "cuDeviceGet",
        "cuDeviceGetCount",
        "cuDeviceGetName",
        "cuDevicePrimaryCtxRetain",
        "cuDevicePrimaryCtxRelease",
        "cuCtxGetCurrent",
        "cuCtxSetCurrent",
        "cuCtxPushCurrent",
        "cuCtxPopCurrent",
        "cuCtxGetStreamPriorityRange",
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
        "cuModuleLoadData",
        "cuModuleGetFunction",
        "cuLaunchKernel",
        "cuMemAlloc",
        "cuMemFree",
        "cuMemsetD32Async",
        "cuMemcpyDtoHAsync",
        "cuGetProcAddress",
        "cuGraphInstantiate",
    ] {
        assert!(
            SymbolInfo::find(name).is_some(),
            "{name} missing from the bindings"
        );
    }
}

#[test]
fn result_names_and_descriptions_need_no_driver() {
    assert_eq!(
        result_name(CUresult::CUDA_ERROR_INVALID_CONTEXT),
        "CUDA_ERROR_INVALID_CONTEXT"
    );
    assert_eq!(result_name(CUresult::CUDA_SUCCESS), "CUDA_SUCCESS");
    assert_eq!(result_name(CUresult(123_456)), "CUDA_ERROR_UNKNOWN_CODE");
    assert!(result_description(CUresult::CUDA_ERROR_NOT_READY).contains("have not completed yet"));
    assert_eq!(format_version(12080), "12.8");
    assert_eq!(format_version(13000), "13.0");
}

#[test]
fn default_candidates_are_the_system_driver_names() {
    if std::env::var_os("CUDA_SYS_LIBCUDA").is_some() {
        return;
    }
    let c = Driver::candidates();
    assert_eq!(c, vec!["libcuda.so.1", "libcuda.so"]);
}
