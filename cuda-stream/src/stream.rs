//! Owned and borrowed streams, and every stream operation (written once, on [`Stream`]).

use std::fmt;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ptr;

use crate::context::{Bound, Context, Device, bind};
use crate::error::{Error, Result, check, driver_fn};
use crate::event::{Event, EventOptions};
use crate::ffi;

/// The priorities a context's streams may have. CUDA counts down: `greatest` is numerically the
/// smallest (for example -5) and `least` the largest (usually 0, the default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PriorityRange {
    least: i32,
    greatest: i32,
}

impl fmt::Display for PriorityRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}, {}] (greatest to least)", self.greatest, self.least)
    }
}

impl PriorityRange {
    /// A range from its two ends, as `cuCtxGetStreamPriorityRange` reports them.
    pub fn new(least: i32, greatest: i32) -> PriorityRange {
        PriorityRange { least, greatest }
    }
    /// The lowest priority (numerically largest; the default priority).
    pub fn least(self) -> i32 {
        self.least
    }
    /// The highest priority (numerically smallest).
    pub fn greatest(self) -> i32 {
        self.greatest
    }
    /// Whether `priority` is in the range.
    pub fn contains(self, priority: i32) -> bool {
        (self.greatest..=self.least).contains(&priority)
    }
    /// The nearest priority in the range.
    pub fn clamp(self, priority: i32) -> i32 {
        priority.clamp(self.greatest, self.least)
    }
    /// `priority` if in range, else [`Error::InvalidPriority`] stating the range.
    pub fn check(self, priority: i32) -> Result<i32> {
        if self.contains(priority) {
            Ok(priority)
        } else {
            Err(Error::InvalidPriority {
                priority,
                range: self,
            })
        }
    }
}

/// How to create a stream.
///
/// Streams are **non-blocking by default** (`CU_STREAM_NON_BLOCKING`), as in cuda.core: a blocking
/// stream implicitly waits for, and is waited on by, the legacy default stream, which silently
/// serialises it with every library that enqueues on stream 0 (PyTorch's and CuPy's default).
/// Ask for `blocking(true)` to get the legacy behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StreamOptions {
    blocking: bool,
    priority: Option<i32>,
    clamp: bool,
}

impl StreamOptions {
    /// Non-blocking, default priority.
    pub fn new() -> StreamOptions {
        StreamOptions::default()
    }
    /// Whether the stream synchronises with the legacy default stream.
    pub fn blocking(mut self, blocking: bool) -> StreamOptions {
        self.blocking = blocking;
        self
    }
    /// The priority; creation fails with [`Error::InvalidPriority`] if it is out of range.
    pub fn priority(mut self, priority: i32) -> StreamOptions {
        self.priority = Some(priority);
        self.clamp = false;
        self
    }
    /// The priority, clamped into the context's range on purpose.
    pub fn priority_clamped(mut self, priority: i32) -> StreamOptions {
        self.priority = Some(priority);
        self.clamp = true;
        self
    }
    /// The flags word passed to the driver.
    pub fn flags(self) -> u32 {
        if self.blocking {
            ffi::CUstream_flags::CU_STREAM_DEFAULT.0
        } else {
            ffi::CUstream_flags::CU_STREAM_NON_BLOCKING.0
        }
    }
    pub(crate) fn requested_priority(self) -> Option<i32> {
        self.priority
    }
}

/// A borrowed view of a stream: the handle, its context, and a lifetime that stops it outliving
/// whatever owns the stream. `Copy`, two pointers wide, `Send + Sync`.
///
/// Every stream operation lives here; [`OwnedStream`] and anything else that implements
/// [`AsStream`] hands one out. Borrowing a foreign handle (PyTorch, CuPy, cuda.core, cudarc, C
/// code) is [`Stream::borrow_raw`].
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
    /// any other context, the caller keeps the context alive until such events are dropped. The
    /// driver cannot validate a dangling handle (looking one up can crash the process), so this
    /// cannot be checked.
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
    pub fn raw(self) -> ffi::CUstream {
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
    fn bind_if_default(self) -> Result<Option<Bound>> {
        if is_special(self.raw) {
            bind(self.ctx).map(Some)
        } else {
            Ok(None)
        }
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
                crate::host::report_panic(self)?;
                Ok(true)
            }
            ffi::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            rc => Err(Error::driver("cuStreamQuery", rc)),
        }
    }

    /// Blocks until all work enqueued so far has completed (`cuStreamSynchronize`), then reports
    /// a panic of one of this stream's host functions, if any.
    #[inline]
    pub fn synchronize(self) -> Result<()> {
        let f = driver_fn!(cuStreamSynchronize);
        let _bound = self.bind_if_default()?;
        // SAFETY: `self.raw` is live for 'a.
        check(unsafe { f(self.raw) }, "cuStreamSynchronize")?;
        crate::host::report_panic(self)
    }

    /// Records a new event (timing disabled) capturing the work enqueued so far.
    pub fn record_event(self) -> Result<Event> {
        self.record_event_with(EventOptions::new())
    }

    /// Records a new event with the given options.
    pub fn record_event_with(self, options: EventOptions) -> Result<Event> {
        self.record_event_in(None, options)
    }

    /// Records a new event that keeps `known` (the stream's context, when the caller has it)
    /// alive; with `None` the context is looked up and retained if it is a primary one.
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
    /// once. The event may belong to another context, even of another device.
    #[inline]
    pub fn wait_event(self, event: &Event) -> Result<()> {
        // SAFETY: the event is live while borrowed.
        unsafe { self.wait_event_raw(event.raw()) }
    }

    /// [`Stream::wait_event`] for an event handle created elsewhere.
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

    /// Makes work enqueued here from now on wait for the work enqueued on `other` so far. Returns
    /// at once. Costs one event record and one wait: the event comes from a per-thread cache
    /// instead of being created and destroyed on every call.
    #[inline]
    pub fn wait_stream(self, other: impl AsStream) -> Result<()> {
        let other = other.as_stream();
        if other.key() == self.key() {
            return Ok(());
        }
        crate::host::WAIT_EVENTS.with_event(other.ctx, |event| {
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

    /// Runs `f` on a driver thread once the work enqueued so far has completed
    /// (`cuLaunchHostFunc`). Work enqueued after it waits for it to return. `f` must not call
    /// CUDA. If enqueueing fails, `f` is dropped here and the error returned. A panic in `f` is
    /// caught on the driver's thread (it never unwinds into the driver) and reported by a later
    /// [`Stream::synchronize`], [`Stream::query`] or `launch_host_func` on this stream as
    /// [`Error::HostFnPanicked`].
    #[inline]
    pub fn launch_host_func<F>(self, f: F) -> Result<()>
    where
        F: FnOnce() + Send + 'static,
    {
        crate::host::launch(self, f)
    }

    /// Runs `f` once the work enqueued so far has completed, passing the stream's status: `Ok`,
    /// or the error that put the stream (context) in a failed state (`cuStreamAddCallback`).
    /// Prefer [`Stream::launch_host_func`], which NVIDIA recommends; this exists for callers that
    /// want the status.
    pub fn add_callback<F>(self, f: F) -> Result<()>
    where
        F: FnOnce(Result<()>) + Send + 'static,
    {
        crate::host::add_callback(self, f)
    }

    /// The device the stream's work runs on (`cuStreamGetDevice` on CUDA 12.8 and later, else
    /// the device of its context).
    pub fn device(self) -> Result<Device> {
        if !self.is_default() {
            if let Ok(f) = ffi::fns::cuStreamGetDevice() {
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

    /// Makes this stream the calling thread's current stream for its context until the guard is
    /// dropped (CuPy's `with stream:`, `torch.cuda.stream(s)`); see [`crate::current_stream`].
    pub fn make_current(self) -> crate::CurrentStreamGuard<'a> {
        crate::current::CurrentStreamGuard::install(self, None)
    }
}

/// A stream this value created and destroys on `Drop` (`cuStreamDestroy`).
///
/// ```no_run
/// use cuda_stream::{Context, OwnedStream, StreamOptions};
///
/// let ctx = Context::primary(0)?;
/// let stream = OwnedStream::new(&ctx, StreamOptions::new().priority(ctx.priority_range()?.greatest()))?;
/// stream.launch_host_func(|| println!("ran on the driver's thread"))?;
/// stream.synchronize()?;
/// # Ok::<(), cuda_stream::Error>(())
/// ```
pub struct OwnedStream {
    raw: ffi::CUstream,
    ctx: Context,
}

static_assertions::assert_not_impl_any!(OwnedStream: Clone, Copy);

impl fmt::Debug for OwnedStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedStream")
            .field("raw", &self.raw)
            .field("ctx", &self.ctx.raw())
            .finish()
    }
}

impl PartialEq for OwnedStream {
    fn eq(&self, other: &Self) -> bool {
        self.as_stream() == other.as_stream()
    }
}
impl Eq for OwnedStream {}
impl Hash for OwnedStream {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_stream().hash(state)
    }
}
impl PartialOrd for OwnedStream {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for OwnedStream {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_stream().cmp(&other.as_stream())
    }
}

// SAFETY: the handle is a driver object usable from any thread; it is destroyed exactly once.
unsafe impl Send for OwnedStream {}
// SAFETY: every operation through `&OwnedStream` is a thread-safe driver call.
unsafe impl Sync for OwnedStream {}

impl AsStream for OwnedStream {
    #[inline(always)]
    fn as_stream(&self) -> Stream<'_> {
        Stream::from_parts(self.raw, self.ctx.raw())
    }
}

impl OwnedStream {
    /// Creates a stream in `ctx` (`cuStreamCreateWithPriority`), making `ctx` current for the
    /// call only.
    pub fn new(ctx: &Context, options: StreamOptions) -> Result<OwnedStream> {
        let raw = create_raw(ctx.raw(), Some(ctx), options)?;
        Ok(OwnedStream {
            raw,
            ctx: ctx.clone(),
        })
    }

    /// Takes ownership of a stream handle: it will be destroyed when the value drops.
    ///
    /// # Safety
    /// `raw` must be a live stream of `ctx` that nothing else destroys or uses after this
    /// value is dropped.
    pub unsafe fn from_raw(raw: ffi::CUstream, ctx: &Context) -> Result<OwnedStream> {
        if is_special(raw) {
            return Err(Error::SpecialHandle {
                handle: raw as usize,
            });
        }
        Ok(OwnedStream {
            raw,
            ctx: ctx.clone(),
        })
    }

    /// Makes this stream the calling thread's current stream for its context until the guard is
    /// dropped; see [`Stream::make_current`].
    pub fn make_current(&self) -> crate::CurrentStreamGuard<'_> {
        crate::current::CurrentStreamGuard::install(self.as_stream(), Some(self.ctx.clone()))
    }

    /// The context the stream belongs to.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Hands the handle over without destroying it. The stream stays valid only while its
    /// context is retained by someone (release the primary context last).
    pub fn into_raw(self) -> ffi::CUstream {
        let this = ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again; the context clone is dropped here.
        let _ctx = unsafe { ptr::read(&this.ctx) };
        this.raw
    }

    /// Destroys the stream, returning the driver's error if `cuStreamDestroy` fails. Work already
    /// enqueued still completes, as the driver guarantees.
    pub fn close(self) -> Result<()> {
        let this = ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again; the context clone is dropped after the
        // destroy below.
        let _ctx = unsafe { ptr::read(&this.ctx) };
        destroy(this.raw)
    }
}

/// Creates a stream in `ctx` with `options`, making `ctx` current for the call only. A requested
/// priority is checked against the context's range (or clamped, when the options say so);
/// `known` is the context's `Context`, whose cached range saves a driver call.
pub(crate) fn create_raw(
    ctx: ffi::CUcontext,
    known: Option<&Context>,
    options: StreamOptions,
) -> Result<ffi::CUstream> {
    let _bound = bind(ctx)?;
    let priority = match options.requested_priority() {
        None => None,
        Some(p) => {
            let range = match known {
                Some(c) => c.priority_range()?,
                None => crate::context::priority_range_current()?,
            };
            Some(if options.clamp {
                range.clamp(p)
            } else {
                range.check(p)?
            })
        }
    };
    let mut raw = ptr::null_mut();
    match priority {
        None => {
            let f = driver_fn!(cuStreamCreate);
            // SAFETY: `raw` is a valid out-pointer; the context is current.
            let rc = unsafe { f(&mut raw, options.flags()) };
            check(rc, "cuStreamCreate")?;
        }
        Some(p) => {
            let f = driver_fn!(cuStreamCreateWithPriority);
            // SAFETY: as above; the priority is in the context's range.
            let rc = unsafe { f(&mut raw, options.flags(), p) };
            check(rc, "cuStreamCreateWithPriority")?;
        }
    }
    if raw.is_null() {
        return Err(Error::NullHandle { what: "stream" });
    }
    Ok(raw)
}

fn destroy(raw: ffi::CUstream) -> Result<()> {
    if crate::current::is_installed(raw) {
        // A leaked `CurrentStreamGuard` still names this stream: keep the handle valid.
        return Ok(());
    }
    let f = driver_fn!(cuStreamDestroy);
    // SAFETY: the caller owns `raw` and never uses it again.
    check(unsafe { f(raw) }, "cuStreamDestroy")?;
    crate::host::forget_panics(raw);
    Ok(())
}

impl Drop for OwnedStream {
    fn drop(&mut self) {
        let _ = destroy(self.raw);
    }
}

/// The context an owner of a stream already holds, so events it records need no lookup.
pub(crate) trait KnownContext {
    fn known_context(&self) -> Option<Context>;
}

impl KnownContext for OwnedStream {
    fn known_context(&self) -> Option<Context> {
        Some(self.ctx.clone())
    }
}

/// Forwards the operations of [`Stream`] to a type that implements [`AsStream`], so owned
/// streams (and pool leases) offer them without repeating their bodies.
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
                $crate::AsStream::as_stream(self)
                    .record_event_in($crate::stream::KnownContext::known_context(self), options)
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
            pub fn wait_stream(&self, other: impl $crate::AsStream) -> $crate::Result<()> {
                $crate::AsStream::as_stream(self).wait_stream(other)
            }
            /// See [`Stream::launch_host_func`].
            #[inline(always)]
            pub fn launch_host_func<F>(&self, f: F) -> $crate::Result<()>
            where
                F: FnOnce() + Send + 'static,
            {
                $crate::AsStream::as_stream(self).launch_host_func(f)
            }
            /// See [`Stream::add_callback`].
            #[inline(always)]
            pub fn add_callback<F>(&self, f: F) -> $crate::Result<()>
            where
                F: FnOnce($crate::Result<()>) + Send + 'static,
            {
                $crate::AsStream::as_stream(self).add_callback(f)
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
            /// See [`Stream::completed`].
            pub fn completed(&self) -> $crate::Completion {
                $crate::AsStream::as_stream(self).completed()
            }
            /// See [`Stream::scope`].
            pub fn scope<'env, R>(
                &'env self,
                f: impl for<'scope> FnOnce(&'scope $crate::Scope<'scope, 'env>) -> $crate::Result<R>,
            ) -> $crate::Result<R> {
                $crate::AsStream::as_stream(self).scope(f)
            }
        }
    };
}
pub(crate) use forward_stream_ops;

forward_stream_ops!(OwnedStream);
