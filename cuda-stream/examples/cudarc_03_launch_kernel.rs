//! cudarc's `03-launch-kernel`: loads `sin_kernel` and launches it with a builder of arguments.
//! Here the kernel is typed once: the tuple (`&mut` output, `&` input, `i32`) is checked against
//! the kernel's parameters, and the compiler holds every launch to it.

use std::process::ExitCode;

use cuda_stream::ffi::CUresult;
use cuda_stream::nvrtc::Program;
use cuda_stream::{Context, Device, DeviceBuffer, Error, LaunchConfig};

const NAME: &str = "cudarc_03_launch_kernel";

/// cudarc's `examples/sin.cu` (shipped there as `sin.ptx`).
const SIN_CU: &str = r#"
extern "C" __global__ void sin_kernel(float *out, const float *inp, int numel) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < numel) {
        out[i] = sin(inp[i]);
    }
}
"#;

fn run() -> Result<String, Error> {
    let ctx = Context::primary(0)?;
    let stream = ctx.null_stream();

    let module = Program::new(SIN_CU).compile(ctx.device())?.load(&ctx)?;
    let f = module
        .function("sin_kernel")?
        .typed::<(&mut DeviceBuffer<f32>, &DeviceBuffer<f32>, i32)>()?;

    let a_host = [1.0f32, 2.0, 3.0];
    let a_dev = DeviceBuffer::from_host(&ctx, &stream, &a_host)?;
    let mut b_dev = DeviceBuffer::alloc_on(&ctx, &stream, a_dev.len())?; // `a_dev.clone()`
    b_dev.copy_from(&stream, &a_dev)?;

    let n = 3i32;
    // SAFETY: sin_kernel reads inp[..numel] and writes out[..numel], and both hold 3 values.
    unsafe {
        f.launch(
            &stream,
            LaunchConfig::for_elements(n as u32, 256),
            (&mut b_dev, &a_dev, n),
        )
    }?;

    let a_host_2 = a_dev.to_vec(&stream)?;
    let b_host = b_dev.to_vec(&stream)?;
    assert_eq!(a_host, a_host_2.as_slice());
    for (got, want) in b_host.iter().zip(a_host.map(f32::sin)) {
        assert!(
            (got - want).abs() < 1e-5,
            "found {b_host:?}, expected sin of {a_host:?}"
        );
    }
    Ok(format!("sin of {a_host:?} is {b_host:?}, input unchanged"))
}

fn main() -> ExitCode {
    let result = match Device::count() {
        Ok(0) => return no_driver("the driver sees no device"),
        Err(Error::Load(e)) => return no_driver(e),
        Err(e) if e.driver_code() == Some(CUresult::CUDA_ERROR_NO_DEVICE) => return no_driver(e),
        Ok(_) => run(),
        Err(e) => Err(e),
    };
    match result {
        Ok(checked) => {
            println!("{NAME}: ok ({checked})");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{NAME}: error: {e}");
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                eprintln!("  caused by: {s}");
                source = s.source();
            }
            ExitCode::FAILURE
        }
    }
}

fn no_driver(why: impl std::fmt::Display) -> ExitCode {
    eprintln!("{NAME}: no CUDA driver found: {why}");
    ExitCode::from(2)
}
