//! Run-once host functions and the crate's own captures, against the mock driver: safe code never
//! gets a plain view of a stream that is being captured, and a run-once (`FnOnce`) host function
//! never becomes a node of a graph that a capture of this crate returns (every replay would run
//! it again, from a block freed by the first run).
//!
//! - A current-stream guard leaked with `mem::forget` names its stream for the rest of the
//!   process: no pool hands that stream out again, so no capture forks it and `current_stream`
//!   never lends a view of a stream being captured (the two sequences of the review: a scope's
//!   ninth fork, and a fork of a scope nested in another).
//! - A stream that joins a capture behind the back of a run-once host function (between its
//!   capture check and its enqueue; here by raw calls, as any hole would) makes the capture fail
//!   at its end instead of returning a graph that holds the function.
//!
//! The mock's pause (`MockDriver::pause_after`) holds the host function's thread right after its
//! `cuStreamIsCapturing`, so the interleaving is the same on every run.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use cuda_mock_driver::MockDriver;
use cuda_stream::{
    AsStream, CaptureMode, Context, Error, OwnedStream, Result, StreamOptions, StreamPool,
    current_stream,
};

static LOCK: Mutex<()> = Mutex::new(());

/// Serialises the test, installs the mock as the process-wide driver (once) and resets it.
fn mock() -> (MutexGuard<'static, ()>, &'static MockDriver) {
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let m = MockDriver::global();
    m.reset();
    (guard, m)
}

/// Runs `f` on a new thread (no per-thread scope state, no current stream yet): the guards the
/// tests leak stay on threads that have ended.
fn on_new_thread<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| s.spawn(f).join().expect("the thread panicked"))
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// Counts runs and drops of a run-once host function.
#[derive(Default)]
struct Counts {
    ran: AtomicUsize,
    dropped: AtomicUsize,
}

struct DropCount(Arc<Counts>);

impl Drop for DropCount {
    fn drop(&mut self) {
        self.0.dropped.fetch_add(1, Ordering::SeqCst);
    }
}

/// A run-once host function that counts its run and the drop of what it captured.
fn counting(counts: &Arc<Counts>) -> impl FnOnce() + Send + 'static {
    let token = DropCount(counts.clone());
    move || {
        token.0.ran.fetch_add(1, Ordering::SeqCst);
        drop(token);
    }
}

/// The review's sequence from inside a capture's fork scope: `current_stream` (whose guard was
/// leaked on `guarded`) must not be a stream of the capture; an event recorded through it is
/// waited for by `other` while another thread's run-once host function on `other` sits between
/// its capture check and its enqueue; then `other` is waited for through the view.
fn the_sequence(
    m: &MockDriver,
    ctx: &Context,
    capturing: &mut OwnedStream,
    other: &Arc<OwnedStream>,
    guarded: usize,
    counts: &Arc<Counts>,
) {
    let graph = capturing
        .capture(CaptureMode::Relaxed, |cap| {
            cap.scope(|cs| {
                let fork = cs.fork()?;
                assert_ne!(
                    fork.raw() as usize,
                    guarded,
                    "the capture forked the stream a leaked guard names"
                );
                current_stream(ctx, |cur| -> Result<()> {
                    assert_eq!(cur.raw() as usize, guarded, "the leaked guard's stream");
                    let status = cur.capture_status()?;
                    assert!(
                        !status.is_capturing(),
                        "current_stream lent a plain view of a stream being captured ({status})"
                    );
                    m.pause_after("cuStreamIsCapturing");
                    std::thread::scope(|scope| -> Result<()> {
                        let b = scope.spawn(|| other.launch_host_func(counting(counts)));
                        wait_until("the host function's capture check", || m.paused());
                        let ev = cur.record_event()?;
                        other.wait_event(&ev)?;
                        m.resume();
                        b.join().expect("the launching thread panicked")
                    })?;
                    cur.wait_stream(&**other)
                })
            })
        })
        .expect("the capture");
    let exec = graph.instantiate().unwrap();
    exec.launch(&*capturing).unwrap();
    exec.launch(&*capturing).unwrap();
    capturing.synchronize().unwrap();
    other.synchronize().unwrap();
    assert_eq!(
        (
            counts.ran.load(Ordering::SeqCst),
            counts.dropped.load(Ordering::SeqCst)
        ),
        (1, 1),
        "the run-once host function ran other than once, as it was launched"
    );
}

/// The review's first sequence: a scope's ninth fork goes back to the context's shared pool
/// with its guard leaked.
#[test]
fn a_leaked_guard_on_a_scopes_ninth_fork_never_reaches_a_capture() {
    let (_lock, m) = mock();
    on_new_thread(|| {
        let ctx = Context::primary(0).unwrap();
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
        let counts = Arc::new(Counts::default());
        the_sequence(m, &ctx, &mut capturing, &other, guarded, &counts);
    });
}

/// The review's second sequence: a scope nested in another on the same pool leases its forks,
/// and gives back one whose guard was leaked.
#[test]
fn a_leaked_guard_in_a_nested_scope_never_reaches_a_capture() {
    let (_lock, m) = mock();
    on_new_thread(|| {
        let ctx = Context::primary(0).unwrap();
        let main = ctx.new_stream().unwrap();
        let other = Arc::new(ctx.new_stream().unwrap());
        let mut capturing = ctx.new_stream().unwrap();
        let guarded = main
            .scope(|_| {
                main.scope(|inner| {
                    let fork = inner.fork()?;
                    std::mem::forget(fork.make_current());
                    Ok(fork.raw() as usize)
                })
            })
            .unwrap();
        let counts = Arc::new(Counts::default());
        the_sequence(m, &ctx, &mut capturing, &other, guarded, &counts);
    });
}

#[test]
fn a_stream_pool_never_hands_out_a_stream_a_leaked_guard_names() {
    let (_lock, _m) = mock();
    on_new_thread(|| {
        let ctx = Context::primary(0).unwrap();
        let pool = StreamPool::new(&ctx, StreamOptions::new());
        let lease = pool.acquire().unwrap();
        let guarded = lease.raw();
        std::mem::forget(lease.make_current());
        drop(lease);
        let leases: Vec<_> = (0..4).map(|_| pool.acquire().unwrap()).collect();
        assert!(
            leases.iter().all(|l| l.raw() != guarded),
            "the pool handed out the stream a leaked guard names"
        );
    });
}

/// The deeper rule, whatever lets a stream join a capture: a run-once host function `f`
/// enqueued on it after its check said "not capturing" becomes a node, and the capture refuses
/// to return the graph.
fn pulled_into_a_capture<F: FnOnce() + Send + 'static>(m: &MockDriver, f: F) {
    let ctx = Context::primary(0).unwrap();
    let mut capturing = ctx.new_stream().unwrap();
    let other = ctx.new_stream().unwrap();
    let wait = cuda_stream::ffi::fns::cuStreamWaitEvent().unwrap();
    let r = capturing.capture(CaptureMode::Relaxed, |cap| {
        let captured = cap.record_event()?;
        m.pause_after("cuStreamIsCapturing");
        std::thread::scope(|scope| -> Result<()> {
            let b = scope.spawn(|| other.launch_host_func(f));
            wait_until("the host function's capture check", || m.paused());
            // What a hole would do: `other` joins the capture behind the function's check.
            // SAFETY: the event is live (the capture destroys it after it ends).
            unsafe { other.as_stream().wait_event_raw(captured.raw()) }?;
            m.resume();
            b.join().expect("the launching thread panicked")
        })?;
        // `other` joins back, so the capture ends with a graph.
        let back = other.record_event()?;
        // SAFETY: both handles are live; the capture's stream waits for `other`'s captured work.
        let rc = unsafe { wait(cap.raw(), back.raw(), 0) };
        assert_eq!(rc, cuda_stream::ffi::CUresult::CUDA_SUCCESS);
        Ok(())
    });
    match &r {
        Err(Error::Refused { call, .. }) if *call == "cuStreamEndCapture" => {}
        _ => panic!("the capture returned a graph holding a run-once host function: {r:?}"),
    }
    drop(r);
    assert_eq!(m.live_graphs(), 0);
    capturing.synchronize().unwrap();
    other.synchronize().unwrap();
    assert_eq!(m.host_fn_api_calls(), 0);
}

/// A closure that captures data (it travels in a block): dropped unrun at the capture's end.
#[test]
fn a_run_once_host_function_pulled_into_a_capture_fails_the_capture() {
    let (_lock, m) = mock();
    let counts = Arc::new(Counts::default());
    pulled_into_a_capture(m, counting(&counts));
    assert_eq!(
        (
            counts.ran.load(Ordering::SeqCst),
            counts.dropped.load(Ordering::SeqCst)
        ),
        (0, 1),
        "the run-once host function ran, or was not dropped once"
    );
}

/// A closure that captures nothing but a zero-sized value with a destructor (it travels in no
/// block at all): dropped unrun at the capture's end too.
#[test]
fn a_zero_sized_run_once_host_function_pulled_into_a_capture_fails_the_capture() {
    static RAN: AtomicUsize = AtomicUsize::new(0);
    static DROPPED: AtomicUsize = AtomicUsize::new(0);
    struct Token;
    impl Drop for Token {
        fn drop(&mut self) {
            DROPPED.fetch_add(1, Ordering::SeqCst);
        }
    }
    let (_lock, m) = mock();
    let token = Token;
    let f = move || {
        let _token = token;
        RAN.fetch_add(1, Ordering::SeqCst);
    };
    assert_eq!(std::mem::size_of_val(&f), 0);
    pulled_into_a_capture(m, f);
    assert_eq!(
        (RAN.load(Ordering::SeqCst), DROPPED.load(Ordering::SeqCst)),
        (0, 1),
        "the run-once host function ran, or was not dropped once"
    );
}
