//! cudarc's `09-constant-memory`: fills a `__constant__ float coefficients[4]` and evaluates a
//! polynomial with it on the device. Here the symbol is a `DeviceBuffer<f32>` checked against
//! the symbol's size and alignment: no `unsafe` transmute of bytes as in cudarc.

use std::process::ExitCode;

use cuda_stream::nvrtc::Program;
use cuda_stream::{Context, DeviceBuffer, Error, LaunchConfig};

mod common;

const NAME: &str = "cudarc_09_constant_memory";

/// cudarc's `examples/constant_memory.cu`.
const CONSTANT_MEMORY_CU: &str = r#"
__constant__ float coefficients[4];

extern "C" __global__ void polynomial_kernel(float *out, const float *inp, int numel) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < numel) {
        float x = inp[i];
        out[i] = coefficients[0] + coefficients[1] * x + coefficients[2] * x * x +
                 coefficients[3] * x * x * x;
    }
}
"#;

fn run() -> Result<String, Error> {
    let ctx = Context::primary(0)?;
    let stream = ctx.null_stream();

    // The name expression gives the variable's name in the module (C++ may mangle it).
    let compiled = Program::new(CONSTANT_MEMORY_CU)
        .name_expression("&coefficients")
        .compile(ctx.device())?;
    let module = compiled.load(&ctx)?;
    let symbol = module.global::<f32>(compiled.lowered_name("&coefficients")?)?;
    assert_eq!(symbol.byte_len(), 16); // cudarc's `coefficients_symbol.len()`, in bytes

    // 1 + 2x + 3x^2 + 4x^3, copied in on the stream the kernel runs on.
    let coefficients = [1.0f32, 2.0, 3.0, 4.0];
    symbol.copy_from_host(&stream, &coefficients)?;

    let polynomial_kernel =
        module
            .function("polynomial_kernel")?
            .typed::<(&mut DeviceBuffer<f32>, &DeviceBuffer<f32>, i32)>()?;
    let input = vec![0.0f32, 1.0, 2.0, 3.0, 4.0, 5.0];
    let n = input.len();
    let input_dev = DeviceBuffer::from_host(&ctx, &stream, &input)?;
    let mut output_dev = DeviceBuffer::<f32>::zeroed(&ctx, &stream, n)?;
    // SAFETY: the kernel reads inp[..numel] and writes out[..numel] (6 values each), and reads
    // `coefficients` by name: not a tracked use, so it was filled on this same stream, before.
    unsafe {
        let config = LaunchConfig::for_elements(n as u32, 256);
        polynomial_kernel.launch(&stream, config, (&mut output_dev, &input_dev, n as i32))
    }?;

    let output = output_dev.to_vec(&stream)?;
    for (i, (&x, &y)) in input.iter().zip(&output).enumerate() {
        let [c0, c1, c2, c3] = coefficients;
        let expected = c0 + c1 * x + c2 * x * x + c3 * x * x * x;
        assert!(
            (y - expected).abs() < 1e-4,
            "f({x}) at {i}: got {y}, expected {expected}"
        );
    }
    Ok(format!(
        "f(x) = 1 + 2x + 3x^2 + 4x^3 at {input:?} is {output:?}"
    ))
}

fn main() -> ExitCode {
    common::main(NAME, 1, run)
}
