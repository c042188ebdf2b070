//! No CUDA call inside a host function, and the context's event cache, against the mock driver.
//!
//! - Values whose last owner is dropped inside a host function (the `Arc<OwnedStream>` moved
//!   into its own host function, events, pools, leases, completions, contexts) are destroyed later
//!   on an ordinary thread, in order, before their context goes: the live handles return to zero,
//!   no driver call is made from a host function, nothing is destroyed twice or orphaned.
//! - `Event::new` and `record_event` reuse the handles of dropped events of the same options
//!   (no `cuEventCreate`), a reused event answers as a new one, the cache is bounded, never holds
//!   interprocess or foreign handles, and is destroyed with the context.
//!
//! The fault suite (`fault_injection/`) runs the same paths with each driver call failing.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cuda_mock_driver::{MockDriver, Serialized};
use cuda_stream::ffi::CUresult;
use cuda_stream::{
    AsStream, Context, Event, EventOptions, Stream, StreamOptions, StreamPool, deferred_failed,
    deferred_pending, deferred_total, drain_deferred,
};

const SUCCESS: CUresult = CUresult::CUDA_SUCCESS;
const DISABLE_TIMING: u32 = 2;
const BLOCKING_SYNC: u32 = 1;
/// The bound on spare events of one kind (cuda-stream's `spare_events::PER_KIND`).
const PER_KIND: usize = 32;

static LOCK: Mutex<()> = Mutex::new(());

/// Serialises the test, installs the mock as the process-wide driver (once) and resets it.
fn mock() -> (Serialized, &'static MockDriver) {
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let m = MockDriver::global();
    m.reset();
    (m.checked(guard), m)
}

/// Runs `f` on a fresh thread (no context current) and joins it; a panic continues here.
fn isolated<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    std::thread::scope(|s| s.spawn(f).join()).unwrap_or_else(|p| std::panic::resume_unwind(p))
}

/// Waits until every host function the mock queued has run; a hang fails after 10 s.
fn settle(m: &MockDriver) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while m.pending_host_fns() > 0 {
        assert!(Instant::now() < deadline, "host functions still pending");
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// Holds `stream`'s later work until the returned sender is dropped.
fn hold(stream: Stream<'_>) -> mpsc::Sender<()> {
    let (tx, rx) = mpsc::channel::<()>();
    stream
        .launch_host_func(move || {
            let _ = rx.recv();
        })
        .unwrap();
    tx
}

#[derive(Debug, PartialEq, Eq)]
struct Live {
    streams: u64,
    events: u64,
    retains: u64,
}

fn live(m: &MockDriver) -> Live {
    Live {
        streams: m.live_streams(),
        events: m.live_events(),
        retains: m.live_primary_retains(),
    }
}

const NOTHING: Live = Live {
    streams: 0,
    events: 0,
    retains: 0,
};

/// The pattern and every relative, all dropped on the driver's thread, then the last
/// owners of a stream and of its context dropped inside that stream's own host function: after
/// the drain, every handle is gone, nothing was destroyed twice or with its context, and no
/// driver call was made from a host function.
#[test]
fn after_the_pattern_the_live_handles_return_to_zero() {
    let (_lock, m) = mock();
    isolated(|| {
        assert_eq!(live(m), NOTHING, "a clean start");
        let (total, failed) = (deferred_total(), deferred_failed());
        // Everything is created first: creating drains the queue.
        let ctx = Context::primary(1).unwrap();
        let worker = ctx.new_stream().unwrap();
        let s = Arc::new(ctx.new_stream().unwrap());
        let e = worker.record_event().unwrap();
        let ipc = ctx
            .new_event(EventOptions::new().interprocess(true))
            .unwrap();
        let c = worker.completed();
        let leased: &'static StreamPool =
            Box::leak(Box::new(StreamPool::new(&ctx, StreamOptions::new())));
        let lease = leased.acquire().unwrap();
        let pool = StreamPool::new(&ctx, StreamOptions::new());
        pool.reserve(3).unwrap();
        let clone = ctx.clone();

        // The pattern: the host function holds the last owner of its own stream.
        let gate = hold(s.as_stream());
        let keep = s.clone();
        s.launch_host_func(move || drop(keep)).unwrap();
        drop(s);
        drop(gate);

        // An event (back to the cache), an interprocess one (destroyed later), a completion, a
        // lease of a pool that outlives the host function, a whole pool, and a context clone
        // that is not the last.
        worker.launch_host_func(move || drop(e)).unwrap();
        worker.launch_host_func(move || drop(ipc)).unwrap();
        worker.launch_host_func(move || drop(c)).unwrap();
        worker.launch_host_func(move || drop(lease)).unwrap();
        worker.launch_host_func(move || drop(pool)).unwrap();
        worker.launch_host_func(move || drop(clone)).unwrap();

        settle(m);
        // The stream of the pattern, the interprocess event, the pool's three streams.
        assert_eq!(deferred_pending(), 5);
        assert_eq!(m.host_fn_api_calls(), 0);
        assert_eq!(leased.free(), 1, "the lease went back to its pool");
        // SAFETY: the pool was leaked above and its only lease was dropped by the host
        // function, which has run; nothing else refers to it.
        drop(unsafe { Box::from_raw(std::ptr::from_ref(leased).cast_mut()) });
        assert_eq!(
            deferred_pending(),
            0,
            "the pool's destroy drained the queue first"
        );

        // Finally the last owners of a stream and of the context, inside that stream's own host
        // function: the stream, the spare events and the release are queued, in that order.
        let gate = hold(worker.as_stream());
        let last = Arc::new(worker);
        let keep = last.clone();
        last.launch_host_func(move || drop((keep, ctx))).unwrap();
        drop(last);
        drop(gate);
        settle(m);
        assert!(
            m.live_primary_retains() > 0,
            "not released inside the host function"
        );
        assert_eq!(
            m.host_fn_api_calls(),
            0,
            "no driver call from a host function"
        );

        // The worker stream, the two spare events (the dropped event and the one the completion
        // recorded for its spin), the release.
        assert_eq!(drain_deferred(), 4);
        assert_eq!(deferred_pending(), 0);
        assert_eq!(deferred_total() - total, 9);
        assert_eq!(
            deferred_failed(),
            failed,
            "every deferred destroy succeeded"
        );
        assert_eq!(live(m), NOTHING, "every handle destroyed");
        assert_eq!(m.orphans(), 0, "nothing destroyed with its context");
        assert_eq!((m.bad_destroys(), m.bad_uses()), (0, 0));
        assert_eq!(m.host_fn_api_calls(), 0);
    });
}

/// The release of a context's last retain on an ordinary thread first destroys what host
/// functions queued: a stream of the context, dropped inside a host function, goes before it.
#[test]
fn the_context_release_drains_the_queue_first() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(1).unwrap();
        let s = ctx.new_stream().unwrap();
        let raw = s.raw();
        let t = ctx.new_stream().unwrap();
        t.launch_host_func(move || drop(s)).unwrap();
        settle(m);
        assert_eq!(deferred_pending(), 1);
        assert_eq!(m.destroyed(raw), Some(false), "not destroyed inside");
        drop(t); // drains: destroyed on this thread now
        assert_eq!(deferred_pending(), 0);
        assert_eq!(m.destroyed(raw), Some(true));

        let s = ctx.new_stream().unwrap();
        let raw = s.raw();
        let gate = hold(ctx.legacy_stream());
        ctx.legacy_stream()
            .launch_host_func(move || drop(s))
            .unwrap();
        drop(gate);
        settle(m);
        assert_eq!(deferred_pending(), 1);
        drop(ctx); // the last retain: the queue is drained before the release
        assert_eq!(m.destroyed(raw), Some(true));
        assert_eq!(live(m), NOTHING);
        assert_eq!(m.orphans(), 0, "the stream went before its context");
        assert_eq!((m.bad_destroys(), m.host_fn_api_calls()), (0, 0));
    });
}

#[test]
fn the_event_cache_reuses_handles_of_the_same_options_only() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let s = ctx.new_stream().unwrap();
        let kinds = [
            (EventOptions::new(), DISABLE_TIMING),
            (EventOptions::new().timing(true), 0),
            (
                EventOptions::new().blocking_sync(true),
                DISABLE_TIMING | BLOCKING_SYNC,
            ),
            (
                EventOptions::new().timing(true).blocking_sync(true),
                BLOCKING_SYNC,
            ),
        ];
        let mut handles = Vec::new();
        for (options, flags) in kinds {
            let e = Event::new(&ctx, options).unwrap();
            assert_eq!(m.event_flags(e.raw()), Some(flags), "{options:?}");
            handles.push(e.raw());
        }
        assert_eq!(m.calls("cuEventCreate"), 4);
        assert_eq!(ctx.cached_events(), 4, "all four dropped into the cache");
        assert_eq!(m.live_events(), 4);

        // Each kind gets its own handle back, with no driver call at all.
        let calls = m.calls("cuEventCreate") + m.calls("cuCtxGetCurrent");
        for ((options, flags), raw) in kinds.iter().zip(&handles).rev() {
            let e = Event::new(&ctx, *options).unwrap();
            assert_eq!(e.raw(), *raw, "{options:?}");
            assert_eq!(m.event_flags(e.raw()), Some(*flags));
        }
        assert_eq!(m.calls("cuEventCreate") + m.calls("cuCtxGetCurrent"), calls);

        // record_event on an owned stream and on a borrowed view reuse them too, and the view
        // finds the context without retaining it again.
        let e = s.record_event().unwrap();
        let raw = e.raw();
        assert_eq!(raw, handles[0]);
        drop(e);
        let owner = ();
        // SAFETY: `s` outlives the view.
        let view = unsafe { Stream::borrow_raw(s.raw(), &owner) }.unwrap();
        let retains = m.calls("cuDevicePrimaryCtxRetain");
        let e = view.record_event().unwrap();
        assert_eq!(e.raw(), raw);
        assert_eq!(m.calls("cuDevicePrimaryCtxRetain"), retains);
        assert_eq!(m.calls("cuEventCreate"), 4);
        e.synchronize().unwrap();
        drop(e);

        // Never kept: interprocess events, events from raw handles, events handed out.
        let before = ctx.cached_events();
        let ipc = Event::new(&ctx, EventOptions::new().interprocess(true)).unwrap();
        let ipc_raw = ipc.raw();
        drop(ipc);
        assert_eq!(m.destroyed(ipc_raw), Some(true));
        let raw = {
            let _bound = ctx.bind().unwrap();
            let mut raw = std::ptr::null_mut();
            // SAFETY: a valid out-pointer; the context is current.
            let rc = unsafe { cuda_stream_sys::cuEventCreate(&mut raw, DISABLE_TIMING) };
            assert_eq!(rc, SUCCESS);
            raw
        };
        // SAFETY: a live event of `ctx` with these flags, owned by nothing else.
        drop(unsafe { Event::from_raw(raw, &ctx, EventOptions::new()) });
        assert_eq!(m.destroyed(raw), Some(true));
        let out = Event::new(&ctx, EventOptions::new()).unwrap().into_raw();
        assert_eq!(ctx.cached_events(), before - 1, "handed out, not kept");
        // SAFETY: handed over by `into_raw`.
        assert_eq!(unsafe { cuda_stream_sys::cuEventDestroy(out) }, SUCCESS);

        drop((s, ctx));
        assert_eq!(live(m), NOTHING, "the cache is destroyed with the context");
        assert_eq!((m.orphans(), m.bad_destroys(), m.bad_uses()), (0, 0, 0));
    });
}

/// A recycled handle may still carry its previous record, even a pending one: the new event
/// answers as a new one (complete, nothing to wait for) until it is recorded again.
#[test]
fn a_recycled_event_answers_as_a_new_one() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let (s, t) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
        let gate = hold(s.as_stream());
        let pending = s.record_event().unwrap();
        let raw = pending.raw();
        assert!(!pending.query().unwrap(), "its record waits for the gate");
        drop(pending);

        let e = ctx.new_event(EventOptions::new()).unwrap();
        assert_eq!(e.raw(), raw, "the same handle");
        // SAFETY: the handle is live (owned by `e`).
        let driver = unsafe { cuda_stream_sys::cuEventQuery(raw) };
        assert_eq!(
            driver,
            CUresult::CUDA_ERROR_NOT_READY,
            "the driver's answer"
        );
        let calls = |m: &MockDriver| {
            ["cuEventQuery", "cuEventSynchronize", "cuStreamWaitEvent"].map(|f| m.calls(f))
        };
        let before = calls(m);
        assert!(!e.is_recorded());
        assert!(e.query().unwrap(), "a new event is complete");
        e.synchronize().unwrap();
        t.wait_event(&e).unwrap();
        assert!(
            t.query().unwrap(),
            "the wait did not wait for the old record"
        );
        assert_eq!(calls(m), before, "answered without the driver");

        // Recorded again, it is the driver's answer that counts.
        t.record(&e).unwrap();
        assert!(e.query().unwrap());
        e.synchronize().unwrap();
        s.wait_event(&e).unwrap();
        assert_eq!(calls(m), before.map(|n| n + 1));
        drop(gate);
        s.synchronize().unwrap();
        drop((e, s, t, ctx));
        assert_eq!(live(m), NOTHING);
    });
}

#[test]
fn the_event_cache_is_bounded_and_cleared_on_request() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let n = PER_KIND + 8;
        let events: Vec<Event> = (0..n)
            .map(|_| Event::new(&ctx, EventOptions::new()).unwrap())
            .collect();
        let destroyed = m.destroyed_events();
        drop(events);
        assert_eq!(ctx.cached_events(), PER_KIND);
        assert_eq!(
            m.destroyed_events() - destroyed,
            8,
            "beyond the bound: destroyed"
        );
        assert_eq!(m.live_events(), PER_KIND as u64);

        // Another kind has its own bound.
        let timed: Vec<Event> = (0..3)
            .map(|_| Event::new(&ctx, EventOptions::new().timing(true)).unwrap())
            .collect();
        drop(timed);
        assert_eq!(ctx.cached_events(), PER_KIND + 3);

        assert_eq!(ctx.clear_event_cache().unwrap(), PER_KIND + 3);
        assert_eq!((ctx.cached_events(), m.live_events()), (0, 0));
        assert_eq!(ctx.clear_event_cache().unwrap(), 0);
        drop(ctx);
        assert_eq!(live(m), NOTHING);
        assert_eq!(m.bad_destroys(), 0);
    });
}

/// Inside a host function `close()` makes no driver call: it says so and queues the destroy.
#[test]
fn close_inside_a_host_function_is_deferred_and_says_so() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let s = ctx.new_stream().unwrap();
        let doomed = ctx.new_stream().unwrap();
        let event = s.record_event().unwrap();
        let (tx, rx) = mpsc::channel();
        s.launch_host_func(move || {
            tx.send((doomed.close(), event.close())).unwrap();
        })
        .unwrap();
        settle(m);
        let (stream, event) = rx.recv().unwrap();
        let stream = stream.unwrap_err();
        assert_eq!(
            stream.to_string(),
            "cuStreamDestroy cannot be made inside a host function"
        );
        assert!(matches!(
            event,
            Err(cuda_stream::Error::InHostFunction {
                call: "cuEventDestroy"
            })
        ));
        assert_eq!(stream.call(), None, "no driver call was made");
        assert_eq!(deferred_pending(), 2);
        s.synchronize().unwrap(); // drains
        assert_eq!(deferred_pending(), 0);
        assert_eq!(m.destroyed_streams(), 1);
        drop((s, ctx));
        assert_eq!(live(m), NOTHING);
        assert_eq!((m.host_fn_api_calls(), m.bad_destroys()), (0, 0));
    });
}
