//! `blocking_calls`: which driver calls wait, on the host, for a host function queued on the
//! legacy default stream? Each case queues a host function that sleeps 500 ms on the legacy
//! stream, then times one call on a stream (blocking, non-blocking, the legacy one), from this
//! thread, while the host function runs: alone, while a second thread synchronises the legacy
//! stream, and while a second thread copies device memory to pageable host memory on it (a copy
//! that returns once done, as `to_vec` does). A call that waited there, made under a lock that
//! the host function needs, would deadlock the program: the question behind the random programs'
//! seed 0x1c0, which hung under memcheck (see tests/README.md). Measured on H100 and H200 (driver
//! 580): alone or beside the synchronisation every call returned in 0.1 ms or less, plainly and
//! under memcheck; beside the pageable copy `cuEventCreate`, `cuEventRecord` and
//! `cuMemsetD32Async` waited for the host function (about 480 ms), plainly and under memcheck.
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
            let cases: [(&str, &dyn Fn() -> sys::CUresult); 7] = [
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
            ];
            for (syncer, (name, call)) in [0, 1, 2]
                .into_iter()
                .flat_map(|syncer| cases.iter().map(move |c| (syncer, c)))
            {
                ok(
                    sys::cuLaunchHostFunc(LEGACY, Some(sleep_500ms), std::ptr::null_mut()),
                    "host fn",
                );
                // With `syncer`, a second thread waits for the legacy stream meanwhile: 1,
                // `cuStreamSynchronize`; 2, a copy to pageable memory on it (which returns once
                // the copy is done), as a `to_vec` on it does.
                let (ctx_addr, src) = (ctx as usize, p);
                let waiter = (syncer > 0).then(|| {
                    std::thread::spawn(move || {
                        // SAFETY: the primary context retained above, alive until the end;
                        // `src` holds 1024 bytes (freed only after the waiter is joined).
                        ok(
                            sys::cuCtxPushCurrent(ctx_addr as sys::CUcontext),
                            "push (waiter)",
                        );
                        if syncer == 1 {
                            ok(
                                sys::cuStreamSynchronize(LEGACY),
                                "cuStreamSynchronize (waiter)",
                            );
                        } else {
                            let mut host = vec![0u8; 1024];
                            ok(
                                sys::cuMemcpyDtoHAsync(host.as_mut_ptr().cast(), src, 1024, LEGACY),
                                "cuMemcpyDtoHAsync (waiter)",
                            );
                        }
                    })
                });
                std::thread::sleep(Duration::from_millis(20));
                let t = Instant::now();
                let rc = call();
                let took = t.elapsed();
                if let Some(w) = waiter {
                    w.join().expect("the waiting thread");
                }
                let during = match syncer {
                    0 => "",
                    1 => ", another thread synchronizing the legacy stream",
                    _ => ", another thread copying to pageable memory on the legacy stream",
                };
                println!(
                    "{kind} stream{during}, {name}: {:.1} ms ({}){}",
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
