//! Contexts: a retained primary context ([`Context`]), making a context current for one call
//! (`bind`), the context's stream-priority range, its spare events, and its service stream (where
//! the memory layer enqueues what belongs to no stream of the user's: stream-less allocations,
//! frees whose uses were all on streams that may be gone).

use std::fmt;
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use crate::base::error::{Error, Result, check, driver_fn};
use crate::base::priority::PriorityRange;
use crate::driver::deferred_destroy::{self, Deferred};
use crate::driver::device::{Device, init};
use crate::driver::recycled_events::{self, SpareEvents};
use crate::ffi;

impl Device {
    /// Whether the device's primary context is active (retained by someone), from
    /// `cuDevicePrimaryCtxGetState`.
    pub(crate) fn primary_context_active(self) -> Result<bool> {
        let state = driver_fn!(cuDevicePrimaryCtxGetState);
        let (mut flags, mut active) = (0u32, 0i32);
        // SAFETY: both are valid out-pointers; the driver checks the device ordinal
        // (`Device::from_raw` takes any).
        let rc = unsafe { state(self.raw(), &mut flags, &mut active) };
        check(rc, "cuDevicePrimaryCtxGetState")?;
        Ok(active != 0)
    }

    /// Retains the device's primary context (the one the CUDA runtime, PyTorch and CuPy use).
    pub fn primary_context(self) -> Result<Context> {
        init()?;
        deferred_destroy::drain_if_pending();
        let f = driver_fn!(cuDevicePrimaryCtxRetain);
        let mut raw = ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; the driver checks the device ordinal
        // (`Device::from_raw` takes any).
        let rc = unsafe { f(&mut raw, self.raw()) };
        check(rc, "cuDevicePrimaryCtxRetain")?;
        if raw.is_null() {
            return Err(Error::NullHandle { what: "context" });
        }
        let inner = Arc::new(ContextInner {
            raw,
            device: self,
            range: OnceLock::new(),
            spare: SpareEvents::new(),
            service: AtomicUsize::new(0),
            service_creation: Mutex::new(()),
        });
        let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
        live.retain(|(_, w)| w.strong_count() > 0);
        live.push((raw as usize, Arc::downgrade(&inner)));
        Ok(Context(inner))
    }
}

/// The `ContextInner`s alive now, by raw handle, so that an event recorded through a borrowed
/// view of a stream finds the context's spare events without retaining it again.
static LIVE: Mutex<Vec<(usize, Weak<ContextInner>)>> = Mutex::new(Vec::new());

impl PriorityRange {
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

/// A retained primary context: cheap to clone; the last clone to drop releases the retain.
///
/// Streams and events made from a context keep a clone of it, so the context outlives them.
#[derive(Clone)]
pub struct Context(Arc<ContextInner>);

struct ContextInner {
    raw: ffi::CUcontext,
    device: Device,
    range: OnceLock<PriorityRange>,
    /// Handles of dropped events, reused by `Event::new` and `record_event`.
    spare: SpareEvents,
    /// The service stream (0 until first asked for): non-blocking, created on first use and
    /// destroyed with the context. Read without a lock; created under `service_creation`.
    service: AtomicUsize,
    service_creation: Mutex<()>,
}

// SAFETY: a CUcontext is a driver object usable from any thread; the retain is released once.
unsafe impl Send for ContextInner {}
// SAFETY: as above; the interior state is a `OnceLock` and atomics.
unsafe impl Sync for ContextInner {}

/// `cuDevicePrimaryCtxRelease` of device `device` (a drop ignores the answer; a deferred
/// release counts a failure).
fn release_primary(device: usize) -> Result<()> {
    let f = driver_fn!(cuDevicePrimaryCtxRelease);
    // SAFETY: the caller gives up one retain of the device's primary context that it holds.
    check(
        unsafe { f(device as ffi::CUdevice) },
        "cuDevicePrimaryCtxRelease",
    )
}

/// A plain event (no timing, no blocking sync) of `ctx`, created with the context made current.
pub(crate) fn create_plain_event(ctx: ffi::CUcontext) -> Result<ffi::CUevent> {
    let _bound = bind(ctx)?;
    let f = driver_fn!(cuEventCreate);
    let mut ev = ptr::null_mut();
    check(
        // SAFETY: `ev` is a valid out-pointer; the context is current.
        unsafe { f(&mut ev, ffi::CUevent_flags::CU_EVENT_DISABLE_TIMING.0) },
        "cuEventCreate",
    )?;
    Ok(ev)
}

/// The spare-event kind of a plain event (timing and blocking-sync off).
const PLAIN_KIND: usize = 0;

/// Destroys a context's service stream: `cuStreamDestroy` returns at once and the driver
/// releases the stream once its work (frees enqueued on it) has completed.
fn destroy_service_stream(raw: usize) -> Result<()> {
    let f = driver_fn!(cuStreamDestroy);
    // SAFETY: the context owned the stream and is going; nothing uses the handle again.
    check(unsafe { f(raw as ffi::CUstream) }, "cuStreamDestroy")
}

impl Drop for ContextInner {
    /// Destroys the spare events, then releases the retain. Inside a host function both are
    /// queued, in that order. On an ordinary thread the queue is drained first: streams and
    /// events of this context that host functions dropped are destroyed before the context goes.
    fn drop(&mut self) {
        let spare = self.spare.take_all();
        let service = std::mem::take(self.service.get_mut());
        let device = self.device.raw() as usize;
        LIVE.lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(_, w)| w.strong_count() > 0);
        if deferred_destroy::in_host_fn() {
            let events = spare
                .into_iter()
                .map(|e| Deferred::new(e, recycled_events::destroy));
            let stream = (service != 0).then(|| Deferred::new(service, destroy_service_stream));
            deferred_destroy::defer(
                events
                    .chain(stream)
                    .chain([Deferred::new(device, release_primary)]),
            );
            return;
        }
        deferred_destroy::drain_if_pending();
        for e in spare {
            let _ = recycled_events::destroy(e);
        }
        if service != 0 {
            let _ = destroy_service_stream(service);
        }
        let _ = release_primary(device);
    }
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("raw", &self.0.raw)
            .field("device", &self.0.device)
            .finish()
    }
}

impl PartialEq for Context {
    fn eq(&self, other: &Self) -> bool {
        self.0.raw == other.0.raw
    }
}
impl Eq for Context {}
impl std::hash::Hash for Context {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.raw.hash(state)
    }
}

impl Context {
    /// The primary context of device `ordinal`.
    pub fn primary(ordinal: usize) -> Result<Context> {
        Device::new(ordinal)?.primary_context()
    }

    /// If `raw` is the primary context of a device, retains it and returns it as a `Context`;
    /// `Ok(None)` for any other value: null, a context that is not a primary one, a destroyed
    /// context, or a value that is no context at all. Never creates a primary context that is
    /// not active.
    ///
    /// Safe for any value because the value itself never reaches the driver, which dereferences
    /// a context handle (making a bogus value current crashes the process). It is compared
    /// instead: with the contexts this crate holds (no driver call), then with the primary
    /// context of each device whose primary context is active (`cuDevicePrimaryCtxGetState`,
    /// then retained, compared, and released again if it is another one). So a miss costs a
    /// few driver calls per device.
    pub fn retain_if_primary(raw: ffi::CUcontext) -> Result<Option<Context>> {
        if raw.is_null() {
            return Ok(None);
        }
        if let Some(ctx) = Context::find_live(raw) {
            return Ok(Some(ctx));
        }
        for ordinal in 0..Device::count()? {
            let device = Device::new(ordinal)?;
            // Retaining an inactive primary context would create one: ask first. Should another
            // thread release it in between, the retain below makes a new one, which is released
            // again unless it is `raw`.
            if !device.primary_context_active()? {
                continue;
            }
            let ctx = device.primary_context()?;
            if ctx.raw() == raw {
                return Ok(Some(ctx));
            }
        }
        Ok(None)
    }

    /// The raw `CUcontext`.
    pub fn raw(&self) -> ffi::CUcontext {
        self.0.raw
    }

    /// The device the context belongs to.
    pub fn device(&self) -> Device {
        self.0.device
    }

    /// The priorities streams of this context may have (`cuCtxGetStreamPriorityRange`), asked
    /// once and cached.
    pub fn priority_range(&self) -> Result<PriorityRange> {
        if let Some(r) = self.0.range.get() {
            return Ok(*r);
        }
        let _bound = bind(self.0.raw)?;
        let r = priority_range_current()?;
        Ok(*self.0.range.get_or_init(|| r))
    }

    /// Waits for all work in the context (`cuCtxSynchronize`), then destroys what host functions
    /// dropped meanwhile (see [`drain_deferred`](crate::drain_deferred)).
    pub fn synchronize(&self) -> Result<()> {
        let _bound = bind(self.0.raw)?;
        let f = driver_fn!(cuCtxSynchronize);
        // SAFETY: no arguments; the context is current.
        let r = check(unsafe { f() }, "cuCtxSynchronize");
        deferred_destroy::drain_if_pending();
        r
    }

    /// How many spare events the context keeps now: handles of dropped [`Event`](crate::Event)s
    /// that `Event::new` and `record_event` hand out again instead of creating new ones (at most
    /// 32 per kind of event options, 128 in all).
    pub fn cached_events(&self) -> usize {
        self.0.spare.len()
    }

    /// Destroys the context's spare events (`cuEventDestroy`) and returns how many it destroyed;
    /// the first driver error is returned after trying them all. They are destroyed anyway when
    /// the context's last clone is dropped. Inside a host function they are queued for an
    /// ordinary thread instead, and the answer is [`Error::InHostFunction`].
    pub fn clear_event_cache(&self) -> Result<usize> {
        let spare = self.0.spare.take_all();
        if deferred_destroy::in_host_fn() {
            deferred_destroy::defer(
                spare
                    .into_iter()
                    .map(|e| Deferred::new(e, recycled_events::destroy)),
            );
            return Err(Error::InHostFunction {
                call: "cuEventDestroy",
            });
        }
        let mut first = Ok(());
        let mut destroyed = 0;
        for e in spare {
            match recycled_events::try_destroy(e as ffi::CUevent) {
                Ok(()) => destroyed += 1,
                Err(err) => {
                    if first.is_ok() {
                        first = Err(err);
                    }
                }
            }
        }
        first.map(|()| destroyed)
    }

    /// The context's service stream: a non-blocking stream that this crate owns and destroys
    /// with the context (after its work), created on the first call (`cuStreamCreate`, with the
    /// context made current). The memory layer allocates on it when no stream is given and frees
    /// on it when every stream that used the memory may be gone.
    pub(crate) fn service_stream(&self) -> Result<ffi::CUstream> {
        if let Some(s) = self.service_stream_if_created() {
            return Ok(s);
        }
        let _one = self
            .0
            .service_creation
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(s) = self.service_stream_if_created() {
            return Ok(s);
        }
        let _bound = bind(self.0.raw)?;
        let f = driver_fn!(cuStreamCreate);
        let mut raw = ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; the context is current.
        let rc = unsafe { f(&mut raw, ffi::CUstream_flags::CU_STREAM_NON_BLOCKING.0) };
        check(rc, "cuStreamCreate")?;
        if raw.is_null() {
            return Err(Error::NullHandle { what: "stream" });
        }
        self.0.service.store(raw as usize, Ordering::Release);
        Ok(raw)
    }

    /// The service stream if it was created (no driver call, no lock).
    #[inline]
    pub(crate) fn service_stream_if_created(&self) -> Option<ffi::CUstream> {
        let raw = self.0.service.load(Ordering::Acquire);
        (raw != 0).then_some(raw as ffi::CUstream)
    }

    /// A plain event of this context for the crate's own use: a spare one, or a new one.
    pub(crate) fn plain_event(&self) -> Result<ffi::CUevent> {
        match self.take_spare_event(PLAIN_KIND) {
            Some(ev) => Ok(ev),
            None => create_plain_event(self.0.raw),
        }
    }

    /// Gives back an event from [`plain_event`](Context::plain_event): kept as a spare, or
    /// destroyed (queued inside a host function).
    pub(crate) fn recycle_plain_event(&self, ev: ffi::CUevent) {
        if !self.put_spare_event(PLAIN_KIND, ev) {
            let _ = recycled_events::destroy_or_defer(ev);
        }
    }

    /// A spare event of kind `kind` of this context, if one is kept.
    #[inline(always)]
    pub(crate) fn take_spare_event(&self, kind: usize) -> Option<ffi::CUevent> {
        self.0.spare.take(kind)
    }

    /// Keeps `raw`, an event of this context of kind `kind`, for reuse; false if the kind is
    /// full (the caller still owns it).
    #[inline(always)]
    pub(crate) fn put_spare_event(&self, kind: usize, raw: ffi::CUevent) -> bool {
        self.0.spare.put(kind, raw)
    }

    /// A clone of a `Context` alive now for the raw handle `raw`, without a driver call: a
    /// retained primary context is found by its handle, which cannot denote another context
    /// while the retain lasts.
    pub(crate) fn find_live(raw: ffi::CUcontext) -> Option<Context> {
        let live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
        live.iter()
            .filter(|(r, _)| *r == raw as usize)
            .find_map(|(_, w)| w.upgrade())
            .map(Context)
    }

    /// Makes this context current on the calling thread for as long as the guard lives, then
    /// restores whatever was current before.
    pub fn bind(&self) -> Result<ContextBinding<'_>> {
        Ok(ContextBinding {
            _inner: bind(self.0.raw)?,
            _ctx: std::marker::PhantomData,
        })
    }
}

/// Keeps a context current on this thread; see [`Context::bind`].
#[derive(Debug)]
#[must_use = "the context is current only while the binding lives"]
pub struct ContextBinding<'a> {
    _inner: Bound,
    _ctx: std::marker::PhantomData<&'a Context>,
}

/// `cuCtxGetStreamPriorityRange` of the calling thread's current context.
pub(crate) fn priority_range_current() -> Result<PriorityRange> {
    let f = driver_fn!(cuCtxGetStreamPriorityRange);
    let (mut least, mut greatest) = (0, 0);
    // SAFETY: both are valid out-pointers.
    let rc = unsafe { f(&mut least, &mut greatest) };
    check(rc, "cuCtxGetStreamPriorityRange")?;
    Ok(PriorityRange::new(least, greatest))
}

/// The context current on the calling thread (null if none).
#[inline]
pub fn current_context_raw() -> Result<ffi::CUcontext> {
    let f = driver_fn!(cuCtxGetCurrent);
    let mut cur = ptr::null_mut();
    // SAFETY: `cur` is a valid out-pointer.
    check(unsafe { f(&mut cur) }, "cuCtxGetCurrent")?;
    Ok(cur)
}

/// Makes `ctx` current until dropped, unless it already is. Restores the previous context with
/// push/pop, so whatever was current (or nothing) is current again afterwards.
#[derive(Debug)]
pub(crate) struct Bound {
    pushed: bool,
    // Not Send: the push must be popped on the same thread.
    _not_send: std::marker::PhantomData<*const ()>,
}

/// The check is inlined into callers (one `cuCtxGetCurrent` and a compare when `ctx` is already
/// current, the common case); the push and pop are out of line.
#[inline]
pub(crate) fn bind(ctx: ffi::CUcontext) -> Result<Bound> {
    let pushed = current_context_raw()? != ctx && push(ctx)?;
    Ok(Bound {
        pushed,
        _not_send: std::marker::PhantomData,
    })
}

/// [`bind`] for a caller that has just read what is current (`current`): no second read.
#[cfg(feature = "nccl")]
#[inline]
pub(crate) fn bind_found(current: ffi::CUcontext, ctx: ffi::CUcontext) -> Result<Bound> {
    let pushed = current != ctx && push(ctx)?;
    Ok(Bound {
        pushed,
        _not_send: std::marker::PhantomData,
    })
}

/// Makes `ctx` current until the guard drops, without looking at what is current: for a caller
/// that has just looked.
#[inline]
pub(crate) fn push_bound(ctx: ffi::CUcontext) -> Result<Bound> {
    push(ctx)?;
    Ok(Bound {
        pushed: true,
        _not_send: std::marker::PhantomData,
    })
}

#[cold]
#[inline(never)]
fn push(ctx: ffi::CUcontext) -> Result<bool> {
    let f = driver_fn!(cuCtxPushCurrent);
    // SAFETY: `ctx` is a live context handle held by the caller.
    check(unsafe { f(ctx) }, "cuCtxPushCurrent")?;
    Ok(true)
}

#[cold]
#[inline(never)]
fn pop() {
    // Made only by a `Bound` that pushed, which no host function can make (its push is refused).
    if let Ok(f) = ffi::fns::cuCtxPopCurrent() {
        let mut popped = ptr::null_mut();
        // SAFETY: pops the context a `Bound` pushed on this thread.
        let _ = unsafe { f(&mut popped) };
    }
}

impl Drop for Bound {
    #[inline]
    fn drop(&mut self) {
        if self.pushed {
            pop();
        }
    }
}

/// A destroy that must wait for the work of the object's context first (freeing memory or
/// unloading a module that queued work may still use): binds `ctx`, waits for all of its work
/// (`cuCtxSynchronize`), then calls `destroy(handle)`. If binding or waiting fails the object is
/// left alive (leaked): work might still be using it.
///
/// Inside a host function no CUDA call is made: the whole destroy is queued for an ordinary
/// thread (see `deferred`) and the answer is [`Error::InHostFunction`] naming `call`. The queued
/// item keeps only the context's raw handle; the caller's owner holds a [`Context`] clone, whose
/// release (queued after this item, or made on an ordinary thread, which drains first) comes
/// later, so the context is alive when the item runs.
pub(crate) fn destroy_after_work(
    ctx: &Context,
    handle: usize,
    call: &'static str,
    destroy: fn(usize) -> Result<()>,
) -> Result<()> {
    let job = AfterWork {
        ctx: ctx.raw() as usize,
        handle,
        destroy,
    };
    if deferred_destroy::in_host_fn() {
        let queued = Box::into_raw(Box::new(job)) as usize;
        deferred_destroy::defer([Deferred::new(queued, run_queued_after_work)]);
        return Err(Error::InHostFunction { call });
    }
    deferred_destroy::drain_if_pending();
    job.run()
}

/// A destroy of [`destroy_after_work`], as queued.
struct AfterWork {
    ctx: usize,
    handle: usize,
    destroy: fn(usize) -> Result<()>,
}

impl AfterWork {
    fn run(self) -> Result<()> {
        let _bound = bind(self.ctx as ffi::CUcontext)?;
        let f = driver_fn!(cuCtxSynchronize);
        // SAFETY: no arguments; the object's context is current.
        check(unsafe { f() }, "cuCtxSynchronize")?;
        (self.destroy)(self.handle)
    }
}

/// The queued form of [`AfterWork::run`]: `queued` is a `Box<AfterWork>` turned into an address.
fn run_queued_after_work(queued: usize) -> Result<()> {
    // SAFETY: `queued` came from `Box::into_raw` in `destroy_after_work`, and the queue hands
    // each item to its function exactly once.
    let job = unsafe { Box::from_raw(queued as *mut AfterWork) };
    job.run()
}

/// Probes of this module's locks (see `base::lock_probe`).
#[cfg(feature = "test-hooks")]
pub(crate) fn report_locks(out: &mut Vec<String>) {
    crate::base::lock_probe::probe(out, "context::LIVE", &LIVE);
}
