//! `probe`: runs one operation of the benchmark rows many times, raw or through
//! `cuda-stream`, against whatever driver `cuda-stream-sys` loads, so that the CPU side of a row can be
//! measured without a GPU: instruction counts under callgrind, and wall-clock time against the
//! mock driver (whose host functions run on a worker thread of its own, so the wake-up paths are
//! real cross-thread hand-offs).
//!
//! ```sh
//! cargo build --release -p cuda-mock-driver -p cuda-stream-tests --example probe
//! export CUDA_SYS_LIBCUDA=$PWD/target/release/libcuda_mock_driver.so
//! target/release/examples/probe --list
//! target/release/examples/probe --time completed-raw completed 2000 16   # wall clock
//! tests/perf/callgrind.sh stream-create-raw stream-create-safe                  # instructions
//! ```
//!
//! `--time A B [ITERS] [REPS]` runs the two cases in batches of ITERS, REPS times, alternating
//! which goes first (give an even REPS, so that each order runs equally often), and prints the
//! medians, the median of the per-repetition ratios B/A with its range, and the medians of the
//! ratios of each order apart: their geometric mean ("balanced") cancels an effect of running
//! first or second, which an odd REPS lets into the plain median.
//!
//! `CASE ITERS` runs the case once, ITERS iterations, inside `measured_loop` (the function
//! `tests/perf/callgrind.sh` restricts collection to), after one untimed iteration.
//!
//! Not a benchmark of the driver: the mock's own costs (a mutex, a map, a condition variable per
//! call) are nothing like libcuda's. What it measures is the difference between two cases that
//! make the same driver calls, which is cuda-stream's own work.
//!
//! The cases, by family: `stream_create`, `stream_ops` (the hot rows), `host_fns`, `completion`,
//! `scopes`, `graphs`, `memory`; `--time`'s batches and statistics are in `compare`.

mod compare;
mod completion;
mod graphs;
mod host_fns;
mod memory;
mod scopes;
mod stream_create;
mod stream_ops;

use std::hint::black_box;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Waker;
use std::thread;

use cuda_stream::{Context, OwnedStream};
use cuda_stream_sys as sys;
use cuda_stream_tests::Kernels;

use completion::ThreadWaker;
use host_fns::HOST_CALLS;

#[track_caller]
fn ok(rc: sys::CUresult) {
    assert_eq!(rc, sys::CUresult::CUDA_SUCCESS, "driver call failed");
}

const CASES: &[(&str, &str)] = &[
    (
        "stream-create-raw",
        "cuStreamCreate(NON_BLOCKING) + cuStreamDestroy",
    ),
    ("stream-create-safe", "OwnedStream::new + drop"),
    ("query-raw", "cuStreamQuery of an idle stream"),
    ("query-safe", "Stream::query of an idle stream"),
    ("record-raw", "cuEventRecord of a reused event"),
    ("record-safe", "Stream::record of a reused event"),
    ("wait-raw", "cuStreamWaitEvent on a recorded event"),
    ("wait-safe", "Stream::wait_event on a recorded event"),
    ("sync-raw", "cuStreamSynchronize of an idle stream"),
    ("sync-safe", "Stream::synchronize of an idle stream"),
    (
        "scope-raw",
        "2 forks by hand: cuEventRecord + cuStreamWaitEvent to fork and to join each",
    ),
    ("scope-safe", "Stream::scope with 2 forks"),
    (
        "scope-raw-gap:K",
        "scope-raw-leased with a busy loop of K iterations before each of its 8 driver calls",
    ),
    (
        "scope-raw-lump:K",
        "scope-raw-leased with one busy loop of 8K iterations per fork/join (before the first call)",
    ),
    (
        "scope-raw-leased",
        "scope-raw on the 2 streams Stream::scope leases for its forks (the same hardware queues)",
    ),
    (
        "scope-raw-pri",
        "scope-raw with a cuStreamGetPriority of the parent first (what a scope asks)",
    ),
    (
        "scope-raw-prio-streams",
        "scope-raw on 2 streams made with cuStreamCreateWithPriority (as the pool makes them)",
    ),
    ("get-priority", "cuStreamGetPriority alone"),
    (
        "scope-api-waits",
        "scope-raw's record/wait pairs through Stream::wait_stream on 2 fixed streams (no scope)",
    ),
    (
        "scope-pool-waits-pri",
        "scope-pool-waits with Stream::priority of the parent first",
    ),
    (
        "scope-empty-raw",
        "Stream::scope with no fork, then scope-raw's record/wait pairs",
    ),
    (
        "scope-pool-waits",
        "scope-api-waits on 2 streams leased from a StreamPool per iteration (no scope)",
    ),
    (
        "capture-graph:REPLAYS",
        "GPU: a memset, kernels on 2 forks, a copy and a host function captured (thread-local), \
         instantiated and replayed REPLAYS times, printing each step",
    ),
    ("is-capturing", "cuStreamIsCapturing alone"),
    (
        "alloc-free-raw",
        "cuStreamIsCapturing + cuMemAllocFromPoolAsync + cuMemFreeAsync of 1 MiB",
    ),
    (
        "alloc-free-safe",
        "DeviceBuffer::alloc_on of 1 MiB + drop (a block cache hit)",
    ),
    (
        "alloc-free-miss-safe",
        "DeviceBuffer::alloc_in of 1 MiB + drop, from a pool whose cache limit is 0",
    ),
    (
        "miss-raw",
        "alloc-free-miss-safe's driver calls by hand: cuStreamIsCapturing + \
         cuMemAllocFromPoolAsync + cuMemFreeAsync of 1 MiB from a pool whose cache limit is 0",
    ),
    (
        "miss-raw-plus:K",
        "miss-raw with bookkeeping of the shape the safe side does, K a sum of: 1 a 224-byte \
         Box made and dropped, 2 six Arc clone + drop pairs, 4 two Mutex lock + unlock pairs, \
         8 two thread-local reads (each split around the driver calls like the safe side's)",
    ),
    (
        "copy-raw",
        "cuStreamIsCapturing + cuMemcpyDtoDAsync of one word",
    ),
    (
        "copy-safe",
        "DeviceBuffer::copy_from between two buffers used on one stream",
    ),
    (
        "fill-raw",
        "cuStreamIsCapturing + cuMemsetD32Async of one word",
    ),
    (
        "fill-safe",
        "DeviceBuffer::fill of a buffer used on one stream",
    ),
    (
        "graph-user-objects:K",
        "GPU: a graph of one kernel holding K user objects (CaptureStream::keep_alive): enqueue \
         time of 1,000 launches and GPU time, printed",
    ),
    (
        "capture-kernels",
        "GPU: per capture mode, capture kernels (alone, on 2 forks) and print the capture status \
         after each step (does a tool invalidate the capture?)",
    ),
    (
        "stream-create-check",
        "cuCtxGetCurrent + cuStreamCreate + cuStreamDestroy (raw, with the check the safe side makes)",
    ),
    (
        "stream-create-adopt",
        "cuStreamCreate + OwnedStream::from_raw + drop (the safe side without the check)",
    ),
    (
        "host-raw",
        "per host fn: cuLaunchHostFunc(extern fn, null); one cuStreamSynchronize per batch",
    ),
    (
        "host-raw-arc",
        "per host fn: Arc clone passed as the user data, dropped in the extern fn",
    ),
    (
        "host-raw-box",
        "per host fn: Box {Arc, stream, ctx} (the old boxed path), freed in the extern fn",
    ),
    (
        "host-boxed",
        "per host fn: launch_host_func(closure capturing an Arc clone)",
    ),
    (
        "host-zst",
        "per host fn: launch_host_func(closure capturing nothing)",
    ),
    (
        "rt-raw-arc",
        "round trip: host-raw-arc's launch + cuStreamSynchronize",
    ),
    (
        "rt-raw-box",
        "round trip: host-raw-box's launch + cuStreamSynchronize",
    ),
    (
        "rt-boxed",
        "round trip: host-boxed's launch_host_func + synchronize",
    ),
    (
        "completed-raw",
        "cuLaunchHostFunc(extern fn) + cuStreamSynchronize",
    ),
    (
        "completed-raw-flag",
        "cuLaunchHostFunc(extern fn setting a flag) + spin on the flag (what a spinning synchronize does, without the mock's condition variable)",
    ),
    (
        "completed-raw-flag-yield",
        "as completed-raw-flag, yielding the thread between checks",
    ),
    (
        "busy-raw:US",
        "a host function spinning US µs on the driver's thread, then cuStreamSynchronize",
    ),
    (
        "busy-completed:US[:SPIN]",
        "the same work, then block_on(completed()) (with spin_limit(SPIN µs) if given)",
    ),
    (
        "kbusy-raw:US",
        "a kernel spinning US µs (GPU only), then cuStreamSynchronize",
    ),
    (
        "kbusy-completed:US[:SPIN]",
        "the same kernel, then block_on(completed()) (with spin_limit(SPIN µs) if given)",
    ),
    ("completed", "block_on(stream.completed())"),
    (
        "completed-nospin",
        "block_on(stream.completed().spin_limit(Duration::ZERO)): park at once (the old behaviour)",
    ),
];

struct Fixture {
    ctx: Context,
    stream: OwnedStream,
    /// The stream of the safe memory cases, whose handle never leaves the crate (a stream whose
    /// handle was taken with `raw()` may be captured by other code, so every buffer use on it
    /// records an event).
    private: OwnedStream,
    counter: Arc<AtomicU64>,
    waker: Waker,
    kernels: std::sync::OnceLock<Kernels<'static>>,
    /// The streams the fixture stream's scopes fork (fork `i` is the same stream each scope),
    /// and an event for raw fork/joins on them.
    leased: std::sync::OnceLock<([sys::CUstream; 2], cuda_stream::Event)>,
}

impl Fixture {
    fn new() -> Fixture {
        let ctx = Context::primary(0).expect("primary context of device 0");
        let stream = ctx.new_stream().expect("a stream");
        let private = ctx.new_stream().expect("a stream");
        Fixture {
            ctx,
            stream,
            private,
            counter: Arc::new(AtomicU64::new(0)),
            waker: Waker::from(Arc::new(ThreadWaker(thread::current()))),
            kernels: std::sync::OnceLock::new(),
            leased: std::sync::OnceLock::new(),
        }
    }

    /// The test kernels (GPU only: the mock has no modules).
    fn kernels(&self) -> &Kernels<'static> {
        self.kernels
            .get_or_init(|| Kernels::load(Box::leak(Box::new(self.ctx.clone()))))
    }

    /// Host functions run so far, of every case.
    fn calls(&self) -> u64 {
        HOST_CALLS.load(Ordering::Relaxed) + self.counter.load(Ordering::Relaxed)
    }

    /// Runs `iters` iterations of `case` (a throughput case: `iters` host functions and one
    /// synchronize).
    #[inline(always)]
    fn run(&self, case: &str, iters: u64) {
        let non_blocking = sys::CUstream_flags::CU_STREAM_NON_BLOCKING.0;
        let s = self.stream.raw();
        let launch = sys::fns::cuLaunchHostFunc().expect("cuLaunchHostFunc");
        let create = sys::fns::cuStreamCreate().expect("cuStreamCreate");
        let destroy = sys::fns::cuStreamDestroy().expect("cuStreamDestroy");
        let sync = sys::fns::cuStreamSynchronize().expect("cuStreamSynchronize");
        let get_current = sys::fns::cuCtxGetCurrent().expect("cuCtxGetCurrent");
        let mut parts = case.split(':');
        let name = parts.next().unwrap_or_default();
        let mut param = || {
            parts
                .next()
                .map(|p| p.parse::<u64>().expect("a number after ':'"))
        };
        let (us, spin) = (param(), param());
        let before = self.calls();
        let c = Case {
            name,
            iters,
            us,
            spin,
            non_blocking,
            s,
            launch,
            create,
            destroy,
            sync,
            get_current,
            before,
        };
        let known = self.stream_create(&c)
            || self.host_fns(&c)
            || self.completion(&c)
            || self.scopes(&c)
            || self.graphs(&c)
            || self.memory(&c)
            || self.stream_ops(&c);
        if !known {
            panic!("unknown case {name:?} (see --list)");
        }
    }
}

/// One batch of a case: its name and `:` parameters, and what its loop uses (the fixture's
/// stream, the driver functions the raw sides call, the host functions run before it).
#[derive(Clone, Copy)]
struct Case<'a> {
    name: &'a str,
    iters: u64,
    /// The first `:` parameter (µs of work, a count, ...), if any.
    us: Option<u64>,
    /// The second `:` parameter, if any.
    spin: Option<u64>,
    non_blocking: u32,
    s: sys::CUstream,
    launch: sys::pfn::cuLaunchHostFunc,
    create: sys::pfn::cuStreamCreate,
    destroy: sys::pfn::cuStreamDestroy,
    sync: sys::pfn::cuStreamSynchronize,
    get_current: sys::pfn::cuCtxGetCurrent,
    before: u64,
}

/// The loop callgrind collects in (`--toggle-collect=*measured_loop*`).
#[inline(never)]
fn measured_loop(fx: &Fixture, case: &str, iters: u64) {
    fx.run(case, iters);
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| args.get(i).map(String::as_str);
    if arg(0) == Some("--list") {
        for (name, what) in CASES {
            println!("{name:26} {what}");
        }
        return ExitCode::SUCCESS;
    }
    let fx = Fixture::new();
    let _bound = fx.ctx.bind().expect("bind the primary context");
    let num = |i: usize, default: u64| arg(i).map_or(default, |s| s.parse().expect("a number"));
    match (arg(0), arg(1)) {
        (Some("--time"), Some(_)) => {
            let (a, b) = (arg(1).unwrap(), arg(2).expect("two cases"));
            compare::compare(&fx, a, b, num(3, 2_000), num(4, 16) as usize);
        }
        (Some(case), Some(_)) => {
            let iters = num(1, 1_000);
            fx.run(case, 1);
            measured_loop(&fx, case, iters);
        }
        _ => {
            eprintln!("usage: probe --list | CASE ITERS | --time CASE_A CASE_B [ITERS] [REPS]");
            return ExitCode::from(64);
        }
    }
    black_box(HOST_CALLS.load(Ordering::Relaxed));
    ExitCode::SUCCESS
}
