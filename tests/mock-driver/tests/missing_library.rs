//! No driver library: with `CUDA_SYS_LIBCUDA` naming a file that does not exist, the first
//! `cuda-stream` call reports `Error::Load` listing what was tried, every later call the same,
//! and nothing panics or aborts.
//!
//! The variable must be set before anything loads the driver, so the test runs itself again as
//! a child process with the variable in its environment (no `set_var` in a threaded process).

use std::process::Command;

use cuda_stream::ffi::LoadError;
use cuda_stream::{Context, Device, Error, driver_version, init};

const MISSING: &str = "/nonexistent/libcuda.so.1";
const CHILD_VAR: &str = "CUDA_STREAM_MISSING_LIBRARY_CHILD";
const DONE: &str = "missing-library checks passed";

fn check_load_error(err: &Error) {
    match err {
        Error::Load(LoadError::NotFound { tried }) => {
            assert_eq!(tried.len(), 1, "only the named file is tried: {tried:?}");
            assert_eq!(tried[0].path, MISSING);
            assert!(!tried[0].reason.is_empty());
        }
        other => panic!("expected Error::Load, got {other:?}"),
    }
    assert_eq!(err.call(), None);
    let source = std::error::Error::source(err)
        .expect("the load error is the source")
        .to_string();
    assert!(source.contains(MISSING), "{source}");
}

/// The checks, in the child process.
fn child() {
    assert_eq!(std::env::var("CUDA_SYS_LIBCUDA").as_deref(), Ok(MISSING));
    let err = Device::count().unwrap_err();
    check_load_error(&err);
    // Remembered: the same answer every time, from every entry point.
    check_load_error(&Device::count().unwrap_err());
    check_load_error(&init().unwrap_err());
    check_load_error(&Context::primary(0).unwrap_err());
    check_load_error(&driver_version().unwrap_err());
    assert!(cuda_sys::Driver::global().is_err());
    println!("{DONE}");
}

#[test]
fn a_missing_library_reports_what_was_tried() {
    if std::env::var_os(CHILD_VAR).is_some() {
        child();
        return;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "a_missing_library_reports_what_was_tried",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_VAR, "1")
        .env("CUDA_SYS_LIBCUDA", MISSING)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the child failed ({:?}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains(DONE),
        "the child did not run the checks:\n{stdout}\n{stderr}"
    );
}
