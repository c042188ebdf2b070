//! Loader behaviour without a GPU: missing libraries and symbols are error values, never panics.

use cuda_stream_sys::*;

#[test]
fn missing_file_is_a_not_found_error_naming_the_candidate() {
    // SAFETY: a file that does not exist: nothing is loaded.
    let err = unsafe { Driver::open("/nonexistent/libcuda.so.1") }.unwrap_err();
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

/// A folder of its own under the system's temporary folder, removed when dropped.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("cuda-sys-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The single candidate of a `NotFound` error.
fn only_candidate(err: &LoadError) -> &Candidate {
    match err {
        LoadError::NotFound { tried } if tried.len() == 1 => &tried[0],
        other => panic!("expected NotFound with one candidate, got {other:?}"),
    }
}

#[test]
fn a_missing_file_a_directory_and_an_empty_file_each_say_what_is_wrong() {
    let dir = TempDir::new("not-a-library");
    let empty = dir.0.join("libcuda.so.1");
    std::fs::write(&empty, b"").unwrap();
    let text = dir.0.join("libcuda-text.so");
    std::fs::write(&text, b"not a shared object\n").unwrap();
    let missing = dir.0.join("missing/libcuda.so.1");
    let cases = [
        (missing.as_path(), "no such file"),
        (dir.0.as_path(), "a directory, not a library file"),
        (empty.as_path(), "an empty file, not a library"),
    ];
    for (path, reason) in cases {
        // SAFETY: a missing file, a directory and an empty file: refused before anything is
        // loaded.
        let err = unsafe { Driver::open(path) }.unwrap_err();
        let c = only_candidate(&err);
        assert_eq!(c.path, path.as_os_str());
        assert_eq!(c.reason, reason);
        let shown = err.to_string();
        assert!(
            shown.contains(&*path.to_string_lossy()) && shown.contains(reason),
            "{shown}"
        );
        assert_eq!(
            err.to_cuda_result(),
            CUresult::CUDA_ERROR_SHARED_OBJECT_INIT_FAILED
        );
    }
    // A file that is no shared object: the dynamic loader's own words.
    // SAFETY: a text file, which the dynamic loader refuses: nothing is loaded.
    let err = unsafe { Driver::open(&text) }.unwrap_err();
    let c = only_candidate(&err);
    assert!(!c.reason.is_empty());
    assert!(err.to_string().contains(&*text.to_string_lossy()));
}

#[test]
fn a_library_that_is_not_a_driver_is_refused_when_opened() {
    // SAFETY: the C library's libm, whose initialisers are sound to run; it exports neither
    // `cuInit` nor `cuDriverGetVersion`, so none of its functions is called.
    let err = unsafe { Driver::open("libm.so.6") }.unwrap_err();
    assert_eq!(
        err,
        LoadError::NotADriver {
            path: "libm.so.6".into(),
            reason: "it exports neither cuInit nor cuDriverGetVersion".into(),
        }
    );
    assert_eq!(
        err.to_string(),
        "libm.so.6 is not a CUDA driver: it exports neither cuInit nor cuDriverGetVersion"
    );
    assert_eq!(
        err.to_cuda_result(),
        CUresult::CUDA_ERROR_SHARED_OBJECT_INIT_FAILED
    );
}

#[test]
fn an_abi_limit_below_any_cuda_version_is_refused() {
    // SAFETY: refused before anything is loaded (the ABI limit is checked first).
    let err = unsafe { Driver::open_with("libm.so.6", DriverOptions::new().abi_version(12)) }
        .unwrap_err();
    assert_eq!(
        err,
        LoadError::InvalidAbiVersion {
            setting: "DriverOptions::abi_version",
            value: "12".into(),
        }
    );
    assert!(err.to_string().contains("not a CUDA version"), "{err}");
    assert_eq!(err.to_cuda_result(), CUresult::CUDA_ERROR_INVALID_VALUE);
    assert_eq!(parse_cuda_version("12.2"), Some(12020));
    assert_eq!(
        DriverOptions::new().abi_version(12020).abi_limit(),
        Some(12020)
    );
}

#[test]
fn versioned_symbols_keep_the_header_meaning() {
    let get_device = SymbolInfo::find("cuStreamGetDevice").unwrap();
    assert_eq!(get_device.since, 12080);
    let destroy = SymbolInfo::find("cuStreamDestroy").unwrap();
    assert_eq!(destroy.symbol.to_str().unwrap(), "cuStreamDestroy_v2");
    assert_eq!(destroy.base.to_str().unwrap(), "cuStreamDestroy");
    assert_eq!(destroy.since, 4000);
    assert!(!destroy.per_thread);
    let ctx = SymbolInfo::find("cuCtxCreate").unwrap();
    assert_eq!(ctx.symbol.to_str().unwrap(), "cuCtxCreate_v4");
    let elapsed = SymbolInfo::find("cuEventElapsedTime").unwrap();
    assert_eq!(elapsed.symbol.to_str().unwrap(), "cuEventElapsedTime_v2");
    assert_eq!(elapsed.since, 12080);
    // A C name means what a default build calls; the per-thread-default-stream variants are
    // bound too, under their exported names (or the typedef's suffix, for several ABIs).
    for s in SymbolInfo::all() {
        let symbol = s.symbol.to_str().unwrap();
        let pt = symbol.ends_with("_ptsz") || symbol.ends_with("_ptds");
        assert_eq!(s.per_thread, pt, "{s:?}");
        assert_eq!(
            s.per_thread,
            s.name.ends_with("_ptsz") || s.name.ends_with("_ptds"),
            "{s:?}"
        );
        assert!(s.symbol.to_bytes().starts_with(s.base.to_bytes()), "{s:?}");
    }
    let ptsz = SymbolInfo::find("cuMemcpyHtoDAsync_v2_ptsz").unwrap();
    assert_eq!(ptsz.since, 7000);
    assert_eq!(ptsz.base.to_str().unwrap(), "cuMemcpyHtoDAsync");
    assert!(ptsz.per_thread);
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
    // cuGraphInstantiate means cuGraphInstantiateWithFlags, asked for under that name.
    let inst = SymbolInfo::find("cuGraphInstantiate").unwrap();
    assert_eq!(inst.symbol.to_str().unwrap(), "cuGraphInstantiateWithFlags");
    assert_eq!(inst.base.to_str().unwrap(), "cuGraphInstantiateWithFlags");
    assert_eq!(inst.since, 11040);
}

/// `(binding, exported symbol, ABI version, per-thread)`.
fn abi(name: &str) -> (&'static str, &'static str, u32, bool) {
    let s = SymbolInfo::find(name).unwrap_or_else(|| panic!("{name} is not bound"));
    (s.name, s.symbol.to_str().unwrap(), s.since, s.per_thread)
}

#[test]
fn every_abi_of_a_function_is_bound_under_its_typedef_suffix() {
    let expected = [
        (
            "cuEventElapsedTime_v2000",
            "cuEventElapsedTime",
            2000,
            false,
        ),
        (
            "cuEventElapsedTime_v12080",
            "cuEventElapsedTime_v2",
            12080,
            false,
        ),
        (
            "cuStreamGetCaptureInfo_v10010",
            "cuStreamGetCaptureInfo",
            10010,
            false,
        ),
        (
            "cuStreamGetCaptureInfo_v11030",
            "cuStreamGetCaptureInfo_v2",
            11030,
            false,
        ),
        (
            "cuStreamGetCaptureInfo_v12030",
            "cuStreamGetCaptureInfo_v3",
            12030,
            false,
        ),
        (
            "cuStreamGetCaptureInfo_v12030_ptsz",
            "cuStreamGetCaptureInfo_v3_ptsz",
            12030,
            true,
        ),
        ("cuCtxCreate_v2000", "cuCtxCreate", 2000, false),
        ("cuCtxCreate_v3020", "cuCtxCreate_v2", 3020, false),
        ("cuCtxCreate_v11040", "cuCtxCreate_v3", 11040, false),
        ("cuCtxCreate_v12050", "cuCtxCreate_v4", 12050, false),
        (
            "cuGraphInstantiate_v10000",
            "cuGraphInstantiate",
            10000,
            false,
        ),
        (
            "cuGraphInstantiate_v11000",
            "cuGraphInstantiate_v2",
            11000,
            false,
        ),
        (
            "cuGraphExecUpdate_v10020",
            "cuGraphExecUpdate",
            10020,
            false,
        ),
        (
            "cuGraphExecUpdate_v12000",
            "cuGraphExecUpdate_v2",
            12000,
            false,
        ),
        (
            "cuStreamBeginCapture_v10000_ptsz",
            "cuStreamBeginCapture_ptsz",
            10000,
            true,
        ),
        ("cuMemGetInfo_v2000", "cuMemGetInfo", 2000, false),
        ("cuGetProcAddress_v11030", "cuGetProcAddress", 11030, false),
        (
            "cuGetProcAddress_v12000",
            "cuGetProcAddress_v2",
            12000,
            false,
        ),
        ("cuCtxGetDevice_v2000", "cuCtxGetDevice", 2000, false),
        ("cuCtxGetDevice_v13000", "cuCtxGetDevice_v2", 13000, false),
    ];
    for e in expected {
        assert_eq!(abi(e.0), e);
    }
    let elapsed: Vec<_> = SymbolInfo::abis("cuEventElapsedTime")
        .iter()
        .map(|s| s.symbol.to_str().unwrap())
        .collect();
    assert_eq!(elapsed, ["cuEventElapsedTime", "cuEventElapsedTime_v2"]);
    assert_eq!(SymbolInfo::abis("cuCtxCreate").len(), 4);
    assert_eq!(SymbolInfo::abis("cuInit").len(), 1);
    assert!(SymbolInfo::abis("cuNothing").is_empty());
    // The typedefs are there for callers of cuGetProcAddress.
    let _: typedefs::PFN_cuEventElapsedTime_v2000 = None;
}

#[test]
fn the_bindings_cover_the_whole_header() {
    assert!(SymbolInfo::all().len() >= 530);
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
