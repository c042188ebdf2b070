//! No CUDA call inside host functions, on the real driver: values whose last owner is dropped
//! inside a host function or stream callback (the `Arc<OwnedStream>` moved into its own host
//! function, events, a pool lease, a pool, a completion, contexts) are destroyed later on an
//! ordinary thread, and the driver's host-function thread keeps working: 1,000 more host
//! functions on several streams all run. Also run under compute-sanitizer by the GPU bundle,
//! where a destroy made inside a host function once hung every later host function.
//!
//! Host functions report to the test through channels (no CUDA call), and every wait has a
//! deadline, so a hang fails instead of stalling. The tests share the process-wide queue of
//! deferred destroys, so they run one at a time.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use cuda_stream::{
    Context, Error, Event, EventOptions, OwnedStream, StreamOptions, StreamPool, deferred_failed,
    deferred_pending, deferred_total, drain_deferred,
};
use cuda_stream_tests::{DeviceBuffer, Kernels, Window, gpu};

/// GPU work in front of the host functions, so this thread drops its own owners first.
const SPIN: Duration = Duration::from_millis(50);
/// How long a host function may take to report before the test fails.
const DEADLINE: Duration = Duration::from_secs(60);

fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Enqueues a host function on `s` that drops `value`, then reports `what`.
fn drop_inside<T: Send + 'static>(
    s: &OwnedStream,
    tx: &Sender<&'static str>,
    what: &'static str,
    value: T,
) {
    let tx = tx.clone();
    s.launch_host_func(move || {
        drop(value);
        let _ = tx.send(what);
    })
    .unwrap();
}

/// Waits for `n` reports from host functions, failing after [`DEADLINE`].
fn reports(rx: &mpsc::Receiver<&'static str>, n: usize) -> Vec<&'static str> {
    (0..n)
        .map(|i| {
            rx.recv_timeout(DEADLINE)
                .unwrap_or_else(|e| panic!("host function {i} of {n} did not report: {e}"))
        })
        .collect()
}

#[test]
fn the_pattern_and_its_relatives_then_a_thousand_host_functions() {
    let Some(ctx) = gpu() else { return };
    let _serial = serial();
    drain_deferred();
    let (total, failed) = (deferred_total(), deferred_failed());
    let k = Kernels::load(&ctx);
    let buf = DeviceBuffer::new(&ctx, 1);

    // Everything is created first: creating drains the queue.
    static POOL: OnceLock<StreamPool> = OnceLock::new();
    let leased = POOL.get_or_init(|| StreamPool::new(&ctx, StreamOptions::new()));
    let streams: Vec<OwnedStream> = (0..4).map(|_| ctx.new_stream().unwrap()).collect();
    let worker = &streams[0];
    let s = Arc::new(ctx.new_stream().unwrap());
    let recorded = worker.record_event().unwrap();
    let ipc = ctx
        .new_event(EventOptions::new().interprocess(true))
        .unwrap();
    let completion = worker.completed();
    let lease = leased.acquire().unwrap();
    let pool = StreamPool::new(&ctx, StreamOptions::new());
    pool.reserve(2).unwrap();
    let own = Context::primary(0).unwrap(); // a retain of its own, with a spare event
    drop(own.new_event(EventOptions::new()).unwrap());
    assert_eq!(own.cached_events(), 1);
    let clone = ctx.clone();

    // The pattern: the host function holds the last owner of its own stream.
    let (tx, rx) = mpsc::channel();
    k.spin(&*s, SPIN);
    let keep = s.clone();
    let t = tx.clone();
    s.launch_host_func(move || {
        drop(keep);
        let _ = t.send("the stream itself");
    })
    .unwrap();
    drop(s);

    // Its relatives, behind GPU work on another stream.
    k.spin(worker, SPIN);
    drop_inside(worker, &tx, "an event", recorded);
    drop_inside(worker, &tx, "an interprocess event", ipc);
    drop_inside(worker, &tx, "a completion", completion);
    drop_inside(worker, &tx, "a pool lease", lease);
    drop_inside(worker, &tx, "a pool", pool);
    drop_inside(worker, &tx, "a context clone", clone);
    drop_inside(worker, &tx, "a context's last clone", own);
    let seen = reports(&rx, 8);
    println!("dropped inside host functions: {seen:?}");

    // Queued, not destroyed there: the stream, the interprocess event, the pool's two streams,
    // and the last context clone's spare event and release. The event went back to its
    // context's cache, the lease to its pool.
    assert_eq!(deferred_pending(), 6, "destroys queued by host functions");
    assert_eq!(deferred_total() - total, 6);
    assert_eq!(leased.free(), 1, "the lease is back in its pool");

    // The driver's host-function thread is healthy: 1,000 more host functions on 4 streams.
    let ran = Arc::new(AtomicUsize::new(0));
    for i in 0..1000 {
        let ran = ran.clone();
        streams[i % streams.len()]
            .launch_host_func(move || {
                ran.fetch_add(1, Ordering::Relaxed);
            })
            .unwrap();
    }
    let (done_tx, done_rx) = mpsc::channel();
    for s in &streams {
        drop_inside(s, &done_tx, "the last one", ());
    }
    reports(&done_rx, streams.len());
    assert_eq!(ran.load(Ordering::Relaxed), 1000, "every host function ran");

    // An ordinary thread's synchronize destroys what was queued, and the driver accepted every
    // destroy.
    for s in &streams {
        s.synchronize().unwrap();
    }
    assert_eq!(deferred_pending(), 0, "synchronize drained the queue");
    assert_eq!(
        deferred_failed(),
        failed,
        "every deferred destroy succeeded"
    );

    // And the context still runs work.
    k.store(worker, buf.ptr(), 7);
    worker.synchronize().unwrap();
    assert_eq!(buf.get(0), 7);
}

#[test]
fn a_callback_and_an_unwinding_host_function_drop_their_streams() {
    let Some(ctx) = gpu() else { return };
    let _serial = serial();
    drain_deferred();
    let failed = deferred_failed();
    let k = Kernels::load(&ctx);
    let s = Arc::new(ctx.new_stream().unwrap());
    let doomed = ctx.new_stream().unwrap();
    let t = ctx.new_stream().unwrap();

    let (tx, rx) = mpsc::channel();
    k.spin(&*s, SPIN);
    let keep = s.clone();
    s.add_callback(move |status| {
        drop(keep);
        let _ = tx.send(status.is_ok());
    })
    .unwrap();
    drop(s);
    assert_eq!(
        rx.recv_timeout(DEADLINE),
        Ok(true),
        "the callback ran with Ok"
    );

    t.launch_host_func(move || {
        let _doomed = doomed;
        panic!("unwinding drops a stream");
    })
    .unwrap();
    match t.synchronize() {
        Err(Error::HostFnPanicked { message, .. }) => {
            assert_eq!(message, "unwinding drops a stream")
        }
        other => panic!("expected the panic, got {other:?}"),
    }
    assert_eq!(deferred_pending(), 0, "synchronize drained both");
    assert_eq!(deferred_failed(), failed);
    t.launch_host_func(|| ()).unwrap();
    t.synchronize().unwrap();
}

#[test]
fn close_inside_a_host_function_is_deferred_and_says_so() {
    let Some(ctx) = gpu() else { return };
    let _serial = serial();
    drain_deferred();
    let failed = deferred_failed();
    let s = ctx.new_stream().unwrap();
    let doomed = ctx.new_stream().unwrap();
    let event = s.record_event().unwrap();
    drop(ctx.new_event(EventOptions::new().timing(true)).unwrap());
    let cache = ctx.clone();
    let (tx, rx) = mpsc::channel();
    s.launch_host_func(move || {
        let _ = tx.send([
            doomed.close(),
            event.close(),
            cache.clear_event_cache().map(drop),
        ]);
    })
    .unwrap();
    let answers = rx.recv_timeout(DEADLINE).expect("the host function ran");
    for (answer, call) in
        answers
            .iter()
            .zip(["cuStreamDestroy", "cuEventDestroy", "cuEventDestroy"])
    {
        assert!(
            matches!(answer, Err(Error::InHostFunction { call: c }) if *c == call),
            "{answer:?}"
        );
    }
    assert_eq!(
        deferred_pending(),
        3,
        "the stream, the event, the spare event"
    );
    ctx.synchronize().unwrap();
    assert_eq!(
        deferred_pending(),
        0,
        "Context::synchronize drained the queue"
    );
    assert_eq!(
        deferred_failed(),
        failed,
        "every deferred destroy succeeded"
    );
}

#[test]
fn recycled_events_answer_as_new_ones() {
    let Some(ctx) = gpu() else { return };
    let _serial = serial();
    let k = Kernels::load(&ctx);
    let (s, t) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    ctx.clear_event_cache().unwrap();

    // A record still pending behind a long kernel, then the event dropped.
    let w = Window::start(SPIN * 4);
    k.spin(&s, SPIN * 4);
    let e = s.record_event().unwrap();
    let raw = e.raw();
    w.assert_pending(!e.query().unwrap(), "the record behind the spin");
    drop(e);
    assert_eq!(ctx.cached_events(), 1);

    // The same handle, as a new event: complete, nothing to wait for.
    let fresh = ctx.new_event(EventOptions::new()).unwrap();
    assert_eq!(fresh.raw(), raw, "the handle was recycled");
    assert!(!fresh.is_recorded());
    assert!(fresh.query().unwrap());
    fresh.synchronize().unwrap();
    t.wait_event(&fresh).unwrap();
    assert!(
        t.query().unwrap(),
        "the other stream waits for no earlier record of the handle"
    );

    // Recorded again, it behaves as any event.
    t.record(&fresh).unwrap();
    fresh.synchronize().unwrap();
    drop(fresh);

    // Recycled timing events time correctly.
    let timing = EventOptions::new().timing(true);
    let made: Vec<Event> = (0..2).map(|_| Event::new(&ctx, timing).unwrap()).collect();
    let handles: Vec<_> = made.iter().map(Event::raw).collect();
    drop(made);
    let (start, end) = (
        Event::new(&ctx, timing).unwrap(),
        Event::new(&ctx, timing).unwrap(),
    );
    assert!(handles.contains(&start.raw()) && handles.contains(&end.raw()));
    t.record(&start).unwrap();
    k.spin(&t, SPIN);
    t.record(&end).unwrap();
    end.synchronize().unwrap();
    let took = end.elapsed_since(&start).unwrap();
    println!("a {SPIN:?} kernel timed with recycled events: {took:?}");
    assert!(took >= SPIN * 9 / 10, "{took:?}");
    s.synchronize().unwrap();
}
