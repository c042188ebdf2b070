//! The flavours of the mock: each found next to the test, saying what it is, and exporting what
//! its CUDA version had.

use cuda_mock_driver::{FLAVOURS, Flavour, MockDriver, mock_driver_path};
use cuda_stream_sys::*;

#[test]
fn every_flavour_is_found_next_to_the_test_and_says_what_it_is() {
    let full = mock_driver_path();
    assert!(full.is_file(), "{} is missing", full.display());
    assert!(full.ends_with(cuda_mock_driver::mock_driver_file_name()));
    assert_eq!(Flavour::full().path(), full);
    assert_eq!(FLAVOURS.len(), 12);
    for f in FLAVOURS {
        let path = f.path();
        assert!(path.is_file(), "{} is missing", path.display());
        // SAFETY: the mock driver, built with this test.
        let m = unsafe { MockDriver::open(&path) }.unwrap();
        assert_eq!(m.flavour(), f.name);
        // SAFETY: the mock driver, built with this test.
        let d = unsafe { Driver::open(&path) }.unwrap();
        assert_eq!(d.driver_version(), Some(f.version), "{}", f.name);
        assert_eq!(d.abi_version(), f.version as u32);
        let resolver = match (f.proc_address, f.version >= 12000) {
            (false, _) => Resolver::SymbolLookup,
            (true, true) => Resolver::ProcAddressV2,
            (true, false) => Resolver::ProcAddress,
        };
        assert_eq!(d.resolver(), resolver, "{}", f.name);
    }
}

/// Every flavour exports exactly the ABIs of its version that the full flavour implements,
/// judged by cuda-stream-sys's table: no hand lists.
#[test]
fn each_flavour_exports_what_its_cuda_version_had() {
    // SAFETY: the mock driver, built with this test.
    let full = unsafe { MockDriver::open(mock_driver_path()) }.unwrap();
    let implemented: Vec<&SymbolInfo> = SymbolInfo::all()
        .iter()
        .filter(|s| full.exports(s.name))
        .collect();
    assert!(implemented.len() >= 60, "{}", implemented.len());
    for f in FLAVOURS {
        // SAFETY: the mock driver, built with this test.
        let m = unsafe { MockDriver::open(f.path()) }.unwrap();
        // SAFETY: the mock driver, built with this test.
        let d = unsafe { Driver::open(f.path()) }.unwrap();
        for s in &implemented {
            let has = f.has_abi(s.name);
            assert_eq!(m.exports(s.name), has, "{}: {}", f.name, s.name);
            assert_eq!(d.has(s.name), has, "{}: {}", f.name, s.name);
            if has {
                continue;
            }
            match d.address(s.name).unwrap().unwrap_err() {
                LoadError::MissingSymbol {
                    name,
                    since,
                    driver_version,
                    abi_limit: None,
                    ..
                } => {
                    assert_eq!((name, since), (s.name, s.since));
                    assert_eq!(driver_version, Some(f.version));
                }
                other => panic!("{}: {}: {other:?}", f.name, s.name),
            }
        }
    }
    // The old ABIs are there alongside the new, and a name means one ABI in every flavour.
    assert!(full.exports("cuEventElapsedTime") && full.exports("cuEventElapsedTime_v2000"));
    assert!(full.exports("cuEventElapsedTime_v2") && full.exports("cuStreamDestroy_v2000"));
    let old =
        // SAFETY: the mock driver, built with this test.
        unsafe { MockDriver::open(FLAVOURS.iter().find(|f| f.version == 11040).unwrap().path()) }.unwrap();
    assert!(!old.exports("cuEventElapsedTime") && old.exports("cuEventElapsedTime_v2000"));
    assert!(!old.exports("cuStreamGetId") && !old.exports("cuGetProcAddress"));
    assert!(old.exports("cuGetProcAddress_v11030"));
}
