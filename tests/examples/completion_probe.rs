//! `completion_probe`: which part of `completed()` on a default stream never finishes under
//! compute-sanitizer? The crate's own path, step by step, in the shape of the `completion` test
//! that hangs (`completed_on_a_default_stream_from_a_thread_without_context`): a fresh thread with
//! no context current enqueues a 100 ms kernel on a stream, then waits for the stream's
//! `completed()` future by parking until it is woken.
//!
//! ```sh
//! gpu-bundle/bin/completion_probe test owned event host_fn test     # cases in this order
//! compute-sanitizer --tool racecheck gpu-bundle/bin/completion_probe test
//! ```
//!
//! `--on-thread` runs it all on a spawned thread, as a test harness runs a test. `--teardown` drops the test helpers' buffer and module and the context after the cases, as the
//! test does when its body returns, with times.
//!
//! Cases: `test` (the test's pattern, per-thread default stream), `spin0` (the same without the
//! first poll's spin), `owned` (an owned non-blocking stream), `legacy` (the null stream),
//! `event` (an event recorded on the per-thread stream, then its `completed()`), `host_fn` (a
//! host function on the per-thread stream itself, no future). Each prints its stages with times;
//! one whose wake does not come within `--wait-s` (default 15) says what it finds then: whether
//! the work is complete by query, and whether polling without a wake resolves it.
//!
//! `release` (alone, in raw driver calls, before anything retains the primary context): does the
//! release of a primary context's last reference wait for the context's queued work? A host
//! function that sleeps 200 ms is queued, then a stream-ordered free behind it, then the last
//! reference is released; the release's duration answers.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::{Duration, Instant};

use cuda_stream::{AsStream, Completion, Context, Stream};
use cuda_stream_tests::{DeviceBuffer, Kernels, current_context, gpu};

const SPIN: Duration = Duration::from_millis(100);

struct Counter {
    thread: Thread,
    wakes: AtomicUsize,
}

impl Wake for Counter {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
        self.thread.unpark();
    }
}

fn say(start: Instant, case: &str, what: &str) {
    println!(
        "  {case} +{:>8.1} ms: {what}",
        start.elapsed().as_secs_f64() * 1e3
    );
}

/// Polls `fut` as the test's `block_on` does (park until woken), at most `limit`; then reports
/// and polls every 10 ms for as long again. Whether it finished by a wake.
fn wait(case: &str, start: Instant, fut: Completion, limit: Duration) -> bool {
    let counter = Arc::new(Counter {
        thread: std::thread::current(),
        wakes: AtomicUsize::new(0),
    });
    let waker = Waker::from(counter.clone());
    let mut cx = TaskContext::from_waker(&waker);
    let mut fut = pin!(fut);
    let deadline = Instant::now() + limit;
    let mut polls = 0;
    loop {
        polls += 1;
        match fut.as_mut().poll(&mut cx) {
            Poll::Ready(r) => {
                say(
                    start,
                    case,
                    &format!(
                        "ready {r:?} after {polls} polls, {} wakes",
                        counter.wakes.load(Ordering::SeqCst)
                    ),
                );
                return true;
            }
            Poll::Pending if polls == 1 => say(start, case, "first poll: pending (armed)"),
            Poll::Pending => {}
        }
        let seen = counter.wakes.load(Ordering::SeqCst);
        while counter.wakes.load(Ordering::SeqCst) == seen && Instant::now() < deadline {
            std::thread::park_timeout(deadline.saturating_duration_since(Instant::now()));
        }
        if Instant::now() >= deadline && counter.wakes.load(Ordering::SeqCst) == seen {
            break;
        }
    }
    say(
        start,
        case,
        &format!(
            "NO WAKE within {limit:?} ({polls} polls); complete by query: {}",
            fut.is_complete()
        ),
    );
    let again = Instant::now() + limit;
    while Instant::now() < again {
        if let Poll::Ready(r) = fut.as_mut().poll(&mut cx) {
            say(start, case, &format!("polling without a wake: ready {r:?}"));
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    say(start, case, "polling without a wake: still pending");
    false
}

fn run(
    case: &str,
    ctx: &Context,
    k: &Kernels<'_>,
    buf: &DeviceBuffer<'_>,
    limit: Duration,
) -> bool {
    let start = Instant::now();
    assert!(current_context().is_null(), "a fresh thread");
    let owned;
    let s: Stream<'_> = match case {
        "owned" => {
            owned = ctx.new_stream().unwrap();
            owned.as_stream()
        }
        "legacy" => ctx.null_stream(),
        _ => ctx.per_thread_stream(),
    };
    k.store_after_spin(s, buf.ptr(), 3, SPIN);
    say(start, case, "kernel enqueued");
    let ok = match case {
        "event" => {
            let e = s.record_event().unwrap();
            say(start, case, "event recorded");
            wait(case, start, e.completed(), limit)
        }
        "host_fn" => {
            let ran = Arc::new(AtomicBool::new(false));
            let (r, me) = (ran.clone(), std::thread::current());
            s.launch_host_func(move || {
                r.store(true, Ordering::SeqCst);
                me.unpark();
            })
            .unwrap();
            say(start, case, "host function enqueued");
            let deadline = Instant::now() + limit;
            while !ran.load(Ordering::SeqCst) && Instant::now() < deadline {
                std::thread::park_timeout(Duration::from_millis(100));
            }
            let ok = ran.load(Ordering::SeqCst);
            say(
                start,
                case,
                if ok {
                    "host function ran"
                } else {
                    "HOST FUNCTION NEVER RAN"
                },
            );
            ok
        }
        _ => {
            let f = s.completed();
            say(start, case, "completed() made");
            let f = if case == "spin0" {
                f.spin_limit(Duration::ZERO)
            } else {
                f
            };
            wait(case, start, f, limit)
        }
    };
    let v = buf.get(0);
    say(
        start,
        case,
        &format!("value {v}, context current: {:?}", current_context()),
    );
    ok
}

/// The `release` case, in raw driver calls.
fn release() {
    use cuda_stream_sys as sys;
    unsafe extern "C" fn sleep_200ms(_: *mut std::ffi::c_void) {
        std::thread::sleep(Duration::from_millis(200));
    }
    let ok = |rc: sys::CUresult, what: &str| {
        assert_eq!(rc, sys::CUresult::CUDA_SUCCESS, "{what}");
    };
    // SAFETY: raw driver calls with valid out-pointers, each handle used while alive.
    unsafe {
        ok(sys::cuInit(0), "cuInit");
        let mut ctx = std::ptr::null_mut();
        ok(sys::cuDevicePrimaryCtxRetain(&mut ctx, 0), "retain");
        ok(sys::cuCtxPushCurrent(ctx), "push");
        let mut s = std::ptr::null_mut();
        ok(sys::cuStreamCreate(&mut s, 1), "cuStreamCreate");
        let mut p = 0;
        ok(sys::cuMemAllocAsync(&mut p, 1 << 20, s), "cuMemAllocAsync");
        ok(
            sys::cuLaunchHostFunc(s, Some(sleep_200ms), std::ptr::null_mut()),
            "host fn",
        );
        ok(sys::cuMemFreeAsync(p, s), "cuMemFreeAsync");
        ok(sys::cuStreamDestroy(s), "cuStreamDestroy");
        let mut popped = std::ptr::null_mut();
        ok(sys::cuCtxPopCurrent(&mut popped), "pop");
        let t = Instant::now();
        let rc = sys::cuDevicePrimaryCtxRelease(0);
        let took = t.elapsed();
        println!(
            "release: the last release with a 200 ms host function and a free queued took {:.1} \
             ms ({})",
            took.as_secs_f64() * 1e3,
            sys::result_name(rc)
        );
        println!(
            "VERDICT release: {}",
            if took >= Duration::from_millis(150) {
                "waited for the queued work"
            } else {
                "DID NOT WAIT"
            }
        );
    }
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("release") {
        release();
        return;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut limit = Duration::from_secs(15);
    let mut cases = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--wait-s" {
            limit = Duration::from_secs(it.next().expect("seconds").parse().expect("a number"));
        } else {
            cases.push(a.clone());
        }
    }
    if cases.is_empty() {
        cases = [
            "test", "spin0", "owned", "legacy", "event", "host_fn", "test",
        ]
        .map(String::from)
        .to_vec();
    }
    let hard = limit * 2 * cases.len() as u32 + Duration::from_secs(30);
    std::thread::spawn(move || {
        std::thread::sleep(hard);
        println!("completion_probe: HUNG (a call did not return within {hard:?})");
        std::process::abort();
    });
    let on_thread = cases.iter().any(|c| c == "--on-thread");
    cases.retain(|c| c != "--on-thread");
    if on_thread {
        // Everything below on a spawned thread, as a test harness runs a test.
        let code = std::thread::spawn(move || body(cases, limit))
            .join()
            .unwrap_or(1);
        std::process::exit(code);
    }
    std::process::exit(body(cases, limit));
}

fn body(mut cases: Vec<String>, limit: Duration) -> i32 {
    let Some(ctx) = gpu() else {
        return 2;
    };
    let k = Kernels::load(&ctx);
    let buf = DeviceBuffer::new(&ctx, 1);
    let teardown = cases.iter().any(|c| c == "--teardown");
    cases.retain(|c| c != "--teardown");
    let mut all = true;
    for case in &cases {
        println!("case {case}");
        let ok = std::thread::scope(|sc| sc.spawn(|| run(case, &ctx, &k, &buf, limit)).join());
        let ok = ok.unwrap_or(false);
        println!("VERDICT {case}: {}", if ok { "woken" } else { "NOT WOKEN" });
        all &= ok;
    }
    if teardown {
        // What the test does after its body and the probe otherwise skips: the helpers' drops
        // (`cuMemFree`, `cuModuleUnload`, each with the context bound) and the context's.
        let t = Instant::now();
        let at = |what: &str| {
            println!(
                "teardown +{:>8.1} ms: {what}",
                t.elapsed().as_secs_f64() * 1e3
            )
        };
        drop(buf);
        at("buffer freed (cuMemFree)");
        drop(k);
        at("module unloaded (cuModuleUnload)");
        drop(ctx);
        at("context released");
    }
    i32::from(!all)
}
