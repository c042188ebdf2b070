//! The raw CUDA driver API, loaded at run time.
//!
//! Every `cu*` function of the pinned `cuda.h` (CUDA 13.0) is here under the name a C programmer
//! writes, with the ABI the header means: [`cuStreamDestroy`] calls the exported symbol
//! `cuStreamDestroy_v2`, exactly as `#define cuStreamDestroy cuStreamDestroy_v2` makes C do. The
//! per-thread-default-stream variants that a build with `CUDA_API_PER_THREAD_DEFAULT_STREAM`
//! calls are bound under their exported names (`cuMemcpyHtoDAsync_v2_ptsz`). Types,
//! enums (as newtypes, so an unknown value from a newer driver is never undefined behaviour),
//! constants and structs come with them. The bindings are generated offline by `build-support` and
//! committed: building needs no CUDA toolkit, no libclang and no build script.
//!
//! Nothing links against libcuda. The driver library is opened with [`libloading`] the first time a
//! function needs it, and each symbol is resolved once, on first use; after that a call costs one
//! load of the cached pointer and the indirect call. A missing library or symbol is an error value
//! ([`LoadError`]), never a panic.
//!
//! Three ways to call a function:
//!
//! - C-shaped, through the process-wide driver: `unsafe { cuInit(0) }` returns a [`CUresult`];
//!   if the driver or the symbol is missing it returns [`LoadError::to_cuda_result`]'s code.
//! - Fallibly, through the process-wide driver: [`fns::cuInit()`] returns the function pointer or
//!   the [`LoadError`] that says what is missing.
//! - Through an explicitly opened [`Driver`]: `Driver::open(path)?.cuInit()?`.
//!
//! ```no_run
//! use cuda_sys::*;
//!
//! let init = fns::cuInit()?; // LoadError if no driver is installed
//! let rc = unsafe { init(0) };
//! assert_eq!(rc, CUresult::CUDA_SUCCESS, "{}", result_name(rc));
//! # Ok::<(), cuda_sys::LoadError>(())
//! ```
//!
//! The process-wide driver is found by [`Driver::open_default`]: the file named by the
//! `CUDA_SYS_LIBCUDA` environment variable if set, then `libcuda.so.1` and `libcuda.so` on Linux,
//! or `nvcuda.dll` from the system folder on Windows.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod loader;
mod results;

/// Generated from `cuda.h`; see the banner of each file.
#[rustfmt::skip]
#[allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    missing_docs,
    clippy::all,
    clippy::pedantic,
    unnecessary_transmutes,
    rust_2018_idioms,
    missing_debug_implementations,
    unpredictable_function_pointer_comparisons,
)]
mod generated {
    pub mod functions;
    pub(crate) mod results;
    // bindgen's own accessors (unions, bitfields): generated, not hand-written unsafe.
    #[allow(clippy::undocumented_unsafe_blocks)]
    pub mod types;
}

pub use generated::functions::*;
pub use generated::types::*;
pub use loader::{Candidate, Driver, LoadError, SymbolInfo};
pub use results::{result_description, result_name};

/// `CUDA_VERSION` of the header the bindings were generated from (`1000 * major + 10 * minor`).
pub const HEADER_CUDA_VERSION: u32 = CUDA_VERSION;

/// Formats a driver version number (`12080`) as `12.8`.
pub fn format_version(version: i32) -> String {
    format!("{}.{}", version / 1000, (version % 1000) / 10)
}
