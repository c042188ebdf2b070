//! Shared helpers for the GPU integration tests.
//!
//! - [`gpu`]: the primary context of device 0, or `None` (with a printed reason) when there is no
//!   driver or no device. Set `CUDA_STREAM_TESTS_REQUIRE_GPU=1` to turn a skip into a failure.
//! - [`Kernels`]: a tiny PTX module (JIT-compiled by the driver, no toolkit needed) with a
//!   `%globaltimer` spin kernel, a delayed store, a copy and an atomic add, each launched
//!   `<<<1, 1>>>` with `cuLaunchKernel`.
//! - [`DeviceBuffer`]: `u32`s in device memory, zeroed on creation, read back on a private
//!   non-blocking stream, so a read never waits for (and so never hides a missing dependency on)
//!   any other stream, the legacy default stream included.
//! - [`RawContext`]: a second, non-primary context (`cuCtxCreate`), destroyed on drop.
//! - [`RawBinding`]: makes a raw context current for a scope, restoring what was current.
//! - [`Window`]: decides whether a "still pending" observation is meaningful.
//!
//! The helpers panic on driver errors: they are test infrastructure, and a panic names the call.

use std::ffi::{CStr, c_void};
use std::marker::PhantomData;
use std::ptr;
use std::time::{Duration, Instant};

pub use cuda_stream;
pub use cuda_sys as sys;

use cuda_stream::{AsStream, Context, Device, Stream};
use cuda_sys::{CUcontext, CUdeviceptr, CUfunction, CUmodule, CUresult, CUstream};

/// The environment variable that turns a skipped test into a failure (for the GPU machine).
pub const REQUIRE_GPU_VAR: &str = "CUDA_STREAM_TESTS_REQUIRE_GPU";

fn skip(reason: String) -> Option<Context> {
    if std::env::var_os(REQUIRE_GPU_VAR).is_some_and(|v| !v.is_empty() && v != "0") {
        panic!("{REQUIRE_GPU_VAR} is set but the test cannot run: {reason}");
    }
    eprintln!("{reason}");
    None
}

/// An error with its `source()` chain, for messages.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// The primary context of device 0, or `None` after printing why the test is skipped:
/// `skipped: no CUDA driver: <err>` or `skipped: no CUDA device`.
pub fn gpu() -> Option<Context> {
    match cuda_stream::init() {
        Ok(()) => {}
        Err(e) if e.driver_code() == Some(CUresult::CUDA_ERROR_NO_DEVICE) => {
            return skip("skipped: no CUDA device".to_string());
        }
        Err(e) => return skip(format!("skipped: no CUDA driver: {}", error_chain(&e))),
    }
    match Device::count() {
        Ok(0) => return skip("skipped: no CUDA device".to_string()),
        Ok(_) => {}
        Err(e) => return skip(format!("skipped: no CUDA driver: {}", error_chain(&e))),
    }
    Some(Context::primary(0).unwrap_or_else(|e| {
        panic!(
            "a device exists but its primary context failed: {}",
            error_chain(&e)
        )
    }))
}

/// Panics unless `rc` is `CUDA_SUCCESS`, naming the call and the code.
#[track_caller]
pub fn check(rc: CUresult, call: &str) {
    assert_eq!(
        rc,
        CUresult::CUDA_SUCCESS,
        "{call} failed: {} ({})",
        sys::result_name(rc),
        sys::result_description(rc)
    );
}

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
        // SAFETY: `raw` is a valid out-pointer; null creation parameters mean the defaults
        // (`cuCtxCreate_v4`); the device came from the driver.
        check(
            unsafe { sys::cuCtxCreate(&mut raw, ptr::null_mut(), 0, device.raw()) },
            "cuCtxCreate",
        );
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
unsafe fn raw_stream_create_in(ctx: CUcontext, flags: u32) -> CUstream {
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

const PTX_BODY: &str = r#"
.visible .entry spin(
	.param .u64 spin_param_0
)
{
	.reg .pred 	%p<2>;
	.reg .b64 	%rd<5>;

	ld.param.u64 	%rd1, [spin_param_0];
	mov.u64 	%rd2, %globaltimer;
$L_spin_loop:
	mov.u64 	%rd3, %globaltimer;
	sub.u64 	%rd4, %rd3, %rd2;
	setp.lt.u64 	%p1, %rd4, %rd1;
	@%p1 bra 	$L_spin_loop;
	ret;
}

.visible .entry store_after_spin(
	.param .u64 store_after_spin_param_0,
	.param .u32 store_after_spin_param_1,
	.param .u64 store_after_spin_param_2
)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<2>;
	.reg .b64 	%rd<7>;

	ld.param.u64 	%rd1, [store_after_spin_param_0];
	ld.param.u32 	%r1, [store_after_spin_param_1];
	ld.param.u64 	%rd2, [store_after_spin_param_2];
	cvta.to.global.u64 	%rd3, %rd1;
	mov.u64 	%rd4, %globaltimer;
$L_store_loop:
	mov.u64 	%rd5, %globaltimer;
	sub.u64 	%rd6, %rd5, %rd4;
	setp.lt.u64 	%p1, %rd6, %rd2;
	@%p1 bra 	$L_store_loop;
	st.global.u32 	[%rd3], %r1;
	ret;
}

.visible .entry copy_u32(
	.param .u64 copy_u32_param_0,
	.param .u64 copy_u32_param_1
)
{
	.reg .b32 	%r<2>;
	.reg .b64 	%rd<5>;

	ld.param.u64 	%rd1, [copy_u32_param_0];
	ld.param.u64 	%rd2, [copy_u32_param_1];
	cvta.to.global.u64 	%rd3, %rd1;
	cvta.to.global.u64 	%rd4, %rd2;
	ld.global.u32 	%r1, [%rd4];
	st.global.u32 	[%rd3], %r1;
	ret;
}

.visible .entry add_u32(
	.param .u64 add_u32_param_0,
	.param .u32 add_u32_param_1
)
{
	.reg .b32 	%r<3>;
	.reg .b64 	%rd<3>;

	ld.param.u64 	%rd1, [add_u32_param_0];
	ld.param.u32 	%r1, [add_u32_param_1];
	cvta.to.global.u64 	%rd2, %rd1;
	atom.global.add.u32 	%r2, [%rd2], %r1;
	ret;
}
"#;

/// The PTX headers tried in order: `sm_50` first (any driver JIT-compiles it for newer GPUs);
/// `sm_75` in case a driver refuses targets older than it supports offline; then the device's
/// own architecture.
fn ptx_headers(device: Device) -> Vec<String> {
    let mut v = vec![
        ".version 7.0\n.target sm_50\n.address_size 64\n".to_string(),
        ".version 7.0\n.target sm_75\n.address_size 64\n".to_string(),
    ];
    let major =
        device.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    let minor =
        device.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    if let (Ok(major), Ok(minor)) = (major, minor) {
        v.push(format!(
            ".version 8.7\n.target sm_{major}{minor}\n.address_size 64\n"
        ));
    }
    v
}

/// The kernels' PTX with the first header (for reading; [`Kernels::load`] may fall back).
pub fn ptx_source() -> String {
    format!(".version 7.0\n.target sm_50\n.address_size 64\n{PTX_BODY}")
}

/// Loads PTX text with `cuModuleLoadDataEx` (= `cuModuleLoadData` plus the JIT error log).
/// The context must be current.
fn load_module(ptx: &str) -> Result<CUmodule, String> {
    let image = std::ffi::CString::new(ptx).expect("PTX without NUL bytes");
    let mut log = vec![0u8; 16 * 1024];
    let mut options = [
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
    ];
    let mut values = [
        log.as_mut_ptr().cast::<c_void>(),
        ptr::without_provenance_mut::<c_void>(log.len()),
    ];
    let mut module = ptr::null_mut();
    // SAFETY: `image` is a NUL-terminated PTX string; the option arrays have 2 entries each; the
    // log buffer is writable for the size passed and outlives the call.
    let rc = unsafe {
        sys::cuModuleLoadDataEx(
            &mut module,
            image.as_ptr().cast(),
            options.len() as u32,
            options.as_mut_ptr(),
            values.as_mut_ptr(),
        )
    };
    if rc == CUresult::CUDA_SUCCESS {
        return Ok(module);
    }
    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
    Err(format!(
        "{}: {}",
        sys::result_name(rc),
        String::from_utf8_lossy(&log[..end]).trim()
    ))
}

/// The test kernels, loaded in one context, unloaded (with that context bound) on drop.
#[derive(Debug)]
pub struct Kernels<'a> {
    ctx: CUcontext,
    module: CUmodule,
    spin: CUfunction,
    store_after_spin: CUfunction,
    copy_u32: CUfunction,
    add_u32: CUfunction,
    _ctx: PhantomData<&'a ()>,
}

// SAFETY: module and function handles are driver objects usable from any thread; the module is
// unloaded once, on drop, and launches are thread-safe driver calls.
unsafe impl Send for Kernels<'_> {}
// SAFETY: as above; no interior mutability.
unsafe impl Sync for Kernels<'_> {}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).expect("duration fits in u64 nanoseconds")
}

impl<'a> Kernels<'a> {
    /// JIT-compiles the PTX module in `ctx` and looks up its kernels.
    #[track_caller]
    pub fn load<C: HasContext + ?Sized>(ctx: &'a C) -> Kernels<'a> {
        let _bound = bind(ctx);
        let ctx = ctx.raw_context();
        let mut dev = 0;
        // SAFETY: `dev` is a valid out-pointer; the context is current.
        check(unsafe { sys::cuCtxGetDevice(&mut dev) }, "cuCtxGetDevice");
        let mut errors = Vec::new();
        let mut module = None;
        for header in ptx_headers(Device::from_raw(dev)) {
            match load_module(&format!("{header}{PTX_BODY}")) {
                Ok(m) => {
                    module = Some(m);
                    break;
                }
                Err(e) => errors.push(format!("[{}] {e}", header.replace('\n', " ").trim())),
            }
        }
        let module = module
            .unwrap_or_else(|| panic!("the driver refused the test PTX: {}", errors.join("; ")));
        if !errors.is_empty() {
            eprintln!("note: PTX loaded after fallbacks: {}", errors.join("; "));
        }
        let get = |name: &CStr| {
            let mut f = ptr::null_mut();
            // SAFETY: `f` is a valid out-pointer; the module is loaded; `name` is NUL-terminated.
            check(
                unsafe { sys::cuModuleGetFunction(&mut f, module, name.as_ptr()) },
                "cuModuleGetFunction",
            );
            f
        };
        Kernels {
            ctx,
            module,
            spin: get(c"spin"),
            store_after_spin: get(c"store_after_spin"),
            copy_u32: get(c"copy_u32"),
            add_u32: get(c"add_u32"),
            _ctx: PhantomData,
        }
    }

    /// The context the kernels were loaded in.
    pub fn context_raw(&self) -> CUcontext {
        self.ctx
    }

    #[track_caller]
    fn launch(&self, f: CUfunction, stream: Stream<'_>, params: &mut [*mut c_void]) {
        assert_eq!(
            stream.context_raw(),
            self.ctx,
            "kernels launched on a stream of another context"
        );
        // Default-stream values (0x0/0x1/0x2) resolve through the current context.
        // SAFETY: the context is borrowed for 'a, which outlives `self`.
        let _bound = unsafe { bind_raw(self.ctx) };
        // SAFETY: `f` is a kernel of the loaded module; `params` holds one pointer per kernel
        // parameter, each to a value of the parameter's type, live for the call (the driver
        // copies the values at launch); the stream belongs to this context and is live.
        let rc = unsafe {
            sys::cuLaunchKernel(
                f,
                1,
                1,
                1,
                1,
                1,
                1,
                0,
                stream.raw(),
                params.as_mut_ptr(),
                ptr::null_mut(),
            )
        };
        check(rc, "cuLaunchKernel");
    }

    /// Enqueues `spin<<<1, 1>>>(ns)`: busy-waits on `%globaltimer` for at least `d`.
    #[track_caller]
    pub fn spin(&self, stream: impl AsStream, d: Duration) {
        let mut ns = duration_ns(d);
        let mut params = [(&raw mut ns).cast::<c_void>()];
        self.launch(self.spin, stream.as_stream(), &mut params);
    }

    /// Enqueues `store_after_spin<<<1, 1>>>(p, value, ns)`: spins for at least `d`, then one
    /// thread writes `*p = value`.
    #[track_caller]
    pub fn store_after_spin(&self, stream: impl AsStream, p: CUdeviceptr, value: u32, d: Duration) {
        let mut p = p;
        let mut value = value;
        let mut ns = duration_ns(d);
        let mut params = [
            (&raw mut p).cast::<c_void>(),
            (&raw mut value).cast::<c_void>(),
            (&raw mut ns).cast::<c_void>(),
        ];
        self.launch(self.store_after_spin, stream.as_stream(), &mut params);
    }

    /// Enqueues `*p = value` with no delay.
    #[track_caller]
    pub fn store(&self, stream: impl AsStream, p: CUdeviceptr, value: u32) {
        self.store_after_spin(stream, p, value, Duration::ZERO);
    }

    /// Enqueues `copy_u32<<<1, 1>>>(dst, src)`: `*dst = *src`.
    #[track_caller]
    pub fn copy_u32(&self, stream: impl AsStream, dst: CUdeviceptr, src: CUdeviceptr) {
        let mut dst = dst;
        let mut src = src;
        let mut params = [
            (&raw mut dst).cast::<c_void>(),
            (&raw mut src).cast::<c_void>(),
        ];
        self.launch(self.copy_u32, stream.as_stream(), &mut params);
    }

    /// Enqueues `add_u32<<<1, 1>>>(p, value)`: `atomicAdd(p, value)`.
    #[track_caller]
    pub fn add_u32(&self, stream: impl AsStream, p: CUdeviceptr, value: u32) {
        let mut p = p;
        let mut value = value;
        let mut params = [
            (&raw mut p).cast::<c_void>(),
            (&raw mut value).cast::<c_void>(),
        ];
        self.launch(self.add_u32, stream.as_stream(), &mut params);
    }
}

impl Drop for Kernels<'_> {
    fn drop(&mut self) {
        // SAFETY: the context is borrowed for 'a, which outlives `self`.
        let _bound = unsafe { bind_raw(self.ctx) };
        // SAFETY: the module was loaded by this value and is unloaded once; its context is bound.
        let rc = unsafe { sys::cuModuleUnload(self.module) };
        if !std::thread::panicking() {
            check(rc, "cuModuleUnload");
        }
    }
}

/// Runs `f` with a private non-blocking stream of `ctx` (bound), then synchronises and destroys
/// the stream.
///
/// # Safety
/// `ctx` must be a live context.
#[track_caller]
unsafe fn with_private_stream<R>(ctx: CUcontext, f: impl FnOnce(CUstream) -> R) -> R {
    // SAFETY: the caller passes a live context.
    let _bound = unsafe { bind_raw(ctx) };
    // SAFETY: as above.
    let s = unsafe { raw_stream_create_in(ctx, sys::CUstream_flags::CU_STREAM_NON_BLOCKING.0) };
    let r = f(s);
    // SAFETY: `s` was created above and is live.
    check(
        unsafe { sys::cuStreamSynchronize(s) },
        "cuStreamSynchronize",
    );
    // SAFETY: created above, destroyed once.
    unsafe { raw_stream_destroy(s) };
    r
}

/// Reads `n` `u32`s at `ptr` (device memory usable in `ctx`) on a private non-blocking stream:
/// the read waits for no other stream, so it sees whatever is in memory now.
#[track_caller]
pub fn read_u32s<C: HasContext + ?Sized>(ctx: &C, ptr: CUdeviceptr, n: usize) -> Vec<u32> {
    // SAFETY: `ctx` is borrowed, so live, for the call.
    unsafe { read_u32s_in(ctx.raw_context(), ptr, n) }
}

/// # Safety
/// `ctx` must be a live context.
#[track_caller]
unsafe fn read_u32s_in(ctx: CUcontext, ptr: CUdeviceptr, n: usize) -> Vec<u32> {
    let mut out = vec![0u32; n];
    let dst = out.as_mut_ptr();
    let copy = |s: CUstream| {
        check(
            // SAFETY: `out` is writable for `4 * n` bytes and is not touched until the stream
            // has been synchronised (inside `with_private_stream`).
            unsafe { sys::cuMemcpyDtoHAsync(dst.cast(), ptr, 4 * n, s) },
            "cuMemcpyDtoHAsync",
        );
    };
    // SAFETY: the caller passes a live context.
    unsafe { with_private_stream(ctx, copy) };
    out
}

/// `n` `u32`s of device memory in one context (`cuMemAlloc`), zero-filled before `new`
/// returns; freed on drop with the context bound.
#[derive(Debug)]
pub struct DeviceBuffer<'a> {
    ptr: CUdeviceptr,
    len: usize,
    ctx: CUcontext,
    _ctx: PhantomData<&'a ()>,
}

// SAFETY: a device pointer and a context handle, both usable from any thread; freed once.
unsafe impl Send for DeviceBuffer<'_> {}
// SAFETY: as above; no interior mutability on the host.
unsafe impl Sync for DeviceBuffer<'_> {}

impl<'a> DeviceBuffer<'a> {
    /// Allocates `len` `u32`s in `ctx` and zeroes them (the zeroing has completed on return).
    #[track_caller]
    pub fn new<C: HasContext + ?Sized>(ctx: &'a C, len: usize) -> DeviceBuffer<'a> {
        assert!(len > 0);
        let _bound = bind(ctx);
        let ctx = ctx.raw_context();
        let mut ptr = 0;
        // SAFETY: `ptr` is a valid out-pointer; the context is current.
        check(unsafe { sys::cuMemAlloc(&mut ptr, 4 * len) }, "cuMemAlloc");
        let buf = DeviceBuffer {
            ptr,
            len,
            ctx,
            _ctx: PhantomData,
        };
        buf.fill(0);
        buf
    }

    /// The device address of element 0.
    pub fn ptr(&self) -> CUdeviceptr {
        self.ptr
    }

    /// The device address of element `i`.
    pub fn at(&self, i: usize) -> CUdeviceptr {
        assert!(i < self.len, "index {i} out of {}", self.len);
        self.ptr + 4 * i as u64
    }

    /// How many `u32`s.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: buffers are never empty.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Enqueues `cuMemsetD32Async(value)` of the whole buffer on `stream`.
    #[track_caller]
    pub fn fill_async(&self, stream: impl AsStream, value: u32) {
        let stream = stream.as_stream();
        assert_eq!(stream.context_raw(), self.ctx);
        // SAFETY: the context is borrowed for 'a, which outlives `self`.
        let _bound = unsafe { bind_raw(self.ctx) };
        check(
            // SAFETY: the buffer is live and holds `len` u32s; the stream is of its context.
            unsafe { sys::cuMemsetD32Async(self.ptr, value, self.len, stream.raw()) },
            "cuMemsetD32Async",
        );
    }

    /// Sets every element to `value` on a private stream; done on return.
    #[track_caller]
    pub fn fill(&self, value: u32) {
        let set = |s: CUstream| {
            check(
                // SAFETY: the buffer is live and holds `len` u32s; `s` is of its context.
                unsafe { sys::cuMemsetD32Async(self.ptr, value, self.len, s) },
                "cuMemsetD32Async",
            );
        };
        // SAFETY: the context is borrowed for 'a, which outlives `self`.
        unsafe { with_private_stream(self.ctx, set) };
    }

    /// Reads the whole buffer now (see [`read_u32s`]); call after synchronising the work.
    #[track_caller]
    pub fn read(&self) -> Vec<u32> {
        // SAFETY: the context is borrowed for 'a, which outlives `self`.
        unsafe { read_u32s_in(self.ctx, self.ptr, self.len) }
    }

    /// Reads element `i` now.
    #[track_caller]
    pub fn get(&self, i: usize) -> u32 {
        // SAFETY: the context is borrowed for 'a, which outlives `self`.
        let v = unsafe { read_u32s_in(self.ctx, self.at(i), 1) };
        v[0]
    }
}

impl Drop for DeviceBuffer<'_> {
    fn drop(&mut self) {
        // SAFETY: the context is borrowed for 'a, which outlives `self`.
        let _bound = unsafe { bind_raw(self.ctx) };
        // SAFETY: allocated by this value, freed once, with its context bound.
        let rc = unsafe { sys::cuMemFree(self.ptr) };
        if !std::thread::panicking() {
            check(rc, "cuMemFree");
        }
    }
}

/// Host time since just before GPU work that takes at least `min` was enqueued. While less than
/// half of `min` has passed on the host, the work cannot have finished, so an observation made
/// before [`Window::open`] returns true that says "done" is a real failure; an observation made
/// later proves nothing either way (the host was descheduled) and is only reported.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    start: Instant,
    min: Duration,
}

impl Window {
    /// Starts the window; call it right before enqueueing the work.
    pub fn start(min: Duration) -> Window {
        Window {
            start: Instant::now(),
            min,
        }
    }

    /// Whether the work enqueued after [`Window::start`] surely has not finished yet.
    pub fn open(&self) -> bool {
        self.start.elapsed() < self.min / 2
    }

    /// Host time since the start.
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// Asserts `pending` if the observation just made fell inside the window, else reports it.
    #[track_caller]
    pub fn assert_pending(&self, pending: bool, what: &str) {
        if self.open() {
            assert!(pending, "{what}: reported done while the work surely runs");
        } else {
            eprintln!(
                "note: {what}: observed after {:?} (window {:?}), pending={pending}: not checked",
                self.elapsed(),
                self.min / 2
            );
        }
    }
}

/// The process's resident set size in bytes (`VmRSS` of `/proc/self/status`).
pub fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS line");
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("VmRSS value");
    kb * 1024
}

/// Free and total device memory of `ctx`'s device (`cuMemGetInfo`, symbol `cuMemGetInfo_v2`).
#[track_caller]
pub fn device_memory<C: HasContext + ?Sized>(ctx: &C) -> (usize, usize) {
    let _bound = bind(ctx);
    let (mut free, mut total) = (0, 0);
    // SAFETY: both are valid out-pointers; the context is current.
    check(
        unsafe { sys::cuMemGetInfo(&mut free, &mut total) },
        "cuMemGetInfo",
    );
    (free, total)
}

/// Mebibytes, for printing.
pub fn mib(bytes: i128) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}
