//! Host functions and stream callbacks: closures the driver runs on its own thread once a
//! stream's earlier work has completed. Adds `launch_host_func` and `add_callback` to [`Stream`]
//! and to the owners that lend one.
//!
//! # Run-once host functions and graph captures
//!
//! A run-once (`FnOnce`) host function must never become a node of a graph: every replay would
//! run it again, from a block its first run gave back. Three things keep it out:
//!
//! 1. **The check.** [`Stream::launch_host_func`] asks `cuStreamIsCapturing` first and refuses a
//!    stream that is being captured ([`Error::Refused`]). The check and the enqueue are two
//!    calls, so the check alone holds only if the stream cannot join a capture in between.
//! 2. **No stream safe code only borrows can join a capture of this crate.** A stream joins a
//!    capture by waiting on an event recorded in it, so safe code would need a plain [`Stream`]
//!    of a stream being captured. There is none: a capture's origin is held by `&mut` (the safe
//!    [`OwnedStream::capture`](crate::OwnedStream::capture)), its forks are pool streams leased
//!    to the capture alone, and the only view that can outlive its lease, a
//!    [`CurrentStreamGuard`](crate::CurrentStreamGuard) leaked with `mem::forget`, names a
//!    stream that no pool hands out again (`stream::pool`) and that no capture begins on or
//!    forks (`graph::capture`, `graph::capture_view`). The capture's own view records only
//!    events that the capture's views alone can wait for.
//! 3. **The capture's end checks.** Should a stream join a capture of this crate by any other
//!    way (raw calls, a bug), a run-once function enqueued between check and enqueue becomes a
//!    host node. Its trampoline is known: each run-once trampoline is noted here before its
//!    first launch ([`note_run_once`]), and the end of every capture this crate begins looks at
//!    the graph's host nodes ([`run_once_discard`]). A graph holding one is destroyed before
//!    anyone can launch it, the function is dropped unrun, and the capture fails with
//!    [`Error::Refused`].
//!
//! What remains is a capture that other code begins and ends on a stream this crate lent it
//! (`raw()` handed to a framework, which calls `cuStreamBeginCapture` itself): this crate sees
//! neither its beginning nor its end, so a capture begun between the check and the enqueue of a
//! launch on that stream, or on a stream waiting on it, takes the function in (see
//! [`Stream::launch_host_func`]).

mod blocks;

use std::cell::Cell;
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::{self, NonNull};
use std::sync::Mutex;

use crate::base::error::{Error, Result, check, driver_fn};
use crate::driver::context::bind;
use crate::ffi;
use crate::stream::owned::OwnedStream;
use crate::stream::pool::PooledStream;
use crate::stream::view::{AsStream, Stream};

impl Stream<'_> {
    /// Runs `f` on a driver thread once the work enqueued so far has completed
    /// (`cuLaunchHostFunc`). Work enqueued after it waits for it to return. If enqueueing fails,
    /// `f` is dropped here and the error returned. A panic in `f` is caught on the driver's
    /// thread (it never unwinds into the driver) and reported by a later
    /// [`Stream::synchronize`], [`Stream::query`] or `launch_host_func` on this stream as
    /// [`Error::HostFnPanicked`].
    ///
    /// # No CUDA calls inside
    ///
    /// `f` must not call CUDA: the driver forbids it, and it can deadlock (a `synchronize` of
    /// the host function's own stream waits for the host function itself). This crate's
    /// operations enforce it: inside `f`, every one that would call the driver (or NCCL) —
    /// enqueueing, querying, synchronizing, creating, a [`Completion`](crate::Completion)'s
    /// poll — returns [`Error::InHostFunction`] naming the call, before anything reaches the
    /// driver. (Raw calls through `cuda_stream_sys` are not checked.) *Dropping* this crate's values
    /// inside `f` is fine: an [`OwnedStream`], [`Event`](crate::Event),
    /// [`StreamPool`](crate::StreamPool) or lease, [`Completion`](crate::Completion) or
    /// [`Context`](crate::Context) whose last owner is dropped here (for example an
    /// `Arc<OwnedStream>` moved into its own host function to keep the stream alive until its
    /// work is done) makes no driver call: the destroy is queued and made later on an ordinary
    /// thread, by the next call that creates something or synchronizes, by the release of the
    /// context, or by [`drain_deferred`](crate::drain_deferred). `close()` inside `f` queues the
    /// destroy the same way and returns [`Error::InHostFunction`].
    ///
    /// Nor does this crate make `f` wait for another thread: a driver call that thread is making
    /// can itself wait for `f` (an event record waits for a copy to pageable memory that waits
    /// for a host function, measured on an H100), so the locks such calls are made under are
    /// never waited for inside `f`. [`OwnedStream::into_raw`](crate::OwnedStream::into_raw)
    /// there completes its hand-over later (see there), page-locked memory that another thread
    /// is waiting on answers [`Error::Busy`] (`try_as_slice`) or the count last noted
    /// (`copies_in_flight`), and `DeviceBuffer::into_raw` of a buffer with uses recorded is
    /// [`Error::InHostFunction`].
    ///
    /// ```no_run
    /// # let ctx = cuda_stream::Context::primary(0)?;
    /// use std::sync::Arc;
    /// let s = Arc::new(ctx.new_stream()?);
    /// let keep = s.clone();
    /// s.launch_host_func(move || drop(keep))?; // the last owner may end here: destroyed later
    /// # Ok::<(), cuda_stream::Error>(())
    /// ```
    ///
    /// # In a graph capture
    ///
    /// `f` runs once, so it is refused ([`Error::Refused`]) while the stream is being captured
    /// into a graph (by [`OwnedStream::capture`](crate::OwnedStream::capture), or by other code
    /// such as PyTorch's `torch.cuda.graph`): in a graph it would run on every replay. That
    /// costs one `cuStreamIsCapturing` per call. In a capture, use
    /// [`CaptureStream::launch_host_func`](crate::CaptureStream::launch_host_func), which takes an
    /// `Fn` and keeps it alive as long as a graph can run it.
    ///
    /// The check and the enqueue are two driver calls. No capture this crate begins can take
    /// `f` in between: safe code cannot make a stream it only borrows join such a capture, and
    /// should one join anyway, the capture's end finds `f` among its nodes and fails
    /// ([`Error::Refused`], the graph destroyed unlaunched, `f` dropped unrun). A capture that
    /// **other code** begins is different: if a framework calls `cuStreamBeginCapture` itself
    /// on this stream (one this crate lent it through `raw()`), or on a stream this one waits
    /// on, between the check and the enqueue, `f` becomes a node of that framework's graph, and
    /// this crate never sees the graph. Do not launch run-once host functions on a stream while
    /// another thread may begin capturing it (for a borrowed stream,
    /// [`Stream::borrow_raw`]'s contract says so).
    #[inline]
    pub fn launch_host_func<F>(self, f: F) -> Result<()>
    where
        F: FnOnce() + Send + 'static,
    {
        launch(self, f)
    }

    /// Runs `f` once the work enqueued so far has completed, passing the stream's status: `Ok`,
    /// or the error that put the stream (context) in a failed state (`cuStreamAddCallback`).
    /// Prefer [`Stream::launch_host_func`], which NVIDIA recommends; this exists for callers that
    /// want the status. The same rule holds: `f` must not call CUDA, and values of this crate
    /// dropped inside it are destroyed later on an ordinary thread (see
    /// [`Stream::launch_host_func`]). The driver refuses callbacks on a stream that is being
    /// captured (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`), so `f` never becomes a graph node.
    pub fn add_callback<F>(self, f: F) -> Result<()>
    where
        F: FnOnce(Result<()>) + Send + 'static,
    {
        add_callback(self, f)
    }
}

/// Forwards the host-function operations to an owner that lends a [`Stream`].
macro_rules! forward_host_ops {
    ($ty:ty) => {
        impl $ty {
            /// See [`Stream::launch_host_func`].
            #[inline(always)]
            pub fn launch_host_func<F>(&self, f: F) -> Result<()>
            where
                F: FnOnce() + Send + 'static,
            {
                self.as_stream().launch_host_func(f)
            }
            /// See [`Stream::add_callback`].
            #[inline(always)]
            pub fn add_callback<F>(&self, f: F) -> Result<()>
            where
                F: FnOnce(Result<()>) + Send + 'static,
            {
                self.as_stream().add_callback(f)
            }
        }
    };
}

forward_host_ops!(OwnedStream);
forward_host_ops!(PooledStream<'_>);

/// What a closure that captures data travels in: a recycled block (see `blocks`), written by
/// `launch` and taken back by the trampoline, which recycles the block before the closure runs.
struct HostCall<F> {
    f: F,
    stream: usize,
    ctx: usize,
}

impl<F> HostCall<F> {
    fn put(self) -> *mut c_void {
        blocks::put(self).as_ptr().cast()
    }

    /// # Safety
    /// `data` came from [`HostCall::put`] for this `F` and is taken back once.
    unsafe fn take(data: *mut c_void) -> HostCall<F> {
        // SAFETY: the caller's promise; `put` never returns null.
        unsafe { blocks::take(NonNull::new_unchecked(data.cast::<HostCall<F>>())) }
    }
}

unsafe extern "C" fn host_trampoline<F: FnOnce() + Send + 'static>(user_data: *mut c_void) {
    // SAFETY: `user_data` is the `HostCall<F>` put by `launch`; the driver calls each host
    // function exactly once, so it is taken back exactly once.
    let HostCall { f, stream, ctx } = unsafe { HostCall::<F>::take(user_data) };
    // Destroys of what the closure drops are deferred (the scope ends after every drop here).
    let _in_host_fn = crate::driver::deferred_destroy::HostFnScope::enter();
    if let Err(payload) = catch_unwind(AssertUnwindSafe(f)) {
        crate::stream::host_panics::record(stream, ctx, payload);
    }
}

/// Runs a closure that captures nothing: the value was forgotten by `launch`, so conjuring it
/// here moves it, and no allocation carries it.
unsafe extern "C" fn zst_trampoline<F: FnOnce() + Send + 'static>(user_data: *mut c_void) {
    // SAFETY: `F` is zero-sized, so reading it from a dangling, aligned pointer is valid; `launch`
    // forgot the original and the driver calls this exactly once, so the value exists once.
    let f = unsafe { ptr::read(ptr::NonNull::<F>::dangling().as_ptr()) };
    let _in_host_fn = crate::driver::deferred_destroy::HostFnScope::enter();
    if let Err(payload) = catch_unwind(AssertUnwindSafe(f)) {
        // Only the stream travels in `user_data`; 0 matches any context.
        crate::stream::host_panics::record(user_data as usize, 0, payload);
    }
}

/// The trampolines of the run-once host functions this process has launched (`host_trampoline`
/// and `zst_trampoline` of each closure type), by address, each with the function that takes a
/// node's data back and drops its closure unrun.
pub(crate) type Discard = unsafe fn(*mut c_void);

/// A host function's trampoline, as the driver calls it.
type Trampoline = unsafe extern "C" fn(*mut c_void);

static RUN_ONCE: Mutex<Vec<(usize, Discard)>> = Mutex::new(Vec::new());

thread_local! {
    /// The last trampolines this thread noted, the latest first, so that a launch in a loop
    /// takes no lock.
    static NOTED: [Cell<usize>; 4] = const { [const { Cell::new(0) }; 4] };
}

/// Notes `trampoline` (with its `discard`) as a run-once host function's, before it is first
/// enqueued by this thread: one thread-local read when it was the last one noted.
#[inline(always)]
fn note_run_once(trampoline: usize, discard: Discard) {
    let seen = NOTED.try_with(|n| n.iter().any(|c| c.get() == trampoline));
    if seen != Ok(true) {
        note_slow(trampoline, discard);
    }
}

#[cold]
#[inline(never)]
fn note_slow(trampoline: usize, discard: Discard) {
    {
        let mut all = RUN_ONCE.lock().unwrap_or_else(|e| e.into_inner());
        if !all.iter().any(|&(t, _)| t == trampoline) {
            all.push((trampoline, discard));
        }
    }
    let _ = NOTED.try_with(|n| {
        for i in (1..n.len()).rev() {
            n[i].set(n[i - 1].get());
        }
        n[0].set(trampoline);
    });
}

/// Whether any run-once host function was ever launched in this process (none: a graph cannot
/// hold one).
pub(crate) fn any_run_once() -> bool {
    !RUN_ONCE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .is_empty()
}

/// For a host node calling `trampoline`: the function that drops the run-once closure its data
/// carries, unrun, if `trampoline` is a run-once host function's; `None` for any other host
/// function (this crate's graph host nodes, other code's).
pub(crate) fn run_once_discard(trampoline: usize) -> Option<Discard> {
    RUN_ONCE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|&&(t, _)| t == trampoline)
        .map(|&(_, d)| d)
}

/// Drops, unrun, the closure of a run-once host function whose node was in a graph that was
/// destroyed unlaunched.
///
/// # Safety
/// `data` is the user data of such a node of `host_trampoline::<F>`, and no graph or stream will
/// ever call the trampoline with it.
unsafe fn discard_boxed<F: FnOnce() + Send + 'static>(data: *mut c_void) {
    // SAFETY: the caller's promise: the `HostCall<F>` put by `launch`, never taken back.
    let call = unsafe { HostCall::<F>::take(data) };
    // The closure's captures may panic on drop: contained, as in the trampoline.
    contain(catch_unwind(AssertUnwindSafe(move || drop(call))));
}

/// [`discard_boxed`] for a closure that captures nothing (`zst_trampoline::<F>`).
///
/// # Safety
/// As for [`discard_boxed`]: the node of `zst_trampoline::<F>` will never run.
unsafe fn discard_zst<F: FnOnce() + Send + 'static>(_data: *mut c_void) {
    // SAFETY: `F` is zero-sized; `launch` forgot the value and the trampoline never ran, so it
    // exists once, here.
    let f = unsafe { ptr::read(ptr::NonNull::<F>::dangling().as_ptr()) };
    contain(catch_unwind(AssertUnwindSafe(move || drop(f))));
}

/// Contains a panic of a discarded closure's drop (nobody to report it to: the capture that
/// found it fails anyway), its payload's own drop included.
fn contain(dropped: std::thread::Result<()>) {
    if let Err(payload) = dropped {
        if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
            std::mem::forget(again);
        }
    }
}

fn launch<F: FnOnce() + Send + 'static>(stream: Stream<'_>, f: F) -> Result<()> {
    crate::stream::host_panics::report(stream.handle(), stream.context_raw())?;
    let launch = driver_fn!(cuLaunchHostFunc);
    // Default streams resolve through the current context, for the capture check too.
    let _bound = if stream.is_default() {
        Some(bind(stream.context_raw())?)
    } else {
        None
    };
    refuse_if_capturing(stream.handle())?;
    // Default streams go through a `HostCall`, which records their context for panic reports.
    if std::mem::size_of::<F>() == 0 && !stream.is_default() {
        // No memory at all for a closure that captures nothing: the stream travels as the user
        // data (see BENCHMARKS.md for what a block per call costs under load).
        // One pointer, noted and enqueued: a node of this launch is recognised by it.
        let trampoline: Trampoline = zst_trampoline::<F>;
        note_run_once(trampoline as usize, discard_zst::<F>);
        let f = std::mem::ManuallyDrop::new(f);
        // SAFETY: the stream is live; the trampoline matches `CUhostFn` and conjures `f` back.
        let rc = unsafe { launch(stream.handle(), Some(trampoline), stream.handle().cast()) };
        if rc != ffi::CUresult::CUDA_SUCCESS {
            // The driver will never run it: drop the closure here, once.
            drop(std::mem::ManuallyDrop::into_inner(f));
            return Err(Error::driver("cuLaunchHostFunc", rc));
        }
        return Ok(());
    }
    let trampoline: Trampoline = host_trampoline::<F>;
    note_run_once(trampoline as usize, discard_boxed::<F>);
    let data = HostCall {
        f,
        stream: stream.handle() as usize,
        ctx: stream.context_raw() as usize,
    }
    .put();
    // SAFETY: the stream is live; the trampoline matches `CUhostFn` and takes back `data`.
    let rc = unsafe { launch(stream.handle(), Some(trampoline), data) };
    if rc != ffi::CUresult::CUDA_SUCCESS {
        // SAFETY: the driver refused the call, so it will never run the trampoline: `data` is
        // still ours, taken back exactly once.
        drop(unsafe { HostCall::<F>::take(data) });
        return Err(Error::driver("cuLaunchHostFunc", rc));
    }
    Ok(())
}

/// Refuses a run-once host function on a stream in a capture: there it would become a graph
/// node that runs on every replay, and the closure, taken back by the first run, would be used
/// after it was freed. See the module's documentation for why no capture of this crate can take
/// the function in between this check and the enqueue (and what the end of a capture does if
/// one does anyway); for a borrowed stream, `Stream::borrow_raw`'s contract rules out other
/// code beginning one meanwhile.
#[inline]
fn refuse_if_capturing(raw: ffi::CUstream) -> Result<()> {
    if crate::driver::capture_query::is_capturing(raw)? {
        return Err(Error::Refused {
            call: "cuLaunchHostFunc",
            reason: "the stream is being captured into a graph, where a run-once host function \
                     would run on every replay; launch an Fn through the capture's view",
        });
    }
    Ok(())
}

unsafe extern "C" fn callback_trampoline<F: FnOnce(Result<()>) + Send + 'static>(
    _stream: ffi::CUstream,
    status: ffi::CUresult,
    user_data: *mut c_void,
) {
    // SAFETY: as in `host_trampoline`: the `HostCall<F>` put by `add_callback`, taken once.
    let HostCall { f, stream, ctx } = unsafe { HostCall::<F>::take(user_data) };
    let _in_host_fn = crate::driver::deferred_destroy::HostFnScope::enter();
    let status = check(status, "cuStreamAddCallback");
    if let Err(payload) = catch_unwind(AssertUnwindSafe(move || f(status))) {
        crate::stream::host_panics::record(stream, ctx, payload);
    }
}

fn add_callback<F: FnOnce(Result<()>) + Send + 'static>(stream: Stream<'_>, f: F) -> Result<()> {
    crate::stream::host_panics::report(stream.handle(), stream.context_raw())?;
    let add = driver_fn!(cuStreamAddCallback);
    let _bound = if stream.is_default() {
        Some(bind(stream.context_raw())?)
    } else {
        None
    };
    let data = HostCall {
        f,
        stream: stream.handle() as usize,
        ctx: stream.context_raw() as usize,
    }
    .put();
    // SAFETY: the stream is live; the trampoline matches `CUstreamCallback`; flags must be 0.
    let rc = unsafe { add(stream.handle(), Some(callback_trampoline::<F>), data, 0) };
    if rc != ffi::CUresult::CUDA_SUCCESS {
        // SAFETY: the driver refused the callback and will never call it: taken back once.
        drop(unsafe { HostCall::<F>::take(data) });
        return Err(Error::driver("cuStreamAddCallback", rc));
    }
    Ok(())
}

/// Probes of this module's locks (see `base::lock_probe`).
#[cfg(feature = "test-hooks")]
pub(crate) fn report_locks(out: &mut Vec<String>) {
    crate::base::lock_probe::probe(out, "host_fn::RUN_ONCE", &RUN_ONCE);
    blocks::report_locks(out);
}
