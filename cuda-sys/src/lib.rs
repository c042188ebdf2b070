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
//! # One build for every driver
//!
//! Every ABI of a function that has had several is bound too, each with its own signature, under
//! the suffix of its `cudaTypedefs.h` typedef: [`cuEventElapsedTime_v2000`] (the original,
//! every driver) next to [`cuEventElapsedTime_v12080`] (CUDA 12.8, which [`cuEventElapsedTime`]
//! means), [`cuCtxCreate_v3020`] to [`cuCtxCreate_v12050`], [`cuStreamGetCaptureInfo_v10010`] to
//! [`cuStreamGetCaptureInfo_v12030_ptsz`], the removed ABIs the driver still exports
//! ([`cuGraphInstantiate_v10000`], [`cuMemAlloc_v2000`], ...). [`SymbolInfo`] records each
//! binding's exported symbol, the base name and ABI version to ask `cuGetProcAddress` for, and
//! whether it is a per-thread default-stream variant; [`typedefs`] has the typedefs themselves,
//! and a test checks that each binding's type is its typedef's.
//!
//! Nothing links against libcuda. The driver library is opened with [`libloading`] the first time a
//! function needs it, and each binding is resolved once, on first use, through the driver's own
//! `cuGetProcAddress` at the binding's ABI version (with the per-thread flag for the `_ptds` /
//! `_ptsz` variants), or by its exported name on drivers before CUDA 11.3. A binding whose ABI is
//! newer than the driver is missing, even if a symbol of that name exists: a pointer is never
//! handed out with another ABI than its type says. After the first call a call costs one load of
//! the cached pointer and the indirect call. A missing library or symbol is an error value
//! ([`LoadError`]), never a panic.
//!
//! The ABIs resolved can be capped below the driver's, to run as on an older driver (and so take
//! the fallbacks code has for one): [`DriverOptions::abi_version`] for an explicitly opened
//! driver, the `CUDA_SYS_ABI_VERSION` environment variable (`12000` or `12.0`) for the
//! process-wide one. [`Driver::abi_version`] tells the newest ABI a driver resolves.
//!
//! Three ways to call a function:
//!
//! - C-shaped, through the process-wide driver: `unsafe { cuInit(0) }` returns a [`CUresult`];
//!   if the driver or the symbol is missing it returns [`LoadError::to_cuda_result`]'s code.
//! - Fallibly, through the process-wide driver: [`fns::cuInit()`] returns the function pointer or
//!   the [`LoadError`] that says what is missing.
//! - Through an explicitly opened [`Driver`]: `unsafe { Driver::open(path) }?.cuInit()?` (opening
//!   a library by path is `unsafe`: its code runs, trusted to be a driver's).
//!
//! ```no_run
//! use cuda_stream_sys::*;
//!
//! let init = fns::cuInit()?; // LoadError if no driver is installed
//! let rc = unsafe { init(0) };
//! assert_eq!(rc, CUresult::CUDA_SUCCESS, "{}", result_name(rc));
//! # Ok::<(), cuda_stream_sys::LoadError>(())
//! ```
//!
//! The process-wide driver is found by [`Driver::open_default`]: the file named by the
//! `CUDA_SYS_LIBCUDA` environment variable if set, then `libcuda.so.1` and `libcuda.so` on Linux,
//! or `nvcuda.dll` from the system folder on Windows. A file that is missing, a directory, empty,
//! or a library that does not export `cuInit` and `cuDriverGetVersion` is refused with an error
//! naming it and what is wrong. That search is safe: the environment variable is the process's
//! own configuration, trusted as `LD_LIBRARY_PATH` is. Opening a library the program's code
//! names ([`Driver::open`]) is `unsafe`, as [`libloading::Library::new`] is.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod loader;
mod results;

/// Generated from `cuda.h`; see the banner of each file.
#[rustfmt::skip]
#[allow(
    unknown_lints, // `unnecessary_transmutes` is newer than the minimum Rust version
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
    #[cfg(feature = "nccl")]
    #[allow(clippy::undocumented_unsafe_blocks)]
    pub mod nccl;
    #[cfg(feature = "nvrtc")]
    #[allow(clippy::undocumented_unsafe_blocks)]
    pub mod nvrtc;
    pub(crate) mod results;
    pub mod symbols {
        //! The table of bindings: plain data, also read by the mock driver's build script.
        use crate::loader::SymbolInfo;
        include!("generated/symbols.rs");
    }
    pub mod typedefs;
    // bindgen's own accessors (unions, bitfields): generated, not hand-written unsafe.
    #[allow(clippy::undocumented_unsafe_blocks)]
    pub mod types;
}

pub use generated::functions::*;
pub use generated::types::*;
/// `cudaTypedefs.h`'s function-pointer typedefs (`PFN_cuEventElapsedTime_v2000`), one per ABI of
/// each driver function, for use with `cuGetProcAddress`. Each binding's [`pfn`] type is the
/// `fn` inside its typedef's `Option` (a test checks it).
pub mod typedefs {
    pub use crate::generated::typedefs::*;
}
pub use loader::{
    ABI_VERSION_VAR, Candidate, DRIVER_PATH_VAR, Driver, DriverOptions, LoadError, Resolver,
    SymbolInfo, parse_cuda_version,
};
pub use results::{result_description, result_name};

/// NCCL, loaded at run time (cargo feature `nccl`): the bindings of the pinned `nccl.h`
/// (NCCL 2.27.7, from the `nvidia-nccl-cu13` wheel), generated by `build-support` like the
/// driver's, and [`Nccl`](nccl::Nccl), the opened library.
///
/// [`Nccl::global`](nccl::Nccl::global) opens the file named by `CUDA_SYS_LIBNCCL` if set, else
/// `libnccl.so.2` then `libnccl.so`; each function is looked up by its exported name on first
/// use. A missing library or function is an error value ([`NcclLoadError`](nccl::NcclLoadError)),
/// never a panic.
///
/// ```no_run
/// use cuda_stream_sys::nccl::{Nccl, ncclResult_t};
///
/// let nccl = Nccl::global()?;
/// println!("NCCL {}", cuda_stream_sys::nccl::format_nccl_version(nccl.version()));
/// let mut id = cuda_stream_sys::nccl::ncclUniqueId::default();
/// // SAFETY: `id` is a valid out-pointer.
/// let rc = unsafe { nccl.ncclGetUniqueId()?(&mut id) };
/// assert_eq!(rc, ncclResult_t::ncclSuccess);
/// # Ok::<(), cuda_stream_sys::nccl::NcclLoadError>(())
/// ```
#[cfg(feature = "nccl")]
#[cfg_attr(docsrs, doc(cfg(feature = "nccl")))]
pub mod nccl {
    pub use crate::generated::nccl::*;
    pub use crate::loader::nccl::{
        NCCL_PATH_VAR, Nccl, NcclLoadError, format_nccl_version, nccl_result_name,
    };
}

/// NVRTC, the run-time compiler of CUDA C++, loaded at run time (cargo feature `nvrtc`): the
/// bindings of the pinned `nvrtc.h` (CUDA 13.0, from the `nvidia-cuda-nvrtc` 13.0.88 wheel),
/// generated by `build-support` like the driver's, and [`Nvrtc`](nvrtc::Nvrtc), the opened
/// library. NVRTC needs no GPU and no driver.
///
/// [`Nvrtc::global`](nvrtc::Nvrtc::global) opens the file named by `CUDA_SYS_LIBNVRTC` if set;
/// else the NVRTC wheel of the Python environment (`python3` is asked where the `nvidia`
/// package lies), then `libnvrtc.so.13`, `libnvrtc.so.12` and `libnvrtc.so` by name, then those
/// files in a CUDA toolkit's `lib64` (`$CUDA_HOME`, `$CUDA_PATH`, `/usr/local/cuda`,
/// `/opt/cuda`); see [`Nvrtc::candidates`](nvrtc::Nvrtc::candidates). Each function is looked up
/// by its exported name on first use. A missing library or function is an error value
/// ([`NvrtcLoadError`](nvrtc::NvrtcLoadError), which lists every place tried and why), never a
/// panic.
///
/// ```no_run
/// use cuda_stream_sys::nvrtc::{Nvrtc, nvrtcResult, nvrtc_result_name};
///
/// let nvrtc = Nvrtc::global()?;
/// let (major, minor) = nvrtc.version();
/// println!("NVRTC {major}.{minor} from {}", nvrtc.path().display());
/// let mut n = 0;
/// // SAFETY: `n` is a valid out-pointer.
/// let rc = unsafe { nvrtc.nvrtcGetNumSupportedArchs()?(&mut n) };
/// assert_eq!(rc, nvrtcResult::NVRTC_SUCCESS, "{}", nvrtc_result_name(rc));
/// # Ok::<(), cuda_stream_sys::nvrtc::NvrtcLoadError>(())
/// ```
#[cfg(feature = "nvrtc")]
#[cfg_attr(docsrs, doc(cfg(feature = "nvrtc")))]
pub mod nvrtc {
    pub use crate::generated::nvrtc::*;
    pub use crate::loader::nvrtc::{NVRTC_PATH_VAR, Nvrtc, NvrtcLoadError, nvrtc_result_name};
}

/// `CUDA_VERSION` of the header the bindings were generated from (`1000 * major + 10 * minor`).
pub const HEADER_CUDA_VERSION: u32 = CUDA_VERSION;

/// Formats a driver version number (`12080`) as `12.8`.
pub fn format_version(version: i32) -> String {
    format!("{}.{}", version / 1000, (version % 1000) / 10)
}
