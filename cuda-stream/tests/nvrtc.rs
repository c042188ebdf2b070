//! NVRTC without a GPU (feature `nvrtc`): real programs compiled by the NVRTC this process finds
//! (`CUDA_SYS_LIBNVRTC`, the wheel beside Python, `libnvrtc.so.13`, a toolkit): a kernel
//! template instantiated through name expressions, with a header given by name, compiled to PTX
//! and to CUBIN, its lowered names checked; a broken program, whose error carries the compiler's
//! log with the line of the error; an option NVRTC does not know; and what is refused before
//! NVRTC is called. Where NVRTC is not found each test prints why and returns, unless
//! `CUDA_STREAM_TESTS_REQUIRE_NVRTC` is set (CI sets it), which makes that a failure.
#![cfg(feature = "nvrtc")]

use std::error::Error as _;
use std::process::Command;

use cuda_stream::Error;
use cuda_stream::ffi::nvrtc::{NVRTC_PATH_VAR, NvrtcLoadError, nvrtcResult};
use cuda_stream::nvrtc::{Arch, Code, CodeKind, CompileLog, Program, supported_archs, version};

/// Set (to anything) to make a missing NVRTC fail the tests instead of skipping them.
const REQUIRE_VAR: &str = "CUDA_STREAM_TESTS_REQUIRE_NVRTC";

/// A kernel template, its helper in a header given by name.
const SCALE: &str = r#"
#include "times.h"

template <typename T>
__global__ void scale(T *x, T a, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = times(x[i], a);
}
"#;
const TIMES_H: &str = "template <typename T> __device__ T times(T x, T a) { return x * a; }\n";

/// `e` and its sources, joined with `: `.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// NVRTC's version where it loads; else `None`, with the reason printed (a failure when
/// `CUDA_STREAM_TESTS_REQUIRE_NVRTC` is set).
fn nvrtc() -> Option<(i32, i32)> {
    match version() {
        Ok(v) => {
            let lib = cuda_stream::ffi::nvrtc::Nvrtc::global().expect("loaded");
            println!("NVRTC {}.{} from {}", v.0, v.1, lib.path().display());
            Some(v)
        }
        Err(e) => {
            let why = format!("skipped: no NVRTC: {}", chain(&e));
            assert!(std::env::var_os(REQUIRE_VAR).is_none(), "{why}");
            println!("{why}");
            None
        }
    }
}

fn scale() -> Program {
    Program::new(SCALE)
        .name("scale.cu")
        .header("times.h", TIMES_H)
        .option("-std=c++17")
        .name_expression("scale<float>")
        .name_expression("scale<int>")
}

#[test]
fn a_template_compiles_to_ptx_with_the_lowered_name_of_each_instance() {
    if nvrtc().is_none() {
        return;
    }
    let compiled = scale()
        .output(CodeKind::Ptx)
        .compile_for(Arch::new(7, 5))
        .unwrap_or_else(|e| panic!("{}", chain(&e)));
    assert_eq!(
        compiled.lowered_name("scale<float>").unwrap(),
        "_Z5scaleIfEvPT_S0_j"
    );
    assert_eq!(
        compiled.lowered_name("scale<int>").unwrap(),
        "_Z5scaleIiEvPT_S0_j"
    );
    assert_eq!(
        compiled.lowered_names().collect::<Vec<_>>(),
        [
            ("scale<float>", "_Z5scaleIfEvPT_S0_j"),
            ("scale<int>", "_Z5scaleIiEvPT_S0_j")
        ]
    );
    let err = compiled.lowered_name("scale<double>").unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    assert_eq!(compiled.arch(), Arch::new(7, 5));
    let Code::Ptx(ptx) = compiled.code() else {
        panic!("PTX asked for, got {:?}", compiled.code().kind());
    };
    println!("{} bytes of PTX", ptx.len());
    assert!(ptx.contains(".target sm_75"), "{ptx}");
    for lowered in ["_Z5scaleIfEvPT_S0_j", "_Z5scaleIiEvPT_S0_j"] {
        assert!(ptx.contains(&format!(".entry {lowered}(")), "{ptx}");
    }
    assert!(!ptx.ends_with('\0'));
    assert_eq!(compiled.code().as_bytes(), ptx.as_bytes());
}

#[test]
fn cubin_for_an_architecture_nvrtc_supports_and_ptx_for_a_newer_one() {
    if nvrtc().is_none() {
        return;
    }
    let archs = supported_archs().unwrap_or_else(|e| panic!("{}", chain(&e)));
    println!(
        "supported: {}",
        archs
            .iter()
            .map(Arch::to_string)
            .collect::<Vec<_>>()
            .join(" ")
    );
    assert!(archs.windows(2).all(|w| w[0] < w[1]), "{archs:?}");
    let newest = *archs.last().expect("NVRTC supports some architecture");
    for arch in [Arch::new(9, 0), newest] {
        assert!(archs.contains(&arch), "{arch} in {archs:?}");
        let compiled = scale()
            .compile_for(arch)
            .unwrap_or_else(|e| panic!("{}", chain(&e)));
        assert_eq!(compiled.arch(), arch);
        let Code::Cubin(image) = compiled.code() else {
            panic!("{arch}: CUBIN expected, got PTX");
        };
        assert!(image.starts_with(b"\x7fELF"), "{arch}: not an ELF image");
        println!("{arch}: {} bytes of CUBIN", image.len());
        assert_eq!(
            compiled.lowered_name("scale<float>").unwrap(),
            "_Z5scaleIfEvPT_S0_j"
        );
    }
    // An architecture newer than NVRTC knows: PTX for the newest it knows, which the driver
    // JIT-compiles for the newer device.
    let future = Arch::new(99, 0);
    let compiled = scale().compile_for(future).unwrap();
    assert_eq!(compiled.code().kind(), CodeKind::Ptx);
    assert_eq!(compiled.arch(), newest);
    // CUBIN asked for explicitly.
    let compiled = scale().output(CodeKind::Cubin).compile_for(newest).unwrap();
    assert!(compiled.code().as_bytes().starts_with(b"\x7fELF"));
}

#[test]
fn a_broken_program_fails_with_the_compilers_log_naming_the_line() {
    if nvrtc().is_none() {
        return;
    }
    let source = "__global__ void k(int *x) {\n    x[0] = 1;\n    x[1] = undeclared;\n}\n";
    let err = Program::new(source)
        .name("broken.cu")
        .compile_for(Arch::new(9, 0))
        .unwrap_err();
    println!("{}", chain(&err));
    assert_eq!(
        err.to_string(),
        "nvrtcCompileProgram: NVRTC_ERROR_COMPILATION"
    );
    assert_eq!(err.call(), Some("nvrtcCompileProgram"));
    let Error::NvrtcCompile { code, log, .. } = &err else {
        panic!("expected NvrtcCompile, got {err:?}");
    };
    assert_eq!(*code, nvrtcResult::NVRTC_ERROR_COMPILATION);
    let source_log = err.source().expect("the log is the source");
    assert_eq!(source_log.to_string(), log.to_string());
    let log: &CompileLog = source_log.downcast_ref().expect("a CompileLog");
    assert!(
        log.text()
            .contains("broken.cu(3): error: identifier \"undeclared\" is undefined"),
        "{}",
        log.text()
    );
}

#[test]
fn an_option_nvrtc_does_not_know_is_refused_with_its_log() {
    if nvrtc().is_none() {
        return;
    }
    let err = scale()
        .option("--no-such-option")
        .compile_for(Arch::new(9, 0))
        .unwrap_err();
    println!("{}", chain(&err));
    assert_eq!(
        err.to_string(),
        "nvrtcCompileProgram: NVRTC_ERROR_INVALID_OPTION"
    );
    assert!(
        err.source()
            .unwrap()
            .to_string()
            .contains("--no-such-option"),
        "{}",
        chain(&err)
    );
}

#[test]
fn the_log_of_a_program_that_compiles_keeps_its_warnings() {
    if nvrtc().is_none() {
        return;
    }
    let compiled = Program::new("__global__ void k() { int unused = 1; }")
        .compile_for(Arch::new(9, 0))
        .unwrap_or_else(|e| panic!("{}", chain(&e)));
    println!("{}", compiled.log());
    assert!(
        compiled.log().contains("warning") && compiled.log().contains("unused"),
        "{}",
        compiled.log()
    );
    let quiet = Program::new("extern \"C\" __global__ void k() {}")
        .compile_for(Arch::new(9, 0))
        .unwrap();
    assert_eq!(quiet.log(), "");
    assert_eq!(quiet.lowered_names().count(), 0);
}

#[test]
fn an_architecture_option_and_nul_bytes_are_refused_before_nvrtc_compiles() {
    // Refused with or without NVRTC: nothing is compiled.
    for option in ["-arch=sm_90", "--gpu-architecture=compute_90", "-arch"] {
        let err = scale()
            .option(option)
            .output(CodeKind::Ptx)
            .compile_for(Arch::new(9, 0))
            .unwrap_err();
        assert!(
            matches!(&err, Error::InvalidArgument { reason } if reason.contains("compile_for")),
            "{option}: {err:?}"
        );
    }
    let err = Program::new("__global__ void k() {}\0")
        .output(CodeKind::Ptx)
        .compile_for(Arch::new(9, 0))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid argument: the program's source has a NUL byte at 22"
    );
    let err = scale()
        .header("bad\0.h", "")
        .output(CodeKind::Ptx)
        .compile_for(Arch::new(9, 0))
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
}

/// Marks the child process of [`a_missing_nvrtc_is_an_error_listing_the_place_tried`].
const CHILD_VAR: &str = "CUDA_STREAM_NVRTC_TEST_CHILD";

#[test]
fn a_missing_nvrtc_is_an_error_listing_the_place_tried() {
    let missing = "/nonexistent/libnvrtc.so.13";
    if std::env::var_os(CHILD_VAR).is_some() {
        // The child: NVRTC named by the environment, where there is none.
        let err = scale().compile_for(Arch::new(9, 0)).unwrap_err();
        assert_eq!(err.to_string(), "nvrtcCreateProgram: no usable NVRTC");
        let Error::NvrtcLoad { source, .. } = &err else {
            panic!("expected NvrtcLoad, got {err:?}");
        };
        let NvrtcLoadError::NotFound { tried } = source else {
            panic!("expected NotFound, got {source:?}");
        };
        assert_eq!(tried.len(), 1, "{tried:?}");
        assert_eq!(tried[0].path, missing);
        assert_eq!(tried[0].reason, "no such file");
        assert_eq!(
            chain(&err),
            format!(
                "nvrtcCreateProgram: no usable NVRTC: no NVRTC library could be loaded; \
                 tried {missing} (no such file)"
            )
        );
        let err = version().unwrap_err();
        assert_eq!(err.call(), Some("nvrtcVersion"));
        return;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_missing_nvrtc_is_an_error_listing_the_place_tried",
            "--nocapture",
        ])
        .env(CHILD_VAR, "1")
        .env(NVRTC_PATH_VAR, missing)
        .output()
        .expect("the test binary runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("1 passed"), "{text}");
}
