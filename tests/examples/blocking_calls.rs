//! `blocking_calls`: which stream-ordered driver calls wait, on the host, for a host function
//! queued on the legacy default stream? Each case queues a host function that sleeps 500 ms on
//! the legacy stream, then times one call on a stream (blocking, non-blocking, the legacy one),
//! from this thread, while the host function runs. A call that waited there, made under a lock
//! that the host function needs, would deadlock the program: the question behind the random
//! programs' seed 0x1c0, which hangs under memcheck (see tests/README.md, "Open"). Measured on two
//! H200 (driver 580), plainly and under memcheck: every call of the first six cases on a created
//! stream returned in 0.1 ms or less; the event-creation, push/pop and legacy-stream cases came
//! after that run.
//!
//! ```sh
//! gpu-bundle/bin/blocking_calls
//! compute-sanitizer --tool memcheck gpu-bundle/bin/blocking_calls
//! ```

use std::time::{Duration, Instant};

use cuda_stream_sys as sys;

extern "C" fn sleep_500ms(_: *mut std::ffi::c_void) {
    std::thread::sleep(Duration::from_millis(500));
}

fn ok(rc: sys::CUresult, what: &str) {
    assert_eq!(rc, sys::CUresult::CUDA_SUCCESS, "{what}");
}

fn main() {
    const LEGACY: sys::CUstream = 1 as sys::CUstream;
    // SAFETY: raw driver calls with valid out-pointers, each handle used while alive.
    unsafe {
        ok(sys::cuInit(0), "cuInit");
        let mut ctx = std::ptr::null_mut();
        ok(sys::cuDevicePrimaryCtxRetain(&mut ctx, 0), "retain");
        ok(sys::cuCtxPushCurrent(ctx), "push");
        let mut pool = std::ptr::null_mut();
        ok(sys::cuDeviceGetDefaultMemPool(&mut pool, 0), "pool");
        for (kind, flags) in [("blocking", 0), ("non-blocking", 1), ("legacy", u32::MAX)] {
            let mut s = LEGACY;
            if flags != u32::MAX {
                ok(sys::cuStreamCreate(&mut s, flags), "cuStreamCreate");
            }
            let mut ev = std::ptr::null_mut();
            ok(sys::cuEventCreate(&mut ev, 2), "cuEventCreate");
            let mut p = 0;
            ok(sys::cuMemAllocFromPoolAsync(&mut p, 1024, pool, s), "alloc");
            ok(sys::cuStreamSynchronize(s), "sync");
            let cases: [(&str, &dyn Fn() -> sys::CUresult); 8] = [
                ("cuEventCreate + cuEventDestroy", &|| {
                    let mut e = std::ptr::null_mut();
                    let rc = sys::cuEventCreate(&mut e, 2);
                    if rc != sys::CUresult::CUDA_SUCCESS {
                        return rc;
                    }
                    sys::cuEventDestroy(e)
                }),
                ("cuCtxPopCurrent + cuCtxPushCurrent", &|| {
                    let mut popped = std::ptr::null_mut();
                    let rc = sys::cuCtxPopCurrent(&mut popped);
                    if rc != sys::CUresult::CUDA_SUCCESS {
                        return rc;
                    }
                    sys::cuCtxPushCurrent(popped)
                }),
                ("cuStreamIsCapturing", &|| {
                    let mut st = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
                    sys::cuStreamIsCapturing(s, &mut st)
                }),
                ("cuEventRecord", &|| sys::cuEventRecord(ev, s)),
                ("cuStreamWaitEvent", &|| sys::cuStreamWaitEvent(s, ev, 0)),
                ("cuMemsetD32Async", &|| sys::cuMemsetD32Async(p, 7, 1, s)),
                ("cuMemAllocFromPoolAsync + cuMemFreeAsync", &|| {
                    let mut q = 0;
                    let rc = sys::cuMemAllocFromPoolAsync(&mut q, 4096, pool, s);
                    if rc != sys::CUresult::CUDA_SUCCESS {
                        return rc;
                    }
                    sys::cuMemFreeAsync(q, s)
                }),
                ("cuMemFreeAsync", &|| sys::cuMemFreeAsync(p, s)),
            ];
            for (name, call) in cases {
                ok(
                    sys::cuLaunchHostFunc(LEGACY, Some(sleep_500ms), std::ptr::null_mut()),
                    "host fn",
                );
                std::thread::sleep(Duration::from_millis(20));
                let t = Instant::now();
                let rc = call();
                let took = t.elapsed();
                println!(
                    "{kind} stream, {name}: {:.1} ms ({}){}",
                    took.as_secs_f64() * 1e3,
                    sys::result_name(rc),
                    if took >= Duration::from_millis(300) {
                        "  WAITED for the host function"
                    } else {
                        ""
                    }
                );
                ok(sys::cuCtxSynchronize(), "cuCtxSynchronize");
            }
            ok(sys::cuEventDestroy(ev), "cuEventDestroy");
            if s != LEGACY {
                ok(sys::cuStreamDestroy(s), "cuStreamDestroy");
            }
        }
    }
}
