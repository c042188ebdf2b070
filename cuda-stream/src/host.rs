//! Host functions and callbacks (closures run by the driver), the record of their panics, and
//! the per-thread event cache behind `wait_stream`.

use std::any::Any;
use std::cell::RefCell;
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::context::{Context, bind};
use crate::error::{Error, Result, check, driver_fn};
use crate::ffi;
use crate::stream::Stream;

/// How many caught panics wait in `PANICS` to be reported: the fast path checks only this.
static PENDING: AtomicUsize = AtomicUsize::new(0);
/// `(stream, context, message)` of each caught panic not yet reported.
static PANICS: Mutex<Vec<(usize, usize, String)>> = Mutex::new(Vec::new());

fn message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

/// Stores a caught panic for the stream, on the driver's thread; never unwinds.
fn record_panic(stream: usize, ctx: usize, payload: Box<dyn Any + Send>) {
    let msg = message(&*payload);
    // The payload's own destructor could panic: contain it too.
    if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        std::mem::forget(again);
    }
    let mut list = PANICS.lock().unwrap_or_else(|e| e.into_inner());
    list.push((stream, ctx, msg));
    PENDING.fetch_add(1, Ordering::Release);
}

/// Returns the oldest unreported panic of `stream`'s host functions as an error.
#[inline(always)]
pub(crate) fn report_panic(stream: Stream<'_>) -> Result<()> {
    if PENDING.load(Ordering::Acquire) == 0 {
        return Ok(());
    }
    report_panic_slow(stream)
}

#[cold]
#[inline(never)]
fn report_panic_slow(stream: Stream<'_>) -> Result<()> {
    let key = (stream.raw() as usize, stream.context_raw() as usize);
    let mut list = PANICS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(i) = list
        .iter()
        .position(|(s, c, _)| *s == key.0 && (*c == 0 || *c == key.1))
    {
        let (s, _, message) = list.remove(i);
        PENDING.fetch_sub(1, Ordering::Release);
        return Err(Error::HostFnPanicked { stream: s, message });
    }
    Ok(())
}

/// Drops the unreported panics of a stream that is being destroyed, so that a later stream that
/// gets the same handle value does not inherit them.
pub(crate) fn forget_panics(raw: ffi::CUstream) {
    if PENDING.load(Ordering::Acquire) == 0 {
        return;
    }
    let mut list = PANICS.lock().unwrap_or_else(|e| e.into_inner());
    let before = list.len();
    list.retain(|(s, _, _)| *s != raw as usize);
    PENDING.fetch_sub(before - list.len(), Ordering::Release);
}

struct HostCall<F> {
    f: F,
    stream: usize,
    ctx: usize,
}

unsafe extern "C" fn host_trampoline<F: FnOnce() + Send + 'static>(user_data: *mut c_void) {
    // SAFETY: `user_data` is the `Box<HostCall<F>>` leaked by `launch`; the driver calls each
    // host function exactly once, so ownership comes back exactly once.
    let call = unsafe { Box::from_raw(user_data.cast::<HostCall<F>>()) };
    let HostCall { f, stream, ctx } = *call;
    if let Err(payload) = catch_unwind(AssertUnwindSafe(f)) {
        record_panic(stream, ctx, payload);
    }
}

/// Runs a closure that captures nothing: the value was forgotten by `launch`, so conjuring it
/// here moves it, and no allocation carries it.
unsafe extern "C" fn zst_trampoline<F: FnOnce() + Send + 'static>(user_data: *mut c_void) {
    // SAFETY: `F` is zero-sized, so reading it from a dangling, aligned pointer is valid; `launch`
    // forgot the original and the driver calls this exactly once, so the value exists once.
    let f = unsafe { ptr::read(ptr::NonNull::<F>::dangling().as_ptr()) };
    if let Err(payload) = catch_unwind(AssertUnwindSafe(f)) {
        // Only the stream travels in `user_data`; 0 matches any context.
        record_panic(user_data as usize, 0, payload);
    }
}

pub(crate) fn launch<F: FnOnce() + Send + 'static>(stream: Stream<'_>, f: F) -> Result<()> {
    report_panic(stream)?;
    let launch = driver_fn!(cuLaunchHostFunc);
    // Default streams go the boxed way, which records their context for panic reports.
    if std::mem::size_of::<F>() == 0 && !stream.is_default() {
        // No allocation for a closure that captures nothing: a malloc on this thread freed on the
        // driver's thread costs more than the enqueue itself under load (see BENCHMARKS.md).
        let f = std::mem::ManuallyDrop::new(f);
        // SAFETY: the stream is live; the trampoline matches `CUhostFn` and conjures `f` back.
        let rc = unsafe { launch(stream.raw(), Some(zst_trampoline::<F>), stream.raw().cast()) };
        if rc != ffi::CUresult::CUDA_SUCCESS {
            // The driver will never run it: drop the closure here, once.
            drop(std::mem::ManuallyDrop::into_inner(f));
            return Err(Error::driver("cuLaunchHostFunc", rc));
        }
        return Ok(());
    }
    let data = Box::into_raw(Box::new(HostCall {
        f,
        stream: stream.raw() as usize,
        ctx: stream.context_raw() as usize,
    }));
    let _bound = if stream.is_default() {
        match bind(stream.context_raw()) {
            Ok(b) => Some(b),
            Err(e) => {
                // SAFETY: never handed to the driver; reclaimed once.
                drop(unsafe { Box::from_raw(data) });
                return Err(e);
            }
        }
    } else {
        None
    };
    // SAFETY: the stream is live; the trampoline matches `CUhostFn` and takes back `data`.
    let rc = unsafe { launch(stream.raw(), Some(host_trampoline::<F>), data.cast()) };
    if rc != ffi::CUresult::CUDA_SUCCESS {
        // SAFETY: the driver refused the call, so it will never run the trampoline: the box is
        // still ours, reclaimed exactly once.
        drop(unsafe { Box::from_raw(data) });
        return Err(Error::driver("cuLaunchHostFunc", rc));
    }
    Ok(())
}

unsafe extern "C" fn callback_trampoline<F: FnOnce(Result<()>) + Send + 'static>(
    _stream: ffi::CUstream,
    status: ffi::CUresult,
    user_data: *mut c_void,
) {
    // SAFETY: as in `host_trampoline`: the box leaked by `add_callback`, returned exactly once.
    let call = unsafe { Box::from_raw(user_data.cast::<HostCall<F>>()) };
    let HostCall { f, stream, ctx } = *call;
    let status = check(status, "cuStreamAddCallback");
    if let Err(payload) = catch_unwind(AssertUnwindSafe(move || f(status))) {
        record_panic(stream, ctx, payload);
    }
}

pub(crate) fn add_callback<F: FnOnce(Result<()>) + Send + 'static>(
    stream: Stream<'_>,
    f: F,
) -> Result<()> {
    report_panic(stream)?;
    let add = driver_fn!(cuStreamAddCallback);
    let _bound = if stream.is_default() {
        Some(bind(stream.context_raw())?)
    } else {
        None
    };
    let data = Box::into_raw(Box::new(HostCall {
        f,
        stream: stream.raw() as usize,
        ctx: stream.context_raw() as usize,
    }));
    // SAFETY: the stream is live; the trampoline matches `CUstreamCallback`; flags must be 0.
    let rc = unsafe { add(stream.raw(), Some(callback_trampoline::<F>), data.cast(), 0) };
    if rc != ffi::CUresult::CUDA_SUCCESS {
        // SAFETY: the driver refused the callback and will never call it.
        drop(unsafe { Box::from_raw(data) });
        return Err(Error::driver("cuStreamAddCallback", rc));
    }
    Ok(())
}

/// One event per (thread, context) for `wait_stream`: recording it and waiting on it right away
/// is all `wait_stream` needs, and reuse is safe because a wait captures the event's state at the
/// time of the call. Entries hold a retain of the (primary) context so the event cannot outlive
/// it; for other contexts a temporary event is used.
pub(crate) struct WaitEvents;

struct CachedEvent {
    ctx: ffi::CUcontext,
    event: ffi::CUevent,
    _keep: Context,
}

impl Drop for CachedEvent {
    fn drop(&mut self) {
        if let Ok(f) = ffi::fns::cuEventDestroy() {
            // SAFETY: the cache created this event and destroys it once; `_keep` still holds the
            // context (fields drop after this body).
            let _ = unsafe { f(self.event) };
        }
    }
}

thread_local! {
    static CACHE: RefCell<Vec<CachedEvent>> = const { RefCell::new(Vec::new()) };
}

pub(crate) static WAIT_EVENTS: WaitEvents = WaitEvents;

fn create_plain_event(ctx: ffi::CUcontext) -> Result<ffi::CUevent> {
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

impl WaitEvents {
    /// Runs `f` with this thread's cached event for `ctx`.
    #[inline]
    pub(crate) fn with_event(
        &self,
        ctx: ffi::CUcontext,
        f: impl FnOnce(ffi::CUevent) -> Result<()>,
    ) -> Result<()> {
        let cached = CACHE
            .try_with(|c| {
                let c = c.try_borrow().ok()?;
                c.iter().find(|e| e.ctx == ctx).map(|e| e.event)
            })
            .ok()
            .flatten();
        match cached {
            Some(ev) => f(ev),
            None => self.slow(ctx, f),
        }
    }

    #[cold]
    #[inline(never)]
    fn slow(&self, ctx: ffi::CUcontext, f: impl FnOnce(ffi::CUevent) -> Result<()>) -> Result<()> {
        if let Some(keep) = Context::retain_if_primary(ctx)? {
            let event = create_plain_event(ctx)?;
            let entry = CachedEvent {
                ctx,
                event,
                _keep: keep,
            };
            let stored = CACHE.try_with(|c| match c.try_borrow_mut() {
                Ok(mut c) => {
                    c.push(entry);
                    None
                }
                Err(_) => Some(entry),
            });
            if let Ok(None) = stored {
                return f(event);
            }
            // Thread teardown: fall through to a temporary event (the entry drops here).
        }
        let event = create_plain_event(ctx)?;
        let r = f(event);
        let destroy = driver_fn!(cuEventDestroy);
        // SAFETY: created above, destroyed once; a pending wait keeps its own reference.
        let _ = unsafe { destroy(event) };
        r
    }
}
