//! A C ABI over `cuda-stream`, for proving interop with PyTorch, CuPy and cuda.core from Python
//! (`tests/interop/test_interop.py` loads it with ctypes).
//!
//! Every function borrows the caller's stream handle as a [`Stream<'_>`](cuda_stream::Stream)
//! through [`Stream::borrow_raw`] for the duration of the call and enqueues real GPU work on it,
//! or hands a Rust-owned stream to the caller.
//!
//! ```c
//! int32_t csi_fill_u32(uintptr_t stream, uint64_t dptr, uint64_t n, uint32_t value);
//! int32_t csi_add_u32(uintptr_t stream, uint64_t dptr, uint64_t n, uint32_t addend);
//! int32_t csi_record_event(uintptr_t stream, uintptr_t *event_out);
//! int32_t csi_destroy_event(uintptr_t event);
//! int32_t csi_wait_event(uintptr_t stream, uintptr_t event);
//! int32_t csi_stream_device(uintptr_t stream, int32_t *device_out);
//! int32_t csi_stream_create(int32_t device, uintptr_t *handle_out);
//! int32_t csi_stream_wait_and_check(uintptr_t handle, uint64_t dptr, uint64_t n, uint32_t expected);
//! int32_t csi_stream_destroy(uintptr_t handle);
//! int32_t csi_capture_status(uintptr_t stream, int32_t *status_out, uint64_t *id_out);
//! int32_t csi_capture_add_and_count(uintptr_t stream, uint64_t dptr, uint64_t n, uint32_t addend);
//! uint64_t csi_host_fn_runs(void);
//! uint64_t csi_host_fns_alive(void);
//! const char *csi_last_error(void);
//! ```
//!
//! The capture entry points serve a framework's graph capture (`with torch.cuda.graph(g):`):
//! `csi_capture_status` reports the stream's status (0 none, 1 active, 2 invalidated) from the
//! handle; `csi_capture_add_and_count` enqueues, into the capture the stream is part of, the add
//! kernel and a host function that counts its runs (`csi_host_fn_runs`, process-wide) on every
//! replay. `csi_host_fns_alive` counts those host functions not yet freed: the framework's graph
//! owns them, and frees them when it is destroyed.
//!
//! A stream handle of 0x0, 0x1 or 0x2 (what `torch.cuda.current_stream().cuda_stream` gives for
//! PyTorch's default stream) names a default stream of the context current on the calling
//! thread, which must be a primary context.
//!
//! Every function returns 0 on success; otherwise the `CUresult` of a failed driver call
//! (positive) or one of the negative `CSI_ERR_*` codes, and [`csi_last_error`] describes it.

use std::cell::RefCell;
use std::ffi::{CString, c_char, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use cuda_stream::{CaptureStatus, Context, Enqueue, Error, OwnedStream, Stream};
use cuda_sys as sys;

/// No usable CUDA driver, or the driver lacks a function this call needs.
pub const CSI_ERR_NO_DRIVER: i32 = -1;
/// A null out-pointer or an argument out of range.
pub const CSI_ERR_INVALID_ARGUMENT: i32 = -2;
/// A default-stream value (0x0, 0x1, 0x2) with no context current on the thread, or a stream of
/// a context that is not its device's primary context.
pub const CSI_ERR_CONTEXT: i32 = -3;
/// `csi_stream_wait_and_check` / `csi_stream_destroy` got a handle `csi_stream_create` did not
/// return (or one already destroyed).
pub const CSI_ERR_UNKNOWN_HANDLE: i32 = -4;
/// `csi_stream_wait_and_check` found elements that differ from the expected value.
pub const CSI_ERR_MISMATCH: i32 = -5;
/// A panic inside the library (caught at the boundary).
pub const CSI_ERR_PANIC: i32 = -6;
/// Any other error of `cuda-stream`.
pub const CSI_ERR_OTHER: i32 = -7;
/// `csi_capture_add_and_count` on a stream that is not being captured.
pub const CSI_ERR_NOT_CAPTURING: i32 = -8;

/// A failed call: the code returned across the ABI and the message `csi_last_error` gives.
#[derive(Debug)]
struct Fail {
    code: i32,
    message: String,
}

impl Fail {
    fn new(code: i32, message: impl Into<String>) -> Fail {
        Fail {
            code,
            message: message.into(),
        }
    }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        let code = match &e {
            Error::Driver { code, .. } => code.0.0 as i32,
            Error::Load(_) | Error::Unsupported { .. } => CSI_ERR_NO_DRIVER,
            Error::SpecialHandle { .. } | Error::NullHandle { .. } | Error::NoSuchDevice { .. } => {
                CSI_ERR_INVALID_ARGUMENT
            }
            Error::ContextMismatch { .. } => CSI_ERR_CONTEXT,
            Error::NotCapturing { .. } => CSI_ERR_NOT_CAPTURING,
            _ => CSI_ERR_OTHER,
        };
        // The whole chain: `no usable CUDA driver: no CUDA driver library could be loaded; ...`.
        let mut message = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            message.push_str(": ");
            message.push_str(&s.to_string());
            source = s.source();
        }
        Fail::new(code, message)
    }
}

/// `Ok` for `CUDA_SUCCESS`, else the code and the driver's name and description of it.
fn check(rc: sys::CUresult, call: &str) -> Result<(), Fail> {
    if rc == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Fail::new(
            rc.0 as i32,
            format!(
                "{call}: {} ({})",
                sys::result_name(rc),
                sys::result_description(rc)
            ),
        ))
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: &str) {
    let c = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

/// Runs one ABI call: 0 on success, else the failure's code with its message stored for
/// `csi_last_error`. A panic never unwinds into the C caller.
fn ffi_call(f: impl FnOnce() -> Result<(), Fail>) -> i32 {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => {
            set_last_error("");
            0
        }
        Ok(Err(fail)) => {
            set_last_error(&fail.message);
            fail.code
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic payload".to_owned());
            set_last_error(&format!("panic in cuda-stream-interop: {what}"));
            CSI_ERR_PANIC
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Borrows `handle` as a `Stream<'_>` for the duration of `f`.
///
/// # Safety
/// `handle` must be 0x0, 0x1, 0x2 or a live stream handle that stays live until this returns.
unsafe fn with_stream<R>(
    handle: usize,
    f: impl FnOnce(Stream<'_>) -> Result<R, Fail>,
) -> Result<R, Fail> {
    if handle <= 2 {
        // A default stream of whatever context the caller's thread has current.
        let current = cuda_stream::current_context_raw()?;
        if current.is_null() {
            return Err(Fail::new(
                CSI_ERR_CONTEXT,
                format!(
                    "stream {handle:#x} names a default stream of the current context, \
                     but no context is current on this thread"
                ),
            ));
        }
        let ctx = Context::retain_if_primary(current)?.ok_or_else(|| {
            Fail::new(
                CSI_ERR_CONTEXT,
                format!(
                    "stream {handle:#x} names a default stream of the current context, \
                     which is not a primary context"
                ),
            )
        })?;
        let stream = match handle {
            0 => ctx.null_stream(),
            1 => ctx.legacy_stream(),
            _ => ctx.per_thread_stream(),
        };
        return f(stream);
    }
    // The caller keeps the stream alive for this call; `call` stands for that call.
    let call = ();
    // SAFETY: the caller promises `handle` is a live stream until this function returns, and the
    // view cannot outlive `call`, a local of this function.
    let stream = unsafe { Stream::borrow_raw(handle as sys::CUstream, &call) }?;
    f(stream)
}

/// The primary context that `stream` belongs to, retained.
fn primary_context_of(stream: Stream<'_>) -> Result<Context, Fail> {
    Context::retain_if_primary(stream.context_raw())?.ok_or_else(|| {
        Fail::new(
            CSI_ERR_CONTEXT,
            "the stream's context is not its device's primary context",
        )
    })
}

/// Writes through `out` if it is not null.
///
/// # Safety
/// `out` must be null or valid for a write of `T`.
unsafe fn write_out<T>(out: *mut T, value: T, what: &str) -> Result<(), Fail> {
    if out.is_null() {
        return Err(Fail::new(
            CSI_ERR_INVALID_ARGUMENT,
            format!("{what} is a null pointer"),
        ));
    }
    // SAFETY: `out` is not null and the caller promises it is valid for a write.
    unsafe { out.write(value) };
    Ok(())
}

/// `add_u32(ptr, n, addend)`: `ptr[i] += addend` for every `i < n`, in a grid-stride loop. The
/// read of `ptr[i]` is what proves ordering: it sees what the framework wrote before.
const ADD_PTX: &str = r#"
.visible .entry add_u32(
    .param .u64 p_ptr,
    .param .u64 p_n,
    .param .u32 p_addend
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<10>;

    ld.param.u64 %rd1, [p_ptr];
    ld.param.u64 %rd2, [p_n];
    ld.param.u32 %r1, [p_addend];
    cvta.to.global.u64 %rd1, %rd1;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mov.u32 %r5, %nctaid.x;
    mul.wide.u32 %rd3, %r2, %r3;
    cvt.u64.u32 %rd4, %r4;
    add.u64 %rd3, %rd3, %rd4;
    mul.wide.u32 %rd5, %r5, %r3;
LOOP:
    setp.ge.u64 %p1, %rd3, %rd2;
    @%p1 bra DONE;
    shl.b64 %rd6, %rd3, 2;
    add.u64 %rd7, %rd1, %rd6;
    ld.global.u32 %r6, [%rd7];
    add.u32 %r6, %r6, %r1;
    st.global.u32 [%rd7], %r6;
    add.u64 %rd3, %rd3, %rd5;
    bra.uni LOOP;
DONE:
    ret;
}
"#;

/// PTX headers tried in order: the brief's `sm_50` first; newer targets in case a driver no
/// longer JIT-compiles PTX written for Maxwell.
const PTX_HEADERS: [&str; 3] = [
    ".version 7.0\n.target sm_50\n.address_size 64\n",
    ".version 7.0\n.target sm_75\n.address_size 64\n",
    ".version 7.8\n.target sm_90\n.address_size 64\n",
];

/// The kernel loaded in one context. The `Context` keeps the (primary) context retained, so the
/// module stays valid for the life of the process.
struct LoadedKernel {
    ctx: Context,
    // CUmodule and CUfunction, stored as addresses: driver handles usable from any thread.
    _module: usize,
    function: usize,
}

static KERNELS: Mutex<Vec<LoadedKernel>> = Mutex::new(Vec::new());

/// The `add_u32` function in `ctx`, loading the module on first use. `ctx` must be current.
fn add_kernel(ctx: &Context) -> Result<sys::CUfunction, Fail> {
    let mut kernels = lock(&KERNELS);
    if let Some(k) = kernels.iter().find(|k| k.ctx == *ctx) {
        return Ok(k.function as sys::CUfunction);
    }
    let mut failures = Vec::new();
    for header in PTX_HEADERS {
        let image = CString::new(format!("{header}{ADD_PTX}"))
            .map_err(|e| Fail::new(CSI_ERR_OTHER, e.to_string()))?;
        let mut log = vec![0u8; 8192];
        let mut options = [
            sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
            sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
        ];
        // The driver reads option values as pointer-sized words: a buffer, then its size.
        let mut values = [log.as_mut_ptr().cast::<c_void>(), log.len() as *mut c_void];
        let mut module = ptr::null_mut();
        // SAFETY: `image` is a NUL-terminated PTX string; the option arrays have 2 entries each,
        // the log buffer is writable for the size passed; `module` is a valid out-pointer; the
        // caller made `ctx` current.
        let rc = unsafe {
            sys::cuModuleLoadDataEx(
                &mut module,
                image.as_ptr().cast(),
                options.len() as u32,
                options.as_mut_ptr(),
                values.as_mut_ptr(),
            )
        };
        if rc != sys::CUresult::CUDA_SUCCESS {
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            failures.push(format!(
                "[{}] {}: {}",
                header.replace('\n', " ").trim(),
                sys::result_name(rc),
                String::from_utf8_lossy(&log[..end]).trim()
            ));
            continue;
        }
        let mut function = ptr::null_mut();
        // SAFETY: `module` was just loaded; the name is NUL-terminated; `function` is a valid
        // out-pointer.
        let rc = unsafe { sys::cuModuleGetFunction(&mut function, module, c"add_u32".as_ptr()) };
        check(rc, "cuModuleGetFunction")?;
        kernels.push(LoadedKernel {
            ctx: ctx.clone(),
            _module: module as usize,
            function: function as usize,
        });
        return Ok(function);
    }
    Err(Fail::new(
        CSI_ERR_OTHER,
        format!(
            "cuModuleLoadDataEx failed for every PTX target: {}",
            failures.join("; ")
        ),
    ))
}

fn element_count(n: u64) -> Result<usize, Fail> {
    usize::try_from(n)
        .ok()
        .filter(|n| n.checked_mul(4).is_some())
        .ok_or_else(|| {
            Fail::new(
                CSI_ERR_INVALID_ARGUMENT,
                format!("{n} elements is too many"),
            )
        })
}

/// Fills `n` 32-bit words at `dptr` with `value` (`cuMemsetD32Async`), ordered on `stream`.
///
/// # Safety
/// `stream` must be 0x0/0x1/0x2 (a default stream of the thread's current primary context) or a
/// live stream handle that stays live during the call; `dptr` must be device memory of that
/// stream's context, 4-byte aligned, writable for `n` words until the memset has run.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn csi_fill_u32(stream: usize, dptr: u64, n: u64, value: u32) -> i32 {
    ffi_call(|| {
        let n = element_count(n)?;
        let work = |s: Stream<'_>| {
            if n == 0 {
                return Ok(());
            }
            let ctx = primary_context_of(s)?;
            // The memset is enqueued on `s`, but it is safest with its context current.
            let _bound = ctx.bind()?;
            // SAFETY: `s` is live for this call; the caller vouches for `dptr` and `n`.
            let rc = unsafe { sys::cuMemsetD32Async(dptr, value, n, s.raw()) };
            check(rc, "cuMemsetD32Async")
        };
        // SAFETY: the caller's contract on `stream`.
        unsafe { with_stream(stream, work) }
    })
}

/// Adds `addend` to each of `n` 32-bit words at `dptr` with a PTX kernel launched on `stream`:
/// the kernel reads what work enqueued earlier on `stream` wrote.
///
/// # Safety
/// As [`csi_fill_u32`]; the memory must also be readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn csi_add_u32(stream: usize, dptr: u64, n: u64, addend: u32) -> i32 {
    ffi_call(|| {
        let n = element_count(n)?;
        let work = |s: Stream<'_>| {
            if n == 0 {
                return Ok(());
            }
            let ctx = primary_context_of(s)?;
            // SAFETY: `s` is live for this call; the caller vouches for the memory.
            unsafe { launch_add(&ctx, s, dptr, n, addend) }
        };
        // SAFETY: the caller's contract on `stream`.
        unsafe { with_stream(stream, work) }
    })
}

/// Enqueues the add kernel over `n` words at `dptr` on `stream` (a stream, or a capture's view)
/// of `ctx`, loading the module first if needed.
///
/// # Safety
/// `stream` must be live for the call; `dptr` device memory of `ctx`, readable and writable for
/// `n` words until the kernel has run (for a capture: on every replay).
unsafe fn launch_add(
    ctx: &Context,
    stream: impl Enqueue,
    dptr: u64,
    n: usize,
    addend: u32,
) -> Result<(), Fail> {
    let _bound = ctx.bind()?;
    let function = add_kernel(ctx)?;
    const THREADS: u64 = 256;
    let blocks = (n as u64).div_ceil(THREADS).min(1 << 20) as u32;
    let (mut p_ptr, mut p_n, mut p_addend) = (dptr, n as u64, addend);
    let mut params: [*mut c_void; 3] = [
        ptr::from_mut(&mut p_ptr).cast(),
        ptr::from_mut(&mut p_n).cast(),
        ptr::from_mut(&mut p_addend).cast(),
    ];
    let (raw, _) = stream.enqueue_handle();
    // SAFETY: `function` belongs to `ctx`, which is current and is the stream's context;
    // `params` points at three live values matching the kernel's (u64, u64, u32) parameters
    // (the driver copies them at the launch, or into the graph node); the caller vouches for
    // the stream and the memory.
    let rc = unsafe {
        sys::cuLaunchKernel(
            function,
            blocks,
            1,
            1,
            THREADS as u32,
            1,
            1,
            0,
            raw,
            params.as_mut_ptr(),
            ptr::null_mut(),
        )
    };
    check(rc, "cuLaunchKernel")
}

/// Runs of the host functions `csi_capture_add_and_count` captured, over every replay.
static HOST_FN_RUNS: AtomicU64 = AtomicU64::new(0);
/// Those host functions not yet freed.
static HOST_FNS_ALIVE: AtomicU64 = AtomicU64::new(0);

/// Owned by each captured host function: counts it alive until it is freed.
struct Alive;

impl Alive {
    fn new() -> Alive {
        HOST_FNS_ALIVE.fetch_add(1, Ordering::SeqCst);
        Alive
    }
}

impl Drop for Alive {
    fn drop(&mut self) {
        HOST_FNS_ALIVE.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Writes the capture status of `stream` (0 none, 1 active, 2 invalidated) and, for a capture,
/// its id (else 0), as the driver reports them for the handle (`cuStreamGetCaptureInfo`).
///
/// # Safety
/// `stream` as in [`csi_fill_u32`]; `status_out` and `id_out` must each be null (an error) or
/// valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn csi_capture_status(
    stream: usize,
    status_out: *mut i32,
    id_out: *mut u64,
) -> i32 {
    ffi_call(|| {
        if status_out.is_null() || id_out.is_null() {
            return Err(Fail::new(
                CSI_ERR_INVALID_ARGUMENT,
                "status_out or id_out is a null pointer",
            ));
        }
        // SAFETY: the caller's contract on `stream`.
        let status = unsafe { with_stream(stream, |s| Ok(s.capture_status()?)) }?;
        let (code, id) = match status {
            CaptureStatus::None => (0, 0),
            CaptureStatus::Active { id } => (1, id),
            CaptureStatus::Invalidated { id } => (2, id),
        };
        // SAFETY: both are non-null and the caller promises they are writable.
        unsafe {
            write_out(status_out, code, "status_out")?;
            write_out(id_out, id, "id_out")
        }
    })
}

/// Enqueues, into the capture `stream` is part of (begun by the framework, such as PyTorch's
/// `torch.cuda.graph`), the add kernel over `n` words at `dptr` and then a host function that
/// counts its runs: both run on every replay of the framework's graph, which owns the host
/// function. `CSI_ERR_NOT_CAPTURING` if the stream is not being captured.
///
/// # Safety
/// `stream` as in [`csi_fill_u32`]; `dptr` must be device memory of the stream's context,
/// readable and writable for `n` words for as long as the graph can be replayed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn csi_capture_add_and_count(
    stream: usize,
    dptr: u64,
    n: u64,
    addend: u32,
) -> i32 {
    ffi_call(|| {
        let n = element_count(n)?;
        let work = |s: Stream<'_>| {
            let ctx = primary_context_of(s)?;
            s.in_capture(|cap| {
                if n > 0 {
                    // SAFETY: the capture's stream is live for this call; the caller vouches
                    // for the memory on every replay.
                    if let Err(fail) = unsafe { launch_add(&ctx, cap, dptr, n, addend) } {
                        return Ok(Err(fail));
                    }
                }
                let alive = Alive::new();
                cap.launch_host_func(move || {
                    let _alive = &alive;
                    HOST_FN_RUNS.fetch_add(1, Ordering::SeqCst);
                })?;
                Ok(Ok(()))
            })?
        };
        // SAFETY: the caller's contract on `stream`.
        unsafe { with_stream(stream, work) }
    })
}

/// How many times the host functions of `csi_capture_add_and_count` have run.
#[unsafe(no_mangle)]
pub extern "C" fn csi_host_fn_runs() -> u64 {
    HOST_FN_RUNS.load(Ordering::SeqCst)
}

/// How many host functions of `csi_capture_add_and_count` are not yet freed.
#[unsafe(no_mangle)]
pub extern "C" fn csi_host_fns_alive() -> u64 {
    HOST_FNS_ALIVE.load(Ordering::SeqCst)
}

/// Records a new event (timing disabled) on `stream` after the work enqueued so far and writes
/// its handle to `event_out`; the caller destroys it with [`csi_destroy_event`].
///
/// # Safety
/// `stream` as in [`csi_fill_u32`]; `event_out` must be null (an error) or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn csi_record_event(stream: usize, event_out: *mut usize) -> i32 {
    ffi_call(|| {
        if event_out.is_null() {
            return Err(Fail::new(
                CSI_ERR_INVALID_ARGUMENT,
                "event_out is a null pointer",
            ));
        }
        // SAFETY: the caller's contract on `stream`.
        let event = unsafe { with_stream(stream, |s| Ok(s.record_event()?)) }?;
        let raw = event.into_raw() as usize;
        // SAFETY: `event_out` is not null and the caller promises it is writable.
        unsafe { write_out(event_out, raw, "event_out") }
    })
}

/// Destroys an event from [`csi_record_event`] (`cuEventDestroy`). Work already waiting on it is
/// unaffected.
///
/// # Safety
/// `event` must be a live event handle that nothing uses after this call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn csi_destroy_event(event: usize) -> i32 {
    ffi_call(|| {
        if event == 0 {
            return Err(Fail::new(CSI_ERR_INVALID_ARGUMENT, "null event handle"));
        }
        // SAFETY: the caller hands over a live event it no longer uses.
        let rc = unsafe { sys::cuEventDestroy(event as sys::CUevent) };
        check(rc, "cuEventDestroy")
    })
}

/// Makes work enqueued on `stream` from now on wait for `event` (`cuStreamWaitEvent`).
///
/// # Safety
/// `stream` as in [`csi_fill_u32`]; `event` must be a live event handle during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn csi_wait_event(stream: usize, event: usize) -> i32 {
    ffi_call(|| {
        if event == 0 {
            return Err(Fail::new(CSI_ERR_INVALID_ARGUMENT, "null event handle"));
        }
        let work = |s: Stream<'_>| {
            // SAFETY: the caller promises `event` is live during the call.
            unsafe { s.wait_event_raw(event as sys::CUevent) }?;
            Ok(())
        };
        // SAFETY: the caller's contract on `stream`.
        unsafe { with_stream(stream, work) }
    })
}

/// Writes the ordinal of the device `stream`'s work runs on, as discovered from the handle.
///
/// # Safety
/// `stream` as in [`csi_fill_u32`]; `device_out` must be null (an error) or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn csi_stream_device(stream: usize, device_out: *mut i32) -> i32 {
    ffi_call(|| {
        if device_out.is_null() {
            return Err(Fail::new(
                CSI_ERR_INVALID_ARGUMENT,
                "device_out is a null pointer",
            ));
        }
        // SAFETY: the caller's contract on `stream`.
        let device = unsafe { with_stream(stream, |s| Ok(s.device()?.raw())) }?;
        // SAFETY: `device_out` is not null and the caller promises it is writable.
        unsafe { write_out(device_out, device, "device_out") }
    })
}

/// Streams created by `csi_stream_create` and not yet destroyed.
static OWNED: Mutex<Vec<Arc<OwnedStream>>> = Mutex::new(Vec::new());

fn find_owned(handle: usize) -> Result<Arc<OwnedStream>, Fail> {
    lock(&OWNED)
        .iter()
        .find(|s| s.raw() as usize == handle)
        .cloned()
        .ok_or_else(|| {
            Fail::new(
                CSI_ERR_UNKNOWN_HANDLE,
                format!(
                    "{handle:#x} is not a stream csi_stream_create returned (or it was destroyed)"
                ),
            )
        })
}

/// Creates a non-blocking Rust-owned stream in device `device`'s primary context and writes its
/// raw handle to `handle_out`, for a framework to borrow. It lives until [`csi_stream_destroy`].
///
/// # Safety
/// `handle_out` must be null (an error) or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn csi_stream_create(device: i32, handle_out: *mut usize) -> i32 {
    ffi_call(|| {
        if handle_out.is_null() {
            return Err(Fail::new(
                CSI_ERR_INVALID_ARGUMENT,
                "handle_out is a null pointer",
            ));
        }
        let ordinal = usize::try_from(device).map_err(|_| {
            Fail::new(
                CSI_ERR_INVALID_ARGUMENT,
                format!("device {device} is negative"),
            )
        })?;
        let ctx = Context::primary(ordinal)?;
        let stream = Arc::new(ctx.new_stream()?);
        let handle = stream.raw() as usize;
        lock(&OWNED).push(stream);
        // SAFETY: `handle_out` is not null and the caller promises it is writable.
        unsafe { write_out(handle_out, handle, "handle_out") }
    })
}

/// Waits for all work enqueued on the Rust-owned stream `handle` (by anyone, such as a framework
/// that borrowed it), then copies `n` 32-bit words from `dptr` to the host and checks that each
/// equals `expected`: 0 if all do, `CSI_ERR_MISMATCH` (with the first differences in
/// `csi_last_error`) otherwise.
///
/// # Safety
/// `dptr` must be device memory readable for `n` words, accessible from the stream's context.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn csi_stream_wait_and_check(
    handle: usize,
    dptr: u64,
    n: u64,
    expected: u32,
) -> i32 {
    ffi_call(|| {
        let n = element_count(n)?;
        let stream = find_owned(handle)?;
        stream.synchronize()?;
        if n == 0 {
            return Ok(());
        }
        let mut host = vec![0u32; n];
        {
            let _bound = stream.context().bind()?;
            // SAFETY: `host` is writable for `4 * n` bytes; the caller vouches for `dptr`; the
            // stream's context is current.
            let rc = unsafe { sys::cuMemcpyDtoH(host.as_mut_ptr().cast(), dptr, 4 * n) };
            check(rc, "cuMemcpyDtoH")?;
        }
        let mut wrong = host
            .iter()
            .enumerate()
            .filter(|&(_, &v)| v != expected)
            .peekable();
        if wrong.peek().is_none() {
            return Ok(());
        }
        let first: Vec<String> = wrong
            .clone()
            .take(4)
            .map(|(i, v)| format!("[{i}] = {v}"))
            .collect();
        let count = wrong.count();
        Err(Fail::new(
            CSI_ERR_MISMATCH,
            format!(
                "{count} of {n} elements differ from {expected}: {}",
                first.join(", ")
            ),
        ))
    })
}

/// Destroys a stream from [`csi_stream_create`] (`cuStreamDestroy`); work already enqueued still
/// completes.
///
/// # Safety
/// No framework may use the handle after this call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn csi_stream_destroy(handle: usize) -> i32 {
    ffi_call(|| {
        let stream = {
            let mut owned = lock(&OWNED);
            let i = owned
                .iter()
                .position(|s| s.raw() as usize == handle)
                .ok_or_else(|| {
                    Fail::new(
                        CSI_ERR_UNKNOWN_HANDLE,
                        format!("{handle:#x} is not a stream csi_stream_create returned"),
                    )
                })?;
            owned.swap_remove(i)
        };
        match Arc::try_unwrap(stream) {
            Ok(stream) => Ok(stream.close()?),
            // Another thread is mid-call with it: the last clone to drop destroys it.
            Err(_) => Ok(()),
        }
    })
}

/// The message of the calling thread's last failed call ("" after a successful one). The string
/// is valid until the thread's next call into this library.
#[unsafe(no_mangle)]
pub extern "C" fn csi_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last_error() -> String {
        // SAFETY: `csi_last_error` returns a live NUL-terminated string owned by this thread.
        unsafe { std::ffi::CStr::from_ptr(csi_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn unknown_rust_handle_is_rejected_without_touching_the_driver() {
        // SAFETY: an unknown handle is looked up in the registry only.
        let rc = unsafe { csi_stream_wait_and_check(0xdead_beef, 0, 0, 0) };
        assert_eq!(rc, CSI_ERR_UNKNOWN_HANDLE);
        assert!(last_error().contains("0xdeadbeef"), "{}", last_error());
        // SAFETY: as above.
        let rc = unsafe { csi_stream_destroy(0xdead_beef) };
        assert_eq!(rc, CSI_ERR_UNKNOWN_HANDLE);
    }

    #[test]
    fn null_out_pointers_are_rejected() {
        // SAFETY: a null out-pointer is checked before the stream is touched.
        let rc = unsafe { csi_record_event(0x1234, ptr::null_mut()) };
        assert_eq!(rc, CSI_ERR_INVALID_ARGUMENT);
        assert!(last_error().contains("event_out"), "{}", last_error());
        // SAFETY: as above.
        let rc = unsafe { csi_stream_device(0x1234, ptr::null_mut()) };
        assert_eq!(rc, CSI_ERR_INVALID_ARGUMENT);
        // SAFETY: as above.
        let rc = unsafe { csi_stream_create(0, ptr::null_mut()) };
        assert_eq!(rc, CSI_ERR_INVALID_ARGUMENT);
        // SAFETY: as above.
        let rc = unsafe { csi_capture_status(0x1234, ptr::null_mut(), ptr::null_mut()) };
        assert_eq!(rc, CSI_ERR_INVALID_ARGUMENT);
        // SAFETY: a null event is rejected before the driver is called.
        let rc = unsafe { csi_destroy_event(0) };
        assert_eq!(rc, CSI_ERR_INVALID_ARGUMENT);
        // SAFETY: as above.
        let rc = unsafe { csi_wait_event(0x1234, 0) };
        assert_eq!(rc, CSI_ERR_INVALID_ARGUMENT);
    }

    #[test]
    fn success_clears_the_last_error() {
        // SAFETY: unknown handle, registry only.
        unsafe { csi_stream_destroy(1) };
        assert!(!last_error().is_empty());
        let mut h = 0usize;
        // SAFETY: `h` is writable; with no driver this fails cleanly.
        let rc = unsafe { csi_stream_create(0, &mut h) };
        if rc != 0 {
            eprintln!("skipped: no CUDA device: {}", last_error());
            return;
        }
        assert_eq!(last_error(), "");
        // SAFETY: `h` came from csi_stream_create.
        assert_eq!(unsafe { csi_stream_destroy(h) }, 0);
    }
}
