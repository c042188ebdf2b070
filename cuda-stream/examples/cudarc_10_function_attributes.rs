//! cudarc's `10-function-attributes`: reads `sin_kernel`'s registers, memory, thread limit, PTX
//! and binary versions, and asks the occupancy calculator for a block size. Here the `Function`
//! borrows its module (no query of an unloaded kernel compiles), and occupancy takes no callback.

use std::process::ExitCode;

use cuda_stream::nvrtc::Program;
use cuda_stream::{BlockSize, Context, Error};

mod common;

const NAME: &str = "cudarc_10_function_attributes";

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
    let device = ctx.device();
    let module = Program::new(SIN_CU).compile(device)?.load(&ctx)?;
    let sin_kernel = module.function("sin_kernel")?;

    let registers = sin_kernel.registers()?;
    let shared = sin_kernel.static_shared_memory()?;
    let constant = sin_kernel.const_memory()?;
    let local = sin_kernel.local_memory()?;
    let max_threads = sin_kernel.max_threads_per_block();
    let (ptx, binary) = (sin_kernel.ptx_version()?, sin_kernel.binary_version()?);
    // `occupancy_max_potential_block_size(no_dynamic_smem, 0, 0, None)` in cudarc.
    let BlockSize { block, min_grid } = sin_kernel.max_potential_block_size(0)?;

    let (major, minor) = device.compute_capability()?;
    let props = device.properties()?;
    assert!(registers > 0, "sin_kernel uses no register?");
    assert!(max_threads > 0 && max_threads <= props.max_threads_per_block);
    assert_eq!(
        binary,
        10 * major + minor,
        "the binary runs as the device's architecture"
    );
    assert!(ptx <= binary, "PTX {ptx} for a binary of {binary}");
    assert!(block > 0 && block <= max_threads && block % props.warp_size == 0);
    assert!(min_grid > 0);
    Ok(format!(
        "sin_kernel on {}: {registers} registers, {shared} B shared, {constant} B constant, \
         {local} B local, up to {max_threads} threads a block, PTX {}.{} as sm_{binary}; \
         occupancy: blocks of {block}, at least {min_grid} of them",
        device.name()?,
        ptx / 10,
        ptx % 10
    ))
}

fn main() -> ExitCode {
    common::main(NAME, 1, run)
}
