//! The NVRTC loader (feature `nvrtc`), with or without NVRTC installed: result names without
//! the library, a missing file and a library that is not NVRTC refused, the search order, the
//! wheel found through Python (both wheel layouts), every place tried listed when nothing loads,
//! and, where NVRTC loads, a raw compilation through the bindings.
//!
//! The search reads the environment, so the tests that change it run in a child process (this
//! test binary again, one test selected, with the environment set for it).
#![cfg(feature = "nvrtc")]

use std::ffi::{CStr, CString, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;

use cuda_stream_sys::Candidate;
use cuda_stream_sys::nvrtc::*;

/// Names the test a child process runs (its own name), with its folder as the value.
const CHILD_VAR: &str = "CUDA_SYS_NVRTC_TEST_CHILD";

/// Runs `test` of this binary in a child process with `env` (`None` removes a variable) and the
/// folder `dir` in `CHILD_VAR`; fails with the child's output if the child fails.
fn in_child(test: &str, dir: &Path, env: &[(&str, Option<&str>)]) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", test, "--nocapture"])
        .env(CHILD_VAR, dir);
    for (k, v) in env {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let out = cmd.output().expect("the test binary runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{text}");
    assert!(out.status.success() && text.contains("1 passed"), "{text}");
}

/// The child's folder, when this process is the child.
fn child_dir() -> Option<PathBuf> {
    std::env::var_os(CHILD_VAR).map(PathBuf::from)
}

/// A folder of its own under the system's temporary folder, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("cuda-sys-nvrtc-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn python3_runs() -> bool {
    Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn result_names_need_no_library() {
    assert_eq!(
        nvrtc_result_name(nvrtcResult::NVRTC_SUCCESS),
        "NVRTC_SUCCESS"
    );
    assert_eq!(
        nvrtc_result_name(nvrtcResult::NVRTC_ERROR_COMPILATION),
        "NVRTC_ERROR_COMPILATION"
    );
    assert_eq!(
        nvrtc_result_name(nvrtcResult::NVRTC_ERROR_TIME_TRACE_FILE_WRITE_FAILED),
        "NVRTC_ERROR_TIME_TRACE_FILE_WRITE_FAILED"
    );
    assert_eq!(
        nvrtc_result_name(nvrtcResult(1000)),
        "an unknown nvrtcResult"
    );
}

#[test]
fn a_missing_file_and_a_library_that_is_not_nvrtc_are_refused() {
    // SAFETY: a file that does not exist: nothing is loaded.
    let err = unsafe { Nvrtc::open("/nonexistent/libnvrtc.so.13") }.unwrap_err();
    assert_eq!(
        err,
        NvrtcLoadError::NotFound {
            tried: vec![Candidate {
                path: "/nonexistent/libnvrtc.so.13".into(),
                reason: "no such file".into(),
            }],
        }
    );
    assert_eq!(
        err.to_string(),
        "no NVRTC library could be loaded; tried /nonexistent/libnvrtc.so.13 (no such file)"
    );
    // SAFETY: the C library's libm, whose initialisers are sound to run; it does not export
    // `nvrtcVersion`, so none of its functions is called.
    let err = unsafe { Nvrtc::open("libm.so.6") }.unwrap_err();
    assert_eq!(
        err.to_string(),
        "libm.so.6 is not NVRTC: it does not export nvrtcVersion"
    );
}

#[test]
fn the_environment_variable_alone_is_tried_when_set() {
    let Some(dir) = child_dir() else {
        let dir = TempDir::new("env");
        let lib = dir.0.join("libnvrtc.so.13");
        in_child(
            "the_environment_variable_alone_is_tried_when_set",
            &dir.0,
            &[(NVRTC_PATH_VAR, Some(lib.to_str().unwrap()))],
        );
        return;
    };
    let lib = dir.join("libnvrtc.so.13");
    assert_eq!(Nvrtc::candidates(), vec![lib.clone().into_os_string()]);
    let err = Nvrtc::global().unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "no NVRTC library could be loaded; tried {} (no such file)",
            lib.display()
        )
    );
    // A failure is remembered.
    assert_eq!(Nvrtc::global().unwrap_err(), err);
}

#[test]
fn the_wheels_beside_python_come_first_in_both_layouts() {
    let Some(dir) = child_dir() else {
        if !python3_runs() {
            println!("skipped: python3 does not run");
            return;
        }
        // Two stand-in wheels, CUDA 13's and CUDA 12's layout, each with an empty "library".
        let dir = TempDir::new("wheels");
        for sub in [
            "nvidia/cu13/lib/libnvrtc.so.13",
            "nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
        ] {
            let file = dir.0.join(sub);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(&file, b"").unwrap();
        }
        let toolkit = dir.0.join("toolkit");
        std::fs::create_dir_all(toolkit.join("lib64")).unwrap();
        in_child(
            "the_wheels_beside_python_come_first_in_both_layouts",
            &dir.0,
            &[
                (NVRTC_PATH_VAR, None),
                ("PYTHONPATH", Some(dir.0.to_str().unwrap())),
                ("CUDA_HOME", Some(toolkit.to_str().unwrap())),
                ("CUDA_PATH", Some("/nonexistent-cuda")),
            ],
        );
        return;
    };
    let wheel13 = dir.join("nvidia/cu13/lib/libnvrtc.so.13");
    let wheel12 = dir.join("nvidia/cuda_nvrtc/lib/libnvrtc.so.12");
    let candidates = Nvrtc::candidates();
    println!("{candidates:#?}");
    let expected: [OsString; 5] = [
        wheel13.clone().into(),
        wheel12.clone().into(),
        "libnvrtc.so.13".into(),
        "libnvrtc.so.12".into(),
        "libnvrtc.so".into(),
    ];
    assert_eq!(candidates[..5], expected);
    match Nvrtc::open_default() {
        // A system NVRTC found by name or in /usr/local/cuda: the wheels were tried first.
        Ok(n) => println!("loaded {} after the stand-ins", n.path().display()),
        Err(NvrtcLoadError::NotFound { tried }) => {
            let shown: Vec<String> = tried.iter().map(ToString::to_string).collect();
            println!("{shown:#?}");
            assert_eq!(
                shown[0],
                format!("{} (an empty file, not a library)", wheel13.display())
            );
            assert_eq!(
                shown[1],
                format!("{} (an empty file, not a library)", wheel12.display())
            );
            assert!(shown[2].starts_with("libnvrtc.so.13 ("), "{shown:?}");
            let toolkit = dir.join("toolkit/lib64");
            assert!(
                shown.contains(&format!(
                    "{} (none of libnvrtc.so.13, libnvrtc.so.12, libnvrtc.so in it)",
                    toolkit.display()
                )),
                "{shown:#?}"
            );
            assert!(
                shown.contains(&"/nonexistent-cuda/lib64 (no such folder)".to_string()),
                "{shown:#?}"
            );
        }
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn without_python_the_error_says_so() {
    let Some(_) = child_dir() else {
        let dir = TempDir::new("no-python");
        in_child(
            "without_python_the_error_says_so",
            &dir.0,
            &[(NVRTC_PATH_VAR, None), ("PATH", Some(""))],
        );
        return;
    };
    assert_eq!(Nvrtc::candidates()[0], "libnvrtc.so.13");
    match Nvrtc::open_default() {
        Ok(n) => println!("loaded {}", n.path().display()),
        Err(NvrtcLoadError::NotFound { tried }) => {
            let first = tried[0].to_string();
            assert!(
                first.starts_with(
                    "the nvidia-cuda-nvrtc wheel of python3 (python3 could not be run: "
                ),
                "{first}"
            );
        }
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn a_raw_compilation_through_the_bindings() {
    let nvrtc = match Nvrtc::global() {
        Ok(n) => n,
        Err(e) => {
            let why = format!("skipped: no NVRTC: {e}");
            assert!(
                std::env::var_os("CUDA_STREAM_TESTS_REQUIRE_NVRTC").is_none(),
                "{why}"
            );
            println!("{why}");
            return;
        }
    };
    println!("{nvrtc:?}");
    let (major, _) = nvrtc.version();
    assert!(major >= 12, "{:?}", nvrtc.version());
    let source = CString::new("extern \"C\" __global__ void k(int *x) { *x = 1; }").unwrap();
    let mut prog: nvrtcProgram = std::ptr::null_mut();
    // SAFETY: a valid out-pointer and NUL-terminated strings; no headers.
    let rc = unsafe {
        nvrtc.nvrtcCreateProgram().unwrap()(
            &mut prog,
            source.as_ptr(),
            c"k.cu".as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, nvrtcResult::NVRTC_SUCCESS, "{}", nvrtc_result_name(rc));
    let options = [c"--gpu-architecture=compute_90".as_ptr()];
    // SAFETY: a live program and one NUL-terminated option.
    let rc = unsafe { nvrtc.nvrtcCompileProgram().unwrap()(prog, 1, options.as_ptr()) };
    assert_eq!(rc, nvrtcResult::NVRTC_SUCCESS, "{}", nvrtc_result_name(rc));
    let mut size = 0;
    // SAFETY: a live, compiled program; a valid out-pointer.
    let rc = unsafe { nvrtc.nvrtcGetPTXSize().unwrap()(prog, &mut size) };
    assert_eq!(rc, nvrtcResult::NVRTC_SUCCESS);
    let mut ptx = vec![0u8; size];
    // SAFETY: the buffer holds the `size` bytes NVRTC writes.
    let rc = unsafe { nvrtc.nvrtcGetPTX().unwrap()(prog, ptx.as_mut_ptr().cast()) };
    assert_eq!(rc, nvrtcResult::NVRTC_SUCCESS);
    let text = CStr::from_bytes_until_nul(&ptx).unwrap().to_str().unwrap();
    assert!(text.contains(".visible .entry k("), "{text}");
    // SAFETY: the program is live and destroyed once.
    let rc = unsafe { nvrtc.nvrtcDestroyProgram().unwrap()(&mut prog) };
    assert_eq!(rc, nvrtcResult::NVRTC_SUCCESS);
    // SAFETY: nvrtcGetErrorString returns a static string for any value.
    let name = unsafe { CStr::from_ptr(nvrtc.nvrtcGetErrorString().unwrap()(rc)) };
    assert_eq!(name.to_str().unwrap(), nvrtc_result_name(rc));
}
