//! Host functions and completion futures of `cuda-stream` against the mock driver, whose host
//! functions run on a worker thread of their own, one at a time, in the order they were queued:
//! the recycled blocks that carry capturing closures to that thread, and the bounded spin of a
//! `Completion`'s first poll before it waits for its wake-up.
//!
//! A "gate" is a host function that holds the mock's worker (so every host function queued after
//! it, on any stream) until the test opens it: it decides when work completes.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::{Duration, Instant};

use cuda_mock_driver::{MockDriver, Serialized};
use cuda_stream::ffi::CUresult;
use cuda_stream::{AsStream, Completion, Context, Error, OwnedStream, Stream};

const FAULT: CUresult = CUresult::CUDA_ERROR_LAUNCH_FAILED;

static LOCK: Mutex<()> = Mutex::new(());

/// Serialises the test (the mock's state is process-wide), installs the mock as the process-wide
/// driver (once) and resets it.
fn mock() -> (Serialized, &'static MockDriver) {
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let m = MockDriver::global();
    m.reset();
    (m.checked(guard), m)
}

/// Waits until `done` holds, parking between checks (a waker that unparks this thread cuts the
/// wait short). The 60 s deadline is a hang guard only: it fails on a real hang, never on load.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::park_timeout(Duration::from_millis(1));
    }
}

/// Holds the mock's worker thread until opened.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    opened: Condvar,
}

impl Gate {
    /// Enqueues a host function on `s` that waits for the gate to open.
    fn hold(s: Stream<'_>) -> Arc<Gate> {
        let gate = Arc::new(Gate::default());
        let g = gate.clone();
        s.launch_host_func(move || {
            let mut open = g.open.lock().unwrap();
            while !*open {
                open = g.opened.wait(open).unwrap();
            }
        })
        .unwrap();
        gate
    }

    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }

    /// Opens the gate from another thread once the completion being polled on this one is
    /// spinning: once the mock has answered `cuEventQuery` twice (the poll's first check, then
    /// the spin's), so the work completes during the spin however the threads are scheduled.
    fn open_during_the_spin(
        self: &Arc<Self>,
        m: &'static MockDriver,
    ) -> std::thread::JoinHandle<()> {
        let g = self.clone();
        std::thread::spawn(move || {
            wait_until("the first poll spins", || m.calls("cuEventQuery") >= 2);
            g.open();
        })
    }
}

/// A waker that unparks its thread and counts its wakes.
struct CountingWaker {
    thread: Thread,
    wakes: AtomicUsize,
}

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
        self.thread.unpark();
    }
}

fn counting_waker() -> (Arc<CountingWaker>, Waker) {
    let state = Arc::new(CountingWaker {
        thread: std::thread::current(),
        wakes: AtomicUsize::new(0),
    });
    (state.clone(), Waker::from(state))
}

fn poll_once(fut: &mut Completion, waker: &Waker) -> Poll<cuda_stream::Result<()>> {
    Pin::new(fut).poll(&mut TaskContext::from_waker(waker))
}

/// Polls `fut` on this thread, parking between polls; returns the output and the wakes.
fn block_on(mut fut: Completion) -> (cuda_stream::Result<()>, usize) {
    let (state, waker) = counting_waker();
    loop {
        match poll_once(&mut fut, &waker) {
            Poll::Ready(v) => return (v, state.wakes.load(Ordering::SeqCst)),
            Poll::Pending => std::thread::park(),
        }
    }
}

/// Drop-counted data of `N` bytes that a closure carries and checks.
struct Payload<const N: usize> {
    bytes: [u8; N],
    _token: Arc<()>,
}

impl<const N: usize> Payload<N> {
    fn new(seed: u8, token: &Arc<()>) -> Payload<N> {
        let mut bytes = [0u8; N];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = seed.wrapping_add(i as u8);
        }
        Payload {
            bytes,
            _token: token.clone(),
        }
    }
    fn check(&self, seed: u8) -> bool {
        self.bytes
            .iter()
            .enumerate()
            .all(|(i, b)| *b == seed.wrapping_add(i as u8))
    }
}

/// Over-aligned data: carried in a plain box, not a recycled block.
#[repr(align(128))]
struct Aligned(u64, #[allow(dead_code)] Arc<()>);

/// Launches host functions (or callbacks, with `callbacks`) whose closures carry `N` bytes, and
/// counts those that saw their data intact in `ok`.
fn launch_sized<const N: usize>(
    s: Stream<'_>,
    count: usize,
    token: &Arc<()>,
    ok: &Arc<AtomicUsize>,
    callbacks: bool,
) {
    for i in 0..count {
        let seed = i as u8;
        let data = Payload::<N>::new(seed, token);
        let ok = ok.clone();
        if callbacks {
            s.add_callback(move |status| {
                if status.is_ok() && data.check(seed) {
                    ok.fetch_add(1, Ordering::Relaxed);
                }
            })
            .unwrap();
        } else {
            s.launch_host_func(move || {
                if data.check(seed) {
                    ok.fetch_add(1, Ordering::Relaxed);
                }
            })
            .unwrap();
        }
    }
}

#[test]
fn capturing_closures_of_every_size_run_once_with_their_data_from_many_threads() {
    let (_g, m) = mock();
    let ctx = Context::primary(0).unwrap();
    // The notifier stream of the primary context, created by the first completion that had to
    // wait (in whichever test ran first), lives as long as the process: count from here.
    let live = m.live_streams();
    let streams: Vec<OwnedStream> = (0..2).map(|_| ctx.new_stream().unwrap()).collect();
    let token = Arc::new(());
    let ok = Arc::new(AtomicUsize::new(0));
    const PER_SIZE: usize = 300;
    const THREADS: usize = 4;
    std::thread::scope(|sc| {
        for t in 0..THREADS {
            let (s, token, ok) = (streams[t % 2].as_stream(), &token, &ok);
            sc.spawn(move || {
                let callbacks = t >= 2;
                // One, two and four cache lines, and one too large for any block.
                launch_sized::<8>(s, PER_SIZE, token, ok, callbacks);
                launch_sized::<100>(s, PER_SIZE, token, ok, callbacks);
                launch_sized::<200>(s, PER_SIZE, token, ok, callbacks);
                launch_sized::<1000>(s, PER_SIZE, token, ok, callbacks);
                for i in 0..PER_SIZE {
                    let a = Aligned(i as u64, token.clone());
                    let ok = ok.clone();
                    s.launch_host_func(move || {
                        if a.0 == i as u64 && (&a as *const Aligned as usize) % 128 == 0 {
                            ok.fetch_add(1, Ordering::Relaxed);
                        }
                    })
                    .unwrap();
                }
            });
        }
    });
    for s in &streams {
        s.synchronize().unwrap();
    }
    assert_eq!(ok.load(Ordering::Relaxed), THREADS * 5 * PER_SIZE);
    assert_eq!(Arc::strong_count(&token), 1, "every closure dropped once");
    assert_eq!(m.host_fn_api_calls(), 0);
    assert_eq!(m.live_streams(), live + 2);
    drop(streams);
    assert_eq!(m.live_streams(), live, "both streams destroyed");
}

#[test]
fn refused_launches_drop_their_closures_here_and_the_next_ones_run() {
    let (_g, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let s = ctx.new_stream().unwrap();
    let token = Arc::new(());
    let ran = Arc::new(AtomicUsize::new(0));
    m.fail_always("cuLaunchHostFunc", FAULT);
    for _ in 0..100 {
        let (t, r) = (token.clone(), ran.clone());
        let e = s
            .launch_host_func(move || {
                drop(t);
                r.fetch_add(1, Ordering::Relaxed);
            })
            .unwrap_err();
        assert_eq!(e.driver_code(), Some(FAULT));
    }
    assert_eq!(
        Arc::strong_count(&token),
        1,
        "each refused closure dropped once"
    );
    m.reset();
    for _ in 0..100 {
        let (t, r) = (token.clone(), ran.clone());
        s.launch_host_func(move || {
            drop(t);
            r.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
    }
    s.synchronize().unwrap();
    assert_eq!(
        ran.load(Ordering::Relaxed),
        100,
        "only the accepted ones ran"
    );
    assert_eq!(Arc::strong_count(&token), 1);
}

#[test]
fn work_that_completes_during_the_spin_resolves_in_the_first_poll() {
    let (_g, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let s = ctx.new_stream().unwrap();
    let gate = Gate::hold(s.as_stream());
    // The limit is a hang guard: the gate opens once the spin has begun.
    let mut c = s.completed().spin_limit(Duration::from_secs(60));
    let opener = gate.open_during_the_spin(m);
    let (state, waker) = counting_waker();
    let first = poll_once(&mut c, &waker);
    opener.join().unwrap();
    assert!(
        matches!(first, Poll::Ready(Ok(()))),
        "the first poll spun until the gate opened: {first:?}"
    );
    assert_eq!(
        state.wakes.load(Ordering::SeqCst),
        0,
        "nothing had to wake it"
    );
    assert_eq!(
        m.calls("cuLaunchHostFunc"),
        1,
        "only the gate's host function"
    );
    s.synchronize().unwrap();
}

#[test]
fn the_spin_is_bounded_and_only_the_first_poll_spins() {
    let (_g, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let s = ctx.new_stream().unwrap();
    // The work cannot complete while the gate is closed: a poll that returns has stopped
    // spinning of its own accord.
    let gate = Gate::hold(s.as_stream());
    let limit = Duration::from_millis(50);
    let mut c = s.completed().spin_limit(limit);
    let (state, waker) = counting_waker();
    m.reset();
    let t = Instant::now();
    assert!(poll_once(&mut c, &waker).is_pending(), "the spin stopped");
    // A lower bound only: load can make the spin longer, never shorter.
    let first = t.elapsed();
    assert!(
        first >= limit,
        "the first poll spun for its limit: {first:?}"
    );
    assert!(m.calls("cuEventQuery") > 1, "the spin watched the event");
    assert_eq!(m.calls("cuLaunchHostFunc"), 1, "then a host function");
    m.reset();
    assert!(poll_once(&mut c, &waker).is_pending());
    assert_eq!(
        m.calls("cuEventQuery"),
        1,
        "the second poll queried once, no spin"
    );
    assert_eq!(m.calls("cuLaunchHostFunc"), 0, "and enqueued nothing more");
    assert!(!c.is_complete());
    gate.open();
    wait_until("the host function wakes the task", || {
        state.wakes.load(Ordering::SeqCst) > 0
    });
    assert!(matches!(poll_once(&mut c, &waker), Poll::Ready(Ok(()))));
    // Everything queued in the context has run (the notifier's host function included): nothing
    // is left for the next test, and there was exactly one wake-up.
    ctx.synchronize().unwrap();
    assert_eq!(
        state.wakes.load(Ordering::SeqCst),
        1,
        "the host function woke the task once"
    );
    assert_eq!(m.host_fn_api_calls(), 0);
}

#[test]
fn without_a_spin_the_first_poll_returns_pending_and_the_host_function_wakes_it() {
    let (_g, _m) = mock();
    let ctx = Context::primary(0).unwrap();
    let s = ctx.new_stream().unwrap();
    let gate = Gate::hold(s.as_stream());
    let mut c = s.completed().spin_limit(Duration::ZERO);
    let (state, waker) = counting_waker();
    assert!(poll_once(&mut c, &waker).is_pending());
    gate.open();
    wait_until("the host function wakes the task", || {
        state.wakes.load(Ordering::SeqCst) > 0
    });
    assert!(matches!(poll_once(&mut c, &waker), Poll::Ready(Ok(()))));
    ctx.synchronize().unwrap();
    assert_eq!(state.wakes.load(Ordering::SeqCst), 1, "woken once");
}

#[test]
fn a_panic_before_the_completion_is_reported_by_the_spinning_poll() {
    let (_g, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let s = ctx.new_stream().unwrap();
    let gate = Gate::hold(s.as_stream());
    s.launch_host_func(|| panic!("before the completion"))
        .unwrap();
    // The limit is a hang guard: the gate opens once the spin has begun.
    let mut c = s.completed().spin_limit(Duration::from_secs(60));
    let opener = gate.open_during_the_spin(m);
    let (_state, waker) = counting_waker();
    let first = poll_once(&mut c, &waker);
    opener.join().unwrap();
    match first {
        Poll::Ready(Err(Error::HostFnPanicked { message, .. })) => {
            assert!(message.contains("before the completion"), "{message}")
        }
        other => panic!("expected the panic in the first poll, got {other:?}"),
    }
    s.synchronize().unwrap();
}

#[test]
fn a_completion_that_failed_to_enqueue_reports_the_error_without_spinning() {
    let (_g, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let s = ctx.new_stream().unwrap();
    m.fail("cuStreamIsCapturing", 1, FAULT);
    let mut c = s.completed().spin_limit(Duration::from_secs(60));
    assert!(c.is_complete());
    let (_state, waker) = counting_waker();
    match poll_once(&mut c, &waker) {
        Poll::Ready(Err(e)) => assert_eq!(e.driver_code(), Some(FAULT), "{e}"),
        other => panic!("expected the capture check's error, got {other:?}"),
    }
    // No event was recorded, none was watched, and no host function was enqueued.
    assert_eq!(m.calls("cuEventRecord"), 0);
    assert_eq!(m.calls("cuEventQuery"), 0, "no spin");
    assert_eq!(m.calls("cuLaunchHostFunc"), 0);
}

#[test]
fn many_completions_in_flight_on_many_streams_and_threads() {
    let (_g, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let streams: Vec<OwnedStream> = (0..4).map(|_| ctx.new_stream().unwrap()).collect();
    // Nothing completes until the gates open: each stream's work waits for its gate, and the
    // worker runs host functions in order.
    let gates: Vec<Arc<Gate>> = streams.iter().map(|s| Gate::hold(s.as_stream())).collect();
    let mut kept: Vec<Vec<Completion>> = (0..4).map(|_| Vec::new()).collect();
    let (_state, waker) = counting_waker();
    for round in 0..100 {
        for (i, s) in streams.iter().enumerate() {
            let c = s.completed();
            match round % 4 {
                // Dropped before any poll.
                0 => drop(c),
                // Polled once without spinning (waker registered), then dropped.
                1 => {
                    let mut c = c.spin_limit(Duration::ZERO);
                    assert!(poll_once(&mut c, &waker).is_pending());
                }
                // Awaited on another thread, with and without the spin.
                2 => kept[i].push(c),
                _ => kept[i].push(c.spin_limit(Duration::ZERO)),
            }
        }
    }
    let resolved = AtomicUsize::new(0);
    // Each thread polls its first future while the gates are closed (so it has to wait for its
    // wake-up), and only then are the gates opened. The gates open before anything is asserted
    // here, so a failure cannot leave the threads waiting forever.
    let (polled_tx, polled_rx) = std::sync::mpsc::channel();
    std::thread::scope(|sc| {
        for futs in kept {
            let (resolved, polled_tx) = (&resolved, polled_tx.clone());
            sc.spawn(move || {
                let mut futs = futs.into_iter();
                let mut first = futs.next().expect("50 per stream");
                let (_state, waker) = counting_waker();
                let pending = poll_once(&mut first, &waker).is_pending();
                polled_tx.send(pending).unwrap();
                for c in std::iter::once(first).chain(futs) {
                    let (r, _) = block_on(c);
                    r.unwrap();
                    resolved.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        // A hang guard only.
        let first_polls: Vec<bool> = (0..streams.len())
            .map(|_| polled_rx.recv_timeout(Duration::from_secs(60)).unwrap())
            .collect();
        for gate in &gates {
            gate.open();
        }
        assert!(
            first_polls.iter().all(|p| *p),
            "the gates held every first future: {first_polls:?}"
        );
    });
    assert_eq!(resolved.load(Ordering::Relaxed), 4 * 50);
    for s in &streams {
        s.synchronize().unwrap();
        assert!(s.query().unwrap());
    }
    // A future can resolve by finding its event complete before its host function on the
    // notifier stream has run: wait for the whole context before counting what is pending.
    ctx.synchronize().unwrap();
    assert_eq!(m.pending_host_fns(), 0);
    assert_eq!(m.host_fn_api_calls(), 0);
}

#[test]
fn the_spin_watches_an_event_and_only_work_still_running_gets_a_host_function() {
    let (_g, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let s = ctx.new_stream().unwrap();
    let (state, waker) = counting_waker();

    // Finished work: the event says so, no host function is ever enqueued.
    s.synchronize().unwrap();
    m.reset();
    let mut c = s.completed().spin_limit(Duration::from_secs(5));
    assert_eq!(m.calls("cuEventRecord"), 1, "one event, recorded");
    assert!(matches!(poll_once(&mut c, &waker), Poll::Ready(Ok(()))));
    assert_eq!(m.calls("cuLaunchHostFunc"), 0, "no host function");
    drop(c);

    // Held work: the spin queries the event until its limit, then one host function, on the
    // notifier stream after a wait for the event, wakes the task.
    let gate = Gate::hold(s.as_stream());
    m.reset();
    let mut c = s.completed().spin_limit(Duration::from_millis(20));
    assert_eq!(m.calls("cuLaunchHostFunc"), 0, "none before the first poll");
    assert!(poll_once(&mut c, &waker).is_pending());
    assert!(m.calls("cuEventQuery") > 1, "the spin watched the event");
    assert_eq!(m.calls("cuStreamWaitEvent"), 1);
    assert_eq!(m.calls("cuLaunchHostFunc"), 1);
    // More work on the stream does not hold back the wake-up of the earlier work.
    let later = Gate::hold(s.as_stream());
    gate.open();
    wait_until("the earlier work's host function wakes the task", || {
        state.wakes.load(Ordering::SeqCst) > 0
    });
    assert!(matches!(poll_once(&mut c, &waker), Poll::Ready(Ok(()))));
    later.open();
    drop(c);

    // Without a spin: one query, then the host function.
    let gate = Gate::hold(s.as_stream());
    m.reset();
    let mut c = s.completed().spin_limit(Duration::ZERO);
    assert!(poll_once(&mut c, &waker).is_pending());
    assert_eq!(m.calls("cuEventQuery"), 1, "queried once");
    assert_eq!(m.calls("cuLaunchHostFunc"), 1);
    gate.open();
    s.synchronize().unwrap();
    assert!(c.is_complete());
    // The host function on the notifier stream too, before the next test.
    ctx.synchronize().unwrap();
    assert_eq!(m.host_fn_api_calls(), 0);
}
