//! CUDA streams and events whose ownership rules the compiler checks.
//!
//! - [`OwnedStream`] and [`Event`] own their handles and destroy them on `Drop` (with a fallible
//!   `close` for callers who want the error); `into_raw` hands a handle over.
//! - [`Stream<'a>`](Stream) is a `Copy` borrowed view, in the manner of std's `BorrowedFd<'fd>`:
//!   every operation is written once on it, and anything that implements [`AsStream`] lends one.
//!   A handle from PyTorch, CuPy, cuda.core, cudarc or C is borrowed with the `unsafe`
//!   [`Stream::borrow_raw`], whose lifetime is tied to an owner value the caller names, so the
//!   compiler stops the view outliving it.
//! - The default streams ([`Context::legacy_stream`], [`Context::per_thread_stream`],
//!   [`Context::null_stream`]) are bound to their context and valid no longer than it.
//! - Operations on explicit handles do no context switching (the driver does not need it); the
//!   default streams and creation calls make the right context current for the call only.
//!
//! ```no_run
//! use cuda_stream::{Context, EventOptions, StreamOptions};
//!
//! let ctx = Context::primary(0)?;
//! let producer = ctx.new_stream()?;
//! let consumer = ctx.new_stream()?;
//! // ... enqueue work on `producer` ...
//! consumer.wait_stream(&producer)?; // no event is created per call
//! consumer.launch_host_func(|| println!("after the producer's work"))?;
//! consumer.synchronize()?;
//! # Ok::<(), cuda_stream::Error>(())
//! ```
//!
//! # Device code and memory
//!
//! A [`Module`] is loaded from PTX text (JIT-compiled by the driver, no toolkit needed) or a
//! cubin/fatbin, with the compiler's log in the error when it fails; its kernels are
//! [`Function`]s, launched with the `unsafe` [`Function::launch`] on anything that implements
//! [`Enqueue`]: every stream, and a graph capture. Arguments are checked against the kernel's
//! parameters (their number, sizes, and floats against integers), read once per kernel from the
//! driver or the PTX; a [`TypedKernel`] ([`Function::typed`]) declares its argument tuple once and
//! takes the values themselves, buffers included. Both launches stay `unsafe` for what no
//! library can check: that the kernel accesses only its buffers' elements (writing only those
//! it is given to write), and that any other memory it reaches, through device addresses passed
//! as integers or inside structs, is valid and unraced while it runs. [`LaunchConfig`] carries
//! launch attributes (clusters, cooperative launches, ...) and picks block sizes by occupancy.
//!
//! [`DeviceBuffer`] is memory on streams: allocated from the device's memory pool (or a
//! [`MemPool`]) on a stream, its every safe use (fill, copies, a launch that takes
//! [`read`](DeviceBuffer::read) / [`write`](DeviceBuffer::write)) recorded, so that a use on
//! another stream waits for the uses it conflicts with and the free, in stream order after the
//! last use, never makes the host wait. [`PinnedHostBuffer`] makes asynchronous host copies
//! safe. In a capture the graph keeps the buffers it uses allocated for its replays. The raw
//! [`memset_d32_async`] / [`memcpy_htod_async`] family serves memory the caller manages.
//!
//! ```no_run
//! use cuda_stream::{Context, DeviceBuffer, LaunchConfig, Module, kernel_args};
//!
//! # const SCALE_PTX: &str = "";
//! let ctx = Context::primary(0)?;
//! let (a, b) = (ctx.new_stream()?, ctx.new_stream()?);
//! let module = Module::from_ptx(&ctx, SCALE_PTX)?; // `.entry scale(.param .u64 x, .param .u32 n)`
//! let scale = module.function("scale")?;
//! let mut x = DeviceBuffer::from_host(&ctx, &a, &[1.0f32; 4096])?;
//! let n = x.len() as u32;
//! // SAFETY: `scale` takes (float *x, unsigned n) and reads and writes x[0..n] only.
//! unsafe { scale.launch(&b, LaunchConfig::for_elements(n, 256), &kernel_args![x.write(), n]) }?;
//! let host = x.to_vec(&a)?; // on `a`: waits for the kernel on `b` first
//! # Ok::<(), cuda_stream::Error>(())
//! ```
//!
//! Beyond what the Python stream APIs offer: an exclusive [`StreamPool`] (no aliasing of leased
//! streams), [`Stream::completed`] / [`Event::completed`] futures that need no async runtime, and
//! structured fork/join with [`Stream::scope`].
//!
//! # Graphs
//!
//! [`OwnedStream::capture`] records the work a closure enqueues into a [`Graph`]; instantiate it
//! into a [`GraphExec`] and replay it with [`GraphExec::launch`]. The closure sees the stream
//! through a [`CaptureStream`], which offers only what is legal while capturing, so the usual
//! traps do not compile:
//!
//! - nothing that blocks or polls (`synchronize`, `query`, `completed`, nor `synchronize` on an
//!   event recorded in the capture), and the `&mut` borrow keeps the owner out of reach;
//! - forks come from [`CaptureStream::scope`], which joins them back when it ends, so a capture
//!   cannot end with a fork unjoined (`CUDA_ERROR_STREAM_CAPTURE_UNJOINED`);
//! - host functions are `Fn + Send + Sync + 'static` (a graph runs them on every replay) and are
//!   owned by driver user objects that every graph and executable graph holding them keeps
//!   alive: dropping a `GraphExec` mid-replay is safe;
//! - the view, its forks and its events cannot leave the closure, and the capture always ends
//!   (an error or a panic in the closure discards the graph).
//!
//! A run-once host function ([`Stream::launch_host_func`], [`Stream::completed`]) is refused on a
//! stream that is being captured, by this crate or by other code such as PyTorch: in a graph it
//! would run on every replay. Safe code gets no plain [`Stream`] of a stream that this crate is
//! capturing (a leaked [`CurrentStreamGuard`] names a stream no pool lends again), so no stream
//! it borrows can join such a capture behind a host function's check, and the end of every
//! capture checks that no run-once host function became a node (the module `stream::host_fn`
//! states the rule). [`Stream::capture_status`] tells any stream's status, and
//! [`Stream::in_capture`] enqueues into a capture begun elsewhere.
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use cuda_stream::{CaptureMode, Context};
//!
//! let ctx = Context::primary(0)?;
//! let mut stream = ctx.new_stream()?;
//! let replays = Arc::new(AtomicUsize::new(0));
//! let counter = replays.clone();
//! let graph = stream.capture(CaptureMode::ThreadLocal, |cap| {
//!     cap.scope(|s| {
//!         let (left, right) = (s.fork()?, s.fork()?);
//!         // ... launch kernels on `left` and `right` (anything taking `impl Enqueue`) ...
//!         # let _ = (left, right);
//!         Ok(())
//!     })?; // both forks are joined back here
//!     cap.launch_host_func(move || {
//!         counter.fetch_add(1, Ordering::Relaxed);
//!     })
//! })?;
//! let exec = graph.instantiate()?;
//! for _ in 0..100 {
//!     exec.launch(&stream)?;
//! }
//! stream.synchronize()?;
//! assert_eq!(replays.load(Ordering::Relaxed), 100);
//! # Ok::<(), cuda_stream::Error>(())
//! ```
//!
//! # Interop
//!
//! A framework's stream, borrowed for the duration of a call from Python (through ctypes or
//! PyO3), as `torch.cuda.current_stream().cuda_stream`, CuPy's `stream.ptr` or cuda.core's
//! `int(stream.handle)`:
//!
//! ```no_run
//! use cuda_stream::Stream;
//!
//! #[unsafe(no_mangle)]
//! pub extern "C" fn after_framework_work(handle: usize) -> i32 {
//!     let call = (); // the framework keeps the stream alive while this call runs
//!     // SAFETY: the caller passes a live stream handle and keeps it alive during the call.
//!     match unsafe { Stream::borrow_raw(handle as _, &call) } {
//!         Ok(stream) => stream.launch_host_func(|| ()).map_or(1, |()| 0),
//!         Err(_) => 2,
//!     }
//! }
//! ```
//!
//! A Rust stream lent to a framework: pass `stream.raw() as usize` to
//! `torch.cuda.ExternalStream(handle)`, to CuPy's `Stream.from_external` (through an object
//! whose `__cuda_stream__` returns `(0, handle)`), or to cuda.core's `Stream.from_handle(handle)`,
//! and keep the `OwnedStream` alive while the framework uses it.
//!
//! cudarc: `cudarc::driver::CudaStream::cu_stream()` gives the `CUstream` to borrow with
//! `Stream::borrow_raw(cuda_stream.cu_stream() as _, &cuda_stream)`, which ties the view to the
//! cudarc stream's lifetime; in the other direction pass `stream.raw()` to cudarc's raw APIs.
//!
//! # Contexts and threads
//!
//! [`OwnedStream`], [`Stream`], [`Event`], [`Context`], [`StreamPool`] and [`CaptureStream`] are
//! `Send + Sync`; [`Graph`] and [`GraphExec`] are `Send` only (the driver does not synchronise
//! graph objects: the calls that threads sharing a capture make on its graph are serialised by
//! this crate); [`CurrentStreamGuard`] and [`CaptureModeGuard`] are neither. Resetting a
//! device's primary context (`cuDevicePrimaryCtxReset`) while objects of this crate exist
//! invalidates their handles, as it does for every CUDA library.
//!
//! # Host functions
//!
//! No CUDA call may be made inside a host function or stream callback, and this crate makes
//! none there: every operation that would call the driver (or NCCL) returns
//! [`Error::InHostFunction`] first (the check sits where every driver function is looked up, one
//! thread-local read); a stream, event, pool, context, completion, [`Module`] or
//! [`DeviceBuffer`] whose last owner is dropped inside one is destroyed later, on an ordinary
//! thread (the next call that creates something or synchronizes, the release of its context, or
//! [`drain_deferred`]; a module or buffer after its context's work, as on any thread); `close()`
//! or `free()` there returns [`Error::InHostFunction`]. See [`Stream::launch_host_func`].
//!
//! # Layout
//!
//! The source is laid out in layers, one folder each, whose imports only point down (the test
//! `tests/layers.rs` checks it: folders in the order `lib.rs` declares them, and modules in the
//! order each folder's `mod.rs` declares them). From the bottom:
//!
//! | folder | what it holds |
//! | --- | --- |
//! | `base` | values and errors: [`PriorityRange`], [`CaptureMode`], [`DeviceCopy`] (`plain_data`), whether the thread runs a host function (`host_fn_flag`), [`Error`] (the chokepoints: the lookup of every driver function, refused inside a host function, and the one for `CUresult`s), the newest of a function's ABIs the driver has (`newest_abi`) |
//! | `driver` | driver objects and the host-function rule: destroys deferred out of host functions (`deferred_destroy`), a context's recycled event handles (`recycled_events`), [`Device`], [`Context`], their typed facts (`facts`: [`DeviceProperties`], [`Limit`], [`CacheConfig`], [`MemoryInfo`]), [`Event`], the two capture queries (`capture_query`) |
//! | `stream` | streams: panics caught in host functions (`host_panics`), the streams a current-stream guard names (`guarded_streams`), the per-thread event behind `wait_stream` (`wait_event_cache`), the view [`Stream`] (`view`), [`OwnedStream`], [`StreamPool`], then the conveniences that each add an `impl Stream` block: host functions (`host_fn`), the current stream, [`Completion`], fork/join ([`Scope`]) |
//! | `graph` | host nodes and values kept alive by driver user objects (`user_objects`), [`Graph`] and [`GraphExec`] (`replay`), the capture view [`CaptureStream`] (`capture_view`), capture itself, the capture-mode guard |
//! | `memory` | the raw memset/memcpy functions, [`DeviceBuffer`] |
//! | `kernel` | the PTX's parameter lists (`ptx_params`), what a module records of each kernel (`kernel_info`), [`LaunchConfig`] and its attributes (`config`), [`Module`], [`Function`], checked launches, occupancy, [`TypedKernel`] |
//!
//! Above them, several devices: `peer` ([`Device::can_access_peer`],
//! [`Context::enable_peer_access`], [`DeviceBuffer::copy_from_peer`], and use tracking over
//! several streams and contexts, `memory::across`), then `nccl` (feature `nccl`: NCCL collectives on streams,
//! `Communicator`, `Group`, `NcclId`) and `nvrtc` (feature `nvrtc`: CUDA C++ compiled at run
//! time into a [`Module`], `Program`, `CompiledProgram`).
//!
#![doc = ""]
#![doc = include_str!("../doc/driver-versions.md")]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

/// The raw driver API this crate is built on, the crate
/// [`cuda-stream-sys`](https://docs.rs/cuda-stream-sys), re-exported so that raw handles and types
/// (`ffi::CUstream`, `ffi::CUresult`, ...) come from the very version this crate uses.
///
/// It is a public dependency: the raw handles of this crate's API (`Stream::raw`,
/// `Stream::borrow_raw`, `DeviceBuffer::device_ptr`, ...) have its types. The promise: one release
/// series of cuda-stream re-exports one semver-compatible series of cuda-stream-sys (0.1 for
/// cuda-stream 0.1); a move to an incompatible one (a newer CUDA header) is an incompatible
/// release of cuda-stream too, even where the safe API does not change. Name raw types through
/// this path rather than a dependency of your own on cuda-stream-sys, and the two never differ.
pub use ffi;

// Bottom to top: a module imports only from folders declared above it, and inside a folder
// from the modules its `mod.rs` declares above it.
mod base;

mod driver;

mod stream;

mod graph;

mod memory;

mod kernel;

mod peer;

#[cfg(feature = "nccl")]
#[cfg_attr(docsrs, doc(cfg(feature = "nccl")))]
pub mod nccl;

#[cfg(feature = "nvrtc")]
#[cfg_attr(docsrs, doc(cfg(feature = "nvrtc")))]
pub mod nvrtc;

pub use base::capture_mode::{CaptureMode, CaptureStatus};
pub use base::error::{DriverCode, Error, JitLog, Result};
pub use base::params::{ArgMismatch, ParamInfo, ParamKind};
pub use base::plain_data::{ArgKind, DeviceCopy};
pub use base::priority::PriorityRange;
pub use driver::context::{Context, ContextBinding, current_context_raw};
pub use driver::deferred_destroy::{deferred_pending, drain_deferred};
pub use driver::device::{Device, driver_version, init};
pub use driver::event::{Event, EventOptions, IpcEventHandle};
pub use driver::facts::{CacheConfig, DeviceAttribute, DeviceProperties, Limit, MemoryInfo};
pub use graph::capture_mode_guard::{CaptureModeGuard, exchange_capture_mode};
pub use graph::capture_view::{CaptureScope, CaptureStream, CapturedEvent};
pub use graph::replay::{Graph, GraphExec, InstantiateOptions};
pub use kernel::config::{Dim3, LaunchAttributes, LaunchConfig};
pub use kernel::launch::{AsKernelArg, KernelArg, LaunchArgs};
pub use kernel::module::{Function, JitOptions, Module};
pub use kernel::occupancy::BlockSize;
pub use kernel::typed::{KernelArgFor, KernelArgs, KernelParam, KernelSignature, TypedKernel};
pub use memory::borrowed::BorrowedBuffer;
pub use memory::buffer::{BufferUse, DeviceBuffer, IntoRawError};
pub use memory::graph_buffer::GraphBuffer;
pub use memory::managed::{ManagedBuffer, MemAdvice, MemLocation};
pub use memory::pinned::{PageLocked, PinnedHostBuffer};
pub use memory::pool::{MemPool, PoolAccess, PoolUsage};
pub use memory::raw::{
    memcpy_dtod_async, memcpy_dtoh_async, memcpy_htod_async, memset_d8_async, memset_d16_async,
    memset_d32_async,
};
pub use memory::registered::RegisteredHost;
pub use memory::slice::{AsDeviceSlice, AsDeviceSliceMut, DeviceSlice, DeviceSliceMut};
pub use stream::completion::Completion;
pub use stream::current::{CurrentStreamGuard, current_stream, current_stream_raw};
pub use stream::owned::{OwnedStream, StreamOptions};
pub use stream::pool::{PooledStream, StreamPool};
pub use stream::scope::Scope;
pub use stream::view::{AsStream, Enqueue, Stream};

// Counters and pollers for this workspace's tests (feature `test-hooks`): hidden, and not part
// of the API.
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub use driver::deferred_destroy::{deferred_failed, deferred_total};
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub use memory::buffer::{pending_frees, poll_pending_frees};
/// Points inside the crate where a test holds a thread (feature `test-hooks`; hidden, not part
/// of the API).
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub mod hold_point {
    pub use crate::base::hold_point::{hold_at, release, wait_until_held};
}

/// Which of the crate's global locks (and stream ends' locks) are held now, with their address
/// ranges, and how many threads wait in a context synchronisation for a use nothing marks: for a
/// test driver's watchdog (feature `test-hooks`; hidden, not part of the API).
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub fn lock_report() -> Vec<String> {
    let mut out = Vec::new();
    stream::known_streams::report_locks(&mut out);
    stream::block_cache::report_locks(&mut out);
    stream::host_fn::report_locks(&mut out);
    stream::host_panics::report_locks(&mut out);
    stream::guarded_streams::report_locks(&mut out);
    driver::deferred_destroy::report_locks(&mut out);
    driver::context::report_locks(&mut out);
    memory::allocation::report_locks(&mut out);
    graph::capture::report_locks(&mut out);
    graph::capture_view::report_locks(&mut out);
    graph::replay_uses::report_locks(&mut out);
    graph::user_objects::report_locks(&mut out);
    out.push(format!(
        "threads in cuCtxSynchronize for a use nothing marks: {}",
        memory::use_tracking::threads_in_ctx_synchronize()
    ));
    out
}

static_assertions::assert_impl_all!(OwnedStream: Send, Sync);
static_assertions::assert_impl_all!(Stream<'static>: Send, Sync, Copy);
static_assertions::assert_impl_all!(Event: Send, Sync);
static_assertions::assert_impl_all!(Context: Send, Sync, Clone);
static_assertions::assert_impl_all!(StreamPool: Send, Sync);
static_assertions::assert_impl_all!(PooledStream<'static>: Send, Sync);
static_assertions::assert_not_impl_any!(CurrentStreamGuard<'static>: Send, Sync);
static_assertions::assert_not_impl_any!(Event: Clone, Copy);
static_assertions::assert_impl_all!(Module: Send, Sync);
static_assertions::assert_impl_all!(Function<'static>: Send, Sync, Copy);
static_assertions::assert_impl_all!(DeviceBuffer<f32>: Send, Sync);
static_assertions::assert_not_impl_any!(Module: Clone);
static_assertions::assert_not_impl_any!(DeviceBuffer<f32>: Clone);
static_assertions::assert_not_impl_any!(KernelArg<'static>: Send, Sync);
static_assertions::assert_eq_size!(Stream<'static>, [usize; 2]);
static_assertions::assert_impl_all!(CaptureStream<'static>: Send, Sync, Copy);
static_assertions::assert_impl_all!(CapturedEvent<'static>: Send, Sync, Copy);
static_assertions::assert_not_impl_any!(CaptureModeGuard: Send, Sync);
#[cfg(feature = "nvrtc")]
static_assertions::assert_impl_all!(nvrtc::Program: Send, Sync, Clone);
#[cfg(feature = "nvrtc")]
static_assertions::assert_impl_all!(nvrtc::CompiledProgram: Send, Sync, Clone);

/// The examples of the README (the crate's page on the registry), compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
