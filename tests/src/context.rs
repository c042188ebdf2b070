//! Raw contexts for the tests: the current context, a binding that restores it, a second
//! (non-primary) context, raw streams.

use std::marker::PhantomData;
use std::ptr;

use cuda_stream::{Context, Device};
use cuda_stream_sys::{self as sys, CUcontext, CUresult, CUstream};

use crate::gpu::check;

/// The context current on the calling thread (null if none), asked with raw `cuCtxGetCurrent`.
#[track_caller]
pub fn current_context() -> CUcontext {
    let mut c = ptr::null_mut();
    // SAFETY: `c` is a valid out-pointer.
    check(unsafe { sys::cuCtxGetCurrent(&mut c) }, "cuCtxGetCurrent");
    c
}

/// Replaces the calling thread's current context with raw `cuCtxSetCurrent` (`None`: no
/// context). Set `None` again before the context is destroyed.
#[track_caller]
pub fn set_current_context(ctx: Option<&dyn HasContext>) {
    let raw = ctx.map_or(ptr::null_mut(), |c| c.raw_context());
    // SAFETY: `raw` is null or a live context (borrowed for the call).
    check(unsafe { sys::cuCtxSetCurrent(raw) }, "cuCtxSetCurrent");
}

/// Anything that names a live context.
pub trait HasContext {
    /// The raw context.
    fn raw_context(&self) -> CUcontext;
}

impl HasContext for Context {
    fn raw_context(&self) -> CUcontext {
        self.raw()
    }
}

/// Makes a context current for its lifetime (raw push/pop), unless it already is; whatever was
/// current before (or nothing) is current again after the drop.
#[derive(Debug)]
#[must_use = "the context is current only while the binding lives"]
pub struct RawBinding<'a> {
    pushed: bool,
    _ctx: PhantomData<&'a ()>,
    _not_send: PhantomData<*const ()>,
}

/// Binds `ctx` on the calling thread for as long as the binding (which borrows it) lives.
#[track_caller]
pub fn bind<C: HasContext + ?Sized>(ctx: &C) -> RawBinding<'_> {
    // SAFETY: `ctx` names a live context, borrowed for as long as the binding lives.
    unsafe { bind_raw(ctx.raw_context()) }
}

/// Binds the raw context `ctx` on the calling thread; see [`RawBinding`].
///
/// # Safety
/// `ctx` must be a live context, and stay live while the binding lives.
#[track_caller]
pub unsafe fn bind_raw<'a>(ctx: CUcontext) -> RawBinding<'a> {
    let pushed = if current_context() == ctx {
        false
    } else {
        // SAFETY: the caller passes a live context; the binding pops it on this thread.
        check(unsafe { sys::cuCtxPushCurrent(ctx) }, "cuCtxPushCurrent");
        true
    };
    RawBinding {
        pushed,
        _ctx: PhantomData,
        _not_send: PhantomData,
    }
}

impl Drop for RawBinding<'_> {
    fn drop(&mut self) {
        if self.pushed {
            let mut popped = ptr::null_mut();
            // SAFETY: pops the context this binding pushed on this thread.
            let rc = unsafe { sys::cuCtxPopCurrent(&mut popped) };
            if !std::thread::panicking() {
                check(rc, "cuCtxPopCurrent");
            }
        }
    }
}

/// A non-primary context created with raw `cuCtxCreate` (no current context is left behind)
/// and destroyed with `cuCtxDestroy` on drop. Make sure it is current on no thread, and that
/// nothing of it (streams, events, buffers, kernels) is used after the drop.
#[derive(Debug)]
pub struct RawContext {
    raw: CUcontext,
    device: Device,
}

// SAFETY: a CUcontext is a driver object usable from any thread; it is destroyed once.
unsafe impl Send for RawContext {}
// SAFETY: as above; the value has no interior mutability.
unsafe impl Sync for RawContext {}

impl RawContext {
    /// Creates a context on `device`; the calling thread's current context is unchanged.
    #[track_caller]
    pub fn create(device: Device) -> RawContext {
        let before = current_context();
        let mut raw = ptr::null_mut();
        let rc = match sys::fns::cuCtxCreate_v12050() {
            // SAFETY: `raw` is a valid out-pointer; null creation parameters mean the defaults
            // (`cuCtxCreate_v4`); the device came from the driver.
            Ok(create) => unsafe { create(&mut raw, ptr::null_mut(), 0, device.raw()) },
            // Before CUDA 12.5, or with the bindings limited below it (CUDA_SYS_ABI_VERSION):
            // the CUDA 3.2 ABI, flags and device only.
            // SAFETY: as above.
            Err(_) => unsafe { sys::cuCtxCreate_v3020(&mut raw, 0, device.raw()) },
        };
        check(rc, "cuCtxCreate");
        assert!(!raw.is_null(), "cuCtxCreate returned a null context");
        // cuCtxCreate pushed the new context: pop it so the caller's state is unchanged.
        let mut popped = ptr::null_mut();
        // SAFETY: pops the context cuCtxCreate pushed on this thread.
        check(
            unsafe { sys::cuCtxPopCurrent(&mut popped) },
            "cuCtxPopCurrent",
        );
        assert_eq!(popped, raw, "cuCtxPopCurrent popped another context");
        assert_eq!(current_context(), before, "current context not restored");
        RawContext { raw, device }
    }

    /// The raw context.
    pub fn raw(&self) -> CUcontext {
        self.raw
    }

    /// Its device.
    pub fn device(&self) -> Device {
        self.device
    }
}

impl HasContext for RawContext {
    fn raw_context(&self) -> CUcontext {
        self.raw
    }
}

impl Drop for RawContext {
    fn drop(&mut self) {
        // SAFETY: this value created the context and destroys it once; the caller promised that
        // nothing uses it afterwards.
        let rc = unsafe { sys::cuCtxDestroy(self.raw) };
        if !std::thread::panicking() {
            check(rc, "cuCtxDestroy");
        }
    }
}

/// Creates a raw stream in `ctx` with `cuStreamCreate` and `flags`.
#[track_caller]
pub fn raw_stream_create<C: HasContext + ?Sized>(ctx: &C, flags: u32) -> CUstream {
    // SAFETY: `ctx` is borrowed, so live, for the call.
    unsafe { raw_stream_create_in(ctx.raw_context(), flags) }
}

/// # Safety
/// `ctx` must be a live context.
#[track_caller]
pub(crate) unsafe fn raw_stream_create_in(ctx: CUcontext, flags: u32) -> CUstream {
    // SAFETY: the caller passes a live context.
    let _bound = unsafe { bind_raw(ctx) };
    let mut s = ptr::null_mut();
    // SAFETY: `s` is a valid out-pointer; the context is current.
    check(
        unsafe { sys::cuStreamCreate(&mut s, flags) },
        "cuStreamCreate",
    );
    assert!(!s.is_null());
    s
}

/// Destroys a raw stream with `cuStreamDestroy`, asserting success.
///
/// # Safety
/// `s` must be a live stream that nothing uses afterwards.
#[track_caller]
pub unsafe fn raw_stream_destroy(s: CUstream) {
    // SAFETY: the caller owns `s` and never uses it again.
    check(unsafe { sys::cuStreamDestroy(s) }, "cuStreamDestroy");
}

/// `cuStreamQuery` of `stream` with `ctx` bound (needed for the default-stream values 0/1/2).
///
/// # Safety
/// `stream` must be a live stream of `ctx`, or a default-stream value.
pub unsafe fn raw_query(ctx: CUcontext, stream: CUstream) -> CUresult {
    // SAFETY: the caller passes a live context.
    let _bound = unsafe { bind_raw(ctx) };
    // SAFETY: the caller vouches for the stream; its context is current.
    unsafe { sys::cuStreamQuery(stream) }
}
