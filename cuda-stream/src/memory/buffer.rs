//! [`DeviceBuffer`]: an owned typed allocation with safe operations on any stream that also
//! work inside graph captures (the capture's graph then shares the allocation, through a driver
//! user object, `graph::user_objects::keep_alive`).

use std::fmt;
use std::marker::PhantomData;
use std::mem::size_of;
use std::sync::Arc;

use crate::base::capture_mode::CaptureStatus;
use crate::base::error::{Error, Result, check, driver_fn};
use crate::base::plain_data::DeviceCopy;
use crate::driver::capture_query::{capture_info, is_capturing};
use crate::driver::context::{Bound, Context, bind, destroy_after_work};
use crate::ffi;
use crate::graph::user_objects::keep_alive;
use crate::memory::fill_pattern::{bytes_of, memset_word, unfillable};
use crate::memory::raw::{memcpy_dtoh_async, memcpy_htod_async};
use crate::stream::view::{AsStream, Enqueue, bind_if_special};

/// `len` values of `T` in device memory of one context (`cuMemAlloc`), freed once its last
/// owner is gone: the buffer, or a graph that work on it was captured into.
///
/// The safe operations take the stream they run on: [`fill`](DeviceBuffer::fill) and
/// [`copy_from`](DeviceBuffer::copy_from) only enqueue; [`copy_to_host`](DeviceBuffer::copy_to_host),
/// [`to_vec`](DeviceBuffer::to_vec) and [`copy_from_host`](DeviceBuffer::copy_from_host) enqueue
/// the copy and then wait for the stream, so the host slice is never touched after they return.
/// Ordering between streams is the caller's, as everywhere in CUDA: a missing wait gives wrong
/// values, never undefined behaviour on the host (`T: DeviceCopy` accepts any bytes).
///
/// **Freeing.** `cuMemFree` does not wait for work that still uses the memory. So the free
/// (on `Drop`, or [`free`](DeviceBuffer::free)) first waits for all work of the buffer's context
/// (`cuCtxSynchronize`), then frees: no stream can use the memory after it is freed, whatever
/// streams the buffer was used on. Every safe operation refuses a stream of another context
/// ([`Error::ContextMismatch`]), so that wait covers them all. The price is that a free waits
/// for the whole context: allocate buffers ahead of a hot loop and reuse them (as PyTorch's and
/// CuPy's caching allocators do) rather than dropping one per iteration.
///
/// **Graphs.** A graph can be launched long after its capture, after the buffer is dropped. So
/// the allocation is shared: when [`fill`](DeviceBuffer::fill) or
/// [`copy_from`](DeviceBuffer::copy_from) is given a stream that is being captured (through a
/// [`CaptureStream`](crate::CaptureStream), a fork of it, or any stream in a capture that other
/// code began, such as PyTorch's `torch.cuda.graph`), the capture's graph takes a reference to
/// the allocations involved (a driver user object, as for captured host functions) before the
/// memset or copy node is recorded. The graph, and every graph and executable graph made from
/// it, keep the memory allocated; it is freed (after its context's work, on an ordinary thread)
/// once the buffer and all of them are gone. Outside a capture an operation costs what it always
/// did: one `cuStreamIsCapturing`, then the enqueue. The price is paid at replay: an executable
/// graph that holds user objects cost about 2 µs more per launch than one without (H100, driver
/// 580: 3.8 µs instead of 1.4–2.1 µs to enqueue; one object or several, the same), so where the
/// buffers outlive the executable graph by construction, the `unsafe` raw functions avoid it.
///
/// A kernel launched into a capture uses buffers the crate cannot see:
/// [`keep_alive_in`](DeviceBuffer::keep_alive_in) ties a buffer to the capture's graph in the
/// same way, which is what the launch's `# Safety` contract asks for graph replays. The
/// operations that wait for the stream (`copy_to_host`, `to_vec`, `copy_from_host`) and those
/// that allocate ([`zeroed`](DeviceBuffer::zeroed), [`from_host`](DeviceBuffer::from_host))
/// refuse a capturing stream ([`Error::Capturing`]); an invalidated capture is
/// [`Error::NotCapturing`]. A buffer tied to the graph may be dropped inside the capture (the
/// graph frees it later). Allocate buffers outside captures, as with `cudaMalloc`, and drop
/// untied ones outside them too: during a global or thread-local capture the driver refuses the
/// wait before the free, so an untied buffer dropped there stays allocated (and the capture is
/// invalidated). The wait covers the whole context, so the same holds for a buffer freed on
/// another thread while any stream of its context is capturing: as with `cudaFree`, free
/// buffers between captures (or keep them, as PyTorch's caching allocator does).
///
/// [`into_raw`](DeviceBuffer::into_raw) hands the memory over only while no graph holds it, and
/// [`free`](DeviceBuffer::free) with a graph holding it leaves the free to the last graph.
///
/// ```no_run
/// use cuda_stream::{CaptureMode, Context, DeviceBuffer};
///
/// let ctx = Context::primary(0)?;
/// let mut stream = ctx.new_stream()?;
/// let a = DeviceBuffer::from_host(&ctx, &stream, &[1.0f32, 2.0, 3.0])?;
/// let b = DeviceBuffer::<f32>::zeroed(&ctx, &stream, 3)?;
/// b.copy_from(&stream, &a)?;
/// a.fill(&stream, 0.5)?;
/// assert_eq!(b.to_vec(&stream)?, [1.0, 2.0, 3.0]);
/// assert_eq!(a.to_vec(&stream)?, [0.5; 3]);
///
/// // Captured: the graph keeps `a`'s memory (and `b`'s) for its replays.
/// let graph = stream.capture(CaptureMode::ThreadLocal, |cap| {
///     a.fill(&cap, 4.0)?;
///     b.copy_from(&cap, &a)
/// })?;
/// drop(a);
/// let exec = graph.instantiate()?;
/// exec.launch(&stream)?;
/// assert_eq!(b.to_vec(&stream)?, [4.0; 3]);
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
            .field("ctx", &self.alloc.ctx.raw())
            .field("held_by_graphs", &self.is_held_by_graphs())
            .finish()
    }
}

/// One `cuMemAlloc` allocation (0 for none) of a context, shared by its [`DeviceBuffer`] and
/// the graphs that work on it was captured into (through user objects, see
/// [`keep_alive`]); the last owner frees it.
struct Allocation {
    ptr: ffi::CUdeviceptr,
    ctx: Context,
}

impl Allocation {
    /// Hands the memory over without freeing it.
    fn into_raw(mut self) -> ffi::CUdeviceptr {
        // `Drop` then frees nothing.
        std::mem::replace(&mut self.ptr, 0)
    }

    /// Frees the memory now (after the context's work), returning the driver's answer.
    fn free(mut self) -> Result<()> {
        let ptr = std::mem::replace(&mut self.ptr, 0);
        free(ptr, &self.ctx)
    }
}

impl Drop for Allocation {
    /// Frees the memory after its context's work; inside a host function or a user object's
    /// destructor (the last graph holding it going away), later, on an ordinary thread.
    fn drop(&mut self) {
        let _ = free(self.ptr, &self.ctx);
    }
}

/// Checks a stream for a safe operation on a buffer of context `ctx` that must not be recorded
/// into a graph capture: the same context ([`Error::ContextMismatch`]), and not capturing
/// ([`Error::Capturing`], from `cuStreamIsCapturing`). Returns the raw handle and the binding a
/// default stream needs.
fn prepare(
    ctx: ffi::CUcontext,
    (raw, stream_ctx): (ffi::CUstream, ffi::CUcontext),
    op: &'static str,
) -> Result<(ffi::CUstream, Option<Bound>)> {
    if stream_ctx != ctx {
        return Err(Error::ContextMismatch { what: "the buffer" });
    }
    let bound = bind_if_special(raw, ctx)?;
    if is_capturing(raw)? {
        return Err(Error::Capturing { op });
    }
    Ok((raw, bound))
}

/// Where a safe operation that only enqueues goes: the stream's raw handle, the binding a
/// default stream needs, and the graph of the capture the stream is in, if it is in one.
struct Target {
    raw: ffi::CUstream,
    _bound: Option<Bound>,
    graph: Option<ffi::CUgraph>,
}

/// Checks a stream for a safe operation that only enqueues, on a buffer of context `ctx`: the
/// same context ([`Error::ContextMismatch`]); whether it is capturing (`cuStreamIsCapturing`, the
/// one call outside a capture), and if so the capture's graph ([`capture_graph`]).
#[inline]
fn target(
    ctx: ffi::CUcontext,
    (raw, stream_ctx): (ffi::CUstream, ffi::CUcontext),
) -> Result<Target> {
    if stream_ctx != ctx {
        return Err(Error::ContextMismatch { what: "the buffer" });
    }
    let bound = bind_if_special(raw, ctx)?;
    let graph = if is_capturing(raw)? {
        Some(capture_graph(raw)?)
    } else {
        None
    };
    Ok(Target {
        raw,
        _bound: bound,
        graph,
    })
}

/// The graph `raw` is being captured into (`cuStreamGetCaptureInfo`), owned by the capture;
/// [`Error::NotCapturing`] with the status if the capture was invalidated (or has just ended).
#[cold]
fn capture_graph(raw: ffi::CUstream) -> Result<ffi::CUgraph> {
    match capture_info(raw)? {
        (CaptureStatus::Active { .. }, graph) if !graph.is_null() => Ok(graph),
        (status, _) => Err(Error::NotCapturing { status }),
    }
}

impl<T: DeviceCopy> DeviceBuffer<T> {
    /// Allocates `len` values in `ctx` (`cuMemAlloc`, with the context made current for the
    /// call). The contents are whatever the memory held: any bytes are a valid `T`, but
    /// [`zeroed`](DeviceBuffer::zeroed) or [`from_host`](DeviceBuffer::from_host) is usually what
    /// is meant. A zero-byte buffer allocates nothing.
    pub fn alloc(ctx: &Context, len: usize) -> Result<DeviceBuffer<T>> {
        let bytes = len
            .checked_mul(size_of::<T>())
            .filter(|&b| b <= isize::MAX as usize)
            .ok_or_else(|| Error::InvalidArgument {
                reason: format!(
                    "{len} values of {} bytes do not fit in memory",
                    size_of::<T>()
                ),
            })?;
        let mut ptr = 0;
        if bytes > 0 {
            // Frees that host functions queued are made before more memory is taken.
            crate::driver::deferred_destroy::drain_if_pending();
            let f = driver_fn!(cuMemAlloc);
            let _bound = bind(ctx.raw())?;
            // SAFETY: `ptr` is a valid out-pointer; the context is current.
            check(unsafe { f(&mut ptr, bytes) }, "cuMemAlloc")?;
        }
        Ok(DeviceBuffer::owning(ctx, ptr, len))
    }

    fn owning(ctx: &Context, ptr: ffi::CUdeviceptr, len: usize) -> DeviceBuffer<T> {
        DeviceBuffer {
            ptr,
            len,
            alloc: Arc::new(Allocation {
                ptr,
                ctx: ctx.clone(),
            }),
            _values: PhantomData,
        }
    }

    /// Allocates `len` values in `ctx` and enqueues zeroing them on `stream` (which must belong
    /// to `ctx`): work enqueued on `stream` afterwards sees zeros; work on other streams must
    /// wait for `stream` first. Refused on a stream that is being captured
    /// ([`Error::Capturing`]): allocate before the capture.
    pub fn zeroed(ctx: &Context, stream: &impl Enqueue, len: usize) -> Result<DeviceBuffer<T>> {
        // Checked before allocating: no allocation is made during a capture.
        let (raw, _bound) = prepare(ctx.raw(), stream.enqueue_handle(), "DeviceBuffer::zeroed")?;
        let buf = DeviceBuffer::alloc(ctx, len)?;
        buf.memset_bytes(raw, &[0])?;
        Ok(buf)
    }

    /// Allocates a buffer in `ctx` holding a copy of `data`: copies on `stream` (of `ctx`) and
    /// waits for it, so `data` is free again on return.
    pub fn from_host(ctx: &Context, stream: impl AsStream, data: &[T]) -> Result<DeviceBuffer<T>> {
        let view = stream.as_stream();
        // Checked before allocating: no allocation is made during a capture.
        drop(prepare(
            ctx.raw(),
            (view.raw(), view.context_raw()),
            "DeviceBuffer::from_host",
        )?);
        let buf = DeviceBuffer::alloc(ctx, data.len())?;
        buf.copy_from_host(view, data)?;
        Ok(buf)
    }

    /// Takes ownership of `len` values at `ptr`, allocated in `ctx` with `cuMemAlloc` (or handed
    /// over by [`into_raw`](DeviceBuffer::into_raw)); freed like any buffer.
    ///
    /// # Safety
    ///
    /// `ptr` must be a live `cuMemAlloc` allocation of `ctx` of at least `len * size_of::<T>()`
    /// bytes (or 0 with a zero-byte length) that nothing else frees or uses after this value (and
    /// every graph it is tied to) is gone.
    pub unsafe fn from_raw(ctx: &Context, ptr: ffi::CUdeviceptr, len: usize) -> DeviceBuffer<T> {
        DeviceBuffer::owning(ctx, ptr, len)
    }

    /// Hands the allocation over without freeing it: `(device pointer, len)`, the caller's to
    /// free. While a graph holds the allocation (work on the buffer was captured into it, and it
    /// or an executable graph made from it still exists) the memory cannot be handed over: the
    /// graph would free it too. The buffer then comes back unchanged as the error.
    ///
    /// ```no_run
    /// # use cuda_stream::{Context, DeviceBuffer};
    /// # let ctx = Context::primary(0)?;
    /// let buf = DeviceBuffer::<u32>::alloc(&ctx, 16)?;
    /// match buf.into_raw() {
    ///     Ok((ptr, len)) => { /* hand `ptr` to C code, which frees it with cuMemFree */ }
    ///     Err(buf) => drop(buf), // a graph still holds it: it frees the memory last
    /// }
    /// # Ok::<(), cuda_stream::Error>(())
    /// ```
    pub fn into_raw(self) -> std::result::Result<(ffi::CUdeviceptr, usize), DeviceBuffer<T>> {
        let DeviceBuffer {
            ptr, len, alloc, ..
        } = self;
        match Arc::try_unwrap(alloc) {
            Ok(alloc) => Ok((alloc.into_raw(), len)),
            Err(alloc) => Err(DeviceBuffer {
                ptr,
                len,
                alloc,
                _values: PhantomData,
            }),
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

    /// The device address of the first value (0 for a zero-byte buffer), for kernel arguments
    /// and the raw functions.
    pub fn device_ptr(&self) -> ffi::CUdeviceptr {
        self.ptr
    }

    /// The context the memory belongs to.
    pub fn context(&self) -> &Context {
        &self.alloc.ctx
    }

    /// Makes the graph that `stream` is being captured into keep this buffer's memory allocated
    /// for as long as it, or any graph or executable graph made from it, exists (a driver user
    /// object holding a reference to the allocation: `cuStreamGetCaptureInfo`,
    /// `cuUserObjectCreate`, `cuGraphRetainUserObject`). On a stream that is not capturing it
    /// does nothing but ask (`cuStreamIsCapturing`): the buffer's free already waits for the
    /// stream's work. So code written once for a stream and a capture calls it for each buffer a
    /// kernel it launches uses, which meets the memory part of
    /// [`Function::launch`](crate::Function::launch)'s `# Safety` contract for graph replays:
    ///
    /// ```no_run
    /// # use cuda_stream::{Context, DeviceBuffer, Enqueue, Function, LaunchConfig, kernel_args};
    /// /// `x[..n] *= 2` on a stream or into a capture.
    /// fn double(s: &impl Enqueue, kernel: &Function<'_>, x: &DeviceBuffer<f32>) -> cuda_stream::Result<()> {
    ///     x.keep_alive_in(s)?; // a graph replaying the launch keeps `x` allocated
    ///     let n = x.len() as u32;
    ///     // SAFETY: the kernel takes (pointer, u32) and touches x[..n]; `x` outlives the launch
    ///     // (its free waits for the stream's work) and every replay of a graph it is captured
    ///     // into (tied above); the kernel's module is kept loaded as long.
    ///     unsafe { kernel.launch(s, LaunchConfig::for_elements(n, 256), &kernel_args![x.device_ptr(), n]) }
    /// }
    /// ```
    ///
    /// The stream must belong to the buffer's context ([`Error::ContextMismatch`]); an
    /// invalidated capture is [`Error::NotCapturing`]. Each call adds a user object; a zero-byte
    /// buffer ties nothing. [`CaptureStream::keep_alive`](crate::CaptureStream::keep_alive) keeps
    /// other values alive the same way (an `Arc<Module>`, say).
    pub fn keep_alive_in(&self, stream: &impl Enqueue) -> Result<()> {
        let target = target(self.alloc.ctx.raw(), stream.enqueue_handle())?;
        match target.graph {
            Some(graph) if self.ptr != 0 => self.tie(graph, ()),
            _ => Ok(()),
        }
    }

    /// Checks `stream` for an operation of this buffer that waits for it: see [`prepare`].
    fn enqueue_on(
        &self,
        stream: (ffi::CUstream, ffi::CUcontext),
        op: &'static str,
    ) -> Result<(ffi::CUstream, Option<Bound>)> {
        prepare(self.alloc.ctx.raw(), stream, op)
    }

    /// Gives the capture `graph` a reference to this buffer's allocation (and whatever `more`
    /// holds): see [`keep_alive`]. On an error nothing is leaked or freed twice, and the graph
    /// holds nothing new.
    fn tie<V: Send + Sync + 'static>(&self, graph: ffi::CUgraph, more: V) -> Result<()> {
        keep_alive(self.alloc.ctx.raw(), graph, (self.alloc.clone(), more))
    }

    /// Enqueues a memset of the whole buffer with `pattern` repeated, on a stream checked by
    /// [`prepare`] or [`target`] (and, if it is capturing, with the allocation tied to the
    /// capture's graph).
    fn memset_bytes(&self, raw: ffi::CUstream, pattern: &[u8]) -> Result<()> {
        let bytes = self.byte_len();
        if bytes == 0 {
            return Ok(());
        }
        let (width, word) = memset_word(pattern, bytes).ok_or_else(|| unfillable(pattern))?;
        let count = bytes / width;
        // The buffer holds `bytes` bytes at a 256-byte-aligned address and lives until its
        // context's work has completed (its free waits for it); the stream is of its context,
        // and if it is capturing, the capture's graph holds the allocation, so every replay of
        // the memset finds it allocated.
        match width {
            4 => {
                let f = driver_fn!(cuMemsetD32Async);
                // SAFETY: as above, `count` 4-byte words.
                check(unsafe { f(self.ptr, word, count, raw) }, "cuMemsetD32Async")
            }
            2 => {
                let f = driver_fn!(cuMemsetD16Async);
                // SAFETY: as above, `count` 2-byte words.
                check(
                    unsafe { f(self.ptr, word as u16, count, raw) },
                    "cuMemsetD16Async",
                )
            }
            _ => {
                let f = driver_fn!(cuMemsetD8Async);
                // SAFETY: as above, `count` bytes.
                check(
                    unsafe { f(self.ptr, word as u8, count, raw) },
                    "cuMemsetD8Async",
                )
            }
        }
    }

    /// Enqueues setting every value to `value` on `stream` (a memset: `cuMemsetD32Async`,
    /// `D16` or `D8`, the widest the value allows). Any value of a 1-, 2- or 4-byte type works,
    /// and any value whose bytes repeat every 1, 2 or 4 bytes (zero of any type); others are
    /// [`Error::InvalidArgument`] (copy them from the host instead).
    ///
    /// On a stream that is being captured the memset becomes a graph node, and the graph keeps
    /// the buffer's memory allocated for its replays (see [`DeviceBuffer`], "Graphs").
    pub fn fill(&self, stream: &impl Enqueue, value: T) -> Result<()> {
        let pattern = bytes_of(&value);
        if memset_word(pattern, size_of::<T>() * 4).is_none() {
            return Err(unfillable(pattern));
        }
        let target = target(self.alloc.ctx.raw(), stream.enqueue_handle())?;
        if self.byte_len() == 0 {
            return Ok(());
        }
        if let Some(graph) = target.graph {
            // Tied before the node exists: no replay can find the memory freed.
            self.tie(graph, ())?;
        }
        self.memset_bytes(target.raw, pattern)
    }

    /// Enqueues a copy of `src` (of the same length and context) into this buffer on `stream`
    /// (`cuMemcpyDtoDAsync`).
    ///
    /// On a stream that is being captured the copy becomes a graph node, and the graph keeps
    /// both buffers' memory allocated for its replays (see [`DeviceBuffer`], "Graphs").
    pub fn copy_from(&self, stream: &impl Enqueue, src: &DeviceBuffer<T>) -> Result<()> {
        if src.len != self.len {
            return Err(Error::LengthMismatch {
                expected: self.len,
                actual: src.len,
            });
        }
        if src.alloc.ctx.raw() != self.alloc.ctx.raw() {
            return Err(Error::ContextMismatch {
                what: "the source buffer",
            });
        }
        let target = target(self.alloc.ctx.raw(), stream.enqueue_handle())?;
        if self.byte_len() == 0 || src.ptr == self.ptr {
            return Ok(());
        }
        if let Some(graph) = target.graph {
            // Both, in one user object, before the node exists.
            self.tie(graph, src.alloc.clone())?;
        }
        let f = driver_fn!(cuMemcpyDtoDAsync);
        // SAFETY: two distinct live allocations of `byte_len` bytes each, which live until their
        // context's work has completed; the stream is of their context, and if it is capturing,
        // the capture's graph holds both allocations for every replay.
        let rc = unsafe { f(self.ptr, src.ptr, self.byte_len(), target.raw) };
        check(rc, "cuMemcpyDtoDAsync")
    }

    /// Copies `src` (of the buffer's length) into the buffer on `stream`, and waits for the
    /// stream: returns once the copy (and everything enqueued on `stream` before it) is done.
    pub fn copy_from_host(&self, stream: impl AsStream, src: &[T]) -> Result<()> {
        if src.len() != self.len {
            return Err(Error::LengthMismatch {
                expected: self.len,
                actual: src.len(),
            });
        }
        let stream = stream.as_stream();
        let (raw, bound) = self.enqueue_on(
            (stream.raw(), stream.context_raw()),
            "DeviceBuffer::copy_from_host",
        )?;
        if self.byte_len() > 0 {
            let f = driver_fn!(cuMemcpyHtoDAsync);
            // SAFETY: `src` is borrowed until this function returns, which is after the stream
            // has been synchronised below; the buffer holds `byte_len` bytes.
            let rc = unsafe { f(self.ptr, src.as_ptr().cast(), self.byte_len(), raw) };
            check(rc, "cuMemcpyHtoDAsync")?;
        }
        drop(bound);
        // If this fails, the stream is broken or was capturing after all: either way no copy is
        // pending that could read `src` later.
        stream.synchronize()
    }

    /// Copies the buffer into `dst` (of the buffer's length) on `stream`, and waits for the
    /// stream: `dst` holds the values once this returns.
    pub fn copy_to_host(&self, stream: impl AsStream, dst: &mut [T]) -> Result<()> {
        if dst.len() != self.len {
            return Err(Error::LengthMismatch {
                expected: self.len,
                actual: dst.len(),
            });
        }
        // SAFETY: `dst` is borrowed mutably until the copy has completed (the call waits).
        unsafe { self.copy_to_host_ptr(stream, dst.as_mut_ptr()) }
    }

    /// The buffer's values, copied on `stream` after the work enqueued there so far.
    pub fn to_vec(&self, stream: impl AsStream) -> Result<Vec<T>> {
        let mut out = Vec::with_capacity(self.len);
        // SAFETY: `out` has room for `len` values and is owned here until the copy has completed.
        unsafe { self.copy_to_host_ptr(stream, out.as_mut_ptr()) }?;
        // SAFETY: the copy wrote all `len` values (any bytes are a valid `T`).
        unsafe { out.set_len(self.len) };
        Ok(out)
    }

    /// # Safety
    /// `dst` is valid for `len` values of writes until this returns, and nothing reads it
    /// meanwhile.
    unsafe fn copy_to_host_ptr(&self, stream: impl AsStream, dst: *mut T) -> Result<()> {
        let stream = stream.as_stream();
        let (raw, bound) = self.enqueue_on(
            (stream.raw(), stream.context_raw()),
            "DeviceBuffer::copy_to_host",
        )?;
        if self.byte_len() > 0 {
            let f = driver_fn!(cuMemcpyDtoHAsync);
            // SAFETY: the caller keeps `dst` writable until this returns, after the stream has
            // been synchronised below; the buffer holds `byte_len` bytes.
            let rc = unsafe { f(dst.cast(), self.ptr, self.byte_len(), raw) };
            check(rc, "cuMemcpyDtoHAsync")?;
        }
        drop(bound);
        // If this fails, the stream is broken or was capturing after all: either way no copy is
        // pending that could write `dst` later.
        stream.synchronize()
    }

    /// Enqueues a copy of `src` (of the buffer's length) into the buffer, without waiting
    /// (`cuMemcpyHtoDAsync`); works inside a graph capture.
    ///
    /// # Safety
    ///
    /// `src` must stay allocated and unmodified until the copy has completed (the stream's work
    /// up to here), and, when recorded into a graph capture, for every launch of the graphs made
    /// from it. The buffer must stay allocated for those launches too:
    /// [`keep_alive_in`](DeviceBuffer::keep_alive_in) on the same stream takes care of that part.
    pub unsafe fn copy_from_host_async(&self, stream: &impl Enqueue, src: &[T]) -> Result<()> {
        if src.len() != self.len {
            return Err(Error::LengthMismatch {
                expected: self.len,
                actual: src.len(),
            });
        }
        if stream.enqueue_handle().1 != self.alloc.ctx.raw() {
            return Err(Error::ContextMismatch { what: "the buffer" });
        }
        if self.byte_len() == 0 {
            return Ok(());
        }
        // SAFETY: the buffer holds `byte_len` bytes; the caller keeps `src` and the buffer alive.
        unsafe { memcpy_htod_async(stream, self.ptr, src) }
    }

    /// Enqueues a copy of the buffer into `dst` (of the buffer's length), without waiting
    /// (`cuMemcpyDtoHAsync`); works inside a graph capture.
    ///
    /// # Safety
    ///
    /// `dst` must stay allocated, and must not be read or written, until the copy has completed
    /// (synchronise the stream or an event recorded after it), and, when recorded into a graph
    /// capture, for every launch of the graphs made from it. The buffer must stay allocated for
    /// those launches too: [`keep_alive_in`](DeviceBuffer::keep_alive_in) on the same stream
    /// takes care of that part.
    pub unsafe fn copy_to_host_async(&self, stream: &impl Enqueue, dst: &mut [T]) -> Result<()> {
        if dst.len() != self.len {
            return Err(Error::LengthMismatch {
                expected: self.len,
                actual: dst.len(),
            });
        }
        if stream.enqueue_handle().1 != self.alloc.ctx.raw() {
            return Err(Error::ContextMismatch { what: "the buffer" });
        }
        if self.byte_len() == 0 {
            return Ok(());
        }
        // SAFETY: the buffer holds `byte_len` bytes; the caller keeps `dst` untouched meanwhile.
        unsafe { memcpy_dtoh_async(stream, dst, self.ptr) }
    }

    /// Frees the memory, returning the driver's error: waits for all work of the buffer's context
    /// (`cuCtxSynchronize`), then `cuMemFree`. If the wait fails the memory is left allocated
    /// (leaked): work might still be using it.
    ///
    /// While a graph holds the allocation (see [`is_held_by_graphs`](DeviceBuffer::is_held_by_graphs))
    /// this gives up the buffer's share and returns `Ok(())` at once: the memory is freed, in the
    /// same way, once the last graph and executable graph holding it are destroyed, and an error
    /// of that free has nobody to be reported to.
    ///
    /// Inside a host function no CUDA call is made: the wait and the free are queued for an
    /// ordinary thread, as for a drop, and the answer is [`Error::InHostFunction`](crate::Error::InHostFunction).
    pub fn free(self) -> Result<()> {
        // `into_inner`, not `try_unwrap`: if the last graph lets go meanwhile, one of the two
        // sides still sees itself last and frees.
        match Arc::into_inner(self.alloc) {
            Some(alloc) => alloc.free(),
            None => Ok(()),
        }
    }
}

/// Frees `ptr` after the work of `ctx` (queued inside a host function).
fn free(ptr: ffi::CUdeviceptr, ctx: &Context) -> Result<()> {
    if ptr == 0 {
        return Ok(());
    }
    destroy_after_work(ctx, ptr as usize, "cuMemFree", free_now)
}

/// `cuMemFree`, in the form [`destroy_after_work`] takes; the context is current and idle.
fn free_now(ptr: usize) -> Result<()> {
    let f = driver_fn!(cuMemFree);
    // SAFETY: the caller owns the allocation and never uses it again; no work of the context is
    // pending, so none can still use it.
    check(unsafe { f(ptr as ffi::CUdeviceptr) }, "cuMemFree")
}
