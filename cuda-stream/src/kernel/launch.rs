//! Kernel launches: arguments that borrow their values ([`KernelArg`],
//! [`kernel_args!`](crate::kernel_args)), checked against the kernel's parameters, and
//! [`Function::launch`] on anything work can be enqueued on.

use std::ffi::c_void;
use std::fmt;
use std::ptr;
use std::sync::Arc;

use crate::base::error::{Error, Result, check, driver_fn};
use crate::base::params::{check_args, param_size};
use crate::base::plain_data::{ArgKind, DeviceCopy};
use crate::driver::context::Context;
use crate::ffi;
use crate::kernel::config::{LaunchAttributes, LaunchConfig};
use crate::kernel::kernel_info::Feature;
use crate::kernel::module::Function;
use crate::memory::across::enqueue_across;
use crate::memory::allocation::Allocation;
use crate::memory::buffer::BufferUse;
use crate::memory::buffer_ops::enqueue_with_uses;
use crate::memory::pool::PoolAccess;
use crate::memory::use_tracking::Access;
use crate::stream::view::{Enqueue, bind_if_special};

/// One kernel argument: a pointer to a value that the driver copies when the kernel is
/// launched, borrowed for `'a` so the value outlives the launch call, and, for a buffer passed
/// as [`DeviceBuffer::read`](crate::DeviceBuffer::read) or
/// [`write`](crate::DeviceBuffer::write), the use the launch records. Build them with
/// [`kernel_args!`](crate::kernel_args) or [`KernelArg::new`].
#[derive(Clone, Copy)]
pub struct KernelArg<'a> {
    ptr: *mut c_void,
    buffer: Option<BufferUse<'a>>,
    /// The value's size in bytes; `None` for unknown (not checked).
    size: Option<u32>,
    kind: ArgKind,
}

impl fmt::Debug for KernelArg<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut t = f.debug_tuple("KernelArg");
        t.field(&self.ptr).field(&self.size).field(&self.kind);
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
    /// [`buf.write()`](crate::DeviceBuffer::write). Nor does a zero-sized value (`[u64; 0]`, an
    /// empty struct), which has no bytes for the parameter (`cargo build` refuses it; `cargo
    /// check`, which stops before code generation, does not see it).
    #[inline(always)]
    pub fn new<T: DeviceCopy>(value: &'a T) -> KernelArg<'a> {
        KernelArg {
            ptr: ptr::from_ref(value).cast_mut().cast(),
            buffer: None,
            size: Some(const { param_size::<T>() }),
            kind: T::KIND,
        }
    }

    /// A buffer argument: the kernel receives its device address, and the launch orders and
    /// records the use (see [`Function::launch`]).
    #[inline(always)]
    pub fn buffer(buffer: &'a BufferUse<'a>) -> KernelArg<'a> {
        KernelArg {
            ptr: ptr::from_ref(buffer.ptr_ref()).cast_mut().cast(),
            buffer: Some(*buffer),
            size: Some(const { param_size::<ffi::CUdeviceptr>() }),
            kind: ArgKind::Pointer,
        }
    }

    /// An argument from a raw pointer to its value, for values whose type is not `DeviceCopy`.
    /// Creating one is safe; [`Function::launch`]'s contract covers what it points to. Its size
    /// is unknown, so a launch checks only that it is there (see [`KernelArg::from_ptr_sized`]).
    pub fn from_ptr(ptr: *const c_void) -> KernelArg<'a> {
        KernelArg {
            ptr: ptr.cast_mut(),
            buffer: None,
            size: None,
            kind: ArgKind::Bytes,
        }
    }

    /// [`KernelArg::from_ptr`] for a value of `size` bytes, which a launch checks against the
    /// parameter's size like any other: a `size` of 0 matches no parameter.
    pub fn from_ptr_sized(ptr: *const c_void, size: u32) -> KernelArg<'a> {
        KernelArg {
            ptr: ptr.cast_mut(),
            buffer: None,
            size: Some(size),
            kind: ArgKind::Bytes,
        }
    }

    /// The pointer passed to the driver.
    pub fn as_ptr(self) -> *const c_void {
        self.ptr
    }

    /// The value's size in bytes, as a launch checks it; `None` for a
    /// [`from_ptr`](KernelArg::from_ptr) argument, whose size is unknown.
    pub fn size(self) -> Option<u32> {
        self.size
    }

    /// What the value is, as a launch checks it.
    pub fn kind(self) -> ArgKind {
        self.kind
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

/// The argument list of an untyped launch ([`Function::launch`]): a slice, an array or a `Vec`
/// of [`KernelArg`]s, as [`kernel_args!`](crate::kernel_args) makes them. A tuple of values is
/// what a [typed kernel](crate::TypedKernel) takes instead.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an argument list of an untyped launch",
    label = "not `&kernel_args![..]`",
    note = "`Function::launch` takes `&kernel_args![a, b.read(), c.write()]`; to pass a tuple of values and buffers, declare the kernel's signature once with `function.typed::<(A, B, C)>()?` and launch the `TypedKernel`"
)]
pub trait LaunchArgs<'a> {
    /// The arguments, in order.
    fn as_args(&self) -> &[KernelArg<'a>];
}

impl<'a> LaunchArgs<'a> for [KernelArg<'a>] {
    fn as_args(&self) -> &[KernelArg<'a>] {
        self
    }
}

impl<'a, const N: usize> LaunchArgs<'a> for [KernelArg<'a>; N] {
    fn as_args(&self) -> &[KernelArg<'a>] {
        self
    }
}

impl<'a> LaunchArgs<'a> for Vec<KernelArg<'a>> {
    fn as_args(&self) -> &[KernelArg<'a>] {
        self
    }
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
    /// for it), and inside a capture the graph keeps the buffer allocated for its replays (a
    /// capture that other code began refuses buffer arguments, [`Error::Refused`]: its graphs
    /// are launched where this crate cannot order them).
    ///
    /// The arguments are checked against the kernel's parameters ([`Function::params`], read
    /// once when the function was looked up): their number, each one's size, and a float for an
    /// integer or pointer parameter or the other way round where the PTX says
    /// ([`Error::ArgumentMismatch`], naming the kernel, the parameter and both sizes). A kernel
    /// whose parameters are unknown ([`Function::params`] is `None`) is not checked: the
    /// caller's promise below covers it. [`Function::typed`] checks once, when it is made (and
    /// refuses a kernel whose parameters are unknown), and takes the values themselves.
    ///
    /// With [launch attributes](crate::LaunchAttributes) set the launch goes through
    /// `cuLaunchKernelEx`; an attribute the driver or the device lacks is
    /// [`Error::UnsupportedAttribute`] (or [`Error::Unsupported`] for `cuLaunchKernelEx` itself).
    ///
    /// A buffer of another device may be passed where its pool grants this device the access
    /// the kernel needs (read for [`read`](crate::DeviceBuffer::read), read-write for
    /// [`write`](crate::DeviceBuffer::write)): [`Context::enable_peer_access`] grants the
    /// default pool, [`MemPool::set_access`](crate::MemPool::set_access) any pool. Its uses are
    /// tracked on its own device (ordered after its conflicting uses there, and recorded there).
    /// Memory from no pool of another device is refused (context peer access would map it, but
    /// the driver cannot be asked whether it is still enabled).
    ///
    /// Refused before the driver is called: a stream of another context than the module's, a
    /// buffer of another context without that access ([`Error::ContextMismatch`]), an empty
    /// grid or block, a block of more threads
    /// than [`max_threads_per_block`](Function::max_threads_per_block), or a grid that is not a
    /// multiple of its clusters ([`Error::InvalidLaunch`]). A kernel that faults while it runs
    /// (an illegal address, a trap) is reported by a later synchronisation, as a driver error
    /// that leaves the context unusable, as in every CUDA API.
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
    /// The arguments' number and sizes are checked where the kernel's parameters are known, but
    /// not their meaning, nor what the kernel does with them. The caller promises that:
    ///
    /// - `args` has exactly one entry per kernel parameter, in order, each pointing to a value of
    ///   exactly the parameter's size and layout (a `u32` for `.param .u32`, a buffer or a 64-bit
    ///   device address for a pointer, a `#[repr(C)]` struct of the same layout for a struct;
    ///   checked by size where [`Function::params`] is known);
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
    ///   or keep the module until the graphs are gone);
    /// - with [`programmatic_serialization`](crate::LaunchConfig::programmatic_serialization),
    ///   the kernel may start before the work enqueued before it on the same stream has
    ///   finished (once the kernel before it triggers, or as soon as it starts): the kernel
    ///   waits (`griddepcontrol.wait`, CUDA's `cudaGridDependencySynchronize()`) before it touches
    ///   any memory that work reads or writes, buffers passed as `read()` / `write()` included.
    ///   The use tracking orders a buffer's uses on one stream by the stream's order, which such
    ///   a launch relaxes; it adds nothing between the two kernels (that would undo what the
    ///   attribute is for), and orders uses on other streams and the free as for any launch.
    ///
    /// The kernel's own memory safety (indexes within bounds, through every address it is
    /// given, as a buffer, an integer or a struct's field) is part of this promise.
    pub unsafe fn launch<'a>(
        &self,
        stream: &impl Enqueue,
        config: LaunchConfig,
        args: &(impl LaunchArgs<'a> + ?Sized),
    ) -> Result<()> {
        let args = args.as_args();
        self.check_args(args)?;
        // SAFETY: the caller's contract; the arguments were checked.
        unsafe { self.launch_checked(stream, config, args) }
    }

    /// Checks `args` against the kernel's parameters, where they are known.
    pub(crate) fn check_args(&self, args: &[KernelArg<'_>]) -> Result<()> {
        match self.params() {
            Some(params) => {
                check_args(params, args.iter().map(|a| (a.size, a.kind))).map_err(|mismatch| {
                    Error::ArgumentMismatch {
                        kernel: self.name().to_string(),
                        mismatch,
                    }
                })
            }
            None => Ok(()),
        }
    }

    /// [`launch`](Function::launch) after the arguments were checked.
    ///
    /// # Safety
    ///
    /// [`launch`](Function::launch)'s contract.
    #[inline]
    pub(crate) unsafe fn launch_checked(
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
        if !config.attributes.is_empty() {
            self.check_attributes(&config.attributes)?;
        }
        let _bound = bind_if_special(raw, ctx)?;
        let mut stack = [ptr::null_mut::<c_void>(); STACK_PARAMS];
        let mut heap = Vec::new();
        let params: &mut [*mut c_void] = if args.len() <= STACK_PARAMS {
            &mut stack[..args.len()]
        } else {
            heap.resize(args.len(), ptr::null_mut());
            &mut heap
        };
        let (mut tracked, mut foreign) = (false, false);
        for (p, a) in params.iter_mut().zip(args) {
            *p = a.ptr;
            if let Some(b) = &a.buffer {
                tracked = true;
                foreign |= b.context_raw() != ctx;
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
        if foreign {
            return launch_with_peer_buffers(raw, ctx, &list, launch);
        }
        enqueue_with_uses(raw, ctx, &list, launch)
    }

    /// Refuses attributes the driver (by its version) or the device lacks.
    fn check_attributes(&self, a: &LaunchAttributes) -> Result<()> {
        // A driver without `cuLaunchKernelEx` takes no attribute at all: say that first.
        let _ = driver_fn!(cuLaunchKernelEx);
        let driver = ffi::Driver::global_if_loaded().and_then(|d| d.driver_version());
        let wanted = [
            (a.cluster.is_some(), Feature::Cluster),
            (a.cooperative, Feature::Cooperative),
            (a.programmatic_serialization, Feature::Programmatic),
            (a.priority.is_some(), Feature::Priority),
        ];
        for (_, feature) in wanted.into_iter().filter(|(on, _)| *on) {
            let unsupported = |reason: String| {
                Err(Error::UnsupportedAttribute {
                    attribute: feature.attribute(),
                    reason,
                })
            };
            if let Some(v) = driver.filter(|&v| v < feature.since()) {
                return unsupported(format!(
                    "it needs CUDA {}, the driver is CUDA {}",
                    ffi::format_version(feature.since()),
                    ffi::format_version(v)
                ));
            }
            if !self.info().supports(feature)? {
                return unsupported(format!("the device lacks {}", feature.device_needs()));
            }
        }
        Ok(())
    }

    /// `cuLaunchKernel` (or `cuLaunchKernelEx` with attributes) with `params` (one pointer per
    /// parameter) on `raw`, a stream of the module's context, after the configuration was
    /// checked.
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
        let LaunchConfig {
            grid,
            block,
            shared_memory_bytes,
            attributes,
        } = config;
        let params = if params.is_empty() {
            ptr::null_mut()
        } else {
            // The driver only reads the array.
            params.as_ptr().cast_mut()
        };
        if !attributes.is_empty() {
            // SAFETY: as below.
            return unsafe { self.launch_ex(raw, &config, params) };
        }
        let f = driver_fn!(cuLaunchKernel);
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

    /// `cuLaunchKernelEx` with `config`'s attributes.
    ///
    /// # Safety
    ///
    /// As [`launch_params`](Function::launch_params); `params` is null or one pointer per
    /// parameter.
    #[cold]
    unsafe fn launch_ex(
        &self,
        raw: ffi::CUstream,
        config: &LaunchConfig,
        params: *mut *mut c_void,
    ) -> Result<()> {
        let f = driver_fn!(cuLaunchKernelEx);
        use ffi::CUlaunchAttributeID as Id;
        let a = &config.attributes;
        let mut attrs = [ffi::CUlaunchAttribute::default(); 4];
        let mut n = 0;
        let mut push = |id: Id, set: &dyn Fn(&mut ffi::CUlaunchAttributeValue)| {
            attrs[n].id = id;
            set(&mut attrs[n].value);
            n += 1;
        };
        if let Some(c) = a.cluster {
            push(Id::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, &|v| {
                v.clusterDim = ffi::CUlaunchAttributeValue_union__bindgen_ty_1 {
                    x: c.x,
                    y: c.y,
                    z: c.z,
                }
            });
        }
        if a.cooperative {
            push(Id::CU_LAUNCH_ATTRIBUTE_COOPERATIVE, &|v| v.cooperative = 1);
        }
        if a.programmatic_serialization {
            push(
                Id::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
                &|v| v.programmaticStreamSerializationAllowed = 1,
            );
        }
        if let Some(p) = a.priority {
            push(Id::CU_LAUNCH_ATTRIBUTE_PRIORITY, &|v| v.priority = p);
        }
        let c = ffi::CUlaunchConfig {
            gridDimX: config.grid.x,
            gridDimY: config.grid.y,
            gridDimZ: config.grid.z,
            blockDimX: config.block.x,
            blockDimY: config.block.y,
            blockDimZ: config.block.z,
            sharedMemBytes: config.shared_memory_bytes,
            hStream: raw,
            attrs: attrs.as_mut_ptr(),
            numAttrs: n as u32,
        };
        // SAFETY: as in `launch_params`; `c` points to `n` initialised attributes that outlive
        // the call; `extra` is null.
        let rc = unsafe { f(&c, self.raw(), params, ptr::null_mut()) };
        check(rc, "cuLaunchKernelEx")
    }
}

/// A launch on `raw` (a stream of `ctx`) whose buffer arguments include memory of other
/// devices: each must come from a pool that grants this device the access the kernel needs
/// ([`MemPool::set_access`](crate::MemPool::set_access), which
/// [`Context::enable_peer_access`](crate::Context::enable_peer_access) makes for the default
/// pool), else the kernel would fault on the device; its uses are tracked on its own context
/// ([`enqueue_across`]).
#[cold]
fn launch_with_peer_buffers(
    raw: ffi::CUstream,
    ctx: ffi::CUcontext,
    list: &[(&Arc<Allocation>, Access)],
    launch: impl FnOnce() -> Result<()>,
) -> Result<()> {
    let home = Context::find_live(ctx).ok_or(Error::ContextMismatch {
        what: "the kernel's module",
    })?;
    for (a, access) in list {
        if a.ctx_raw() == ctx {
            continue;
        }
        let needed = match access {
            Access::Read => PoolAccess::Read,
            Access::Write => PoolAccess::ReadWrite,
        };
        if a.ctx().device() == home.device() || a.peer_access(home.device())? < needed {
            return Err(Error::ContextMismatch {
                what: "a buffer argument of another context, which this device may not \
                       address (grant its pool access: Context::enable_peer_access or \
                       MemPool::set_access)",
            });
        }
    }
    enqueue_across(raw, &home, list, launch)
}
