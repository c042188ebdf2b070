//! Graph capture and replay on the GPU: kernels on two forks and a host function replayed 1,000
//! times, updates with new kernel parameters, an executable graph dropped mid-replay, events in
//! a capture, captures begun elsewhere, the run-once refusal, and each bad input.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cuda_stream::ffi::CUresult;
use cuda_stream::{
    AsStream, CaptureMode, CaptureStatus, Error, EventOptions, InstantiateOptions, Stream,
    StreamOptions,
};
use cuda_stream_tests::{
    DeviceBuffer, Kernels, RawContext, Window, alone, alongside_others, bind, error_chain, gpu,
    raw_stream_create, raw_stream_destroy, sys,
};

/// Counts drops of a host function's capture.
struct DropCount(Arc<AtomicUsize>);

impl Drop for DropCount {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn counter() -> Arc<AtomicUsize> {
    Arc::new(AtomicUsize::new(0))
}

fn load(a: &AtomicUsize) -> usize {
    a.load(Ordering::SeqCst)
}

/// Waits up to 10 s for `cond`.
fn eventually(what: &str, cond: impl Fn() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < Duration::from_secs(60), "never: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Begins a capture on a raw stream as a framework would (`cuStreamBeginCapture`, thread-local).
fn raw_begin(s: sys::CUstream) {
    let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    // SAFETY: a live stream.
    let rc = unsafe { sys::cuStreamBeginCapture(s, mode) };
    assert_eq!(rc, CUresult::CUDA_SUCCESS, "cuStreamBeginCapture");
}

/// Ends the raw capture of `s`, destroys its graph if any, and returns the end's result.
fn raw_end(s: sys::CUstream) -> CUresult {
    let mut graph = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; the capture was begun on this thread.
    let rc = unsafe { sys::cuStreamEndCapture(s, &mut graph) };
    if !graph.is_null() {
        // SAFETY: the capture handed the graph over.
        let d = unsafe { sys::cuGraphDestroy(graph) };
        assert_eq!(d, CUresult::CUDA_SUCCESS, "cuGraphDestroy");
    }
    rc
}

#[test]
fn kernels_on_two_forks_and_a_host_function_replay_1000_times() {
    let _modes = alongside_others();
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let buf = DeviceBuffer::new(&ctx, 3);
    let mut s = ctx.new_stream().unwrap();
    let count = counter();
    let c = count.clone();
    let start = Instant::now();
    let graph = s
        .capture(CaptureMode::ThreadLocal, |cap| {
            cap.scope(|sc| {
                let (a, b) = (sc.fork()?, sc.fork()?);
                // A slow fork: a missing join would let the copy below read a stale value.
                k.spin(a, Duration::from_micros(50));
                k.add_u32(a, buf.at(0), 1);
                k.add_u32(b, buf.at(1), 2);
                Ok(())
            })?;
            k.copy_u32(cap, buf.at(2), buf.at(0));
            cap.launch_host_func(move || {
                c.fetch_add(1, Ordering::SeqCst);
            })
        })
        .unwrap();
    let nodes = graph.node_count().unwrap();
    let exec = graph.instantiate().unwrap();
    println!(
        "captured {nodes} nodes and instantiated in {:?}",
        start.elapsed()
    );
    assert!(
        nodes >= 5,
        "spin, two adds, the copy and the host function: {nodes}"
    );
    let start = Instant::now();
    for i in 1..=1000u32 {
        exec.launch(&s).unwrap();
        s.synchronize().unwrap();
        assert_eq!(buf.read(), vec![i, 2 * i, i], "replay {i}");
        assert_eq!(load(&count), i as usize, "host function runs, replay {i}");
    }
    println!("1000 replays, each checked, in {:?}", start.elapsed());
}

#[test]
fn an_executable_graph_is_updated_with_new_kernel_parameters() {
    let _modes = alongside_others();
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let buf = DeviceBuffer::new(&ctx, 2);
    let mut s = ctx.new_stream().unwrap();
    let add = |s: &mut cuda_stream::OwnedStream, at: usize, v: u32| {
        s.capture(CaptureMode::ThreadLocal, |cap| {
            k.add_u32(cap, buf.at(at), v);
            Ok(())
        })
        .unwrap()
    };
    let first = add(&mut s, 0, 1);
    let second = add(&mut s, 1, 5);
    let mut exec = first.instantiate().unwrap();
    exec.launch(&s).unwrap();
    exec.update(&second).unwrap();
    exec.launch(&s).unwrap();
    exec.launch(&s).unwrap();
    s.synchronize().unwrap();
    assert_eq!(
        buf.read(),
        vec![1, 10],
        "the update changed the kernel's arguments"
    );

    // A graph of another shape is refused, with the reason; the executable graph is unchanged.
    let two = s
        .capture(CaptureMode::ThreadLocal, |cap| {
            k.add_u32(cap, buf.at(0), 1);
            k.add_u32(cap, buf.at(0), 1);
            Ok(())
        })
        .unwrap();
    let err = exec.update(&two).unwrap_err();
    println!("update from another shape: {}", error_chain(&err));
    assert!(matches!(err, Error::GraphUpdate { .. }), "{err:?}");
    assert_eq!(err.call(), Some("cuGraphExecUpdate"));
    assert_eq!(
        err.driver_code(),
        Some(CUresult::CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE)
    );
    exec.launch(&s).unwrap();
    s.synchronize().unwrap();
    assert_eq!(buf.read(), vec![1, 15]);
}

#[test]
fn an_executable_graph_dropped_mid_replay_runs_and_frees_its_host_function_once() {
    let _modes = alongside_others();
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let mut s = ctx.new_stream().unwrap();
    let (ran, dropped) = (counter(), counter());
    let (r, d) = (ran.clone(), DropCount(dropped.clone()));
    let graph = s
        .capture(CaptureMode::ThreadLocal, |cap| {
            k.spin(cap, Duration::from_millis(300));
            cap.launch_host_func(move || {
                let _keep = &d;
                r.fetch_add(1, Ordering::SeqCst);
            })
        })
        .unwrap();
    let exec = graph.instantiate().unwrap();
    drop(graph);
    let w = Window::start(Duration::from_millis(300));
    exec.launch(&s).unwrap();
    drop(exec); // the spin kernel is still running, unless this thread was held up meanwhile
    let (ran_then, dropped_then) = (load(&ran), load(&dropped));
    let dropped_after = w.elapsed();
    w.assert_pending(ran_then == 0, "the host function, after the drop");
    w.assert_pending(
        dropped_then == 0,
        "the closure's free (it outlives the executable graph)",
    );
    s.synchronize().unwrap();
    assert_eq!(load(&ran), 1, "the host function ran after the drop");
    eventually("the closure is freed", || load(&dropped) == 1);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(load(&dropped), 1, "freed exactly once");
    println!(
        "GraphExec dropped {dropped_after:?} into a 300 ms replay; the host function ran, \
         then was freed once"
    );
}

#[test]
fn events_recorded_and_waited_in_a_capture() {
    let _modes = alongside_others();
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let (src, dst) = (DeviceBuffer::new(&ctx, 1), DeviceBuffer::new(&ctx, 1));
    let producer = ctx.new_stream().unwrap();
    let mut s = ctx.new_stream().unwrap();
    let ready = Arc::new(ctx.new_event(EventOptions::new()).unwrap());
    let done = Arc::new(ctx.new_event(EventOptions::new()).unwrap());
    let graph = s
        .capture(CaptureMode::ThreadLocal, |cap| {
            // Each replay waits for `ready`'s latest record, then copies, then records `done`.
            cap.wait_event(&ready)?;
            let marker = cap.record_event()?;
            cap.scope(|sc| {
                let f = sc.fork()?;
                f.wait_captured(marker)?;
                k.copy_u32(f, dst.ptr(), src.ptr());
                Ok(())
            })?;
            cap.record_external(&done)
        })
        .unwrap();
    let exec = graph.instantiate().unwrap();
    for value in [17u32, 42] {
        k.store_after_spin(&producer, src.ptr(), value, Duration::from_millis(100));
        producer.record(&ready).unwrap();
        exec.launch(&s).unwrap();
        s.synchronize().unwrap();
        assert_eq!(dst.get(0), value, "the replay waited for the producer");
        assert!(done.query().unwrap(), "the replay recorded the event");
    }
    drop((exec, graph));
    eventually("the graph lets go of its events", || {
        Arc::strong_count(&ready) == 1 && Arc::strong_count(&done) == 1
    });
}

#[test]
fn rust_enqueues_into_a_capture_begun_elsewhere_and_status_is_seen_on_any_stream() {
    let _modes = alongside_others();
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let buf = DeviceBuffer::new(&ctx, 2);
    let owned = ctx.new_stream().unwrap();
    assert_eq!(owned.capture_status().unwrap(), CaptureStatus::None);
    let raw = raw_stream_create(&ctx, 1);
    let framework = ();
    // SAFETY: `raw` lives until the raw destroy at the end, after every view is gone.
    let view = unsafe { Stream::borrow_raw(raw, &framework) }.unwrap();
    assert_eq!(view.capture_status().unwrap(), CaptureStatus::None);
    raw_begin(raw);
    let status = view.capture_status().unwrap();
    let CaptureStatus::Active { id } = status else {
        panic!("a borrowed stream in a capture reports {status:?}")
    };
    let count = counter();
    let c = count.clone();
    view.in_capture(|cap| {
        assert_eq!(cap.capture_id(), id);
        k.add_u32(cap, buf.at(0), 3);
        cap.scope(|sc| {
            let f = sc.fork()?;
            assert_eq!(f.status()?, CaptureStatus::Active { id });
            k.add_u32(f, buf.at(1), 4);
            Ok(())
        })?;
        cap.launch_host_func(move || {
            c.fetch_add(1, Ordering::SeqCst);
        })
    })
    .unwrap();
    let mut graph = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; the capture was begun on this thread.
    let rc = unsafe { sys::cuStreamEndCapture(raw, &mut graph) };
    assert_eq!(
        rc,
        CUresult::CUDA_SUCCESS,
        "the framework's capture ends joined"
    );
    assert_eq!(view.capture_status().unwrap(), CaptureStatus::None);
    // The framework instantiates and replays; the Rust closure lives in its graph.
    // SAFETY: the graph from the capture; its work is in `ctx`.
    let graph = unsafe { cuda_stream::Graph::from_raw(graph, &ctx) }.unwrap();
    let exec = graph.instantiate().unwrap();
    drop(graph);
    for i in 1..=3u32 {
        exec.launch(&owned).unwrap();
        owned.synchronize().unwrap();
        assert_eq!(buf.read(), vec![3 * i, 4 * i]);
        assert_eq!(load(&count), i as usize);
    }
    drop(exec);
    // SAFETY: created above; every view is gone.
    unsafe { raw_stream_destroy(raw) };
}

#[test]
fn run_once_host_functions_and_callbacks_are_refused_on_a_capturing_stream() {
    let _modes = alongside_others();
    let Some(ctx) = gpu() else { return };
    let raw = raw_stream_create(&ctx, 1);
    let framework = ();
    // SAFETY: `raw` lives until the raw destroy at the end, after every view is gone.
    let view = unsafe { Stream::borrow_raw(raw, &framework) }.unwrap();
    raw_begin(raw);
    let dropped = counter();
    let d = DropCount(dropped.clone());
    let err = view.launch_host_func(move || drop(d)).unwrap_err();
    println!("launch_host_func during a capture: {err}");
    assert!(
        matches!(
            err,
            Error::Refused {
                call: "cuLaunchHostFunc",
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(load(&dropped), 1, "the refused closure is dropped at once");
    let completed = futures_ready(view.completed());
    assert!(
        matches!(completed, Err(Error::Refused { .. })),
        "{completed:?}"
    );
    assert!(matches!(
        view.capture_status().unwrap(),
        CaptureStatus::Active { .. }
    ));
    // The driver refuses callbacks in a capture, and invalidates it.
    let err = view.add_callback(|_| ()).unwrap_err();
    println!("add_callback during a capture: {}", error_chain(&err));
    assert_eq!(err.call(), Some("cuStreamAddCallback"));
    let status = view.capture_status().unwrap();
    println!("capture status after the refused callback: {status}");
    let rc = raw_end(raw);
    println!("cuStreamEndCapture after it: {}", sys::result_name(rc));
    assert_eq!(view.capture_status().unwrap(), CaptureStatus::None);
    view.launch_host_func(|| ()).unwrap();
    view.synchronize().unwrap();
    // SAFETY: created above; every view is gone after this.
    unsafe { raw_stream_destroy(raw) };
}

/// Polls a completion future once (it is ready at once when enqueueing failed).
fn futures_ready(c: cuda_stream::Completion) -> cuda_stream::Result<()> {
    use std::future::Future;
    use std::task::{Context as TaskContext, Poll, Waker};
    let mut c = std::pin::pin!(c);
    match c.as_mut().poll(&mut TaskContext::from_waker(Waker::noop())) {
        Poll::Ready(r) => r,
        Poll::Pending => Ok(()),
    }
}

#[test]
fn a_panic_in_a_replay_is_reported_on_the_launch_stream() {
    let _modes = alongside_others();
    let Some(ctx) = gpu() else { return };
    let mut s = ctx.new_stream().unwrap();
    let other = ctx.new_stream().unwrap();
    let exec = s
        .capture(CaptureMode::ThreadLocal, |cap| {
            cap.launch_host_func(|| panic!("in a replay"))
        })
        .unwrap()
        .instantiate()
        .unwrap();
    exec.launch(&other).unwrap();
    match other.synchronize() {
        Err(Error::HostFnPanicked { stream, message }) => {
            assert_eq!(stream, other.raw() as usize);
            assert_eq!(message, "in a replay");
        }
        r => panic!("expected the panic on the launch stream, got {r:?}"),
    }
    other.synchronize().unwrap();
    s.synchronize().unwrap();
}

#[test]
fn instantiate_options_upload_and_debug_dot() {
    let _modes = alongside_others();
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let buf = DeviceBuffer::new(&ctx, 1);
    let pool = cuda_stream::StreamPool::new(&ctx, StreamOptions::new());
    let mut lease = pool.acquire().unwrap();
    let graph = lease
        .capture(CaptureMode::Relaxed, |cap| {
            k.add_u32(cap, buf.ptr(), 1);
            Ok(())
        })
        .unwrap();
    let plain = graph
        .instantiate_with(
            InstantiateOptions::new()
                .auto_free_on_launch(true)
                .use_node_priority(true),
        )
        .unwrap();
    plain.upload(&lease).unwrap();
    plain.launch(&lease).unwrap();
    let uploaded = graph
        .instantiate_with(InstantiateOptions::new().upload(lease.as_stream()))
        .unwrap();
    uploaded.launch(&lease).unwrap();
    lease.synchronize().unwrap();
    assert_eq!(buf.get(0), 2);
    let path = std::env::temp_dir().join(format!("cuda-stream-graph-{}.dot", std::process::id()));
    graph.debug_dot(&path).unwrap();
    let dot = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(dot.contains("digraph"), "{dot}");
    println!("debug_dot wrote {} bytes", dot.len());
}

#[test]
fn bad_input_is_a_clear_error_and_the_stream_stays_usable() {
    let _modes = alone();
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let buf = DeviceBuffer::new(&ctx, 1);

    // Capturing the legacy default stream: the driver refuses.
    // SAFETY: nothing else uses this context's legacy stream during the call.
    let err = unsafe {
        ctx.legacy_stream()
            .capture(CaptureMode::ThreadLocal, |_| Ok(()))
    }
    .unwrap_err();
    println!("capture of the legacy stream: {}", error_chain(&err));
    assert_eq!(err.call(), Some("cuStreamBeginCapture"));
    ctx.legacy_stream().synchronize().unwrap();
    // The per-thread default stream: refused before the driver is asked.
    // SAFETY: as above.
    let err = unsafe {
        ctx.per_thread_stream()
            .capture(CaptureMode::ThreadLocal, |_| Ok(()))
    }
    .unwrap_err();
    assert!(matches!(err, Error::Refused { .. }), "{err:?}");

    // A nested capture on one stream.
    let s = ctx.new_stream().unwrap();
    let view = s.as_stream();
    let mut inner = None;
    // SAFETY: the stream is used by this thread only; the inner capture is the misuse tested.
    let outer = unsafe {
        view.capture(CaptureMode::ThreadLocal, |_| {
            // SAFETY: as above.
            inner = Some(view.capture(CaptureMode::ThreadLocal, |_| Ok(())));
            Ok(())
        })
    };
    let inner = inner.unwrap().unwrap_err();
    println!(
        "nested capture: {}; the outer capture: {:?}",
        error_chain(&inner),
        outer.as_ref().map(|_| "a graph")
    );
    assert_eq!(inner.call(), Some("cuStreamBeginCapture"));
    assert_eq!(s.capture_status().unwrap(), CaptureStatus::None);
    s.synchronize().unwrap();

    // Enqueueing into a capture that does not exist.
    let err = s.in_capture(|_| Ok(())).unwrap_err();
    assert!(
        matches!(
            err,
            Error::NotCapturing {
                status: CaptureStatus::None
            }
        ),
        "{err:?}"
    );

    // Launching on a stream of another context (of the same device here, so that it runs on a
    // one-GPU machine): refused before the driver is asked.
    let mut t = ctx.new_stream().unwrap();
    let exec = t
        .capture(CaptureMode::ThreadLocal, |cap| {
            k.add_u32(cap, buf.ptr(), 1);
            Ok(())
        })
        .unwrap()
        .instantiate()
        .unwrap();
    let other = RawContext::create(ctx.device());
    let raw = raw_stream_create(&other, 1);
    {
        // SAFETY: `raw` lives until its destroy below.
        let foreign = unsafe { Stream::borrow_raw(raw, &other) }.unwrap();
        let err = exec.launch(&foreign).unwrap_err();
        println!("launch on another context: {err}");
        assert!(
            matches!(
                err,
                Error::Refused {
                    call: "cuGraphLaunch",
                    ..
                }
            ),
            "{err:?}"
        );
    }
    // SAFETY: created above; the view is gone.
    unsafe { raw_stream_destroy(raw) };
    drop(other);
    exec.launch(&t).unwrap();
    t.synchronize().unwrap();
    assert_eq!(buf.get(0), 1);

    // A global-mode capture broken by a prohibited call on another thread ends as an error
    // with its status; the partial graph is destroyed and the stream is usable again.
    let mut seen = None;
    let r = t.capture(CaptureMode::Global, |cap| {
        k.add_u32(cap, buf.ptr(), 100);
        seen = Some(std::thread::scope(|sc| {
            sc.spawn(|| {
                let _bound = bind(&ctx);
                let mut p = 0;
                // SAFETY: a valid out-pointer; the context is current.
                let rc = unsafe { sys::cuMemAlloc(&mut p, 4) };
                if rc == CUresult::CUDA_SUCCESS {
                    // SAFETY: allocated just above.
                    unsafe { sys::cuMemFree(p) };
                }
                rc
            })
            .join()
            .unwrap()
        }));
        Ok(())
    });
    println!(
        "cuMemAlloc on another thread during a global capture: {}; the capture: {}",
        sys::result_name(seen.unwrap()),
        r.as_ref()
            .map_or_else(|e| error_chain(e), |_| "a graph".into())
    );
    match r {
        Err(Error::CaptureFailed {
            call: "cuStreamEndCapture",
            status: CaptureStatus::Invalidated { .. },
            code,
        }) => assert_eq!(code.0, CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED),
        r => panic!("expected an invalidated capture, got {r:?}"),
    }
    assert_eq!(t.capture_status().unwrap(), CaptureStatus::None);
    t.synchronize().unwrap();
    assert_eq!(buf.get(0), 1, "nothing of the broken capture ran");
    // The same call in a thread-local capture breaks nothing.
    let graph = t.capture(CaptureMode::ThreadLocal, |cap| {
        k.add_u32(cap, buf.ptr(), 1);
        std::thread::scope(|sc| {
            sc.spawn(|| {
                let _bound = bind(&ctx);
                let mut p = 0;
                // SAFETY: as above.
                let rc = unsafe { sys::cuMemAlloc(&mut p, 4) };
                assert_eq!(rc, CUresult::CUDA_SUCCESS);
                // SAFETY: allocated just above.
                unsafe { sys::cuMemFree(p) };
            });
        });
        Ok(())
    });
    graph.unwrap().instantiate().unwrap().launch(&t).unwrap();
    t.synchronize().unwrap();
    assert_eq!(buf.get(0), 2);
}

#[test]
fn a_capture_that_fails_or_panics_leaves_no_graph_and_a_usable_stream() {
    let _modes = alongside_others();
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let buf = DeviceBuffer::new(&ctx, 1);
    let mut s = ctx.new_stream().unwrap();
    let dropped = counter();
    let d = DropCount(dropped.clone());
    let err = s
        .capture(CaptureMode::ThreadLocal, |cap| {
            k.add_u32(cap, buf.ptr(), 1);
            cap.launch_host_func(move || {
                let _keep = &d;
            })?;
            Err(Error::NotCapturing {
                status: CaptureStatus::None,
            })
        })
        .unwrap_err();
    assert!(matches!(err, Error::NotCapturing { .. }), "{err:?}");
    eventually("the discarded graph's closure is freed", || {
        load(&dropped) == 1
    });
    let panicked = Mutex::new(false);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        s.capture(CaptureMode::ThreadLocal, |cap| {
            k.add_u32(cap, buf.ptr(), 1);
            *panicked.lock().unwrap() = true;
            panic!("inside the capture")
        })
    }));
    assert!(r.is_err() && *panicked.lock().unwrap());
    assert_eq!(s.capture_status().unwrap(), CaptureStatus::None);
    k.add_u32(&s, buf.ptr(), 7);
    s.synchronize().unwrap();
    assert_eq!(buf.get(0), 7, "only the work after the captures ran");
}

#[test]
fn a_capture_scope_forks_from_other_threads() {
    let _modes = alongside_others();
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let buf = DeviceBuffer::new(&ctx, 4);
    let mut s = ctx.new_stream().unwrap();
    let graph = s
        .capture(CaptureMode::ThreadLocal, |cap| {
            cap.scope(|sc| {
                let forks: Vec<_> = (0..4).map(|_| sc.fork()).collect::<Result<_, _>>()?;
                // The view is Send: other threads enqueue into the capture.
                std::thread::scope(|t| {
                    for (i, f) in forks.iter().enumerate() {
                        let (k, buf) = (&k, &buf);
                        let f = *f;
                        t.spawn(move || k.add_u32(f, buf.at(i), i as u32 + 1));
                    }
                });
                Ok(())
            })
        })
        .unwrap();
    let exec = graph.instantiate().unwrap();
    exec.launch(&s).unwrap();
    exec.launch(&s).unwrap();
    s.synchronize().unwrap();
    assert_eq!(buf.read(), vec![2, 4, 6, 8]);
}
