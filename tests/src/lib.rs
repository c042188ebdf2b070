//! Shared helpers for the GPU integration tests.
//!
//! - [`gpu`]: the primary context of device 0, or `None` (with a printed reason) when there is no
//!   driver or no device. Set `CUDA_STREAM_TESTS_REQUIRE_GPU=1` to turn a skip into a failure.
//! - [`Kernels`]: a tiny PTX module (JIT-compiled by the driver, no toolkit needed) with a
//!   `%globaltimer` spin kernel, a delayed store, a copy and an atomic add, each launched
//!   `<<<1, 1>>>` with `cuLaunchKernel`.
//! - [`saxpy_module`]: `saxpy` and a dynamic-shared-memory `reverse`, loaded through
//!   `cuda-stream`'s own `Module` API, with [`saxpy`] to launch it and [`ramp`] for its input.
//! - [`DeviceBuffer`]: `u32`s in device memory, zeroed on creation, read back on a private
//!   non-blocking stream, so a read never waits for (and so never hides a missing dependency on)
//!   any other stream, the legacy default stream included.
//! - [`RawContext`]: a second, non-primary context (`cuCtxCreate`), destroyed on drop.
//! - [`RawBinding`]: makes a raw context current for a scope, restoring what was current.
//! - [`Window`]: decides whether a "still pending" observation is meaningful.
//! - [`run_as_child`]: a test's case in a child process, killed after a deadline; [`gpu_case_in_child`]:
//!   the whole body of a GPU test run that way.
//! - [`bogus`]: bogus values fed to the safe API, each case in a child process (shared with the
//!   test driver's suite).
//! - [`random_programs`]: seeded random programs over the safe API with a reference model (shared
//!   with the test driver's suite, which runs them with its race detector).
//!
//! The helpers panic on driver errors: they are test infrastructure, and a panic names the call.

pub use cuda_stream;
pub use cuda_stream_sys as sys;

pub mod bogus;
mod child;
mod context;
mod gate;
mod gpu;
mod kernels;
mod memory;
mod process;
pub mod random_programs;
mod saxpy;
mod window;

pub use child::{gpu_case_in_child, run_as_child};
pub use context::{
    HasContext, RawBinding, RawContext, bind, bind_raw, current_context, raw_query,
    raw_stream_create, raw_stream_destroy, set_current_context,
};
pub use gate::gate;
pub use gpu::{
    REQUIRE_GPU_VAR, SANITIZER_VAR, alone, alongside_others, check, error_chain, gpu, sanitizer,
};
pub use kernels::{Kernels, ptx_source};
pub use memory::{DeviceBuffer, device_memory, read_u32s};
pub use process::{mib, rss_bytes};
pub use saxpy::{SAXPY_PTX, ramp, saxpy, saxpy_module};
pub use window::Window;
