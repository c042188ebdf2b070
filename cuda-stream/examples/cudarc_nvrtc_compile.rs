//! cudarc's `nvrtc-compile`: compiles `sin_kernel` to PTX with flush-to-zero, fast division and
//! square root, and fused multiply-add. Here the options are nvcc's flags, the architecture is
//! explicit, and a failure carries NVRTC's log. Needs NVRTC only: no driver, no GPU.

use std::process::ExitCode;

use cuda_stream::Error;
use cuda_stream::nvrtc::{Arch, Code, CodeKind, Program, version};

const NAME: &str = "cudarc_nvrtc_compile";

fn run() -> Result<String, Error> {
    // cudarc's `CompileOptions { ftz, prec_div, prec_sqrt, fmad, .. }`.
    let options = [
        "--ftz=true",
        "--prec-div=false",
        "--prec-sqrt=false",
        "--fmad=true",
    ];
    // NVRTC's default architecture is left implicit in cudarc: sm_75, the oldest NVRTC 13 has.
    let arch = Arch::new(7, 5);
    let compiled = Program::new(
        r#"
extern "C" __global__ void sin_kernel(float *out, const float *inp, int numel) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < numel) {
        out[i] = sin(inp[i]);
    }
}"#,
    )
    .options(options)
    .output(CodeKind::Ptx)
    .compile_for(arch)?;

    let Code::Ptx(ptx) = compiled.code() else {
        unreachable!("PTX was asked for")
    };
    assert!(ptx.contains(".target sm_75"), "{ptx}");
    assert!(ptx.contains(".visible .entry sin_kernel("), "{ptx}");
    assert!(
        ptx.contains(".ftz.f32"),
        "--ftz=true left no flush-to-zero instruction"
    );
    let (major, minor) = version()?;
    Ok(format!(
        "sin_kernel compiled by NVRTC {major}.{minor} to {} bytes of PTX for {arch}",
        ptx.len()
    ))
}

fn main() -> ExitCode {
    match run() {
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
