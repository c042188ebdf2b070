//! Contexts: a retained primary context ([`Context`]), making a context current for one call
//! (`bind`), and the context's stream-priority range.

use std::fmt;
use std::ptr;
use std::sync::{Arc, OnceLock};

use crate::device::{Device, init};
use crate::error::{Error, Result, check, driver_fn};
use crate::ffi;
use crate::priority::PriorityRange;

impl Device {
    /// Retains the device's primary context (the one the CUDA runtime, PyTorch and CuPy use).
    pub fn primary_context(self) -> Result<Context> {
        init()?;
        let f = driver_fn!(cuDevicePrimaryCtxRetain);
        let mut raw = ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; the device came from the driver.
        let rc = unsafe { f(&mut raw, self.raw()) };
        check(rc, "cuDevicePrimaryCtxRetain")?;
        if raw.is_null() {
            return Err(Error::NullHandle { what: "context" });
        }
        Ok(Context(Arc::new(ContextInner {
            raw,
            device: self,
            range: OnceLock::new(),
        })))
    }
}

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
}

// SAFETY: a CUcontext is a driver object usable from any thread; the retain is released once.
unsafe impl Send for ContextInner {}
// SAFETY: as above; the only interior state is a `OnceLock`.
unsafe impl Sync for ContextInner {}

impl Drop for ContextInner {
    fn drop(&mut self) {
        if let Ok(f) = ffi::fns::cuDevicePrimaryCtxRelease() {
            // SAFETY: this value holds one retain of the device's primary context.
            let _ = unsafe { f(self.device.raw()) };
        }
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

    /// If `raw` is the primary context of its device, retains it and returns it as a `Context`;
    /// `Ok(None)` for any other context. Never creates a primary context that is not active.
    pub fn retain_if_primary(raw: ffi::CUcontext) -> Result<Option<Context>> {
        if raw.is_null() {
            return Ok(None);
        }
        let device = {
            let _bound = bind(raw)?;
            let f = driver_fn!(cuCtxGetDevice);
            let mut d = 0;
            // SAFETY: `d` is a valid out-pointer; `raw` is current.
            check(unsafe { f(&mut d) }, "cuCtxGetDevice")?;
            Device::from_raw(d)
        };
        // Retaining an inactive primary context would create one: ask first.
        let state = driver_fn!(cuDevicePrimaryCtxGetState);
        let (mut flags, mut active) = (0u32, 0i32);
        // SAFETY: both are valid out-pointers; the device came from the driver.
        let rc = unsafe { state(device.raw(), &mut flags, &mut active) };
        check(rc, "cuDevicePrimaryCtxGetState")?;
        if active == 0 {
            return Ok(None);
        }
        let ctx = device.primary_context()?;
        Ok((ctx.raw() == raw).then_some(ctx))
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

    /// Waits for all work in the context (`cuCtxSynchronize`).
    pub fn synchronize(&self) -> Result<()> {
        let _bound = bind(self.0.raw)?;
        let f = driver_fn!(cuCtxSynchronize);
        // SAFETY: no arguments; the context is current.
        check(unsafe { f() }, "cuCtxSynchronize")
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
