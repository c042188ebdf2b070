//! `cuda-stream` on every driver generation: each flavour of the mock (CUDA 11.4, 12.0, 12.2,
//! 12.4, 12.8 and 13.0, with and without `cuGetProcAddress`), and the CUDA 13.0 ones with the
//! ABI limited to CUDA 12.0 (and 11.4) by `CUDA_SYS_ABI_VERSION`. Each operation uses the newest ABI the driver
//! has and falls back to older ones of the same meaning; `Error::Unsupported` comes only where no
//! ABI exists, naming the call and the versions involved:
//!
//! - `Event::elapsed_since`: `cuEventElapsedTime_v12080` from CUDA 12.8, the original
//!   `cuEventElapsedTime_v2000` before (it works on every flavour);
//! - `Stream::device`: `cuStreamGetDevice` from CUDA 12.8, the stream's context before;
//! - `Stream::id`: `cuStreamGetId`, CUDA 12.0 and later, `Unsupported` before.
//!
//! Each configuration runs in a child process of its own (the mock must be the process-wide
//! driver from the first call on, and its state is per process), which loads the flavour through
//! `CUDA_SYS_LIBCUDA` exactly as a program loads libcuda; the parent test,
//! [`every_driver_generation_runs_cuda_stream`], prints one line per configuration.

use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use cuda_mock_driver::{FLAVOURS, Flavour, MockDriver, report, run_in_each_flavour};
use cuda_stream::ffi::{CUresult, LoadError};
use cuda_stream::{AsStream, Context, Device, Error, EventOptions, Stream, driver_version};

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
fn setup() -> Option<(MutexGuard<'static, ()>, &'static Setup)> {
    static SETUP: OnceLock<Setup> = OnceLock::new();
    let flavour = Flavour::from_env()?;
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let s = SETUP.get_or_init(|| {
        let limit = cuda_sys::DriverOptions::from_env()
            .expect("a valid CUDA_SYS_ABI_VERSION")
            .abi_limit();
        let abi = limit.map_or(flavour.version, |l| (l as i32).min(flavour.version));
        let driver = cuda_sys::Driver::global().expect("the flavour's library loads");
        assert_eq!(driver.path(), flavour.path());
        Setup {
            flavour,
            abi,
            mock: MockDriver::open(flavour.path()).expect("the mock's control functions resolve"),
        }
    });
    s.mock.reset();
    Some((guard, s))
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
    let flavour_version = cuda_sys::format_version(s.flavour.version);
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
    let d = cuda_sys::Driver::global().unwrap();
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

/// Runs this file's tests against every flavour, and against the CUDA 13.0 ones limited to the
/// CUDA 12.0 and 11.4 ABIs, one child process each; prints a line per configuration, and fails with the output
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
    assert_eq!(runs.len(), FLAVOURS.len() + 3);
    assert!(
        failed.is_empty(),
        "cuda-stream failed on {} of {} driver configurations:\n{}",
        failed.len(),
        runs.len(),
        failed.join("\n")
    );
}
