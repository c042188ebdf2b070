//! How cuda-stream-sys resolves bindings, against the mock's flavours: through the driver's
//! `cuGetProcAddress` (v2 from CUDA 12.0, v1 on 11.x) at each binding's ABI version, with the
//! per-thread flag for the `_ptsz` / `_ptds` variants, by exported name where the driver has no
//! `cuGetProcAddress` or it does not answer, and never past the ABI limit.
//!
//! Each flavour is a library of its own; the tests share them, so they take `LOCK` and reset the
//! mock before counting calls. A fresh `Driver` has all its bindings unresolved.

use std::ffi::{CString, c_void};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};

use cuda_mock_driver::{FLAVOURS, Flavour, MockDriver};
use cuda_stream_sys::*;

static LOCK: Mutex<()> = Mutex::new(());

fn lock() -> MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// The flavour of `version`, with or without `cuGetProcAddress`.
fn flavour(version: i32, proc_address: bool) -> &'static Flavour {
    FLAVOURS
        .iter()
        .find(|f| f.version == version && f.proc_address == proc_address)
        .expect("a flavour of that version")
}

/// Calls of `cuGetProcAddress_v2` and of the 11.3 `cuGetProcAddress` since the last reset.
fn proc_address_calls(m: &MockDriver) -> (u64, u64) {
    (
        m.calls("cuGetProcAddress_v12000"),
        m.calls("cuGetProcAddress_v11030"),
    )
}

#[test]
fn bindings_resolve_through_cu_get_proc_address_where_the_driver_has_it() {
    let _g = lock();
    for f in FLAVOURS {
        // SAFETY: the mock driver, built with this test.
        let m = unsafe { MockDriver::open(f.path()) }.unwrap();
        m.reset();
        // SAFETY: the mock driver, built with this test.
        let d = unsafe { Driver::open(f.path()) }.unwrap();
        let resolved = [
            d.address("cuStreamQuery"),
            d.address("cuEventElapsedTime_v2000"),
            d.address("cuStreamDestroy"),
        ];
        assert!(
            resolved.iter().all(|r| matches!(r, Some(Ok(_)))),
            "{}",
            f.name
        );
        let expected = match (f.proc_address, f.version >= 12000) {
            (false, _) => (0, 0),
            (true, true) => (3, 0),
            (true, false) => (0, 3),
        };
        assert_eq!(proc_address_calls(&m), expected, "{}", f.name);
        // Resolved once: asking again is answered from the cache.
        d.cuStreamQuery().unwrap();
        assert_eq!(proc_address_calls(&m), expected, "{}", f.name);

        // Each binding is the ABI its name says, whichever way it was found.
        let elapsed = d.cuEventElapsedTime_v2000().unwrap();
        let mut ms = 0.0;
        // SAFETY: a valid out-pointer; the mock checks the (null) handles.
        let rc = unsafe { elapsed(&mut ms, std::ptr::null_mut(), std::ptr::null_mut()) };
        assert_eq!(rc, CUresult::CUDA_ERROR_NOT_INITIALIZED);
        assert_eq!(m.calls("cuEventElapsedTime_v2000"), 1, "{}", f.name);
        assert_eq!(m.calls("cuEventElapsedTime_v12080"), 0, "{}", f.name);
        if f.version >= 12080 {
            let elapsed = d.cuEventElapsedTime().unwrap();
            // SAFETY: as above.
            let rc = unsafe { elapsed(&mut ms, std::ptr::null_mut(), std::ptr::null_mut()) };
            assert_eq!(rc, CUresult::CUDA_ERROR_NOT_INITIALIZED);
            assert_eq!(m.calls("cuEventElapsedTime"), 1, "{}", f.name);
            assert_eq!(m.calls("cuEventElapsedTime_v2000"), 1, "{}", f.name);
        }
    }
}

#[test]
fn a_binding_newer_than_the_driver_is_missing_and_says_why() {
    let _g = lock();
    let f = flavour(12020, true);
    // SAFETY: the mock driver, built with this test.
    let m = unsafe { MockDriver::open(f.path()) }.unwrap();
    m.reset();
    // SAFETY: the mock driver, built with this test.
    let d = unsafe { Driver::open(f.path()) }.unwrap();
    let err = d.cuEventElapsedTime().unwrap_err();
    assert_eq!(
        err.to_string(),
        "cuEventElapsedTime is not exported by the CUDA driver (CUDA 12.2); it needs CUDA 12.8 \
         or later"
    );
    assert!(matches!(
        err,
        LoadError::MissingSymbol {
            name: "cuEventElapsedTime",
            symbol: "cuEventElapsedTime_v2",
            since: 12080,
            driver_version: Some(12020),
            abi_limit: None,
            ..
        }
    ));
    // Not even asked for: the driver is older than the ABI.
    assert_eq!(proc_address_calls(&m), (0, 0));
    assert!(d.cuEventElapsedTime_v2000().is_ok());
    // The 13.0 ABI of cuCtxGetDevice is a new function (it takes the context) on 12.2.
    assert!(!d.has("cuCtxGetDevice_v2") && d.has("cuCtxGetDevice"));
}

#[test]
fn a_failing_or_unknowing_cu_get_proc_address_falls_back_to_the_exported_name() {
    let _g = lock();
    let f = Flavour::full();
    // SAFETY: the mock driver, built with this test.
    let m = unsafe { MockDriver::open(f.path()) }.unwrap();
    m.reset();
    m.fail_always("cuGetProcAddress", CUresult::CUDA_ERROR_UNKNOWN);
    // SAFETY: the mock driver, built with this test.
    let d = unsafe { Driver::open(f.path()) }.unwrap();
    let query = d.address("cuStreamQuery").unwrap().unwrap();
    assert_eq!(proc_address_calls(&m), (1, 0), "asked first");
    // SAFETY: only the address is compared.
    let lib = unsafe { libloading::Library::new(f.path()) }.unwrap();
    // SAFETY: as above.
    let exported = unsafe { lib.get::<*mut c_void>(b"cuStreamQuery\0") }.unwrap();
    assert_eq!(query, *exported);
    m.reset();

    // A function the mock does not implement: not found either way.
    let err = d.cuCtxCreate().unwrap_err();
    assert!(
        matches!(
            err,
            LoadError::MissingSymbol {
                name: "cuCtxCreate",
                symbol: "cuCtxCreate_v4",
                driver_version: Some(13000),
                abi_limit: None,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(proc_address_calls(&m), (1, 0));
}

#[test]
fn the_mocks_cu_get_proc_address_answers_as_the_driver_documents() {
    let _g = lock();
    type Status = CUdriverProcAddressQueryResult;
    let f = Flavour::full();
    // SAFETY: the mock driver, built with this test.
    let d = unsafe { Driver::open(f.path()) }.unwrap();
    let get = d.cuGetProcAddress_v12000().unwrap();
    let ask = |name: &str, version: i32, flags: CUdriverProcAddress_flags| {
        let name = CString::new(name).unwrap();
        let (mut p, mut status) = (std::ptr::null_mut(), Status::CU_GET_PROC_ADDRESS_SUCCESS);
        // SAFETY: a NUL-terminated name and valid out-pointers.
        let rc = unsafe {
            get(
                name.as_ptr(),
                &mut p,
                version,
                u64::from(flags.0),
                &mut status,
            )
        };
        (rc, p, status)
    };
    let default = CUdriverProcAddress_flags::CU_GET_PROC_ADDRESS_DEFAULT;
    let per_thread = CUdriverProcAddress_flags::CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    let ok = |p| {
        (
            CUresult::CUDA_SUCCESS,
            p,
            Status::CU_GET_PROC_ADDRESS_SUCCESS,
        )
    };
    let addr = |name| d.address(name).unwrap().unwrap();
    assert_eq!(
        ask("cuEventElapsedTime", 13000, default),
        ok(addr("cuEventElapsedTime_v12080"))
    );
    assert_eq!(
        ask("cuEventElapsedTime", 12070, default),
        ok(addr("cuEventElapsedTime_v2000"))
    );
    assert_eq!(
        ask("cuStreamQuery", 13000, per_thread),
        ok(addr("cuStreamQuery_ptsz"))
    );
    assert_eq!(
        ask("cuStreamQuery", 13000, default),
        ok(addr("cuStreamQuery"))
    );
    assert_eq!(
        ask("cuStreamGetId", 11080, default),
        (
            CUresult::CUDA_SUCCESS,
            std::ptr::null_mut(),
            Status::CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
        )
    );
    assert_eq!(
        ask("cuNoSuchFunction", 13000, default),
        (
            CUresult::CUDA_SUCCESS,
            std::ptr::null_mut(),
            Status::CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND
        )
    );
    assert_eq!(
        ask("cuStreamQuery", 13010, default).0,
        CUresult::CUDA_ERROR_INVALID_VALUE,
        "a version above the driver's"
    );
    // The 11.3 one says "not found" with its return code.
    // SAFETY: the mock driver, built with this test.
    let d = unsafe { Driver::open(flavour(11040, true).path()) }.unwrap();
    let get = d.cuGetProcAddress_v11030().unwrap();
    let mut p = std::ptr::null_mut();
    // SAFETY: a NUL-terminated name and a valid out-pointer.
    let rc = unsafe { get(c"cuStreamGetId".as_ptr(), &mut p, 11040, 0) };
    assert_eq!(
        (rc, p),
        (CUresult::CUDA_ERROR_NOT_FOUND, std::ptr::null_mut())
    );
}

#[test]
fn per_thread_variants_are_asked_for_with_the_per_thread_flag() {
    let _g = lock();
    for f in [
        Flavour::full(),
        flavour(13000, false),
        flavour(11040, true),
        flavour(11040, false),
    ] {
        // SAFETY: the mock driver, built with this test.
        let m = unsafe { MockDriver::open(f.path()) }.unwrap();
        m.reset();
        // SAFETY: the mock driver, built with this test.
        let d = unsafe { Driver::open(f.path()) }.unwrap();
        let info = SymbolInfo::find("cuStreamQuery_ptsz").unwrap();
        assert!(info.per_thread && info.base == c"cuStreamQuery");
        let query = d.cuStreamQuery_ptsz().unwrap();
        // SAFETY: the null stream is a valid argument; the mock answers without a driver.
        let rc = unsafe { query(std::ptr::null_mut()) };
        assert_eq!(rc, CUresult::CUDA_ERROR_NOT_INITIALIZED);
        // Asked for by base name, so only the flag tells the variants apart.
        assert_eq!(m.calls("cuStreamQuery_ptsz"), 1, "{}", f.name);
        assert_eq!(m.calls("cuStreamQuery"), 0, "{}", f.name);
        let legacy = d.cuStreamQuery().unwrap();
        assert_ne!(legacy as usize, query as usize);
    }
}

#[test]
fn an_abi_limit_leaves_newer_abis_out_even_where_the_driver_has_them() {
    let _g = lock();
    for f in [Flavour::full(), flavour(13000, false)] {
        // SAFETY: the mock driver, built with this test.
        let m = unsafe { MockDriver::open(f.path()) }.unwrap();
        m.reset();
        // SAFETY: the mock driver, built with this test.
        let d = unsafe { Driver::open_with(f.path(), DriverOptions::new().abi_version(12000)) }
            .unwrap();
        assert_eq!(d.abi_version(), 12000);
        assert_eq!(d.abi_limit(), Some(12000));
        assert_eq!(d.driver_version(), Some(13000));
        let err = d.cuEventElapsedTime().unwrap_err();
        assert_eq!(
            err.to_string(),
            "cuEventElapsedTime is left out by the ABI limit of CUDA 12.0 (CUDA 13.0); it needs \
             CUDA 12.8 or later"
        );
        assert!(matches!(
            err,
            LoadError::MissingSymbol {
                since: 12080,
                driver_version: Some(13000),
                abi_limit: Some(12000),
                ..
            }
        ));
        assert!(d.cuStreamGetDevice().is_err());
        assert!(d.cuStreamGetId().is_ok(), "CUDA 12.0 has it");
        let elapsed = d.cuEventElapsedTime_v2000().unwrap();
        let mut ms = 0.0;
        // SAFETY: a valid out-pointer; the mock checks the (null) handles.
        unsafe { elapsed(&mut ms, std::ptr::null_mut(), std::ptr::null_mut()) };
        assert_eq!(m.calls("cuEventElapsedTime_v2000"), 1, "{}", f.name);
        assert_eq!(m.calls("cuEventElapsedTime"), 0, "{}", f.name);
    }
    // A limit above the driver changes nothing: the driver is the reason.
    // SAFETY: the mock driver, built with this test.
    let d = unsafe {
        Driver::open_with(
            flavour(12020, true).path(),
            DriverOptions::new().abi_version(12080),
        )
    }
    .unwrap();
    assert_eq!(d.abi_version(), 12020);
    assert!(matches!(
        d.cuEventElapsedTime().unwrap_err(),
        LoadError::MissingSymbol {
            driver_version: Some(12020),
            abi_limit: None,
            ..
        }
    ));
}

const CHILD_VAR: &str = "CUDA_SYS_LOADER_TEST_CHILD";

/// Runs the test `name` of this binary in a child process with `env`; returns its stdout and
/// stderr, after checking it passed.
fn run_child(name: &str, env: &[(&str, &str)]) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_VAR, "1")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{name} {env:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_environment_limits_the_process_wide_drivers_abi() {
    if std::env::var_os(CHILD_VAR).is_some() {
        let d = Driver::global().unwrap();
        assert_eq!(d.abi_version(), 12000);
        assert_eq!(d.driver_version(), Some(13000));
        assert!(matches!(
            fns::cuEventElapsedTime().unwrap_err(),
            LoadError::MissingSymbol {
                abi_limit: Some(12000),
                ..
            }
        ));
        assert!(fns::cuEventElapsedTime_v2000().is_ok());
        // SAFETY: a valid out-pointer; the handles are checked by the mock.
        let rc =
            unsafe { cuEventElapsedTime(&mut 0.0, std::ptr::null_mut(), std::ptr::null_mut()) };
        assert_eq!(rc, CUresult::CUDA_ERROR_NOT_FOUND);
        return;
    }
    let path = Flavour::full().path();
    let path = path.to_str().unwrap();
    for spelling in ["12.0", "12000", " 12 "] {
        run_child(
            "the_environment_limits_the_process_wide_drivers_abi",
            &[
                ("CUDA_SYS_LIBCUDA", path),
                ("CUDA_SYS_ABI_VERSION", spelling),
            ],
        );
    }
}

#[test]
fn an_invalid_abi_limit_in_the_environment_is_an_error_naming_the_variable() {
    if std::env::var_os(CHILD_VAR).is_some() {
        let err = Driver::global().unwrap_err();
        assert_eq!(
            err,
            LoadError::InvalidAbiVersion {
                setting: "CUDA_SYS_ABI_VERSION",
                value: "twelve".into()
            }
        );
        assert_eq!(
            err.to_string(),
            "CUDA_SYS_ABI_VERSION=\"twelve\" is not a CUDA version (write 12000 or 12.0)"
        );
        // Remembered, and every entry point says so.
        assert_eq!(fns::cuInit().unwrap_err(), err);
        // SAFETY: no driver is reached.
        assert_eq!(unsafe { cuInit(0) }, CUresult::CUDA_ERROR_INVALID_VALUE);
        let e = cuda_stream::init().unwrap_err();
        let source = std::error::Error::source(&e).unwrap().to_string();
        assert!(source.contains("CUDA_SYS_ABI_VERSION"), "{source}");
        return;
    }
    let path = Flavour::full().path();
    run_child(
        "an_invalid_abi_limit_in_the_environment_is_an_error_naming_the_variable",
        &[
            ("CUDA_SYS_LIBCUDA", path.to_str().unwrap()),
            ("CUDA_SYS_ABI_VERSION", "twelve"),
        ],
    );
}
