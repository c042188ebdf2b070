//! Graph capture: [`OwnedStream::capture`] records what a closure enqueues into a [`Graph`],
//! showing the closure the stream through a [`CaptureStream`] that offers only what is legal
//! while capturing; [`Stream::in_capture`] enqueues into a capture that other code began (such
//! as PyTorch's `torch.cuda.graph`); [`Stream::capture_status`] tells any stream's status; and
//! [`exchange_capture_mode`] sets the calling thread's capture interaction mode for a scope.

use std::fmt;
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use crate::capture_mode::{CaptureMode, CaptureStatus};
use crate::capturing::{capture_info, is_capturing};
use crate::context::{Context, bind};
use crate::error::{Error, Result, check, driver_fn};
use crate::event::Event;
use crate::ffi;
use crate::graph::Graph;
use crate::graph_host::{HostRoute, enqueue_host_node, keep_alive};
use crate::owned::OwnedStream;
use crate::pool::{PooledStream, StreamPool};
use crate::stream::{AsStream, Enqueue, KnownContext, Stream};
use crate::wait_events::WAIT_EVENTS;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the views of one capture share: its id and graph, where its host functions' panics go,
/// and what it must release once the capture has ended (the events it recorded, the streams
/// forked into it).
struct CaptureShared {
    id: u64,
    /// Owned by the capture (the driver's), valid until the capture ends.
    graph: ffi::CUgraph,
    origin: ffi::CUstream,
    ctx: ffi::CUcontext,
    route: OnceLock<Arc<HostRoute>>,
    events: Mutex<Vec<usize>>,
    forks: Mutex<Vec<(Arc<StreamPool>, usize)>>,
}

// SAFETY: the raw handles are driver objects usable from any thread; the lists are locked.
unsafe impl Send for CaptureShared {}
// SAFETY: as above.
unsafe impl Sync for CaptureShared {}

impl CaptureShared {
    fn new(
        id: u64,
        graph: ffi::CUgraph,
        origin: ffi::CUstream,
        ctx: ffi::CUcontext,
    ) -> CaptureShared {
        CaptureShared {
            id,
            graph,
            origin,
            ctx,
            route: OnceLock::new(),
            events: Mutex::new(Vec::new()),
            forks: Mutex::new(Vec::new()),
        }
    }

    fn key(&self) -> usize {
        self as *const CaptureShared as usize
    }

    /// Releases what the capture held: destroys its events; returns its forks to their pools if
    /// they are out of capture mode (`ended`), else parks them until they are.
    fn finish(&self, ended: bool) {
        let events = std::mem::take(&mut *lock(&self.events));
        if !events.is_empty() {
            if let Ok(f) = ffi::fns::cuEventDestroy() {
                for ev in events {
                    // SAFETY: created by `record_event` for this capture, destroyed once.
                    let _ = unsafe { f(ev as ffi::CUevent) };
                }
            }
        }
        let forks = std::mem::take(&mut *lock(&self.forks));
        if ended {
            for (pool, raw) in forks {
                pool.give_back(raw);
            }
        } else {
            park(forks);
        }
    }
}

/// Forks of captures that were still going on when their scope ended (captures other code
/// began, or one that could not be ended): returned to their pools once out of capture mode.
static PARKED: Mutex<Vec<(Arc<StreamPool>, usize)>> = Mutex::new(Vec::new());
static PARKED_COUNT: AtomicUsize = AtomicUsize::new(0);

fn park(forks: Vec<(Arc<StreamPool>, usize)>) {
    if forks.is_empty() {
        return;
    }
    let mut parked = lock(&PARKED);
    PARKED_COUNT.fetch_add(forks.len(), Ordering::Release);
    parked.extend(forks);
}

/// Returns parked forks whose capture has ended to their pools (one load when none is parked).
fn sweep_parked() {
    if PARKED_COUNT.load(Ordering::Acquire) == 0 {
        return;
    }
    let mut parked = lock(&PARKED);
    parked.retain(|(pool, raw)| match is_capturing(*raw as ffi::CUstream) {
        Ok(false) => {
            pool.give_back(*raw);
            PARKED_COUNT.fetch_sub(1, Ordering::Release);
            false
        }
        _ => true,
    });
}

/// Makes `waiter`'s later work wait for `source`'s work so far, with this thread's cached event
/// (of `source_ctx`): inside a capture the record is captured and the wait joins `waiter` to it.
fn join_streams(
    waiter: ffi::CUstream,
    source: ffi::CUstream,
    source_ctx: ffi::CUcontext,
) -> Result<()> {
    WAIT_EVENTS.with_event(source_ctx, |event| {
        let record = driver_fn!(cuEventRecord);
        let wait = driver_fn!(cuStreamWaitEvent);
        // SAFETY: the cached event belongs to `source_ctx` and lives while the closure runs; both
        // streams are live for the capture.
        check(unsafe { record(event, source) }, "cuEventRecord")?;
        // SAFETY: as above.
        check(unsafe { wait(waiter, event, 0) }, "cuStreamWaitEvent")
    })
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
        code: crate::error::DriverCode(rc),
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

/// Begins a capture on `stream`, runs `f` with its view, and always ends the capture (an error
/// or a panic of `f` discards the graph). The caller guarantees no other view of the stream is
/// used meanwhile.
fn capture_on(
    stream: Stream<'_>,
    keep: Option<Context>,
    mode: CaptureMode,
    f: impl for<'cap> FnOnce(CaptureStream<'cap>) -> Result<()>,
) -> Result<Graph> {
    let (raw, ctx) = (stream.raw(), stream.context_raw());
    if raw as usize == 2 {
        return Err(per_thread_refused("cuStreamBeginCapture"));
    }
    if crate::installed::contains(raw) {
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
    {
        let _bound = stream.bind_if_default()?;
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
    let shared = CaptureShared::new(id, graph, raw, ctx);
    let result = catch_unwind(AssertUnwindSafe(|| {
        f(CaptureStream::new(raw, ctx, &shared))
    }));
    let (graph, ended) = end_capture(end, raw, id);
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
        Ok(Ok(())) => graph.map(|g| Graph::from_capture(g, ctx, keep, route)),
    }
}

/// Runs `f` with a view of the capture that `stream` is part of; releases what the view made
/// (events at once, forks once the capture has ended).
fn in_capture_on<R>(
    stream: Stream<'_>,
    f: impl for<'cap> FnOnce(CaptureStream<'cap>) -> Result<R>,
) -> Result<R> {
    let (raw, ctx) = (stream.raw(), stream.context_raw());
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
    capture_info(stream.raw()).map(|(status, _)| status)
}

impl<'a> Stream<'a> {
    /// Records what `f` enqueues on this stream into a [`Graph`] (`cuStreamBeginCapture`,
    /// `cuStreamEndCapture`); see [`OwnedStream::capture`], the safe form.
    ///
    /// # Safety
    ///
    /// Until this returns, the stream must be used only through the [`CaptureStream`] view that
    /// `f` receives: no other view or copy of it may be used, by this thread or another (another
    /// stream made to wait on it would join the capture, and a run-once host function launched
    /// on that stream from another thread at that moment could become a graph node). An owner
    /// proves this with `&mut`, which is why [`OwnedStream::capture`] is safe.
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
    /// [`Error::NotCapturing`] if there is no active capture.
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
    /// capturing: enqueueing (kernels, memset and memcpy through [`Enqueue`]), host functions
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

/// A stream seen while it is being captured into a graph: what [`OwnedStream::capture`] and
/// [`Stream::in_capture`] lend their closure, and what a [`CaptureScope`] forks. `Copy`,
/// `Send + Sync` (other threads may enqueue into the capture), and unable to leave the closure
/// or scope it was lent to.
///
/// It offers only what is legal while capturing: enqueueing through [`Enqueue`] (kernels,
/// memset, memcpy), [`launch_host_func`](CaptureStream::launch_host_func) with an `Fn` that runs
/// on every replay, events ([`record_event`](CaptureStream::record_event),
/// [`record_external`](CaptureStream::record_external),
/// [`wait_event`](CaptureStream::wait_event)), [`wait_stream`](CaptureStream::wait_stream) and
/// [`scope`](CaptureStream::scope). There is no `synchronize`, `query` or `completed`: they would
/// invalidate the capture.
#[derive(Clone, Copy)]
pub struct CaptureStream<'cap> {
    raw: ffi::CUstream,
    ctx: ffi::CUcontext,
    shared: &'cap CaptureShared,
    // Invariant: a view of one capture is never taken for one of a longer-lived capture.
    _invariant: PhantomData<fn(&'cap ()) -> &'cap ()>,
}

// SAFETY: the handles are driver objects usable from any thread; the shared state is `Sync`.
unsafe impl Send for CaptureStream<'_> {}
// SAFETY: as above; the view has no interior mutability of its own.
unsafe impl Sync for CaptureStream<'_> {}

impl fmt::Debug for CaptureStream<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaptureStream")
            .field("raw", &self.raw)
            .field("ctx", &self.ctx)
            .field("capture_id", &self.shared.id)
            .finish()
    }
}

impl PartialEq for CaptureStream<'_> {
    fn eq(&self, other: &Self) -> bool {
        (self.raw, self.ctx) == (other.raw, other.ctx)
    }
}
impl Eq for CaptureStream<'_> {}

impl crate::stream::sealed::Sealed for CaptureStream<'_> {}
impl crate::stream::sealed::Sealed for &CaptureStream<'_> {}

impl Enqueue for CaptureStream<'_> {
    #[inline(always)]
    fn enqueue_handle(&self) -> (ffi::CUstream, ffi::CUcontext) {
        (self.raw, self.ctx)
    }
}

impl Enqueue for &CaptureStream<'_> {
    #[inline(always)]
    fn enqueue_handle(&self) -> (ffi::CUstream, ffi::CUcontext) {
        (self.raw, self.ctx)
    }
}

/// An event recorded inside a capture by [`CaptureStream::record_event`]: a point in the
/// captured work that other views of the same capture can wait for
/// ([`CaptureStream::wait_captured`]). It has no `synchronize` or `query` (a captured event
/// stands for no work that runs), and cannot leave the capture; the capture destroys it.
#[derive(Clone, Copy)]
pub struct CapturedEvent<'cap> {
    raw: ffi::CUevent,
    capture: usize,
    _cap: PhantomData<fn(&'cap ()) -> &'cap ()>,
}

// SAFETY: an event handle is a driver object usable from any thread.
unsafe impl Send for CapturedEvent<'_> {}
// SAFETY: as above.
unsafe impl Sync for CapturedEvent<'_> {}

impl fmt::Debug for CapturedEvent<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CapturedEvent")
            .field("raw", &self.raw)
            .finish()
    }
}

impl CapturedEvent<'_> {
    /// The raw handle.
    pub fn raw(&self) -> ffi::CUevent {
        self.raw
    }
}

fn other_capture(call: &'static str) -> Error {
    Error::Refused {
        call,
        reason: "the event or stream belongs to another capture; joining two captures is \
                 invalid",
    }
}

impl<'cap> CaptureStream<'cap> {
    fn new(raw: ffi::CUstream, ctx: ffi::CUcontext, shared: &'cap CaptureShared) -> Self {
        CaptureStream {
            raw,
            ctx,
            shared,
            _invariant: PhantomData,
        }
    }

    /// The raw handle, for enqueueing with raw driver calls (which the capture records).
    pub fn raw(self) -> ffi::CUstream {
        self.raw
    }

    /// The raw handle of the stream's context.
    pub fn context_raw(self) -> ffi::CUcontext {
        self.ctx
    }

    /// The capture's id (unique in the process), as [`CaptureStatus::Active`] reports it.
    pub fn capture_id(self) -> u64 {
        self.shared.id
    }

    /// The capture's status now (`cuStreamGetCaptureInfo`): active, or invalidated by a
    /// prohibited call.
    pub fn status(self) -> Result<CaptureStatus> {
        capture_info(self.raw).map(|(status, _)| status)
    }

    /// Adds a host function node: `f` runs on a driver thread on every replay of the graph, once
    /// the work captured before it has completed; work captured after it waits for it to return.
    /// `f` must not call CUDA.
    ///
    /// `f` is owned by a driver user object that the graph holds, and every executable graph made
    /// from it (`cuUserObjectCreate`, `cuGraphRetainUserObject`), so it lives exactly as long as
    /// something can still run it, even when a [`GraphExec`](crate::GraphExec) is dropped while a
    /// launch is in flight; it is dropped on a driver thread. A panic in `f` is caught and
    /// reported as [`Error::HostFnPanicked`] on the stream the graph was last launched on
    /// (before any launch, or in a capture other code began, on the captured stream).
    pub fn launch_host_func<F>(self, f: F) -> Result<()>
    where
        F: Fn() + Send + Sync + 'static,
    {
        let shared = self.shared;
        let route = shared
            .route
            .get_or_init(|| HostRoute::new(shared.origin, shared.ctx));
        enqueue_host_node((self.raw, self.ctx), shared.graph, route, f)
    }

    /// Makes the capture's graph own `value` for as long as it, or any graph or executable graph
    /// made from it, exists (a driver user object: `cuUserObjectCreate`,
    /// `cuGraphRetainUserObject`); `value` is then dropped on a driver thread, inside the
    /// host-function rule (what it owns of this crate is destroyed later on an ordinary thread).
    /// On an error the graph holds nothing new, and `value` is dropped before this returns, in
    /// the same way (a last owner's destroy waits for the next drain, see
    /// [`drain_deferred`](crate::drain_deferred)).
    ///
    /// This is how what captured work uses by address or handle outlives the capture: an
    /// `Arc<Module>` whose kernels were launched here, a host buffer of pinned memory that a
    /// captured copy reads, an `Arc` of a [`DeviceBuffer`](crate::DeviceBuffer) (for a plain
    /// buffer, [`DeviceBuffer::keep_alive_in`](crate::DeviceBuffer::keep_alive_in) shares its
    /// allocation with the graph instead). It meets the "for every launch of a graph" part of
    /// the `# Safety` contracts of [`Function::launch`](crate::Function::launch) and the raw
    /// memory functions for that value.
    ///
    /// ```no_run
    /// use std::sync::Arc;
    /// use cuda_stream::{CaptureMode, Context, DeviceBuffer, LaunchConfig, Module, kernel_args};
    ///
    /// # const PTX: &str = "";
    /// let ctx = Context::primary(0)?;
    /// let mut stream = ctx.new_stream()?;
    /// let module = Arc::new(Module::from_ptx(&ctx, PTX)?);
    /// let x = DeviceBuffer::<f32>::zeroed(&ctx, &stream, 1024)?;
    /// let graph = stream.capture(CaptureMode::ThreadLocal, |cap| {
    ///     let double = module.function("double")?;
    ///     cap.keep_alive(module.clone())?; // the module stays loaded for every replay
    ///     x.keep_alive_in(&cap)?; // and `x` allocated
    ///     // SAFETY: `double` takes (pointer, u32) and touches x[..1024]; both are kept above.
    ///     unsafe {
    ///         double.launch(&cap, LaunchConfig::for_elements(1024, 256),
    ///                       &kernel_args![x.device_ptr(), 1024u32])
    ///     }
    /// })?;
    /// drop((module, x));
    /// graph.instantiate()?.launch(&stream)?;
    /// # Ok::<(), cuda_stream::Error>(())
    /// ```
    pub fn keep_alive<V: Send + Sync + 'static>(self, value: V) -> Result<()> {
        keep_alive(self.ctx, self.shared.graph, value)
    }

    /// Records a new event here (`cuEventCreate`, `cuEventRecord`): a point in the captured work
    /// that other views of this capture can wait for with
    /// [`wait_captured`](CaptureStream::wait_captured). The capture destroys it when it ends.
    pub fn record_event(self) -> Result<CapturedEvent<'cap>> {
        let create = driver_fn!(cuEventCreate);
        let record = driver_fn!(cuEventRecord);
        let mut ev = ptr::null_mut();
        {
            let _bound = bind(self.ctx)?;
            let flags = ffi::CUevent_flags::CU_EVENT_DISABLE_TIMING.0;
            // SAFETY: `ev` is a valid out-pointer; the stream's context is current.
            check(unsafe { create(&mut ev, flags) }, "cuEventCreate")?;
        }
        // Destroyed when the capture has ended, whatever happens next.
        lock(&self.shared.events).push(ev as usize);
        // SAFETY: both handles are live and of the same context.
        check(unsafe { record(ev, self.raw) }, "cuEventRecord")?;
        Ok(CapturedEvent {
            raw: ev,
            capture: self.shared.key(),
            _cap: PhantomData,
        })
    }

    /// Adds an event record node for `event`, made outside the capture
    /// (`cuEventRecordWithFlags` with `CU_EVENT_RECORD_EXTERNAL`): every replay records it, so
    /// other streams and the host can wait for that point of each replay. The event must belong
    /// to the stream's context. The graph keeps a clone of the `Arc` (in a user object, as for
    /// host functions), so the handle its node records stays this event's for as long as a graph
    /// or executable graph can replay the node.
    pub fn record_external(self, event: &Arc<Event>) -> Result<()> {
        if event.context_raw() != self.ctx {
            return Err(Error::ContextMismatch { what: "the event" });
        }
        let f = driver_fn!(cuEventRecordWithFlags);
        keep_alive(self.ctx, self.shared.graph, event.clone())?;
        let flags = ffi::CUevent_record_flags::CU_EVENT_RECORD_EXTERNAL.0;
        // SAFETY: both handles are live; the flag is valid during a capture.
        let rc = unsafe { f(event.raw(), self.raw, flags) };
        check(rc, "cuEventRecordWithFlags")?;
        event.mark_recorded();
        Ok(())
    }

    /// Adds an event wait node for `event`, made outside the capture (`cuStreamWaitEvent` with
    /// `CU_EVENT_WAIT_EXTERNAL`): on every replay, the work captured here from now on waits for
    /// the event's latest record at that time. The event may belong to another context. The
    /// graph keeps a clone of the `Arc`, as [`record_external`](CaptureStream::record_external)
    /// does.
    pub fn wait_event(self, event: &Arc<Event>) -> Result<()> {
        let f = driver_fn!(cuStreamWaitEvent);
        keep_alive(self.ctx, self.shared.graph, event.clone())?;
        let flags = ffi::CUevent_wait_flags::CU_EVENT_WAIT_EXTERNAL.0;
        // SAFETY: both handles are live.
        let rc = unsafe { f(self.raw, event.raw(), flags) };
        check(rc, "cuStreamWaitEvent")
    }

    /// Makes the work captured here from now on wait for the captured work `event` marks
    /// (`cuStreamWaitEvent`). The event must come from this capture ([`Error::Refused`]
    /// otherwise).
    pub fn wait_captured(self, event: CapturedEvent<'_>) -> Result<()> {
        if event.capture != self.shared.key() {
            return Err(other_capture("cuStreamWaitEvent"));
        }
        let f = driver_fn!(cuStreamWaitEvent);
        // SAFETY: both handles are live (the capture destroys its events after it ends).
        check(unsafe { f(self.raw, event.raw, 0) }, "cuStreamWaitEvent")
    }

    /// Makes the work captured here from now on wait for the work captured on `other` so far (a
    /// view of the same capture, such as a fork): one record of a cached event and one wait.
    pub fn wait_stream(self, other: CaptureStream<'_>) -> Result<()> {
        if other.shared.key() != self.shared.key() {
            return Err(other_capture("cuStreamWaitEvent"));
        }
        if other.raw == self.raw {
            return Ok(());
        }
        join_streams(self.raw, other.raw, other.ctx)
    }

    /// Runs `f` with a scope whose [`CaptureScope::fork`]s join this capture: each fork is a
    /// stream (from the context's shared pool) whose captured work starts after the work
    /// captured here so far and may run concurrently with it. When the scope ends (normally, by
    /// an error or by a panic) this view waits for every fork, so the capture can end joined:
    /// `CUDA_ERROR_STREAM_CAPTURE_UNJOINED` cannot come from a scope. Forks go back to the pool
    /// once the capture has ended.
    pub fn scope<R>(
        self,
        f: impl for<'scope> FnOnce(&'scope CaptureScope<'scope, 'cap>) -> Result<R>,
    ) -> Result<R> {
        let priority = Stream::from_parts(self.raw, self.ctx).priority()?;
        let pool = crate::scope::shared_pool(self.ctx, priority)?;
        let scope = CaptureScope {
            parent: self,
            pool,
            forks: Mutex::new(Vec::new()),
            _scope: PhantomData,
            _cap: PhantomData,
        };
        // Join even if `f` panics, then let the panic continue.
        let result = catch_unwind(AssertUnwindSafe(|| f(&scope)));
        let joined = scope.join();
        let value = match result {
            Ok(r) => r?,
            Err(payload) => resume_unwind(payload),
        };
        joined?;
        Ok(value)
    }
}

/// A fork/join scope inside a capture; see [`CaptureStream::scope`].
pub struct CaptureScope<'scope, 'cap: 'scope> {
    parent: CaptureStream<'cap>,
    pool: Arc<StreamPool>,
    forks: Mutex<Vec<usize>>,
    // Invariant in 'scope, as in `std::thread::Scope`, so forks cannot escape.
    _scope: PhantomData<&'scope mut &'scope ()>,
    _cap: PhantomData<&'cap mut &'cap ()>,
}

impl fmt::Debug for CaptureScope<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaptureScope")
            .field("parent", &self.parent)
            .field("forks", &lock(&self.forks).len())
            .finish()
    }
}

impl<'scope, 'cap> CaptureScope<'scope, 'cap> {
    /// A stream that joins the capture: its captured work starts after the parent's work
    /// captured so far. The parent waits for it when the scope ends. The view cannot leave the
    /// scope.
    pub fn fork(&'scope self) -> Result<CaptureStream<'scope>> {
        let lease = self.pool.acquire()?;
        let raw = lease.as_stream().raw();
        // The capture returns the stream to the pool itself, after the capture has ended.
        std::mem::forget(lease);
        if let Err(e) = join_streams(raw, self.parent.raw, self.parent.ctx) {
            // The stream did not join the capture: it can go back at once.
            self.pool.give_back(raw as usize);
            return Err(e);
        }
        lock(&self.forks).push(raw as usize);
        Ok(CaptureStream::new(raw, self.parent.ctx, self.parent.shared))
    }

    /// The parent view.
    pub fn parent(&self) -> CaptureStream<'cap> {
        self.parent
    }

    /// Makes the parent wait for every fork and hands the forks to the capture, which returns
    /// them to the pool once it has ended. Returns the first error; every fork is joined
    /// regardless.
    fn join(&self) -> Result<()> {
        let forks = std::mem::take(&mut *lock(&self.forks));
        let mut first = Ok(());
        for raw in forks {
            let joined = join_streams(self.parent.raw, raw as ffi::CUstream, self.parent.ctx);
            if first.is_ok() {
                first = joined;
            }
            lock(&self.parent.shared.forks).push((self.pool.clone(), raw));
        }
        first
    }
}

/// Sets the calling thread's capture interaction mode until the guard drops
/// (`cuThreadExchangeStreamCaptureMode`), which then restores the previous one. For example,
/// [`CaptureMode::Relaxed`] lets this thread make calls that a global-mode capture elsewhere
/// would otherwise refuse (and be invalidated by); the caller vouches that they do not break it.
/// Guards nest; drop them in reverse order.
pub fn exchange_capture_mode(mode: CaptureMode) -> Result<CaptureModeGuard> {
    let previous = exchange(mode.raw())?;
    Ok(CaptureModeGuard {
        previous,
        _not_send: PhantomData,
    })
}

fn exchange(mode: ffi::CUstreamCaptureMode) -> Result<ffi::CUstreamCaptureMode> {
    let f = driver_fn!(cuThreadExchangeStreamCaptureMode);
    let mut m = mode;
    // SAFETY: `m` is a valid in/out pointer.
    check(unsafe { f(&mut m) }, "cuThreadExchangeStreamCaptureMode")?;
    Ok(m)
}

/// Keeps a capture interaction mode on this thread; see [`exchange_capture_mode`]. Not `Send`:
/// the mode belongs to the thread that set it.
#[must_use = "the mode is set only while the guard lives"]
pub struct CaptureModeGuard {
    previous: ffi::CUstreamCaptureMode,
    _not_send: PhantomData<*const ()>,
}

impl fmt::Debug for CaptureModeGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaptureModeGuard")
            .field("previous", &self.previous())
            .finish()
    }
}

impl CaptureModeGuard {
    /// The mode the thread had before, which the guard restores (`None` for a value this crate
    /// does not know).
    pub fn previous(&self) -> Option<CaptureMode> {
        CaptureMode::from_raw(self.previous)
    }
}

impl Drop for CaptureModeGuard {
    fn drop(&mut self) {
        let _ = exchange(self.previous);
    }
}
