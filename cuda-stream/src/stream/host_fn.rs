//! Host functions and stream callbacks: closures the driver runs on its own thread once a
//! stream's earlier work has completed. Adds `launch_host_func` and `add_callback` to [`Stream`]
//! and to the owners that lend one.

mod blocks;

use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::{self, NonNull};

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
    /// driver. (Raw calls through `cuda_sys` are not checked.) *Dropping* this crate's values
    /// inside `f` is fine: an [`OwnedStream`], [`Event`](crate::Event),
    /// [`StreamPool`](crate::StreamPool) or lease, [`Completion`](crate::Completion) or
    /// [`Context`](crate::Context) whose last owner is dropped here (for example an
    /// `Arc<OwnedStream>` moved into its own host function to keep the stream alive until its
    /// work is done) makes no driver call: the destroy is queued and made later on an ordinary
    /// thread, by the next call that creates something or synchronizes, by the release of the
    /// context, or by [`drain_deferred`](crate::drain_deferred). `close()` inside `f` queues the
    /// destroy the same way and returns [`Error::InHostFunction`].
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
    /// into a graph (by [`OwnedStream::capture`](crate::OwnedStream::capture), or by other code such as PyTorch's
    /// `torch.cuda.graph`): in a graph it would run on every replay. That costs one
    /// `cuStreamIsCapturing` per call. In a capture, use
    /// [`CaptureStream::launch_host_func`](crate::CaptureStream::launch_host_func), which takes an
    /// `Fn` and keeps it alive as long as a graph can run it.
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

fn launch<F: FnOnce() + Send + 'static>(stream: Stream<'_>, f: F) -> Result<()> {
    crate::stream::host_panics::report(stream.raw(), stream.context_raw())?;
    let launch = driver_fn!(cuLaunchHostFunc);
    // Default streams resolve through the current context, for the capture check too.
    let _bound = if stream.is_default() {
        Some(bind(stream.context_raw())?)
    } else {
        None
    };
    refuse_if_capturing(stream.raw())?;
    // Default streams go through a `HostCall`, which records their context for panic reports.
    if std::mem::size_of::<F>() == 0 && !stream.is_default() {
        // No memory at all for a closure that captures nothing: the stream travels as the user
        // data (see BENCHMARKS.md for what a block per call costs under load).
        let f = std::mem::ManuallyDrop::new(f);
        // SAFETY: the stream is live; the trampoline matches `CUhostFn` and conjures `f` back.
        let rc = unsafe { launch(stream.raw(), Some(zst_trampoline::<F>), stream.raw().cast()) };
        if rc != ffi::CUresult::CUDA_SUCCESS {
            // The driver will never run it: drop the closure here, once.
            drop(std::mem::ManuallyDrop::into_inner(f));
            return Err(Error::driver("cuLaunchHostFunc", rc));
        }
        return Ok(());
    }
    let data = HostCall {
        f,
        stream: stream.raw() as usize,
        ctx: stream.context_raw() as usize,
    }
    .put();
    // SAFETY: the stream is live; the trampoline matches `CUhostFn` and takes back `data`.
    let rc = unsafe { launch(stream.raw(), Some(host_trampoline::<F>), data) };
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
/// after it was freed. This crate begins captures only on streams it holds exclusively
/// (`&mut OwnedStream`), so none can begin between the check and the enqueue; for a borrowed
/// stream, `Stream::borrow_raw`'s contract rules out other code beginning one meanwhile.
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
    crate::stream::host_panics::report(stream.raw(), stream.context_raw())?;
    let add = driver_fn!(cuStreamAddCallback);
    let _bound = if stream.is_default() {
        Some(bind(stream.context_raw())?)
    } else {
        None
    };
    let data = HostCall {
        f,
        stream: stream.raw() as usize,
        ctx: stream.context_raw() as usize,
    }
    .put();
    // SAFETY: the stream is live; the trampoline matches `CUstreamCallback`; flags must be 0.
    let rc = unsafe { add(stream.raw(), Some(callback_trampoline::<F>), data, 0) };
    if rc != ffi::CUresult::CUDA_SUCCESS {
        // SAFETY: the driver refused the callback and will never call it: taken back once.
        drop(unsafe { HostCall::<F>::take(data) });
        return Err(Error::driver("cuStreamAddCallback", rc));
    }
    Ok(())
}
