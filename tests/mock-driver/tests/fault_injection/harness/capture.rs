//! Tools of the capture and graph rows: host functions that count their runs and drops, captures
//! begun and ended with raw calls, and the frees a graph's user objects queue.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use cuda_stream::ffi::{self, CUresult};
use cuda_stream::{CaptureMode, DriverCode, Error, Graph, Result, drain_deferred};

use super::{DropCount, FAULT, MOCK, SUCCESS};

/// Waits until the mock's worker has run everything queued (host functions, user-object
/// destructors), so that what a run freed has been freed.
pub(crate) fn worker_idle() {
    let m = MOCK.get().expect("the mock is installed");
    let start = std::time::Instant::now();
    while m.pending_host_fns() != 0 {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "the worker never went idle"
        );
        std::thread::yield_now();
    }
}

/// Host functions for graphs that count their runs and the drops of their captures.
pub(crate) struct Probes {
    made: AtomicUsize,
    ran: Arc<AtomicUsize>,
    dropped: Arc<AtomicUsize>,
}

impl Probes {
    pub(crate) fn new() -> Probes {
        Probes {
            made: AtomicUsize::new(0),
            ran: Arc::new(AtomicUsize::new(0)),
            dropped: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// A new `Fn` host function that counts its runs; its capture counts its drop.
    pub(crate) fn host_fn(&self) -> impl Fn() + Send + Sync + 'static {
        self.made.fetch_add(1, Ordering::SeqCst);
        let (ran, dropped) = (self.ran.clone(), DropCount(self.dropped.clone()));
        move || {
            let _keep = &dropped;
            ran.fetch_add(1, Ordering::SeqCst);
        }
    }

    pub(crate) fn ran(&self) -> usize {
        self.ran.load(Ordering::SeqCst)
    }

    /// After the run: no closure was dropped twice (a failed graph destroy may keep some).
    pub(crate) fn check(&self) {
        worker_idle();
        let (made, dropped) = (
            self.made.load(Ordering::SeqCst),
            self.dropped.load(Ordering::SeqCst),
        );
        assert!(
            dropped <= made,
            "{dropped} drops of {made} host functions: one was dropped twice"
        );
    }
}

/// Runs a graph operation with fresh probes, then checks them.
pub(crate) fn with_probes(f: impl FnOnce(&Probes) -> Result<()>) -> Result<()> {
    let p = Probes::new();
    let r = f(&p);
    p.check();
    r
}

/// `Ok` for `CUDA_SUCCESS`, else the error a `cuda-stream` call would give.
pub(crate) fn raw_check(rc: CUresult, call: &'static str) -> Result<()> {
    if rc == SUCCESS {
        Ok(())
    } else {
        Err(Error::Driver {
            call,
            code: DriverCode(rc),
        })
    }
}

/// Begins a capture on `s` with raw calls, as a framework would (thread-local mode).
pub(crate) fn raw_begin(s: ffi::CUstream) -> Result<()> {
    let mode = ffi::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    // SAFETY: a live stream; the mock checks it.
    raw_check(
        unsafe { cuda_stream_sys::cuStreamBeginCapture(s, mode) },
        "cuStreamBeginCapture",
    )
}

/// Ends the raw capture of `s` (once more if a failed end left it capturing) and destroys its
/// graph; returns the first failure, or the end's status when it is `expect_end`.
pub(crate) fn raw_end(s: ffi::CUstream, expect_end: CUresult) -> Result<()> {
    let mut graph = std::ptr::null_mut();
    // SAFETY: valid out-pointer; the mock checks the stream.
    let rc = unsafe { cuda_stream_sys::cuStreamEndCapture(s, &mut graph) };
    let mut first = if rc == expect_end {
        Ok(())
    } else {
        raw_check(rc, "cuStreamEndCapture")
    };
    if rc != SUCCESS && rc != expect_end {
        let mut again = std::ptr::null_mut();
        // SAFETY: as above.
        let _ = unsafe { cuda_stream_sys::cuStreamEndCapture(s, &mut again) };
        graph = again;
    }
    if !graph.is_null() {
        // SAFETY: the capture handed the graph over.
        let rc = unsafe { cuda_stream_sys::cuGraphDestroy(graph) };
        if first.is_ok() && rc != FAULT {
            first = raw_check(rc, "cuGraphDestroy");
        }
    }
    first
}

/// A capture of one host function on `s`.
pub(crate) fn one_host_fn(s: &mut cuda_stream::PooledStream<'_>, p: &Probes) -> Result<Graph> {
    s.capture(CaptureMode::ThreadLocal, |cap| {
        cap.launch_host_func(p.host_fn())
    })
}

/// Runs `f`, then (whatever it returned) waits for the user objects' destructors and makes the
/// frees they queued: the buffers a graph held are freed by the end of the run.
pub(crate) fn then_graph_frees(f: impl FnOnce() -> Result<()>) -> Result<()> {
    let r = f();
    worker_idle();
    drain_deferred();
    r
}
