//! Graph capture: [`OwnedStream::capture`] records what a closure enqueues into a [`Graph`],
//! showing the closure the stream through a [`CaptureStream`] that offers only what is legal
//! while capturing; [`Stream::in_capture`] enqueues into a capture that other code began (such
//! as PyTorch's `torch.cuda.graph`); [`Stream::capture_status`] tells any stream's status; and
//! [`exchange_capture_mode`] sets the calling thread's capture interaction mode for a scope.

use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::ptr;
use std::sync::{Mutex, RwLock};

use crate::base::capture_mode::{CaptureMode, CaptureStatus};
use crate::base::error::{Error, Result, check, driver_fn};
use crate::driver::capture_query::{capture_info, is_capturing};
use crate::driver::context::Context;
use crate::driver::deferred_destroy::CaptureDeferral;
use crate::ffi;
use crate::graph::capture_view::{CaptureShared, CaptureStream, sweep_parked};
use crate::graph::replay::Graph;
use crate::graph::user_objects::graph_lock;
use crate::stream::host_fn::{Discard, any_run_once, run_once_discard};
use crate::stream::known_streams;
use crate::stream::owned::OwnedStream;
use crate::stream::pool::PooledStream;
use crate::stream::view::{AsStream, KnownContext, Stream};

/// The ids of the captures this crate has begun and not yet ended, each with its stream's
/// context: the captures whose graphs it hands out, so whose launches it sees (through
/// [`GraphExec::launch`](crate::GraphExec::launch)).
static OURS: Mutex<Vec<(u64, usize)>> = Mutex::new(Vec::new());

fn ours() -> std::sync::MutexGuard<'static, Vec<(u64, usize)>> {
    OURS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether capture `id` was begun by this crate (`capture` on a stream), and is under way: work
/// in it is replayed only where this crate sees it. A capture other code began (a framework's,
/// reached through [`Stream::in_capture`] or a borrowed or lent stream) is not.
pub(crate) fn begun_here(id: u64) -> bool {
    id != 0 && ours().iter().any(|&(c, _)| c == id)
}

/// Whether a capture this crate began on a stream of `ctx` is under way: a synchronisation of
/// the context would fail and invalidate it.
fn capturing_in(ctx: ffi::CUcontext) -> bool {
    ours().iter().any(|&(_, c)| c == ctx as usize)
}

/// Held shared by [`unless_capturing_in`] across its look at [`OURS`] and its call, and
/// exclusively by a capture from just before `cuStreamBeginCapture` until it is listed there:
/// no capture of this crate begins between the look and the call.
static BEGINS: RwLock<()> = RwLock::new(());

/// `f()` (a synchronisation of `ctx` this crate makes on its own: the end of a use nothing
/// marks), unless a capture this crate began on a stream of `ctx` is under way (`None`): the
/// call would fail and invalidate it. No such capture begins meanwhile.
pub(crate) fn unless_capturing_in<R>(ctx: ffi::CUcontext, f: impl FnOnce() -> R) -> Option<R> {
    let _no_begin = BEGINS.read().unwrap_or_else(|e| e.into_inner());
    if capturing_in(ctx) {
        return None;
    }
    Some(f())
}

fn per_thread_refused(call: &'static str) -> Error {
    Error::Refused {
        call,
        reason: "the per-thread default stream is another stream on every thread, so a capture \
                 view of it cannot be shared; capture a created stream",
    }
}

/// Ends the capture of `raw` (`cuStreamEndCapture`), returning the graph, or the error with the
/// capture's status. If the end failed and left the stream capturing (the driver normally takes
/// it out of capture mode even when it refuses the graph), it is ended once more and that graph
/// discarded. The second value says whether the stream is out of capture mode.
fn end_capture(
    end: ffi::pfn::cuStreamEndCapture,
    raw: ffi::CUstream,
    id: u64,
) -> (Result<ffi::CUgraph>, bool) {
    let mut graph = ptr::null_mut();
    // SAFETY: the stream is live; `graph` is a valid out-pointer.
    let rc = unsafe { end(raw, &mut graph) };
    if rc == ffi::CUresult::CUDA_SUCCESS {
        if graph.is_null() {
            return (Err(Error::NullHandle { what: "graph" }), true);
        }
        return (Ok(graph), true);
    }
    discard(graph);
    let status = if rc == ffi::CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED {
        CaptureStatus::Invalidated { id }
    } else {
        CaptureStatus::Active { id }
    };
    let err = Error::CaptureFailed {
        call: "cuStreamEndCapture",
        status,
        code: crate::base::error::DriverCode(rc),
    };
    let mut ended = true;
    if is_capturing(raw).unwrap_or(true) {
        let mut again = ptr::null_mut();
        // SAFETY: as above.
        let rc = unsafe { end(raw, &mut again) };
        discard(again);
        ended = rc == ffi::CUresult::CUDA_SUCCESS || !is_capturing(raw).unwrap_or(true);
    }
    (Err(err), ended)
}

/// Destroys a graph returned with an error, if any.
fn discard(graph: ffi::CUgraph) {
    if !graph.is_null() {
        if let Ok(f) = ffi::fns::cuGraphDestroy() {
            // SAFETY: the capture handed the graph over; nothing else has it.
            let _ = unsafe { f(graph) };
        }
    }
}

/// The run-once host functions (`Stream::launch_host_func`) among the host nodes of `graph`, a
/// capture's graph that nobody has launched: each node's data, with the function that drops its
/// closure unrun (see `stream::host_fn`), and whether every node could be looked at. No driver
/// call where no run-once host function was ever launched in the process.
fn run_once_nodes(graph: ffi::CUgraph) -> (Vec<(Discard, *mut c_void)>, Result<()>) {
    let mut found = Vec::new();
    if !any_run_once() {
        return (found, Ok(()));
    }
    let looked = (|| -> Result<()> {
        let get_nodes = driver_fn!(cuGraphGetNodes);
        let get_type = driver_fn!(cuGraphNodeGetType);
        let get_host = driver_fn!(cuGraphHostNodeGetParams);
        let _one_at_a_time = graph_lock(graph);
        let mut n = 0usize;
        // SAFETY: the graph is live; a null array asks for the count.
        let rc = unsafe { get_nodes(graph, ptr::null_mut(), &mut n) };
        check(rc, "cuGraphGetNodes")?;
        if n == 0 {
            // An empty graph: the driver (580) answers a second call with an empty array
            // `CUDA_ERROR_INVALID_VALUE`.
            return Ok(());
        }
        let mut nodes = vec![ptr::null_mut(); n];
        // SAFETY: `nodes` has room for `n` handles.
        let rc = unsafe { get_nodes(graph, nodes.as_mut_ptr(), &mut n) };
        check(rc, "cuGraphGetNodes")?;
        nodes.truncate(n);
        for node in nodes {
            let mut kind = ffi::CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
            // SAFETY: a node of the live graph; `kind` is a valid out-pointer.
            check(unsafe { get_type(node, &mut kind) }, "cuGraphNodeGetType")?;
            if kind != ffi::CUgraphNodeType::CU_GRAPH_NODE_TYPE_HOST {
                continue;
            }
            let mut params = ffi::CUDA_HOST_NODE_PARAMS {
                fn_: None,
                userData: ptr::null_mut(),
            };
            // SAFETY: a host node of the live graph; `params` is a valid out-pointer.
            let rc = unsafe { get_host(node, &mut params) };
            check(rc, "cuGraphHostNodeGetParams")?;
            if let Some(discard) = params.fn_.and_then(|f| run_once_discard(f as usize)) {
                found.push((discard, params.userData));
            }
        }
        Ok(())
    })();
    (found, looked)
}

/// Checks a capture's graph before it is handed out: a run-once host function must never be a
/// node (every replay would run it again, from a block its first run gave back). How one could
/// get in, and why none should, is in `stream::host_fn`. If one is there, or the nodes cannot
/// all be looked at, the graph is destroyed unlaunched and the run-once functions found are
/// dropped unrun.
fn refuse_run_once_nodes(graph: ffi::CUgraph) -> Result<ffi::CUgraph> {
    let (found, looked) = run_once_nodes(graph);
    if found.is_empty() {
        if let Err(e) = looked {
            discard(graph);
            return Err(e);
        }
        return Ok(graph);
    }
    discard(graph);
    for (drop_unrun, data) in found {
        // SAFETY: `data` is the node's user data, put by `launch` for the trampoline this
        // discard belongs to; the graph that held the node was never launched and is destroyed,
        // and a launch that became a node was never enqueued anywhere else, so nothing will
        // call the trampoline with it: it is taken back once, here.
        unsafe { drop_unrun(data) };
    }
    Err(Error::Refused {
        call: "cuStreamEndCapture",
        reason: "a run-once host function (Stream::launch_host_func) was enqueued on a stream \
                 that had joined the capture; a graph would run it on every replay, so the \
                 graph was destroyed and the function dropped unrun",
    })
}

/// Begins a capture on `stream`, runs `f` with its view, and always ends the capture (an error
/// or a panic of `f` discards the graph). The caller guarantees no other view of the stream is
/// used meanwhile.
fn capture_on(
    stream: Stream<'_>,
    keep: Option<Context>,
    mode: CaptureMode,
    f: impl for<'cap> FnOnce(CaptureStream<'cap>) -> Result<()>,
) -> Result<Graph> {
    let (raw, ctx) = (stream.handle(), stream.context_raw());
    if raw as usize == 2 {
        return Err(per_thread_refused("cuStreamBeginCapture"));
    }
    if crate::stream::guarded_streams::contains(raw) {
        return Err(Error::Refused {
            call: "cuStreamBeginCapture",
            reason: "a current-stream guard (leaked with mem::forget) names the stream, so \
                     other views of it could be used during the capture",
        });
    }
    // Resolved first: once the capture has begun, it must be possible to end it.
    let begin = driver_fn!(cuStreamBeginCapture);
    let end = driver_fn!(cuStreamEndCapture);
    sweep_parked();
    let begins;
    {
        let _bound = stream.bind_if_default()?;
        // The uses of buffers marked lazily on the stream so far are settled by one event now,
        // while it can still be recorded: once the capture has begun, a record there would be a
        // node of the capture (see the ordering model in `memory::use_tracking`).
        known_streams::settle(raw)?;
        begins = BEGINS.write().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the stream is live; the mode is a valid `CUstreamCaptureMode`.
        check(unsafe { begin(raw, mode.raw()) }, "cuStreamBeginCapture")?;
        if stream.is_default() {
            // The legacy stream cannot be captured; should a driver allow it, the view could
            // not be shared across threads (the value resolves through the current context).
            let (graph, _) = end_capture(end, raw, 0);
            discard(graph.unwrap_or(ptr::null_mut()));
            return Err(Error::Refused {
                call: "cuStreamBeginCapture",
                reason: "a default stream cannot be captured; capture a created stream",
            });
        }
    }
    // From here on, the capture is ended whatever happens.
    let (status, graph) = match capture_info(raw) {
        Ok(info) => info,
        Err(e) => {
            let (graph, _) = end_capture(end, raw, 0);
            discard(graph.unwrap_or(ptr::null_mut()));
            return Err(e);
        }
    };
    let id = status.id().unwrap_or(0);
    ours().push((id, ctx as usize));
    drop(begins);
    let shared = CaptureShared::new(id, graph, raw, ctx);
    // Frees of memory dropped in the closure are queued while the capture runs, and made once it
    // has ended (when the deferral goes): their driver calls would invalidate it.
    let deferral = CaptureDeferral::enter(mode == CaptureMode::Relaxed);
    let result = catch_unwind(AssertUnwindSafe(|| {
        f(CaptureStream::new(raw, ctx, &shared))
    }));
    let (graph, ended) = end_capture(end, raw, id);
    ours().retain(|&(c, _)| c != id);
    drop(deferral);
    shared.finish(ended);
    let route = shared.route.get().cloned();
    match result {
        Err(payload) => {
            discard(graph.unwrap_or(ptr::null_mut()));
            resume_unwind(payload)
        }
        Ok(Err(e)) => {
            discard(graph.unwrap_or(ptr::null_mut()));
            Err(e)
        }
        // The graph of a failed capture (the arms above) is destroyed unlaunched: a run-once
        // function pulled into it never runs, and is only never dropped.
        Ok(Ok(())) => graph
            .and_then(refuse_run_once_nodes)
            .map(|g| Graph::from_capture(g, ctx, keep, route)),
    }
}

/// Runs `f` with a view of the capture that `stream` is part of; releases what the view made
/// (events at once, forks once the capture has ended).
fn in_capture_on<R>(
    stream: Stream<'_>,
    f: impl for<'cap> FnOnce(CaptureStream<'cap>) -> Result<R>,
) -> Result<R> {
    let (raw, ctx) = (stream.handle(), stream.context_raw());
    if raw as usize == 2 {
        return Err(per_thread_refused("cuStreamGetCaptureInfo"));
    }
    sweep_parked();
    let (status, graph) = {
        let _bound = stream.bind_if_default()?;
        capture_info(raw)?
    };
    let id = match status {
        CaptureStatus::Active { id } if !stream.is_default() => id,
        other => return Err(Error::NotCapturing { status: other }),
    };
    let shared = CaptureShared::new(id, graph, raw, ctx);
    let result = catch_unwind(AssertUnwindSafe(|| {
        f(CaptureStream::new(raw, ctx, &shared))
    }));
    shared.finish(false);
    match result {
        Err(payload) => resume_unwind(payload),
        Ok(r) => r,
    }
}

fn status_of(stream: Stream<'_>) -> Result<CaptureStatus> {
    let _bound = stream.bind_if_default()?;
    capture_info(stream.handle()).map(|(status, _)| status)
}

impl<'a> Stream<'a> {
    /// Records what `f` enqueues on this stream into a [`Graph`] (`cuStreamBeginCapture`,
    /// `cuStreamEndCapture`); see [`OwnedStream::capture`], the safe form.
    ///
    /// # Safety
    ///
    /// Until this returns, the stream must be used only through the [`CaptureStream`] view that
    /// `f` receives: no other view or copy of it may be used, by this thread or another (another
    /// stream made to wait on it would join the capture; its work would be captured, never run,
    /// and a run-once host function launched on it from another thread at that moment would
    /// make the capture fail at its end). An owner proves this with `&mut`, which is why
    /// [`OwnedStream::capture`] is safe.
    pub unsafe fn capture(
        self,
        mode: CaptureMode,
        f: impl for<'cap> FnOnce(CaptureStream<'cap>) -> Result<()>,
    ) -> Result<Graph> {
        // The graph keeps a primary context alive; another context is the caller's to keep.
        let keep = Context::retain_if_primary(self.context_raw())?;
        capture_on(self, keep, mode, f)
    }

    /// Whether the stream is being captured into a graph, by this crate or by other code (such
    /// as PyTorch's `torch.cuda.graph`), with the capture's id (`cuStreamGetCaptureInfo`: its
    /// CUDA 12.3 ABI, or the CUDA 11.3 one on older drivers; [`Error::Unsupported`] before).
    pub fn capture_status(self) -> Result<CaptureStatus> {
        status_of(self)
    }

    /// Runs `f` with a view of the capture this stream is part of, begun by other code (PyTorch's
    /// `torch.cuda.graph`, CuPy's `Stream.begin_capture`, C code), so that Rust code handed the
    /// stream can enqueue into it: kernels, host functions that run on every replay, events and
    /// forks, by the same rules as in [`OwnedStream::capture`]. The capture is left running.
    /// [`Error::NotCapturing`] if there is no active capture. Buffers of this crate are refused
    /// there ([`Error::Refused`]): other code launches the capture's graphs, where this crate
    /// cannot order them against the buffers' other uses; launch kernels on raw addresses and
    /// tie the buffers with [`DeviceBuffer::keep_alive_in`](crate::DeviceBuffer::keep_alive_in)
    /// (a [`GraphBuffer`](crate::GraphBuffer) allocated in the capture works as in any).
    ///
    /// Events the view records are destroyed when `f` returns; streams forked in its scopes go
    /// back to their pool once the capture has ended. Host functions are kept alive by the
    /// capture's graph (and the executable graphs made from it), and their panics are reported
    /// against this stream.
    ///
    /// ```no_run
    /// use cuda_stream::{CaptureStatus, Stream};
    ///
    /// /// Called from Python inside `with torch.cuda.graph(g):` with the capture stream's handle.
    /// extern "C" fn enqueue(handle: usize) -> i32 {
    ///     let owner = (); // the framework keeps the stream alive during the call
    ///     // SAFETY: the framework keeps `handle` alive until this function returns.
    ///     let Ok(stream) = (unsafe { Stream::borrow_raw(handle as _, &owner) }) else { return 1 };
    ///     let r = stream.in_capture(|cap| {
    ///         // ... launch kernels on `cap` ...
    ///         cap.launch_host_func(|| println!("runs on every replay"))
    ///     });
    ///     r.is_err() as i32
    /// }
    /// ```
    pub fn in_capture<R>(
        self,
        f: impl for<'cap> FnOnce(CaptureStream<'cap>) -> Result<R>,
    ) -> Result<R> {
        in_capture_on(self, f)
    }
}

impl OwnedStream {
    /// Records the work `f` enqueues on this stream into a [`Graph`], to be instantiated and
    /// replayed (`cuStreamBeginCapture` in `mode`, `cuStreamEndCapture`). Needs CUDA 11.3 (the
    /// capture's status and graph come from `cuStreamGetCaptureInfo`'s ABI of that version;
    /// [`Error::Unsupported`] naming it before, with the stream left as it was).
    ///
    /// `f` sees the stream through a [`CaptureStream`], which offers only what is legal while
    /// capturing: enqueueing (kernels, memset and memcpy through [`Enqueue`](crate::Enqueue)), host functions
    /// that run on every replay, events, `wait_stream` and forks whose scope joins them back.
    /// Nothing that blocks or polls exists on it (`synchronize`, `query`, `completed`), and the
    /// `&mut` borrow keeps every other view of the stream out of reach until the capture ends.
    ///
    /// The capture always ends: if `f` returns an error or panics, the graph is destroyed and the
    /// error returned (or the panic resumed), and the stream is usable again. A capture that was
    /// invalidated (by a prohibited call on another thread in [`CaptureMode::Global`], for
    /// example) ends as [`Error::CaptureFailed`] with its status.
    ///
    /// ```no_run
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use cuda_stream::{CaptureMode, Context};
    ///
    /// let ctx = Context::primary(0)?;
    /// let mut stream = ctx.new_stream()?;
    /// let replays = Arc::new(AtomicUsize::new(0));
    /// let counter = replays.clone();
    /// let graph = stream.capture(CaptureMode::ThreadLocal, |cap| {
    ///     // ... launch kernels on `cap` ...
    ///     cap.scope(|s| {
    ///         let side = s.fork()?; // joined back when the scope ends
    ///         // ... launch kernels on `side`, concurrent with `cap` ...
    ///         # let _ = side;
    ///         Ok(())
    ///     })?;
    ///     cap.launch_host_func(move || {
    ///         counter.fetch_add(1, Ordering::Relaxed);
    ///     })
    /// })?;
    /// let exec = graph.instantiate()?;
    /// for _ in 0..1000 {
    ///     exec.launch(&stream)?;
    /// }
    /// stream.synchronize()?;
    /// assert_eq!(replays.load(Ordering::Relaxed), 1000);
    /// # Ok::<(), cuda_stream::Error>(())
    /// ```
    pub fn capture(
        &mut self,
        mode: CaptureMode,
        f: impl for<'cap> FnOnce(CaptureStream<'cap>) -> Result<()>,
    ) -> Result<Graph> {
        let keep = Some(self.context().clone());
        capture_on(self.as_stream(), keep, mode, f)
    }
}

impl PooledStream<'_> {
    /// See [`OwnedStream::capture`].
    pub fn capture(
        &mut self,
        mode: CaptureMode,
        f: impl for<'cap> FnOnce(CaptureStream<'cap>) -> Result<()>,
    ) -> Result<Graph> {
        let keep = self.known_context();
        capture_on(self.as_stream(), keep, mode, f)
    }
}

/// Forwards the capture queries that need no exclusive access to an owner.
macro_rules! forward_capture_ops {
    ($ty:ty) => {
        impl $ty {
            /// See [`Stream::capture_status`].
            pub fn capture_status(&self) -> Result<CaptureStatus> {
                self.as_stream().capture_status()
            }
            /// See [`Stream::in_capture`].
            pub fn in_capture<R>(
                &self,
                f: impl for<'cap> FnOnce(CaptureStream<'cap>) -> Result<R>,
            ) -> Result<R> {
                self.as_stream().in_capture(f)
            }
        }
    };
}

forward_capture_ops!(OwnedStream);
forward_capture_ops!(PooledStream<'_>);

/// Probes of this module's locks (see `base::lock_probe`).
#[cfg(feature = "test-hooks")]
pub(crate) fn report_locks(out: &mut Vec<String>) {
    crate::base::lock_probe::probe(out, "capture::OURS", &OURS);
}
