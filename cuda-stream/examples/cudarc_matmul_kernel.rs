//! cudarc's `matmul-kernel`: compiles a naive matrix product, multiplies two 2x2 matrices with
//! one 2x2 block and times each step. Here the argument tuple is checked against the kernel's
//! parameters (two inputs read, `C` written, `N`), and the launch records each buffer's use.

use std::process::ExitCode;
use std::time::Instant;

use cuda_stream::nvrtc::Program;
use cuda_stream::{Context, Device, DeviceBuffer, Error, LaunchConfig};

mod common;

const NAME: &str = "cudarc_matmul_kernel";

const MATMUL_CU: &str = r#"
extern "C" __global__ void matmul(float* A, float* B, float* C, int N) {
    int ROW = blockIdx.y*blockDim.y+threadIdx.y;
    int COL = blockIdx.x*blockDim.x+threadIdx.x;

    float tmpSum = 0;

    if (ROW < N && COL < N) {
        // each thread computes one element of the block sub-matrix
        for (int i = 0; i < N; i++) {
            tmpSum += A[ROW * N + i] * B[i * N + COL];
        }
    }
    C[ROW * N + COL] = tmpSum;
}
"#;

fn run() -> Result<String, Error> {
    let start = Instant::now();
    let compiled = Program::new(MATMUL_CU).compile(Device::new(0)?)?;
    let compiled_in = start.elapsed();

    let ctx = Context::primary(0)?;
    let stream = ctx.null_stream();
    let module = compiled.load(&ctx)?;
    let f = module.function("matmul")?.typed::<(
        &DeviceBuffer<f32>,
        &DeviceBuffer<f32>,
        &mut DeviceBuffer<f32>,
        i32,
    )>()?;
    let loaded_in = start.elapsed();

    let a_host = [1.0f32, 2.0, 3.0, 4.0];
    let b_host = [1.0f32, 2.0, 3.0, 4.0];
    let mut c_host = [0.0f32; 4];
    let a_dev = DeviceBuffer::from_host(&ctx, &stream, &a_host)?;
    let b_dev = DeviceBuffer::from_host(&ctx, &stream, &b_host)?;
    let mut c_dev = DeviceBuffer::from_host(&ctx, &stream, &c_host)?;

    // One block of 2x2 threads: `matmul` writes C[ROW * N + COL] outside its bounds check, so
    // the grid must not pass N x N.
    let config = LaunchConfig::new(1, (2, 2));
    // SAFETY: with N = 2 and 2x2 threads, matmul reads A[..4] and B[..4] and writes C[..4].
    unsafe { f.launch(&stream, config, (&a_dev, &b_dev, &mut c_dev, 2)) }?;
    c_dev.copy_to_host(&stream, &mut c_host)?;
    let ran_in = start.elapsed();

    assert_eq!(c_host, [7.0, 10.0, 15.0, 22.0], "[[1, 2], [3, 4]] squared");
    Ok(format!(
        "{c_host:?}; compiled in {compiled_in:?}, loaded in {loaded_in:?}, ran in {ran_in:?}"
    ))
}

fn main() -> ExitCode {
    common::main(NAME, 1, run)
}
