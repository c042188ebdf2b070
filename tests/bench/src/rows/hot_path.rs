//! The hot path: query, record, wait on an event, synchronize and `wait_stream` on live streams.
//!
//! The measured bodies are out of line on both sides (`bench_raw_*` / `bench_safe_*`), so the two
//! columns have the same call shape and the safe code can be found in the binary
//! (`objdump -d -C target/release/cuda-stream-bench | grep bench_safe`).

use std::hint::black_box;

use cuda_stream::{AsStream, Error, Event, Stream};
use cuda_stream_sys as sys;

use super::Fixture;
use crate::cudarc_column::Cudarc;
use crate::fail::{fail, must, must_cudarc, ok};
use crate::method::case;
use crate::raw::Raw;
use crate::report::{Rows, Target};

#[inline(never)]
fn bench_raw_query(f: sys::pfn::cuStreamQuery, s: sys::CUstream) -> sys::CUresult {
    // SAFETY: `s` is a live stream of the current context for the whole benchmark.
    unsafe { f(s) }
}

#[inline(never)]
fn bench_safe_query(s: Stream<'_>) -> cuda_stream::Result<bool> {
    s.query()
}

#[inline(never)]
fn bench_raw_record(
    f: sys::pfn::cuEventRecord,
    e: sys::CUevent,
    s: sys::CUstream,
) -> sys::CUresult {
    // SAFETY: the event and the stream are live and belong to the same context.
    unsafe { f(e, s) }
}

#[inline(never)]
fn bench_safe_record(s: Stream<'_>, e: &Event) -> cuda_stream::Result<()> {
    s.record(e)
}

#[inline(never)]
fn bench_raw_wait_event(
    f: sys::pfn::cuStreamWaitEvent,
    s: sys::CUstream,
    e: sys::CUevent,
) -> sys::CUresult {
    // SAFETY: the stream and the event are live; flags must be 0.
    unsafe { f(s, e, 0) }
}

#[inline(never)]
fn bench_safe_wait_event(s: Stream<'_>, e: &Event) -> cuda_stream::Result<()> {
    s.wait_event(e)
}

#[inline(never)]
fn bench_raw_synchronize(f: sys::pfn::cuStreamSynchronize, s: sys::CUstream) -> sys::CUresult {
    // SAFETY: `s` is a live stream.
    unsafe { f(s) }
}

#[inline(never)]
fn bench_safe_synchronize(s: Stream<'_>) -> cuda_stream::Result<()> {
    s.synchronize()
}

/// Records `e` on `other` and makes `waiter` wait on it: the raw `wait_stream` (and one fork or
/// join step of the scope row).
#[inline(never)]
pub(super) fn bench_raw_wait_stream(
    record: sys::pfn::cuEventRecord,
    wait: sys::pfn::cuStreamWaitEvent,
    e: sys::CUevent,
    waiter: sys::CUstream,
    other: sys::CUstream,
) -> sys::CUresult {
    // SAFETY: the event and both streams are live and of one context.
    let rc = unsafe { record(e, other) };
    if rc != sys::CUresult::CUDA_SUCCESS {
        return rc;
    }
    // SAFETY: as above; flags must be 0.
    unsafe { wait(waiter, e, 0) }
}

#[inline(never)]
fn bench_safe_wait_stream(waiter: Stream<'_>, other: Stream<'_>) -> cuda_stream::Result<()> {
    waiter.wait_stream(&other)
}

#[inline(never)]
fn bench_cudarc_record(c: &Cudarc) -> Result<(), cudarc::driver::DriverError> {
    c.event.record(&c.s1)
}

#[inline(never)]
fn bench_cudarc_wait_event(c: &Cudarc) -> Result<(), cudarc::driver::DriverError> {
    c.s1.wait(&c.event)
}

#[inline(never)]
fn bench_cudarc_synchronize(c: &Cudarc) -> Result<(), cudarc::driver::DriverError> {
    c.s1.synchronize()
}

/// cudarc's `join` is its `wait_stream`: it records a new event on `other`, waits on it and
/// destroys it.
#[inline(never)]
fn bench_cudarc_join(c: &Cudarc) -> Result<(), cudarc::driver::DriverError> {
    c.s1.join(&c.s2)
}

pub(super) fn rows(fx: &Fixture<'_>, rows: &mut Rows) -> Result<(), Error> {
    let cfg = fx.cfg;
    let Raw {
        stream_query,
        stream_synchronize,
        stream_wait_event,
        event_record,
        ..
    } = fx.raw;
    let (r1, r2) = (fx.s1.raw(), fx.s2.raw());
    let (v1, v2) = (fx.s1.as_stream(), fx.s2.as_stream());
    let (event, e) = (&fx.event, fx.event.raw());
    let settle = || fx.settle();

    // Query on an idle stream.
    fx.settle();
    rows.add(
        "query",
        "query (idle stream)",
        Target::Ratio(1.05),
        case(
            cfg.fast,
            || {
                let rc = bench_raw_query(stream_query, black_box(r1));
                ok(rc, "cuStreamQuery");
            },
            || {
                let done = must(bench_safe_query(black_box(v1)), "Stream::query");
                if !done {
                    fail("Stream::query", &"an idle stream reported pending work");
                }
            },
        )
        .no_peer("cudarc's CudaStream has no query (only CudaEvent::is_complete)")
        .run(cfg),
    );

    // Event record (reused event).
    rows.add(
        "record",
        "event record (reused event)",
        Target::Ratio(1.05),
        case(
            cfg.fast,
            || {
                ok(
                    bench_raw_record(event_record, e, black_box(r1)),
                    "cuEventRecord",
                )
            },
            || must(bench_safe_record(black_box(v1), event), "Stream::record"),
        )
        .peer(
            fx.cudarc().map(|c| {
                move || must_cudarc(bench_cudarc_record(black_box(c)), "CudaEvent::record")
            }),
        )
        .settle(settle)
        .run(cfg),
    );

    // Wait on an event (recorded once on the other stream).
    must(fx.s2.record(event), "Stream::record");
    if let Some(c) = fx.cudarc() {
        must_cudarc(c.event.record(&c.s2), "CudaEvent::record");
    }
    fx.settle();
    rows.add(
        "wait_event",
        "wait on an event",
        Target::Ratio(1.05),
        case(
            cfg.fast,
            || {
                let rc = bench_raw_wait_event(stream_wait_event, black_box(r1), e);
                ok(rc, "cuStreamWaitEvent");
            },
            || {
                must(
                    bench_safe_wait_event(black_box(v1), event),
                    "Stream::wait_event",
                )
            },
        )
        .peer(fx.cudarc().map(|c| {
            move || must_cudarc(bench_cudarc_wait_event(black_box(c)), "CudaStream::wait")
        }))
        .settle(settle)
        .run(cfg),
    );

    // Synchronize an idle stream.
    fx.settle();
    rows.add(
        "synchronize",
        "synchronize (idle stream)",
        Target::Ratio(1.05),
        case(
            cfg.medium,
            || {
                let rc = bench_raw_synchronize(stream_synchronize, black_box(r1));
                ok(rc, "cuStreamSynchronize");
            },
            || must(bench_safe_synchronize(black_box(v1)), "Stream::synchronize"),
        )
        .peer(fx.cudarc().map(|c| {
            move || {
                must_cudarc(
                    bench_cudarc_synchronize(black_box(c)),
                    "CudaStream::synchronize",
                )
            }
        }))
        .run(cfg),
    );

    // wait_stream vs raw record (reused event) + wait.
    rows.add(
        "wait_stream",
        "wait_stream (raw: record reused event + wait)",
        Target::Ratio(1.10),
        case(
            cfg.fast,
            || {
                let rc = bench_raw_wait_stream(event_record, stream_wait_event, e, r1, r2);
                ok(rc, "cuEventRecord/cuStreamWaitEvent");
            },
            || {
                let r = bench_safe_wait_stream(black_box(v1), black_box(v2));
                must(r, "Stream::wait_stream");
            },
        )
        .peer(
            fx.cudarc()
                .map(|c| move || must_cudarc(bench_cudarc_join(black_box(c)), "CudaStream::join")),
        )
        .settle(settle)
        .run(cfg),
    );
    Ok(())
}
