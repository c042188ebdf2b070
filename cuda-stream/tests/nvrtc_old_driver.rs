//! NVRTC with a driver that cannot tell a cubin's kernel parameters (`cuFuncGetParamInfo` is
//! CUDA 12.4; the test driver is opened held to the CUDA 12.0 ABIs):
//! `Program::compile` for the device then makes PTX, whose parameter lists are read at load, so
//! a typed kernel of the program is still checked. (On the GPU bundle's `--abi 12000` pass, a
//! CUBIN made typed kernels fail with "the parameters ... are unknown".) Its own process: the
//! ABI is read once per process. Skipped, saying why, where NVRTC is not found.
//!
//! Not in the published package: the test driver is a path dependency of the workspace.
#![cfg(feature = "nvrtc")]

use std::error::Error as _;

use cuda_mock_driver::MockDriver;
use cuda_stream::ffi::{Driver, DriverOptions};
use cuda_stream::nvrtc::{Arch, Code, Program, version};
use cuda_stream::{Context, DeviceBuffer, Error};

const SCALE: &str = r#"
template <typename T>
__global__ void scale(T *x, T a, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * a;
}
"#;

#[test]
fn a_driver_without_parameter_info_gets_ptx_so_typed_kernels_stay_checked() {
    // The test driver, held to the CUDA 12.0 ABIs, as the process-wide driver.
    let path = cuda_mock_driver::mock_driver_path();
    // SAFETY: both open the test driver, built with this test.
    let (driver, m) = unsafe {
        (
            Driver::open_with(&path, DriverOptions::new().abi_version(12000)),
            MockDriver::open(&path),
        )
    };
    Driver::install_global(driver.unwrap()).expect("the first driver of the process");
    let m = m.unwrap();
    match version() {
        Ok((major, minor)) => println!("NVRTC {major}.{minor}"),
        Err(e) => {
            let why = format!("skipped: no NVRTC: {e}: {}", e.source().unwrap());
            assert!(
                std::env::var_os("CUDA_STREAM_TESTS_REQUIRE_NVRTC").is_none(),
                "{why}"
            );
            println!("{why}");
            return;
        }
    }
    let ctx = Context::primary(0).unwrap();
    let compiled = Program::new(SCALE)
        .name_expression("scale<float>")
        .compile(ctx.device())
        .unwrap();
    assert_eq!(compiled.arch(), Arch::new(9, 0));
    assert!(
        matches!(compiled.code(), Code::Ptx(_)),
        "PTX, not CUBIN, for a driver before 12.4"
    );
    let module = compiled.load(&ctx).unwrap();
    let function = module
        .function(compiled.lowered_name("scale<float>").unwrap())
        .unwrap();
    assert!(function.params().is_some(), "read from the PTX");
    function
        .typed::<(&mut DeviceBuffer<f32>, f32, u32)>()
        .unwrap();
    assert!(matches!(
        function.typed::<(&mut DeviceBuffer<f32>, u32, u32)>(),
        Err(Error::ArgumentMismatch { .. })
    ));
    assert_eq!(m.calls("cuFuncGetParamInfo"), 0, "not resolved at 12.0");
}
