//! Events: markers in a stream's work that other streams and the host can wait for.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::mem::ManuallyDrop;
use std::ptr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use crate::base::error::{Error, Result, check, driver_fn};
use crate::base::newest_abi::Newest;
use crate::driver::context::{Context, bind};
use crate::driver::recycled_events;
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
/// Events of a [`Context`] are recycled: dropping one returns its handle to the context's spare
/// events (no driver call, so also safe inside a host function), and [`Event::new`] and
/// `record_event` take one from there before creating a new one (no driver call either). A
/// recycled event is indistinguishable from a new one: it is not recorded, and
/// [`Event::query`], [`Event::synchronize`] and waits on it answer as for a new event without
/// asking the driver until it is recorded again. Interprocess events, [`Event::open_ipc`] and
/// [`Event::from_raw`] events are never recycled, and [`Event::close`] always destroys. See
/// [`Context::clear_event_cache`].
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
    /// [`RECORDED`] once this value recorded the event; [`FOREIGN`] when the handle's state may
    /// come from records this value did not make (so the driver must be asked).
    state: AtomicU8,
    /// Whether drop returns the handle to the context's spare events.
    spare: bool,
    _keep: Option<Context>,
}

/// `Event::state`: this value recorded the event.
const RECORDED: u8 = 1;
/// `Event::state`: the handle came from elsewhere (`from_raw`, `open_ipc`).
const FOREIGN: u8 = 2;

/// The spare-event kind of `options` (its index in the context's spare events), or `None` for
/// options whose events are never recycled.
#[inline(always)]
fn spare_kind(options: EventOptions) -> Option<usize> {
    if options.interprocess {
        return None;
    }
    Some(usize::from(options.timing) | usize::from(options.blocking_sync) << 1)
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
    /// Creates an event in `ctx`: one of the context's spare events if it keeps one of these
    /// options (no driver call), else `cuEventCreate` with `ctx` made current for the call only.
    #[inline]
    pub fn new(ctx: &Context, options: EventOptions) -> Result<Event> {
        match Event::from_spare(ctx, options) {
            Some(e) => Ok(e),
            None => Event::create_in(ctx.raw(), Some(ctx.clone()), options),
        }
    }

    /// One of `ctx`'s spare events with these options, if it keeps one. The handle belongs to
    /// `ctx`, so no context check is needed.
    #[inline(always)]
    fn from_spare(ctx: &Context, options: EventOptions) -> Option<Event> {
        let raw = ctx.take_spare_event(spare_kind(options)?)?;
        Some(Event::recycled(raw, ctx.clone(), options))
    }

    #[inline(always)]
    fn recycled(raw: ffi::CUevent, ctx: Context, options: EventOptions) -> Event {
        Event {
            raw,
            ctx: ctx.raw(),
            options,
            state: AtomicU8::new(0),
            spare: true,
            _keep: Some(ctx),
        }
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
        if let Some(e) = Event::from_spare(ctx, options) {
            return Ok(e);
        }
        let flags = options.flags()?;
        crate::driver::deferred_destroy::drain_if_pending();
        let f = driver_fn!(cuEventCreate);
        let mut raw = ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; the caller promises `ctx` is current.
        check(unsafe { f(&mut raw, flags) }, "cuEventCreate")?;
        Ok(Event {
            raw,
            ctx: ctx.raw(),
            options,
            state: AtomicU8::new(0),
            spare: true,
            _keep: Some(ctx.clone()),
        })
    }

    /// Creates an event in the context `ctx`; keeps `keep` (or, when `None`, the context if it is
    /// a primary one) alive for the event's life. Takes a spare event of that context when one
    /// is kept; only a context this crate does not retain gets events that are never recycled.
    pub(crate) fn create_in(
        ctx: ffi::CUcontext,
        keep: Option<Context>,
        options: EventOptions,
    ) -> Result<Event> {
        let flags = options.flags()?;
        let keep = match keep {
            Some(k) => Some(k),
            None => match Context::find_live(ctx) {
                Some(k) => Some(k),
                None => Context::retain_if_primary(ctx)?,
            },
        };
        if let (Some(k), Some(kind)) = (&keep, spare_kind(options)) {
            if let Some(raw) = k.take_spare_event(kind) {
                if let Some(k) = keep {
                    return Ok(Event::recycled(raw, k, options));
                }
            }
        }
        crate::driver::deferred_destroy::drain_if_pending();
        let _bound = bind(ctx)?;
        let f = driver_fn!(cuEventCreate);
        let mut raw = ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; the context is current.
        check(unsafe { f(&mut raw, flags) }, "cuEventCreate")?;
        Ok(Event {
            raw,
            ctx,
            options,
            state: AtomicU8::new(0),
            spare: keep.is_some(),
            _keep: keep,
        })
    }

    /// Takes ownership of an event handle: it will be destroyed when the value drops (never
    /// recycled). `query` and `synchronize` always ask the driver, since the handle may have
    /// been recorded before.
    ///
    /// # Safety
    /// `raw` must be a live event of `ctx`, created with `options`' flags, that nothing else
    /// destroys or uses after this value drops.
    pub unsafe fn from_raw(raw: ffi::CUevent, ctx: &Context, options: EventOptions) -> Event {
        Event {
            raw,
            ctx: ctx.raw(),
            options,
            state: AtomicU8::new(FOREIGN),
            spare: false,
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
        self.state.load(Ordering::Relaxed) & RECORDED != 0
    }

    #[inline(always)]
    pub(crate) fn mark_recorded(&self) {
        let state = self.state.load(Ordering::Relaxed);
        if state & RECORDED == 0 {
            // Only ever adds bits, and FOREIGN never changes: a racing store writes the same.
            self.state.store(state | RECORDED, Ordering::Relaxed);
        }
    }

    /// Whether the driver's state of the handle can hold a record: false for an event this crate
    /// created (or recycled) and never recorded, which has nothing to wait for.
    #[inline(always)]
    pub(crate) fn may_hold_record(&self) -> bool {
        self.state.load(Ordering::Relaxed) != 0
    }

    /// Whether the captured work has completed (`cuEventQuery`); `true` for an event never
    /// recorded, as in the driver (answered without asking it for an event this crate created,
    /// whose handle may be a recycled one). Errors other than `CUDA_ERROR_NOT_READY` are
    /// returned.
    pub fn query(&self) -> Result<bool> {
        if !self.may_hold_record() {
            return Ok(true);
        }
        let f = driver_fn!(cuEventQuery);
        // SAFETY: the event is live while `self` is.
        match unsafe { f(self.raw) } {
            ffi::CUresult::CUDA_SUCCESS => Ok(true),
            ffi::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            rc => Err(Error::driver("cuEventQuery", rc)),
        }
    }

    /// Blocks until the captured work has completed (`cuEventSynchronize`), then destroys what
    /// host functions dropped meanwhile (see [`drain_deferred`](crate::drain_deferred)). Returns
    /// at once for an event never recorded, as the driver does.
    pub fn synchronize(&self) -> Result<()> {
        if !self.may_hold_record() {
            return Ok(());
        }
        let f = driver_fn!(cuEventSynchronize);
        // SAFETY: the event is live while `self` is.
        let r = check(unsafe { f(self.raw) }, "cuEventSynchronize");
        crate::driver::deferred_destroy::drain_if_pending();
        r
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
        let f = ELAPSED.get(
            "cuEventElapsedTime",
            &[
                ffi::fns::cuEventElapsedTime_v12080,
                ffi::fns::cuEventElapsedTime_v2000,
            ],
        )?;
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
            state: AtomicU8::new(RECORDED | FOREIGN),
            spare: false,
            _keep: Some(ctx.clone()),
        })
    }

    /// Hands the handle over without destroying it (it is never recycled). The handle may be
    /// one this crate recycled: until it is recorded again, the driver may answer
    /// `cuEventQuery` for an earlier record.
    pub fn into_raw(self) -> ffi::CUevent {
        let this = ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again; its context retain is released here.
        let _keep = unsafe { ptr::read(&this._keep) };
        this.raw
    }

    /// Destroys the event (never recycles it), returning the driver's error if
    /// `cuEventDestroy` fails. Inside a host function or stream callback, where no CUDA call may
    /// be made, the destroy is queued for an ordinary thread and the answer is
    /// [`Error::InHostFunction`].
    pub fn close(self) -> Result<()> {
        let this = ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again; the retain is released after the destroy.
        let _keep = unsafe { ptr::read(&this._keep) };
        recycled_events::destroy_or_defer(this.raw)
    }
}

impl Drop for Event {
    /// Returns the handle to the context's spare events, or destroys it (queued for an ordinary
    /// thread inside a host function). The context retain is released after.
    #[inline]
    fn drop(&mut self) {
        if self.spare {
            if let (Some(ctx), Some(kind)) = (&self._keep, spare_kind(self.options)) {
                if ctx.put_spare_event(kind, self.raw) {
                    return;
                }
            }
        }
        let _ = recycled_events::destroy_or_defer(self.raw);
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
