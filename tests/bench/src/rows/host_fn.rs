//! Host functions: round trip, throughput, and throughput with a capturing (boxed) closure.
//!
//! Both sides do the same work in the function: one relaxed atomic increment.

use std::ffi::c_void;
use std::hint::black_box;
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use cuda_stream::Error;

use super::Fixture;
use crate::fail::{must, ok};
use crate::method::case;
use crate::raw::Raw;
use crate::report::{Rows, Target};

/// Host functions run so far.
pub(super) static HOST_CALLS: AtomicU64 = AtomicU64::new(0);

/// The raw side's host function: an `extern "C"` function pointer.
pub(super) unsafe extern "C" fn raw_host_fn(_user_data: *mut c_void) {
    HOST_CALLS.fetch_add(1, Ordering::Relaxed);
}

/// Why the host-function rows have no cudarc column.
const NO_CUDARC: &str = "cudarc's safe API has no host functions (only the unsafe result::stream::launch_host_function)";

pub(super) fn rows(fx: &Fixture<'_>, rows: &mut Rows) -> Result<(), Error> {
    let cfg = fx.cfg;
    let Raw {
        launch_host_func, ..
    } = fx.raw;
    let (s1, r1) = (&fx.s1, fx.s1.raw());

    // Round trip: enqueue one, wait for it.
    rows.add(
        "host_round_trip",
        "host function round trip (launch + synchronize)",
        Target::Ratio(1.10),
        case(
            cfg.slow,
            || raw_host_round_trip(fx),
            || {
                let r = s1.launch_host_func(|| {
                    HOST_CALLS.fetch_add(1, Ordering::Relaxed);
                });
                must(r, "Stream::launch_host_func");
                must(s1.synchronize(), "Stream::synchronize");
            },
        )
        .no_peer(NO_CUDARC)
        .run(cfg),
    );

    // Throughput: enqueue a batch, synchronize once.
    let n = cfg.host_batch;
    let raw_batch = || {
        for _ in 0..n {
            // SAFETY: `raw_host_fn` matches `CUhostFn` and ignores its (null) argument.
            let rc = unsafe { launch_host_func(r1, Some(raw_host_fn), ptr::null_mut()) };
            ok(rc, "cuLaunchHostFunc");
        }
        fx.sync_raw(r1);
    };
    rows.add(
        "host_throughput",
        format!("host function throughput ({n} enqueued, one synchronize; per host fn)"),
        Target::Ratio(1.10),
        case(1, raw_batch, || {
            for _ in 0..n {
                let r = s1.launch_host_func(|| {
                    HOST_CALLS.fetch_add(1, Ordering::Relaxed);
                });
                must(r, "Stream::launch_host_func");
            }
            must(s1.synchronize(), "Stream::synchronize");
        })
        .per_iter(n)
        .no_peer(NO_CUDARC)
        .run(cfg),
    );

    // The same throughput with a closure that captures data, so it is boxed: the box is freed
    // on the driver's thread.
    let counter = Arc::new(AtomicU64::new(0));
    rows.add(
        "host_throughput_boxed",
        format!(
            "host function throughput, closure capturing an Arc (boxed) ({n} enqueued; per host fn)"
        ),
        Target::None,
        case(1, raw_batch, || {
            for _ in 0..n {
                let c = counter.clone();
                let r = s1.launch_host_func(move || {
                    c.fetch_add(1, Ordering::Relaxed);
                });
                must(r, "Stream::launch_host_func");
            }
            must(s1.synchronize(), "Stream::synchronize");
        })
        .per_iter(n)
        .no_peer(NO_CUDARC)
        .run(cfg),
    );

    black_box(HOST_CALLS.load(Ordering::Relaxed));
    Ok(())
}

/// The raw round trip: `cuLaunchHostFunc` with a function pointer, then `cuStreamSynchronize`
/// (also the raw side of the `completed()` row).
#[inline(always)]
pub(super) fn raw_host_round_trip(fx: &Fixture<'_>) {
    let r1 = fx.s1.raw();
    // SAFETY: `raw_host_fn` matches `CUhostFn` and ignores its (null) argument.
    let rc = unsafe { (fx.raw.launch_host_func)(r1, Some(raw_host_fn), ptr::null_mut()) };
    ok(rc, "cuLaunchHostFunc");
    fx.sync_raw(r1);
}
