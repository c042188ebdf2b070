//! Kernel launches: a [`LaunchConfig`], arguments that borrow their values ([`KernelArg`],
//! [`kernel_args!`](crate::kernel_args)), and [`Function::launch`] on anything work can be
//! enqueued on.

use std::ffi::c_void;
use std::fmt;
use std::ptr;

use crate::base::error::{Error, Result, check, driver_fn};
use crate::base::plain_data::DeviceCopy;
use crate::ffi;
use crate::kernel::module::Function;
use crate::memory::buffer::BufferUse;
use crate::memory::buffer_ops::enqueue_with_uses;
use crate::stream::view::{Enqueue, bind_if_special};

/// Three dimensions of a grid or a block; `From` a `u32` (`x`), a pair or a triple.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Dim3 {
    /// Along x.
    pub x: u32,
    /// Along y.
    pub y: u32,
    /// Along z.
    pub z: u32,
}

impl Dim3 {
    /// `x * y * z`, without overflow.
    pub fn volume(self) -> u64 {
        u64::from(self.x) * u64::from(self.y) * u64::from(self.z)
    }
}

impl From<u32> for Dim3 {
    fn from(x: u32) -> Dim3 {
        Dim3 { x, y: 1, z: 1 }
    }
}

impl From<(u32, u32)> for Dim3 {
    fn from((x, y): (u32, u32)) -> Dim3 {
        Dim3 { x, y, z: 1 }
    }
}

impl From<(u32, u32, u32)> for Dim3 {
    fn from((x, y, z): (u32, u32, u32)) -> Dim3 {
        Dim3 { x, y, z }
    }
}

impl fmt::Display for Dim3 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({}, {}, {})", self.x, self.y, self.z)
    }
}

/// The shape of a launch: the grid of blocks, the threads of a block, and the dynamic shared
/// memory of a block.
///
/// ```
/// use cuda_stream::LaunchConfig;
///
/// let c = LaunchConfig::for_elements(1_000_000, 256);
/// assert_eq!((c.grid.x, c.block.x), (3907, 256));
/// let tiled = LaunchConfig::new((64, 64), (16, 16)).shared_memory(4096);
/// assert_eq!(tiled.block.volume(), 256);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LaunchConfig {
    /// Blocks in the grid.
    pub grid: Dim3,
    /// Threads in a block.
    pub block: Dim3,
    /// Dynamic shared memory per block, in bytes (`extern __shared__` arrays).
    pub shared_memory_bytes: u32,
}

impl LaunchConfig {
    /// `grid` blocks of `block` threads, no dynamic shared memory.
    pub fn new(grid: impl Into<Dim3>, block: impl Into<Dim3>) -> LaunchConfig {
        LaunchConfig {
            grid: grid.into(),
            block: block.into(),
            shared_memory_bytes: 0,
        }
    }

    /// One thread per element for `n` elements, in blocks of `block_size` threads: the grid is
    /// `n / block_size` rounded up (so the kernel checks its index against `n`). For `n == 0`
    /// the grid is empty, which a launch refuses.
    pub fn for_elements(n: u32, block_size: u32) -> LaunchConfig {
        LaunchConfig::new(n.div_ceil(block_size.max(1)), block_size)
    }

    /// With `bytes` of dynamic shared memory per block.
    pub fn shared_memory(mut self, bytes: u32) -> LaunchConfig {
        self.shared_memory_bytes = bytes;
        self
    }

    /// Refuses what no kernel can run: an empty grid or block, or a block of more threads than
    /// `max_threads` (0: unknown, not checked).
    fn check(&self, max_threads: u32) -> Result<()> {
        let bad = |reason: String| Err(Error::InvalidLaunch { reason });
        if self.grid.volume() == 0 {
            return bad(format!("empty grid {}", self.grid));
        }
        if self.block.volume() == 0 {
            return bad(format!("empty block {}", self.block));
        }
        if max_threads != 0 && self.block.volume() > u64::from(max_threads) {
            return bad(format!(
                "a block {} of {} threads, more than the kernel's maximum of {max_threads}",
                self.block,
                self.block.volume()
            ));
        }
        Ok(())
    }
}

/// One kernel argument: a pointer to a value that the driver copies when the kernel is
/// launched, borrowed for `'a` so the value outlives the launch call, and, for a buffer passed
/// as [`DeviceBuffer::read`](crate::DeviceBuffer::read) or
/// [`write`](crate::DeviceBuffer::write), the use the launch records. Build them with
/// [`kernel_args!`](crate::kernel_args) or [`KernelArg::new`].
#[derive(Clone, Copy)]
pub struct KernelArg<'a> {
    ptr: *mut c_void,
    buffer: Option<BufferUse<'a>>,
}

impl fmt::Debug for KernelArg<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut t = f.debug_tuple("KernelArg");
        t.field(&self.ptr);
        if let Some(b) = &self.buffer {
            t.field(b);
        }
        t.finish()
    }
}

impl<'a> KernelArg<'a> {
    /// An argument whose value is `*value`: for a kernel parameter of `T`'s size and layout (a
    /// `u32` for `.param .u32`, a `CUdeviceptr` or `u64` for a pointer, a `#[repr(C)]` struct for
    /// a struct). Passing a buffer itself does not compile (buffers are not [`DeviceCopy`]):
    /// pass [`buf.read()`](crate::DeviceBuffer::read) or
    /// [`buf.write()`](crate::DeviceBuffer::write).
    pub fn new<T: DeviceCopy>(value: &'a T) -> KernelArg<'a> {
        KernelArg {
            ptr: ptr::from_ref(value).cast_mut().cast(),
            buffer: None,
        }
    }

    /// A buffer argument: the kernel receives its device address, and the launch orders and
    /// records the use (see [`Function::launch`]).
    pub fn buffer(buffer: &'a BufferUse<'a>) -> KernelArg<'a> {
        KernelArg {
            ptr: ptr::from_ref(buffer.ptr_ref()).cast_mut().cast(),
            buffer: Some(*buffer),
        }
    }

    /// An argument from a raw pointer to its value, for values whose type is not `DeviceCopy`.
    /// Creating one is safe; [`Function::launch`]'s contract covers what it points to.
    pub fn from_ptr(ptr: *const c_void) -> KernelArg<'a> {
        KernelArg {
            ptr: ptr.cast_mut(),
            buffer: None,
        }
    }

    /// The pointer passed to the driver.
    pub fn as_ptr(self) -> *const c_void {
        self.ptr
    }
}

/// What [`kernel_args!`](crate::kernel_args) accepts: a [`DeviceCopy`] value, or a buffer's
/// [`BufferUse`] (`buf.read()`, `buf.write()`).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a kernel argument",
    label = "not a kernel argument",
    note = "kernel arguments are `DeviceCopy` values (integers, floats, arrays of them, `#[repr(C)]` structs) or buffers passed as `buf.read()` / `buf.write()`"
)]
pub trait AsKernelArg {
    /// The argument, borrowing `self`.
    fn as_kernel_arg(&self) -> KernelArg<'_>;
}

impl<T: DeviceCopy> AsKernelArg for T {
    #[inline(always)]
    fn as_kernel_arg(&self) -> KernelArg<'_> {
        KernelArg::new(self)
    }
}

impl AsKernelArg for BufferUse<'_> {
    #[inline(always)]
    fn as_kernel_arg(&self) -> KernelArg<'_> {
        KernelArg::buffer(self)
    }
}

/// An array of [`KernelArg`]s, one per expression, each borrowing its value (temporaries live to
/// the end of the statement, so pass the array straight to [`Function::launch`]). A buffer is
/// passed as `buf.read()` or `buf.write()`, which the launch orders and records.
///
/// ```
/// use cuda_stream::{KernelArg, kernel_args};
///
/// let (n, scale, data) = (1024u32, 2.5f32, 0x7f00_0000_0000u64);
/// let args = kernel_args![n, scale, data];
/// assert_eq!(args.len(), 3);
/// assert_eq!(args[0].as_ptr(), KernelArg::new(&n).as_ptr());
/// ```
#[macro_export]
macro_rules! kernel_args {
    ($($arg:expr),* $(,)?) => {
        [$($crate::AsKernelArg::as_kernel_arg(&$arg)),*]
    };
}

/// The most parameters a launch passes from the stack; more go through a `Vec`.
const STACK_PARAMS: usize = 24;

impl Function<'_> {
    /// Enqueues this kernel on `stream` (`cuLaunchKernel`): `config.grid` blocks of
    /// `config.block` threads, with `args` as its parameters, after the work enqueued there so
    /// far. Returns at once. Works on every stream, owned, pooled, borrowed or default (whose
    /// context is made current for the call), and inside a graph capture.
    ///
    /// A buffer passed as [`buf.read()`](crate::DeviceBuffer::read) or
    /// [`buf.write()`](crate::DeviceBuffer::write) is ordered for you: the stream first waits
    /// for the buffer's earlier uses on other streams that this one conflicts with, the launch
    /// is recorded as a use (so later uses elsewhere wait for it, and the buffer's free waits
    /// for it), and inside a capture the graph keeps the buffer allocated for its replays.
    ///
    /// Refused before the driver is called: a stream or a buffer of another context than the
    /// module's ([`Error::ContextMismatch`]), an empty grid or block, or a block of more threads
    /// than [`max_threads_per_block`](Function::max_threads_per_block)
    /// ([`Error::InvalidLaunch`]). A kernel that faults while it runs (an illegal address, a
    /// trap) is reported by a later synchronisation, as a driver error that leaves the context
    /// unusable, as in every CUDA API.
    ///
    /// ```no_run
    /// # fn demo(module: &cuda_stream::Module, stream: &cuda_stream::OwnedStream,
    /// #         x: &cuda_stream::DeviceBuffer<f32>, y: &mut cuda_stream::DeviceBuffer<f32>)
    /// #         -> cuda_stream::Result<()> {
    /// use cuda_stream::{LaunchConfig, kernel_args};
    ///
    /// // extern "C" __global__ void saxpy(unsigned n, float a, const float *x, float *y)
    /// let saxpy = module.function("saxpy")?;
    /// let n = x.len() as u32;
    /// // SAFETY: the parameters are (u32, f32, pointer, pointer); `x` and `y` hold `n` floats,
    /// // and the kernel reads `x[..n]` and writes `y[..n]` only.
    /// unsafe {
    ///     saxpy.launch(
    ///         stream,
    ///         LaunchConfig::for_elements(n, 256),
    ///         &kernel_args![n, 2.0f32, x.read(), y.write()],
    ///     )
    /// }?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Safety
    ///
    /// The driver cannot check arguments against the kernel's parameters, nor what the kernel
    /// does with them. The caller promises that:
    ///
    /// - `args` has exactly one entry per kernel parameter, in order, each pointing to a value of
    ///   exactly the parameter's size and layout (a `u32` for `.param .u32`, a buffer or a 64-bit
    ///   device address for a pointer, a `#[repr(C)]` struct of the same layout for a struct);
    /// - the kernel accesses a buffer passed as `read()` / `write()` only within its length, and
    ///   writes only those passed as `write()`;
    /// - any other memory the kernel reads or writes (a raw
    ///   [`device_ptr`](crate::DeviceBuffer::device_ptr), mapped host memory, pointers inside
    ///   structs) is valid for those accesses for as long as the kernel runs: until the
    ///   stream's work up to this launch has completed, and, when the launch is recorded into a
    ///   graph capture, for every launch of every graph and executable graph made from it (tie
    ///   a buffer to the capture with
    ///   [`DeviceBuffer::keep_alive_in`](crate::DeviceBuffer::keep_alive_in), other memory's
    ///   owner with [`CaptureStream::keep_alive`](crate::CaptureStream::keep_alive)), and such
    ///   accesses do not race with other work or with the host;
    /// - the module stays loaded while a graph that contains the launch can still run (dropping a
    ///   [`Module`](crate::Module) waits for its context's stream work, not for graphs: give the
    ///   capture an `Arc<Module>` with [`CaptureStream::keep_alive`](crate::CaptureStream::keep_alive),
    ///   or keep the module until the graphs are gone).
    ///
    /// The kernel's own memory safety (indexes within bounds) is part of this promise.
    pub unsafe fn launch(
        &self,
        stream: &impl Enqueue,
        config: LaunchConfig,
        args: &[KernelArg<'_>],
    ) -> Result<()> {
        let (raw, ctx) = stream.enqueue_handle();
        if ctx != self.context_raw() {
            return Err(Error::ContextMismatch {
                what: "the kernel's module",
            });
        }
        config.check(self.max_threads_per_block())?;
        let _bound = bind_if_special(raw, ctx)?;
        let mut stack = [ptr::null_mut::<c_void>(); STACK_PARAMS];
        let mut heap = Vec::new();
        let params: &mut [*mut c_void] = if args.len() <= STACK_PARAMS {
            &mut stack[..args.len()]
        } else {
            heap.resize(args.len(), ptr::null_mut());
            &mut heap
        };
        let mut tracked = false;
        for (p, a) in params.iter_mut().zip(args) {
            *p = a.ptr;
            if let Some(b) = &a.buffer {
                if b.context_raw() != ctx {
                    return Err(Error::ContextMismatch {
                        what: "a buffer argument",
                    });
                }
                tracked = true;
            }
        }
        let params: &[*mut c_void] = params;
        let launch = move || {
            // SAFETY: the caller's contract (see `launch_params`).
            unsafe { self.launch_params(raw, config, params) }
        };
        if !tracked {
            return launch();
        }
        let list: Vec<_> = args
            .iter()
            .filter_map(|a| a.buffer.as_ref().map(BufferUse::alloc_use))
            .collect();
        enqueue_with_uses(raw, ctx, &list, launch)
    }

    /// `cuLaunchKernel` with `params` (one pointer per parameter) on `raw`, a stream of the
    /// module's context, after the configuration was checked.
    ///
    /// # Safety
    ///
    /// [`launch`](Function::launch)'s contract.
    unsafe fn launch_params(
        &self,
        raw: ffi::CUstream,
        config: LaunchConfig,
        params: &[*mut c_void],
    ) -> Result<()> {
        let f = driver_fn!(cuLaunchKernel);
        let LaunchConfig {
            grid,
            block,
            shared_memory_bytes,
        } = config;
        let params = if params.is_empty() {
            ptr::null_mut()
        } else {
            // The driver only reads the array.
            params.as_ptr().cast_mut()
        };
        // SAFETY: the function belongs to the stream's context (checked by the caller) and its
        // module is loaded; the caller promises that the parameters match the kernel's, each
        // pointing to a live value (borrowed for the call: the driver copies them at launch),
        // and that the kernel's memory accesses are valid; `extra` is null.
        let rc = unsafe {
            f(
                self.raw(),
                grid.x,
                grid.y,
                grid.z,
                block.x,
                block.y,
                block.z,
                shared_memory_bytes,
                raw,
                params,
                ptr::null_mut(),
            )
        };
        check(rc, "cuLaunchKernel")
    }
}
