//! `Stream::completed` and `Event::completed` futures, driven by a minimal std-only executor.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::Duration;

use cuda_stream::Error;
use cuda_stream_tests::{DeviceBuffer, Kernels, Window, current_context, gpu};

const SPIN: Duration = Duration::from_millis(100);

struct ThreadWaker {
    thread: Thread,
    wakes: AtomicUsize,
}

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
        self.thread.unpark();
    }
}

fn thread_waker() -> (Arc<ThreadWaker>, Waker) {
    let state = Arc::new(ThreadWaker {
        thread: std::thread::current(),
        wakes: AtomicUsize::new(0),
    });
    let waker = Waker::from(state.clone());
    (state, waker)
}

/// Runs `fut` to completion on this thread, parking between polls. Returns the output and how
/// many times the future woke the thread.
fn block_on<F: Future>(fut: F) -> (F::Output, usize) {
    let mut fut = pin!(fut);
    let (state, waker) = thread_waker();
    let mut cx = TaskContext::from_waker(&waker);
    loop {
        match fut.as_mut().poll(&mut cx) {
            Poll::Ready(v) => return (v, state.wakes.load(Ordering::SeqCst)),
            // A spurious unpark only causes another poll.
            Poll::Pending => std::thread::park(),
        }
    }
}

/// Polls an `Unpin` future once with a waker of this thread.
fn poll_once<F: Future + Unpin>(fut: &mut F) -> Poll<F::Output> {
    let (_state, waker) = thread_waker();
    std::pin::Pin::new(fut).poll(&mut TaskContext::from_waker(&waker))
}

#[test]
fn stream_completed_resolves_after_the_work() {
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let s = ctx.new_stream().unwrap();
    let buf = DeviceBuffer::new(&ctx, 1);
    let w = Window::start(SPIN);
    k.store_after_spin(&s, buf.ptr(), 7, SPIN);
    let before = s.record_event().unwrap();
    let mut fut = s.completed();
    let first = poll_once(&mut fut);
    let complete = fut.is_complete();
    w.assert_pending(first.is_pending(), "the completion at its first poll");
    w.assert_pending(!complete, "is_complete during the spin");
    let (r, wakes) = block_on(fut);
    r.unwrap();
    println!("completed after {:?} ({wakes} wake(s))", w.elapsed());
    assert!(
        w.elapsed() >= SPIN * 9 / 10,
        "resolved before the spin ended"
    );
    assert!(before.query().unwrap());
    assert_eq!(buf.get(0), 7);
    s.synchronize().unwrap();
    assert!(s.query().unwrap());
}

#[test]
fn work_that_ends_within_the_spin_resolves_in_the_first_poll_and_later_work_is_woken() {
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let s = ctx.new_stream().unwrap();
    let buf = DeviceBuffer::new(&ctx, 1);
    // 2 ms of work and a spin limit far beyond it: the first poll sees it finish.
    let w = Window::start(Duration::from_millis(2));
    k.store_after_spin(&s, buf.ptr(), 5, Duration::from_millis(2));
    let mut fut = s.completed().spin_limit(Duration::from_secs(5));
    let (state, waker) = thread_waker();
    let first = std::pin::Pin::new(&mut fut).poll(&mut TaskContext::from_waker(&waker));
    assert!(
        matches!(first, Poll::Ready(Ok(()))),
        "the first poll spun until the work ended: {first:?}"
    );
    assert!(w.elapsed() >= Duration::from_millis(2) * 9 / 10);
    assert_eq!(
        state.wakes.load(Ordering::SeqCst),
        0,
        "nothing had to wake it"
    );
    assert_eq!(buf.get(0), 5);
    // The default limit is far shorter than 100 ms of work: pending, then woken.
    let w = Window::start(SPIN);
    k.store_after_spin(&s, buf.ptr(), 6, SPIN);
    let mut fut = s.completed();
    let first = poll_once(&mut fut);
    w.assert_pending(first.is_pending(), "the first poll after the default spin");
    let (r, wakes) = block_on(fut);
    r.unwrap();
    if w.open() {
        panic!("resolved inside the work's window");
    }
    println!("woken {wakes} time(s) after {:?}", w.elapsed());
    assert_eq!(buf.get(0), 6);
}

#[test]
fn event_completed_resolves_after_the_captured_work() {
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let s = ctx.new_stream().unwrap();
    let buf = DeviceBuffer::new(&ctx, 1);
    let w = Window::start(SPIN);
    k.store_after_spin(&s, buf.ptr(), 9, SPIN);
    let ev = s.record_event().unwrap();
    let (r, _) = block_on(ev.completed());
    r.unwrap();
    assert!(w.elapsed() >= SPIN * 9 / 10);
    assert!(ev.query().unwrap());
    assert_eq!(buf.get(0), 9);
    // An event never recorded is complete: its future resolves too.
    let never = ctx.new_event(cuda_stream::EventOptions::new()).unwrap();
    block_on(never.completed()).0.unwrap();
}

#[test]
fn dropping_a_completion_early_is_safe() {
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let s = ctx.new_stream().unwrap();
    k.spin(&s, SPIN);
    drop(s.completed());
    // Polled once (waker registered), then dropped.
    let (_state, waker) = thread_waker();
    {
        let mut fut = pin!(s.completed());
        let polled = fut.as_mut().poll(&mut TaskContext::from_waker(&waker));
        println!("first poll: {polled:?}");
    }
    let ev = s.record_event().unwrap();
    let mut ev_fut = Box::pin(ev.completed());
    let _ = ev_fut.as_mut().poll(&mut TaskContext::from_waker(&waker));
    drop(ev_fut);
    drop(ev);
    s.synchronize().unwrap();
    assert!(s.query().unwrap());
    // The stream still works afterwards.
    block_on(s.completed()).0.unwrap();
}

#[test]
fn many_futures_on_one_stream_resolve_in_order() {
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let s = ctx.new_stream().unwrap();
    let buf = DeviceBuffer::new(&ctx, 1);
    let n = 300;
    let mut futs = Vec::new();
    k.spin(&s, SPIN);
    for _ in 0..n {
        k.add_u32(&s, buf.ptr(), 1);
        futs.push(s.completed());
    }
    // The last one first: when it resolves, all earlier ones have.
    let last = futs.pop().unwrap();
    block_on(last).0.unwrap();
    assert!(futs.iter().all(|f| f.is_complete()));
    for f in futs {
        block_on(f).0.unwrap();
    }
    assert_eq!(buf.get(0), n);
}

#[test]
fn a_host_function_panic_is_reported_by_the_future() {
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let s = ctx.new_stream().unwrap();
    k.spin(&s, SPIN);
    s.launch_host_func(|| panic!("panic before completion"))
        .unwrap();
    let (r, _) = block_on(s.completed());
    match r {
        Err(Error::HostFnPanicked { message, .. }) => {
            assert!(message.contains("panic before completion"))
        }
        other => panic!("expected HostFnPanicked, got {other:?}"),
    }
    s.synchronize().unwrap();
}

#[test]
fn completed_on_a_default_stream_from_a_thread_without_context() {
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let buf = DeviceBuffer::new(&ctx, 1);
    std::thread::scope(|sc| {
        sc.spawn(|| {
            assert!(current_context().is_null());
            let s = ctx.per_thread_stream();
            k.store_after_spin(s, buf.ptr(), 3, SPIN);
            block_on(s.completed()).0.unwrap();
            assert_eq!(buf.get(0), 3);
            assert!(current_context().is_null());
            // The work is done (the value is there); this makes no difference without a tool.
            // Under racecheck (H100, driver 580), when the thread exited straight away the
            // helpers' `cuModuleUnload` after the scope never returned, 4 of 4 runs; with this
            // synchronise, or 500 ms of sleep before the unload, it returned every time. Under
            // each tool a thread's exit waits for its per-thread stream's work (raw calls:
            // `host_fn_wake --exit-pending`), and the same sequence in raw calls
            // (`host_fn_wake --unload`, ten variants) and through this crate in a plain program
            // (`completion_probe --teardown`) never hung: a tool's doing, at thread exit.
            s.synchronize().unwrap();
        });
    });
}
