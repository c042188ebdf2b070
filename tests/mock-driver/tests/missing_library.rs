//! No usable driver library: with `CUDA_SYS_LIBCUDA` naming a file that does not exist, a
//! directory, an empty file, or a library that is not a CUDA driver (libm), the first
//! `cuda-stream` call reports `Error::Load` naming the path and what is wrong with it, every later
//! call the same, and nothing panics or aborts.
//!
//! The variable must be set before anything loads the driver, so the test runs itself again as
//! a child process per case with the variable in its environment (no `set_var` in a threaded
//! process).

use std::path::PathBuf;
use std::process::Command;

use cuda_stream::ffi::LoadError;
use cuda_stream::{Context, Device, Error, driver_version, init};

const CHILD_VAR: &str = "CUDA_STREAM_MISSING_LIBRARY_CHILD";
const DONE: &str = "missing-library checks passed";

/// What the child expects the loader to say about the library: `NotFound` with this reason, or
/// `NotADriver` with this reason.
fn check_load_error(err: &Error, path: &str, case: &str) {
    let expected_reason = match case {
        "missing" => "no such file",
        "directory" => "a directory, not a library file",
        "empty" => "an empty file, not a library",
        "not-a-driver" => "it exports neither cuInit nor cuDriverGetVersion",
        other => panic!("unknown case {other}"),
    };
    match err {
        Error::Load(LoadError::NotFound { tried }) if case != "not-a-driver" => {
            assert_eq!(tried.len(), 1, "only the named file is tried: {tried:?}");
            assert_eq!(tried[0].path, path);
            assert_eq!(tried[0].reason, expected_reason);
        }
        Error::Load(LoadError::NotADriver { path: p, reason }) if case == "not-a-driver" => {
            assert_eq!(p, path);
            assert_eq!(reason, expected_reason);
        }
        other => panic!("expected Error::Load for {case}, got {other:?}"),
    }
    assert_eq!(err.call(), None);
    let source = std::error::Error::source(err)
        .expect("the load error is the source")
        .to_string();
    assert!(
        source.contains(path) && source.contains(expected_reason),
        "{source}"
    );
    if case == "not-a-driver" {
        assert!(source.contains("is not a CUDA driver"), "{source}");
    }
}

/// The checks, in the child process.
fn child(case: &str) {
    let path = std::env::var("CUDA_SYS_LIBCUDA").expect("the parent names the library");
    let err = Device::count().unwrap_err();
    check_load_error(&err, &path, case);
    // Remembered: the same answer every time, from every entry point.
    check_load_error(&Device::count().unwrap_err(), &path, case);
    check_load_error(&init().unwrap_err(), &path, case);
    check_load_error(&Context::primary(0).unwrap_err(), &path, case);
    check_load_error(&driver_version().unwrap_err(), &path, case);
    assert!(cuda_stream_sys::Driver::global().is_err());
    println!("{DONE}");
}

/// A folder of its own under the system's temporary folder, removed when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn an_unusable_library_reports_its_path_and_what_is_wrong() {
    if let Ok(case) = std::env::var(CHILD_VAR) {
        child(&case);
        return;
    }
    let dir = TempDir(std::env::temp_dir().join(format!(
        "cuda-stream-missing-library-{}",
        std::process::id()
    )));
    std::fs::create_dir_all(&dir.0).unwrap();
    let empty = dir.0.join("libcuda.so.1");
    std::fs::write(&empty, b"").unwrap();
    let cases = [
        ("missing", "/nonexistent/libcuda.so.1".to_string()),
        ("directory", dir.0.to_string_lossy().into_owned()),
        ("empty", empty.to_string_lossy().into_owned()),
        ("not-a-driver", "libm.so.6".to_string()),
    ];
    for (case, path) in cases {
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "an_unusable_library_reports_its_path_and_what_is_wrong",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_VAR, case)
            .env("CUDA_SYS_LIBCUDA", &path)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "the child for {case} ({path}) failed ({:?}):\n{stdout}\n{stderr}",
            out.status
        );
        assert!(
            stdout.contains(DONE),
            "the child for {case} did not run the checks:\n{stdout}\n{stderr}"
        );
    }
}
