//! Capture and graphs against the mock driver: what the fault suite cannot show with one failing
//! call at a time. Host functions of an executable graph dropped mid-launch run and are freed
//! exactly once; an update mid-launch keeps the old closures until the launch ends; panics of
//! replayed host functions are reported on the launch stream; closures are freed once on every
//! failure path; the capture modes decide whose calls invalidate a capture; forks of a capture
//! begun elsewhere go back to their pool once it has ended; `CUDA_ERROR_STREAM_CAPTURE_UNJOINED`
//! takes raw code.
//!
//! Its own test binary: the mock must be the process-wide driver from the first call on.

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use cuda_mock_driver::{MockDriver, Serialized};
use cuda_stream::ffi::{self, CUresult};
use cuda_stream::{
    AsStream, CaptureMode, CaptureStatus, Context, Error, EventOptions, OwnedStream, Stream,
    exchange_capture_mode,
};

const FAULT: CUresult = CUresult::CUDA_ERROR_LAUNCH_FAILED;
const SUCCESS: CUresult = CUresult::CUDA_SUCCESS;

static LOCK: Mutex<()> = Mutex::new(());

/// Serialises the test, installs the mock as the process-wide driver (once) and resets it.
fn mock() -> (Serialized, &'static MockDriver) {
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let m = MockDriver::global();
    m.reset();
    (m.checked(guard), m)
}

/// Runs `f` on a fresh thread (no context current, fresh thread-local caches) and joins it.
fn isolated<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    std::thread::scope(|s| {
        s.spawn(|| catch_unwind(AssertUnwindSafe(f)))
            .join()
            .and_then(|r| r)
    })
    .unwrap_or_else(|p| resume_unwind(p))
}

/// Waits until the mock's worker has run everything queued.
fn worker_idle(m: &MockDriver) {
    let start = Instant::now();
    while m.pending_host_fns() != 0 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "worker never idle"
        );
        std::thread::yield_now();
    }
}

/// Counts drops of a host function's capture.
struct DropCount(Arc<AtomicUsize>);

impl Drop for DropCount {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A host function that counts its runs, and the drops of its capture.
fn counting(
    ran: &Arc<AtomicUsize>,
    dropped: &Arc<AtomicUsize>,
) -> impl Fn() + Send + Sync + 'static {
    let (ran, d) = (ran.clone(), DropCount(dropped.clone()));
    move || {
        let _keep = &d;
        ran.fetch_add(1, Ordering::SeqCst);
    }
}

/// A host function that blocks the worker until `release` is sent to (once per run), and the
/// receiver of a message it sends each time it has begun to block.
fn gate() -> (
    impl Fn() + Send + Sync + 'static,
    mpsc::Sender<()>,
    mpsc::Receiver<()>,
) {
    let (tx, rx) = mpsc::channel::<()>();
    let (reached_tx, reached_rx) = mpsc::channel::<()>();
    let (rx, reached_tx) = (Mutex::new(rx), Mutex::new(reached_tx));
    let f = move || {
        let _ = reached_tx.lock().unwrap().send(());
        let _ = rx.lock().unwrap().recv_timeout(Duration::from_secs(120));
    };
    (f, tx, reached_rx)
}

fn counters() -> (Arc<AtomicUsize>, Arc<AtomicUsize>) {
    (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)))
}

fn load(a: &AtomicUsize) -> usize {
    a.load(Ordering::SeqCst)
}

#[test]
fn an_executable_graph_dropped_mid_launch_still_runs_and_frees_its_host_functions_once() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let mut s = ctx.new_stream().unwrap();
        let objects = m.live_user_objects();
        let (ran, dropped) = counters();
        let (block, release, _reached) = gate();
        let graph = s
            .capture(CaptureMode::ThreadLocal, |cap| {
                cap.launch_host_func(block)?;
                cap.launch_host_func(counting(&ran, &dropped))
            })
            .unwrap();
        let exec = graph.instantiate().unwrap();
        drop(graph);
        exec.launch(&s).unwrap();
        // The worker is inside the first node now, or about to be: the launch is in flight.
        drop(exec);
        assert_eq!(m.live_graph_execs(), 0, "destroyed at once");
        assert_eq!(
            m.live_user_objects(),
            objects + 2,
            "its closures live until the launch ends"
        );
        assert_eq!(load(&dropped), 0);
        release.send(()).unwrap();
        s.synchronize().unwrap();
        worker_idle(m);
        assert_eq!(load(&ran), 1, "the host function ran");
        assert_eq!(load(&dropped), 1, "and was freed exactly once");
        assert_eq!(m.live_user_objects(), objects);
        assert_eq!((m.bad_destroys(), m.bad_uses()), (0, 0));
    });
}

#[test]
fn an_update_mid_launch_keeps_the_old_host_functions_until_the_launch_ends() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let mut s = ctx.new_stream().unwrap();
        let objects = m.live_user_objects();
        let (ran_a, dropped_a) = counters();
        let (ran_b, dropped_b) = counters();
        let (block, release, reached) = gate();
        let first = s
            .capture(CaptureMode::ThreadLocal, |cap| {
                cap.launch_host_func(block)?;
                cap.launch_host_func(counting(&ran_a, &dropped_a))
            })
            .unwrap();
        let second = s
            .capture(CaptureMode::ThreadLocal, |cap| {
                cap.launch_host_func(|| ())?;
                cap.launch_host_func(counting(&ran_b, &dropped_b))
            })
            .unwrap();
        let mut exec = first.instantiate().unwrap();
        drop(first);
        exec.launch(&s).unwrap();
        exec.update(&second).unwrap();
        drop(second);
        // The worker is inside the blocking node: the launch is in flight.
        reached
            .recv_timeout(Duration::from_secs(60))
            .expect("the launch reached its blocking node");
        assert_eq!(load(&dropped_a), 0, "the launch in flight still runs A");
        release.send(()).unwrap();
        s.synchronize().unwrap();
        worker_idle(m);
        assert_eq!((load(&ran_a), load(&dropped_a)), (1, 1));
        exec.launch(&s).unwrap();
        s.synchronize().unwrap();
        assert_eq!(load(&ran_b), 1, "the update took effect");
        drop(exec);
        worker_idle(m);
        assert_eq!(load(&dropped_b), 1);
        assert_eq!(m.live_user_objects(), objects);
    });
}

#[test]
fn a_panic_in_a_replayed_host_function_is_reported_on_the_launch_stream() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let mut s = ctx.new_stream().unwrap();
        let other = ctx.new_stream().unwrap();
        let graph = s
            .capture(CaptureMode::ThreadLocal, |cap| {
                cap.launch_host_func(|| panic!("replayed"))
            })
            .unwrap();
        let exec = graph.instantiate().unwrap();
        exec.launch(&other).unwrap();
        match other.synchronize() {
            Err(Error::HostFnPanicked { stream, message }) => {
                assert_eq!(stream, other.raw() as usize);
                assert_eq!(message, "replayed");
            }
            r => panic!("expected the panic on the launch stream, got {r:?}"),
        }
        other.synchronize().expect("reported once");
        s.synchronize().expect("not on the capture stream");

        // Once per replay, each reported once: by the next launch on the stream (which is then
        // not made), or by synchronize.
        exec.launch(&s).unwrap();
        ctx.synchronize().unwrap();
        let r = exec.launch(&s);
        assert!(
            matches!(&r, Err(Error::HostFnPanicked { message, .. }) if message == "replayed"),
            "{r:?}"
        );
        exec.launch(&s).unwrap();
        assert!(matches!(s.synchronize(), Err(Error::HostFnPanicked { .. })));
        s.synchronize().unwrap();
        assert_eq!(m.host_fn_api_calls(), 0);
    });
}

#[test]
fn a_host_function_is_freed_once_whichever_capture_call_fails() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let mut s = ctx.new_stream().unwrap();
        let objects = m.live_user_objects();
        for symbol in [
            "cuUserObjectCreate",
            "cuGraphRetainUserObject",
            "cuLaunchHostFunc",
        ] {
            m.reset();
            m.fail(symbol, 1, FAULT);
            let (ran, dropped) = counters();
            let err = s
                .capture(CaptureMode::ThreadLocal, |cap| {
                    cap.launch_host_func(counting(&ran, &dropped))
                })
                .unwrap_err();
            assert_eq!(err.call(), Some(symbol), "{err:?}");
            worker_idle(m);
            assert_eq!(load(&ran), 0, "{symbol}: never ran");
            assert_eq!(load(&dropped), 1, "{symbol}: freed exactly once");
            assert_eq!(m.live_user_objects(), objects, "{symbol}");
            assert_eq!(
                m.live_graphs(),
                0,
                "{symbol}: the partial graph is destroyed"
            );
            assert_eq!(s.capture_status().unwrap(), CaptureStatus::None);
            s.synchronize().unwrap();
        }
        // A release that fails after a failed retain leaks the closure rather than freeing it
        // twice.
        m.reset();
        m.fail("cuGraphRetainUserObject", 1, FAULT);
        m.fail("cuUserObjectRelease", 1, FAULT);
        let (ran, dropped) = counters();
        let err = s
            .capture(CaptureMode::ThreadLocal, |cap| {
                cap.launch_host_func(counting(&ran, &dropped))
            })
            .unwrap_err();
        assert_eq!(err.call(), Some("cuGraphRetainUserObject"));
        worker_idle(m);
        assert_eq!(load(&dropped), 0);
        assert_eq!(m.live_user_objects(), objects + 1);
        assert_eq!((m.bad_destroys(), m.bad_uses()), (0, 0));
    });
}

/// A capture of one host function on `s` in `mode`, during which another thread queries `event`
/// (with its capture mode set to `other_mode` if given); what the other thread's query got and
/// the capture's outcome.
fn capture_while_another_thread_queries(
    s: &mut OwnedStream,
    mode: CaptureMode,
    other_mode: Option<CaptureMode>,
    event: &cuda_stream::Event,
) -> (
    cuda_stream::Result<bool>,
    cuda_stream::Result<cuda_stream::Graph>,
) {
    let mut seen = None;
    let graph = s.capture(mode, |cap| {
        cap.launch_host_func(|| ())?;
        seen = Some(std::thread::scope(|t| {
            t.spawn(|| {
                let _guard = other_mode.map(|m| exchange_capture_mode(m).unwrap());
                event.query()
            })
            .join()
            .unwrap()
        }));
        Ok(())
    });
    (seen.expect("the closure ran"), graph)
}

#[test]
fn the_capture_modes_decide_whose_calls_invalidate_a_capture() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let mut s = ctx.new_stream().unwrap();
        // Recorded (on another stream), so that querying it asks the driver.
        let e = ctx.new_stream().unwrap().record_event().unwrap();
        let unsupported = Some(CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);

        // Global: another thread's potentially unsafe call is refused and breaks the capture.
        let (seen, graph) =
            capture_while_another_thread_queries(&mut s, CaptureMode::Global, None, &e);
        assert_eq!(seen.unwrap_err().driver_code(), unsupported);
        match graph {
            Err(Error::CaptureFailed {
                call: "cuStreamEndCapture",
                status: CaptureStatus::Invalidated { .. },
                code,
            }) => assert_eq!(code.0, CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED),
            r => panic!("expected an invalidated capture, got {r:?}"),
        }
        assert_eq!(m.live_graphs(), 0, "the partial graph is destroyed");
        assert!(s.query().unwrap(), "the stream is usable again");

        // ... unless that thread relaxed its own mode.
        let (seen, graph) = capture_while_another_thread_queries(
            &mut s,
            CaptureMode::Global,
            Some(CaptureMode::Relaxed),
            &e,
        );
        assert!(seen.unwrap());
        assert_eq!(graph.unwrap().node_count().unwrap(), 1);

        // Thread-local: other threads are not concerned.
        let (seen, graph) =
            capture_while_another_thread_queries(&mut s, CaptureMode::ThreadLocal, None, &e);
        assert!(seen.unwrap());
        graph.unwrap();

        // The capturing thread itself is, in both modes; relaxed lets it.
        for (mode, breaks) in [
            (CaptureMode::Global, true),
            (CaptureMode::ThreadLocal, true),
            (CaptureMode::Relaxed, false),
        ] {
            let mut seen = None;
            let graph = s.capture(mode, |_| {
                seen = Some(e.query());
                Ok(())
            });
            assert_eq!(seen.unwrap().is_err(), breaks, "{mode:?}");
            assert_eq!(graph.is_err(), breaks, "{mode:?}");
        }
        assert_eq!(m.live_captures(), 0);
        assert_eq!(m.live_graphs(), 0);
    });
}

#[test]
fn forks_of_a_capture_begun_elsewhere_go_back_to_the_pool_once_it_ends() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        // A priority no other test uses: the scope forks come from a pool of this test's own.
        const PRIORITY: i32 = -3;
        let raw = {
            let _bound = ctx.bind().unwrap();
            let mut raw = std::ptr::null_mut();
            // SAFETY: a valid out-pointer; the context is current.
            let rc = unsafe { cuda_stream_sys::cuStreamCreateWithPriority(&mut raw, 1, PRIORITY) };
            assert_eq!(rc, SUCCESS);
            raw
        };
        let mode = ffi::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
        // SAFETY: a live stream.
        let rc = unsafe { cuda_stream_sys::cuStreamBeginCapture(raw, mode) };
        assert_eq!(rc, SUCCESS);
        let owner = ();
        // SAFETY: `raw` lives until the raw destroy at the end.
        let view = unsafe { Stream::borrow_raw(raw, &owner) }.unwrap();
        let (ran, dropped) = counters();
        let fork_raw = view
            .in_capture(|cap| {
                cap.scope(|sc| {
                    let f = sc.fork()?;
                    f.launch_host_func(counting(&ran, &dropped))?;
                    Ok(f.raw() as usize)
                })
            })
            .unwrap();
        // SAFETY: pool streams live for the process.
        let fork = unsafe { Stream::borrow_raw(fork_raw as ffi::CUstream, &ctx) }.unwrap();
        assert!(
            matches!(fork.capture_status(), Ok(CaptureStatus::Active { .. })),
            "the fork stays in the capture after the scope"
        );
        let mut graph = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; the capture was begun on `raw` on this thread.
        let rc = unsafe { cuda_stream_sys::cuStreamEndCapture(raw, &mut graph) };
        assert_eq!(rc, SUCCESS);
        assert_eq!(fork.capture_status().unwrap(), CaptureStatus::None);
        let live = m.live_streams();
        // The next capture first returns the parked fork to its pool, where the next fork finds
        // it.
        let mut s = ctx
            .new_stream_with(cuda_stream::StreamOptions::new().priority(PRIORITY))
            .unwrap();
        let mut again = 0;
        s.capture(CaptureMode::ThreadLocal, |cap| {
            again = cap.scope(|sc| sc.fork().map(|f| f.raw() as usize))?;
            Ok(())
        })
        .unwrap();
        assert_eq!(again, fork_raw, "the parked fork was reused");
        assert_eq!(m.live_streams(), live + 1, "only `s` was created");
        // SAFETY: the graph from the raw end; nothing else has it.
        assert_eq!(unsafe { cuda_stream_sys::cuGraphDestroy(graph) }, SUCCESS);
        worker_idle(m);
        assert_eq!(load(&dropped), 1);
        // SAFETY: created above; every view is gone.
        assert_eq!(unsafe { cuda_stream_sys::cuStreamDestroy(raw) }, SUCCESS);
    });
}

#[test]
fn only_raw_code_can_leave_a_fork_unjoined() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let mut s = ctx.new_stream().unwrap();
        let side = ctx.new_stream().unwrap();
        let (ran, dropped) = counters();
        let r = s.capture(CaptureMode::ThreadLocal, |cap| {
            let e = cap.record_event()?;
            // SAFETY: both handles are live; raw code forks `side` into the capture and never
            // joins it back.
            let rc = unsafe { cuda_stream_sys::cuStreamWaitEvent(side.raw(), e.raw(), 0) };
            assert_eq!(rc, SUCCESS);
            // SAFETY: as above.
            let rc = unsafe {
                cuda_stream_sys::cuLaunchHostFunc(side.raw(), Some(nothing), std::ptr::null_mut())
            };
            assert_eq!(rc, SUCCESS);
            cap.launch_host_func(counting(&ran, &dropped))
        });
        match r {
            Err(Error::CaptureFailed {
                call: "cuStreamEndCapture",
                status: CaptureStatus::Active { .. },
                code,
            }) => assert_eq!(code.0, CUresult::CUDA_ERROR_STREAM_CAPTURE_UNJOINED),
            r => panic!("expected an unjoined capture, got {r:?}"),
        }
        worker_idle(m);
        assert_eq!(
            load(&dropped),
            1,
            "the partial graph and its closure are gone"
        );
        assert_eq!(m.live_graphs(), 0);
        assert_eq!(side.capture_status().unwrap(), CaptureStatus::None);
        assert!(side.query().unwrap() && s.query().unwrap());
    });
}

unsafe extern "C" fn nothing(_: *mut std::ffi::c_void) {}

#[test]
fn captures_refuse_what_they_cannot_do_before_the_driver_sees_it() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let begins = m.calls("cuStreamBeginCapture");
        // The per-thread default stream is another stream on every thread.
        // SAFETY: no other view of this thread's per-thread stream is used.
        let r = unsafe {
            ctx.per_thread_stream()
                .capture(CaptureMode::ThreadLocal, |_| Ok(()))
        };
        assert!(
            matches!(
                r,
                Err(Error::Refused {
                    call: "cuStreamBeginCapture",
                    ..
                })
            ),
            "{r:?}"
        );
        // A stream named by a leaked current-stream guard has other views.
        let mut s = ctx.new_stream().unwrap();
        std::mem::forget(s.make_current());
        let r = s.capture(CaptureMode::ThreadLocal, |_| Ok(()));
        assert!(
            matches!(
                r,
                Err(Error::Refused {
                    call: "cuStreamBeginCapture",
                    ..
                })
            ),
            "{r:?}"
        );
        assert_eq!(m.calls("cuStreamBeginCapture"), begins);
        // An executable graph launches on streams of its context only.
        let mut t = ctx.new_stream().unwrap();
        let exec = t
            .capture(CaptureMode::ThreadLocal, |_| Ok(()))
            .unwrap()
            .instantiate()
            .unwrap();
        let other = Context::primary(1).unwrap().new_stream().unwrap();
        let r = exec.launch(&other);
        assert!(
            matches!(
                r,
                Err(Error::Refused {
                    call: "cuGraphLaunch",
                    ..
                })
            ),
            "{r:?}"
        );
        let r = exec.upload(&other.as_stream());
        assert!(
            matches!(
                r,
                Err(Error::Refused {
                    call: "cuGraphUpload",
                    ..
                })
            ),
            "{r:?}"
        );
        assert_eq!(m.calls("cuGraphLaunch"), 0);
    });
}

#[test]
fn the_events_of_event_nodes_live_as_long_as_a_graph_can_replay_them() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let mut s = ctx.new_stream().unwrap();
        let producer = ctx.new_stream().unwrap();
        let ready = Arc::new(producer.record_event().unwrap());
        let done = Arc::new(ctx.new_event(EventOptions::new()).unwrap());
        let graph = s
            .capture(CaptureMode::ThreadLocal, |cap| {
                cap.wait_event(&ready)?;
                cap.record_external(&done)
            })
            .unwrap();
        let exec = graph.instantiate().unwrap();
        drop(graph);
        let (ready_raw, done_raw) = (ready.raw(), done.raw());
        // The caller's handles may go: the graph still holds the events.
        let (ready_weak, done_weak) = (Arc::downgrade(&ready), Arc::downgrade(&done));
        drop((ready, done));
        assert!(ready_weak.upgrade().is_some() && done_weak.upgrade().is_some());
        assert_eq!(m.destroyed(ready_raw), Some(false));
        exec.launch(&s).unwrap();
        s.synchronize().unwrap();
        drop(exec);
        worker_idle(m);
        assert!(
            ready_weak.upgrade().is_none() && done_weak.upgrade().is_none(),
            "freed with the last executable graph"
        );
        // Dropped on the driver's thread: recycled (or their destroy deferred), never destroyed
        // there.
        assert_eq!(m.host_fn_api_calls(), 0);
        cuda_stream::drain_deferred();
        let _ = (ready_raw, done_raw);
    });
}

#[test]
fn graphs_dropped_inside_a_host_function_are_destroyed_later() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let mut s = ctx.new_stream().unwrap();
        let graph = s
            .capture(CaptureMode::ThreadLocal, |cap| cap.launch_host_func(|| ()))
            .unwrap();
        let exec = graph.instantiate().unwrap();
        let (graphs, execs) = (m.live_graphs(), m.live_graph_execs());
        let queued = cuda_stream::deferred_total();
        let (tx, rx) = mpsc::channel();
        s.launch_host_func(move || {
            drop(graph);
            tx.send(exec.close()).unwrap();
        })
        .unwrap();
        let closed = rx.recv().unwrap();
        assert!(
            matches!(
                closed,
                Err(Error::InHostFunction {
                    call: "cuGraphExecDestroy"
                })
            ),
            "{closed:?}"
        );
        assert_eq!(
            m.host_fn_api_calls(),
            0,
            "no driver call inside the host function"
        );
        assert_eq!(
            cuda_stream::deferred_total() - queued,
            2,
            "both destroys queued"
        );
        s.synchronize().unwrap(); // drains the queue
        assert_eq!(cuda_stream::deferred_pending(), 0);
        assert_eq!(
            (m.live_graphs(), m.live_graph_execs()),
            (graphs - 1, execs - 1)
        );
        worker_idle(m);
        assert_eq!((m.bad_destroys(), m.bad_uses()), (0, 0));
    });
}

#[test]
fn a_host_node_closure_owning_a_stream_is_freed_without_a_driver_call_on_the_driver_thread() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let mut s = ctx.new_stream().unwrap();
        let owned = Arc::new(ctx.new_stream().unwrap());
        let raw = owned.raw();
        let keep = owned.clone();
        let graph = s
            .capture(CaptureMode::ThreadLocal, |cap| {
                cap.launch_host_func(move || {
                    let _keep = &keep;
                })
            })
            .unwrap();
        drop(owned);
        // The user object's destructor drops the last owner, on the driver's thread.
        drop(graph);
        worker_idle(m);
        assert_eq!(
            m.host_fn_api_calls(),
            0,
            "no driver call from the destructor"
        );
        assert_eq!(m.destroyed(raw), Some(false), "its destroy is queued");
        assert!(cuda_stream::drain_deferred() >= 1);
        assert_eq!(m.destroyed(raw), Some(true));
        assert_eq!((m.bad_destroys(), m.bad_uses()), (0, 0));
    });
}
