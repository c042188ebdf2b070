//! `probe`: runs one operation of the benchmark rows many times, raw or through
//! `cuda-stream`, against whatever driver `cuda-sys` loads, so that the CPU side of a row can be
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

use std::ffi::c_void;
use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::process::ExitCode;
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use cuda_stream::{AsStream, CaptureMode, Context, OwnedStream, StreamOptions};
use cuda_stream_tests::Kernels;
use cuda_sys as sys;

static HOST_CALLS: AtomicU64 = AtomicU64::new(0);

unsafe extern "C" fn raw_host_fn(_user_data: *mut c_void) {
    HOST_CALLS.fetch_add(1, Ordering::Relaxed);
}

/// Set by [`raw_flag_fn`]: what a spinning wait watches.
static FLAG: AtomicBool = AtomicBool::new(false);

unsafe extern "C" fn raw_flag_fn(_user_data: *mut c_void) {
    FLAG.store(true, Ordering::Release);
}

/// Work on the driver's thread: spins for `user_data` microseconds.
unsafe extern "C" fn spin_fn(user_data: *mut c_void) {
    let until = Instant::now() + Duration::from_micros(user_data as u64);
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

/// How many host functions were still queued when the last throughput case finished
/// enqueueing: whether the launching thread ran ahead of the driver's.
static IN_FLIGHT: AtomicU64 = AtomicU64::new(0);

/// The raw side of the fair boxed-closure row: the `Arc` travels as the user data.
unsafe extern "C" fn raw_arc_fn(user_data: *mut c_void) {
    // SAFETY: `user_data` is an `Arc::into_raw` made for this one call.
    let counter = unsafe { Arc::from_raw(user_data.cast::<AtomicU64>()) };
    counter.fetch_add(1, Ordering::Relaxed);
}

/// What `launch_host_func` did before its blocks were recycled: a `Box` of the closure, the
/// stream and the context, allocated here and freed on the driver's thread.
struct OldHostCall {
    f: Arc<AtomicU64>,
    _stream: usize,
    _ctx: usize,
}

unsafe extern "C" fn raw_box_fn(user_data: *mut c_void) {
    // SAFETY: `user_data` is a `Box::into_raw` made for this one call.
    let call = unsafe { Box::from_raw(user_data.cast::<OldHostCall>()) };
    call.f.fetch_add(1, Ordering::Relaxed);
}

struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// The benchmark's executor: poll, park until woken.
fn block_on<F: Future>(fut: F, waker: &Waker) -> F::Output {
    let mut fut = pin!(fut);
    let mut cx = TaskContext::from_waker(waker);
    loop {
        match fut.as_mut().poll(&mut cx) {
            Poll::Ready(v) => return v,
            Poll::Pending => thread::park(),
        }
    }
}

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
        Fixture {
            ctx,
            stream,
            counter: Arc::new(AtomicU64::new(0)),
            waker: Waker::from(Arc::new(ThreadWaker(thread::current()))),
            kernels: std::sync::OnceLock::new(),
            leased: std::sync::OnceLock::new(),
        }
    }

    /// See `leased`.
    fn leased(&self) -> ([sys::CUstream; 2], sys::CUevent) {
        let (forks, event) = self.leased.get_or_init(|| {
            let leased = || {
                self.stream
                    .scope(|sc| Ok([sc.fork()?.raw(), sc.fork()?.raw()]))
                    .expect("scope")
            };
            let forks = leased();
            assert_eq!(forks, leased(), "a scope's forks change between scopes");
            let event = cuda_stream::Event::new(&self.ctx, cuda_stream::EventOptions::new())
                .expect("an event");
            (forks, event)
        });
        (*forks, event.raw())
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
        let work = |stream: sys::CUstream| {
            let us = us.expect("the work's length in µs, after ':'");
            if name.starts_with('k') {
                self.kernels().spin(&self.stream, Duration::from_micros(us));
            } else {
                // SAFETY: `spin_fn` matches `CUhostFn` and reads its argument as a number.
                ok(unsafe { launch(stream, Some(spin_fn), us as *mut c_void) });
            }
        };
        let before = self.calls();
        match name {
            "stream-create-raw" => {
                for _ in 0..iters {
                    let mut h = ptr::null_mut();
                    // SAFETY: a valid out-pointer; the context is current.
                    ok(unsafe { create(&mut h, non_blocking) });
                    // SAFETY: created just above, destroyed once.
                    ok(unsafe { destroy(black_box(h)) });
                }
            }
            "stream-create-safe" => {
                for _ in 0..iters {
                    let st = OwnedStream::new(&self.ctx, StreamOptions::new()).expect("create");
                    drop(black_box(st));
                }
            }
            "stream-create-check" => {
                for _ in 0..iters {
                    let mut cur = ptr::null_mut();
                    // SAFETY: a valid out-pointer.
                    ok(unsafe { get_current(&mut cur) });
                    if black_box(cur) != self.ctx.raw() {
                        panic!("the context is not current");
                    }
                    let mut h = ptr::null_mut();
                    // SAFETY: a valid out-pointer; the context is current.
                    ok(unsafe { create(&mut h, non_blocking) });
                    // SAFETY: created just above, destroyed once.
                    ok(unsafe { destroy(black_box(h)) });
                }
            }
            "stream-create-adopt" => {
                for _ in 0..iters {
                    let mut h = ptr::null_mut();
                    // SAFETY: a valid out-pointer; the context is current.
                    ok(unsafe { create(&mut h, non_blocking) });
                    // SAFETY: created just above in this context; owned by the value alone.
                    let st = unsafe { OwnedStream::from_raw(h, &self.ctx) }.expect("adopt");
                    drop(black_box(st));
                }
            }
            "host-raw" => {
                for _ in 0..iters {
                    // SAFETY: the function matches `CUhostFn` and ignores its argument.
                    ok(unsafe { launch(s, Some(raw_host_fn), ptr::null_mut()) });
                }
                self.note_in_flight(before, iters);
                // SAFETY: a live stream.
                ok(unsafe { sync(s) });
            }
            "host-raw-arc" => {
                for _ in 0..iters {
                    let data = Arc::into_raw(self.counter.clone()).cast_mut().cast();
                    // SAFETY: the function takes back the `Arc` once.
                    ok(unsafe { launch(s, Some(raw_arc_fn), data) });
                }
                self.note_in_flight(before, iters);
                // SAFETY: a live stream.
                ok(unsafe { sync(s) });
            }
            "host-raw-box" => {
                for _ in 0..iters {
                    let data = Box::into_raw(Box::new(OldHostCall {
                        f: self.counter.clone(),
                        _stream: s as usize,
                        _ctx: self.ctx.raw() as usize,
                    }));
                    // SAFETY: the function takes back the box once.
                    ok(unsafe { launch(s, Some(raw_box_fn), data.cast()) });
                }
                self.note_in_flight(before, iters);
                // SAFETY: a live stream.
                ok(unsafe { sync(s) });
            }
            "host-boxed" => {
                for _ in 0..iters {
                    let c = self.counter.clone();
                    self.stream
                        .launch_host_func(move || {
                            c.fetch_add(1, Ordering::Relaxed);
                        })
                        .expect("launch_host_func");
                }
                self.note_in_flight(before, iters);
                self.stream.synchronize().expect("synchronize");
            }
            "host-zst" => {
                for _ in 0..iters {
                    self.stream
                        .launch_host_func(|| {
                            HOST_CALLS.fetch_add(1, Ordering::Relaxed);
                        })
                        .expect("launch_host_func");
                }
                self.note_in_flight(before, iters);
                self.stream.synchronize().expect("synchronize");
            }
            "rt-raw-arc" => {
                for _ in 0..iters {
                    let data = Arc::into_raw(self.counter.clone()).cast_mut().cast();
                    // SAFETY: the function takes back the `Arc` once.
                    ok(unsafe { launch(s, Some(raw_arc_fn), data) });
                    // SAFETY: a live stream.
                    ok(unsafe { sync(s) });
                }
            }
            "rt-raw-box" => {
                for _ in 0..iters {
                    let data = Box::into_raw(Box::new(OldHostCall {
                        f: self.counter.clone(),
                        _stream: s as usize,
                        _ctx: self.ctx.raw() as usize,
                    }));
                    // SAFETY: the function takes back the box once.
                    ok(unsafe { launch(s, Some(raw_box_fn), data.cast()) });
                    // SAFETY: a live stream.
                    ok(unsafe { sync(s) });
                }
            }
            "rt-boxed" => {
                for _ in 0..iters {
                    let c = self.counter.clone();
                    self.stream
                        .launch_host_func(move || {
                            c.fetch_add(1, Ordering::Relaxed);
                        })
                        .expect("launch_host_func");
                    self.stream.synchronize().expect("synchronize");
                }
            }
            "completed-raw" => {
                for _ in 0..iters {
                    // SAFETY: the function matches `CUhostFn` and ignores its argument.
                    ok(unsafe { launch(s, Some(raw_host_fn), ptr::null_mut()) });
                    // SAFETY: a live stream.
                    ok(unsafe { sync(s) });
                }
            }
            "busy-raw" | "kbusy-raw" => {
                for _ in 0..iters {
                    work(s);
                    // SAFETY: a live stream.
                    ok(unsafe { sync(s) });
                }
            }
            "busy-completed" | "kbusy-completed" => {
                for _ in 0..iters {
                    work(s);
                    let mut c = self.stream.completed();
                    if let Some(spin) = spin {
                        c = c.spin_limit(Duration::from_micros(spin));
                    }
                    block_on(c, &self.waker).expect("completed");
                }
            }
            "completed-raw-flag" => {
                for _ in 0..iters {
                    FLAG.store(false, Ordering::Relaxed);
                    // SAFETY: the function matches `CUhostFn` and ignores its argument.
                    ok(unsafe { launch(s, Some(raw_flag_fn), ptr::null_mut()) });
                    while !FLAG.load(Ordering::Acquire) {
                        std::hint::spin_loop();
                    }
                }
            }
            "completed-raw-flag-yield" => {
                for _ in 0..iters {
                    FLAG.store(false, Ordering::Relaxed);
                    // SAFETY: the function matches `CUhostFn` and ignores its argument.
                    ok(unsafe { launch(s, Some(raw_flag_fn), ptr::null_mut()) });
                    while !FLAG.load(Ordering::Acquire) {
                        thread::yield_now();
                    }
                }
            }
            "completed" => {
                for _ in 0..iters {
                    block_on(self.stream.completed(), &self.waker).expect("completed");
                }
            }
            "get-priority" => {
                let f = sys::fns::cuStreamGetPriority().expect("cuStreamGetPriority");
                for _ in 0..iters {
                    let mut p = 0;
                    // SAFETY: a live stream and a valid out-pointer.
                    ok(unsafe { f(s, &mut p) });
                    black_box(p);
                }
            }
            "is-capturing" => {
                let f = sys::fns::cuStreamIsCapturing().expect("cuStreamIsCapturing");
                for _ in 0..iters {
                    let mut st = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
                    // SAFETY: a live stream and a valid out-pointer.
                    ok(unsafe { f(s, &mut st) });
                    black_box(st);
                }
            }
            "scope-api-waits" | "scope-pool-waits" | "scope-pool-waits-pri" | "scope-empty-raw" => {
                let event = cuda_stream::Event::new(&self.ctx, cuda_stream::EventOptions::new())
                    .expect("an event");
                let e = event.raw();
                let forks = [
                    self.ctx.new_stream().expect("a stream"),
                    self.ctx.new_stream().expect("a stream"),
                ];
                let pool = cuda_stream::StreamPool::new(&self.ctx, StreamOptions::new());
                let parent = self.stream.as_stream();
                for _ in 0..iters {
                    if name == "scope-empty-raw" {
                        self.stream.scope(|_| Ok(())).expect("scope");
                        raw_fork_join(s, [forks[0].raw(), forks[1].raw()], e);
                        continue;
                    }
                    if name == "scope-pool-waits-pri" {
                        black_box(parent.priority().expect("priority"));
                    }
                    if name.starts_with("scope-pool-waits") {
                        let (a, b) = (
                            pool.acquire().expect("a lease"),
                            pool.acquire().expect("a lease"),
                        );
                        a.wait_stream(parent).expect("wait_stream");
                        b.wait_stream(parent).expect("wait_stream");
                        parent.wait_stream(&a).expect("wait_stream");
                        parent.wait_stream(&b).expect("wait_stream");
                        continue;
                    }
                    for f in &forks {
                        f.wait_stream(parent).expect("wait_stream");
                    }
                    for f in &forks {
                        parent.wait_stream(f).expect("wait_stream");
                    }
                }
            }
            "scope-raw-leased" | "scope-raw-gap" | "scope-raw-lump" => {
                // Made once (untimed in `--time`, which warms each case up first).
                let (forks, e) = self.leased();
                let k = us.unwrap_or(0);
                let (gap, lump) = match name {
                    "scope-raw-gap" => (k, 0),
                    "scope-raw-lump" => (0, 8 * k),
                    _ => (0, 0),
                };
                for _ in 0..iters {
                    if gap == 0 {
                        busy(lump);
                        raw_fork_join(s, forks, e);
                    } else {
                        raw_fork_join_with_gaps(s, forks, e, gap);
                    }
                }
            }
            "scope-raw" | "scope-safe" | "scope-raw-pri" | "scope-raw-prio-streams" => {
                let get_priority = sys::fns::cuStreamGetPriority().expect("cuStreamGetPriority");
                let options = if name == "scope-raw-prio-streams" {
                    StreamOptions::new().priority(0)
                } else {
                    StreamOptions::new()
                };
                let forks = [
                    self.ctx.new_stream_with(options).expect("a stream"),
                    self.ctx.new_stream_with(options).expect("a stream"),
                ];
                let event = cuda_stream::Event::new(&self.ctx, cuda_stream::EventOptions::new())
                    .expect("an event");
                let e = event.raw();
                for _ in 0..iters {
                    if name == "scope-safe" {
                        self.stream
                            .scope(|sc| {
                                black_box((sc.fork()?, sc.fork()?));
                                Ok(())
                            })
                            .expect("scope");
                        continue;
                    }
                    if name == "scope-raw-pri" {
                        let mut p = 0;
                        // SAFETY: a live stream and a valid out-pointer.
                        ok(unsafe { get_priority(s, &mut p) });
                        black_box(p);
                    }
                    raw_fork_join(s, [forks[0].raw(), forks[1].raw()], e);
                }
            }
            "capture-graph" => {
                use std::io::Write;
                let step = |what: &str| {
                    println!("capture-graph: {what}");
                    let _ = std::io::stdout().flush();
                };
                let replays = us.unwrap_or(10);
                let k = self.kernels();
                let buf = cuda_stream_tests::DeviceBuffer::new(&self.ctx, 1024);
                let p = buf.ptr();
                let ran = Arc::new(AtomicU64::new(0));
                for _ in 0..iters {
                    let mut st = self.ctx.new_stream().expect("a stream");
                    let seen = ran.clone();
                    let graph = st
                        .capture(CaptureMode::ThreadLocal, |cap| {
                            // SAFETY: `buf` holds 1024 u32 and outlives the graph's launches.
                            unsafe { cuda_stream::memset_d32_async(&cap, p, 0, 1024) }?;
                            step(&format!("memset captured: {:?}", cap.status()));
                            cap.scope(|sc| {
                                let (a, b) = (sc.fork()?, sc.fork()?);
                                k.store(a, p, 1);
                                k.store(b, p + 4, 2);
                                Ok(())
                            })?;
                            step(&format!("forks joined: {:?}", cap.status()));
                            // SAFETY: as above: both halves inside `buf`.
                            unsafe { cuda_stream::memcpy_dtod_async(&cap, p + 2048, p, 2048) }?;
                            step(&format!("copy captured: {:?}", cap.status()));
                            cap.launch_host_func(move || {
                                seen.fetch_add(1, Ordering::Relaxed);
                            })?;
                            step(&format!("host function captured: {:?}", cap.status()));
                            Ok(())
                        })
                        .expect("capture");
                    step(&format!(
                        "captured, {} nodes",
                        graph.node_count().expect("nodes")
                    ));
                    let exec = graph.instantiate().expect("instantiate");
                    step("instantiated");
                    for r in 0..replays {
                        exec.launch(&st).expect("launch");
                        if r < 3 {
                            st.synchronize().expect("synchronize");
                            step(&format!("replay {r} done"));
                        }
                    }
                    st.synchronize().expect("synchronize");
                    step(&format!(
                        "{replays} replays done; the host function ran {} times",
                        ran.load(Ordering::Relaxed)
                    ));
                    drop(exec);
                    drop(graph);
                    step("graph dropped");
                }
            }
            "graph-user-objects" => {
                let k = self.kernels();
                let ties = us.unwrap_or(0);
                let buf = cuda_stream_tests::DeviceBuffer::new(&self.ctx, 16);
                let p = buf.ptr();
                let mut st = self.ctx.new_stream().expect("a stream");
                let graph = st
                    .capture(CaptureMode::ThreadLocal, |cap| {
                        k.store(cap, p, 1);
                        for i in 0..ties {
                            cap.keep_alive(Arc::new(i))?;
                        }
                        Ok(())
                    })
                    .expect("capture");
                let exec = graph.instantiate().expect("instantiate");
                for _ in 0..iters {
                    exec.launch(&st).expect("launch");
                    st.synchronize().expect("synchronize");
                    let t = Instant::now();
                    for _ in 0..1000 {
                        exec.launch(&st).expect("launch");
                    }
                    let enqueue = t.elapsed();
                    st.synchronize().expect("synchronize");
                    let all = t.elapsed();
                    println!(
                        "graph-user-objects {ties}: 1000 launches: {:.2} us each to enqueue, \
                         {:.2} us each until done",
                        enqueue.as_secs_f64() * 1e3,
                        all.as_secs_f64() * 1e3
                    );
                }
            }
            "capture-kernels" => {
                let k = self.kernels();
                let buf = cuda_stream_tests::DeviceBuffer::new(&self.ctx, 16);
                let p = buf.ptr();
                for _ in 0..iters {
                    for mode in [
                        CaptureMode::Global,
                        CaptureMode::ThreadLocal,
                        CaptureMode::Relaxed,
                    ] {
                        for forks in [false, true] {
                            let mut st = self.ctx.new_stream().expect("a stream");
                            let mut steps = Vec::new();
                            let got = st.capture(mode, |cap| {
                                k.store(cap, p, 1);
                                steps.push(format!("kernel: {:?}", cap.status()));
                                if forks {
                                    cap.scope(|sc| {
                                        let (a, b) = (sc.fork()?, sc.fork()?);
                                        steps.push(format!("forked: {:?}", cap.status()));
                                        k.store(a, p + 4, 2);
                                        steps.push(format!("kernel on a: {:?}", cap.status()));
                                        k.store(b, p + 8, 3);
                                        steps.push(format!("kernel on b: {:?}", cap.status()));
                                        Ok(())
                                    })?;
                                    steps.push(format!("joined: {:?}", cap.status()));
                                }
                                Ok(())
                            });
                            let what = if forks {
                                "a kernel, 2 forks with a kernel each"
                            } else {
                                "one kernel"
                            };
                            match got {
                                Ok(g) => println!(
                                    "capture-kernels {mode:?}, {what}: ok, {} nodes [{}]",
                                    g.node_count().unwrap_or(0),
                                    steps.join("; ")
                                ),
                                Err(e) => println!(
                                    "capture-kernels {mode:?}, {what}: FAILED {e} [{}]",
                                    steps.join("; ")
                                ),
                            }
                        }
                    }
                }
            }
            "completed-nospin" => {
                for _ in 0..iters {
                    let c = self.stream.completed().spin_limit(Duration::ZERO);
                    block_on(c, &self.waker).expect("completed");
                }
            }
            other => panic!("unknown case {other:?} (see --list)"),
        }
    }

    /// Notes how many of the `iters` host functions launched since `before` have not run yet.
    fn note_in_flight(&self, before: u64, iters: u64) {
        let ran = self.calls() - before;
        IN_FLIGHT.store(iters.saturating_sub(ran), Ordering::Relaxed);
    }
}

/// What a scope with two forks does, by hand: per fork, `e` recorded on `parent` and waited on by
/// the fork; per join, recorded on the fork and waited on by `parent`.
#[inline(always)]
fn raw_fork_join(parent: sys::CUstream, forks: [sys::CUstream; 2], e: sys::CUevent) {
    let record = sys::fns::cuEventRecord().expect("cuEventRecord");
    let wait = sys::fns::cuStreamWaitEvent().expect("cuStreamWaitEvent");
    for f in forks {
        // SAFETY: live streams and event of the current context.
        ok(unsafe { record(e, parent) });
        // SAFETY: as above.
        ok(unsafe { wait(f, e, 0) });
    }
    for f in forks {
        // SAFETY: as above.
        ok(unsafe { record(e, f) });
        // SAFETY: as above.
        ok(unsafe { wait(parent, e, 0) });
    }
}

/// A busy loop of `k` iterations (about a cycle each).
#[inline(always)]
fn busy(k: u64) {
    for i in 0..k {
        black_box(i);
    }
}

/// [`raw_fork_join`] with [`busy`]`(k)` before each driver call.
fn raw_fork_join_with_gaps(
    parent: sys::CUstream,
    forks: [sys::CUstream; 2],
    e: sys::CUevent,
    k: u64,
) {
    let record = sys::fns::cuEventRecord().expect("cuEventRecord");
    let wait = sys::fns::cuStreamWaitEvent().expect("cuStreamWaitEvent");
    for f in forks {
        busy(k);
        // SAFETY: live streams and event of the current context.
        ok(unsafe { record(e, parent) });
        busy(k);
        // SAFETY: as above.
        ok(unsafe { wait(f, e, 0) });
    }
    for f in forks {
        busy(k);
        // SAFETY: as above.
        ok(unsafe { record(e, f) });
        busy(k);
        // SAFETY: as above.
        ok(unsafe { wait(parent, e, 0) });
    }
}

/// The loop callgrind collects in (`--toggle-collect=*measured_loop*`).
#[inline(never)]
fn measured_loop(fx: &Fixture, case: &str, iters: u64) {
    fx.run(case, iters);
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// ns per iteration of one batch, and (throughput cases) the host functions still queued when
/// its launches ended.
fn time(fx: &Fixture, case: &str, iters: u64) -> (f64, f64) {
    IN_FLIGHT.store(0, Ordering::Relaxed);
    let t = Instant::now();
    fx.run(case, iters);
    let ns = t.elapsed().as_nanos() as f64 / iters as f64;
    let in_flight = IN_FLIGHT.load(Ordering::Relaxed) as f64;
    // Untimed: drain what the batch queued, so the next batch starts on an idle GPU.
    fx.stream.synchronize().expect("synchronize");
    (ns, in_flight)
}

fn compare(fx: &Fixture, a: &str, b: &str, iters: u64, reps: usize) {
    fx.run(a, iters.min(1_000));
    fx.run(b, iters.min(1_000));
    let (mut ta, mut tb, mut qa, mut qb) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut a_first, mut b_first) = (Vec::new(), Vec::new());
    for rep in 0..reps {
        let ((x, qx), (y, qy)) = if rep % 2 == 0 {
            let x = time(fx, a, iters);
            (x, time(fx, b, iters))
        } else {
            let y = time(fx, b, iters);
            (time(fx, a, iters), y)
        };
        ta.push(x);
        tb.push(y);
        qa.push(qx);
        qb.push(qy);
        if rep % 2 == 0 {
            a_first.push(y / x);
        } else {
            b_first.push(y / x);
        }
    }
    let mut all: Vec<f64> = a_first.iter().chain(&b_first).copied().collect();
    let mut sorted = all.clone();
    sorted.sort_by(f64::total_cmp);
    let (ra, rb) = (median(&mut a_first), median(&mut b_first));
    let in_flight = if name_of(a).starts_with("host-") || name_of(b).starts_with("host-") {
        format!(
            "; still queued after the launches: {a} {:.0}, {b} {:.0}",
            median(&mut qa),
            median(&mut qb)
        )
    } else {
        String::new()
    };
    println!(
        "{a}: {:.1} ns/iter | {b}: {:.1} ns/iter | {b}/{a}: median {:.3} [min {:.3}, max {:.3}], \
         {a} first {:.3}, {b} first {:.3}, balanced {:.3} ({reps} reps x {iters}){in_flight}",
        median(&mut ta),
        median(&mut tb),
        median(&mut all),
        sorted[0],
        sorted[sorted.len() - 1],
        ra,
        rb,
        (ra * rb).sqrt(),
    );
}

fn name_of(case: &str) -> &str {
    case.split(':').next().unwrap_or_default()
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
            compare(&fx, a, b, num(3, 2_000), num(4, 16) as usize);
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
