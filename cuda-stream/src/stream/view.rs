//! The borrowed stream view [`Stream`] and its core operations (written once, here): query,
//! synchronize, events, waits and getters. Owners (`owned`, `pool`) lend it; conveniences
//! (host functions, the current-stream guard, completion futures, scopes) add their own
//! `impl Stream` blocks from above.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;
use std::ptr;

use crate::base::error::{Error, Result, check, driver_fn};
use crate::base::newest_abi::Newest;
use crate::driver::context::{Bound, Context, bind, current_context_raw, push_bound};
use crate::driver::device::Device;
use crate::driver::event::{Event, EventOptions};
use crate::ffi;

/// A borrowed view of a stream: the handle, its context, and a lifetime that stops it outliving
/// whatever owns the stream. `Copy`, two pointers wide, `Send + Sync`.
///
/// The core stream operations live here; [`OwnedStream`](crate::OwnedStream) and anything else
/// that implements [`AsStream`] hands one out, and the conveniences (host functions, completion,
/// scopes, the current-stream guard) add theirs from their own modules. Borrowing a foreign
/// handle (PyTorch, CuPy, cuda.core, cudarc, C code) is [`Stream::borrow_raw`].
#[derive(Clone, Copy)]
pub struct Stream<'a> {
    raw: ffi::CUstream,
    ctx: ffi::CUcontext,
    _owner: PhantomData<&'a ()>,
}

// SAFETY: stream and context handles are driver objects that the driver lets any thread use.
unsafe impl Send for Stream<'_> {}
// SAFETY: as above; the view has no interior mutability.
unsafe impl Sync for Stream<'_> {}

/// Anything that can lend a [`Stream`] view, in the manner of `AsFd`.
pub trait AsStream {
    /// Borrows the stream.
    fn as_stream(&self) -> Stream<'_>;
}

impl AsStream for Stream<'_> {
    fn as_stream(&self) -> Stream<'_> {
        *self
    }
}

impl<T: AsStream + ?Sized> AsStream for &T {
    fn as_stream(&self) -> Stream<'_> {
        (**self).as_stream()
    }
}

/// Where work can be enqueued: every stream and owner of one (anything [`AsStream`]), and, while
/// a graph is being captured, the capture's view of its stream, which offers no blocking or
/// polling operation. Operations that only enqueue work (kernel launches, memset, memcpy) take
/// `&impl Enqueue`, so they work the same on a stream and inside a capture. Sealed: only this
/// crate's types implement it, so a raw handle cannot be passed off as a live stream.
pub trait Enqueue: sealed::Sealed {
    /// The raw stream handle work is enqueued on, and its context.
    fn enqueue_handle(&self) -> (ffi::CUstream, ffi::CUcontext);
}

pub(crate) mod sealed {
    /// Keeps [`Enqueue`](super::Enqueue) to this crate's types.
    pub trait Sealed {}
}

impl<T: AsStream + ?Sized> sealed::Sealed for T {}

impl<T: AsStream + ?Sized> Enqueue for T {
    #[inline(always)]
    fn enqueue_handle(&self) -> (ffi::CUstream, ffi::CUcontext) {
        let s = self.as_stream();
        (s.raw, s.ctx)
    }
}

impl fmt::Debug for Stream<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Stream");
        match self.raw as usize {
            0 => d.field("raw", &"null"),
            1 => d.field("raw", &"legacy"),
            2 => d.field("raw", &"per-thread"),
            _ => d.field("raw", &self.raw),
        };
        d.field("ctx", &self.ctx).finish()
    }
}

impl PartialEq for Stream<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}
impl Eq for Stream<'_> {}
impl Hash for Stream<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key().hash(state)
    }
}
impl PartialOrd for Stream<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Stream<'_> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

pub(crate) fn is_special(raw: ffi::CUstream) -> bool {
    (raw as usize) <= 2
}

/// Binds `ctx` for a call on `raw` if `raw` is a default stream, which the driver resolves
/// through the current context; explicit handles need no binding. For operations that only
/// enqueue, on an [`Enqueue::enqueue_handle`].
#[inline(always)]
pub(crate) fn bind_if_special(raw: ffi::CUstream, ctx: ffi::CUcontext) -> Result<Option<Bound>> {
    if is_special(raw) {
        bind_special(ctx)
    } else {
        Ok(None)
    }
}

/// [`bind_if_special`] for a default stream: out of line, so that the calls on created streams
/// (nearly all) carry no binding code between theirs.
#[inline(never)]
fn bind_special(ctx: ffi::CUcontext) -> Result<Option<Bound>> {
    bind(ctx).map(Some)
}

/// Binds `ctx` for a copy on `raw` (a stream of `ctx`): as [`bind_if_special`] for a default
/// stream, and for an explicit handle whenever a context other than `ctx` is current.
///
/// Measured on an H100 (driver 580.159, `tests/examples/contexts.rs`): a copy that touches
/// stream-ordered (pool) memory of one device, of host memory pageable or pinned or of device
/// memory, fails with `CUDA_ERROR_INVALID_VALUE` while a context of *another device* is current,
/// unless that device was granted access to the pool; with no context current, or a context of
/// the same device, it works, and memsets and kernel launches work in every case. Other code
/// leaves contexts current behind the crate's back (the CUDA runtime's `cudaSetDevice`, NCCL's
/// collectives, PyTorch), so every copy checks: one `cuCtxGetCurrent` (about 16 ns) when
/// nothing needs binding, a push and a pop (about 61 ns) when something does.
#[inline]
pub(crate) fn bind_for_copy(raw: ffi::CUstream, ctx: ffi::CUcontext) -> Result<Option<Bound>> {
    let current = current_context_raw()?;
    if current == ctx || (current.is_null() && !is_special(raw)) {
        return Ok(None);
    }
    push_bound(ctx).map(Some)
}

impl<'a> Stream<'a> {
    pub(crate) fn special(value: usize, ctx: ffi::CUcontext) -> Stream<'a> {
        Stream {
            raw: value as ffi::CUstream,
            ctx,
            _owner: PhantomData,
        }
    }

    /// A view with an unchecked lifetime, for types of this crate that own the handle.
    pub(crate) fn from_parts(raw: ffi::CUstream, ctx: ffi::CUcontext) -> Stream<'a> {
        Stream {
            raw,
            ctx,
            _owner: PhantomData,
        }
    }

    /// Borrows a stream handle created elsewhere (PyTorch's `torch.cuda.Stream().cuda_stream`,
    /// CuPy's `ptr`, cuda.core's `handle`, a cudarc stream, C code) for as long as `owner` is
    /// borrowed. The stream's context is looked up from the handle (`cuStreamGetCtx`), so the
    /// caller never states a device that could be wrong.
    ///
    /// Rejects the special values 0x0, 0x1 and 0x2 with [`Error::SpecialHandle`]: those mean
    /// "the current context's default stream", so use [`Context::legacy_stream`] and friends.
    ///
    /// ```no_run
    /// # use cuda_stream::Stream;
    /// /// Called from Python with `torch.cuda.current_stream().cuda_stream`.
    /// extern "C" fn enqueue(handle: usize) -> i32 {
    ///     let owner = (); // stands for the framework, which keeps the stream alive during the call
    ///     // SAFETY: the framework keeps `handle` alive until this function returns.
    ///     let stream = match unsafe { Stream::borrow_raw(handle as _, &owner) } {
    ///         Ok(s) => s,
    ///         Err(_) => return 1,
    ///     };
    ///     stream.launch_host_func(|| println!("after the framework's work")).is_err() as i32
    /// }
    /// ```
    ///
    /// # Safety
    ///
    /// `raw` must be a live stream handle (not destroyed, of a live context) and must stay live
    /// for as long as `owner` is borrowed, which bounds the returned view and every copy of it:
    /// in particular for as long as any [`CurrentStreamGuard`](crate::CurrentStreamGuard) made
    /// from it lives (do not leak one with `mem::forget`). An [`Event`] recorded through the view
    /// with [`Stream::record_event`] keeps the context alive only if it is a primary context; for
    /// any other context, the caller keeps the context alive until such events are dropped (and,
    /// for one dropped inside a host function, until its queued destroy was made: call
    /// [`drain_deferred`](crate::drain_deferred) before destroying the context). The
    /// driver cannot validate a dangling handle (looking one up can crash the process), so this
    /// cannot be checked.
    ///
    /// Graph captures: other code must not begin capturing the stream (PyTorch's
    /// `torch.cuda.graph`, C code) while a call through the view is in progress on another
    /// thread, and while the stream is being captured, no stream made to wait on it (with
    /// [`Stream::wait_stream`], or an event recorded through the view) may have run-once host
    /// functions launched on it from another thread. Between calls a capture is seen:
    /// [`Stream::launch_host_func`] refuses a capturing stream (a run-once closure would run on
    /// every replay), and [`Stream::in_capture`] enqueues into the capture.
    pub unsafe fn borrow_raw<O: ?Sized>(raw: ffi::CUstream, owner: &'a O) -> Result<Stream<'a>> {
        let _ = owner;
        if is_special(raw) {
            return Err(Error::SpecialHandle {
                handle: raw as usize,
            });
        }
        let f = driver_fn!(cuStreamGetCtx);
        let mut ctx = ptr::null_mut();
        // SAFETY: the caller promises `raw` is a live stream; `ctx` is a valid out-pointer.
        check(unsafe { f(raw, &mut ctx) }, "cuStreamGetCtx")?;
        Ok(Stream::from_parts(raw, ctx))
    }

    /// The raw handle; 0x0, 0x1 or 0x2 for the default streams.
    ///
    /// Taking the handle lends the stream to code this crate cannot see: from then on other code
    /// may capture it (`cuStreamBeginCapture`, as `torch.cuda.graph` does) at any moment, so
    /// buffers used on a stream this crate created stop relying on its order once its handle
    /// was taken, and mark each use with an event recorded right after it (one `cuEventRecord`
    /// per use; see the ordering model in the memory layer's docs). A stream whose handle was
    /// never taken pays for no event while a buffer stays on it. Code that captures the handle
    /// must not begin the capture while a call of this crate on the stream is in progress on
    /// another thread, and work on buffers of this crate in that capture is refused (its graphs
    /// are launched where this crate cannot order them).
    pub fn raw(self) -> ffi::CUstream {
        crate::stream::known_streams::lend(self.raw);
        self.raw
    }

    /// The raw handle, for this crate's own calls (the handle does not leave the crate).
    #[inline(always)]
    pub(crate) fn handle(self) -> ffi::CUstream {
        self.raw
    }

    /// The raw handle of the stream's context.
    pub fn context_raw(self) -> ffi::CUcontext {
        self.ctx
    }

    /// Whether this is one of the default streams (null, legacy, per-thread).
    pub fn is_default(self) -> bool {
        is_special(self.raw)
    }

    fn key(&self) -> (usize, usize) {
        (self.raw as usize, self.ctx as usize)
    }

    /// Binds the context for the default streams, which the driver resolves through it.
    #[inline(always)]
    pub(crate) fn bind_if_default(self) -> Result<Option<Bound>> {
        bind_if_special(self.raw, self.ctx)
    }

    /// Whether all work enqueued so far has completed (`cuStreamQuery`). `Ok(false)` only for
    /// `CUDA_ERROR_NOT_READY`; any other error is returned, never swallowed. A host function of
    /// this stream that panicked is reported here once it has run.
    #[inline]
    pub fn query(self) -> Result<bool> {
        let f = driver_fn!(cuStreamQuery);
        let _bound = self.bind_if_default()?;
        // SAFETY: `self.raw` is live for 'a (the view's invariant).
        let rc = unsafe { f(self.raw) };
        match rc {
            ffi::CUresult::CUDA_SUCCESS => {
                crate::stream::host_panics::report(self.raw, self.ctx)?;
                Ok(true)
            }
            ffi::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            rc => Err(Error::driver("cuStreamQuery", rc)),
        }
    }

    /// Blocks until all work enqueued so far has completed (`cuStreamSynchronize`), then reports
    /// a panic of one of this stream's host functions, if any. Also destroys what host functions
    /// dropped meanwhile (one atomic load when they dropped nothing; see
    /// [`drain_deferred`](crate::drain_deferred)).
    #[inline]
    pub fn synchronize(self) -> Result<()> {
        let f = driver_fn!(cuStreamSynchronize);
        let _bound = self.bind_if_default()?;
        // SAFETY: `self.raw` is live for 'a.
        let r = check(unsafe { f(self.raw) }, "cuStreamSynchronize");
        crate::driver::deferred_destroy::drain_if_pending();
        r?;
        crate::stream::host_panics::report(self.raw, self.ctx)
    }

    /// Records a new event (timing disabled) capturing the work enqueued so far. The event is
    /// one of the context's spare events when it keeps one (see [`Event`]): then the only driver
    /// call is `cuEventRecord`.
    pub fn record_event(self) -> Result<Event> {
        self.record_event_with(EventOptions::new())
    }

    /// Records a new event with the given options.
    pub fn record_event_with(self, options: EventOptions) -> Result<Event> {
        self.record_event_in(None, options)
    }

    /// Records a new event that keeps `known` (the stream's context, when the caller has it)
    /// alive; with `None` the context is found among the live `Context`s, or looked up and
    /// retained if it is a primary one.
    pub(crate) fn record_event_in(
        self,
        known: Option<Context>,
        options: EventOptions,
    ) -> Result<Event> {
        let event = Event::create_in(self.ctx, known, options)?;
        self.record(&event)?;
        Ok(event)
    }

    /// Records `event` (reused) here: it completes when the work enqueued so far has completed.
    /// The event must belong to this stream's context ([`Error::ContextMismatch`] otherwise; the
    /// driver would say `CUDA_ERROR_INVALID_HANDLE`).
    #[inline]
    pub fn record(self, event: &Event) -> Result<()> {
        if event.context_raw() != self.ctx {
            return Err(Error::ContextMismatch { what: "the event" });
        }
        let f = driver_fn!(cuEventRecord);
        let _bound = self.bind_if_default()?;
        // SAFETY: both handles are live: the stream for 'a, the event while borrowed.
        check(unsafe { f(event.raw(), self.raw) }, "cuEventRecord")?;
        event.mark_recorded();
        Ok(())
    }

    /// Makes work enqueued here from now on wait for `event` (`cuStreamWaitEvent`). Returns at
    /// once. The event may belong to another context, even of another device. An event this
    /// crate created and never recorded has nothing to wait for: no driver call is made (its
    /// handle may be a recycled one, whose earlier record must not be waited for).
    #[inline]
    pub fn wait_event(self, event: &Event) -> Result<()> {
        if !event.may_hold_record() {
            return Ok(());
        }
        // SAFETY: the event is live while borrowed.
        unsafe { self.wait_event_raw(event.raw()) }
    }

    /// [`Stream::wait_event`] for an event handle created elsewhere. Waiting on an event recorded
    /// in a graph capture (a [`CapturedEvent`](crate::CapturedEvent)'s handle, or another
    /// library's) makes this stream join that capture: its later work is captured, not run, and
    /// the capture cannot end until the stream is joined back.
    ///
    /// # Safety
    /// `event` must be a live event handle for the duration of the call.
    #[inline]
    pub unsafe fn wait_event_raw(self, event: ffi::CUevent) -> Result<()> {
        let f = driver_fn!(cuStreamWaitEvent);
        let _bound = self.bind_if_default()?;
        // SAFETY: the stream is live for 'a; the caller vouches for the event.
        check(unsafe { f(self.raw, event, 0) }, "cuStreamWaitEvent")
    }

    /// Makes work enqueued here from now on wait for the work enqueued on `other` so far (what
    /// cudarc calls `join`). Returns at once. Costs one event record and one wait: the event
    /// comes from a per-thread cache instead of being created and destroyed on every call.
    #[inline]
    #[doc(alias = "join")]
    pub fn wait_stream(self, other: &impl AsStream) -> Result<()> {
        let other = other.as_stream();
        if other.key() == self.key() {
            return Ok(());
        }
        crate::stream::wait_event_cache::WAIT_EVENTS.with_event(other.ctx, |event| {
            let record = driver_fn!(cuEventRecord);
            let wait = driver_fn!(cuStreamWaitEvent);
            {
                let _bound = other.bind_if_default()?;
                // SAFETY: the cached event belongs to `other`'s context and lives while the
                // closure runs; `other` is live for its lifetime.
                check(unsafe { record(event, other.raw) }, "cuEventRecord")?;
            }
            let _bound = self.bind_if_default()?;
            // SAFETY: as above; the wait captures the event's state now, so reusing the event
            // later cannot change what this stream waits for.
            check(unsafe { wait(self.raw, event, 0) }, "cuStreamWaitEvent")
        })
    }

    /// The device the stream's work runs on (`cuStreamGetDevice` on CUDA 12.8 and later, else
    /// the device of its context).
    pub fn device(self) -> Result<Device> {
        // Looked up once: on older drivers every call goes straight to the context.
        static GET_DEVICE: Newest<ffi::pfn::cuStreamGetDevice> = Newest::new();
        if !self.is_default() {
            // Inside a host function the context's path below is refused too.
            if let Ok(f) = GET_DEVICE.get("cuStreamGetDevice", &[ffi::fns::cuStreamGetDevice]) {
                let mut d = 0;
                // SAFETY: `self.raw` is live; `d` is a valid out-pointer.
                check(unsafe { f(self.raw, &mut d) }, "cuStreamGetDevice")?;
                return Ok(Device::from_raw(d));
            }
        }
        let _bound = bind(self.ctx)?;
        let f = driver_fn!(cuCtxGetDevice);
        let mut d = 0;
        // SAFETY: `d` is a valid out-pointer; the stream's context is current.
        check(unsafe { f(&mut d) }, "cuCtxGetDevice")?;
        Ok(Device::from_raw(d))
    }

    /// The creation flags (`cuStreamGetFlags`).
    pub fn flags(self) -> Result<u32> {
        let f = driver_fn!(cuStreamGetFlags);
        let _bound = self.bind_if_default()?;
        let mut flags = 0;
        // SAFETY: `self.raw` is live; `flags` is a valid out-pointer.
        check(unsafe { f(self.raw, &mut flags) }, "cuStreamGetFlags")?;
        Ok(flags)
    }

    /// Whether the stream does not synchronise with the legacy default stream.
    pub fn is_nonblocking(self) -> Result<bool> {
        Ok(self.flags()? & ffi::CUstream_flags::CU_STREAM_NON_BLOCKING.0 != 0)
    }

    /// The stream's priority (`cuStreamGetPriority`); lower numbers run first.
    pub fn priority(self) -> Result<i32> {
        let f = driver_fn!(cuStreamGetPriority);
        let _bound = self.bind_if_default()?;
        let mut p = 0;
        // SAFETY: `self.raw` is live; `p` is a valid out-pointer.
        check(unsafe { f(self.raw, &mut p) }, "cuStreamGetPriority")?;
        Ok(p)
    }

    /// The driver's unique id of the stream (`cuStreamGetId`, CUDA 12.0 and later).
    pub fn id(self) -> Result<u64> {
        let f = driver_fn!(cuStreamGetId);
        let _bound = self.bind_if_default()?;
        let mut id = 0;
        // SAFETY: `self.raw` is live; `id` is a valid out-pointer.
        check(unsafe { f(self.raw, &mut id) }, "cuStreamGetId")?;
        Ok(id)
    }
}

/// The default streams, bound to their context (they are valid no longer than it).
impl Context {
    /// The context's legacy default stream (`CU_STREAM_LEGACY`, 0x1): it synchronises with every
    /// blocking stream of the context. Operations on it make this context current for their
    /// duration, since the driver resolves the value through the current context.
    pub fn legacy_stream(&self) -> Stream<'_> {
        Stream::special(1, self.raw())
    }

    /// The context's per-thread default stream (`CU_STREAM_PER_THREAD`, 0x2): one per host thread,
    /// not synchronising with other streams.
    pub fn per_thread_stream(&self) -> Stream<'_> {
        Stream::special(2, self.raw())
    }

    /// The null stream (0x0), which the driver API treats as the legacy default stream.
    pub fn null_stream(&self) -> Stream<'_> {
        Stream::special(0, self.raw())
    }

    /// The context's default stream, as the CUDA runtime and cudarc's `default_stream` mean it:
    /// the [legacy default stream](Context::legacy_stream).
    pub fn default_stream(&self) -> Stream<'_> {
        self.legacy_stream()
    }
}

/// The context an owner of a stream already holds, so events it records need no lookup.
pub(crate) trait KnownContext {
    fn known_context(&self) -> Option<Context>;
}

/// Forwards the core operations of [`Stream`] to a type that implements [`AsStream`], so owned
/// streams and pool leases offer them without repeating their bodies. The conveniences above
/// (host functions, completion, scope, the current-stream guard) forward their own.
macro_rules! forward_stream_ops {
    ($ty:ty) => {
        impl $ty {
            /// See [`Stream::raw`].
            #[inline(always)]
            pub fn raw(&self) -> $crate::ffi::CUstream {
                $crate::AsStream::as_stream(self).raw()
            }
            /// See [`Stream::query`].
            #[inline(always)]
            pub fn query(&self) -> $crate::Result<bool> {
                $crate::AsStream::as_stream(self).query()
            }
            /// See [`Stream::synchronize`].
            #[inline(always)]
            pub fn synchronize(&self) -> $crate::Result<()> {
                $crate::AsStream::as_stream(self).synchronize()
            }
            /// See [`Stream::record_event`].
            #[inline(always)]
            pub fn record_event(&self) -> $crate::Result<$crate::Event> {
                self.record_event_with($crate::EventOptions::new())
            }
            /// See [`Stream::record_event_with`].
            #[inline(always)]
            pub fn record_event_with(
                &self,
                options: $crate::EventOptions,
            ) -> $crate::Result<$crate::Event> {
                // The owner knows its context: no lookup to retain it for the event.
                $crate::AsStream::as_stream(self).record_event_in(
                    $crate::stream::view::KnownContext::known_context(self),
                    options,
                )
            }
            /// See [`Stream::record`].
            #[inline(always)]
            pub fn record(&self, event: &$crate::Event) -> $crate::Result<()> {
                $crate::AsStream::as_stream(self).record(event)
            }
            /// See [`Stream::wait_event`].
            #[inline(always)]
            pub fn wait_event(&self, event: &$crate::Event) -> $crate::Result<()> {
                $crate::AsStream::as_stream(self).wait_event(event)
            }
            /// See [`Stream::wait_stream`].
            #[inline(always)]
            #[doc(alias = "join")]
            pub fn wait_stream(&self, other: &impl $crate::AsStream) -> $crate::Result<()> {
                $crate::AsStream::as_stream(self).wait_stream(other)
            }
            /// See [`Stream::device`].
            pub fn device(&self) -> $crate::Result<$crate::Device> {
                $crate::AsStream::as_stream(self).device()
            }
            /// See [`Stream::flags`].
            pub fn flags(&self) -> $crate::Result<u32> {
                $crate::AsStream::as_stream(self).flags()
            }
            /// See [`Stream::is_nonblocking`].
            pub fn is_nonblocking(&self) -> $crate::Result<bool> {
                $crate::AsStream::as_stream(self).is_nonblocking()
            }
            /// See [`Stream::priority`].
            pub fn priority(&self) -> $crate::Result<i32> {
                $crate::AsStream::as_stream(self).priority()
            }
            /// See [`Stream::id`].
            pub fn id(&self) -> $crate::Result<u64> {
                $crate::AsStream::as_stream(self).id()
            }
        }
    };
}
pub(crate) use forward_stream_ops;
