//! cudarc's `03-launch-kernel`: loads `sin_kernel` and launches it with a builder of arguments.
//! Here the kernel is typed once: the tuple (`&mut` output, `&` input, `i32`) is checked against
//! the kernel's parameters, and the compiler holds every launch to it.

use std::process::ExitCode;

use cuda_stream::nvrtc::Program;
use cuda_stream::{Context, DeviceBuffer, Error, LaunchConfig};

mod common;

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
    common::main(NAME, 1, run)
}
