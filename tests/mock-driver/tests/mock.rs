//! The mock driver, loaded the way code under test loads libcuda: through `cuda_sys::Driver`.
//!
//! The mock's state is process-wide, so every test takes `LOCK` (through `mock()`), starts from a
//! reset and leaves no context current, retained or stream/event alive behind it.

use std::ffi::{CStr, c_char, c_void};
use std::process::Command;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::thread::ThreadId;
use std::time::Duration;

use cuda_mock_driver::{FLAVOURS, Flavour, MockDriver, mock_driver_path};
use cuda_sys::*;

const SUCCESS: CUresult = CUresult::CUDA_SUCCESS;
const INVALID_HANDLE: CUresult = CUresult::CUDA_ERROR_INVALID_HANDLE;
const NOT_READY: CUresult = CUresult::CUDA_ERROR_NOT_READY;
const LEGACY: CUstream = std::ptr::without_provenance_mut(1);
const PER_THREAD: CUstream = std::ptr::without_provenance_mut(2);

static LOCK: Mutex<()> = Mutex::new(());

/// Serialises the test, installs the mock as the process-wide driver (once) and resets it.
fn mock() -> (MutexGuard<'static, ()>, &'static MockDriver) {
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let m = MockDriver::global();
    m.reset();
    // SAFETY: cuInit takes no pointers.
    assert_eq!(unsafe { cuInit(0) }, SUCCESS);
    // A test runs on the main thread under --test-threads=1: drop what an earlier one left.
    // SAFETY: a null out-pointer is allowed.
    while unsafe { cuCtxPopCurrent(std::ptr::null_mut()) } == SUCCESS {}
    (guard, m)
}

/// Retains device `dev`'s primary context and makes it current.
fn enter(dev: CUdevice) -> CUcontext {
    let mut ctx = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { cuDevicePrimaryCtxRetain(&mut ctx, dev) }, SUCCESS);
    // SAFETY: a context handle from the driver.
    assert_eq!(unsafe { cuCtxPushCurrent(ctx) }, SUCCESS);
    ctx
}

/// Undoes `enter`.
fn leave(dev: CUdevice) {
    // SAFETY: a null out-pointer is allowed.
    assert_eq!(unsafe { cuCtxPopCurrent(std::ptr::null_mut()) }, SUCCESS);
    // SAFETY: no pointers.
    assert_eq!(unsafe { cuDevicePrimaryCtxRelease(dev) }, SUCCESS);
}

fn stream(flags: u32) -> CUstream {
    let mut s = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { cuStreamCreate(&mut s, flags) }, SUCCESS);
    s
}

fn event(flags: u32) -> CUevent {
    let mut e = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { cuEventCreate(&mut e, flags) }, SUCCESS);
    e
}

fn destroy_stream(s: CUstream) -> CUresult {
    // SAFETY: the mock checks every handle.
    unsafe { cuStreamDestroy(s) }
}

fn destroy_event(e: CUevent) -> CUresult {
    // SAFETY: the mock checks every handle.
    unsafe { cuEventDestroy(e) }
}

fn query(s: CUstream) -> CUresult {
    // SAFETY: the mock checks every handle.
    unsafe { cuStreamQuery(s) }
}

fn query_event(e: CUevent) -> CUresult {
    // SAFETY: the mock checks every handle.
    unsafe { cuEventQuery(e) }
}

fn record(e: CUevent, s: CUstream) -> CUresult {
    // SAFETY: the mock checks every handle.
    unsafe { cuEventRecord(e, s) }
}

fn elapsed(a: CUevent, b: CUevent) -> (CUresult, f32) {
    let mut ms = -1.0;
    // SAFETY: valid out-pointer; the mock checks the handles.
    let rc = unsafe { cuEventElapsedTime(&mut ms, a, b) };
    (rc, ms)
}

fn sync(s: CUstream) {
    // SAFETY: the mock checks every handle.
    assert_eq!(unsafe { cuStreamSynchronize(s) }, SUCCESS);
}

/// What host functions saw, and a gate that holds the first one until the test opens it.
#[derive(Default)]
struct Log {
    entries: Mutex<Vec<(usize, ThreadId, Option<CUresult>)>>,
    open: Mutex<bool>,
    opened: Condvar,
}

impl Log {
    fn leak() -> &'static Log {
        Box::leak(Box::default())
    }
    fn open_gate(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }
    fn entries(&self) -> Vec<(usize, ThreadId, Option<CUresult>)> {
        self.entries.lock().unwrap().clone()
    }
}

/// A host function's argument: the log and a tag to write into it.
struct Note {
    log: &'static Log,
    tag: usize,
    gate: bool,
}

fn note(log: &'static Log, tag: usize, gate: bool) -> *mut c_void {
    Box::into_raw(Box::new(Note { log, tag, gate })).cast()
}

unsafe extern "C" fn host_fn(data: *mut c_void) {
    // SAFETY: `data` is a leaked `Note` from `note`, used once.
    let n = unsafe { Box::from_raw(data.cast::<Note>()) };
    if n.gate {
        let mut open = n.log.open.lock().unwrap();
        while !*open {
            open = n.log.opened.wait(open).unwrap();
        }
    }
    let me = std::thread::current().id();
    n.log.entries.lock().unwrap().push((n.tag, me, None));
}

unsafe extern "C" fn callback(s: CUstream, status: CUresult, data: *mut c_void) {
    // SAFETY: as in `host_fn`.
    let n = unsafe { Box::from_raw(data.cast::<Note>()) };
    let me = std::thread::current().id();
    n.log
        .entries
        .lock()
        .unwrap()
        .push((s as usize, me, Some(status)));
    n.log.entries.lock().unwrap().push((n.tag, me, None));
}

/// A host function that calls the driver, which it must not.
unsafe extern "C" fn calls_the_driver(data: *mut c_void) {
    // SAFETY: as in `host_fn`.
    let n = unsafe { Box::from_raw(data.cast::<Note>()) };
    // SAFETY: the null stream needs no pointer.
    let rc = unsafe { cuStreamQuery(std::ptr::null_mut()) };
    let me = std::thread::current().id();
    n.log.entries.lock().unwrap().push((n.tag, me, Some(rc)));
}

fn launch(s: CUstream, data: *mut c_void) {
    // SAFETY: `host_fn` takes the leaked `Note`.
    assert_eq!(unsafe { cuLaunchHostFunc(s, Some(host_fn), data) }, SUCCESS);
}

#[test]
fn every_flavour_is_found_next_to_the_test_and_says_what_it_is() {
    let full = mock_driver_path();
    assert!(full.is_file(), "{} is missing", full.display());
    assert!(full.ends_with(cuda_mock_driver::mock_driver_file_name()));
    assert_eq!(Flavour::full().path(), full);
    assert_eq!(FLAVOURS.len(), 12);
    for f in FLAVOURS {
        let path = f.path();
        assert!(path.is_file(), "{} is missing", path.display());
        let m = MockDriver::open(&path).unwrap();
        assert_eq!(m.flavour(), f.name);
        let d = Driver::open(&path).unwrap();
        assert_eq!(d.driver_version(), Some(f.version), "{}", f.name);
        assert_eq!(d.abi_version(), f.version as u32);
        let resolver = match (f.proc_address, f.version >= 12000) {
            (false, _) => Resolver::SymbolLookup,
            (true, true) => Resolver::ProcAddressV2,
            (true, false) => Resolver::ProcAddress,
        };
        assert_eq!(d.resolver(), resolver, "{}", f.name);
    }
}

/// Every flavour exports exactly the ABIs of its version that the full flavour implements,
/// judged by cuda-sys's table: no hand lists.
#[test]
fn each_flavour_exports_what_its_cuda_version_had() {
    let full = MockDriver::open(mock_driver_path()).unwrap();
    let implemented: Vec<&SymbolInfo> = SymbolInfo::all()
        .iter()
        .filter(|s| full.exports(s.name))
        .collect();
    assert!(implemented.len() >= 60, "{}", implemented.len());
    for f in FLAVOURS {
        let m = MockDriver::open(f.path()).unwrap();
        let d = Driver::open(f.path()).unwrap();
        for s in &implemented {
            let has = f.has_abi(s.name);
            assert_eq!(m.exports(s.name), has, "{}: {}", f.name, s.name);
            assert_eq!(d.has(s.name), has, "{}: {}", f.name, s.name);
            if has {
                continue;
            }
            match d.address(s.name).unwrap().unwrap_err() {
                LoadError::MissingSymbol {
                    name,
                    since,
                    driver_version,
                    abi_limit: None,
                    ..
                } => {
                    assert_eq!((name, since), (s.name, s.since));
                    assert_eq!(driver_version, Some(f.version));
                }
                other => panic!("{}: {}: {other:?}", f.name, s.name),
            }
        }
    }
    // The old ABIs are there alongside the new, and a name means one ABI in every flavour.
    assert!(full.exports("cuEventElapsedTime") && full.exports("cuEventElapsedTime_v2000"));
    assert!(full.exports("cuEventElapsedTime_v2") && full.exports("cuStreamDestroy_v2000"));
    let old =
        MockDriver::open(FLAVOURS.iter().find(|f| f.version == 11040).unwrap().path()).unwrap();
    assert!(!old.exports("cuEventElapsedTime") && old.exports("cuEventElapsedTime_v2000"));
    assert!(!old.exports("cuStreamGetId") && !old.exports("cuGetProcAddress"));
    assert!(old.exports("cuGetProcAddress_v11030"));
}

#[test]
fn streams_are_counted() {
    let (_g, m) = mock();
    let ctx = enter(0);
    assert_eq!(m.live_primary_retains(), 1);
    let a = stream(0);
    let b = stream(1);
    let mut c = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    let rc = unsafe { cuStreamCreateWithPriority(&mut c, 0, -10) };
    assert_eq!(rc, SUCCESS);
    assert_eq!(m.live_streams(), 3);
    assert_eq!(m.calls("cuStreamCreate"), 2);
    assert_eq!(m.calls("cuStreamCreateWithPriority"), 1);
    for s in [a, b, c] {
        assert!(s as usize > 2, "a created stream is never a special handle");
        assert_eq!(m.destroyed(s), Some(false));
    }

    let (mut prio, mut flags, mut dev, mut got) = (1, 7, -1, std::ptr::null_mut());
    let (mut id_a, mut id_b) = (0, 0);
    // SAFETY: valid out-pointers, handles from the driver.
    unsafe {
        assert_eq!(cuStreamGetPriority(c, &mut prio), SUCCESS);
        assert_eq!(cuStreamGetFlags(b, &mut flags), SUCCESS);
        assert_eq!(cuStreamGetDevice(a, &mut dev), SUCCESS);
        assert_eq!(cuStreamGetCtx(a, &mut got), SUCCESS);
        assert_eq!(cuStreamGetId(a, &mut id_a), SUCCESS);
        assert_eq!(cuStreamGetId(b, &mut id_b), SUCCESS);
    }
    assert_eq!(prio, -5, "clamped to the greatest priority");
    assert_eq!(flags, 1);
    assert_eq!(dev, 0);
    assert_eq!(got, ctx);
    assert_ne!(id_a, id_b);

    for s in [a, b, c] {
        assert_eq!(destroy_stream(s), SUCCESS);
        assert_eq!(m.destroyed(s), Some(true));
    }
    assert_eq!(m.live_streams(), 0);
    assert_eq!(m.destroyed_streams(), 3);
    assert_eq!(m.calls("cuStreamDestroy"), 3);
    assert_eq!((m.bad_destroys(), m.bad_uses()), (0, 0));
    leave(0);
    assert_eq!(m.live_primary_retains(), 0);
}

#[test]
fn a_double_or_foreign_destroy_is_counted() {
    let (_g, m) = mock();
    enter(0);
    let s = stream(0);
    assert_eq!(destroy_stream(s), SUCCESS);
    assert_eq!(destroy_stream(s), INVALID_HANDLE);
    assert_eq!(m.bad_destroys(), 1);
    assert_eq!(m.destroyed(s), Some(true));
    assert_eq!(m.live_streams(), 0);
    assert_eq!(m.destroyed_streams(), 1);

    let foreign: CUstream = std::ptr::without_provenance_mut(0xdead_bee0);
    assert_eq!(destroy_stream(foreign), INVALID_HANDLE);
    assert_eq!(destroy_stream(LEGACY), INVALID_HANDLE);
    assert_eq!(destroy_stream(std::ptr::null_mut()), INVALID_HANDLE);
    assert_eq!(m.bad_destroys(), 4);
    assert_eq!(m.destroyed(foreign), None);

    // Using what was destroyed is a bad use, and an event is not a stream.
    assert_eq!(query(s), INVALID_HANDLE);
    let e = event(0);
    assert_eq!(query(e.cast()), INVALID_HANDLE);
    assert_eq!(m.bad_uses(), 2);
    assert_eq!(destroy_stream(e.cast()), INVALID_HANDLE);
    assert_eq!(destroy_event(e), SUCCESS);
    assert_eq!(destroy_event(e), INVALID_HANDLE);
    assert_eq!(m.bad_destroys(), 6);
    assert_eq!((m.live_events(), m.destroyed_events()), (0, 1));
    leave(0);
}

#[test]
fn the_nth_call_fails() {
    let (_g, m) = mock();
    enter(0);
    m.fail("cuStreamCreate", 2, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
    let a = stream(0);
    let mut b = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    let rc = unsafe { cuStreamCreate(&mut b, 0) };
    assert_eq!(rc, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
    assert!(b.is_null(), "a failed call writes nothing");
    let c = stream(0);
    assert_eq!(m.live_streams(), 2);
    assert_eq!(m.calls("cuStreamCreate"), 3);

    // Every call, by the C name of a versioned symbol, until the reset.
    m.fail_always("cuStreamDestroy", CUresult::CUDA_ERROR_LAUNCH_FAILED);
    for _ in 0..3 {
        assert_eq!(destroy_stream(a), CUresult::CUDA_ERROR_LAUNCH_FAILED);
    }
    assert_eq!(m.live_streams(), 2);
    assert_eq!(m.bad_destroys(), 0);
    m.reset();
    assert_eq!(m.calls("cuStreamDestroy_v2"), 0);
    assert_eq!(destroy_stream(a), SUCCESS);
    assert_eq!(destroy_stream(c), SUCCESS);

    // The same through the configuration string.
    assert!(m.configure("fail=cuEventCreate:1:CUDA_ERROR_OUT_OF_MEMORY; fail=cuEventCreate:3:700"));
    let mut e = std::ptr::null_mut();
    // SAFETY: valid out-pointers.
    unsafe {
        assert_eq!(cuEventCreate(&mut e, 0), CUresult::CUDA_ERROR_OUT_OF_MEMORY);
        assert_eq!(cuEventCreate(&mut e, 0), SUCCESS);
        assert_eq!(destroy_event(e), SUCCESS);
        assert_eq!(cuEventCreate(&mut e, 0), CUresult(700));
    }
    assert!(
        !m.configure("omit=cuStreamGetId"),
        "omission is not a run-time setting"
    );
    assert!(
        !m.configure("fail=cuTexObjectCreate:1:2"),
        "not an export of the mock"
    );
    leave(0);
}

#[test]
fn the_version_is_overridden() {
    let (_g, m) = mock();
    let d = Driver::global().unwrap();
    assert_eq!(d.version(), Ok(13000));
    m.set_version(12040);
    assert_eq!(d.version(), Ok(12040));
    assert!(m.configure("version=12080"));
    let mut v = 0;
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { cuDriverGetVersion(&mut v) }, SUCCESS);
    assert_eq!(v, 12080);
    m.reset();
    assert_eq!(d.version(), Ok(13000));
}

#[test]
fn host_functions_run_in_order_on_one_worker_thread() {
    let (_g, m) = mock();
    enter(0);
    let (a, b) = (stream(0), stream(1));
    let (e_idle, e_busy) = (event(0), event(0));
    assert_eq!(record(e_idle, a), SUCCESS);
    assert_eq!(
        query_event(e_idle),
        SUCCESS,
        "recorded on an idle stream: complete"
    );

    let log = Log::leak();
    launch(a, note(log, 0, true));
    launch(b, note(log, 1, false));
    // SAFETY: `callback` takes the leaked `Note`.
    let rc = unsafe { cuStreamAddCallback(a, Some(callback), note(log, 2, false), 0) };
    assert_eq!(rc, SUCCESS);
    assert_eq!(record(e_busy, a), SUCCESS);
    launch(a, note(log, 3, false));

    // The first host function is held: everything behind it waits.
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(query(a), NOT_READY);
    assert_eq!(
        query(b),
        NOT_READY,
        "one worker: b's function is queued behind a's"
    );
    assert_eq!(query_event(e_busy), NOT_READY);
    assert_eq!(elapsed(e_idle, e_busy).0, NOT_READY);
    assert_eq!(m.pending_host_fns(), 5);
    assert!(log.entries().is_empty());

    log.open_gate();
    sync(b);
    sync(a);
    // SAFETY: the mock checks the handle.
    assert_eq!(unsafe { cuEventSynchronize(e_busy) }, SUCCESS);
    // SAFETY: no pointers.
    assert_eq!(unsafe { cuCtxSynchronize() }, SUCCESS);
    assert_eq!(query(a), SUCCESS);
    assert_eq!(query(b), SUCCESS);
    assert_eq!(query_event(e_busy), SUCCESS);
    let (rc, ms) = elapsed(e_idle, e_busy);
    assert_eq!(rc, SUCCESS);
    assert!(
        ms >= 15.0,
        "the record completed after the held function: {ms} ms"
    );
    assert_eq!(m.pending_host_fns(), 0);

    let entries = log.entries();
    let tags: Vec<usize> = entries
        .iter()
        .filter(|e| e.2.is_none())
        .map(|e| e.0)
        .collect();
    assert_eq!(tags, [0, 1, 2, 3], "enqueue order");
    let worker = entries[0].1;
    assert_ne!(
        worker,
        std::thread::current().id(),
        "not on the calling thread"
    );
    assert!(entries.iter().all(|e| e.1 == worker), "all on one thread");
    assert!(
        entries.contains(&(a as usize, worker, Some(SUCCESS))),
        "the callback gets (stream, CUDA_SUCCESS, userData)"
    );

    for s in [a, b] {
        assert_eq!(destroy_stream(s), SUCCESS);
    }
    for e in [e_idle, e_busy] {
        assert_eq!(destroy_event(e), SUCCESS);
    }
    assert_eq!(m.host_fn_api_calls(), 0);
    leave(0);
}

#[test]
fn a_host_function_may_not_call_the_driver() {
    let (_g, m) = mock();
    enter(0);
    let s = stream(0);
    let log = Log::leak();
    // SAFETY: `calls_the_driver` takes the leaked `Note`.
    let rc = unsafe { cuLaunchHostFunc(s, Some(calls_the_driver), note(log, 7, false)) };
    assert_eq!(rc, SUCCESS);
    sync(s);
    let entries = log.entries();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].2, Some(CUresult::CUDA_ERROR_NOT_PERMITTED));
    assert_eq!(m.host_fn_api_calls(), 1);
    assert_eq!(destroy_stream(s), SUCCESS);
    leave(0);
}

#[test]
fn special_stream_handles_go_through_the_current_context() {
    let (_g, m) = mock();
    for s in [std::ptr::null_mut(), LEGACY, PER_THREAD] {
        assert_eq!(query(s), CUresult::CUDA_ERROR_INVALID_CONTEXT);
    }
    let ctx1 = enter(1);
    let mut ids = Vec::new();
    for s in [std::ptr::null_mut(), LEGACY, PER_THREAD] {
        let (mut c, mut d, mut id) = (std::ptr::null_mut(), -1, 0);
        // SAFETY: valid out-pointers.
        unsafe {
            assert_eq!(cuStreamGetCtx(s, &mut c), SUCCESS);
            assert_eq!(cuStreamGetDevice(s, &mut d), SUCCESS);
            assert_eq!(cuStreamGetId(s, &mut id), SUCCESS);
        }
        assert_eq!((c, d), (ctx1, 1));
        ids.push(id);
    }
    assert_eq!(ids[0], ids[1], "the NULL stream is the legacy stream");
    assert_ne!(ids[1], ids[2]);

    let log = Log::leak();
    launch(LEGACY, note(log, 0, true));
    assert_eq!(query(std::ptr::null_mut()), NOT_READY);
    assert_eq!(query(PER_THREAD), SUCCESS);
    log.open_gate();
    sync(LEGACY);
    assert_eq!(query(LEGACY), SUCCESS);
    assert_eq!(m.bad_uses(), 0);
    leave(1);
}

#[test]
fn events_follow_the_driver_rules() {
    let (_g, m) = mock();
    let mut e = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    let rc = unsafe { cuEventCreate(&mut e, 0) };
    assert_eq!(
        rc,
        CUresult::CUDA_ERROR_INVALID_CONTEXT,
        "no current context"
    );

    // Device 1's context stays retained (not current) while its stream and event live.
    enter(1);
    let s1 = stream(0);
    let on1 = event(0);
    // SAFETY: a null out-pointer is allowed.
    assert_eq!(unsafe { cuCtxPopCurrent(std::ptr::null_mut()) }, SUCCESS);
    enter(0);
    let s0 = stream(0);
    // SAFETY: valid out-pointer.
    let rc = unsafe { cuEventCreate(&mut e, 4) };
    assert_eq!(
        rc,
        CUresult::CUDA_ERROR_INVALID_VALUE,
        "INTERPROCESS needs DISABLE_TIMING"
    );
    let (timed, untimed, ipc) = (event(0), event(2), event(2 | 4 | 1));
    let other = event(0);

    assert_eq!(query_event(timed), SUCCESS, "never recorded: success");
    assert_eq!(elapsed(timed, other).0, INVALID_HANDLE, "never recorded");
    assert_eq!(record(timed, s0), SUCCESS);
    assert_eq!(record(untimed, s0), SUCCESS);
    assert_eq!(elapsed(timed, untimed).0, INVALID_HANDLE, "no timing");
    assert_eq!(record(other, s0), SUCCESS);
    let (rc, ms) = elapsed(timed, other);
    assert_eq!(rc, SUCCESS);
    assert!(ms >= 0.0);

    // Another context's stream: recording is refused, waiting is fine.
    assert_eq!(record(timed, s1), INVALID_HANDLE);
    assert_eq!(record(on1, s0), INVALID_HANDLE);
    // SAFETY: the mock checks the handles.
    assert_eq!(unsafe { cuStreamWaitEvent(s1, timed, 0) }, SUCCESS);
    // SAFETY: as above.
    assert_eq!(unsafe { cuStreamWaitEvent(s0, on1, 0) }, SUCCESS);
    assert_eq!(m.bad_uses(), 0);

    // IPC: only for interprocess events; the opened handle shares the record state.
    let mut h = CUipcEventHandle::default();
    // SAFETY: valid out-pointer.
    let rc = unsafe { cuIpcGetEventHandle(&mut h, timed) };
    assert_eq!(rc, CUresult::CUDA_ERROR_INVALID_VALUE);
    // SAFETY: as above.
    assert_eq!(unsafe { cuIpcGetEventHandle(&mut h, ipc) }, SUCCESS);
    let mut opened = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { cuIpcOpenEventHandle(&mut opened, h) }, SUCCESS);
    assert_ne!(opened, ipc);
    let log = Log::leak();
    launch(s0, note(log, 0, true));
    assert_eq!(record(ipc, s0), SUCCESS);
    assert_eq!(query_event(opened), NOT_READY);
    // A stream of another context waiting on it is not ready either.
    // SAFETY: the mock checks the handles.
    assert_eq!(unsafe { cuStreamWaitEvent(s1, opened, 0) }, SUCCESS);
    assert_eq!(query(s1), NOT_READY);
    log.open_gate();
    // SAFETY: the mock checks the handle.
    assert_eq!(unsafe { cuEventSynchronize(opened) }, SUCCESS);
    assert_eq!(query_event(ipc), SUCCESS);
    assert_eq!(query(s1), SUCCESS);

    assert_eq!(m.live_events(), 6);
    for e in [timed, untimed, ipc, other, opened, on1] {
        assert_eq!(destroy_event(e), SUCCESS);
    }
    for s in [s0, s1] {
        assert_eq!(destroy_stream(s), SUCCESS);
    }
    assert_eq!((m.live_events(), m.live_streams()), (0, 0));
    leave(0);
    // SAFETY: no pointers.
    assert_eq!(unsafe { cuDevicePrimaryCtxRelease(1) }, SUCCESS);
    assert_eq!((m.live_primary_retains(), m.orphans()), (0, 0));
}

#[test]
fn releasing_the_primary_context_destroys_what_is_in_it() {
    let (_g, m) = mock();
    enter(0);
    let s = stream(0);
    let e = event(0);
    leave(0);
    assert_eq!(
        m.orphans(),
        2,
        "the stream and the event went with the context"
    );
    assert_eq!((m.live_streams(), m.live_events()), (0, 0));
    assert_eq!(m.destroyed(s), Some(true));
    assert_eq!(destroy_stream(s), INVALID_HANDLE);
    assert_eq!(destroy_event(e), INVALID_HANDLE);
    assert_eq!(m.bad_destroys(), 2);
    // SAFETY: no pointers.
    let rc = unsafe { cuDevicePrimaryCtxRelease(0) };
    assert_eq!(rc, CUresult::CUDA_ERROR_INVALID_CONTEXT, "not retained");
    assert_eq!(m.bad_destroys(), 3);

    // A released primary context can still be made current, but not used.
    let mut ctx = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { cuDevicePrimaryCtxRetain(&mut ctx, 0) }, SUCCESS);
    // SAFETY: no pointers.
    assert_eq!(unsafe { cuDevicePrimaryCtxRelease(0) }, SUCCESS);
    // SAFETY: a context handle from the driver.
    assert_eq!(unsafe { cuCtxSetCurrent(ctx) }, SUCCESS);
    assert_eq!(query(LEGACY), CUresult::CUDA_ERROR_CONTEXT_IS_DESTROYED);
    // SAFETY: null pops.
    assert_eq!(unsafe { cuCtxSetCurrent(std::ptr::null_mut()) }, SUCCESS);
    // SAFETY: an address the mock never handed out.
    let rc = unsafe { cuCtxPushCurrent(std::ptr::without_provenance_mut(0x1230)) };
    assert_eq!(rc, CUresult::CUDA_ERROR_INVALID_CONTEXT);
    assert_eq!(m.bad_uses(), 1);
}

#[test]
fn devices_errors_and_initialisation() {
    let (_g, m) = mock();
    let mut n = 0;
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { cuDeviceGetCount(&mut n) }, SUCCESS);
    assert_eq!(n, 2);
    let mut name = [0 as c_char; 64];
    // SAFETY: a 64-byte buffer.
    let rc = unsafe { cuDeviceGetName(name.as_mut_ptr(), 64, 1) };
    assert_eq!(rc, SUCCESS);
    // SAFETY: the mock wrote a NUL-terminated string.
    let name = unsafe { CStr::from_ptr(name.as_ptr()) };
    assert_eq!(name.to_str(), Ok("Mock CUDA Device 1"));
    let mut v = 0;
    let attr = CUdevice_attribute::CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED;
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { cuDeviceGetAttribute(&mut v, attr, 0) }, SUCCESS);
    assert_eq!(v, 1);

    m.set_device_count(1);
    let mut d = 0;
    // SAFETY: valid out-pointer.
    let rc = unsafe { cuDeviceGet(&mut d, 1) };
    assert_eq!(rc, CUresult::CUDA_ERROR_INVALID_DEVICE);
    m.reset();
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { cuDeviceGet(&mut d, 1) }, SUCCESS);

    let mut p: *const c_char = std::ptr::null();
    // SAFETY: valid out-pointer; the mock's strings live as long as the process.
    unsafe {
        assert_eq!(cuGetErrorName(NOT_READY, &mut p), SUCCESS);
        assert_eq!(CStr::from_ptr(p).to_str(), Ok("CUDA_ERROR_NOT_READY"));
        assert_eq!(cuGetErrorString(NOT_READY, &mut p), SUCCESS);
        assert!(!CStr::from_ptr(p).is_empty());
        assert_eq!(
            cuGetErrorName(CUresult(12345), &mut p),
            CUresult::CUDA_ERROR_INVALID_VALUE
        );
    }
    let (mut free, mut total) = (0, 0);
    // SAFETY: valid out-pointers.
    let rc = unsafe { cuMemGetInfo(&mut free, &mut total) };
    assert_eq!(rc, CUresult::CUDA_ERROR_INVALID_CONTEXT);
    enter(0);
    let (mut least, mut greatest) = (9, 9);
    // SAFETY: valid out-pointers.
    unsafe {
        assert_eq!(cuMemGetInfo(&mut free, &mut total), SUCCESS);
        assert_eq!(
            cuCtxGetStreamPriorityRange(&mut least, &mut greatest),
            SUCCESS
        );
    }
    assert!(free < total);
    assert_eq!((least, greatest), (0, -5));
    leave(0);
    // cuInit failing is reported, and counted like any call.
    m.fail("cuInit", 1, CUresult::CUDA_ERROR_NO_DEVICE);
    // SAFETY: no pointers.
    assert_eq!(unsafe { cuInit(0) }, CUresult::CUDA_ERROR_NO_DEVICE);
    assert_eq!(m.calls("cuInit"), 1);
}

/// Runs `env_config_child` in a new process with `CUDA_MOCK_CONFIG` set.
fn run_child(config: &str) -> std::process::Output {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "env_config_child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("CUDA_MOCK_CONFIG", config)
        .output()
        .unwrap()
}

#[test]
fn the_environment_sets_the_baseline() {
    let out = run_child("fail=cuStreamCreate:1:2; version=12040; devices=1");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run_child("omit=cuStreamGetId");
    assert!(
        !out.status.success(),
        "a configuration it cannot honour stops the process"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("FLAVOURS"));
}

/// Does nothing unless started by `the_environment_sets_the_baseline`.
#[test]
fn env_config_child() {
    if std::env::var_os("CUDA_MOCK_CONFIG").is_none() {
        return;
    }
    let (_g, m) = mock();
    assert_eq!(Driver::global().unwrap().version(), Ok(12040));
    let mut n = 0;
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { cuDeviceGetCount(&mut n) }, SUCCESS);
    assert_eq!(n, 1);
    enter(0);
    let mut s = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    let rc = unsafe { cuStreamCreate(&mut s, 0) };
    assert_eq!(rc, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
    let s = stream(0);
    // A reset goes back to the environment's rules, counting afresh.
    m.set_version(1);
    m.reset();
    assert_eq!(Driver::global().unwrap().version(), Ok(12040));
    let mut t = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    let rc = unsafe { cuStreamCreate(&mut t, 0) };
    assert_eq!(rc, CUresult::CUDA_ERROR_OUT_OF_MEMORY);
    assert_eq!(destroy_stream(s), SUCCESS);
    leave(0);
}
