//! The ports of cudarc's examples (`examples/cudarc_*.rs`, doc/from-cudarc.md) that launch no
//! kernel run to their end against the test driver, checking their results, with no race on
//! memory (`races=print`); without a driver, or with no device, they say so and exit with status
//! 2, and the multi-GPU copy skips on one device. The ports with kernels need NVRTC and the GPU
//! (the test driver loads PTX only, NVRTC makes CUBIN for it): with the `nvrtc` feature, and
//! NVRTC found, `cudarc_nvrtc_compile` runs, and each of the others compiles its CUDA C++ and
//! stops where the test driver refuses the CUBIN. The GPU bundle runs them all on a GPU.
//!
//! `cargo test` builds the examples before the tests run; they lie in `target/<profile>/examples/`,
//! next to the folder of this test's executable.

use std::path::PathBuf;
use std::process::{Command, Output};

use cuda_mock_driver::mock_driver_path;

/// The ports that launch no kernel: each runs against the test driver.
const KERNEL_FREE: [&str; 4] = [
    "cudarc_01_allocate",
    "cudarc_02_copy",
    "cudarc_12_context_config",
    "cudarc_13_copy_multi_gpu",
];

/// An example's executable, built with this test.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let profile = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps/<test>");
    let path = profile
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.is_file(),
        "{} is missing: `cargo test -p cuda-stream` builds it",
        path.display()
    );
    path
}

/// Runs example `name` with `driver` as libcuda and `config` as the test driver's settings.
fn run(name: &str, driver: &str, config: &str) -> Output {
    let out = Command::new(example(name))
        .env("CUDA_SYS_LIBCUDA", driver)
        .env("CUDA_MOCK_CONFIG", config)
        .env_remove("CUDA_SYS_ABI_VERSION")
        .output()
        .expect("the example starts");
    print!("{}", String::from_utf8_lossy(&out.stdout));
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    out
}

/// Asserts that `out` is a success whose last line starts with `<name>: <what>`, and that the
/// test driver found no race.
fn assert_line(name: &str, out: &Output, what: &str) {
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{name}: {:?}\n{stderr}", out.status);
    let line = stdout.lines().last().unwrap_or("");
    assert!(
        line.starts_with(&format!("{name}: {what}")),
        "{name} printed {stdout:?}"
    );
    let races: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("cuda-mock-driver: race:"))
        .collect();
    assert!(races.is_empty(), "{name} races:\n{}", races.join("\n"));
}

#[test]
fn the_kernel_free_ports_check_their_results_against_the_test_driver() {
    let driver = mock_driver_path();
    for name in KERNEL_FREE {
        let out = run(name, driver.to_str().unwrap(), "races=print");
        assert_line(name, &out, "ok (");
    }
}

#[test]
fn the_multi_gpu_copy_skips_on_one_device() {
    let driver = mock_driver_path();
    let name = "cudarc_13_copy_multi_gpu";
    let out = run(name, driver.to_str().unwrap(), "races=print;devices=1");
    assert_line(name, &out, "skipped: needs 2 GPUs, 1 found");
}

#[test]
fn without_a_driver_or_a_device_the_ports_say_so_and_exit_with_2() {
    let out = run("cudarc_01_allocate", "/nonexistent/libcuda.so", "");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("cudarc_01_allocate: no CUDA driver found: "),
        "{stderr}"
    );
    assert!(stderr.contains("/nonexistent/libcuda.so"), "{stderr}");

    let driver = mock_driver_path();
    let out = run("cudarc_02_copy", driver.to_str().unwrap(), "devices=0");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("cudarc_02_copy: no CUDA driver found: cuInit: CUDA_ERROR_NO_DEVICE"),
        "{stderr}"
    );
}

/// With the `nvrtc` feature: the ports whose kernels NVRTC compiles.
#[cfg(feature = "nvrtc")]
mod with_nvrtc {
    use super::*;

    /// The ports with a kernel (cudarc_nvrtc_compile aside, which loads nothing).
    const WITH_KERNELS: [&str; 7] = [
        "cudarc_03_launch_kernel",
        "cudarc_04_streams",
        "cudarc_05_device_repr",
        "cudarc_06_threading",
        "cudarc_09_constant_memory",
        "cudarc_10_function_attributes",
        "cudarc_matmul_kernel",
    ];

    /// Whether NVRTC loads (`CUDA_SYS_LIBNVRTC`, which the examples inherit, or the usual
    /// places); says why not, or fails with `CUDA_STREAM_TESTS_REQUIRE_NVRTC` set.
    fn nvrtc_found() -> bool {
        match cuda_stream::nvrtc::version() {
            Ok(_) => true,
            Err(e) => {
                let why = format!(
                    "skipped: no NVRTC: {e}: {}",
                    std::error::Error::source(&e).map_or(String::new(), |s| s.to_string())
                );
                assert!(
                    std::env::var_os("CUDA_STREAM_TESTS_REQUIRE_NVRTC").is_none(),
                    "{why}"
                );
                println!("{why}");
                false
            }
        }
    }

    #[test]
    fn the_nvrtc_port_compiles_without_a_driver() {
        if !nvrtc_found() {
            return;
        }
        let name = "cudarc_nvrtc_compile";
        let out = run(name, "/nonexistent/libcuda.so", "");
        assert_line(name, &out, "ok (sin_kernel compiled by NVRTC");
    }

    #[test]
    fn each_kernel_compiles_and_the_test_driver_refuses_its_cubin() {
        if !nvrtc_found() {
            return;
        }
        let driver = mock_driver_path();
        for name in WITH_KERNELS {
            let out = run(name, driver.to_str().unwrap(), "races=print");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{name}: {stderr}");
            assert!(
                stderr.contains(&format!(
                    "{name}: error: cuModuleLoadDataEx: CUDA_ERROR_INVALID_IMAGE\n  caused by: \
                     cuda-mock-driver loads PTX text only"
                )),
                "{name} failed before loading its CUBIN: {stderr}"
            );
        }
    }
}
