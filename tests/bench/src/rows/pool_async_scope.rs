//! The conveniences: a warm pool lease, `completed().await`, and a scope with two forks.

use std::hint::black_box;
use std::ptr;

use cuda_stream::{Error, StreamOptions, StreamPool};
use cuda_sys as sys;

use super::Fixture;
use super::host_fn::raw_host_round_trip;
use super::hot_path::bench_raw_wait_stream;
use crate::executor::{block_on, current_thread_waker};
use crate::fail::{must, must_cudarc, ok};
use crate::method::case;
use crate::raw::Raw;
use crate::report::{Rows, Target};

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

    // Async completion: a future woken from a host function, awaited by parking the thread.
    let waker = current_thread_waker();
    rows.add(
        "completed",
        "completed().await via block_on (raw: host fn + synchronize)",
        Target::None,
        case(
            cfg.slow,
            || raw_host_round_trip(fx),
            || must(block_on(s1.completed(), &waker), "Stream::completed"),
        )
        .no_peer("no completion future (nothing awaits a stream without blocking a thread)")
        .run(cfg),
    );

    // Scope fork/join with two forks vs two raw streams.
    let f1 = ctx.new_stream()?;
    let f2 = ctx.new_stream()?;
    let (rf1, rf2) = (f1.raw(), f2.raw());
    rows.add(
        "scope_2_forks",
        "scope with 2 forks (raw: 2 streams, record + wait to fork, record + wait to join)",
        Target::None,
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
