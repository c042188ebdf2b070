//! Events: markers in a stream's work that other streams and the host can wait for.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::mem::ManuallyDrop;
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::abi::Newest;
use crate::context::{Context, bind};
use crate::error::{Error, Result, check, driver_fn};
use crate::ffi;

/// How to create an event. The default is what synchronisation needs and nothing more: timing
/// off (cheaper to record and wait on), spin-waiting, not interprocess.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct EventOptions {
    timing: bool,
    blocking_sync: bool,
    interprocess: bool,
}

impl EventOptions {
    /// Timing off, spin-waiting, not interprocess.
    pub fn new() -> EventOptions {
        EventOptions::default()
    }
    /// Whether the event records a timestamp for [`Event::elapsed_since`].
    pub fn timing(mut self, on: bool) -> EventOptions {
        self.timing = on;
        self
    }
    /// Whether `synchronize` blocks the thread (yielding the CPU) instead of spinning.
    pub fn blocking_sync(mut self, on: bool) -> EventOptions {
        self.blocking_sync = on;
        self
    }
    /// Whether the event can be shared with another process; needs timing off.
    pub fn interprocess(mut self, on: bool) -> EventOptions {
        self.interprocess = on;
        self
    }
    /// Whether timing is on.
    pub fn has_timing(self) -> bool {
        self.timing
    }
    /// Whether the event is interprocess.
    pub fn is_interprocess(self) -> bool {
        self.interprocess
    }
    /// The driver's flags word, or the reason these options are invalid.
    pub fn flags(self) -> Result<u32> {
        if self.interprocess && self.timing {
            return Err(Error::InvalidEventOptions {
                reason: "an interprocess event needs timing disabled",
            });
        }
        let mut flags = ffi::CUevent_flags::CU_EVENT_DEFAULT.0;
        if !self.timing {
            flags |= ffi::CUevent_flags::CU_EVENT_DISABLE_TIMING.0;
        }
        if self.blocking_sync {
            flags |= ffi::CUevent_flags::CU_EVENT_BLOCKING_SYNC.0;
        }
        if self.interprocess {
            flags |= ffi::CUevent_flags::CU_EVENT_INTERPROCESS.0;
        }
        Ok(flags)
    }
}

/// An event this value created (or opened) and destroys on `Drop`.
///
/// ```no_run
/// use cuda_stream::{Context, EventOptions, OwnedStream, StreamOptions};
///
/// let ctx = Context::primary(0)?;
/// let (a, b) = (ctx.new_stream()?, ctx.new_stream()?);
/// let start = a.record_event_with(EventOptions::new().timing(true))?;
/// // ... enqueue work on `a` ...
/// let end = a.record_event_with(EventOptions::new().timing(true))?;
/// b.wait_event(&end)?; // `b`'s later work runs after `a`'s
/// end.synchronize()?;
/// println!("took {:?}", end.elapsed_since(&start)?);
/// # Ok::<(), cuda_stream::Error>(())
/// ```
pub struct Event {
    raw: ffi::CUevent,
    ctx: ffi::CUcontext,
    options: EventOptions,
    recorded: AtomicBool,
    _keep: Option<Context>,
}

// SAFETY: an event handle is a driver object usable from any thread; destroyed exactly once.
unsafe impl Send for Event {}
// SAFETY: operations through `&Event` are thread-safe driver calls plus an atomic flag.
unsafe impl Sync for Event {}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event")
            .field("raw", &self.raw)
            .field("ctx", &self.ctx)
            .field("options", &self.options)
            .finish()
    }
}

impl PartialEq for Event {
    fn eq(&self, other: &Self) -> bool {
        (self.raw, self.ctx) == (other.raw, other.ctx)
    }
}
impl Eq for Event {}
impl Hash for Event {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self.raw, self.ctx).hash(state)
    }
}
impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Event {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.raw as usize, self.ctx as usize).cmp(&(other.raw as usize, other.ctx as usize))
    }
}

impl Event {
    /// Creates an event in `ctx`, making it current for the call only.
    pub fn new(ctx: &Context, options: EventOptions) -> Result<Event> {
        Event::create_in(ctx.raw(), Some(ctx.clone()), options)
    }

    /// Creates an event in `ctx` without checking which context is current: saves the one
    /// `cuCtxGetCurrent` that [`Event::new`] makes (see `BENCHMARKS.md`).
    ///
    /// # Safety
    /// `ctx` must be the calling thread's current context (for example inside a
    /// [`Context::bind`] guard with no other context bound since). Otherwise the driver creates
    /// the event in whichever context is current, and this value would hold the wrong context
    /// alive and could outlive the event's real one.
    pub unsafe fn new_in_current(ctx: &Context, options: EventOptions) -> Result<Event> {
        let flags = options.flags()?;
        let f = driver_fn!(cuEventCreate);
        let mut raw = ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; the caller promises `ctx` is current.
        check(unsafe { f(&mut raw, flags) }, "cuEventCreate")?;
        Ok(Event {
            raw,
            ctx: ctx.raw(),
            options,
            recorded: AtomicBool::new(false),
            _keep: Some(ctx.clone()),
        })
    }

    /// Creates an event in the context `ctx`; keeps `keep` (or, when `None`, the context if it is
    /// a primary one) alive for the event's life.
    pub(crate) fn create_in(
        ctx: ffi::CUcontext,
        keep: Option<Context>,
        options: EventOptions,
    ) -> Result<Event> {
        let flags = options.flags()?;
        let keep = match keep {
            Some(k) => Some(k),
            None => Context::retain_if_primary(ctx)?,
        };
        let _bound = bind(ctx)?;
        let f = driver_fn!(cuEventCreate);
        let mut raw = ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; the context is current.
        check(unsafe { f(&mut raw, flags) }, "cuEventCreate")?;
        Ok(Event {
            raw,
            ctx,
            options,
            recorded: AtomicBool::new(false),
            _keep: keep,
        })
    }

    /// Takes ownership of an event handle: it will be destroyed when the value drops.
    ///
    /// # Safety
    /// `raw` must be a live event of `ctx`, created with `options`' flags, that nothing else
    /// destroys or uses after this value drops.
    pub unsafe fn from_raw(raw: ffi::CUevent, ctx: &Context, options: EventOptions) -> Event {
        Event {
            raw,
            ctx: ctx.raw(),
            options,
            recorded: AtomicBool::new(false),
            _keep: Some(ctx.clone()),
        }
    }

    /// The raw handle.
    pub fn raw(&self) -> ffi::CUevent {
        self.raw
    }

    /// The raw handle of the event's context.
    pub fn context_raw(&self) -> ffi::CUcontext {
        self.ctx
    }

    /// The options the event was created with.
    pub fn options(&self) -> EventOptions {
        self.options
    }

    /// Whether this value has recorded the event at least once.
    pub fn is_recorded(&self) -> bool {
        self.recorded.load(Ordering::Relaxed)
    }

    #[inline(always)]
    pub(crate) fn mark_recorded(&self) {
        if !self.recorded.load(Ordering::Relaxed) {
            self.recorded.store(true, Ordering::Relaxed);
        }
    }

    /// Whether the captured work has completed (`cuEventQuery`); `true` for an event never
    /// recorded, as in the driver. Errors other than `CUDA_ERROR_NOT_READY` are returned.
    pub fn query(&self) -> Result<bool> {
        let f = driver_fn!(cuEventQuery);
        // SAFETY: the event is live while `self` is.
        match unsafe { f(self.raw) } {
            ffi::CUresult::CUDA_SUCCESS => Ok(true),
            ffi::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            rc => Err(Error::driver("cuEventQuery", rc)),
        }
    }

    /// Blocks until the captured work has completed (`cuEventSynchronize`).
    pub fn synchronize(&self) -> Result<()> {
        let f = driver_fn!(cuEventSynchronize);
        // SAFETY: the event is live while `self` is.
        check(unsafe { f(self.raw) }, "cuEventSynchronize")
    }

    /// The GPU time between `start` completing and `self` completing (`cuEventElapsedTime`: the
    /// CUDA 12.8 ABI where the driver has it, else the original one, so any driver will do).
    /// Fails with [`Error::TimingDisabled`], [`Error::NotRecorded`] or [`Error::NotCompleted`]
    /// rather than a bare driver code, and with [`Error::NegativeElapsed`] when `self` completed
    /// before `start`.
    pub fn elapsed_since(&self, start: &Event) -> Result<Duration> {
        if !self.options.timing || !start.options.timing {
            return Err(Error::TimingDisabled);
        }
        if !self.is_recorded() || !start.is_recorded() {
            return Err(Error::NotRecorded);
        }
        // The CUDA 12.8 ABI, else the original one: the same call on events, and the same answer.
        static ELAPSED: Newest<ffi::pfn::cuEventElapsedTime> = Newest::new();
        let f = ELAPSED
            .get(&[
                ffi::fns::cuEventElapsedTime_v12080,
                ffi::fns::cuEventElapsedTime_v2000,
            ])
            .map_err(|e| Error::from_load(e.clone(), "cuEventElapsedTime"))?;
        let mut ms = 0f32;
        // SAFETY: both events are live; `ms` is a valid out-pointer.
        match unsafe { f(&mut ms, start.raw, self.raw) } {
            ffi::CUresult::CUDA_SUCCESS if ms >= 0.0 => {
                Ok(Duration::from_secs_f64(f64::from(ms) / 1e3))
            }
            ffi::CUresult::CUDA_SUCCESS => Err(Error::NegativeElapsed { ms }),
            ffi::CUresult::CUDA_ERROR_NOT_READY => Err(Error::NotCompleted),
            rc => Err(Error::driver("cuEventElapsedTime", rc)),
        }
    }

    /// The handle another process passes to [`Event::open_ipc`] (`cuIpcGetEventHandle`). The event
    /// must have been created with [`EventOptions::interprocess`].
    pub fn ipc_handle(&self) -> Result<IpcEventHandle> {
        if !self.options.interprocess {
            return Err(Error::InvalidEventOptions {
                reason: "the event was not created interprocess",
            });
        }
        // The driver resolves the handle through the current context (measured: without one it
        // answers CUDA_ERROR_INVALID_CONTEXT).
        let _bound = bind(self.ctx)?;
        let f = driver_fn!(cuIpcGetEventHandle);
        let mut h = ffi::CUipcEventHandle::default();
        // SAFETY: `h` is a valid out-pointer; the event is live.
        check(unsafe { f(&mut h, self.raw) }, "cuIpcGetEventHandle")?;
        Ok(IpcEventHandle(h))
    }

    /// Opens an event another process exported (`cuIpcOpenEventHandle`), in `ctx`.
    pub fn open_ipc(ctx: &Context, handle: &IpcEventHandle) -> Result<Event> {
        let _bound = bind(ctx.raw())?;
        let f = driver_fn!(cuIpcOpenEventHandle);
        let mut raw = ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; the handle is passed by value.
        check(unsafe { f(&mut raw, handle.0) }, "cuIpcOpenEventHandle")?;
        Ok(Event {
            raw,
            ctx: ctx.raw(),
            options: EventOptions::new().interprocess(true),
            // Another process records it.
            recorded: AtomicBool::new(true),
            _keep: Some(ctx.clone()),
        })
    }

    /// Hands the handle over without destroying it.
    pub fn into_raw(self) -> ffi::CUevent {
        let this = ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again; its context retain is released here.
        let _keep = unsafe { ptr::read(&this._keep) };
        this.raw
    }

    /// Destroys the event, returning the driver's error if `cuEventDestroy` fails.
    pub fn close(self) -> Result<()> {
        let this = ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again; the retain is released after the destroy.
        let _keep = unsafe { ptr::read(&this._keep) };
        destroy(this.raw)
    }
}

fn destroy(raw: ffi::CUevent) -> Result<()> {
    let f = driver_fn!(cuEventDestroy);
    // SAFETY: the caller owns `raw` and never uses it again.
    check(unsafe { f(raw) }, "cuEventDestroy")
}

impl Drop for Event {
    fn drop(&mut self) {
        let _ = destroy(self.raw);
    }
}

/// An interprocess event handle: 64 opaque bytes to send to another process.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpcEventHandle(pub ffi::CUipcEventHandle);

impl fmt::Debug for IpcEventHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("IpcEventHandle(..)")
    }
}

impl IpcEventHandle {
    /// The handle's bytes.
    pub fn to_bytes(&self) -> [u8; 64] {
        self.0.reserved.map(|b| b as u8)
    }
    /// A handle from bytes another process sent.
    pub fn from_bytes(bytes: [u8; 64]) -> IpcEventHandle {
        IpcEventHandle(ffi::CUipcEventHandle {
            reserved: bytes.map(|b| b as core::ffi::c_char),
        })
    }
}

impl Context {
    /// Creates an event with `options` in this context.
    pub fn new_event(&self, options: EventOptions) -> Result<Event> {
        Event::new(self, options)
    }
}
