//! Run-time compilation of CUDA C++ with NVRTC (cargo feature `nvrtc`).
//!
//! NVRTC is opened at run time, as the driver is: the file named by `CUDA_SYS_LIBNVRTC`, else
//! the NVRTC wheel of the Python environment (`pip install nvidia-cuda-nvrtc`, as PyTorch
//! installs it), `libnvrtc.so.13` / `.so.12` by name, or a CUDA toolkit's
//! ([`Nvrtc::candidates`](crate::ffi::nvrtc::Nvrtc::candidates) has the order). A machine
//! without it gets [`Error::NvrtcLoad`](crate::Error::NvrtcLoad), listing every place tried,
//! from the first compilation, never a panic. NVRTC itself needs no GPU and no driver.
//!
//! A [`Program`] is source, headers given by name, options and name expressions (the instances
//! of kernel templates to compile, such as `scale<float>`). [`Program::compile`] compiles it for
//! a device: CUBIN for the architecture of its compute capability where the loaded NVRTC
//! supports it ([`supported_archs`]), PTX otherwise, or what [`Program::output`] asks for;
//! [`Program::compile_for`] for any [`Arch`]. The [`CompiledProgram`] has the [`Code`], the
//! compiler's log and the lowered (mangled) name of each name expression, and
//! [`CompiledProgram::load`] makes it a [`Module`](crate::Module) in one call, whose kernels
//! launch, typed or not, as any module's. A program that does not compile is
//! [`Error::NvrtcCompile`](crate::Error::NvrtcCompile) (`nvrtcCompileProgram:
//! NVRTC_ERROR_COMPILATION`), whose `source()` is the compiler's log with the error's line.
//!
//! ```no_run
//! use cuda_stream::nvrtc::{Arch, CodeKind, Program};
//!
//! let program = Program::new("template <int N> __global__ void add(int *x) { x[0] += N; }")
//!     .name_expression("add<3>");
//! // No GPU needed: PTX for sm_90, as the driver would JIT-compile it.
//! let compiled = program.output(CodeKind::Ptx).compile_for(Arch::new(9, 0))?;
//! assert_eq!(compiled.lowered_name("add<3>")?, "_Z3addILi3EEvPi");
//! # Ok::<(), cuda_stream::Error>(())
//! ```
//!
//! A compile error, with the log:
//!
//! ```no_run
//! use std::error::Error as _;
//! use cuda_stream::nvrtc::{Arch, Program};
//!
//! let err = Program::new("__global__ void k() { undeclared(); }")
//!     .compile_for(Arch::new(9, 0))
//!     .unwrap_err();
//! assert_eq!(err.to_string(), "nvrtcCompileProgram: NVRTC_ERROR_COMPILATION");
//! let log = err.source().unwrap().to_string();
//! assert!(log.contains("program.cu(1): error: identifier \"undeclared\" is undefined"));
//! ```

// Bottom to top: each module imports only the ones above it (checked by tests/layers.rs).
pub(crate) mod call;

pub(crate) mod arch;

pub(crate) mod compiled;

pub(crate) mod program;

pub use crate::base::error::CompileLog;
pub use arch::{Arch, CodeKind, supported_archs};
pub use call::version;
pub use compiled::{Code, CompiledProgram};
pub use program::Program;
