//! The operations of a [`DeviceBuffer`]: fill, device copies, host copies and
//! `keep_alive_in`. Each records its use on its stream (waiting first for the uses it conflicts
//! with), or in a graph capture ties the allocation to the capture's graph.

use std::any::Any;
use std::mem::size_of;
use std::sync::{Arc, Weak};

use crate::base::capture_mode::CaptureStatus;
use crate::base::error::{Error, Result, check, driver_fn};
use crate::base::plain_data::DeviceCopy;
use crate::driver::capture_query::{capture_info, is_capturing};
use crate::ffi;
use crate::graph::replay_uses::{self, Held};
use crate::graph::user_objects::keep_alive;
use crate::memory::allocation::{Allocation, InCapture};
use crate::memory::buffer::DeviceBuffer;
use crate::memory::fill_pattern::{bytes_of, memset_word, unfillable};
use crate::memory::slice::{AsDeviceSlice, Span};
use crate::memory::tracked::{TrackedUse, around_streams, hand_over};
use crate::memory::use_tracking::{Access, Uses};
use crate::stream::view::{AsStream, Enqueue, bind_for_copy, bind_if_special};

/// The graph `raw` is being captured into (`cuStreamGetCaptureInfo`), owned by the capture,
/// and the capture's id; [`Error::NotCapturing`] with the status if the capture was invalidated
/// (or has just ended).
#[cold]
pub(crate) fn capture_graph(raw: ffi::CUstream) -> Result<(ffi::CUgraph, u64)> {
    match capture_info(raw)? {
        (CaptureStatus::Active { id }, graph) if !graph.is_null() => Ok((graph, id)),
        (status, _) => Err(Error::NotCapturing { status }),
    }
}

/// Runs `op`, work on `raw` (a stream of `ctx`, with the context bound for a default stream)
/// touching each allocation of `list` with its access:
///
/// - outside a capture, after the waits the uses need, recording them once `op` succeeds (a
///   graph allocation is refused there);
/// - in a capture, with every allocation from outside it tied to the capture's graph (one user
///   object for all) after the host waited for their conflicting uses elsewhere, and the uses of
///   the capture's own graph allocations tracked with captured events; in a capture this crate
///   did not begin, allocations from outside it are refused.
pub(crate) fn enqueue_with_uses(
    raw: ffi::CUstream,
    ctx: ffi::CUcontext,
    list: &[(&Arc<Allocation>, Access)],
    op: impl FnOnce() -> Result<()>,
) -> Result<()> {
    enqueue_with_uses_in(raw, ctx, list, false, op)
}

/// [`enqueue_with_uses`]; with `keep_only`, an allocation from outside a capture this crate did
/// not begin is tied to its graph too (`keep_alive_in`, for raw work whose ordering the unsafe
/// code that enqueues it promises).
fn enqueue_with_uses_in(
    raw: ffi::CUstream,
    ctx: ffi::CUcontext,
    list: &[(&Arc<Allocation>, Access)],
    keep_only: bool,
    op: impl FnOnce() -> Result<()>,
) -> Result<()> {
    if !is_capturing(raw)? {
        if let [(alloc, access)] = list {
            alloc.check_outside_capture()?;
            return alloc.uses.around(raw, *access, op);
        }
        for (alloc, _) in list {
            alloc.check_outside_capture()?;
        }
        let mut uses: Vec<_> = list.iter().map(|(a, x)| (&a.uses, *x)).collect();
        return Uses::around_all(&mut uses, raw, op);
    }
    let (graph, capture) = capture_graph(raw)?;
    let mut tied = Vec::new();
    let mut tracked = Vec::new();
    for (alloc, access) in list {
        match alloc.in_capture(raw, ctx, capture, *access, keep_only)? {
            InCapture::Tie if alloc.ptr != 0 => tied.push(Arc::clone(alloc)),
            InCapture::Tie => {}
            InCapture::Track => tracked.push((&alloc.uses, *access)),
        }
    }
    // Before the node exists, in one user object.
    tie_to_graph(ctx, graph, tied)?;
    if tracked.is_empty() {
        op()
    } else {
        Uses::around_all(&mut tracked, raw, op)
    }
}

/// Makes `graph` (a capture's) keep `allocs` allocated for as long as it or a graph made from
/// it exists (one user object), and registers them as used by its replays: each launch of an
/// executable graph made from it waits for their other uses and is recorded as a write of each.
pub(crate) fn tie_to_graph(
    ctx: ffi::CUcontext,
    graph: ffi::CUgraph,
    mut allocs: Vec<Arc<Allocation>>,
) -> Result<()> {
    match allocs.len() {
        0 => return Ok(()),
        1 => keep_alive(ctx, graph, Arc::clone(&allocs[0]))?,
        _ => keep_alive(ctx, graph, allocs.clone())?,
    }
    for a in allocs.drain(..) {
        let weak: Held = Arc::downgrade(&(a as Arc<dyn Any + Send + Sync>));
        replay_uses::register(graph, weak, around_replay);
    }
    Ok(())
}

/// The replay hook: orders a launch on `stream` (of context `ctx`) after the other uses of the
/// graph's buffers still alive (as a write of each: the graph may write any of them) and records
/// it. A buffer of another context (a peer copy's) is recorded on its context's service stream,
/// joined to the launch by events both ways, as a peer copy does. A launch recorded into a
/// capture is work in that capture, by the same rules as any (the buffers tied to its graph).
fn around_replay(
    held: &[Held],
    stream: ffi::CUstream,
    ctx: ffi::CUcontext,
    launch: &mut dyn FnMut() -> Result<()>,
) -> Result<()> {
    let allocs: Vec<Arc<Allocation>> = held
        .iter()
        .filter_map(Weak::upgrade)
        .filter_map(|a| a.downcast::<Allocation>().ok())
        .collect();
    if is_capturing(stream)? {
        let list: Vec<_> = allocs.iter().map(|a| (a, Access::Write)).collect();
        return enqueue_with_uses(stream, ctx, &list, launch);
    }
    if allocs.iter().all(|a| a.ctx_raw() == ctx) {
        let mut list: Vec<_> = allocs.iter().map(|a| (&a.uses, Access::Write)).collect();
        return Uses::around_all(&mut list, stream, launch);
    }
    // Each other context's service stream stands for the launch there (created before any
    // tracker is locked).
    let mut remote: Vec<(ffi::CUcontext, ffi::CUstream)> = Vec::new();
    for a in allocs.iter().filter(|a| a.ctx_raw() != ctx) {
        if !remote.iter().any(|&(c, _)| c == a.ctx_raw()) {
            remote.push((a.ctx_raw(), a.ctx().service_stream()?));
        }
    }
    let proxy_of = |c: ffi::CUcontext| remote.iter().find(|r| r.0 == c).map_or(stream, |r| r.1);
    let mut list: Vec<TrackedUse<'_>> = allocs
        .iter()
        .map(|a| TrackedUse {
            uses: &a.uses,
            access: Access::Write,
            stream: proxy_of(a.ctx_raw()),
            waiter: None,
        })
        .collect();
    around_streams(&mut list, |enqueued| {
        // Each proxy has waited for its buffers' other uses: so does the launch.
        for &(c, proxy) in &remote {
            hand_over(proxy, c, stream)?;
        }
        launch()?;
        *enqueued = true;
        // And each proxy, which stands for the launch in its context, waits for it.
        for &(_, proxy) in &remote {
            hand_over(stream, ctx, proxy)?;
        }
        Ok(())
    })
}

impl<'a, T: DeviceCopy> Span<'a, T> {
    /// Runs `op(raw stream)`, which enqueues work touching this buffer (`access`) and `other`
    /// buffers, on `stream`: checks the contexts, then [`enqueue_with_uses`].
    fn enqueue_use<U: DeviceCopy>(
        &self,
        stream: &impl Enqueue,
        access: Access,
        other: Option<Span<'_, U>>,
        op: impl FnOnce(ffi::CUstream) -> Result<()>,
    ) -> Result<()> {
        let (raw, stream_ctx) = stream.enqueue_handle();
        let ctx = self.ctx_raw();
        if stream_ctx != ctx {
            return Err(Error::ContextMismatch { what: "the buffer" });
        }
        let _bound = bind_if_special(raw, ctx)?;
        let alloc = self.alloc_ref();
        match other {
            None => enqueue_with_uses(raw, ctx, &[(alloc, access)], || op(raw)),
            Some(o) => enqueue_with_uses(
                raw,
                ctx,
                &[(alloc, access), (o.alloc_ref(), Access::Read)],
                || op(raw),
            ),
        }
    }

    /// [`enqueue_use`](Self::enqueue_use) for a copy: with the stream's context bound where
    /// another one is current (see [`bind_for_copy`]).
    fn enqueue_copy<U: DeviceCopy>(
        &self,
        stream: &impl Enqueue,
        access: Access,
        other: Option<Span<'_, U>>,
        op: impl FnOnce(ffi::CUstream) -> Result<()>,
    ) -> Result<()> {
        let (raw, ctx) = stream.enqueue_handle();
        let _bound = bind_for_copy(raw, ctx)?;
        self.enqueue_use(stream, access, other, op)
    }

    /// Zeroes the buffer on `stream` (a recorded write).
    pub(crate) fn zero(&self, stream: &impl Enqueue) -> Result<()> {
        if self.byte_len() == 0 {
            return Ok(());
        }
        self.enqueue_use::<T>(stream, Access::Write, None, |raw| {
            self.memset_word(raw, (4, 0))
        })
    }

    /// Enqueues a memset of the whole buffer with `pattern` repeated on `raw`, a stream of the
    /// buffer's context whose ordering the caller has taken care of.
    fn memset_word(&self, raw: ffi::CUstream, (width, word): (usize, u32)) -> Result<()> {
        let bytes = self.byte_len();
        if bytes == 0 {
            return Ok(());
        }
        let ptr = self.device_ptr();
        // A byte count or an address (of a view) that is no multiple of the word cannot come
        // from `memset_word`, which `fill` asks for both; zeroing passes 4-byte words, which
        // such a span takes as bytes.
        // `width` is 1, 2 or 4: masks and a shift rather than divisions (a fill's whole cost
        // beyond the driver call is a few dozen nanoseconds).
        debug_assert!(matches!(width, 1 | 2 | 4));
        let mask = width - 1;
        let width = if bytes & mask == 0 && ptr & mask as u64 == 0 {
            width
        } else {
            1
        };
        let count = bytes >> width.trailing_zeros();
        // The span holds `bytes` bytes at an address aligned to the word and is freed only after
        // this use (recorded by the caller), or in a capture held by the capture's graph.
        match width {
            4 => {
                let f = driver_fn!(cuMemsetD32Async);
                // SAFETY: as above, `count` 4-byte words.
                check(unsafe { f(ptr, word, count, raw) }, "cuMemsetD32Async")
            }
            2 => {
                let f = driver_fn!(cuMemsetD16Async);
                // SAFETY: as above, `count` 2-byte words.
                check(
                    unsafe { f(ptr, word as u16, count, raw) },
                    "cuMemsetD16Async",
                )
            }
            _ => {
                let f = driver_fn!(cuMemsetD8Async);
                // SAFETY: as above, `count` bytes.
                check(unsafe { f(ptr, word as u8, count, raw) }, "cuMemsetD8Async")
            }
        }
    }

    /// See `DeviceBuffer::fill`.
    pub(crate) fn fill(&self, stream: &impl Enqueue, value: T) -> Result<()> {
        let pattern = bytes_of(&value);
        // The widest word for this span (a length that is a multiple of 4 bytes takes 4-byte
        // words); an empty one is checked as one of four values. A view's address may be aligned
        // to less than 4 bytes (a `u8` view at an odd offset): the word divides it too (the
        // low bits of the address, or-ed in, allow only what both allow). A pattern never needs
        // more alignment than its type's size, which every view's offset is a multiple of.
        let bytes = match self.byte_len() {
            0 => size_of::<T>() * 4,
            b => b,
        } | (self.device_ptr() & 3) as usize;
        let Some(word) = memset_word(pattern, bytes) else {
            return Err(unfillable(pattern));
        };
        if self.byte_len() == 0 {
            // Still checked: a stream of another context is an error whatever the length.
            if stream.enqueue_handle().1 != self.ctx_raw() {
                return Err(Error::ContextMismatch { what: "the buffer" });
            }
            return Ok(());
        }
        self.enqueue_use::<T>(stream, Access::Write, None, |raw| {
            self.memset_word(raw, word)
        })
    }

    /// See `DeviceBuffer::copy_from`.
    pub(crate) fn copy_from(&self, stream: &impl Enqueue, src: Span<'_, T>) -> Result<()> {
        if src.len() != self.len() {
            return Err(Error::LengthMismatch {
                expected: self.len(),
                actual: src.len(),
            });
        }
        if src.ctx_raw() != self.ctx_raw() {
            return Err(Error::ContextMismatch {
                what: "the source buffer",
            });
        }
        if stream.enqueue_handle().1 != self.ctx_raw() {
            return Err(Error::ContextMismatch { what: "the buffer" });
        }
        if self.byte_len() == 0 || src.device_ptr() == self.device_ptr() {
            // Nothing to enqueue, but a capture that was invalidated is still reported, as it
            // is for a copy that enqueues.
            let (raw, ctx) = stream.enqueue_handle();
            let _bound = bind_if_special(raw, ctx)?;
            if is_capturing(raw)? {
                capture_graph(raw)?;
            }
            return Ok(());
        }
        if self.overlaps(&src) {
            // Two views of one buffer that share values: the driver's copy is undefined there.
            return Err(Error::InvalidArgument {
                reason: "the copy's source and destination overlap".into(),
            });
        }
        let bytes = self.byte_len();
        self.enqueue_copy(stream, Access::Write, Some(src), |raw| {
            let f = driver_fn!(cuMemcpyDtoDAsync);
            // SAFETY: two disjoint live ranges of `bytes` bytes each (of two allocations, or of
            // one), freed only after this use (recorded) or held by the capture's graph; the
            // stream is of their context.
            let rc = unsafe { f(self.device_ptr(), src.device_ptr(), bytes, raw) };
            check(rc, "cuMemcpyDtoDAsync")
        })
    }

    /// See `DeviceBuffer::copy_from_host`.
    pub(crate) fn copy_from_host(&self, stream: &impl AsStream, src: &[T]) -> Result<()> {
        if src.len() != self.len() {
            return Err(Error::LengthMismatch {
                expected: self.len(),
                actual: src.len(),
            });
        }
        let stream = stream.as_stream();
        self.refuse_capture(&stream, "DeviceBuffer::copy_from_host")?;
        let bytes = self.byte_len();
        if bytes > 0 {
            self.enqueue_copy::<T>(&stream, Access::Write, None, |raw| {
                let f = driver_fn!(cuMemcpyHtoDAsync);
                // SAFETY: `src` is borrowed until this function returns, after the stream has
                // been synchronised below; the buffer holds `bytes` bytes.
                let rc = unsafe { f(self.device_ptr(), src.as_ptr().cast(), bytes, raw) };
                check(rc, "cuMemcpyHtoDAsync")
            })?;
        }
        // Read before the synchronisation begins: it covers the uses recorded up to here.
        let upto = self.alloc_ref().uses.last_recorded();
        // If this fails, the stream is broken or was capturing after all: either way no copy is
        // pending that could read `src` later.
        stream.synchronize()?;
        self.alloc_ref().uses.completed_on(stream.handle(), upto);
        Ok(())
    }

    /// See `DeviceBuffer::copy_to_host`.
    pub(crate) fn copy_to_host(&self, stream: &impl AsStream, dst: &mut [T]) -> Result<()> {
        if dst.len() != self.len() {
            return Err(Error::LengthMismatch {
                expected: self.len(),
                actual: dst.len(),
            });
        }
        // SAFETY: `dst` is borrowed mutably until the copy has completed (the call waits).
        unsafe { self.copy_to_host_ptr(stream, dst.as_mut_ptr()) }
    }

    /// See `DeviceBuffer::to_vec`.
    pub(crate) fn to_vec(self, stream: &impl AsStream) -> Result<Vec<T>> {
        let mut out = Vec::with_capacity(self.len());
        // SAFETY: `out` has room for `len` values and is owned here until the copy has completed.
        unsafe { self.copy_to_host_ptr(stream, out.as_mut_ptr()) }?;
        // SAFETY: the copy wrote all `len` values (any bytes are a valid `T`).
        unsafe { out.set_len(self.len()) };
        Ok(out)
    }

    /// # Safety
    /// `dst` is valid for `len` values of writes until this returns, and nothing reads it
    /// meanwhile.
    unsafe fn copy_to_host_ptr(&self, stream: &impl AsStream, dst: *mut T) -> Result<()> {
        let stream = stream.as_stream();
        self.refuse_capture(&stream, "DeviceBuffer::copy_to_host")?;
        let bytes = self.byte_len();
        if bytes > 0 {
            self.enqueue_copy::<T>(&stream, Access::Read, None, |raw| {
                let f = driver_fn!(cuMemcpyDtoHAsync);
                // SAFETY: the caller keeps `dst` writable until this returns, after the stream
                // has been synchronised below; the buffer holds `bytes` bytes.
                let rc = unsafe { f(dst.cast(), self.device_ptr(), bytes, raw) };
                check(rc, "cuMemcpyDtoHAsync")
            })?;
        }
        // Read before the synchronisation begins: it covers the uses recorded up to here.
        let upto = self.alloc_ref().uses.last_recorded();
        // If this fails, the stream is broken or was capturing after all: either way no copy is
        // pending that could write `dst` later.
        stream.synchronize()?;
        self.alloc_ref().uses.completed_on(stream.handle(), upto);
        Ok(())
    }

    /// [`Error::Capturing`] on a capturing stream (of the buffer's context).
    fn refuse_capture(&self, stream: &impl Enqueue, op: &'static str) -> Result<()> {
        let (raw, stream_ctx) = stream.enqueue_handle();
        if stream_ctx != self.ctx_raw() {
            return Err(Error::ContextMismatch { what: "the buffer" });
        }
        let _bound = bind_if_special(raw, stream_ctx)?;
        if is_capturing(raw)? {
            return Err(Error::Capturing { op });
        }
        Ok(())
    }

    /// See `DeviceBuffer::copy_from_host_async`.
    ///
    /// # Safety
    ///
    /// As for `DeviceBuffer::copy_from_host_async`.
    pub(crate) unsafe fn copy_from_host_async(
        &self,
        stream: &impl Enqueue,
        src: &[T],
    ) -> Result<()> {
        if src.len() != self.len() {
            return Err(Error::LengthMismatch {
                expected: self.len(),
                actual: src.len(),
            });
        }
        if stream.enqueue_handle().1 != self.ctx_raw() {
            return Err(Error::ContextMismatch { what: "the buffer" });
        }
        let bytes = self.byte_len();
        if bytes == 0 {
            return Ok(());
        }
        self.enqueue_copy::<T>(stream, Access::Write, None, |raw| {
            let f = driver_fn!(cuMemcpyHtoDAsync);
            // SAFETY: the buffer holds `bytes` bytes; the caller keeps `src` alive and unchanged.
            let rc = unsafe { f(self.device_ptr(), src.as_ptr().cast(), bytes, raw) };
            check(rc, "cuMemcpyHtoDAsync")
        })
    }

    /// See `DeviceBuffer::copy_to_host_async`.
    ///
    /// # Safety
    ///
    /// As for `DeviceBuffer::copy_to_host_async`.
    pub(crate) unsafe fn copy_to_host_async(
        &self,
        stream: &impl Enqueue,
        dst: &mut [T],
    ) -> Result<()> {
        if dst.len() != self.len() {
            return Err(Error::LengthMismatch {
                expected: self.len(),
                actual: dst.len(),
            });
        }
        if stream.enqueue_handle().1 != self.ctx_raw() {
            return Err(Error::ContextMismatch { what: "the buffer" });
        }
        let bytes = self.byte_len();
        if bytes == 0 {
            return Ok(());
        }
        let dst = dst.as_mut_ptr();
        self.enqueue_copy::<T>(stream, Access::Read, None, |raw| {
            let f = driver_fn!(cuMemcpyDtoHAsync);
            // SAFETY: the buffer holds `bytes` bytes; the caller keeps `dst` untouched meanwhile.
            let rc = unsafe { f(dst.cast(), self.device_ptr(), bytes, raw) };
            check(rc, "cuMemcpyDtoHAsync")
        })
    }

    /// See `DeviceBuffer::keep_alive_in`.
    pub(crate) fn keep_alive_in(&self, stream: &impl Enqueue) -> Result<()> {
        let (raw, stream_ctx) = stream.enqueue_handle();
        let ctx = self.ctx_raw();
        if stream_ctx != ctx {
            return Err(Error::ContextMismatch { what: "the buffer" });
        }
        let _bound = bind_if_special(raw, ctx)?;
        if self.device_ptr() == 0 {
            return Ok(());
        }
        // Outside a capture, a write with nothing enqueued: the stream waits for the earlier
        // uses, and the free waits for the stream (see above for what that covers). In a
        // capture begun elsewhere the buffer is tied too: ordering the raw work that uses it is
        // that unsafe code's promise.
        enqueue_with_uses_in(raw, ctx, &[(self.alloc_ref(), Access::Write)], true, || {
            Ok(())
        })
    }
}

/// The buffer's operations: each works on the whole buffer's span (`slice_ops` gives its views
/// the same).
impl<T: DeviceCopy> DeviceBuffer<T> {
    /// Zeroes the buffer on `stream` (a recorded write).
    pub(crate) fn zero(&self, stream: &impl Enqueue) -> Result<()> {
        self.span().zero(stream)
    }

    /// Enqueues setting every value to `value` on `stream` (a memset: `cuMemsetD32Async`,
    /// `D16` or `D8`, the widest the value allows), after the buffer's earlier uses on other
    /// streams. Any value of a 1-, 2- or 4-byte type works, and any value whose bytes repeat
    /// every 1, 2 or 4 bytes (zero of any type); others are [`Error::InvalidArgument`] (copy
    /// them from the host instead).
    ///
    /// On a stream that is being captured the memset becomes a graph node, and the graph keeps
    /// the buffer's memory allocated for its replays (see [`DeviceBuffer`], "Graphs").
    pub fn fill(&self, stream: &impl Enqueue, value: T) -> Result<()> {
        self.span().fill(stream, value)
    }

    /// Enqueues a copy of `src` (of the same length and context: a buffer, or a view of one,
    /// [`DeviceBuffer::slice`]) into this buffer on `stream` (`cuMemcpyDtoDAsync`), after the
    /// uses it conflicts with: the last write of `src`, and every earlier use of this buffer. This
    /// buffer (or its whole view) as the source is a copy with nothing to do.
    ///
    /// On a stream that is being captured the copy becomes a graph node, and the graph keeps
    /// both buffers' memory allocated for its replays (see [`DeviceBuffer`], "Graphs").
    pub fn copy_from(&self, stream: &impl Enqueue, src: &impl AsDeviceSlice<T>) -> Result<()> {
        self.span().copy_from(stream, src.as_device_slice().span())
    }

    /// A new buffer of the same context holding a copy of this one (cudarc's `clone`, which is
    /// a device copy): allocated on `stream` ([`alloc_on`](DeviceBuffer::alloc_on)) and filled
    /// by a [`copy_from`](DeviceBuffer::copy_from) there, after this buffer's last write. Not
    /// `Clone`: the copy is device work on a stream, and can fail.
    pub fn duplicate(&self, stream: &impl Enqueue) -> Result<DeviceBuffer<T>> {
        let copy = DeviceBuffer::alloc_on(self.context(), stream, self.len())?;
        copy.copy_from(stream, self)?;
        Ok(copy)
    }

    /// Copies `src` (of the buffer's length) into the buffer on `stream`, after the buffer's
    /// earlier uses on other streams, and waits for the stream: returns once the copy (and
    /// everything enqueued on `stream` before it) is done. Refused on a capturing stream
    /// ([`Error::Capturing`]).
    pub fn copy_from_host(&self, stream: &impl AsStream, src: &[T]) -> Result<()> {
        self.span().copy_from_host(stream, src)
    }

    /// Copies the buffer into `dst` (of the buffer's length) on `stream`, after the buffer's
    /// last write on another stream, and waits for the stream: `dst` holds the values once this
    /// returns. Refused on a capturing stream ([`Error::Capturing`]).
    pub fn copy_to_host(&self, stream: &impl AsStream, dst: &mut [T]) -> Result<()> {
        self.span().copy_to_host(stream, dst)
    }

    /// The buffer's values, copied on `stream` after the work enqueued there so far and the
    /// buffer's last write on any other stream.
    pub fn to_vec(&self, stream: &impl AsStream) -> Result<Vec<T>> {
        self.span().to_vec(stream)
    }

    /// Enqueues a copy of `src` (of the buffer's length) into the buffer, without waiting
    /// (`cuMemcpyHtoDAsync`), after the buffer's earlier uses on other streams; works inside a
    /// graph capture. [`PinnedHostBuffer`](crate::PinnedHostBuffer) offers the same safely.
    ///
    /// # Safety
    ///
    /// `src` must stay allocated and unmodified until the copy has completed (the stream's work
    /// up to here), and, when recorded into a graph capture, for every launch of the graphs made
    /// from it.
    pub unsafe fn copy_from_host_async(&self, stream: &impl Enqueue, src: &[T]) -> Result<()> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.span().copy_from_host_async(stream, src) }
    }

    /// Enqueues a copy of the buffer into `dst` (of the buffer's length), without waiting
    /// (`cuMemcpyDtoHAsync`), after the buffer's last write on another stream; works inside a
    /// graph capture. [`PinnedHostBuffer`](crate::PinnedHostBuffer) offers the same safely.
    ///
    /// # Safety
    ///
    /// `dst` must stay allocated, and must not be read or written, until the copy has completed
    /// (synchronise the stream or an event recorded after it), and, when recorded into a graph
    /// capture, for every launch of the graphs made from it.
    pub unsafe fn copy_to_host_async(&self, stream: &impl Enqueue, dst: &mut [T]) -> Result<()> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.span().copy_to_host_async(stream, dst) }
    }

    /// Makes the graph that `stream` is being captured into keep this buffer's memory allocated
    /// for as long as it, or any graph or executable graph made from it, exists (a driver user
    /// object holding a reference to the allocation: `cuStreamGetCaptureInfo`,
    /// `cuUserObjectCreate`, `cuGraphRetainUserObject`). On a stream that is not capturing it
    /// records a write on the stream instead, with nothing enqueued: the stream first waits for
    /// the buffer's earlier uses elsewhere, and the free waits for work enqueued on the stream
    /// after this call, where the stream is one this crate created and whose handle was never
    /// taken (elsewhere the use is marked by an event recorded now, which covers nothing enqueued
    /// later). A kernel launch that takes the buffer as [`read`](DeviceBuffer::read) or
    /// [`write`](DeviceBuffer::write) does all this by itself, on every stream; this serves
    /// launches that pass [`device_ptr`](DeviceBuffer::device_ptr). In a capture that other code
    /// began, where every other buffer operation is refused, it ties the buffer too: that
    /// capture's graphs are launched where this crate does not see them, so ordering their raw
    /// work against the buffer's other uses is that work's promise
    /// ([`Function::launch`](crate::Function::launch)'s `# Safety`).
    ///
    /// The stream must belong to the buffer's context ([`Error::ContextMismatch`]); an
    /// invalidated capture is [`Error::NotCapturing`]. Each call adds a user object; a zero-byte
    /// buffer ties nothing. [`CaptureStream::keep_alive`](crate::CaptureStream::keep_alive) keeps
    /// other values alive the same way (an `Arc<Module>`, say).
    pub fn keep_alive_in(&self, stream: &impl Enqueue) -> Result<()> {
        self.span().keep_alive_in(stream)
    }
}
