//! cudarc's `04-streams`: forks a second stream off the default stream, launches `sin_kernel` on
//! it, and reads the results back on the first stream. Here the fork lives in a scope that joins
//! it (it cannot leak out), and the typed launch records `&mut b_dev` as a write on the fork.

use std::process::ExitCode;

use cuda_stream::nvrtc::Program;
use cuda_stream::{Context, DeviceBuffer, Error, LaunchConfig};

mod common;

const NAME: &str = "cudarc_04_streams";

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

    let n = 3i32;
    let a_host = [1.0f32, 2.0, 3.0];
    let a_dev = DeviceBuffer::from_host(&ctx, &stream, &a_host)?;
    let mut b_dev = DeviceBuffer::<f32>::zeroed(&ctx, &stream, n as usize)?;

    // cudarc's `stream.fork()`: a stream that starts after the upload and the zeroing above.
    let (a_host_2, b_host) = stream.scope(|s| {
        let stream2 = s.fork()?;
        let config = LaunchConfig::for_elements(n as u32, 256);
        // SAFETY: sin_kernel reads inp[..numel] and writes out[..numel], both 3 values long.
        unsafe { f.launch(&stream2, config, (&mut b_dev, &a_dev, n)) }?;
        // Back on the first stream before the scope joins the fork: `b_dev`'s copy waits for
        // the kernel's write on `stream2` by itself; `a_dev` was only read there, so it waits
        // for nothing.
        Ok((a_dev.to_vec(&s.parent())?, b_dev.to_vec(&s.parent())?))
    })?;

    assert_eq!(&a_host, a_host_2.as_slice());
    for (got, want) in b_host.iter().zip(a_host.map(f32::sin)) {
        assert!(
            (got - want).abs() < 1e-5,
            "found {b_host:?}, expected sin of {a_host:?}"
        );
    }
    Ok(format!(
        "sin of {a_host:?} on a fork is {b_host:?}, read on the parent"
    ))
}

fn main() -> ExitCode {
    common::main(NAME, 1, run)
}
