//! Host functions: round trip, throughput, and throughput with a capturing (boxed) closure.
//!
//! Both sides do the same work in the function: one relaxed atomic increment. With a capturing
//! closure, the raw side moves the same captured data per call as the safe side: the `Arc` as the
//! user data (the target row), or the closure in a `Box` (what hand-written raw code passing a
//! closure does); the old row, whose raw side passes nothing, stays as a diagnostic.

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

/// The raw side of the fair capturing-closure row: the closure's `Arc`, passed as the user data
/// (`Arc::into_raw` per call), taken back and dropped in the function.
unsafe extern "C" fn raw_arc_fn(user_data: *mut c_void) {
    // SAFETY: `user_data` is an `Arc::into_raw` made for this one call, taken back once.
    let counter = unsafe { Arc::from_raw(user_data.cast::<AtomicU64>().cast_const()) };
    counter.fetch_add(1, Ordering::Relaxed);
}

/// The raw side of the hand-boxed row: the closure in a `Box` (`Box::into_raw` per call), taken
/// back, called and freed in the function.
unsafe extern "C" fn raw_boxed_fn<F: FnOnce()>(user_data: *mut c_void) {
    // SAFETY: `user_data` is a `Box::<F>::into_raw` made for this one call, taken back once.
    let f = unsafe { Box::from_raw(user_data.cast::<F>()) };
    f();
}

/// Launches `f` boxed, as raw code passing a closure to `cuLaunchHostFunc` does.
#[inline(always)]
fn raw_launch_boxed<F: FnOnce() + Send + 'static>(
    launch: cuda_stream_sys::pfn::cuLaunchHostFunc,
    s: cuda_stream_sys::CUstream,
    f: F,
) {
    let data = Box::into_raw(Box::new(f)).cast::<c_void>();
    // SAFETY: `raw_boxed_fn::<F>` matches `CUhostFn` and takes back exactly this box, once.
    ok(
        unsafe { launch(s, Some(raw_boxed_fn::<F>), data) },
        "cuLaunchHostFunc",
    );
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

    // The same throughput with a closure that captures data (an `Arc`), so it is boxed: the
    // closure travels to the driver's thread and is dropped there. The raw side moves the same
    // data per call (a clone of the `Arc` as the user data, dropped in the function), so the
    // ratio is what cuda-stream's closure block costs, not what the capture costs.
    let counter = Arc::new(AtomicU64::new(0));
    let safe_boxed = || {
        for _ in 0..n {
            let c = counter.clone();
            let r = s1.launch_host_func(move || {
                c.fetch_add(1, Ordering::Relaxed);
            });
            must(r, "Stream::launch_host_func");
        }
        must(s1.synchronize(), "Stream::synchronize");
    };
    rows.add(
        "host_throughput_boxed",
        format!(
            "host function throughput, closure capturing an Arc (boxed; raw: the Arc as user data, Arc::into_raw per call) ({n} enqueued; per host fn)"
        ),
        Target::Ratio(1.05),
        case(
            1,
            || {
                for _ in 0..n {
                    let data = Arc::into_raw(counter.clone()).cast_mut().cast::<c_void>();
                    // SAFETY: `raw_arc_fn` matches `CUhostFn` and takes back this `Arc` once.
                    let rc = unsafe { launch_host_func(r1, Some(raw_arc_fn), data) };
                    ok(rc, "cuLaunchHostFunc");
                }
                fx.sync_raw(r1);
            },
            safe_boxed,
        )
        .per_iter(n)
        .no_peer(NO_CUDARC)
        .run(cfg),
    );
    // Diagnostics of the same safe side: against raw code boxing the closure itself (a `Box`
    // per call, freed on the driver's thread: what cuda-stream did before its blocks were
    // recycled), and against a raw side that passes no data at all (the row before the fair one:
    // its ratio includes the capture's own cost).
    rows.add(
        "host_throughput_boxed_raw_box",
        format!(
            "host function throughput, closure capturing an Arc (boxed; raw: the closure in a Box per call) ({n} enqueued; per host fn)"
        ),
        Target::None,
        case(
            1,
            || {
                for _ in 0..n {
                    let c = counter.clone();
                    raw_launch_boxed(launch_host_func, r1, move || {
                        c.fetch_add(1, Ordering::Relaxed);
                    });
                }
                fx.sync_raw(r1);
            },
            safe_boxed,
        )
        .per_iter(n)
        .no_peer(NO_CUDARC)
        .run(cfg),
    );
    rows.add(
        "host_throughput_boxed_plain",
        format!(
            "host function throughput, closure capturing an Arc (boxed; raw: a plain function, no data) ({n} enqueued; per host fn)"
        ),
        Target::None,
        case(1, raw_batch, safe_boxed)
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
