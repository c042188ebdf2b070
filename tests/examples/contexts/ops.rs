//! The operations of the first part: each enqueued on a stream of a target context with no
//! context, another context or the stream's own current; the table of their answers.

use std::ffi::c_void;
use std::ptr;

use cuda_stream_sys::{self as sys, CUcontext, CUdeviceptr, CUresult, CUstream};

use crate::{OK, current, name, ok, set_current};

pub(crate) const PTX: &str = r#"
.version 7.0
.target sm_52
.address_size 64
.visible .entry store(
	.param .u64 store_param_0,
	.param .u32 store_param_1
)
{
	.reg .b32 	%r<2>;
	.reg .b64 	%rd<3>;
	ld.param.u64 	%rd1, [store_param_0];
	ld.param.u32 	%r1, [store_param_1];
	cvta.to.global.u64 	%rd2, %rd1;
	st.global.u32 	[%rd2], %r1;
	ret;
}
.visible .entry copy_u32(
	.param .u64 copy_param_0,
	.param .u64 copy_param_1
)
{
	.reg .b32 	%r<2>;
	.reg .b64 	%rd<5>;
	ld.param.u64 	%rd1, [copy_param_0];
	ld.param.u64 	%rd2, [copy_param_1];
	cvta.to.global.u64 	%rd3, %rd1;
	cvta.to.global.u64 	%rd4, %rd2;
	ld.global.u32 	%r1, [%rd4];
	st.global.u32 	[%rd3], %r1;
	ret;
}
"#;

/// What a stream of `ctx` needs for the operations: made with `ctx` current, which is undone.
pub(crate) struct Target {
    pub(crate) ctx: CUcontext,
    pub(crate) stream: CUstream,
    pub(crate) dev: std::ffi::c_int,
    pub(crate) d: CUdeviceptr,
    d2: CUdeviceptr,
    pinned: *mut c_void,
    event: sys::CUevent,
    store: sys::CUfunction,
}

pub(crate) const BIG: usize = 1 << 20;
const SMALL: usize = 4096;

impl Target {
    /// `pool`: the device memory comes from the device's default pool (stream-ordered), else
    /// from `cuMemAlloc`.
    pub(crate) fn new(ctx: CUcontext, pool: bool) -> Target {
        let before = current();
        set_current(ctx);
        let mut t = Target {
            ctx,
            stream: ptr::null_mut(),
            dev: 0,
            d: 0,
            d2: 0,
            pinned: ptr::null_mut(),
            event: ptr::null_mut(),
            store: ptr::null_mut(),
        };
        // SAFETY: out-pointers to fields of `t`; `ctx` is current.
        unsafe {
            ok(sys::cuCtxGetDevice(&mut t.dev), "cuCtxGetDevice");
            ok(sys::cuStreamCreate(&mut t.stream, 1), "cuStreamCreate");
            if pool {
                let mut p = ptr::null_mut();
                ok(
                    sys::cuDeviceGetDefaultMemPool(&mut p, t.dev),
                    "cuDeviceGetDefaultMemPool",
                );
                ok(
                    sys::cuMemAllocFromPoolAsync(&mut t.d, BIG, p, t.stream),
                    "cuMemAllocFromPoolAsync",
                );
                ok(
                    sys::cuMemAllocFromPoolAsync(&mut t.d2, BIG, p, t.stream),
                    "cuMemAllocFromPoolAsync",
                );
                ok(sys::cuStreamSynchronize(t.stream), "cuStreamSynchronize");
            } else {
                ok(sys::cuMemAlloc(&mut t.d, BIG), "cuMemAlloc");
                ok(sys::cuMemAlloc(&mut t.d2, BIG), "cuMemAlloc");
            }
            ok(sys::cuMemHostAlloc(&mut t.pinned, BIG, 0), "cuMemHostAlloc");
            ok(sys::cuEventCreate(&mut t.event, 2), "cuEventCreate");
            let mut m = ptr::null_mut();
            let src = std::ffi::CString::new(PTX).unwrap();
            ok(
                sys::cuModuleLoadData(&mut m, src.as_ptr().cast()),
                "cuModuleLoadData",
            );
            ok(
                sys::cuModuleGetFunction(&mut t.store, m, c"store".as_ptr()),
                "cuModuleGetFunction",
            );
        }
        set_current(before);
        t
    }
}

extern "C" fn host_noop(_: *mut c_void) {}

/// Each operation: its name and a function that enqueues it on the target's stream.
type Op = (&'static str, fn(&Target, &mut Vec<u8>) -> CUresult);

fn ops() -> Vec<Op> {
    vec![
        ("cuMemcpyHtoDAsync pageable 1 MiB", |t, h| {
            // SAFETY: the target's stream, allocations and event are live; `h` and the
            // pinned buffer hold BIG bytes; the stream is synchronised before they go.
            unsafe { sys::cuMemcpyHtoDAsync(t.d, h.as_ptr().cast(), BIG, t.stream) }
        }),
        ("cuMemcpyHtoDAsync pageable 4 KiB", |t, h| {
            // SAFETY: the target's stream, allocations and event are live; `h` and the
            // pinned buffer hold BIG bytes; the stream is synchronised before they go.
            unsafe { sys::cuMemcpyHtoDAsync(t.d, h.as_ptr().cast(), SMALL, t.stream) }
        }),
        ("cuMemcpyDtoHAsync pageable 1 MiB", |t, h| {
            // SAFETY: the target's stream, allocations and event are live; `h` and the
            // pinned buffer hold BIG bytes; the stream is synchronised before they go.
            unsafe { sys::cuMemcpyDtoHAsync(h.as_mut_ptr().cast(), t.d, BIG, t.stream) }
        }),
        ("cuMemcpyDtoHAsync pageable 4 KiB", |t, h| {
            // SAFETY: the target's stream, allocations and event are live; `h` and the
            // pinned buffer hold BIG bytes; the stream is synchronised before they go.
            unsafe { sys::cuMemcpyDtoHAsync(h.as_mut_ptr().cast(), t.d, SMALL, t.stream) }
        }),
        ("cuMemcpyHtoDAsync pinned", |t, _| {
            // SAFETY: the target's stream, allocations and event are live; `h` and the
            // pinned buffer hold BIG bytes; the stream is synchronised before they go.
            unsafe { sys::cuMemcpyHtoDAsync(t.d, t.pinned, BIG, t.stream) }
        }),
        ("cuMemcpyDtoHAsync pinned", |t, _| {
            // SAFETY: the target's stream, allocations and event are live; `h` and the
            // pinned buffer hold BIG bytes; the stream is synchronised before they go.
            unsafe { sys::cuMemcpyDtoHAsync(t.pinned, t.d, BIG, t.stream) }
        }),
        ("cuMemcpyAsync pageable to device", |t, h| {
            // SAFETY: the target's stream, allocations and event are live; `h` and the
            // pinned buffer hold BIG bytes; the stream is synchronised before they go.
            unsafe { sys::cuMemcpyAsync(t.d, h.as_ptr() as CUdeviceptr, BIG, t.stream) }
        }),
        ("cuMemcpyHtoD (synchronous)", |t, h| {
            // SAFETY: the target's stream, allocations and event are live; `h` and the
            // pinned buffer hold BIG bytes; the stream is synchronised before they go.
            unsafe { sys::cuMemcpyHtoD(t.d, h.as_ptr().cast(), BIG) }
        }),
        ("cuMemsetD8Async", |t, _| {
            // SAFETY: the target's stream, allocations and event are live; `h` and the
            // pinned buffer hold BIG bytes; the stream is synchronised before they go.
            unsafe { sys::cuMemsetD8Async(t.d, 7, BIG, t.stream) }
        }),
        ("cuMemsetD32Async", |t, _| {
            // SAFETY: the target's stream, allocations and event are live; `h` and the
            // pinned buffer hold BIG bytes; the stream is synchronised before they go.
            unsafe { sys::cuMemsetD32Async(t.d, 7, BIG / 4, t.stream) }
        }),
        ("cuMemcpyDtoDAsync", |t, _| {
            // SAFETY: the target's stream, allocations and event are live; `h` and the
            // pinned buffer hold BIG bytes; the stream is synchronised before they go.
            unsafe { sys::cuMemcpyDtoDAsync(t.d2, t.d, BIG, t.stream) }
        }),
        ("cuMemAllocAsync + cuMemFreeAsync", |t, _| {
            // SAFETY: the target's stream, allocations and event are live; `h` and the
            // pinned buffer hold BIG bytes; the stream is synchronised before they go.
            unsafe {
                let mut p = 0;
                let rc = sys::cuMemAllocAsync(&mut p, BIG, t.stream);
                if rc != OK {
                    return rc;
                }
                sys::cuMemFreeAsync(p, t.stream)
            }
        }),
        ("cuMemAllocFromPoolAsync (default pool)", |t, _| {
            // SAFETY: the target's stream, allocations and event are live; `h` and the
            // pinned buffer hold BIG bytes; the stream is synchronised before they go.
            unsafe {
                let mut pool = ptr::null_mut();
                let rc = sys::cuDeviceGetDefaultMemPool(&mut pool, t.dev);
                if rc != OK {
                    return rc;
                }
                let mut p = 0;
                let rc = sys::cuMemAllocFromPoolAsync(&mut p, BIG, pool, t.stream);
                if rc != OK {
                    return rc;
                }
                sys::cuMemFreeAsync(p, t.stream)
            }
        }),
        ("cuLaunchKernel", |t, _| {
            // SAFETY: the target's stream, allocations and event are live; `h` and the
            // pinned buffer hold BIG bytes; the stream is synchronised before they go.
            unsafe {
                let (mut p, mut v) = (t.d, 5u32);
                let mut args = [
                    (&mut p as *mut CUdeviceptr).cast::<c_void>(),
                    (&mut v as *mut u32).cast::<c_void>(),
                ];
                sys::cuLaunchKernel(
                    t.store,
                    1,
                    1,
                    1,
                    1,
                    1,
                    1,
                    0,
                    t.stream,
                    args.as_mut_ptr(),
                    ptr::null_mut(),
                )
            }
        }),
        ("cuEventRecord + cuStreamWaitEvent", |t, _| {
            // SAFETY: the target's stream, allocations and event are live; `h` and the
            // pinned buffer hold BIG bytes; the stream is synchronised before they go.
            unsafe {
                let rc = sys::cuEventRecord(t.event, t.stream);
                if rc != OK {
                    return rc;
                }
                sys::cuStreamWaitEvent(t.stream, t.event, 0)
            }
        }),
        ("cuLaunchHostFunc", |t, _| {
            // SAFETY: the target's stream, allocations and event are live; `h` and the
            // pinned buffer hold BIG bytes; the stream is synchronised before they go.
            unsafe { sys::cuLaunchHostFunc(t.stream, Some(host_noop), ptr::null_mut()) }
        }),
        ("capture of a memset, instantiate, launch", |t, _| {
            // SAFETY: the target's stream, allocations and event are live; `h` and the
            // pinned buffer hold BIG bytes; the stream is synchronised before they go.
            unsafe {
                let rc = sys::cuStreamBeginCapture(
                    t.stream,
                    sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                );
                if rc != OK {
                    return rc;
                }
                let rc1 = sys::cuMemsetD8Async(t.d, 3, BIG, t.stream);
                let mut g = ptr::null_mut();
                let rc2 = sys::cuStreamEndCapture(t.stream, &mut g);
                if rc1 != OK {
                    return rc1;
                }
                if rc2 != OK {
                    return rc2;
                }
                let mut e = ptr::null_mut();
                let rc = sys::cuGraphInstantiate(&mut e, g, 0);
                sys::cuGraphDestroy(g);
                if rc != OK {
                    return rc;
                }
                let rc = sys::cuGraphLaunch(e, t.stream);
                sys::cuStreamSynchronize(t.stream);
                sys::cuGraphExecDestroy(e);
                rc
            }
        }),
        ("cuStreamQuery", |t, _| {
            // SAFETY: the target's stream, allocations and event are live; `h` and the
            // pinned buffer hold BIG bytes; the stream is synchronised before they go.
            unsafe { sys::cuStreamQuery(t.stream) }
        }),
    ]
}

/// Runs every operation on `target` with each of `states` current, and prints a table.
pub(crate) fn table(title: &str, target: &Target, states: &[(&str, CUcontext)]) {
    println!("\n{title}");
    print!("| operation |");
    for (s, _) in states {
        print!(" {s} |");
    }
    println!();
    print!("| --- |");
    for _ in states {
        print!(" --- |");
    }
    println!();
    let mut host = vec![1u8; BIG];
    for (op, f) in ops() {
        print!("| {op} |");
        for &(_, state) in states {
            set_current(state);
            let rc = f(target, &mut host);
            set_current(ptr::null_mut());
            // SAFETY: the target's stream is live.
            let sync = unsafe { sys::cuStreamSynchronize(target.stream) };
            if sync == OK {
                print!(" {} |", name(rc));
            } else {
                print!(" {} (then sync {}) |", name(rc), name(sync));
            }
        }
        println!();
    }
    set_current(ptr::null_mut());
}
