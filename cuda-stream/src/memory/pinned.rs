//! [`PinnedHostBuffer`]: page-locked host memory (`cuMemHostAlloc`) that knows the copies in
//! flight on it, so that asynchronous copies between it and a [`DeviceBuffer`] are safe: host
//! access waits for the copies it conflicts with, and the free waits for all of them.

use std::fmt;
use std::mem::size_of;
use std::ops::{Deref, DerefMut};
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};

use crate::base::error::{Error, Result, check, driver_fn, lookup, refuse_in_host_fn};
use crate::base::host_fn_flag::in_host_fn;
use crate::base::plain_data::DeviceCopy;
use crate::driver::context::{Context, bind};
use crate::ffi;
use crate::memory::allocation::{free_when_done, poll_pending_frees};
use crate::memory::buffer::{DeviceBuffer, byte_size};
use crate::memory::slice::{DeviceSlice, DeviceSliceMut, Span};
use crate::memory::use_tracking::Access;
use crate::stream::view::{Enqueue, bind_for_copy};

/// `len` values of `T` in page-locked host memory (`cuMemHostAlloc`, portable to every
/// context), which the GPU's copy engines read and write directly, so that copies to and from
/// the device run asynchronously and at full link speed.
///
/// The buffer records the copies in flight on it (an event after each). The device side of a
/// copy is ordered like any use of the [`DeviceBuffer`]; on the host side:
///
/// - [`as_slice`](PinnedHostBuffer::as_slice) waits for the copies that write the buffer
///   ([`DeviceBuffer::copy_to_pinned`]); [`as_mut_slice`](PinnedHostBuffer::as_mut_slice) for
///   every copy, reads too; the `try_` forms return [`Error::Busy`] instead of waiting;
/// - a copy that writes the buffer takes it by `&mut`, so no slice of it can be held across
///   the call (a compile error), and a later copy waits on the device for the earlier ones it
///   conflicts with;
/// - dropping it while a copy is in flight never frees memory a copy still uses: the free
///   (`cuMemFreeHost`) is made once the copies' events have completed.
///
/// ```no_run
/// use cuda_stream::{Context, DeviceBuffer, PinnedHostBuffer};
///
/// let ctx = Context::primary(0)?;
/// let stream = ctx.new_stream()?;
/// let mut host = PinnedHostBuffer::<f32>::from_slice(&ctx, &[1.0; 1024])?;
/// let dev = DeviceBuffer::<f32>::alloc_on(&ctx, &stream, 1024)?;
/// dev.copy_from_pinned(&stream, &host)?;     // returns at once
/// dev.copy_to_pinned(&stream, &mut host)?;   // also; ordered after the upload
/// assert_eq!(host.as_slice()?[0], 1.0);      // waits for the download only
/// # Ok::<(), cuda_stream::Error>(())
/// ```
pub struct PinnedHostBuffer<T: DeviceCopy> {
    ptr: *mut T,
    len: usize,
    ctx: Context,
    copies: HostCopies,
}

/// The copies in flight on page-locked host memory (a [`PinnedHostBuffer`] or a
/// [`RegisteredHost`](crate::RegisteredHost)): host access and the end of the memory wait for
/// them. (Public only inside a private module: named by the sealed [`PageLocked`] trait.)
pub struct HostCopies {
    in_flight: Mutex<Vec<InFlight>>,
    /// How many the list held when last unlocked: what a host function reads when another
    /// thread holds the list.
    noted: AtomicUsize,
}

/// A copy enqueued on the buffer: the event recorded after it (of the copy's stream's context,
/// which may be another than the buffer's: the memory is portable), and whether it writes the
/// host memory.
struct InFlight {
    ctx: Context,
    event: ffi::CUevent,
    writes_host: bool,
}

// SAFETY: the memory is plain host memory owned by this value; `T: DeviceCopy` is `Send + Sync`;
// the in-flight list is locked.
unsafe impl<T: DeviceCopy> Send for PinnedHostBuffer<T> {}
// SAFETY: shared access only reads the memory (after waiting for copies that write it).
unsafe impl<T: DeviceCopy> Sync for PinnedHostBuffer<T> {}

impl<T: DeviceCopy> fmt::Debug for PinnedHostBuffer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PinnedHostBuffer")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .field(
                "copies_in_flight",
                &self.copies.noted.load(Ordering::Relaxed),
            )
            .finish()
    }
}

impl<T: DeviceCopy> PinnedHostBuffer<T> {
    /// `len` zeroed values of page-locked memory (`cuMemHostAlloc` with
    /// `CU_MEMHOSTALLOC_PORTABLE`, with `ctx` made current for the call). Page-locking is slow
    /// and the driver may wait for the device's work meanwhile (seen on the H100, driver 580),
    /// which, as with `cudaHostAlloc`, also invalidates a graph capture running on another
    /// thread: allocate pinned buffers ahead of the work and of captures, and reuse them.
    pub fn zeroed(ctx: &Context, len: usize) -> Result<PinnedHostBuffer<T>> {
        let bytes = byte_size::<T>(len)?;
        poll_pending_frees();
        let mut p: *mut std::ffi::c_void = ptr::null_mut();
        if bytes > 0 {
            let f = driver_fn!(cuMemHostAlloc);
            let _bound = bind(ctx.raw())?;
            // SAFETY: `p` is a valid out-pointer; the context is current.
            let rc = unsafe { f(&mut p, bytes, ffi::CU_MEMHOSTALLOC_PORTABLE) };
            check(rc, "cuMemHostAlloc")?;
            if p.is_null() {
                return Err(Error::NullHandle {
                    what: "host allocation",
                });
            }
            // SAFETY: `p` points to `bytes` writable bytes just allocated; all zeros is a valid
            // `T` (`DeviceCopy` accepts any bytes).
            unsafe { ptr::write_bytes(p.cast::<u8>(), 0, bytes) };
        }
        Ok(PinnedHostBuffer {
            ptr: if bytes > 0 {
                p.cast()
            } else {
                ptr::NonNull::dangling().as_ptr()
            },
            len,
            ctx: ctx.clone(),
            copies: HostCopies::new(),
        })
    }

    /// Page-locked memory holding a copy of `data`.
    pub fn from_slice(ctx: &Context, data: &[T]) -> Result<PinnedHostBuffer<T>> {
        let mut buf = PinnedHostBuffer::zeroed(ctx, data.len())?;
        buf.as_mut_slice()?.copy_from_slice(data);
        Ok(buf)
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

    /// The context it was allocated through (the memory is usable from every context).
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// How many copies are recorded as in flight (completed ones are forgotten as the buffer
    /// notices them). Inside a host function, while another thread is waiting on the copies or
    /// enqueueing one, the count noted when the buffer was last free.
    pub fn copies_in_flight(&self) -> usize {
        self.copies.in_flight()
    }

    /// The values, once every copy that writes them has completed (waits on the host). Inside
    /// a host function, where no wait may be made, [`Error::InHostFunction`] unless no copy is
    /// recorded (use [`try_as_slice`](PinnedHostBuffer::try_as_slice) there).
    pub fn as_slice(&self) -> Result<&[T]> {
        self.copies.wait_host(|c| c.writes_host)?;
        // SAFETY: `len` initialised values (zeroed at allocation); no copy writes them now, and
        // none can start while the slice borrows `self` (a copy into it takes `&mut self`).
        Ok(unsafe { std::slice::from_raw_parts(self.ptr, self.len) })
    }

    /// The values for writing, once every copy in flight on them has completed (waits on the
    /// host).
    pub fn as_mut_slice(&mut self) -> Result<&mut [T]> {
        self.copies.wait_host(|_| true)?;
        // SAFETY: as in `as_slice`, and no copy reads them now either; `&mut self` is exclusive.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) })
    }

    /// [`as_slice`](PinnedHostBuffer::as_slice) without waiting: [`Error::Busy`] while a copy
    /// writes the buffer. Inside a host function it never waits for another thread either:
    /// `Busy` while one is waiting on the copies or enqueueing one (that thread may be waiting
    /// for this very host function), and a recorded copy counts as in flight there (no driver
    /// call asks whether it completed).
    pub fn try_as_slice(&self) -> Result<&[T]> {
        self.copies.check_done(|c| c.writes_host)?;
        // SAFETY: as in `as_slice`.
        Ok(unsafe { std::slice::from_raw_parts(self.ptr, self.len) })
    }

    /// [`as_mut_slice`](PinnedHostBuffer::as_mut_slice) without waiting: [`Error::Busy`] while
    /// any copy uses the buffer.
    pub fn try_as_mut_slice(&mut self) -> Result<&mut [T]> {
        self.copies.check_done(|_| true)?;
        // SAFETY: as in `as_mut_slice`.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) })
    }
}

/// A copy enqueued on page-locked memory, as [`HostCopies`] sees it.
pub(crate) struct CopyKind {
    writes_host: bool,
}

impl fmt::Debug for HostCopies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostCopies")
            .field("in_flight", &self.noted.load(Ordering::Relaxed))
            .finish()
    }
}

/// The list of copies, locked; the count is noted as the lock goes.
struct Locked<'a> {
    list: MutexGuard<'a, Vec<InFlight>>,
    noted: &'a AtomicUsize,
}

impl Deref for Locked<'_> {
    type Target = Vec<InFlight>;
    fn deref(&self) -> &Vec<InFlight> {
        &self.list
    }
}

impl DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut Vec<InFlight> {
        &mut self.list
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        self.noted.store(self.list.len(), Ordering::Relaxed);
    }
}

impl HostCopies {
    pub(crate) fn new() -> HostCopies {
        HostCopies {
            in_flight: Mutex::new(Vec::new()),
            noted: AtomicUsize::new(0),
        }
    }

    /// The list, locked. Inside a host function only if no other thread holds it (`None`):
    /// a thread that does may be waiting for a copy that runs after this host function
    /// (`as_slice`), or in a driver call that waits for it (an event record behind a copy to
    /// pageable memory), and the host function would then wait for itself.
    fn lock(&self) -> Option<Locked<'_>> {
        let list = if in_host_fn() {
            match self.in_flight.try_lock() {
                Ok(list) => list,
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
                Err(TryLockError::WouldBlock) => return None,
            }
        } else {
            self.in_flight.lock().unwrap_or_else(|e| e.into_inner())
        };
        Some(Locked {
            list,
            noted: &self.noted,
        })
    }

    /// How many copies are in flight (completed ones forgotten first). Inside a host function
    /// while another thread holds the list: the count noted when it was last unlocked.
    pub(crate) fn in_flight(&self) -> usize {
        let Some(mut list) = self.lock() else {
            return self.noted.load(Ordering::Relaxed);
        };
        forget_completed(&mut list, |_| true);
        list.len()
    }

    /// Waits (`cuEventSynchronize`) for the copies `which` selects, and forgets them. Inside a
    /// host function, where no wait may be made, [`Error::InHostFunction`] unless there is
    /// nothing to wait for.
    pub(crate) fn wait_host(&self, which: impl Fn(&CopyKind) -> bool) -> Result<()> {
        let Some(mut list) = self.lock() else {
            // Another thread holds the list: copies may be in flight.
            return refuse_in_host_fn("cuEventSynchronize");
        };
        if list.is_empty() {
            return Ok(());
        }
        let f = driver_fn!(cuEventSynchronize);
        for c in list.iter().filter(|c| which(&c.kind())) {
            // SAFETY: the event is live (owned by the list).
            check(unsafe { f(c.event) }, "cuEventSynchronize")?;
        }
        forget_completed(&mut list, |c| which(&c.kind()));
        Ok(())
    }

    /// [`Error::Busy`] unless the copies `which` selects have completed (`cuEventQuery`; inside a
    /// host function, where none is asked, unless none is recorded, and `Busy` while another
    /// thread holds the list).
    pub(crate) fn check_done(&self, which: impl Fn(&CopyKind) -> bool + Copy) -> Result<()> {
        let busy = Error::Busy {
            what: "a copy in flight on page-locked host memory",
        };
        let Some(mut list) = self.lock() else {
            return Err(busy);
        };
        forget_completed(&mut list, |c| which(&c.kind()));
        if list.iter().any(|c| which(&c.kind())) {
            return Err(busy);
        }
        Ok(())
    }

    /// Every copy's context and event, taken out (for a free or an end made after them).
    pub(crate) fn take(&mut self) -> Vec<(Context, ffi::CUevent)> {
        *self.noted.get_mut() = 0;
        let list = std::mem::take(self.in_flight.get_mut().unwrap_or_else(|e| e.into_inner()));
        list.into_iter().map(|c| (c.ctx, c.event)).collect()
    }

    /// Makes `stream` wait for the copies this one conflicts with (a copy that writes the host
    /// memory conflicts with every copy; one that reads it, with those that write it), runs
    /// `op`, then records an event after it.
    fn copy_on(
        &self,
        ctx: &Context,
        raw: ffi::CUstream,
        writes_host: bool,
        op: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        // Inside a host function the list is only tried (see `lock`); the lookup of the wait
        // below refuses the copy there either way.
        let Some(mut list) = self.lock() else {
            return refuse_in_host_fn("cuStreamWaitEvent");
        };
        forget_completed(&mut list, |_| true);
        let wait = driver_fn!(cuStreamWaitEvent);
        for c in list.iter().filter(|c| writes_host || c.writes_host) {
            // SAFETY: both are live; an event of another context may be waited for.
            check(unsafe { wait(raw, c.event, 0) }, "cuStreamWaitEvent")?;
        }
        // The event first: once the copy is enqueued, it must be marked.
        let event = ctx.plain_event()?;
        if let Err(e) = op() {
            ctx.recycle_plain_event(event);
            return Err(e);
        }
        let record = driver_fn!(cuEventRecord);
        // SAFETY: the event is ours and of the stream's context (checked by the caller).
        if let Err(e) = check(unsafe { record(event, raw) }, "cuEventRecord") {
            ctx.recycle_plain_event(event);
            // The copy is enqueued and nothing marks its end: wait for the stream instead.
            let sync = driver_fn!(cuStreamSynchronize);
            // SAFETY: the stream is live (the caller's borrow).
            let _ = unsafe { sync(raw) };
            return Err(e);
        }
        list.push(InFlight {
            ctx: ctx.clone(),
            event,
            writes_host,
        });
        Ok(())
    }
}

impl InFlight {
    fn kind(&self) -> CopyKind {
        CopyKind {
            writes_host: self.writes_host,
        }
    }
}

impl CopyKind {
    /// Whether the copy writes the host memory.
    pub(crate) fn writes_host(&self) -> bool {
        self.writes_host
    }
}

/// Page-locked host memory that the asynchronous copies take ([`DeviceBuffer::copy_from_pinned`],
/// [`DeviceBuffer::copy_to_pinned`] and the views' forms): a [`PinnedHostBuffer`], or a
/// [`RegisteredHost`](crate::RegisteredHost) (host memory of the caller's, page-locked for a
/// scope). Sealed.
pub trait PageLocked<T: DeviceCopy>: page_locked::Sealed<T> {}

pub(crate) mod page_locked {
    /// The parts a copy needs: the address, the length, and the copies in flight.
    pub trait Sealed<T> {
        /// The memory's address, its number of values, and its copies in flight.
        fn parts(&self) -> (*mut T, usize, &super::HostCopies);
    }
}

impl<T: DeviceCopy> page_locked::Sealed<T> for PinnedHostBuffer<T> {
    fn parts(&self) -> (*mut T, usize, &HostCopies) {
        (self.ptr, self.len, &self.copies)
    }
}

impl<T: DeviceCopy> PageLocked<T> for PinnedHostBuffer<T> {}

/// Forgets the completed copies among those `which` selects, giving their events back. A copy
/// whose query fails is kept (waited for again later), never taken as done.
fn forget_completed(list: &mut Vec<InFlight>, which: impl Fn(&InFlight) -> bool) {
    let Ok(query) = lookup("cuEventQuery", ffi::fns::cuEventQuery) else {
        return;
    };
    list.retain(|c| {
        if !which(c) {
            return true;
        }
        // SAFETY: the event is live (owned by the list).
        let rc = unsafe { query(c.event) };
        // Only success says the copy is done; after an error it still counts as in flight.
        if rc != ffi::CUresult::CUDA_SUCCESS {
            return true;
        }
        c.ctx.recycle_plain_event(c.event);
        false
    });
}

fn free_host(ctx: &Context, p: usize) -> Result<()> {
    // The driver frees host memory only with a context current (else
    // `CUDA_ERROR_INVALID_CONTEXT`, and the memory would stay allocated).
    let _bound = bind(ctx.raw())?;
    let f = driver_fn!(cuMemFreeHost);
    // SAFETY: the memory came from `cuMemHostAlloc`, is freed once, and no copy uses it.
    check(unsafe { f(p as *mut std::ffi::c_void) }, "cuMemFreeHost")
}

impl<T: DeviceCopy> Drop for PinnedHostBuffer<T> {
    /// Frees the memory once every copy in flight on it has completed: now if they have, else at
    /// a later allocation or free (inside a host function always then: no CUDA call is made
    /// there).
    fn drop(&mut self) {
        if self.byte_len() == 0 {
            return;
        }
        let events = self.copies.take();
        let _ = free_when_done(&self.ctx, self.ptr as usize, events, free_host);
    }
}

impl<T: DeviceCopy> DeviceBuffer<T> {
    /// Enqueues a copy of `src` (of the buffer's length) into this buffer on `stream`
    /// (`cuMemcpyHtoDAsync`) and returns at once. Safe: the device side is ordered like any
    /// write of the buffer, and `src` records the copy, so writing it from the host
    /// ([`as_mut_slice`](PinnedHostBuffer::as_mut_slice)) or freeing it waits for the copy.
    /// Refused on a capturing stream ([`Error::Capturing`]): a replay would read the host
    /// memory at a time nothing records.
    pub fn copy_from_pinned(&self, stream: &impl Enqueue, src: &impl PageLocked<T>) -> Result<()> {
        self.span().pinned_copy(stream, src, false)
    }

    /// Enqueues a copy of this buffer into `dst` (of the buffer's length) on `stream`
    /// (`cuMemcpyDtoHAsync`) and returns at once. Safe: the device side is ordered like any
    /// read of the buffer, and `dst` records the copy, so reading it from the host
    /// ([`as_slice`](PinnedHostBuffer::as_slice)) waits for the copy. Refused on a capturing
    /// stream ([`Error::Capturing`]).
    pub fn copy_to_pinned(
        &self,
        stream: &impl Enqueue,
        dst: &mut impl PageLocked<T>,
    ) -> Result<()> {
        self.span().pinned_copy(stream, dst, true)
    }
}

impl<T: DeviceCopy> Span<'_, T> {
    /// The page-locked copy of `DeviceBuffer::copy_from_pinned` and `copy_to_pinned`, on this
    /// span's values.
    pub(crate) fn pinned_copy(
        self,
        stream: &impl Enqueue,
        host: &impl PageLocked<T>,
        to_host: bool,
    ) -> Result<()> {
        let (h, host_len, copies) = host.parts();
        if host_len != self.len() {
            return Err(Error::LengthMismatch {
                expected: self.len(),
                actual: host_len,
            });
        }
        let (raw, stream_ctx) = stream.enqueue_handle();
        if stream_ctx != self.context().raw() {
            return Err(Error::ContextMismatch { what: "the buffer" });
        }
        let _bound = bind_for_copy(raw, stream_ctx)?;
        if crate::driver::capture_query::is_capturing(raw)? {
            return Err(Error::Capturing {
                op: if to_host {
                    "DeviceBuffer::copy_to_pinned"
                } else {
                    "DeviceBuffer::copy_from_pinned"
                },
            });
        }
        self.alloc_ref().check_outside_capture()?;
        let bytes = self.byte_len();
        if bytes == 0 {
            return Ok(());
        }
        let dev = self.device_ptr();
        let access = if to_host { Access::Read } else { Access::Write };
        self.alloc_ref().uses.around(raw, access, || {
            copies.copy_on(self.context(), raw, to_host, || {
                if to_host {
                    let f = driver_fn!(cuMemcpyDtoHAsync);
                    // SAFETY: `h` holds `bytes` bytes of page-locked memory that is freed, read
                    // or written by the host only after the event recorded after this copy; the
                    // device buffer is freed only after this recorded use.
                    check(unsafe { f(h.cast(), dev, bytes, raw) }, "cuMemcpyDtoHAsync")
                } else {
                    let f = driver_fn!(cuMemcpyHtoDAsync);
                    // SAFETY: as above; the host memory is written by the host only after the
                    // event recorded after this copy.
                    check(unsafe { f(dev, h.cast(), bytes, raw) }, "cuMemcpyHtoDAsync")
                }
            })
        })
    }
}

impl<T: DeviceCopy> DeviceSliceMut<'_, T> {
    /// Enqueues a copy of `src` (of the view's length) into the view on `stream` and returns at
    /// once: see [`DeviceBuffer::copy_from_pinned`].
    pub fn copy_from_pinned(
        &mut self,
        stream: &impl Enqueue,
        src: &impl PageLocked<T>,
    ) -> Result<()> {
        self.span().pinned_copy(stream, src, false)
    }

    /// Enqueues a copy of the view into `dst` (of the view's length) on `stream` and returns at
    /// once: see [`DeviceBuffer::copy_to_pinned`].
    pub fn copy_to_pinned(
        &self,
        stream: &impl Enqueue,
        dst: &mut impl PageLocked<T>,
    ) -> Result<()> {
        self.span().pinned_copy(stream, dst, true)
    }
}

impl<T: DeviceCopy> DeviceSlice<'_, T> {
    /// Enqueues a copy of the view into `dst` (of the view's length) on `stream` and returns at
    /// once: see [`DeviceBuffer::copy_to_pinned`].
    pub fn copy_to_pinned(
        &self,
        stream: &impl Enqueue,
        dst: &mut impl PageLocked<T>,
    ) -> Result<()> {
        self.span().pinned_copy(stream, dst, true)
    }
}
