//! Run-once host functions and this crate's captures, on the real driver:
//!
//! - a current-stream guard leaked on a scope's ninth fork (which goes back to the context's
//!   shared pool) never lends a plain view of a stream being captured: the capture forks another
//!   stream, a stream made to wait on an event recorded through the view does not join the
//!   capture, and a run-once host function launched on it meanwhile runs once, not on every
//!   replay;
//! - a run-once host function enqueued on a stream that joined a capture between the function's
//!   capture check and its enqueue (the join made here by a raw wait on an event recorded in the
//!   capture) makes the capture fail at its end: the graph is destroyed unlaunched and the
//!   function dropped unrun.
//!
//! The second test needs another thread to stop between the check and the enqueue: this binary's
//! global allocator holds the thread that makes the closure's allocation (a closure of more than
//! 256 bytes travels in a `Box`, allocated after the check), until the test lets it go.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cuda_stream::{AsStream, CaptureMode, Error, Result, current_stream};
use cuda_stream_tests::{alone, gpu};

/// Holds the thread whose allocation of at least [`BIG`] bytes comes while [`ARMED`] is set,
/// until [`HELD`] is cleared.
struct Holding;

const BIG: usize = 600;
static ARMED: AtomicBool = AtomicBool::new(false);
static HELD: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Set on the one thread whose allocation is held.
    static MAY_HOLD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

// SAFETY: every call is passed to `System`; the hold only waits (no allocation) before it.
unsafe impl GlobalAlloc for Holding {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() >= BIG
            && MAY_HOLD.try_with(|m| m.get()).unwrap_or(false)
            && ARMED.swap(false, Ordering::SeqCst)
        {
            HELD.store(true, Ordering::SeqCst);
            while HELD.load(Ordering::SeqCst) {
                std::hint::spin_loop();
            }
        }
        // SAFETY: the caller's layout, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: allocated by `alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Holding = Holding;

fn wait_until(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::yield_now();
    }
}

#[derive(Default)]
struct Counts {
    ran: AtomicUsize,
    dropped: AtomicUsize,
}

struct DropCount(Arc<Counts>, [u8; BIG]);

impl Drop for DropCount {
    fn drop(&mut self) {
        self.0.dropped.fetch_add(1, Ordering::SeqCst);
    }
}

/// A run-once host function of more than 256 bytes (it travels in a `Box`), counting its run and
/// the drop of what it captured.
fn counting(counts: &Arc<Counts>) -> impl FnOnce() + Send + 'static {
    let token = DropCount(counts.clone(), [7; BIG]);
    move || {
        assert_eq!(token.1[BIG - 1], 7);
        token.0.ran.fetch_add(1, Ordering::SeqCst);
        drop(token);
    }
}

#[test]
fn a_leaked_guard_on_a_scopes_ninth_fork_never_lends_a_captured_stream() {
    let Some(ctx) = gpu() else { return };
    let _alone = alone();
    let counts = Arc::new(Counts::default());
    // A thread of its own: the leaked guard stays on a thread that ends.
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let main = ctx.new_stream().unwrap();
            let other = Arc::new(ctx.new_stream().unwrap());
            let mut capturing = ctx.new_stream().unwrap();
            let guarded = main
                .scope(|s| {
                    for _ in 0..8 {
                        s.fork()?;
                    }
                    let ninth = s.fork()?;
                    std::mem::forget(ninth.make_current());
                    Ok(ninth.raw() as usize)
                })
                .unwrap();
            let graph = capturing
                .capture(CaptureMode::Relaxed, |cap| {
                    cap.scope(|cs| {
                        let fork = cs.fork()?;
                        assert_ne!(fork.raw() as usize, guarded, "the capture forked it");
                        current_stream(&ctx, |cur| -> Result<()> {
                            assert_eq!(cur.raw() as usize, guarded);
                            let status = cur.capture_status()?;
                            println!("the leaked guard's stream during the capture: {status}");
                            assert!(!status.is_capturing(), "a plain view of a captured stream");
                            std::thread::scope(|inner| -> Result<()> {
                                let b = inner.spawn(|| other.launch_host_func(counting(&counts)));
                                let ev = cur.record_event()?;
                                other.wait_event(&ev)?;
                                b.join().expect("the launching thread panicked")
                            })?;
                            let status = other.capture_status()?;
                            assert!(!status.is_capturing(), "`other` joined the capture");
                            cur.wait_stream(&*other)
                        })
                    })
                })
                .unwrap();
            let exec = graph.instantiate().unwrap();
            exec.launch(&capturing).unwrap();
            exec.launch(&capturing).unwrap();
            capturing.synchronize().unwrap();
            other.synchronize().unwrap();
        });
    });
    let (ran, dropped) = (
        counts.ran.load(Ordering::SeqCst),
        counts.dropped.load(Ordering::SeqCst),
    );
    println!("the run-once host function ran {ran} time(s), dropped {dropped} time(s)");
    assert_eq!((ran, dropped), (1, 1));
}

#[test]
fn a_run_once_host_function_pulled_into_a_capture_fails_the_capture() {
    let Some(ctx) = gpu() else { return };
    let _alone = alone();
    let counts = Arc::new(Counts::default());
    let mut capturing = ctx.new_stream().unwrap();
    let other = ctx.new_stream().unwrap();
    let wait = cuda_stream::ffi::fns::cuStreamWaitEvent().unwrap();
    let r = capturing.capture(CaptureMode::Relaxed, |cap| {
        let captured = cap.record_event()?;
        std::thread::scope(|scope| -> Result<()> {
            let b = scope.spawn(|| {
                MAY_HOLD.with(|m| m.set(true));
                ARMED.store(true, Ordering::SeqCst);
                other.launch_host_func(counting(&counts))
            });
            // B has passed its capture check and is held before its enqueue.
            wait_until("the launch is held", || HELD.load(Ordering::SeqCst));
            // What a hole would do: `other` joins the capture behind the function's check.
            // SAFETY: the event is live (the capture destroys it after it ends).
            unsafe { other.as_stream().wait_event_raw(captured.raw()) }?;
            HELD.store(false, Ordering::SeqCst);
            b.join().expect("the launching thread panicked")
        })?;
        // `other` joins back, so the capture ends with a graph.
        let back = other.record_event()?;
        // SAFETY: both handles are live; the capture's stream waits for `other`'s captured work.
        let rc = unsafe { wait(cap.raw(), back.raw(), 0) };
        assert_eq!(rc, cuda_stream::ffi::CUresult::CUDA_SUCCESS);
        Ok(())
    });
    println!("the capture: {r:?}");
    assert!(
        matches!(&r, Err(Error::Refused { call, .. }) if *call == "cuStreamEndCapture"),
        "the capture returned a graph holding a run-once host function"
    );
    drop(r);
    capturing.synchronize().unwrap();
    other.synchronize().unwrap();
    let (ran, dropped) = (
        counts.ran.load(Ordering::SeqCst),
        counts.dropped.load(Ordering::SeqCst),
    );
    println!("the run-once host function ran {ran} time(s), dropped {dropped} time(s)");
    assert_eq!((ran, dropped), (0, 1));
}
