//! Generates `cuda-sys/src/generated/` from a pinned `cuda.h` (and `nccl.h`, `nvrtc.h`).
//!
//! ```text
//! cargo run -p build-support -- generate [--include DIR]
//! cargo run -p build-support -- check    [--include DIR]
//! ```
//!
//! Without `--include` (or `CUDA_INCLUDE_DIR`), the header comes from the pinned NVIDIA runtime
//! wheel, fetched with `pip download` into `.header-cache/` and checked against its sha256. Either
//! way the header itself must match [`HEADER_SHA256`](header::HEADER_SHA256): the committed
//! bindings name it.
//!
//! The NCCL bindings (`nccl.rs`, behind cuda-stream-sys's `nccl` feature) come the same way from the
//! pinned `nccl.h` of the `nvidia-nccl-cu13` wheel (`--nccl-include` or `NCCL_INCLUDE_DIR` to
//! use another copy of the same header), and the NVRTC bindings (`nvrtc.rs`, behind the `nvrtc`
//! feature) from the pinned `nvrtc.h` of the `nvidia-cuda-nvrtc` 13.0 wheel (`--nvrtc-include`
//! or `NVRTC_INCLUDE_DIR`).
//!
//! `check` regenerates into a temporary folder and fails on any difference with what is
//! committed, so the bindings cannot drift from the generator.
//!
//! Three bindgen runs feed it: `cuda.h` as a default build sees it (the types and the C names),
//! as a per-thread-default-stream build sees it (the `_ptds` / `_ptsz` functions), and
//! `cudaTypedefs.h` as the driver's own build sees it (`__CUDA_API_VERSION_INTERNAL`): every
//! `PFN_cuX_v<version>` typedef, the declarations of the older exported symbols, and the few
//! types only those use. Each typedef is matched to its exported symbol (`cuX`, `cuX_v2`, ... in
//! ABI order, newest to newest, parameter types checked), which gives every binding its ABI
//! version, and every ABI of a function with several becomes a binding of its own
//! (`cuX_v<version>`). The files: `types.rs`, `functions.rs` (the `pfn`, `fns`, `Driver` and
//! C-shaped items), `symbols.rs` (the table of bindings, plain data), `typedefs.rs`, `results.rs`.

mod abi;
mod bindgen_run;
mod emit;
mod generate;
mod header;
mod library;
mod nccl;
mod nvrtc;
mod output;
mod sha256;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("build-support: {e}");
            ExitCode::FAILURE
        }
    }
}

type Result<T, E = String> = std::result::Result<T, E>;

fn run() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_default();
    let mut include = std::env::var_os("CUDA_INCLUDE_DIR").map(PathBuf::from);
    let mut nccl_include = std::env::var_os("NCCL_INCLUDE_DIR").map(PathBuf::from);
    let mut nvrtc_include = std::env::var_os("NVRTC_INCLUDE_DIR").map(PathBuf::from);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--include" => include = Some(args.next().ok_or("--include needs a folder")?.into()),
            "--nccl-include" => {
                nccl_include = Some(args.next().ok_or("--nccl-include needs a folder")?.into())
            }
            "--nvrtc-include" => {
                nvrtc_include = Some(args.next().ok_or("--nvrtc-include needs a folder")?.into())
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let root = workspace_root();
    let include = match include {
        Some(dir) => dir,
        None => header::fetch_wheel(&root)?,
    };
    let nccl_include = match nccl_include {
        Some(dir) => dir,
        None => header::fetch_nccl_wheel(&root)?,
    };
    let nvrtc_include = match nvrtc_include {
        Some(dir) => dir,
        None => header::fetch_nvrtc_wheel(&root)?,
    };
    let includes = output::Includes {
        cuda: include,
        nccl: nccl_include,
        nvrtc: nvrtc_include,
    };
    let out_dir = root.join("cuda-sys/src/generated");
    match mode.as_str() {
        "generate" => output::write(&includes, &out_dir),
        "check" => output::check(&includes, &out_dir),
        _ => Err(
            "usage: build-support (generate|check) [--include DIR] [--nccl-include DIR] \
                  [--nvrtc-include DIR]"
                .into(),
        ),
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("build-support sits inside the workspace")
        .to_path_buf()
}
