//! The mock driver, loaded the way code under test loads libcuda: through `cuda_stream_sys::Driver`.
//!
//! The mock's state is process-wide, so every test takes `LOCK` (through `mock()`), starts from a
//! reset and leaves no context current, retained or stream/event alive behind it.
//!
//! One topic of the mock's model a file: [`flavours`], [`counts_and_faults`], [`host_fns`],
//! [`streams_and_events`], [`contexts`] and [`environment`]; the lock and the raw helpers they
//! share are here.

mod contexts;
mod counts_and_faults;
mod environment;
mod flavours;
mod host_fns;
mod streams_and_events;

use std::ffi::c_void;
use std::sync::{Condvar, Mutex};
use std::thread::ThreadId;
use std::time::Duration;

use cuda_mock_driver::{MockDriver, Serialized};
use cuda_stream_sys::*;

const SUCCESS: CUresult = CUresult::CUDA_SUCCESS;
const INVALID_HANDLE: CUresult = CUresult::CUDA_ERROR_INVALID_HANDLE;
const NOT_READY: CUresult = CUresult::CUDA_ERROR_NOT_READY;
const LEGACY: CUstream = std::ptr::without_provenance_mut(1);
const PER_THREAD: CUstream = std::ptr::without_provenance_mut(2);

static LOCK: Mutex<()> = Mutex::new(());

/// Serialises the test, installs the mock as the process-wide driver (once) and resets it.
fn mock() -> (Serialized, &'static MockDriver) {
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let m = MockDriver::global();
    m.reset();
    // SAFETY: cuInit takes no pointers.
    assert_eq!(unsafe { cuInit(0) }, SUCCESS);
    // A test runs on the main thread under --test-threads=1: drop what an earlier one left.
    // SAFETY: a null out-pointer is allowed.
    while unsafe { cuCtxPopCurrent(std::ptr::null_mut()) } == SUCCESS {}
    (m.checked(guard), m)
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
    /// Whether the gate is open, and whether a gated host function has reached it.
    open: Mutex<bool>,
    opened: Condvar,
    held: Mutex<bool>,
    reached: Condvar,
}

impl Log {
    fn leak() -> &'static Log {
        Box::leak(Box::default())
    }
    fn open_gate(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }
    /// Blocks until a gated host function is waiting at the gate (so the worker is busy with
    /// it); panics after 60 s, a hang guard only.
    fn wait_until_held(&self) {
        let held = self.held.lock().unwrap();
        let (held, timeout) = self
            .reached
            .wait_timeout_while(held, Duration::from_secs(60), |held| !*held)
            .unwrap();
        assert!(
            *held && !timeout.timed_out(),
            "the gated host function never ran"
        );
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
        *n.log.held.lock().unwrap() = true;
        n.log.reached.notify_all();
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
