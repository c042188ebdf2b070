//! The teardown questions of `host_fn_wake`: does a call that waits for the device return
//! after a thread that used its per-thread default stream has exited (`--unload`,
//! `--exit-pending`)?

use std::ptr;
use std::time::{Duration, Instant};

use cuda_stream_sys::{self as sys, CUstream};

use super::{Gpu, PER_THREAD, Route, Wait, current, ok, one};

/// `--unload CASE`: a thread (not the process's main thread, as a test harness's) runs `one` on
/// a second thread, which exits; then it unloads the kernel's module, which must not hang.
/// Cases: `per-thread` (the kernel and the event on the exited thread's per-thread default
/// stream), `created` (on a created stream instead), `per-thread-synced` (the context
/// synchronised before the unload), `per-thread-own-notifier` (the notifier stream created, and
/// the primary context retained, by the exiting thread), `per-thread-queries` (a capture query
/// of the per-thread stream first), `per-thread-own-notifier-queries` (both); any of them with
/// `-store` added: the kernel stores to global memory after its spin, as the test's does.
pub(crate) fn unload(case: &str, limit: Duration) -> bool {
    let case = case.to_string();
    let mut gpu = Gpu::new();
    if case.contains("store") {
        let _b = gpu.bind();
        // SAFETY: a valid out-pointer; the context is current. Never freed (the process ends).
        ok(
            unsafe { sys::cuMemAlloc(&mut gpu.store_to, 4) },
            "cuMemAlloc",
        );
    }
    let gpu = gpu;
    let notifier = gpu.stream() as usize;
    let own = gpu.stream() as usize;
    let stream = if case.starts_with("created") {
        own
    } else {
        PER_THREAD
    };
    let hard = limit + Duration::from_secs(30);
    let name = case.clone();
    std::thread::spawn(move || {
        let case = name;
        std::thread::sleep(hard);
        println!("VERDICT unload {case}: HUNG (cuModuleUnload did not return within {hard:?})");
        std::process::exit(1);
    });
    std::thread::spawn(move || {
        let ran = std::thread::scope(|sc| {
            sc.spawn(|| {
                // The notifier made by the exiting thread itself, as `completed()` makes its
                // context's on first use; the retain as its `Context::retain_if_primary`.
                let notifier = if case.contains("own-notifier") {
                    let mut ctx = ptr::null_mut();
                    // SAFETY: a valid out-pointer; device 0 exists.
                    ok(
                        unsafe { sys::cuDevicePrimaryCtxRetain(&mut ctx, 0) },
                        "cuDevicePrimaryCtxRetain",
                    );
                    let n = gpu.stream() as usize;
                    assert!(current().is_null());
                    n
                } else {
                    notifier
                };
                if case.contains("queries") {
                    let _b = gpu.bind();
                    let mut st = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
                    // SAFETY: the per-thread stream of the current context; a valid out-pointer.
                    ok(
                        unsafe { sys::cuStreamIsCapturing(stream as CUstream, &mut st) },
                        "cuStreamIsCapturing",
                    );
                }
                one(
                    &gpu,
                    stream,
                    Route::Notifier(notifier),
                    true,
                    Wait::Park,
                    limit,
                )
            })
            .join()
            .unwrap()
        });
        println!(
            "unload {case}: the exited thread's host function ran: {}",
            ran.is_some()
        );
        let _b = gpu.bind();
        if case.contains("synced") {
            // SAFETY: the context is current.
            ok(unsafe { sys::cuCtxSynchronize() }, "cuCtxSynchronize");
        }
        let t = Instant::now();
        // SAFETY: the module is loaded, its context current, no work of it pending.
        ok(unsafe { sys::cuModuleUnload(gpu.module) }, "cuModuleUnload");
        println!(
            "VERDICT unload {case}: cuModuleUnload returned in {:.1} ms",
            t.elapsed().as_secs_f64() * 1e3
        );
    })
    .join()
    .is_ok()
}

/// `--exit-pending MODE`: a thread enqueues a 100 ms kernel (which stores) on its per-thread
/// default stream and exits at once, the kernel still running; another thread (not the main
/// thread) then makes a call that waits for the device: `ctx-sync` (`cuCtxSynchronize`),
/// `unload` (`cuModuleUnload`) or `alloc` (`cuMemAlloc`, which a sanitizer may make wait). Does
/// it return?
pub(crate) fn exit_pending(mode: &str) -> bool {
    let mode = mode.to_string();
    let mut gpu = Gpu::new();
    {
        let _b = gpu.bind();
        // SAFETY: a valid out-pointer; the context is current. Never freed (the process ends).
        ok(
            unsafe { sys::cuMemAlloc(&mut gpu.store_to, 4) },
            "cuMemAlloc",
        );
    }
    let gpu = gpu;
    let name = mode.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(30));
        println!("VERDICT exit-pending {name}: HUNG (no return within 30 s)");
        std::process::exit(1);
    });
    std::thread::spawn(move || {
        std::thread::scope(|sc| {
            sc.spawn(|| {
                let _b = gpu.bind();
                gpu.spin(PER_THREAD as CUstream, Duration::from_millis(100));
            });
        });
        let _b = gpu.bind();
        let t = Instant::now();
        // SAFETY: the context is current; the module is loaded (its kernel may run: the driver
        // waits for it); a valid out-pointer.
        let rc = unsafe {
            match mode.as_str() {
                "unload" => sys::cuModuleUnload(gpu.module),
                "alloc" => {
                    let mut p = 0;
                    sys::cuMemAlloc(&mut p, 1 << 20)
                }
                _ => sys::cuCtxSynchronize(),
            }
        };
        println!(
            "VERDICT exit-pending {mode}: returned {} in {:.1} ms",
            sys::result_name(rc),
            t.elapsed().as_secs_f64() * 1e3
        );
    })
    .join()
    .is_ok()
}
