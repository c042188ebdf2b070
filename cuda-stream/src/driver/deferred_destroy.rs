//! Deferred destruction: no CUDA call is made inside a host function or stream callback.
//!
//! The driver forbids CUDA calls from the thread that runs host functions (`cuLaunchHostFunc`)
//! and stream callbacks (`cuStreamAddCallback`); a destroy made there can deadlock (measured:
//! `cuStreamDestroy` of a stream from inside its own host function hangs every later host function
//! under compute-sanitizer). Yet values of this crate are dropped there whenever a closure holds
//! the last owner: an `Arc<OwnedStream>` moved into its own host function to keep the stream alive
//! until its work is done, an `Event`, a pool, a `Context` clone.
//!
//! This module is the one mechanism every destroy path consults:
//!
//! - **Where we are.** The trampolines of `stream::host_fn` and `graph::user_objects` run the
//!   user's code inside a [`HostFnScope`] (`base::host_fn_flag`), which sets a thread-local flag
//!   and clears it on drop (so also when the closure panics). [`in_host_fn`] reads it. The same
//!   flag makes every driver lookup (`base::error::lookup`, behind `driver_fn!`) answer
//!   `Error::InHostFunction` there, so an operation other than a destroy never reaches the
//!   driver from a host function either.
//! - **The queue.** Inside a host function a destroy path does not call the driver: it pushes a
//!   [`Deferred`] (a raw handle and the function that destroys it) with [`defer`] and returns. No
//!   CUDA call, no blocking beyond a short, uncontended lock of the queue.
//! - **Draining.** [`drain_if_pending`] is one atomic load of the pending count (never a lock on a
//!   hot path); when it is not zero, and the thread is not in a host function, it destroys what
//!   is queued. It is called by the next call on an ordinary thread that creates something (a
//!   stream, an event the context's cache cannot supply, a context retain), by `synchronize`
//!   (stream, event, context), by destroys made on an ordinary thread, and by the release of a
//!   context's last retain, which drains *before* releasing: nothing deferred is lost, and a
//!   context's streams and events are destroyed before the context goes. [`drain_deferred`] does
//!   it on request. Every handle that can be deferred was created by a call that drains first, so
//!   the queue holds at most what host functions dropped since the last such call.
//! - **Order.** Items are destroyed in the order they were queued, and drains are serialised (one
//!   at a time, process-wide), so a context release queued after a stream of that context is made
//!   after the stream's destroy even when two threads drain at once.
//!
//! No thread is started for this: a reaper thread would destroy sooner, but would also call the
//! driver concurrently with process exit (libcuda's own teardown), where a call can crash; every
//! program that makes another `cuda-stream` call, or releases its context, drains instead.
//!
//! A `close()` inside a host function cannot return the driver's answer: it returns
//! [`Error::InHostFunction`](crate::Error::InHostFunction) and queues the destroy like a drop.
//!
//! # Adding a kind of object
//!
//! A module that owns another kind of driver object (a graph, a graph exec, a memory pool) makes
//! its `Drop` do what `stream::owned` does for streams:
//!
//! ```ignore
//! /// `cuGraphExecDestroy`, in the form a deferred destroy takes (a refusal is counted).
//! fn destroy_graph_exec(raw: usize) -> Result<()> {
//!     let f = driver_fn!(cuGraphExecDestroy);
//!     // SAFETY: handed over once by its owner, which never uses the handle again.
//!     check(unsafe { f(raw as ffi::CUgraphExec) }, "cuGraphExecDestroy")
//! }
//!
//! impl Drop for GraphExec {
//!     fn drop(&mut self) {
//!         if deferred_destroy::in_host_fn() {
//!             deferred_destroy::defer([Deferred::new(self.raw as usize, destroy_graph_exec)]);
//!         } else {
//!             deferred_destroy::drain_if_pending(); // a good moment to destroy what is queued
//!             let _ = destroy_graph_exec(self.raw as usize);
//!         }
//!     }
//! }
//! ```
//!
//! and its `close()` returns `Error::InHostFunction { call: "cuGraphExecDestroy" }` after
//! queueing (see `owned::destroy_or_defer`). Nothing else is needed: the queue takes any
//! `fn(usize) -> Result<()>`, and order is kept.
//!
//! The object must keep its context alive (hold a [`Context`](crate::Context) clone) like
//! streams and events do: the context's release then drains the queue first. Objects of a context
//! this crate does not retain (borrowed from another library) are the caller's to keep alive until
//! the queue is drained, as for events recorded on such streams.

use std::cell::Cell;
use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::base::error::Result;
pub(crate) use crate::base::host_fn_flag::{HostFnScope, in_host_fn};

/// A destroy waiting for an ordinary thread: a raw handle and the function that destroys it.
/// Its error has nobody to be reported to: it is counted ([`deferred_failed`]).
#[derive(Clone, Copy)]
pub(crate) struct Deferred {
    handle: usize,
    destroy: fn(usize) -> Result<()>,
}

impl Deferred {
    /// `destroy(handle)` later. `destroy` must be safe to call once with `handle` on any
    /// ordinary thread: the caller hands its ownership of the handle over.
    pub(crate) const fn new(handle: usize, destroy: fn(usize) -> Result<()>) -> Deferred {
        Deferred { handle, destroy }
    }
}

impl fmt::Debug for Deferred {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Deferred({:#x})", self.handle)
    }
}

/// Items queued and not yet destroyed (decremented after each destroy, so zero means every
/// destroy queued before has been made).
static PENDING: AtomicUsize = AtomicUsize::new(0);
/// Items ever queued, for tests and diagnostics.
static TOTAL: AtomicUsize = AtomicUsize::new(0);
/// Deferred destroys the driver refused, for tests and diagnostics.
static FAILED: AtomicUsize = AtomicUsize::new(0);
/// The queue. Held only to push or to take everything, never across a driver call.
static QUEUE: Mutex<Vec<Deferred>> = Mutex::new(Vec::new());
/// Held across a drain, so drains run one at a time and in queue order.
static DRAIN: Mutex<()> = Mutex::new(());

thread_local! {
    /// Whether this thread is draining (a destroy function that drops something must not drain
    /// again from inside the drain).
    static DRAINING: Cell<bool> = const { Cell::new(false) };
    /// How many captures this crate began on this thread, in a mode other than relaxed, are
    /// running ([`CaptureDeferral`]).
    static CAPTURING: Cell<u32> = const { Cell::new(0) };
}

/// Whether the calling thread is inside a capture this crate began on it in the global or
/// thread-local mode: a potentially unsafe call there (`cuMemFree`, `cuMemFreeHost`, an event
/// query, a stream-ordered free with its waits) would invalidate the capture, so the frees of
/// memory dropped there are queued like those of a host function, and made once it has ended.
#[inline(always)]
pub(crate) fn in_own_capture() -> bool {
    CAPTURING.try_with(Cell::get).unwrap_or(0) != 0
}

/// Whether a free must be queued instead of made: inside a host function, or inside a capture
/// this crate began on this thread ([`in_own_capture`]).
#[inline(always)]
pub(crate) fn must_defer_free() -> bool {
    in_host_fn() || in_own_capture()
}

/// Marks the calling thread as inside a capture (of a mode other than relaxed) until dropped;
/// the drop drains what was queued meanwhile when the thread leaves its last such capture.
pub(crate) struct CaptureDeferral {
    counted: bool,
}

impl CaptureDeferral {
    /// Entered by `capture` before the user's closure runs; `relaxed` captures prohibit nothing
    /// and are not counted.
    pub(crate) fn enter(relaxed: bool) -> CaptureDeferral {
        let counted = !relaxed && CAPTURING.try_with(|c| c.set(c.get() + 1)).is_ok();
        CaptureDeferral { counted }
    }
}

impl Drop for CaptureDeferral {
    fn drop(&mut self) {
        if self.counted {
            let _ = CAPTURING.try_with(|c| c.set(c.get().saturating_sub(1)));
            drain_if_pending();
        }
    }
}

/// Queues destroys to be made later on an ordinary thread, in this order. Makes no driver call.
pub(crate) fn defer(items: impl IntoIterator<Item = Deferred>) {
    let mut queue = QUEUE.lock().unwrap_or_else(|e| e.into_inner());
    for item in items {
        queue.push(item);
        PENDING.fetch_add(1, Ordering::Release);
        TOTAL.fetch_add(1, Ordering::Relaxed);
    }
}

/// Destroys what host functions queued, if anything is queued and this is an ordinary thread.
/// One atomic load when the queue is empty.
#[inline(always)]
pub(crate) fn drain_if_pending() {
    if PENDING.load(Ordering::Acquire) != 0 {
        drain();
    }
}

#[cold]
#[inline(never)]
fn drain() -> usize {
    if in_host_fn() || in_own_capture() || DRAINING.try_with(Cell::get).unwrap_or(true) {
        return 0;
    }
    let _one_at_a_time = DRAIN.lock().unwrap_or_else(|e| e.into_inner());
    let _ = DRAINING.try_with(|d| d.set(true));
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            let _ = DRAINING.try_with(|d| d.set(false));
        }
    }
    let _reset = Reset;
    let mut done = 0;
    loop {
        let batch = std::mem::take(&mut *QUEUE.lock().unwrap_or_else(|e| e.into_inner()));
        if batch.is_empty() {
            return done;
        }
        for item in batch {
            if (item.destroy)(item.handle).is_err() {
                FAILED.fetch_add(1, Ordering::Relaxed);
            }
            PENDING.fetch_sub(1, Ordering::Release);
            done += 1;
        }
    }
}

/// Destroys now the streams, events and context retains whose last owner was dropped inside a
/// host function or stream callback (where no CUDA call may be made, so their destroy was
/// queued), and returns how many it destroyed. Inside a host function it does nothing and
/// returns 0.
///
/// Calling it is never needed for correctness: the next call on an ordinary thread that creates
/// a stream, an event or a context, a `synchronize`, a destroy, and the release of the context
/// all drain the queue. It is for a program that wants the handles gone at a point of its
/// choosing (and for tests).
pub fn drain_deferred() -> usize {
    if PENDING.load(Ordering::Acquire) == 0 {
        return 0;
    }
    drain()
}

/// How many destroys are queued and not yet made (see [`drain_deferred`]).
pub fn deferred_pending() -> usize {
    PENDING.load(Ordering::Acquire)
}

/// How many destroys were ever queued in this process, for tests and diagnostics: a host
/// function that dropped the last owner of a stream adds one. Not part of the API (feature
/// `test-hooks`).
#[cfg(any(test, feature = "test-hooks"))]
#[doc(hidden)]
pub fn deferred_total() -> usize {
    TOTAL.load(Ordering::Relaxed)
}

/// How many deferred destroys the driver refused in this process (their handles stay alive), for
/// tests and diagnostics. Not part of the API (feature `test-hooks`).
#[cfg(any(test, feature = "test-hooks"))]
#[doc(hidden)]
pub fn deferred_failed() -> usize {
    FAILED.load(Ordering::Relaxed)
}

/// Probes of this module's locks (see `base::lock_probe`).
#[cfg(feature = "test-hooks")]
pub(crate) fn report_locks(out: &mut Vec<String>) {
    use crate::base::lock_probe::probe;
    probe(out, "deferred_destroy::QUEUE", &QUEUE);
    probe(out, "deferred_destroy::DRAIN", &DRAIN);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    static DESTROYED: Mutex<Vec<usize>> = Mutex::new(Vec::new());

    fn record(handle: usize) -> Result<()> {
        DESTROYED.lock().unwrap().push(handle);
        if handle == 3 {
            return Err(crate::Error::NullHandle { what: "test" });
        }
        Ok(())
    }

    #[test]
    fn queued_inside_a_scope_and_drained_outside_it_in_order() {
        static ONE_TEST: AtomicUsize = AtomicUsize::new(0);
        assert_eq!(ONE_TEST.fetch_add(1, Ordering::SeqCst), 0);
        assert!(!in_host_fn());
        {
            let _scope = HostFnScope::enter();
            assert!(in_host_fn());
            defer([Deferred::new(1, record), Deferred::new(2, record)]);
            defer([Deferred::new(3, record)]);
            assert_eq!(drain_deferred(), 0, "never drains inside a host function");
            assert_eq!(deferred_pending(), 3);
        }
        assert!(!in_host_fn());
        // A panic inside the scope still clears the flag.
        let r = std::panic::catch_unwind(|| {
            let _scope = HostFnScope::enter();
            panic!("in a host function");
        });
        assert!(r.is_err());
        assert!(!in_host_fn());
        assert!(deferred_total() >= 3);
        drain_if_pending();
        assert_eq!(deferred_pending(), 0);
        assert_eq!(*DESTROYED.lock().unwrap(), [1, 2, 3]);
        assert_eq!(deferred_failed(), 1, "a refused destroy is counted");
        assert_eq!(drain_deferred(), 0);
    }
}
