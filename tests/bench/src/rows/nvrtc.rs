//! Run-time compilation (feature `nvrtc`): `Program::compile` of a small CUDA C++ kernel for the
//! device against the raw NVRTC calls that make the same CUBIN (create, compile with the same
//! architecture option, size, get, destroy); the Python peers compile the same source with
//! CuPy's `RawKernel` and cuda.core's `Program`, their caches off. Without the feature, or
//! without NVRTC, the row is left out with the reason.

use super::Fixture;
use crate::report::Rows;
use cuda_stream::Error;

/// The kernel every side compiles (the same text as the peers').
#[cfg(feature = "nvrtc")]
const SOURCE: &str = "extern \"C\" __global__ void csb_scale(float *x, float a, unsigned n) {\n    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) x[i] = a * x[i];\n}\n";

#[cfg(not(feature = "nvrtc"))]
pub(super) fn rows(_fx: &Fixture<'_>, _rows: &mut Rows) -> Result<(), Error> {
    eprintln!("cuda-stream-bench: the nvrtc row is left out: built without the nvrtc feature");
    Ok(())
}

#[cfg(feature = "nvrtc")]
pub(super) fn rows(fx: &Fixture<'_>, rows: &mut Rows) -> Result<(), Error> {
    use std::ffi::{CString, c_char};
    use std::ptr;

    use cuda_stream::ffi::nvrtc::{Nvrtc, nvrtcResult};
    use cuda_stream::nvrtc::{Arch, CodeKind, Program};

    use crate::fail::must;
    use crate::method::case;
    use crate::report::Target;

    let nvrtc = match Nvrtc::global() {
        Ok(n) => n,
        Err(e) => {
            eprintln!("cuda-stream-bench: the nvrtc row is left out: {e}");
            return Ok(());
        }
    };
    let arch = Arch::of(fx.ctx.device())?;
    let program = Program::new(SOURCE).output(CodeKind::Cubin);
    // Once, untimed: does this NVRTC make CUBIN for the device?
    if let Err(e) = program.compile_for(arch) {
        eprintln!("cuda-stream-bench: the nvrtc row is left out: {e}");
        return Ok(());
    }
    let (create, compile, size, get, destroy) = match (
        nvrtc.nvrtcCreateProgram(),
        nvrtc.nvrtcCompileProgram(),
        nvrtc.nvrtcGetCUBINSize(),
        nvrtc.nvrtcGetCUBIN(),
        nvrtc.nvrtcDestroyProgram(),
    ) {
        (Ok(a), Ok(b), Ok(c), Ok(d), Ok(e)) => (a, b, c, d, e),
        _ => {
            eprintln!("cuda-stream-bench: the nvrtc row is left out: NVRTC lacks a function");
            return Ok(());
        }
    };
    let src = CString::new(SOURCE).expect("no NUL");
    let name = CString::new("csb_scale.cu").expect("no NUL");
    let option = CString::new(format!("--gpu-architecture={}", arch.sm_name())).expect("no NUL");
    let check = |rc: nvrtcResult, call: &str| {
        assert!(rc == nvrtcResult::NVRTC_SUCCESS, "{call}: {rc:?}");
    };
    let raw = || {
        let mut prog = ptr::null_mut();
        let options: [*const c_char; 1] = [option.as_ptr()];
        // SAFETY: NUL-terminated source and name, no headers; the program is destroyed below.
        unsafe {
            check(
                create(
                    &mut prog,
                    src.as_ptr(),
                    name.as_ptr(),
                    0,
                    ptr::null(),
                    ptr::null(),
                ),
                "nvrtcCreateProgram",
            );
            check(compile(prog, 1, options.as_ptr()), "nvrtcCompileProgram");
            let mut n = 0usize;
            check(size(prog, &mut n), "nvrtcGetCUBINSize");
            let mut cubin = vec![0u8; n];
            check(get(prog, cubin.as_mut_ptr().cast()), "nvrtcGetCUBIN");
            check(destroy(&mut prog), "nvrtcDestroyProgram");
            std::hint::black_box(cubin);
        }
    };
    rows.add(
        "nvrtc_compile",
        "Program::compile of a 4-line kernel to CUBIN for the device (raw: nvrtcCreateProgram + nvrtcCompileProgram + nvrtcGetCUBIN + nvrtcDestroyProgram)",
        Target::Ratio(1.05),
        case(fx.cfg.slow.min(20), raw, || {
            std::hint::black_box(must(program.compile_for(arch), "Program::compile"));
        })
        .no_peer("cudarc's compile_ptx makes PTX, not CUBIN: see the Python peers' column")
        .run(fx.cfg),
    );
    Ok(())
}
