//! [`DeviceBuffer`]: an owned typed allocation whose uses on streams are recorded, so that a use
//! on another stream waits for the uses it conflicts with and the free waits for all of them,
//! without the host ever waiting. Its operations are in `buffer_ops`.

use std::fmt;
use std::marker::PhantomData;
use std::mem::size_of;
use std::sync::Arc;

use crate::base::error::{Error, Result};
use crate::base::plain_data::DeviceCopy;
use crate::driver::context::Context;
use crate::ffi;
use crate::memory::alloc_calls::refuse_capturing;
use crate::memory::allocation::Allocation;
use crate::memory::pool::MemPool;
use crate::memory::use_tracking::Access;
use crate::stream::view::{AsStream, Enqueue};

/// `len` values of `T` in device memory of one context, freed once its last owner is gone: the
/// buffer, or a graph that work on it was captured into.
///
/// **Streams order its uses for you.** Every safe operation that enqueues work on the buffer
/// ([`fill`](DeviceBuffer::fill), [`copy_from`](DeviceBuffer::copy_from), the host copies, a
/// kernel launch that takes it as [`read`](DeviceBuffer::read) or
/// [`write`](DeviceBuffer::write)) records the use on its stream. A later use on another stream
/// first waits for the earlier uses it conflicts with: a read for the last write, a write for
/// the last write and every read since. Reads on several streams overlap. There is no
/// `record_stream` to forget. On streams this crate created a use costs no event until another
/// stream needs to wait for it, so a buffer used on one stream never pays for one; on other
/// streams (borrowed, default streams, and a stream whose handle was taken with `raw()`, which
/// other code may capture) an event is recorded after each use. The ordering model, and what
/// each operation does to keep it, is written down in the docs of the crate's
/// `memory::use_tracking` module.
///
/// **Allocation and free never wait for the device.** On a device with memory pools (CUDA
/// 11.2+), [`alloc_on`](DeviceBuffer::alloc_on), [`zeroed`](DeviceBuffer::zeroed) and
/// [`from_host`](DeviceBuffer::from_host) allocate on their stream from the device's default
/// pool (or a [`MemPool`] with the `_in` forms), and the drop frees in stream order after every
/// recorded use (`cuMemFreeAsync`): it returns at once, synchronises nothing, and leaves
/// captures on other threads alone. Without pools the memory comes from `cuMemAlloc`, and its
/// free is made once events recorded after its uses have completed (polled at later
/// allocations and frees). Inside a host function the free is queued for an ordinary thread.
///
/// **Graphs.** On a stream that is being captured, an operation becomes a graph node, and the
/// capture's graph takes a reference to the allocation (a driver user object) before the node
/// is recorded: the graph and every executable graph made from it keep the memory allocated for
/// their replays. A use inside a capture is ordered by the graph; an earlier use on another
/// stream that it conflicts with cannot become an edge of the graph, so the host waits for it
/// before the node is recorded (usually long complete: an event query). Allocation inside a
/// capture is refused ([`Error::Capturing`]; a [`GraphBuffer`](crate::GraphBuffer) is memory
/// that lives inside one replay). Each launch of an executable graph counts as a write of every
/// buffer its graph holds: it waits for their other uses, and later uses on other streams wait
/// for it. In a capture that other code began (a framework's, reached through
/// [`Stream::in_capture`](crate::Stream::in_capture) or a borrowed stream), whose graphs are
/// launched where this crate cannot order them, operations on the buffer are refused
/// ([`Error::Refused`]); [`keep_alive_in`](DeviceBuffer::keep_alive_in) still ties it to the
/// graph, for raw work through [`device_ptr`](DeviceBuffer::device_ptr).
///
/// ```no_run
/// use cuda_stream::{Context, DeviceBuffer};
///
/// let ctx = Context::primary(0)?;
/// let (a, b) = (ctx.new_stream()?, ctx.new_stream()?);
/// let x = DeviceBuffer::<f32>::zeroed(&ctx, &a, 1 << 20)?;
/// x.fill(&a, 1.5)?;            // on stream a
/// let host = x.to_vec(&b)?;    // on stream b: waits for the fill first, with no event by hand
/// assert!(host.iter().all(|&v| v == 1.5));
/// drop(x);                     // returns at once; freed on a stream after both uses
/// # Ok::<(), cuda_stream::Error>(())
/// ```
pub struct DeviceBuffer<T: DeviceCopy> {
    /// `alloc.ptr`, kept here so the hot paths read no shared memory.
    ptr: ffi::CUdeviceptr,
    len: usize,
    alloc: Arc<Allocation>,
    _values: PhantomData<T>,
}

// `T: DeviceCopy` is `Send + Sync`; the pointer is device memory, not host memory.
static_assertions::assert_impl_all!(DeviceBuffer<u8>: Send, Sync);

impl<T: DeviceCopy> fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("len", &self.len)
            .field("ctx", &self.alloc.ctx_raw())
            .field("held_by_graphs", &self.is_held_by_graphs())
            .finish()
    }
}

/// A buffer passed to a kernel launch, with what the kernel does to it: made by
/// [`DeviceBuffer::read`] and [`DeviceBuffer::write`], and given to
/// [`kernel_args!`](crate::kernel_args) in place of a device pointer. The launch waits for the
/// uses it conflicts with and records its own; in a capture it ties the buffer to the graph.
#[derive(Clone, Copy)]
pub struct BufferUse<'a> {
    /// The device address, which the kernel receives.
    ptr: ffi::CUdeviceptr,
    alloc: &'a Arc<Allocation>,
    access: Access,
}

impl fmt::Debug for BufferUse<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufferUse")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("access", &self.access)
            .finish()
    }
}

impl<'a> BufferUse<'a> {
    pub(crate) fn new(ptr: ffi::CUdeviceptr, alloc: &'a Arc<Allocation>, access: Access) -> Self {
        BufferUse { ptr, alloc, access }
    }

    /// The address the kernel parameter holds (borrowed: the driver copies it at launch).
    pub(crate) fn ptr_ref(&self) -> &ffi::CUdeviceptr {
        &self.ptr
    }

    /// The allocation's context.
    pub(crate) fn context_raw(&self) -> ffi::CUcontext {
        self.alloc.ctx_raw()
    }

    /// The allocation and the access, for the launch's
    /// [`enqueue_with_uses`](crate::memory::buffer_ops::enqueue_with_uses).
    pub(crate) fn alloc_use(&self) -> (&'a Arc<Allocation>, Access) {
        (self.alloc, self.access)
    }
}

/// The bytes of `len` values of `T`, or [`Error::InvalidArgument`].
pub(crate) fn byte_size<T>(len: usize) -> Result<usize> {
    len.checked_mul(size_of::<T>())
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(|| Error::InvalidArgument {
            reason: format!(
                "{len} values of {} bytes do not fit in memory",
                size_of::<T>()
            ),
        })
}

/// Checks `stream` for an allocation in `ctx`: the same context. Whether it is capturing is
/// asked where the allocation asks the driver (`Allocation::new`).
fn alloc_stream(
    ctx: &Context,
    (raw, stream_ctx): (ffi::CUstream, ffi::CUcontext),
) -> Result<ffi::CUstream> {
    if stream_ctx != ctx.raw() {
        return Err(Error::ContextMismatch { what: "the stream" });
    }
    Ok(raw)
}

impl<T: DeviceCopy> DeviceBuffer<T> {
    pub(crate) fn from_alloc(alloc: Allocation, len: usize) -> DeviceBuffer<T> {
        DeviceBuffer {
            ptr: alloc.ptr,
            len,
            alloc: Arc::new(alloc),
            _values: PhantomData,
        }
    }

    /// A buffer of `len` values over an allocation others share (a module's global variable,
    /// whose module keeps it too).
    pub(crate) fn from_shared(alloc: Arc<Allocation>, len: usize) -> DeviceBuffer<T> {
        DeviceBuffer {
            ptr: alloc.ptr,
            len,
            alloc,
            _values: PhantomData,
        }
    }

    fn empty(ctx: &Context) -> DeviceBuffer<T> {
        DeviceBuffer::from_alloc(Allocation::adopt(ctx, 0), 0)
    }

    /// Allocates `len` values in `ctx` with no stream to order it on: from the device's default
    /// pool on the context's service stream (the first use on another stream waits for the
    /// allocation), or `cuMemAlloc` without pools. The contents are whatever the memory held
    /// (any bytes are a valid `T`). A zero-byte buffer allocates nothing.
    pub fn alloc(ctx: &Context, len: usize) -> Result<DeviceBuffer<T>> {
        let bytes = byte_size::<T>(len)?;
        if bytes == 0 {
            return Ok(DeviceBuffer::empty(ctx));
        }
        Ok(DeviceBuffer::from_shared(
            Allocation::new_unordered(ctx, bytes)?,
            len,
        ))
    }

    /// Allocates `len` values in `ctx` on `stream` (of `ctx`): stream-ordered from the device's
    /// default pool (`cuMemAllocFromPoolAsync`), so work enqueued on `stream` afterwards may use
    /// it and work on other streams waits for the allocation; `cuMemAlloc` on a device without
    /// pools. The contents are undefined bytes. Refused on a capturing stream
    /// ([`Error::Capturing`]), where it would be a graph allocation
    /// ([`GraphBuffer`](crate::GraphBuffer) is that). A block freed earlier on the same stream
    /// and kept there for reuse is handed out without asking the driver anything: this crate
    /// never captures a stream while blocks are kept on it, and on a stream of this crate that
    /// joined another library's capture (by waiting on its work) the block is real memory, whose
    /// every use is then refused until that capture has ended.
    pub fn alloc_on(ctx: &Context, stream: &impl Enqueue, len: usize) -> Result<DeviceBuffer<T>> {
        let raw = alloc_stream(ctx, stream.enqueue_handle())?;
        DeviceBuffer::alloc_raw(ctx, raw, len, None, "DeviceBuffer::alloc_on")
    }

    /// [`alloc_on`](DeviceBuffer::alloc_on) from `pool` (whose context must be the stream's).
    pub fn alloc_in(pool: &MemPool, stream: &impl Enqueue, len: usize) -> Result<DeviceBuffer<T>> {
        let ctx = pool.context();
        let raw = alloc_stream(ctx, stream.enqueue_handle())?;
        DeviceBuffer::alloc_raw(ctx, raw, len, Some(pool), "DeviceBuffer::alloc_in")
    }

    fn alloc_raw(
        ctx: &Context,
        raw: ffi::CUstream,
        len: usize,
        pool: Option<&MemPool>,
        op: &'static str,
    ) -> Result<DeviceBuffer<T>> {
        let bytes = byte_size::<T>(len)?;
        if bytes == 0 {
            // Nothing is allocated, but a capturing stream is refused all the same.
            refuse_capturing(ctx, raw, Some(op))?;
            return Ok(DeviceBuffer::empty(ctx));
        }
        Ok(DeviceBuffer::from_shared(
            Allocation::new(ctx, raw, bytes, pool, Some(op))?,
            len,
        ))
    }

    /// Allocates `len` values on `stream` (see [`alloc_on`](DeviceBuffer::alloc_on)) and
    /// enqueues zeroing them there. Refused on a capturing stream ([`Error::Capturing`]).
    pub fn zeroed(ctx: &Context, stream: &impl Enqueue, len: usize) -> Result<DeviceBuffer<T>> {
        let buf = DeviceBuffer::alloc_on(ctx, stream, len)?;
        buf.zero(stream)?;
        Ok(buf)
    }

    /// [`zeroed`](DeviceBuffer::zeroed) from `pool`.
    pub fn zeroed_in(pool: &MemPool, stream: &impl Enqueue, len: usize) -> Result<DeviceBuffer<T>> {
        let buf = DeviceBuffer::alloc_in(pool, stream, len)?;
        buf.zero(stream)?;
        Ok(buf)
    }

    /// Allocates a buffer holding a copy of `data`: allocated and copied on `stream` (of `ctx`),
    /// then waits for the stream, so `data` is free again on return.
    pub fn from_host(ctx: &Context, stream: &impl AsStream, data: &[T]) -> Result<DeviceBuffer<T>> {
        let view = stream.as_stream();
        let buf = DeviceBuffer::alloc_on(ctx, &view, data.len())?;
        buf.copy_from_host(&view, data)?;
        Ok(buf)
    }

    /// Takes ownership of `len` values at `ptr`, allocated in `ctx` with `cuMemAlloc` (or handed
    /// over by [`into_raw`](DeviceBuffer::into_raw) from a buffer without pools); freed like a
    /// buffer without pools.
    ///
    /// # Safety
    ///
    /// `ptr` must be a live `cuMemAlloc` allocation of `ctx` of at least `len * size_of::<T>()`
    /// bytes (or 0 with a zero-byte length), with no work pending on it, that nothing else frees
    /// or uses after this value (and every graph it is tied to) is gone.
    pub unsafe fn from_raw(ctx: &Context, ptr: ffi::CUdeviceptr, len: usize) -> DeviceBuffer<T> {
        DeviceBuffer::from_alloc(Allocation::adopt(ctx, ptr), len)
    }

    /// Hands the allocation over without freeing it: `(device pointer, len)`, the caller's to
    /// free (`cuMemFreeAsync` or `cuMemFree` for pool memory, `cuMemFree` otherwise). Waits on
    /// the host for every recorded use first, so the caller may free it at once. While a graph
    /// holds the allocation (work on the buffer was captured into it, and it or an executable
    /// graph made from it still exists) the memory cannot be handed over: the graph would free
    /// it too. The buffer then comes back unchanged in the [`IntoRawError`], as it does when the
    /// wait fails (with the driver's error).
    ///
    /// ```no_run
    /// # use cuda_stream::{Context, DeviceBuffer};
    /// # let ctx = Context::primary(0)?;
    /// let buf = DeviceBuffer::<u32>::alloc(&ctx, 16)?;
    /// match buf.into_raw() {
    ///     Ok((ptr, len)) => { /* hand `ptr` to C code, which frees it */ }
    ///     Err(e) => {
    ///         eprintln!("kept: {e}"); // a graph holds it, or the wait failed
    ///         drop(e.into_buffer()); // freed after its uses (by the last graph, if one holds it)
    ///     }
    /// }
    /// # Ok::<(), cuda_stream::Error>(())
    /// ```
    pub fn into_raw(self) -> std::result::Result<(ffi::CUdeviceptr, usize), IntoRawError<T>> {
        let DeviceBuffer {
            ptr, len, alloc, ..
        } = self;
        let back = |alloc, error| IntoRawError {
            buffer: DeviceBuffer {
                ptr,
                len,
                alloc,
                _values: PhantomData,
            },
            error,
        };
        match Arc::try_unwrap(alloc) {
            Ok(alloc) => match alloc.into_raw() {
                Ok(ptr) => Ok((ptr, len)),
                Err(failed) => {
                    let (alloc, error) = *failed;
                    Err(back(Arc::new(alloc), Some(error)))
                }
            },
            Err(alloc) => Err(back(alloc, None)),
        }
    }

    /// Whether a graph (or an executable graph made from one) holds the allocation now, so that
    /// it outlives the buffer: work on the buffer was captured, or it was tied with
    /// [`keep_alive_in`](DeviceBuffer::keep_alive_in). Graphs let go of it as they are
    /// destroyed, on the driver's threads, so the answer can turn to `false` at any time.
    pub fn is_held_by_graphs(&self) -> bool {
        Arc::strong_count(&self.alloc) > 1
    }

    /// How many values.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no values.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The size in bytes.
    pub fn byte_len(&self) -> usize {
        self.len * size_of::<T>()
    }

    /// The device address of the first value (0 for a zero-byte buffer), for the raw functions
    /// and `unsafe` code. Work enqueued with it is not recorded as a use: prefer
    /// [`read`](DeviceBuffer::read) / [`write`](DeviceBuffer::write) in kernel arguments.
    pub fn device_ptr(&self) -> ffi::CUdeviceptr {
        self.ptr
    }

    /// The context the memory belongs to.
    pub fn context(&self) -> &Context {
        self.alloc.ctx()
    }

    /// The pool the memory came from: `Some` for stream-ordered memory (the device's default
    /// pool is opened as a [`MemPool`] value on demand), `None` for `cuMemAlloc` memory.
    pub fn pool(&self) -> Option<MemPool> {
        self.alloc.pool().ok().flatten()
    }

    /// This buffer as a kernel argument that the kernel only reads: the launch waits for the
    /// buffer's last write on another stream, and records a read (reads on several streams
    /// overlap).
    pub fn read(&self) -> BufferUse<'_> {
        BufferUse {
            ptr: self.ptr,
            alloc: &self.alloc,
            access: Access::Read,
        }
    }

    /// This buffer as a kernel argument that the kernel writes (or reads and writes): the launch
    /// waits for every earlier use on other streams, and records a write. Takes `&mut self`, so
    /// no read of the buffer can be held across it.
    pub fn write(&mut self) -> BufferUse<'_> {
        BufferUse {
            ptr: self.ptr,
            alloc: &self.alloc,
            access: Access::Write,
        }
    }

    pub(crate) fn alloc_ref(&self) -> &Arc<Allocation> {
        &self.alloc
    }

    /// The allocation, where nothing else (no graph) holds it.
    pub(crate) fn alloc_mut(&mut self) -> Option<&mut Allocation> {
        Arc::get_mut(&mut self.alloc)
    }

    /// Frees the memory, returning the driver's answer: in stream order after every recorded use
    /// (see [`DeviceBuffer`]); without pools, queued until the uses have completed. The host
    /// never waits. If the free cannot be enqueued the memory is left allocated (leaked). A
    /// free that cannot be ordered yet, because the stream of a use has joined a capture that
    /// other code began, is queued (`Ok`) and made at a later allocation or free, once that
    /// capture has ended.
    ///
    /// While a graph holds the allocation (see [`is_held_by_graphs`](DeviceBuffer::is_held_by_graphs))
    /// this gives up the buffer's share and returns `Ok(())` at once: the memory is freed, in the
    /// same way, once the last graph and executable graph holding it are destroyed.
    ///
    /// Inside a host function no CUDA call is made: the free is queued for an ordinary thread,
    /// as for a drop, and the answer is [`Error::InHostFunction`]. Inside a capture begun on
    /// this thread (any mode but relaxed) it is queued too, made once the capture has ended, and
    /// the answer is `Ok(())`: a free there would invalidate the capture.
    pub fn free(self) -> Result<()> {
        // `into_inner`, not `try_unwrap`: if the last graph lets go meanwhile, one of the two
        // sides still sees itself last and frees.
        match Arc::into_inner(self.alloc) {
            Some(alloc) if crate::driver::deferred_destroy::in_host_fn() => {
                let call = alloc.free_call();
                drop(alloc);
                Err(Error::InHostFunction { call })
            }
            // Inside a capture this thread began: queued, made once the capture has ended.
            Some(alloc) if alloc.deferred_in_capture() => {
                drop(alloc);
                Ok(())
            }
            Some(alloc) => alloc.free(),
            None => Ok(()),
        }
    }
}

/// How many frees of memory without pools wait for the uses recorded on it to complete (they
/// are made at later allocations and frees). For tests; not part of the API (feature
/// `test-hooks`).
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub fn pending_frees() -> usize {
    crate::memory::allocation::pending_frees()
}

/// Makes the frees of memory without pools whose recorded uses have completed now
/// (`cuEventQuery` on each), rather than at the next allocation or free, and returns how many
/// still wait. For tests (never needed for correctness); not part of the API (feature
/// `test-hooks`).
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub fn poll_pending_frees() -> usize {
    crate::memory::allocation::poll_pending_frees();
    crate::memory::allocation::pending_frees()
}

impl<T: DeviceCopy> DeviceBuffer<T> {
    /// The address range of the buffer's use tracker's lock and whether it is held now (feature
    /// `test-hooks`: for a test driver's watchdog; hidden, not part of the API).
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn tracker_lock(&self) -> String {
        let mut out = Vec::new();
        self.alloc_ref().uses.report_lock(&mut out);
        out.concat()
    }
}

/// Why [`DeviceBuffer::into_raw`] handed nothing over: a graph holds the memory, or waiting for
/// the buffer's uses failed. The buffer comes back unchanged
/// ([`into_buffer`](IntoRawError::into_buffer)); the driver's error of the wait is the
/// [`source`](std::error::Error::source).
pub struct IntoRawError<T: DeviceCopy> {
    buffer: DeviceBuffer<T>,
    error: Option<Error>,
}

impl<T: DeviceCopy> IntoRawError<T> {
    /// The buffer, as it was.
    pub fn into_buffer(self) -> DeviceBuffer<T> {
        self.buffer
    }

    /// The buffer, as it was.
    pub fn buffer(&self) -> &DeviceBuffer<T> {
        &self.buffer
    }

    /// The error of the wait for the buffer's uses; `None` when a graph holds the memory.
    pub fn error(&self) -> Option<&Error> {
        self.error.as_ref()
    }

    /// Whether a graph holding the memory is the reason (retry once the graphs are gone).
    pub fn is_held_by_graphs(&self) -> bool {
        self.error.is_none()
    }
}

impl<T: DeviceCopy> fmt::Debug for IntoRawError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IntoRawError")
            .field("buffer", &self.buffer)
            .field("error", &self.error)
            .finish()
    }
}

impl<T: DeviceCopy> fmt::Display for IntoRawError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.error {
            None => f.write_str("a graph still holds the buffer's memory"),
            Some(_) => f.write_str("waiting for the buffer's uses failed"),
        }
    }
}

impl<T: DeviceCopy> std::error::Error for IntoRawError<T> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.as_ref().map(|e| e as _)
    }
}
