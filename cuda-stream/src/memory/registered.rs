//! [`RegisteredHost`]: the caller's own host memory (`&mut [T]`), page-locked for a scope
//! (`cuMemHostRegister`, `cuMemHostUnregister`), with the same safe asynchronous copies as a
//! [`PinnedHostBuffer`](crate::PinnedHostBuffer).

use std::fmt;
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

use crate::base::error::{Error, Result, check, driver_fn};
use crate::base::plain_data::DeviceCopy;
use crate::driver::context::{Context, bind};
use crate::ffi;
use crate::memory::buffer::byte_size;
use crate::memory::pinned::{HostCopies, PageLocked, page_locked};

/// The caller's host memory, page-locked (`cuMemHostRegister`, portable to every context) for
/// the length of [`RegisteredHost::scope`], so that copies between it and device memory run
/// asynchronously at full link speed, without a staging copy and without allocating page-locked
/// memory of this crate's. It takes every copy a [`PinnedHostBuffer`](crate::PinnedHostBuffer)
/// takes ([`DeviceBuffer::copy_from_pinned`](crate::DeviceBuffer::copy_from_pinned),
/// [`copy_to_pinned`](crate::DeviceBuffer::copy_to_pinned), and the views' forms), with the same
/// rules: host access through [`as_slice`](RegisteredHost::as_slice) and
/// [`as_mut_slice`](RegisteredHost::as_mut_slice) waits for the copies it conflicts with, and a
/// copy that writes the memory takes it by `&mut`.
///
/// **The borrow cannot end while a copy is in flight.** The memory is the caller's `&mut [T]`,
/// borrowed for the scope: the slice cannot be touched during it (a compile error), and the scope
/// returns only after every copy enqueued on the memory has completed (it waits on the host),
/// and the memory is unregistered, also when the closure panics. The closure receives the
/// registered memory by `&mut` only, so it cannot keep it, forget it or swap it with another
/// scope's (each scope's type is its own: `'id` is a brand).
///
/// Registering is slow (the driver pins every page; tens of microseconds per megabyte) and, like
/// `cudaHostRegister`, may wait for the device's work: register memory that many copies will use.
/// Memory on a page that is already registered (by another scope, or another library) is the
/// driver's `CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED`; page-locked memory of `cuMemHostAlloc`
/// (a [`PinnedHostBuffer`](crate::PinnedHostBuffer)'s) is `CUDA_ERROR_INVALID_VALUE` (H100,
/// driver 580).
///
/// ```no_run
/// use cuda_stream::{Context, DeviceBuffer, RegisteredHost};
///
/// let ctx = Context::primary(0)?;
/// let stream = ctx.new_stream()?;
/// let mut data = vec![1.0f32; 1 << 20];
/// let dev = DeviceBuffer::<f32>::alloc_on(&ctx, &stream, data.len())?;
/// let first = RegisteredHost::scope(&ctx, &mut data, |host| {
///     dev.copy_from_pinned(&stream, host)?;   // returns at once, reads `data` by DMA
///     dev.copy_to_pinned(&stream, host)?;     // ordered after it
///     Ok::<_, cuda_stream::Error>(host.as_slice()?[0]) // waits for the download
/// })??;
/// assert_eq!(first, 1.0);
/// // Here every copy has completed and `data` is ordinary memory again.
/// # Ok::<(), cuda_stream::Error>(())
/// ```
pub struct RegisteredHost<'id, T: DeviceCopy> {
    ptr: *mut T,
    len: usize,
    ctx: Context,
    copies: HostCopies,
    /// Invariant in `'id`: two scopes' values are of different types.
    _brand: PhantomData<fn(&'id ()) -> &'id ()>,
}

// SAFETY: the memory is the caller's `&mut [T]` (exclusive for the scope); `T: DeviceCopy` is
// `Send + Sync`; the in-flight list is locked.
unsafe impl<T: DeviceCopy> Send for RegisteredHost<'_, T> {}
// SAFETY: shared access only reads the memory (after waiting for copies that write it).
unsafe impl<T: DeviceCopy> Sync for RegisteredHost<'_, T> {}

impl<T: DeviceCopy> fmt::Debug for RegisteredHost<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegisteredHost")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .field("copies", &self.copies)
            .finish()
    }
}

impl<T: DeviceCopy> RegisteredHost<'static, T> {
    /// Page-locks `data` (`cuMemHostRegister` with `CU_MEMHOSTREGISTER_PORTABLE`, `ctx` current
    /// for the call), runs `f` with it, then waits for every copy enqueued on it and unregisters
    /// it (`cuMemHostUnregister`), and returns what `f` returned. If `f` panics, the wait and the
    /// unregistration happen before the panic goes on. An empty slice is not registered (its
    /// copies copy nothing).
    ///
    /// An error of the registration is returned before `f` runs; an error of the final wait or
    /// of the unregistration is returned in place of `f`'s result (a failed wait means the
    /// context failed: its work does not run, and the memory is given back all the same).
    pub fn scope<R>(
        ctx: &Context,
        data: &mut [T],
        f: impl for<'id> FnOnce(&mut RegisteredHost<'id, T>) -> R,
    ) -> Result<R> {
        let bytes = byte_size::<T>(data.len())?;
        let ptr = data.as_mut_ptr();
        if bytes > 0 {
            let register = driver_fn!(cuMemHostRegister);
            let _bound = bind(ctx.raw())?;
            // SAFETY: `data` is `bytes` bytes of the caller's memory, exclusively borrowed for
            // this call, which unregisters it before returning.
            let rc = unsafe { register(ptr.cast(), bytes, ffi::CU_MEMHOSTREGISTER_PORTABLE) };
            check(rc, "cuMemHostRegister")?;
        }
        let mut host = RegisteredHost {
            ptr,
            len: data.len(),
            ctx: ctx.clone(),
            copies: HostCopies::new(),
            _brand: PhantomData,
        };
        let out = catch_unwind(AssertUnwindSafe(|| f(&mut host)));
        let ended = host.end(bytes > 0);
        match out {
            Ok(r) => ended.map(|()| r),
            Err(panic) => resume_unwind(panic),
        }
    }
}

impl<'id, T: DeviceCopy> RegisteredHost<'id, T> {
    /// How many values.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no values.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The context it was registered through (the memory is usable from every context).
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// How many copies are recorded as in flight (completed ones are forgotten as it notices
    /// them).
    pub fn copies_in_flight(&self) -> usize {
        self.copies.in_flight()
    }

    /// The values, once every copy that writes them has completed (waits on the host).
    pub fn as_slice(&self) -> Result<&[T]> {
        self.copies.wait_host(|c| c.writes_host())?;
        // SAFETY: the caller's initialised slice, borrowed for the scope; no copy writes it now,
        // and none can start while this borrows `self` (a copy into it takes `&mut self`).
        Ok(unsafe { std::slice::from_raw_parts(self.ptr, self.len) })
    }

    /// The values for writing, once every copy in flight on them has completed (waits on the
    /// host).
    pub fn as_mut_slice(&mut self) -> Result<&mut [T]> {
        self.copies.wait_host(|_| true)?;
        // SAFETY: as in `as_slice`, and no copy reads them now either; `&mut self` is exclusive.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) })
    }

    /// [`as_slice`](RegisteredHost::as_slice) without waiting: [`Error::Busy`](crate::Error::Busy) while a copy
    /// writes the memory.
    pub fn try_as_slice(&self) -> Result<&[T]> {
        self.copies.check_done(|c| c.writes_host())?;
        // SAFETY: as in `as_slice`.
        Ok(unsafe { std::slice::from_raw_parts(self.ptr, self.len) })
    }

    /// [`as_mut_slice`](RegisteredHost::as_mut_slice) without waiting: [`Error::Busy`](crate::Error::Busy) while
    /// any copy uses the memory.
    pub fn try_as_mut_slice(&mut self) -> Result<&mut [T]> {
        self.copies.check_done(|_| true)?;
        // SAFETY: as in `as_mut_slice`.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) })
    }

    /// Waits for every copy in flight, then unregisters the memory (if it was registered).
    /// A wait that fails falls back to synchronising the copy's context; where that fails too,
    /// the context has failed and runs none of its work.
    fn end(&mut self, registered: bool) -> Result<()> {
        let mut result = Ok(());
        let sync = driver_fn!(cuEventSynchronize);
        for (ctx, event) in self.copies.take() {
            // SAFETY: the event is live (taken from the list, given back below).
            let waited = check(unsafe { sync(event) }, "cuEventSynchronize");
            if waited.is_err() {
                let _ = ctx.synchronize();
            }
            result = result.and(waited);
            ctx.recycle_plain_event(event);
        }
        if registered {
            let unregister = driver_fn!(cuMemHostUnregister);
            let attempt = || {
                bind(self.ctx.raw()).and_then(|_bound| {
                    // SAFETY: registered by `scope`; no copy is in flight on it any more.
                    check(
                        unsafe { unregister(self.ptr.cast()) },
                        "cuMemHostUnregister",
                    )
                })
            };
            // The memory goes back to the caller's allocator after this: a binding that failed
            // once is tried again rather than leave the pages registered.
            let unregistered = attempt().or_else(|e| match e {
                Error::Driver {
                    call: "cuMemHostUnregister",
                    ..
                } => Err(e),
                _ => attempt(),
            });
            result = result.and(unregistered);
        }
        result
    }
}

impl<T: DeviceCopy> page_locked::Sealed<T> for RegisteredHost<'_, T> {
    fn parts(&self) -> (*mut T, usize, &HostCopies) {
        (self.ptr, self.len, &self.copies)
    }
}

impl<T: DeviceCopy> PageLocked<T> for RegisteredHost<'_, T> {}
