//! The GPU work the entry points enqueue on a borrowed stream: a fill (`cuMemsetD32Async`) and an
//! add, a PTX kernel loaded once per context.

use std::ffi::{CString, c_void};
use std::ptr;
use std::sync::Mutex;

use cuda_stream::{Context, Enqueue, Stream};
use cuda_stream_sys as sys;

use crate::args::element_count;
use crate::borrow::{primary_context_of, with_stream};
use crate::error::{CSI_ERR_OTHER, Fail, check, ffi_call};
use crate::lock;

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
pub(crate) unsafe fn launch_add(
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
