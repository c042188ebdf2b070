//! `cuda-stream` on a CUDA 11.4 driver: the old flavour of the mock, which lacks `cuStreamGetId`
//! (12.0), `cuStreamGetDevice` (12.8) and `cuEventElapsedTime_v2` (12.8). A missing function is
//! `Error::Unsupported` naming it and the versions involved; `Stream::device` does without.
//!
//! Its own test binary: the old mock must be the process-wide driver from the first call on.

use std::sync::{Mutex, MutexGuard, OnceLock};

use cuda_mock_driver::{FLAVOURS, MockDriver};
use cuda_stream::ffi::LoadError;
use cuda_stream::{AsStream, Context, Device, Error, EventOptions, Stream, driver_version};

static LOCK: Mutex<()> = Mutex::new(());

/// Serialises the test, installs the old mock as the process-wide driver (once) and resets it.
fn mock() -> (MutexGuard<'static, ()>, &'static MockDriver) {
    static MOCK: OnceLock<MockDriver> = OnceLock::new();
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let m = MOCK.get_or_init(|| {
        let path = FLAVOURS
            .iter()
            .find(|f| f.package == "cuda-mock-driver-11-4-noproc")
            .unwrap()
            .path();
        let driver = cuda_sys::Driver::open(&path).expect("the old mock library opens");
        cuda_sys::Driver::install_global(driver).expect("nothing loaded a driver before");
        MockDriver::open(&path).expect("the mock's control functions resolve")
    });
    m.reset();
    (guard, m)
}

/// Checks that `err` is `Unsupported` for `call` on CUDA 11.4, and that its message and source
/// say what is missing and which version introduced it.
fn assert_unsupported(err: &Error, call: &str, since: u32, introduced: &str) {
    match err {
        Error::Unsupported {
            call: c,
            driver_version,
            source,
        } => {
            assert_eq!(*c, call);
            assert_eq!(*driver_version, Some(11040));
            assert!(
                matches!(source, LoadError::MissingSymbol { name, since: s, driver_version: Some(11040), .. }
                    if *name == call && *s == since),
                "{source:?}"
            );
        }
        other => panic!("expected Unsupported for {call}, got {other:?}"),
    }
    assert_eq!(err.call(), Some(call));
    assert!(err.is_unsupported());
    let shown = err.to_string();
    assert!(
        shown.contains(call) && shown.contains("CUDA 11.4"),
        "{shown}"
    );
    let source = std::error::Error::source(err)
        .expect("Unsupported has the loader's account as its source")
        .to_string();
    assert!(
        source.contains(call) && source.contains(&format!("CUDA {introduced}")),
        "{source}"
    );
}

#[test]
fn the_driver_is_the_old_one() {
    let (_lock, _m) = mock();
    assert_eq!(driver_version().unwrap(), 11040);
}

#[test]
fn stream_id_is_unsupported_and_names_cuda_12_0() {
    let (_lock, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let s = ctx.new_stream().unwrap();
    let err = s.id().unwrap_err();
    assert_unsupported(&err, "cuStreamGetId", 12000, "12.0");
    let shown = err.to_string();
    let source = std::error::Error::source(&err).unwrap().to_string();
    assert!(
        shown.contains("12.0") || source.contains("12.0"),
        "{shown} / {source}"
    );
    // The default streams too, and a borrowed one.
    let err = ctx.legacy_stream().id().unwrap_err();
    assert_unsupported(&err, "cuStreamGetId", 12000, "12.0");
    let owner = ();
    // SAFETY: `s` outlives the view, which is dropped at the end of this function before it.
    let view = unsafe { Stream::borrow_raw(s.raw(), &owner) }.unwrap();
    assert_unsupported(&view.id().unwrap_err(), "cuStreamGetId", 12000, "12.0");
    assert_eq!((m.bad_destroys(), m.bad_uses()), (0, 0));
}

#[test]
fn stream_device_falls_back_to_the_context() {
    let (_lock, m) = mock();
    for ordinal in [0, 1] {
        let ctx = Context::primary(ordinal).unwrap();
        let s = ctx.new_stream().unwrap();
        m.reset();
        assert_eq!(s.device().unwrap(), Device::new(ordinal).unwrap());
        assert!(m.calls("cuCtxGetDevice") >= 1, "answered by the context");
        assert_eq!(ctx.legacy_stream().device().unwrap().ordinal(), ordinal);
        let owner = ();
        // SAFETY: `s` outlives the view.
        let view = unsafe { Stream::borrow_raw(s.raw(), &owner) }.unwrap();
        assert_eq!(view.device().unwrap().ordinal(), ordinal);
        // A failing fallback is reported as itself.
        m.fail(
            "cuCtxGetDevice",
            1,
            cuda_sys::CUresult::CUDA_ERROR_LAUNCH_FAILED,
        );
        let err = s.device().unwrap_err();
        assert_eq!(err.call(), Some("cuCtxGetDevice"), "{err:?}");
    }
    assert_eq!((m.bad_destroys(), m.bad_uses()), (0, 0));
}

#[test]
fn elapsed_time_is_unsupported_and_names_cuda_12_8() {
    let (_lock, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let s = ctx.new_stream().unwrap();
    let timing = EventOptions::new().timing(true);
    let start = s.record_event_with(timing).unwrap();
    let end = s.record_event_with(timing).unwrap();
    end.synchronize().unwrap();
    let err = end.elapsed_since(&start).unwrap_err();
    assert_unsupported(&err, "cuEventElapsedTime", 12080, "12.8");
    assert_eq!((m.bad_destroys(), m.bad_uses()), (0, 0));
}

#[test]
fn everything_else_works_on_cuda_11_4() {
    let (_lock, m) = mock();
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
