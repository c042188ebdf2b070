//! NVRTC's output loaded as a `Module` (feature `nvrtc`), against the test driver
//! (`tests/mock-driver`, which loads PTX text and records launches): a template compiled to PTX
//! loads, its kernel is found by its lowered name, its parameters are read from NVRTC's PTX, a
//! typed kernel checks its argument tuple against them, and a launch passes the values; the
//! device's architecture (9.0 for the test driver) gives CUBIN, which goes to
//! `Module::from_image` (the test driver loads PTX only, and says so). Skipped, saying why,
//! where NVRTC is not found (a failure with `CUDA_STREAM_TESTS_REQUIRE_NVRTC` set).
//!
//! Not in the published package: the test driver is a path dependency of the workspace.
#![cfg(feature = "nvrtc")]

use std::error::Error as _;

use cuda_mock_driver::{MockDriver, MockLaunch};
use cuda_stream::nvrtc::{Arch, Code, CodeKind, Program, version};
use cuda_stream::{Context, DeviceBuffer, Error, LaunchConfig, ParamInfo, ParamKind};

const SCALE: &str = r#"
template <typename T>
__global__ void scale(T *x, T a, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * a;
}
"#;

fn nvrtc_found() -> bool {
    match version() {
        Ok((major, minor)) => {
            println!("NVRTC {major}.{minor}");
            true
        }
        Err(e) => {
            let why = format!("skipped: no NVRTC: {e}: {}", e.source().unwrap());
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
fn a_compiled_template_loads_and_its_typed_kernel_launches() {
    if !nvrtc_found() {
        return;
    }
    let m = MockDriver::global();
    let ctx = Context::primary(0).unwrap();
    let program = Program::new(SCALE).name_expression("scale<float>");

    let compiled = program
        .clone()
        .output(CodeKind::Ptx)
        .compile_for(Arch::of(ctx.device()).unwrap())
        .unwrap();
    let lowered = compiled.lowered_name("scale<float>").unwrap();
    let module = compiled.load(&ctx).unwrap();
    let function = module.function(lowered).unwrap();
    let param = |size, kind| ParamInfo { size, kind };
    assert_eq!(
        function.params().expect("read from NVRTC's PTX"),
        [
            param(8, ParamKind::Integer),
            param(4, ParamKind::Float),
            param(4, ParamKind::Integer)
        ]
    );
    let err = function
        .typed::<(&mut DeviceBuffer<f32>, u32, u32)>()
        .unwrap_err();
    assert!(matches!(err, Error::ArgumentMismatch { .. }), "{err}");
    let scale = function
        .typed::<(&mut DeviceBuffer<f32>, f32, u32)>()
        .unwrap();

    let stream = ctx.new_stream().unwrap();
    let mut x = DeviceBuffer::from_host(&ctx, &stream, &[1.0f32; 1000]).unwrap();
    let ptr = x.device_ptr();
    // SAFETY: `scale` writes x[..1000] only (and the test driver runs no unknown kernel).
    unsafe {
        scale.launch(
            &stream,
            LaunchConfig::for_elements(1000, 256),
            (&mut x, 3.0, 1000),
        )
    }
    .unwrap();
    assert_eq!(
        m.last_launch().expect("a launch"),
        MockLaunch {
            grid: [4, 1, 1],
            block: [256, 1, 1],
            shared_memory_bytes: 0,
            params: vec![
                ptr.to_ne_bytes().to_vec(),
                3.0f32.to_ne_bytes().to_vec(),
                1000u32.to_ne_bytes().to_vec(),
            ],
            attributes: vec![],
        }
    );
    stream.synchronize().unwrap();

    // For the device itself: CUBIN for sm_90 (which NVRTC 12 and 13 support), loaded as an
    // image; the test driver refuses cubins with its own log, which the error carries.
    let compiled = program.compile(ctx.device()).unwrap();
    assert_eq!(compiled.arch(), Arch::new(9, 0));
    assert!(matches!(compiled.code(), Code::Cubin(_)));
    let err = compiled.load(&ctx).unwrap_err();
    assert_eq!(
        err.to_string(),
        "cuModuleLoadDataEx: CUDA_ERROR_INVALID_IMAGE"
    );
    assert_eq!(
        err.source().unwrap().to_string(),
        "cuda-mock-driver loads PTX text only, not cubins or fatbins"
    );
}
