//! Opening the driver library and resolving its symbols, lazily and once.
//!
//! Each binding stands for one ABI of one driver function (see [`SymbolInfo`]). The first use of
//! a binding resolves it in the cold path ([`Driver::symbol`] then `resolve`):
//!
//! 1. a binding whose ABI is newer than the driver, or than the configured ABI limit
//!    ([`DriverOptions::abi_version`], `CUDA_SYS_ABI_VERSION`), is missing, whatever the library
//!    exports: a pointer with another ABI is never handed out;
//! 2. the driver's own `cuGetProcAddress` (`cuGetProcAddress_v2` from CUDA 12.0, the four-argument
//!    one from 11.3) is asked for the binding's base name at the binding's ABI version, with the
//!    per-thread-default-stream flag for the `_ptds` / `_ptsz` variants;
//! 3. where the driver has no `cuGetProcAddress`, or it does not return the function, the exported
//!    symbol is looked up by name (`dlsym`): its name is the ABI.
//!
//! The outcome, found or missing, is cached in the binding's slot; later calls load the slot.

#[cfg(any(feature = "nccl", feature = "nvrtc"))]
mod by_name;
mod driver;
mod error;
mod global;
#[cfg(feature = "nccl")]
pub(crate) mod nccl;
#[cfg(feature = "nvrtc")]
pub(crate) mod nvrtc;
mod options;
mod resolve;
mod symbol;

pub use driver::{DRIVER_PATH_VAR, Driver};
pub use error::{Candidate, LoadError};
pub(crate) use global::global_symbol;
pub use options::{ABI_VERSION_VAR, DriverOptions, parse_cuda_version};
pub use resolve::Resolver;
pub use symbol::SymbolInfo;
