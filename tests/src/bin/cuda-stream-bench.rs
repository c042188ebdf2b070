//! `cuda-stream-bench`: times each `cuda-stream` operation against the raw driver call it wraps,
//! in one process, on the same context and streams, and prints a Markdown table for
//! `BENCHMARKS.md`.
//!
//! ```sh
//! cargo run --release -p cuda-stream-tests --bin cuda-stream-bench            # full run
//! cargo run --release -p cuda-stream-tests --bin cuda-stream-bench -- --quick # smoke test
//! ```
//!
//! Method: for every operation the raw body (the driver's function pointers, resolved once before
//! timing, so the raw column is the floor a C program pays) and the safe body (the `cuda-stream`
//! call) are each run for many iterations per repetition; repetitions alternate raw-first and
//! safe-first; the median ns/op of each side is reported, and the median of the repetitions' own
//! safe/raw ratios (each from two batches run back to back, so drift cancels). Work that an
//! operation enqueues is drained (untimed) between batches.
//!
//! The "first use" table comes from child processes: the binary runs itself with
//! `CUDA_STREAM_BENCH_FIRST_USE=1`, and the child measures, once, the costs of a cold start (opening
//! the library, resolving the first symbol, `cuInit`, retaining the primary context, creating the
//! first stream). The median of several children is printed.
//!
//! Without a CUDA driver it prints `no CUDA driver found: <error>` and exits with status 2.

use std::ffi::c_void;
use std::fmt::Display;
use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::process::{Command, ExitCode};
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::Instant;

use cuda_stream::{
    AsStream, Context, Device, Error, Event, EventOptions, OwnedStream, Stream, StreamOptions,
    StreamPool,
};
use cuda_sys as sys;

/// Set (to anything non-empty) in the child processes that measure first-use costs.
const FIRST_USE_VAR: &str = "CUDA_STREAM_BENCH_FIRST_USE";
/// The line prefix a first-use child prints its numbers after.
const FIRST_USE_TAG: &str = "first-use-ns:";
/// What a first-use child measures, in the order it prints them.
const FIRST_USE_STEPS: [&str; 7] = [
    "open the library (`Driver::open_default`)",
    "first `fns::cuDriverGetVersion()` + call (resolves the symbol)",
    "later `fns::cuDriverGetVersion()` + call (mean of 1000)",
    "`cuInit` (`cuda_stream::init`)",
    "primary context retain (`Device::primary_context`)",
    "first stream (`Context::new_stream`)",
    "second stream (`Context::new_stream`)",
];

/// How much to run.
#[derive(Debug, Clone, Copy)]
struct Config {
    quick: bool,
    /// Repetitions per operation (the median is reported).
    reps: usize,
    /// Iterations per repetition for operations of about 100 ns.
    fast: u64,
    /// Iterations per repetition for operations of about a microsecond.
    medium: u64,
    /// Iterations per repetition for operations of several microseconds (create, round trips).
    slow: u64,
    /// Host functions per throughput batch.
    host_batch: u64,
    /// First-use child processes.
    children: usize,
}

impl Config {
    fn full() -> Config {
        Config {
            quick: false,
            reps: 15,
            fast: 20_000,
            medium: 5_000,
            slow: 2_000,
            host_batch: 100_000,
            children: 5,
        }
    }

    fn quick() -> Config {
        Config {
            quick: true,
            reps: 3,
            fast: 500,
            medium: 200,
            slow: 50,
            host_batch: 1_000,
            children: 2,
        }
    }
}

/// The raw driver functions, resolved once so the loops pay only the indirect call.
#[derive(Clone, Copy)]
struct Raw {
    stream_create: sys::pfn::cuStreamCreate,
    stream_destroy: sys::pfn::cuStreamDestroy,
    stream_query: sys::pfn::cuStreamQuery,
    stream_synchronize: sys::pfn::cuStreamSynchronize,
    stream_wait_event: sys::pfn::cuStreamWaitEvent,
    event_create: sys::pfn::cuEventCreate,
    event_destroy: sys::pfn::cuEventDestroy,
    event_record: sys::pfn::cuEventRecord,
    launch_host_func: sys::pfn::cuLaunchHostFunc,
}

impl Raw {
    fn load() -> Result<Raw, sys::LoadError> {
        Ok(Raw {
            stream_create: sys::fns::cuStreamCreate()?,
            stream_destroy: sys::fns::cuStreamDestroy()?,
            stream_query: sys::fns::cuStreamQuery()?,
            stream_synchronize: sys::fns::cuStreamSynchronize()?,
            stream_wait_event: sys::fns::cuStreamWaitEvent()?,
            event_create: sys::fns::cuEventCreate()?,
            event_destroy: sys::fns::cuEventDestroy()?,
            event_record: sys::fns::cuEventRecord()?,
            launch_host_func: sys::fns::cuLaunchHostFunc()?,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Failure reporting (cold, out of line, so the checks in the loops are one compare and branch).

fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

#[cold]
#[inline(never)]
fn fail(what: &str, e: &dyn Display) -> ! {
    eprintln!("cuda-stream-bench: {what} failed: {e}");
    std::process::exit(1)
}

#[cold]
#[inline(never)]
fn fail_rc(call: &str, rc: sys::CUresult) -> ! {
    fail(call, &sys::result_name(rc))
}

#[inline(always)]
fn ok(rc: sys::CUresult, call: &str) {
    if rc != sys::CUresult::CUDA_SUCCESS {
        fail_rc(call, rc);
    }
}

#[inline(always)]
fn must<T>(r: cuda_stream::Result<T>, what: &str) -> T {
    match r {
        Ok(v) => v,
        Err(e) => fail(what, &chain(&e)),
    }
}

// ---------------------------------------------------------------------------------------------
// The measured bodies of the cheap operations, out of line on both sides so the two columns have
// the same shape and so the safe ones can be found in the binary (`objdump -d | grep bench_safe`).

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

#[inline(never)]
fn bench_raw_wait_stream(
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
    waiter.wait_stream(other)
}

/// Host functions run so far (both sides do the same work: one relaxed increment).
static HOST_CALLS: AtomicU64 = AtomicU64::new(0);

unsafe extern "C" fn raw_host_fn(_user_data: *mut c_void) {
    HOST_CALLS.fetch_add(1, Ordering::Relaxed);
}

// ---------------------------------------------------------------------------------------------
// A minimal executor: the thread parks until the future's waker unparks it.

struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

fn block_on<F: Future>(fut: F, waker: &Waker) -> F::Output {
    let mut fut = pin!(fut);
    let mut cx = TaskContext::from_waker(waker);
    loop {
        match fut.as_mut().poll(&mut cx) {
            Poll::Ready(v) => return v,
            // A stale unpark only costs one more poll.
            Poll::Pending => thread::park(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Measurement.

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Runs `body` `iters` times; returns ns per iteration.
#[inline(always)]
fn batch(iters: u64, body: &mut impl FnMut()) -> f64 {
    let t = Instant::now();
    for _ in 0..iters {
        body();
    }
    t.elapsed().as_nanos() as f64 / iters as f64
}

/// Median ns per operation of `raw` and `safe`, and the median of the repetitions' own
/// safe/raw ratios, each iteration of a body doing `per_iter`
/// operations. Repetitions interleave the two sides (alternating which goes first); `settle`
/// runs untimed after every batch to drain what the batch enqueued.
fn measure(
    cfg: &Config,
    (raw_iters, safe_iters): (u64, u64),
    per_iter: u64,
    mut raw: impl FnMut(),
    mut safe: impl FnMut(),
    mut settle: impl FnMut(),
) -> (f64, f64, f64) {
    // Warm-up: caches, lazily resolved symbols, the driver's own free lists.
    batch(raw_iters.clamp(1, 1_000), &mut raw);
    settle();
    batch(safe_iters.clamp(1, 1_000), &mut safe);
    settle();
    let (mut r, mut s) = (Vec::with_capacity(cfg.reps), Vec::with_capacity(cfg.reps));
    for rep in 0..cfg.reps {
        if rep % 2 == 0 {
            r.push(batch(raw_iters, &mut raw));
            settle();
            s.push(batch(safe_iters, &mut safe));
            settle();
        } else {
            s.push(batch(safe_iters, &mut safe));
            settle();
            r.push(batch(raw_iters, &mut raw));
            settle();
        }
    }
    let per = per_iter as f64;
    // The ratio is the median of each repetition's own ratio: the two batches of a repetition
    // run back to back, so drift of the machine between repetitions cancels out.
    let mut ratios: Vec<f64> = r.iter().zip(&s).map(|(raw, safe)| safe / raw).collect();
    let ratio = median(&mut ratios);
    (median(&mut r) / per, median(&mut s) / per, ratio)
}

#[derive(Debug, Clone, Copy)]
enum Target {
    /// safe/raw at most this.
    Ratio(f64),
    /// safe below this many ns.
    BelowNs(f64),
    /// No target; reported for information.
    None,
}

struct Row {
    op: String,
    raw: f64,
    safe: f64,
    ratio: f64,
    target: Target,
}

impl Row {
    fn ratio(&self) -> f64 {
        self.ratio
    }

    fn target_cell(&self) -> String {
        match self.target {
            Target::Ratio(t) => {
                let verdict = if self.ratio() <= t { "met" } else { "MISSED" };
                format!("<= {t:.2} ({verdict})")
            }
            Target::BelowNs(t) => {
                let verdict = if self.safe < t { "met" } else { "MISSED" };
                format!("< {t:.0} ns (cuda-stream; {verdict})")
            }
            Target::None => "—".to_string(),
        }
    }
}

fn fmt_ns(ns: f64) -> String {
    if ns < 1e3 {
        format!("{ns:.1} ns")
    } else if ns < 1e6 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{:.2} ms", ns / 1e6)
    }
}

// ---------------------------------------------------------------------------------------------
// The benchmark proper.

fn run(cfg: &Config, ctx: &Context) -> Result<Vec<Row>, Error> {
    // The primary context stays current on this thread for the whole run, for both columns: the
    // raw creation calls need a current context, and the safe ones then find it already current.
    let _bound = ctx.bind()?;
    let raw = Raw::load().map_err(Error::Load)?;
    let Raw {
        stream_create,
        stream_destroy,
        stream_query,
        stream_synchronize,
        stream_wait_event,
        event_create,
        event_destroy,
        event_record,
        launch_host_func,
    } = raw;
    let non_blocking = sys::CUstream_flags::CU_STREAM_NON_BLOCKING.0;
    let no_timing = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING.0;

    let s1 = ctx.new_stream()?;
    let s2 = ctx.new_stream()?;
    let (r1, r2) = (s1.raw(), s2.raw());
    let (v1, v2) = (s1.as_stream(), s2.as_stream());
    // One reused event (timing disabled) for the record / wait rows, on both sides.
    let event = Event::new(ctx, EventOptions::new())?;
    let e = event.raw();

    let sync_raw = |s: sys::CUstream| {
        // SAFETY: `s` is a live stream of the current context.
        ok(unsafe { stream_synchronize(s) }, "cuStreamSynchronize");
    };
    let settle = || {
        sync_raw(r1);
        sync_raw(r2);
    };
    let nothing = || {};

    let mut rows = Vec::new();
    let mut row = |op: &str, (raw, safe, ratio): (f64, f64, f64), target: Target| {
        rows.push(Row {
            op: op.to_string(),
            raw,
            safe,
            ratio,
            target,
        });
    };

    // Stream create + destroy.
    row(
        "stream create + destroy",
        measure(
            cfg,
            (cfg.slow, cfg.slow),
            1,
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
            || {
                let s = must(
                    OwnedStream::new(ctx, StreamOptions::new()),
                    "OwnedStream::new",
                );
                drop(black_box(s));
            },
            nothing,
        ),
        Target::Ratio(1.05),
    );

    // Event create + destroy.
    row(
        "event create + destroy (timing disabled)",
        measure(
            cfg,
            (cfg.medium, cfg.medium),
            1,
            || {
                let mut ev = ptr::null_mut();
                // SAFETY: `ev` is a valid out-pointer; the context is current.
                ok(unsafe { event_create(&mut ev, no_timing) }, "cuEventCreate");
                // SAFETY: created just above, destroyed once.
                ok(unsafe { event_destroy(black_box(ev)) }, "cuEventDestroy");
            },
            || {
                let ev = must(Event::new(ctx, EventOptions::new()), "Event::new");
                drop(black_box(ev));
            },
            nothing,
        ),
        Target::Ratio(1.05),
    );

    // Where the event-creation overhead goes: the context check and the context retain.
    let get_current = must(
        sys::fns::cuCtxGetCurrent().map_err(Error::Load),
        "cuCtxGetCurrent",
    );
    row(
        "event create + destroy, unsafe Event::new_in_current (no context check)",
        measure(
            cfg,
            (cfg.medium, cfg.medium),
            1,
            || {
                let mut ev = ptr::null_mut();
                // SAFETY: `ev` is a valid out-pointer; the context is current.
                ok(unsafe { event_create(&mut ev, no_timing) }, "cuEventCreate");
                // SAFETY: created just above, destroyed once.
                ok(unsafe { event_destroy(black_box(ev)) }, "cuEventDestroy");
            },
            || {
                // SAFETY: the benchmark thread keeps `ctx` bound for the whole run.
                let ev = must(
                    unsafe { Event::new_in_current(ctx, EventOptions::new()) },
                    "Event::new_in_current",
                );
                drop(black_box(ev));
            },
            nothing,
        ),
        Target::Ratio(1.05),
    );
    row(
        "the context check alone: cuCtxGetCurrent (raw) vs Context clone + drop (cuda-stream)",
        measure(
            cfg,
            (cfg.fast, cfg.fast),
            1,
            || {
                let mut cur = ptr::null_mut();
                // SAFETY: `cur` is a valid out-pointer.
                ok(unsafe { get_current(&mut cur) }, "cuCtxGetCurrent");
                black_box(cur);
            },
            || {
                drop(black_box(ctx.clone()));
            },
            nothing,
        ),
        Target::None,
    );

    // Query on an idle stream.
    settle();
    row(
        "query (idle stream)",
        measure(
            cfg,
            (cfg.fast, cfg.fast),
            1,
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
            nothing,
        ),
        Target::Ratio(1.05),
    );

    // Event record (reused event).
    row(
        "event record (reused event)",
        measure(
            cfg,
            (cfg.fast, cfg.fast),
            1,
            || {
                ok(
                    bench_raw_record(event_record, e, black_box(r1)),
                    "cuEventRecord",
                )
            },
            || must(bench_safe_record(black_box(v1), &event), "Stream::record"),
            settle,
        ),
        Target::Ratio(1.05),
    );

    // Wait on an event (recorded once on the other stream).
    must(s2.record(&event), "Stream::record");
    settle();
    row(
        "wait on an event",
        measure(
            cfg,
            (cfg.fast, cfg.fast),
            1,
            || {
                let rc = bench_raw_wait_event(stream_wait_event, black_box(r1), e);
                ok(rc, "cuStreamWaitEvent");
            },
            || {
                must(
                    bench_safe_wait_event(black_box(v1), &event),
                    "Stream::wait_event",
                )
            },
            settle,
        ),
        Target::Ratio(1.05),
    );

    // Synchronize an idle stream.
    settle();
    row(
        "synchronize (idle stream)",
        measure(
            cfg,
            (cfg.medium, cfg.medium),
            1,
            || {
                let rc = bench_raw_synchronize(stream_synchronize, black_box(r1));
                ok(rc, "cuStreamSynchronize");
            },
            || must(bench_safe_synchronize(black_box(v1)), "Stream::synchronize"),
            nothing,
        ),
        Target::Ratio(1.05),
    );

    // wait_stream vs raw record (reused event) + wait.
    row(
        "wait_stream (raw: record reused event + wait)",
        measure(
            cfg,
            (cfg.fast, cfg.fast),
            1,
            || {
                let rc = bench_raw_wait_stream(event_record, stream_wait_event, e, r1, r2);
                ok(rc, "cuEventRecord/cuStreamWaitEvent");
            },
            || {
                let r = bench_safe_wait_stream(black_box(v1), black_box(v2));
                must(r, "Stream::wait_stream");
            },
            settle,
        ),
        Target::Ratio(1.10),
    );

    // Host function round trip: enqueue one, wait for it.
    let raw_host_round_trip = || {
        // SAFETY: `raw_host_fn` matches `CUhostFn` and ignores its (null) argument.
        let rc = unsafe { launch_host_func(r1, Some(raw_host_fn), ptr::null_mut()) };
        ok(rc, "cuLaunchHostFunc");
        sync_raw(r1);
    };
    row(
        "host function round trip (launch + synchronize)",
        measure(
            cfg,
            (cfg.slow, cfg.slow),
            1,
            raw_host_round_trip,
            || {
                let r = s1.launch_host_func(|| {
                    HOST_CALLS.fetch_add(1, Ordering::Relaxed);
                });
                must(r, "Stream::launch_host_func");
                must(s1.synchronize(), "Stream::synchronize");
            },
            nothing,
        ),
        Target::Ratio(1.10),
    );

    // Host function throughput: enqueue a batch, synchronize once.
    let n = cfg.host_batch;
    row(
        &format!("host function throughput ({n} enqueued, one synchronize; per host fn)"),
        measure(
            cfg,
            (1, 1),
            n,
            || {
                for _ in 0..n {
                    // SAFETY: as in the round trip above.
                    let rc = unsafe { launch_host_func(r1, Some(raw_host_fn), ptr::null_mut()) };
                    ok(rc, "cuLaunchHostFunc");
                }
                sync_raw(r1);
            },
            || {
                for _ in 0..n {
                    let r = s1.launch_host_func(|| {
                        HOST_CALLS.fetch_add(1, Ordering::Relaxed);
                    });
                    must(r, "Stream::launch_host_func");
                }
                must(s1.synchronize(), "Stream::synchronize");
            },
            nothing,
        ),
        Target::Ratio(1.10),
    );

    // The same throughput with a closure that captures data, so it is boxed: the box is freed
    // on the driver's thread.
    let counter = Arc::new(AtomicU64::new(0));
    row(
        &format!(
            "host function throughput, closure capturing an Arc (boxed) ({n} enqueued; per host fn)"
        ),
        measure(
            cfg,
            (1, 1),
            n,
            || {
                for _ in 0..n {
                    // SAFETY: as in the round trip above.
                    let rc = unsafe { launch_host_func(r1, Some(raw_host_fn), ptr::null_mut()) };
                    ok(rc, "cuLaunchHostFunc");
                }
                sync_raw(r1);
            },
            || {
                for _ in 0..n {
                    let c = counter.clone();
                    let r = s1.launch_host_func(move || {
                        c.fetch_add(1, Ordering::Relaxed);
                    });
                    must(r, "Stream::launch_host_func");
                }
                must(s1.synchronize(), "Stream::synchronize");
            },
            nothing,
        ),
        Target::None,
    );

    // Pool acquire + release, warm.
    let pool = StreamPool::new(ctx, StreamOptions::new());
    pool.reserve(1)?;
    row(
        "pool acquire + release, warm (raw column: cuStreamCreate + cuStreamDestroy, no raw equivalent)",
        measure(
            cfg,
            (cfg.slow, cfg.fast),
            1,
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
            nothing,
        ),
        Target::BelowNs(50.0),
    );

    // Async completion: a future woken from a host function, awaited by parking the thread.
    let waker = Waker::from(Arc::new(ThreadWaker(thread::current())));
    row(
        "completed().await via block_on (raw: host fn + synchronize)",
        measure(
            cfg,
            (cfg.slow, cfg.slow),
            1,
            raw_host_round_trip,
            || must(block_on(s1.completed(), &waker), "Stream::completed"),
            nothing,
        ),
        Target::None,
    );

    // Scope fork/join with two forks vs two raw streams.
    let f1 = ctx.new_stream()?;
    let f2 = ctx.new_stream()?;
    let (rf1, rf2) = (f1.raw(), f2.raw());
    row(
        "scope with 2 forks (raw: 2 streams, record + wait to fork, record + wait to join)",
        measure(
            cfg,
            (cfg.medium, cfg.medium),
            1,
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
            || {
                // The parent waits for the forks after the join, so draining it drains them.
                settle();
                sync_raw(rf1);
                sync_raw(rf2);
            },
        ),
        Target::None,
    );

    black_box(HOST_CALLS.load(Ordering::Relaxed));
    Ok(rows)
}

// ---------------------------------------------------------------------------------------------
// First use, measured in a fresh child process.

fn first_use_child() -> ExitCode {
    match first_use_measure() {
        Ok(v) => {
            let nums: Vec<String> = v.iter().map(|x| format!("{x:.1}")).collect();
            println!("{FIRST_USE_TAG} {}", nums.join(" "));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("first-use child: {e}");
            ExitCode::from(2)
        }
    }
}

fn ns_since(t: Instant) -> f64 {
    t.elapsed().as_nanos() as f64
}

fn first_use_measure() -> Result<Vec<f64>, String> {
    let mut out = Vec::with_capacity(FIRST_USE_STEPS.len());

    let t = Instant::now();
    let driver = sys::Driver::open_default();
    out.push(ns_since(t));
    let driver = driver.map_err(|e| format!("no CUDA driver found: {e}"))?;
    // The opened library becomes the process-wide one, so `fns::*` resolve from it.
    if sys::Driver::install_global(driver).is_err() {
        return Err("the process-wide driver was already loaded".into());
    }

    let mut version = 0;
    let t = Instant::now();
    let f = sys::fns::cuDriverGetVersion().map_err(|e| e.to_string())?;
    // SAFETY: `version` is a valid out-pointer.
    let rc = unsafe { f(&mut version) };
    out.push(ns_since(t));
    if rc != sys::CUresult::CUDA_SUCCESS {
        return Err(format!("cuDriverGetVersion: {}", sys::result_name(rc)));
    }

    const LATER: u32 = 1_000;
    let t = Instant::now();
    for _ in 0..LATER {
        let f = sys::fns::cuDriverGetVersion().map_err(|e| e.to_string())?;
        // SAFETY: `version` is a valid out-pointer.
        let rc = unsafe { f(&mut version) };
        black_box(rc);
    }
    out.push(ns_since(t) / f64::from(LATER));

    let t = Instant::now();
    let init = cuda_stream::init();
    out.push(ns_since(t));
    init.map_err(|e| chain(&e))?;

    let device = Device::new(0).map_err(|e| chain(&e))?;
    let t = Instant::now();
    let ctx = device.primary_context();
    out.push(ns_since(t));
    let ctx = ctx.map_err(|e| chain(&e))?;

    let mut streams = Vec::with_capacity(2);
    for _ in 0..2 {
        let t = Instant::now();
        let stream = ctx.new_stream();
        out.push(ns_since(t));
        streams.push(stream.map_err(|e| chain(&e))?);
    }
    black_box(&streams);
    Ok(out)
}

/// Runs the first-use children; each row: (median, min, max) over the children.
fn first_use(cfg: &Config) -> Result<Vec<(f64, f64, f64)>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); FIRST_USE_STEPS.len()];
    for _ in 0..cfg.children {
        let out = Command::new(&exe)
            .env(FIRST_USE_VAR, "1")
            .output()
            .map_err(|e| format!("spawning {}: {e}", exe.display()))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(format!(
                "child exited with {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let line = stdout
            .lines()
            .find_map(|l| l.strip_prefix(FIRST_USE_TAG))
            .ok_or_else(|| format!("child printed no `{FIRST_USE_TAG}` line: {stdout}"))?;
        let values: Vec<f64> = line
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .map_err(|e| format!("bad child output {line:?}: {e}"))?;
        if values.len() != FIRST_USE_STEPS.len() {
            return Err(format!("child printed {} values: {line:?}", values.len()));
        }
        for (s, v) in samples.iter_mut().zip(values) {
            s.push(v);
        }
    }
    Ok(samples
        .iter_mut()
        .map(|s| {
            let lo = s.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            (median(s), lo, hi)
        })
        .collect())
}

// ---------------------------------------------------------------------------------------------

/// The NVIDIA kernel module's version line, where the OS exposes it (Linux).
fn kernel_module_version() -> Option<String> {
    let text = std::fs::read_to_string("/proc/driver/nvidia/version").ok()?;
    let line = text.lines().next()?;
    // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul 27 ..."
    // ... or "NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build ...": take the
    // first word that looks like a version number.
    let after = line.split("Kernel Module").nth(1)?;
    after
        .split_whitespace()
        .find(|w| w.contains('.') && w.chars().all(|c| c.is_ascii_digit() || c == '.'))
        .map(str::to_string)
}

fn usage() -> &'static str {
    "usage: cuda-stream-bench [--quick]\n\
     Times cuda-stream operations against the raw CUDA driver calls on GPU 0 and prints\n\
     Markdown tables. --quick runs few iterations (a smoke test; numbers are not meaningful)."
}

fn main() -> ExitCode {
    if std::env::var_os(FIRST_USE_VAR).is_some_and(|v| !v.is_empty()) {
        return first_use_child();
    }
    let mut cfg = Config::full();
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--quick" => cfg = Config::quick(),
            "-h" | "--help" => {
                println!("{}", usage());
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!("unknown argument {other:?}\n{}", usage());
                return ExitCode::from(64);
            }
        }
    }

    // Only the library is loaded here (no cuInit, no context), so the first-use children run
    // first, on an idle GPU, and work even where the compute mode allows one context per GPU.
    if let Err(e) = sys::Driver::global() {
        eprintln!("no CUDA driver found: {}", chain(&e));
        return ExitCode::from(2);
    }
    let first = first_use(&cfg);

    let ctx = match Context::primary(0) {
        Ok(c) => c,
        Err(e @ Error::Load(_)) => {
            eprintln!("no CUDA driver found: {}", chain(&e));
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("no usable CUDA device: {}", chain(&e));
            return ExitCode::from(2);
        }
    };
    let name = ctx
        .device()
        .name()
        .unwrap_or_else(|e| format!("<name unavailable: {e}>"));
    let version = cuda_stream::driver_version().unwrap_or(0);
    let kernel = kernel_module_version()
        .map(|v| format!(", kernel module {v}"))
        .unwrap_or_default();

    if cfg!(debug_assertions) {
        eprintln!("warning: a debug build; build with --release for meaningful numbers");
    }
    let rows = match run(&cfg, &ctx) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cuda-stream-bench: {}", chain(&e));
            return ExitCode::FAILURE;
        }
    };

    println!(
        "GPU: {name} (device 0); driver: CUDA {} ({version}){kernel}; {} repetitions per op, \
         raw/safe interleaved, median reported{}.",
        sys::format_version(version),
        cfg.reps,
        if cfg.quick {
            " (--quick: smoke test, numbers not meaningful)"
        } else {
            ""
        },
    );
    println!(
        "Iterations per repetition: {} (query, record, wait on an event, wait_stream, pool \
         acquire), {} (event create, synchronize, scope), {} (stream create, host fn round trip, \
         completed(), the pool row's raw column); throughput: {} host fns per repetition.",
        cfg.fast, cfg.medium, cfg.slow, cfg.host_batch
    );
    println!();
    println!("| op | raw ns | cuda-stream ns | ratio | target |");
    println!("|---|---:|---:|---:|---|");
    for r in &rows {
        println!(
            "| {} | {:.1} | {:.1} | {:.3} | {} |",
            r.op,
            r.raw,
            r.safe,
            r.ratio(),
            r.target_cell()
        );
    }
    println!();
    println!(
        "raw: the driver's function pointers, resolved once before timing (what C code calling \
         libcuda pays); cuda-stream: the safe call; ratio: the median over repetitions of cuda-stream / raw, each from two back-to-back batches. The primary context \
         is current on the benchmark thread throughout."
    );

    println!();
    println!(
        "First use, from nothing loaded (one child process per sample; median of {}):",
        cfg.children
    );
    println!();
    match first {
        Ok(stats) => {
            println!("| step | median | min | max |");
            println!("|---|---:|---:|---:|");
            for (step, (med, lo, hi)) in FIRST_USE_STEPS.iter().zip(stats) {
                println!(
                    "| {step} | {} | {} | {} |",
                    fmt_ns(med),
                    fmt_ns(lo),
                    fmt_ns(hi)
                );
            }
        }
        Err(e) => println!("first-use measurement failed: {e}"),
    }
    ExitCode::SUCCESS
}
