//! The machinery every fault case shares: the mock, installed once and reset for each test; the
//! fresh threads the runs happen on; waiting for host functions; and small probes of drops.

pub(crate) mod capture;
pub(crate) mod checks;
pub(crate) mod fixture;
pub(crate) mod functions;
pub(crate) mod swallowed;

use std::any::Any;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context as TaskContext, Poll, Wake, Waker};

use cuda_mock_driver::{Flavour, MockDriver, Serialized};
use cuda_stream::ffi::{self, CUresult};
use cuda_stream::{Context, Result};

/// The code injected: distinctive, and never one that `cuda-stream` maps to something else
/// (`CUDA_ERROR_NOT_READY` would be read as "not yet").
pub(crate) const FAULT: CUresult = CUresult::CUDA_ERROR_LAUNCH_FAILED;
pub(crate) const SUCCESS: CUresult = CUresult::CUDA_SUCCESS;

static LOCK: Mutex<()> = Mutex::new(());
pub(crate) static MOCK: OnceLock<MockDriver> = OnceLock::new();

/// The flavour of the mock this process runs against: the one `CUDA_MOCK_FLAVOUR` names in a
/// child of [`the_fault_suite_passes_on_every_driver_flavour`], else the full one.
pub(crate) fn flavour() -> &'static Flavour {
    Flavour::from_env().unwrap_or(Flavour::full())
}

/// Serialises the test (the mock's state is process-wide), installs the mock as the process-wide
/// driver (once, before any `cuda-stream` call) and resets it. Device 0 has memory pools, device
/// 1 has none, so both ways of allocating and freeing are exercised (a device property: a reset
/// keeps it).
pub(crate) fn mock() -> (Serialized, &'static MockDriver) {
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let m = MOCK.get_or_init(|| {
        let path = flavour().path();
        // SAFETY: the mock driver, built with this test.
        let driver =
            unsafe { cuda_stream_sys::Driver::open(&path) }.expect("the mock driver library opens");
        cuda_stream_sys::Driver::install_global(driver).expect("nothing loaded a driver before");
        // SAFETY: the mock driver, built with this test.
        let m = unsafe { MockDriver::open(&path) }.expect("the mock's control functions resolve");
        m.set_memory_pools(1, false);
        m
    });
    m.reset();
    (m.checked(guard), m)
}

/// Waits until every host function and device job the mock has queued has run (their driver
/// calls, if any, are then counted, what they dropped is queued, and the frees queued on streams
/// are made). Panics after 10 s: a host function that never
/// runs is a hang, and must fail.
pub(crate) fn settle() {
    let m = MOCK.get().expect("the mock is installed");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while m.pending_host_fns() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "host functions still pending after 10 s"
        );
        std::thread::sleep(std::time::Duration::from_micros(50));
    }
}

/// Runs `f` on a fresh thread and joins it: no context is current there, and its thread-local
/// caches (the `wait_stream` events) are destroyed before this returns, not later, outside the
/// test's lock. A panic in `f` comes back as `Err`.
pub(crate) fn on_fresh_thread<R: Send>(f: impl FnOnce() -> R + Send) -> std::thread::Result<R> {
    std::thread::scope(|s| {
        s.spawn(|| catch_unwind(AssertUnwindSafe(f)))
            .join()
            .and_then(|r| r)
    })
}

/// [`on_fresh_thread`] for a test body: a panic continues here.
pub(crate) fn isolated<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    on_fresh_thread(f).unwrap_or_else(|p| resume_unwind(p))
}

pub(crate) fn panic_message(p: &(dyn Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

/// A minimal executor: polls `fut` on this thread, parking until woken.
pub(crate) fn block_on<F: Future>(fut: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = TaskContext::from_waker(&waker);
    let mut fut = pin!(fut);
    loop {
        match fut.as_mut().poll(&mut cx) {
            Poll::Ready(v) => return v,
            Poll::Pending => std::thread::park(),
        }
    }
}

/// A stream created with raw driver calls, as a framework would: `cuda-stream` never owns it.
pub(crate) fn raw_stream(ctx: &Context) -> ffi::CUstream {
    let _bound = ctx.bind().expect("bind");
    let mut s = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; the context is current.
    let rc = unsafe { cuda_stream_sys::cuStreamCreate(&mut s, 1) };
    assert_eq!(rc, SUCCESS);
    s
}

pub(crate) fn raw_destroy(s: ffi::CUstream) -> CUresult {
    // SAFETY: the mock checks the handle; the caller owns it.
    unsafe { cuda_stream_sys::cuStreamDestroy(s) }
}

/// Drops of [`ZstDrop`] values, process-wide.
pub(crate) static ZST_DROPS: AtomicUsize = AtomicUsize::new(0);

/// A zero-sized capture that counts its drops, for closures that capture nothing else.
pub(crate) struct ZstDrop;

impl Drop for ZstDrop {
    fn drop(&mut self) {
        ZST_DROPS.fetch_add(1, Ordering::SeqCst);
    }
}

/// Counts drops of a host function's capture.
pub(crate) struct DropCount(pub(crate) Arc<AtomicUsize>);

impl Drop for DropCount {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A host function's capture that tells whether the closure was dropped without running: if
/// enqueueing fails, the closure (and so the token) must be dropped before the call returns.
pub(crate) fn token_check(token: &Arc<()>, r: &Result<()>) {
    if r.is_err() {
        assert_eq!(
            Arc::strong_count(token),
            1,
            "a refused host function was not dropped"
        );
    }
}
