//! `host_fn_wake`: does a host function that is to wake a parked thread run? In raw driver calls
//! only (no code of cuda-stream), the reproduction of two hangs seen only under
//! compute-sanitizer on the H100 (driver 580), so that they can be told to be the sanitizer's
//! doing or this crate's:
//!
//! - `completion`'s `completed_on_a_default_stream_from_a_thread_without_context` timed out (120
//!   s, `--test-threads=1`) under synccheck, and is skipped under racecheck for it: a thread with
//!   no context current enqueues a late kernel on its per-thread default stream, then waits for
//!   it with `completed()`, whose host function (on a notifier stream after a wait for an event
//!   recorded behind the kernel, or on the stream itself when no event can be had) unparks it;
//! - the `completion` binary with parallel tests timed out (25 s; about 2 s when it passes) in 5
//!   of 12 synccheck and 4 of 8 memcheck runs, and never without a sanitizer: several threads
//!   doing the same at once, their host functions on one notifier stream of the context.
//!
//! ```sh
//! gpu-bundle/bin/host_fn_wake                      # plainly, then under each tool:
//! compute-sanitizer --tool synccheck gpu-bundle/bin/host_fn_wake
//! compute-sanitizer --tool memcheck  gpu-bundle/bin/host_fn_wake
//! compute-sanitizer --tool racecheck gpu-bundle/bin/host_fn_wake
//! gpu-bundle/bin/host_fn_wake --wait-s 20 --rounds 20   # longer waits, more rounds
//! ```
//!
//! `--unload CASE` asks the question behind the teardown hang found later: does
//! `cuModuleUnload` return once a thread that ran the module's kernel on its per-thread default
//! stream (woken through an event and a notifier stream's host function) has exited? See
//! [`teardown::unload`].
//!
//! `--exit-pending MODE` asks the question behind the random programs' hang under every tool:
//! does a call that waits for the device return once a thread that left work running on its
//! per-thread default stream has exited? See [`teardown::exit_pending`].
//!
//! Each case waits at most `--wait-s` seconds (default 10) for each host function, and prints
//! `VERDICT <case>: ran ...` or `VERDICT <case>: NEVER RAN ...`; the program exits 0 when every
//! host function ran, 1 when one never did, and aborts after a hard limit (every case's waits
//! plus 60 s) if a driver call itself hangs. A host function that never ran is left pending; the
//! process exits without waiting for it.

use std::ffi::{CString, c_int, c_void};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread::Thread;
use std::time::{Duration, Instant};

use cuda_stream_sys::{self as sys, CUcontext, CUfunction, CUresult, CUstream};

const OK: CUresult = CUresult::CUDA_SUCCESS;

/// `spin(ns)`: one thread busy-waits on `%globaltimer` for `ns` nanoseconds; `spin_store(ns, p)`
/// then stores 3 at `p`.
const PTX: &str = r#"
.version 7.0
.target sm_52
.address_size 64
.visible .entry spin(
	.param .u64 spin_param_0
)
{
	.reg .pred 	%p<2>;
	.reg .b64 	%rd<5>;
	ld.param.u64 	%rd1, [spin_param_0];
	mov.u64 	%rd2, %globaltimer;
$L_spin_loop:
	mov.u64 	%rd3, %globaltimer;
	sub.u64 	%rd4, %rd3, %rd2;
	setp.lt.u64 	%p1, %rd4, %rd1;
	@%p1 bra 	$L_spin_loop;
	ret;
}
.visible .entry spin_store(
	.param .u64 spin_store_param_0,
	.param .u64 spin_store_param_1
)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<2>;
	.reg .b64 	%rd<7>;
	ld.param.u64 	%rd1, [spin_store_param_0];
	ld.param.u64 	%rd5, [spin_store_param_1];
	cvta.to.global.u64 	%rd6, %rd5;
	mov.u64 	%rd2, %globaltimer;
$L_store_loop:
	mov.u64 	%rd3, %globaltimer;
	sub.u64 	%rd4, %rd3, %rd2;
	setp.lt.u64 	%p1, %rd4, %rd1;
	@%p1 bra 	$L_store_loop;
	mov.u32 	%r1, 3;
	st.global.u32 	[%rd6], %r1;
	ret;
}
"#;

/// The per-thread default stream (`CU_STREAM_PER_THREAD`).
const PER_THREAD: usize = 2;

#[track_caller]
fn ok(rc: CUresult, what: &str) {
    assert_eq!(rc, OK, "{what}: {}", sys::result_name(rc));
}

/// The context and the kernel every case uses.
#[derive(Clone, Copy)]
struct Gpu {
    ctx: CUcontext,
    module: sys::CUmodule,
    spin: CUfunction,
    spin_store: CUfunction,
    /// Where `spin` stores (with `spin_store`), or 0: it only spins.
    store_to: u64,
}

// SAFETY: driver handles, usable from any thread.
unsafe impl Send for Gpu {}
// SAFETY: as above.
unsafe impl Sync for Gpu {}

impl Gpu {
    fn new() -> Gpu {
        // SAFETY: raw driver calls with valid out-pointers; the context is made current for the
        // module load only.
        unsafe {
            ok(sys::cuInit(0), "cuInit");
            let mut dev = 0;
            ok(sys::cuDeviceGet(&mut dev, 0), "cuDeviceGet");
            let mut ctx = ptr::null_mut();
            ok(
                sys::cuDevicePrimaryCtxRetain(&mut ctx, dev),
                "cuDevicePrimaryCtxRetain",
            );
            ok(sys::cuCtxPushCurrent(ctx), "cuCtxPushCurrent");
            let src = CString::new(PTX).unwrap();
            let mut m = ptr::null_mut();
            ok(
                sys::cuModuleLoadDataEx(
                    &mut m,
                    src.as_ptr().cast(),
                    0,
                    ptr::null_mut(),
                    ptr::null_mut(),
                ),
                "cuModuleLoadDataEx",
            );
            let mut spin = ptr::null_mut();
            ok(
                sys::cuModuleGetFunction(&mut spin, m, c"spin".as_ptr()),
                "cuModuleGetFunction",
            );
            let mut popped = ptr::null_mut();
            ok(sys::cuCtxPopCurrent(&mut popped), "cuCtxPopCurrent");
            let mut spin_store = ptr::null_mut();
            ok(
                sys::cuModuleGetFunction(&mut spin_store, m, c"spin_store".as_ptr()),
                "cuModuleGetFunction",
            );
            Gpu {
                ctx,
                module: m,
                spin,
                spin_store,
                store_to: 0,
            }
        }
    }

    /// Makes the context current until the returned guard drops (which pops it).
    fn bind(&self) -> Bound {
        // SAFETY: a live context.
        ok(
            unsafe { sys::cuCtxPushCurrent(self.ctx) },
            "cuCtxPushCurrent",
        );
        Bound
    }

    /// `spin<<<1, 1>>>(d)` on `s` (the context current for a default stream).
    fn spin(&self, s: CUstream, d: Duration) {
        let mut ns = d.as_nanos() as u64;
        let mut p = self.store_to;
        let mut args = [
            (&raw mut ns).cast::<c_void>(),
            (&raw mut p).cast::<c_void>(),
        ];
        let f = if p == 0 { self.spin } else { self.spin_store };
        // SAFETY: `spin` takes one u64, `spin_store` a u64 and a pointer to 4 writable bytes;
        // `args` outlives the call.
        let rc = unsafe {
            sys::cuLaunchKernel(
                f,
                1,
                1,
                1,
                1,
                1,
                1,
                0,
                s,
                args.as_mut_ptr(),
                ptr::null_mut(),
            )
        };
        ok(rc, "cuLaunchKernel");
    }

    /// A new non-blocking stream (made with the context current, which is undone).
    fn stream(&self) -> CUstream {
        let _b = self.bind();
        let mut s = ptr::null_mut();
        // SAFETY: a valid out-pointer; the context is current.
        ok(unsafe { sys::cuStreamCreate(&mut s, 1) }, "cuStreamCreate");
        s
    }

    /// A new event without timing.
    fn event(&self) -> sys::CUevent {
        let _b = self.bind();
        let mut e = ptr::null_mut();
        // SAFETY: a valid out-pointer; the context is current.
        ok(unsafe { sys::cuEventCreate(&mut e, 2) }, "cuEventCreate");
        e
    }
}

struct Bound;

impl Drop for Bound {
    fn drop(&mut self) {
        let mut c = ptr::null_mut();
        // SAFETY: a valid out-pointer; `bind` pushed a context.
        unsafe { sys::cuCtxPopCurrent(&mut c) };
    }
}

fn current() -> CUcontext {
    let mut c = ptr::null_mut();
    // SAFETY: a valid out-pointer.
    ok(unsafe { sys::cuCtxGetCurrent(&mut c) }, "cuCtxGetCurrent");
    c
}

/// What a host function sets and whom it wakes.
struct Wake {
    ran: AtomicBool,
    /// Microseconds from `start` to the run.
    ran_at_us: AtomicU64,
    start: Instant,
    thread: Thread,
}

/// The host function: marks the run and unparks the waiting thread (no CUDA call).
extern "C" fn wake(data: *mut c_void) {
    // SAFETY: `data` is an `Arc<Wake>` leaked by `enqueue_wake`, taken back once here.
    let w = unsafe { Arc::from_raw(data.cast::<Wake>()) };
    w.ran_at_us
        .store(w.start.elapsed().as_micros() as u64, Ordering::SeqCst);
    w.ran.store(true, Ordering::SeqCst);
    w.thread.unpark();
}

/// Enqueues `wake` on `s` for `w` (the context current for a default stream).
fn enqueue_wake(s: CUstream, w: &Arc<Wake>) {
    let data = Arc::into_raw(w.clone()).cast_mut().cast::<c_void>();
    // SAFETY: `wake` takes the `Arc` back exactly once, when it runs.
    ok(
        unsafe { sys::cuLaunchHostFunc(s, Some(wake), data) },
        "cuLaunchHostFunc",
    );
}

/// How the waiting thread waits.
#[derive(Clone, Copy, PartialEq)]
enum Wait {
    /// `std::thread::park()` until unparked (as `block_on` does), a watchdog unparking it at
    /// the deadline.
    Park,
    /// A busy loop on the flag.
    Spin,
}

/// Waits for `w` as `how`, at most `limit`: the run's time in ms, or `None`.
fn wait_for(w: &Arc<Wake>, how: Wait, limit: Duration) -> Option<f64> {
    let deadline = Instant::now() + limit;
    let timed_out = Arc::new(AtomicBool::new(false));
    let watchdog = (how == Wait::Park).then(|| {
        let (t, me) = (timed_out.clone(), std::thread::current());
        std::thread::spawn(move || {
            while Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
                if t.load(Ordering::SeqCst) {
                    return;
                }
            }
            t.store(true, Ordering::SeqCst);
            me.unpark();
        })
    });
    while !w.ran.load(Ordering::SeqCst) && !timed_out.load(Ordering::SeqCst) {
        match how {
            Wait::Park => std::thread::park(),
            Wait::Spin if Instant::now() >= deadline => break,
            Wait::Spin => std::hint::spin_loop(),
        }
    }
    timed_out.store(true, Ordering::SeqCst);
    if let Some(h) = watchdog {
        let _ = h.join();
    }
    w.ran
        .load(Ordering::SeqCst)
        .then(|| w.ran_at_us.load(Ordering::SeqCst) as f64 / 1000.0)
}

/// Where the waking host function goes.
#[derive(Clone, Copy)]
enum Route {
    /// On the kernel's stream itself, behind the kernel.
    Direct,
    /// On `notifier`, after a wait for an event recorded behind the kernel (what `completed()`
    /// does once its spin gives up).
    Notifier(usize),
}

/// One waiting thread's run: starts with no context current, enqueues a late kernel on `stream`
/// (0x2: its per-thread default stream) and the waking host function by `route`, drops the
/// context if `pop`, then waits as `how`. The run's time in ms, or `None`.
fn one(
    gpu: &Gpu,
    stream: usize,
    route: Route,
    pop: bool,
    how: Wait,
    limit: Duration,
) -> Option<f64> {
    assert!(current().is_null(), "a fresh thread has no context current");
    let s = stream as CUstream;
    let w = Arc::new(Wake {
        ran: AtomicBool::new(false),
        ran_at_us: AtomicU64::new(0),
        start: Instant::now(),
        thread: std::thread::current(),
    });
    let bound = gpu.bind();
    gpu.spin(s, Duration::from_millis(100));
    let event = match route {
        // On the kernel's stream, which a default stream resolves through the current context.
        Route::Direct => {
            enqueue_wake(s, &w);
            None
        }
        Route::Notifier(_) => {
            let e = gpu.event();
            // SAFETY: a live event and stream of the current context.
            ok(unsafe { sys::cuEventRecord(e, s) }, "cuEventRecord");
            Some(e)
        }
    };
    // As `completed()` does: the context is popped after the record, and the notifier stream
    // (an explicit handle, which needs none) is given its wait and host function after.
    let kept = if pop {
        drop(bound);
        None
    } else {
        Some(bound)
    };
    if let (Route::Notifier(n), Some(e)) = (route, event) {
        // SAFETY: a live event and a live stream of its context.
        ok(
            unsafe { sys::cuStreamWaitEvent(n as CUstream, e, 0) },
            "cuStreamWaitEvent",
        );
        enqueue_wake(n as CUstream, &w);
    }
    let r = wait_for(&w, how, limit);
    drop(kept);
    r
}

/// The results of `n` threads running `one` at once, `rounds` times: host functions that ran
/// and the slowest, and those that never ran.
fn case(
    name: &str,
    gpu: &Gpu,
    threads: usize,
    rounds: usize,
    f: impl Fn(usize) -> (usize, Route, bool, Wait) + Sync,
    limit: Duration,
) -> bool {
    let (mut ran, mut never, mut slowest) = (0usize, 0usize, 0f64);
    for _ in 0..rounds {
        let barrier = Barrier::new(threads);
        let results: Vec<Option<f64>> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..threads)
                .map(|i| {
                    let (f, barrier) = (&f, &barrier);
                    sc.spawn(move || {
                        let (stream, route, pop, how) = f(i);
                        barrier.wait();
                        one(gpu, stream, route, pop, how, limit)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for r in results {
            match r {
                Some(ms) => {
                    ran += 1;
                    slowest = slowest.max(ms);
                }
                None => never += 1,
            }
        }
        if never > 0 {
            break;
        }
    }
    if never == 0 {
        println!(
            "VERDICT {name}: ran ({ran} host functions; the slowest ran {slowest:.1} ms after \
             its thread enqueued the 100 ms kernel)"
        );
    } else {
        println!(
            "VERDICT {name}: NEVER RAN ({never} host functions pending after {} s; {ran} ran, \
             the slowest {slowest:.1} ms)",
            limit.as_secs()
        );
    }
    never == 0
}

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| v.parse().expect("a number"))
}

mod teardown;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--exit-pending") {
        let mode = args.get(i + 1).map_or("ctx-sync", String::as_str);
        std::process::exit(if teardown::exit_pending(mode) { 0 } else { 1 });
    }
    if let Some(i) = args.iter().position(|a| a == "--unload") {
        let case = args.get(i + 1).map_or("per-thread", String::as_str);
        let ok = teardown::unload(case, Duration::from_secs(arg("--wait-s", 10)));
        std::process::exit(if ok { 0 } else { 1 });
    }
    let limit = Duration::from_secs(arg("--wait-s", 10));
    let rounds = arg("--rounds", 5) as usize;
    let gpu = Gpu::new();
    let name = {
        let mut buf = [0 as std::ffi::c_char; 128];
        // SAFETY: a buffer of 128 bytes; device 0 exists (Gpu::new).
        ok(
            unsafe { sys::cuDeviceGetName(buf.as_mut_ptr(), 128, 0 as c_int) },
            "cuDeviceGetName",
        );
        // SAFETY: the driver wrote a NUL-terminated name.
        unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    };
    let mut version = 0;
    // SAFETY: a valid out-pointer.
    ok(
        unsafe { sys::cuDriverGetVersion(&mut version) },
        "cuDriverGetVersion",
    );
    let tool = std::env::var("CUDA_STREAM_UNDER_SANITIZER").unwrap_or_default();
    println!(
        "host_fn_wake: {name}, CUDA {}.{}, wait {} s per host function, {rounds} rounds{}",
        version / 1000,
        version % 1000 / 10,
        limit.as_secs(),
        if tool.is_empty() {
            String::new()
        } else {
            format!(" (CUDA_STREAM_UNDER_SANITIZER={tool})")
        }
    );
    // A hard limit, should a driver call itself hang: every case's waits, and a minute.
    let cases = 9u64;
    let hard = limit * (cases * rounds as u64) as u32 + Duration::from_secs(60);
    std::thread::spawn(move || {
        std::thread::sleep(hard);
        println!("VERDICT host_fn_wake: HUNG (a driver call did not return within {hard:?})");
        std::process::abort();
    });
    let notifier = gpu.stream() as usize;
    let own: Vec<usize> = (0..4).map(|_| gpu.stream() as usize).collect();
    let notifiers: Vec<usize> = (0..4).map(|_| gpu.stream() as usize).collect();
    let mut all = true;
    // One thread: the failing test's pattern, and what tells its parts apart.
    all &= case(
        "per-thread stream, host function on it, context popped, thread parked",
        &gpu,
        1,
        rounds,
        |_| (PER_THREAD, Route::Direct, true, Wait::Park),
        limit,
    );
    all &= case(
        "per-thread stream, event + notifier stream + host function, context popped, parked",
        &gpu,
        1,
        rounds,
        |_| (PER_THREAD, Route::Notifier(notifier), true, Wait::Park),
        limit,
    );
    all &= case(
        "per-thread stream, host function on it, context popped, thread spinning",
        &gpu,
        1,
        rounds,
        |_| (PER_THREAD, Route::Direct, true, Wait::Spin),
        limit,
    );
    all &= case(
        "per-thread stream, host function on it, context kept current, thread parked",
        &gpu,
        1,
        rounds,
        |_| (PER_THREAD, Route::Direct, false, Wait::Park),
        limit,
    );
    all &= case(
        "created stream, host function on it, context popped, thread parked",
        &gpu,
        1,
        rounds,
        |_| (own[0], Route::Direct, true, Wait::Park),
        limit,
    );
    // Four threads at once: the parallel tests of the `completion` binary.
    all &= case(
        "4 threads, created streams, one shared notifier stream, parked",
        &gpu,
        4,
        rounds,
        |i| (own[i], Route::Notifier(notifier), true, Wait::Park),
        limit,
    );
    all &= case(
        "4 threads, created streams, a notifier stream each, parked",
        &gpu,
        4,
        rounds,
        |i| (own[i], Route::Notifier(notifiers[i]), true, Wait::Park),
        limit,
    );
    all &= case(
        "4 threads, per-thread streams, one shared notifier stream, parked",
        &gpu,
        4,
        rounds,
        |_| (PER_THREAD, Route::Notifier(notifier), true, Wait::Park),
        limit,
    );
    all &= case(
        "4 threads, per-thread streams, host functions on them, parked",
        &gpu,
        4,
        rounds,
        |_| (PER_THREAD, Route::Direct, true, Wait::Park),
        limit,
    );
    println!(
        "host_fn_wake: {}",
        if all {
            "every host function ran"
        } else {
            "a host function never ran (see the NEVER RAN verdicts)"
        }
    );
    // Exits without synchronising: a host function that never ran stays pending.
    std::process::exit(if all { 0 } else { 1 });
}
