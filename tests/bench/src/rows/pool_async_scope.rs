//! The conveniences: a warm pool lease, `completed().await` (on an idle stream, after a small
//! kernel and after a host function, each with the default spin and with
//! `spin_limit(Duration::ZERO)`), and a scope with two forks.

use std::ffi::c_void;
use std::hint::black_box;
use std::ptr;
use std::time::{Duration, Instant};

use cuda_stream::{Error, StreamOptions, StreamPool};
use cuda_stream_sys as sys;

use super::Fixture;
use super::host_fn::raw_host_round_trip;
use super::hot_path::bench_raw_wait_stream;
use crate::executor::{block_on, current_thread_waker};
use crate::fail::{fail, must, must_cudarc, ok};
use crate::kernel::SpinKernel;
use crate::method::case;
use crate::raw::Raw;
use crate::report::{Rows, Target};

/// How long the work before a `completed()` row's wait runs: well inside the default spin
/// (`Completion::DEFAULT_SPIN`, 20 µs) together with the host function's round trip.
const WORK_NS: u64 = 5_000;

/// A host function that busy-waits for the nanoseconds its user data holds.
unsafe extern "C" fn spin_host_fn(user_data: *mut c_void) {
    let ns = user_data as u64;
    let t = Instant::now();
    while t.elapsed().as_nanos() < u128::from(ns) {
        std::hint::spin_loop();
    }
}

/// What is enqueued, with raw calls on both sides, before the wait a `completed()` row times.
#[derive(Clone, Copy)]
enum Work {
    /// Nothing: the stream is idle.
    Idle,
    /// `csb_spin<<<1, 1>>>(WORK_NS)`.
    Kernel(SpinKernel),
    /// A host function that busy-waits `WORK_NS`.
    HostFn,
}

pub(super) fn rows(fx: &Fixture<'_>, rows: &mut Rows) -> Result<(), Error> {
    let (cfg, ctx) = (fx.cfg, fx.ctx);
    let Raw {
        stream_create,
        stream_destroy,
        stream_wait_event,
        event_record,
        ..
    } = fx.raw;
    let non_blocking = sys::CUstream_flags::CU_STREAM_NON_BLOCKING.0;
    let (s1, r1, e) = (&fx.s1, fx.s1.raw(), fx.event.raw());

    // Pool acquire + release, warm.
    let pool = StreamPool::new(ctx, StreamOptions::new());
    pool.reserve(1)?;
    rows.add(
        "pool_acquire",
        "pool acquire + release, warm (raw column: cuStreamCreate + cuStreamDestroy, no raw equivalent)",
        Target::BelowNs(50.0),
        case(
            cfg.slow,
            || {
                let mut s = ptr::null_mut();
                // SAFETY: `s` is a valid out-pointer; the context is current.
                ok(
                    unsafe { stream_create(&mut s, non_blocking) },
                    "cuStreamCreate",
                );
                // SAFETY: created just above, destroyed once.
                ok(unsafe { stream_destroy(black_box(s)) }, "cuStreamDestroy");
            },
            || drop(black_box(must(pool.acquire(), "StreamPool::acquire"))),
        )
        .safe_iters(cfg.fast)
        .no_peer("no stream pool")
        .run(cfg),
    );

    // Async completion: a future that spins briefly in its first poll, then is woken from a
    // host function, awaited by parking the thread; against the raw host function + synchronize,
    // on an idle stream and after work, with the default spin and without it (the old wake-up).
    let waker = current_thread_waker();
    let kernel = SpinKernel::load();
    if let Err(why) = &kernel {
        eprintln!("cuda-stream-bench: the completed() rows after a kernel are left out: {why}");
    }
    let us = WORK_NS / 1_000;
    let mut variants = vec![
        ("completed", Work::Idle, None, String::new()),
        (
            "completed_nospin",
            Work::Idle,
            Some(Duration::ZERO),
            String::new(),
        ),
    ];
    if let Ok(k) = kernel {
        let what = format!(" after a {us} µs kernel");
        variants.push((
            "completed_after_kernel",
            Work::Kernel(k),
            None,
            what.clone(),
        ));
        variants.push((
            "completed_after_kernel_nospin",
            Work::Kernel(k),
            Some(Duration::ZERO),
            what,
        ));
    }
    let what = format!(" after a {us} µs host function");
    variants.push(("completed_after_host_fn", Work::HostFn, None, what.clone()));
    variants.push((
        "completed_after_host_fn_nospin",
        Work::HostFn,
        Some(Duration::ZERO),
        what,
    ));
    let launch = fx.raw.launch_host_func;
    for (id, work, spin, what) in variants {
        let enqueue = move || match work {
            Work::Idle => {}
            Work::Kernel(k) => k.spin(r1, WORK_NS),
            Work::HostFn => {
                // SAFETY: `spin_host_fn` matches `CUhostFn` and reads its argument as a number.
                let rc = unsafe { launch(r1, Some(spin_host_fn), WORK_NS as *mut c_void) };
                ok(rc, "cuLaunchHostFunc");
            }
        };
        let (label, target) = match spin {
            None => (
                format!("completed().await{what} via block_on (raw: host fn + synchronize)"),
                // Only the idle row has a target (the wake-up path's own price); the rows after
                // work show how the spin fares when the wait is longer.
                if matches!(work, Work::Idle) {
                    Target::Ratio(1.30)
                } else {
                    Target::None
                },
            ),
            Some(_) => (
                format!(
                    "completed().spin_limit(ZERO).await{what} via block_on (no spin: parks at once; raw: host fn + synchronize)"
                ),
                Target::None,
            ),
        };
        rows.add(
            id,
            label,
            target,
            case(
                cfg.slow,
                || {
                    enqueue();
                    raw_host_round_trip(fx);
                },
                || {
                    enqueue();
                    let c = s1.completed();
                    let c = match spin {
                        Some(limit) => c.spin_limit(limit),
                        None => c,
                    };
                    must(block_on(c, &waker), "Stream::completed");
                },
            )
            .no_peer("no completion future (nothing awaits a stream without blocking a thread)")
            .run(cfg),
        );
    }

    // Scope fork/join with two forks vs the same calls by hand. The raw side runs on the very
    // streams the scope leases for its forks (a thread's scopes hand fork `i` the same stream
    // each time): which hardware queue a stream lands on changes what a record or a wait costs,
    // by more than the row's target, so two streams of its own would time the queues, not the
    // scope (BENCHMARKS.md, "Scope rework").
    let leased = || s1.scope(|scope| Ok([scope.fork()?.raw(), scope.fork()?.raw()]));
    let [rf1, rf2] = leased()?;
    if leased()? != [rf1, rf2] {
        fail(
            "the scope row",
            &"a scope's forks changed between two scopes",
        );
    }
    rows.add(
        "scope_2_forks",
        "scope with 2 forks (raw: 2 streams, record + wait to fork, record + wait to join)",
        Target::Ratio(1.05),
        case(
            cfg.medium,
            || {
                for fork in [rf1, rf2] {
                    let rc = bench_raw_wait_stream(event_record, stream_wait_event, e, fork, r1);
                    ok(rc, "fork: cuEventRecord/cuStreamWaitEvent");
                }
                for fork in [rf1, rf2] {
                    let rc = bench_raw_wait_stream(event_record, stream_wait_event, e, r1, fork);
                    ok(rc, "join: cuEventRecord/cuStreamWaitEvent");
                }
            },
            || {
                let r = s1.scope(|scope| {
                    let a = scope.fork()?;
                    let b = scope.fork()?;
                    black_box((a, b));
                    Ok(())
                });
                must(r, "Stream::scope");
            },
        )
        // cudarc's fork/join: `fork` creates a stream and makes it wait on the parent; `join`
        // records a new event on the fork and makes the parent wait on it.
        .peer(fx.cudarc().map(|c| {
            move || {
                let a = must_cudarc(c.s1.fork(), "CudaStream::fork");
                let b = must_cudarc(c.s1.fork(), "CudaStream::fork");
                must_cudarc(c.s1.join(&a), "CudaStream::join");
                must_cudarc(c.s1.join(&b), "CudaStream::join");
                drop(black_box((a, b)));
            }
        }))
        .settle(|| {
            // The parent waits for the forks after the join, so draining it drains them.
            fx.settle();
            fx.sync_raw(rf1);
            fx.sync_raw(rf2);
        })
        .run(cfg),
    );
    Ok(())
}
