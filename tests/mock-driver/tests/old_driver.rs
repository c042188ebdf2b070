//! `cuda-stream` on every driver generation: each flavour of the mock (CUDA 11.4, 12.0, 12.2,
//! 12.4, 12.8 and 13.0, with and without `cuGetProcAddress`), and the CUDA 13.0 ones with the
//! ABI limited to CUDA 12.0 (and 11.4, 11.0) by `CUDA_SYS_ABI_VERSION`. Each operation uses the newest ABI the driver
//! has and falls back to older ones of the same meaning; `Error::Unsupported` comes only where no
//! ABI exists, naming the call and the versions involved:
//!
//! - `Event::elapsed_since`: `cuEventElapsedTime_v12080` from CUDA 12.8, the original
//!   `cuEventElapsedTime_v2000` before (it works on every flavour);
//! - `Stream::device`: `cuStreamGetDevice` from CUDA 12.8, the stream's context before;
//! - `Stream::id`: `cuStreamGetId`, CUDA 12.0 and later, `Unsupported` before;
//! - graphs: `capture_status` and captures through `cuStreamGetCaptureInfo_v3` from CUDA 12.3,
//!   `_v2` (CUDA 11.3) before, `Unsupported` before that; `instantiate_with` an upload through
//!   `cuGraphInstantiateWithParams` from CUDA 12.0, `cuGraphInstantiateWithFlags` and
//!   `cuGraphUpload` before; `instantiate` through `cuGraphInstantiateWithFlags` from CUDA 11.4,
//!   its CUDA 11.0 ABI before (flags `Unsupported` there); `GraphExec::update` through
//!   `cuGraphExecUpdate_v2` from CUDA 12.0, the CUDA 10.2 ABI before, with the same
//!   `Error::GraphUpdate` for a refused update. (The ABI limit of CUDA 11.0 shows the oldest
//!   fallbacks: no flavour is that old.)
//!
//! Each configuration runs in a child process of its own (the mock must be the process-wide
//! driver from the first call on, and its state is per process), which loads the flavour through
//! `CUDA_SYS_LIBCUDA` exactly as a program loads libcuda; the parent test,
//! [`every_driver_generation_runs_cuda_stream`], prints one line per configuration.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use cuda_mock_driver::{FLAVOURS, Flavour, MockDriver, Serialized, report, run_in_each_flavour};
use cuda_stream::ffi::{CUgraphExecUpdateResult, CUstreamCaptureMode};
use cuda_stream::ffi::{CUresult, LoadError};
use cuda_stream::{
    AsStream, CaptureMode, CaptureStatus, Context, Device, Error, EventOptions, Graph,
    InstantiateOptions, OwnedStream, Stream, driver_version,
};

static LOCK: Mutex<()> = Mutex::new(());

/// What a child process runs against.
struct Setup {
    flavour: &'static Flavour,
    /// The newest ABI the bindings resolve: the flavour's version, or `CUDA_SYS_ABI_VERSION`'s
    /// limit when lower.
    abi: i32,
    mock: MockDriver,
}

/// In a child: serialises the test, checks that the process-wide driver is the flavour's
/// library, and resets the mock. `None` in the parent process (the test then does nothing).
fn setup() -> Option<(Serialized, &'static Setup)> {
    static SETUP: OnceLock<Setup> = OnceLock::new();
    let flavour = Flavour::from_env()?;
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let s = SETUP.get_or_init(|| {
        let limit = cuda_stream_sys::DriverOptions::from_env()
            .expect("a valid CUDA_SYS_ABI_VERSION")
            .abi_limit();
        let abi = limit.map_or(flavour.version, |l| (l as i32).min(flavour.version));
        let driver = cuda_stream_sys::Driver::global().expect("the flavour's library loads");
        assert_eq!(driver.path(), flavour.path());
        Setup {
            flavour,
            abi,
            // SAFETY: the mock driver, built with this test.
            mock: unsafe { MockDriver::open(flavour.path()) }
                .expect("the mock's control functions resolve"),
        }
    });
    s.mock.reset();
    Some((s.mock.checked(guard), s))
}

/// Checks that `err` is `Unsupported` for `call`, whose ABI needs CUDA `since` (`introduced`),
/// and that its message and source say what is missing and why.
fn assert_unsupported(s: &Setup, err: &Error, call: &str, since: u32, introduced: &str) {
    let driver = Some(s.flavour.version);
    let limited = s.abi < s.flavour.version;
    match err {
        Error::Unsupported {
            call: c,
            driver_version,
            source,
        } => {
            assert_eq!(*c, call);
            assert_eq!(*driver_version, driver);
            assert!(
                matches!(source, LoadError::MissingSymbol { name, since: v, driver_version: d, abi_limit, .. }
                    if *name == call && *v == since && *d == driver
                        && abi_limit.is_some() == limited),
                "{source:?}"
            );
        }
        other => panic!("expected Unsupported for {call}, got {other:?}"),
    }
    assert_eq!(err.call(), Some(call));
    assert!(err.is_unsupported());
    let flavour_version = cuda_stream_sys::format_version(s.flavour.version);
    let shown = err.to_string();
    assert!(
        shown.contains(call) && shown.contains(&format!("CUDA {flavour_version}")),
        "{shown}"
    );
    let source = std::error::Error::source(err)
        .expect("Unsupported has the loader's account as its source")
        .to_string();
    assert!(
        source.contains(call) && source.contains(&format!("CUDA {introduced}")),
        "{source}"
    );
    if limited {
        assert!(source.contains("ABI limit"), "{source}");
        assert!(shown.contains("ABI limited to CUDA"), "{shown}");
    }
}

#[test]
fn the_driver_is_the_flavour() {
    let Some((_lock, s)) = setup() else { return };
    assert_eq!(driver_version().unwrap(), s.flavour.version);
    assert_eq!(s.mock.flavour(), s.flavour.name);
    let d = cuda_stream_sys::Driver::global().unwrap();
    assert_eq!(d.abi_version(), s.abi as u32);
    assert_eq!(d.driver_version(), Some(s.flavour.version));
}

#[test]
fn stream_ids_need_cuda_12_0() {
    let Some((_lock, s)) = setup() else { return };
    let m = &s.mock;
    let ctx = Context::primary(0).unwrap();
    let a = ctx.new_stream().unwrap();
    let b = ctx.new_stream().unwrap();
    let owner = ();
    // SAFETY: `a` outlives the view, which is dropped at the end of this function before it.
    let view = unsafe { Stream::borrow_raw(a.raw(), &owner) }.unwrap();
    if s.abi >= 12000 {
        let id = a.id().unwrap();
        assert_ne!(id, b.id().unwrap());
        assert_eq!(view.id().unwrap(), id);
        ctx.legacy_stream().id().unwrap();
        assert!(m.calls("cuStreamGetId") >= 4);
    } else {
        for err in [
            a.id().unwrap_err(),
            ctx.legacy_stream().id().unwrap_err(),
            view.id().unwrap_err(),
        ] {
            assert_unsupported(s, &err, "cuStreamGetId", 12000, "12.0");
        }
        assert_eq!(m.calls("cuStreamGetId"), 0);
    }
    assert_eq!((m.bad_destroys(), m.bad_uses()), (0, 0));
}

#[test]
fn stream_device_asks_the_stream_from_cuda_12_8_and_the_context_before() {
    let Some((_lock, s)) = setup() else { return };
    let m = &s.mock;
    for ordinal in [0, 1] {
        let ctx = Context::primary(ordinal).unwrap();
        let st = ctx.new_stream().unwrap();
        m.reset();
        assert_eq!(st.device().unwrap(), Device::new(ordinal).unwrap());
        let owner = ();
        // SAFETY: `st` outlives the view.
        let view = unsafe { Stream::borrow_raw(st.raw(), &owner) }.unwrap();
        assert_eq!(view.device().unwrap().ordinal(), ordinal);
        let by_stream = s.abi >= 12080;
        let (stream_calls, ctx_calls) = (m.calls("cuStreamGetDevice"), m.calls("cuCtxGetDevice"));
        if by_stream {
            assert_eq!((stream_calls, ctx_calls), (2, 0), "{}", s.flavour.name);
        } else {
            assert_eq!((stream_calls, ctx_calls), (0, 2), "{}", s.flavour.name);
        }
        // The default streams are answered by their context everywhere.
        assert_eq!(ctx.legacy_stream().device().unwrap().ordinal(), ordinal);
        // A failing call is reported as itself.
        let asked = if by_stream {
            "cuStreamGetDevice"
        } else {
            "cuCtxGetDevice"
        };
        m.fail(asked, 1, CUresult::CUDA_ERROR_LAUNCH_FAILED);
        let err = st.device().unwrap_err();
        assert_eq!(err.call(), Some(asked), "{err:?}");
    }
    assert_eq!((m.bad_destroys(), m.bad_uses()), (0, 0));
}

#[test]
fn elapsed_time_works_on_every_driver_through_the_newest_abi_it_has() {
    let Some((_lock, s)) = setup() else { return };
    let m = &s.mock;
    let ctx = Context::primary(0).unwrap();
    let st = ctx.new_stream().unwrap();
    let timing = EventOptions::new().timing(true);
    let start = st.record_event_with(timing).unwrap();
    st.launch_host_func(|| std::thread::sleep(Duration::from_millis(2)))
        .unwrap();
    let end = st.record_event_with(timing).unwrap();
    end.synchronize().unwrap();
    m.reset();
    let elapsed = end.elapsed_since(&start).unwrap();
    assert!(elapsed >= Duration::from_millis(1), "{elapsed:?}");
    // The ABI used: the 12.8 one where the bindings may resolve it, the original one before.
    let (new, old) = ("cuEventElapsedTime", "cuEventElapsedTime_v2000");
    let (used, unused) = if s.abi >= 12080 {
        (new, old)
    } else {
        (old, new)
    };
    assert_eq!(m.calls(used), 1, "{}", s.flavour.name);
    assert_eq!(m.calls(unused), 0, "{}", s.flavour.name);
    // A failure of that ABI is reported under the name C code uses.
    m.fail(used, 1, CUresult::CUDA_ERROR_LAUNCH_FAILED);
    let err = end.elapsed_since(&start).unwrap_err();
    assert_eq!(err.call(), Some("cuEventElapsedTime"), "{err:?}");
    assert_eq!(err.driver_code(), Some(CUresult::CUDA_ERROR_LAUNCH_FAILED));
    // The driver's other answers keep their meaning.
    let unfinished = st.record_event_with(timing).unwrap();
    m.fail(used, 1, CUresult::CUDA_ERROR_NOT_READY);
    assert!(matches!(
        unfinished.elapsed_since(&start),
        Err(Error::NotCompleted)
    ));
    assert_eq!((m.bad_destroys(), m.bad_uses()), (0, 0));
}

#[test]
fn everything_else_works_on_every_driver() {
    let Some((_lock, s)) = setup() else { return };
    let m = &s.mock;
    let base = (m.live_streams(), m.live_events(), m.live_primary_retains());
    // On a thread of its own, joined, so the `wait_stream` event it caches is destroyed here.
    std::thread::scope(|t| {
        t.spawn(|| {
            let ctx = Context::primary(0).unwrap();
            let a = ctx.new_stream().unwrap();
            let b = ctx.new_stream().unwrap();
            a.wait_stream(&b).unwrap();
            let e = b.record_event().unwrap();
            a.wait_event(&e).unwrap();
            let (tx, rx) = std::sync::mpsc::channel();
            a.launch_host_func(move || tx.send(1).unwrap()).unwrap();
            a.scope(|sc| sc.fork()?.query().map(drop)).unwrap();
            a.synchronize().unwrap();
            assert_eq!(rx.try_recv(), Ok(1));
            assert!(a.query().unwrap());
            assert!(a.is_nonblocking().unwrap());
            assert_eq!(a.as_stream().priority().unwrap(), 0);
            // The scope's pool keeps this context for the process, and with it the spare
            // events (`e`'s handle): destroyed here, so that what is left is the pool's.
            drop(e);
            ctx.clear_event_cache().unwrap();
        })
        .join()
        .unwrap();
    });
    // Only the scope's pool lives on (one stream, one retain of the context), for the process;
    // no other test of this binary opens a scope.
    assert_eq!(
        (m.live_streams(), m.live_events(), m.live_primary_retains()),
        (base.0 + 1, base.1, base.2 + 1)
    );
    assert_eq!((m.bad_destroys(), m.bad_uses()), (0, 0));
}

/// Checks that `err` is `Unsupported` for `call`, with a source saying what CUDA version the
/// missing ABI needs (`introduced`).
fn assert_unsupported_abi(err: &Error, call: &str, introduced: &str) {
    assert!(err.is_unsupported(), "{err:?}");
    assert_eq!(err.call(), Some(call), "{err:?}");
    assert!(err.to_string().contains(call), "{err}");
    let source = std::error::Error::source(err)
        .expect("Unsupported has the loader's account as its source")
        .to_string();
    assert!(source.contains(&format!("CUDA {introduced}")), "{source}");
}

/// Captures `n` host functions that count their runs into `ran` (plus an event record and a
/// wait on it, so the graph has more than one kind of node).
fn capture_counting(st: &mut OwnedStream, ran: &Arc<AtomicUsize>, n: usize) -> Graph {
    st.capture(CaptureMode::ThreadLocal, |cap| {
        assert!(matches!(cap.status()?, CaptureStatus::Active { .. }));
        let ev = cap.record_event()?;
        cap.wait_captured(ev)?;
        for _ in 0..n {
            let ran = ran.clone();
            cap.launch_host_func(move || {
                ran.fetch_add(1, Ordering::SeqCst);
            })?;
        }
        Ok(())
    })
    .unwrap()
}

/// Begins and ends a capture of one host function with raw driver calls (resolved at the ABI
/// limit too), for a driver where `cuda-stream` cannot capture.
fn raw_capture(ctx: &Context, st: &OwnedStream) -> Graph {
    unsafe extern "C" fn nothing(_: *mut std::ffi::c_void) {}
    let global = CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL;
    let mut raw = std::ptr::null_mut();
    // SAFETY: the stream is live and idle; the host function does nothing; `raw` is a valid
    // out-pointer.
    unsafe {
        assert_eq!(
            cuda_stream_sys::cuStreamBeginCapture(st.raw(), global),
            CUresult::CUDA_SUCCESS
        );
        let rc = cuda_stream_sys::cuLaunchHostFunc(st.raw(), Some(nothing), std::ptr::null_mut());
        assert_eq!(rc, CUresult::CUDA_SUCCESS);
        assert_eq!(
            cuda_stream_sys::cuStreamEndCapture(st.raw(), &mut raw),
            CUresult::CUDA_SUCCESS
        );
    }
    // SAFETY: a live graph nothing else has, of `ctx`'s work; its node uses nothing.
    unsafe { Graph::from_raw(raw, ctx) }.unwrap()
}

#[test]
fn graphs_work_on_every_driver_through_the_newest_abis_it_has() {
    let Some((_lock, s)) = setup() else { return };
    let m = &s.mock;
    let name = s.flavour.name;
    let (graphs, execs, objects) = (m.live_graphs(), m.live_graph_execs(), m.live_user_objects());
    std::thread::scope(|t| {
        t.spawn(|| {
            let ctx = Context::primary(0).unwrap();
            let mut st = ctx.new_stream().unwrap();
            if s.abi < 11030 {
                // No capture status before CUDA 11.3 (`cuStreamGetCaptureInfo_v2`): a clear
                // error, the capture ended, nothing left behind, the stream usable.
                let err = st
                    .capture(CaptureMode::ThreadLocal, |_| Ok(()))
                    .unwrap_err();
                assert_unsupported_abi(&err, "cuStreamGetCaptureInfo", "11.3");
                let err = st.capture_status().unwrap_err();
                assert_unsupported_abi(&err, "cuStreamGetCaptureInfo", "11.3");
                assert_eq!((m.live_captures(), m.live_graphs()), (0, graphs));
                st.synchronize().unwrap();
                // A graph captured by raw code instantiates through the CUDA 11.0 ABI; flags,
                // which need cuGraphInstantiateWithFlags (11.4), are refused by name.
                let graph = raw_capture(&ctx, &st);
                m.reset();
                let exec = graph.instantiate().unwrap();
                assert_eq!(m.calls("cuGraphInstantiate_v11000"), 1, "{name}");
                let err = graph
                    .instantiate_with(InstantiateOptions::new().auto_free_on_launch(true))
                    .unwrap_err();
                assert_unsupported_abi(&err, "cuGraphInstantiate", "11.4");
                // An upload needs cuGraphUpload (11.1): refused, the executable graph destroyed.
                let err = graph
                    .instantiate_with(InstantiateOptions::new().upload(st.as_stream()))
                    .unwrap_err();
                assert_unsupported_abi(&err, "cuGraphUpload", "11.1");
                assert_eq!(m.live_graph_execs(), execs + 1);
                let mut exec = exec;
                exec.launch(&st).unwrap();
                // The update of CUDA 10.2.
                let again = raw_capture(&ctx, &st);
                exec.update(&again).unwrap();
                assert_eq!(m.calls("cuGraphExecUpdate_v10020"), 1, "{name}");
                st.synchronize().unwrap();
                return;
            }

            let ran = Arc::new(AtomicUsize::new(0));
            m.reset();
            let graph = capture_counting(&mut st, &ran, 2);
            assert_eq!(st.capture_status().unwrap(), CaptureStatus::None);
            // The capture info's ABI: CUDA 12.3's where the bindings may resolve it, else 11.3's.
            let (v3, v2) = (
                m.calls("cuStreamGetCaptureInfo_v12030"),
                m.calls("cuStreamGetCaptureInfo_v11030"),
            );
            if s.abi >= 12030 {
                assert!(v3 >= 3 && v2 == 0, "{name}: v3 {v3}, v2 {v2}");
            } else {
                assert!(v2 >= 3 && v3 == 0, "{name}: v3 {v3}, v2 {v2}");
            }
            // A failure of that ABI is reported under the name C code uses.
            let used = if s.abi >= 12030 {
                "cuStreamGetCaptureInfo_v12030"
            } else {
                "cuStreamGetCaptureInfo_v11030"
            };
            m.fail(used, 1, CUresult::CUDA_ERROR_LAUNCH_FAILED);
            let err = st.capture_status().unwrap_err();
            assert_eq!(err.call(), Some("cuStreamGetCaptureInfo"), "{err:?}");

            // Instantiation with an upload: one call from CUDA 12.0, two before.
            m.reset();
            let mut exec = graph.instantiate().unwrap();
            let uploaded = graph
                .instantiate_with(InstantiateOptions::new().upload(st.as_stream()))
                .unwrap();
            let (with_params, upload) = (
                m.calls("cuGraphInstantiateWithParams"),
                m.calls("cuGraphUpload"),
            );
            let expected = if s.abi >= 12000 { (1, 0) } else { (0, 1) };
            assert_eq!((with_params, upload), expected, "{name}");
            assert_eq!(m.calls("cuGraphInstantiate"), 2 - expected.0, "{name}");
            // A failed upload leaves no executable graph behind.
            if s.abi < 12000 {
                let live = m.live_graph_execs();
                m.fail("cuGraphUpload", 1, CUresult::CUDA_ERROR_LAUNCH_FAILED);
                let err = graph
                    .instantiate_with(InstantiateOptions::new().upload(st.as_stream()))
                    .unwrap_err();
                assert_eq!(err.call(), Some("cuGraphUpload"), "{err:?}");
                assert_eq!(m.live_graph_execs(), live);
            }
            for _ in 0..3 {
                exec.launch(&st).unwrap();
            }
            uploaded.launch(&st).unwrap();
            st.synchronize().unwrap();
            assert_eq!(ran.load(Ordering::SeqCst), 8);

            // Updates: the ABI of CUDA 12.0 or of 10.2, with the same answers.
            let (new, old) = ("cuGraphExecUpdate_v12000", "cuGraphExecUpdate_v10020");
            let (used, unused) = if s.abi >= 12000 {
                (new, old)
            } else {
                (old, new)
            };
            m.reset();
            let same_shape = capture_counting(&mut st, &ran, 2);
            exec.update(&same_shape).unwrap();
            let other_shape = capture_counting(&mut st, &ran, 3);
            match exec.update(&other_shape).unwrap_err() {
                Error::GraphUpdate { result, node, .. } => {
                    assert_eq!(
                        result,
                        CUgraphExecUpdateResult::CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED
                    );
                    assert_ne!(node, 0, "the offending node is named");
                }
                other => panic!("{name}: expected GraphUpdate, got {other:?}"),
            }
            assert_eq!((m.calls(used), m.calls(unused)), (2, 0), "{name}");
            m.fail(used, 1, CUresult::CUDA_ERROR_LAUNCH_FAILED);
            let err = exec.update(&same_shape).unwrap_err();
            assert_eq!(err.call(), Some("cuGraphExecUpdate"), "{err:?}");
            ran.store(0, Ordering::SeqCst);
            exec.launch(&st).unwrap();
            st.synchronize().unwrap();
            assert_eq!(ran.load(Ordering::SeqCst), 2, "the update took effect");
        })
        .join()
        .unwrap();
    });
    // Every graph, executable graph and user object is gone once the worker is idle.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while m.pending_host_fns() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "host functions pending"
        );
        std::thread::yield_now();
    }
    assert_eq!(
        (m.live_graphs(), m.live_graph_execs(), m.live_user_objects()),
        (graphs, execs, objects)
    );
    assert_eq!(m.live_captures(), 0);
    assert_eq!((m.bad_destroys(), m.bad_uses()), (0, 0));
}

/// Runs this file's tests against every flavour, and against the CUDA 13.0 ones limited to the
/// CUDA 12.0, 11.4 and 11.0 ABIs, one child process each; prints a line per configuration, and fails with the output
/// of each that failed.
#[test]
fn every_driver_generation_runs_cuda_stream() {
    if Flavour::from_env().is_some() {
        return;
    }
    let all: Vec<&'static Flavour> = FLAVOURS.iter().collect();
    let args = [
        "--test-threads=1",
        "--skip",
        "every_driver_generation_runs_cuda_stream",
    ];
    let mut runs: Vec<(String, _)> = run_in_each_flavour(&all, &args, &[])
        .into_iter()
        .map(|r| (r.flavour.name.to_string(), r))
        .collect();
    let noproc = FLAVOURS.iter().find(|f| !f.proc_address).unwrap();
    for (f, limit) in [
        (Flavour::full(), "12.0"),
        (noproc, "12.0"),
        (Flavour::full(), "11.4"),
        (Flavour::full(), "11.0"),
    ] {
        let limited = run_in_each_flavour(&[f], &args, &[("CUDA_SYS_ABI_VERSION", limit)]);
        runs.extend(
            limited
                .into_iter()
                .map(|r| (format!("{}, ABI limited to {limit}", r.flavour.name), r)),
        );
    }
    let mut failed = Vec::new();
    for (name, r) in &runs {
        let passed = r.lines_containing("test result: ok. ");
        let count = passed
            .first()
            .and_then(|l| l.trim_start_matches("test result: ok. ").split(';').next());
        match (r.status.success(), count) {
            (true, Some(count)) => report(&format!("old-driver checks ({name}): {count}")),
            _ => {
                report(&format!("old-driver checks ({name}): FAILED"));
                failed.push(format!("[{name}]\n{}", r.failure_report()));
            }
        }
    }
    assert_eq!(runs.len(), FLAVOURS.len() + 4);
    assert!(
        failed.is_empty(),
        "cuda-stream failed on {} of {} driver configurations:\n{}",
        failed.len(),
        runs.len(),
        failed.join("\n")
    );
}
