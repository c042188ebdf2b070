//! Streams this crate creates: [`StreamOptions`], [`OwnedStream`] (destroyed on `Drop`), and the
//! one creation path that owned streams, pools and notifier streams share.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::mem::ManuallyDrop;
use std::ptr;
use std::sync::atomic::{AtomicI32, Ordering};

use crate::base::error::{Error, Result, check, driver_fn};
use crate::driver::context::{Context, bind, priority_range_current};
use crate::driver::deferred_destroy::Deferred;
use crate::ffi;
use crate::stream::known_streams;
use crate::stream::view::{AsStream, KnownContext, Stream, forward_stream_ops, is_special};

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
    /// The stream's priority once asked ([`UNKNOWN_PRIORITY`] before): it never changes.
    priority: AtomicI32,
}

/// [`OwnedStream`]'s priority before the driver was asked (no priority is this low).
const UNKNOWN_PRIORITY: i32 = i32::MIN;

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
    /// A new stream of this stream's context, with its blocking flag and priority, whose work
    /// waits for the work enqueued here so far (cudarc's `fork`, outside a scope): join it back
    /// with [`wait_stream`](OwnedStream::wait_stream). Inside a
    /// [`scope`](crate::OwnedStream::scope), `fork` borrows streams from a pool instead.
    pub fn fork(&self) -> Result<OwnedStream> {
        let flags = self.as_stream().flags()?;
        let priority = self.as_stream().priority()?;
        let options = StreamOptions::new()
            .blocking(flags & ffi::CUstream_flags::CU_STREAM_NON_BLOCKING.0 == 0)
            .priority(priority);
        let forked = OwnedStream::new(&self.ctx, options)?;
        forked.wait_stream(self)?;
        Ok(forked)
    }

    /// Creates a stream in `ctx` (`cuStreamCreateWithPriority`), making `ctx` current for the
    /// call only.
    pub fn new(ctx: &Context, options: StreamOptions) -> Result<OwnedStream> {
        let raw = create_raw(ctx.raw(), Some(ctx), options)?;
        Ok(OwnedStream {
            raw,
            ctx: ctx.clone(),
            priority: AtomicI32::new(UNKNOWN_PRIORITY),
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
            priority: AtomicI32::new(UNKNOWN_PRIORITY),
        })
    }

    /// The stream's priority, asked of the driver (`cuStreamGetPriority`) the first time only: a
    /// stream's priority is fixed when it is created.
    #[inline]
    pub(crate) fn cached_priority(&self) -> Result<i32> {
        let known = self.priority.load(Ordering::Relaxed);
        if known != UNKNOWN_PRIORITY {
            return Ok(known);
        }
        let p = self.as_stream().priority()?;
        self.priority.store(p, Ordering::Relaxed);
        Ok(p)
    }

    /// The context the stream belongs to.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Hands the handle over without destroying it. The stream stays valid only while its
    /// context is retained by someone (release the primary context last).
    ///
    /// The hand-over first waits for any call of this crate that another thread is making on
    /// the stream at that moment, so that none uses the handle after it left. Inside a host
    /// function it does not wait: such a call (an event record) can wait in the driver for a
    /// copy to pageable host memory that itself waits for this host function, a deadlock. There
    /// the call under way may still use the stream after the host function has returned, until
    /// [`drain_deferred`](crate::drain_deferred) (or any call that drains, see there) has run
    /// on an ordinary thread: before destroying or capturing a stream handed over inside a host
    /// function while other threads used it, call `drain_deferred()`.
    pub fn into_raw(self) -> ffi::CUstream {
        let this = ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again; the context clone is dropped here.
        let _ctx = unsafe { ptr::read(&this.ctx) };
        // From here on the stream may end without notice.
        known_streams::ending(this.raw);
        this.raw
    }

    /// Destroys the stream, returning the driver's error if `cuStreamDestroy` fails. Work already
    /// enqueued still completes, as the driver guarantees. Inside a host function or stream
    /// callback, where no CUDA call may be made, the destroy is queued for an ordinary thread and
    /// the answer is [`Error::InHostFunction`].
    pub fn close(self) -> Result<()> {
        let this = ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again; the context clone is dropped after the
        // destroy below.
        let _ctx = unsafe { ptr::read(&this.ctx) };
        destroy_or_defer(this.raw)
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
    crate::driver::deferred_destroy::drain_if_pending();
    let _bound = bind(ctx)?;
    let priority = match options.requested_priority() {
        None => None,
        Some(p) => {
            let range = match known {
                Some(c) => c.priority_range()?,
                None => priority_range_current()?,
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
    known_streams::created(raw, ctx);
    Ok(raw)
}

/// Destroys a stream this crate created (an owned stream, a pool's, a temporary notifier),
/// unless a leaked current-stream guard still names it. Inside a host function the destroy is
/// queued for an ordinary thread (see `driver::deferred_destroy`), and the answer is
/// [`Error::InHostFunction`].
pub(crate) fn destroy_or_defer(raw: ffi::CUstream) -> Result<()> {
    if crate::stream::guarded_streams::contains(raw) {
        // A leaked `CurrentStreamGuard` still names this stream: keep the handle valid.
        return Ok(());
    }
    if crate::driver::deferred_destroy::in_host_fn() {
        crate::driver::deferred_destroy::defer([Deferred::new(raw as usize, destroy_deferred)]);
        return Err(Error::InHostFunction {
            call: "cuStreamDestroy",
        });
    }
    crate::driver::deferred_destroy::drain_if_pending();
    destroy_now(raw)
}

fn destroy_now(raw: ffi::CUstream) -> Result<()> {
    // Values that used the stream without an event record one while the handle is valid.
    known_streams::ending(raw);
    let f = driver_fn!(cuStreamDestroy);
    // SAFETY: the caller owns `raw` and never uses it again.
    check(unsafe { f(raw) }, "cuStreamDestroy")?;
    crate::stream::host_panics::forget(raw);
    Ok(())
}

/// The queued form of [`destroy_now`].
fn destroy_deferred(raw: usize) -> Result<()> {
    destroy_now(raw as ffi::CUstream)
}

impl Drop for OwnedStream {
    fn drop(&mut self) {
        let _ = destroy_or_defer(self.raw);
    }
}

impl KnownContext for OwnedStream {
    fn known_context(&self) -> Option<Context> {
        Some(self.ctx.clone())
    }
}

forward_stream_ops!(OwnedStream);

impl Context {
    /// Creates a non-blocking stream of default priority in this context.
    pub fn new_stream(&self) -> Result<OwnedStream> {
        OwnedStream::new(self, StreamOptions::new())
    }

    /// Creates a stream with `options` in this context.
    pub fn new_stream_with(&self, options: StreamOptions) -> Result<OwnedStream> {
        OwnedStream::new(self, options)
    }
}
