//! The view a capture lends: [`CaptureStream`] (what is legal while capturing), the events it
//! records ([`CapturedEvent`]), its forks ([`CaptureScope`]), and what the views of one capture
//! share and release once it has ended.

use std::fmt;
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use crate::base::capture_mode::CaptureStatus;
use crate::base::error::{Error, Result, check, driver_fn};
use crate::driver::capture_query::{capture_info, is_capturing};
use crate::driver::context::bind;
use crate::driver::event::Event;
use crate::ffi;
use crate::graph::user_objects::{HostRoute, enqueue_host_node, keep_alive};
use crate::stream::pool::StreamPool;
use crate::stream::view::{AsStream, Enqueue, Stream};
use crate::stream::wait_event_cache::WAIT_EVENTS;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the views of one capture share: its id and graph, where its host functions' panics go,
/// and what it must release once the capture has ended (the events it recorded, the streams
/// forked into it).
pub(super) struct CaptureShared {
    pub(super) id: u64,
    /// Owned by the capture (the driver's), valid until the capture ends.
    pub(super) graph: ffi::CUgraph,
    pub(super) origin: ffi::CUstream,
    pub(super) ctx: ffi::CUcontext,
    pub(super) route: OnceLock<Arc<HostRoute>>,
    pub(super) events: Mutex<Vec<usize>>,
    pub(super) forks: Mutex<Vec<(Arc<StreamPool>, usize)>>,
}

// SAFETY: the raw handles are driver objects usable from any thread; the lists are locked.
unsafe impl Send for CaptureShared {}
// SAFETY: as above.
unsafe impl Sync for CaptureShared {}

impl CaptureShared {
    pub(super) fn new(
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
    pub(super) fn finish(&self, ended: bool) {
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
pub(super) fn sweep_parked() {
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

/// A stream seen while it is being captured into a graph: what [`OwnedStream::capture`](crate::OwnedStream::capture) and
/// [`Stream::in_capture`] lend their closure, and what a [`CaptureScope`] forks. `Copy`,
/// `Send + Sync` (scoped threads may each enqueue into the capture), and unable to leave the
/// closure or scope it was lent to. The driver does not synchronise graph objects, so the graph
/// calls behind [`launch_host_func`](CaptureStream::launch_host_func),
/// [`keep_alive`](CaptureStream::keep_alive), [`record_external`](CaptureStream::record_external)
/// and [`wait_event`](CaptureStream::wait_event) (each gives the capture's graph a user object,
/// as do fills and collectives that tie buffers to it) are serialised per graph by this crate;
/// what the views enqueue on their streams is stream capture, which the driver orders itself.
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

impl crate::stream::view::sealed::Sealed for CaptureStream<'_> {}
impl crate::stream::view::sealed::Sealed for &CaptureStream<'_> {}

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
    pub(super) fn new(
        raw: ffi::CUstream,
        ctx: ffi::CUcontext,
        shared: &'cap CaptureShared,
    ) -> Self {
        CaptureStream {
            raw,
            ctx,
            shared,
            _invariant: PhantomData,
        }
    }

    /// The raw handle, for enqueueing with raw driver calls (which the capture records). As
    /// [`Stream::raw`] says, the stream is lent to code this crate cannot see: after the
    /// capture, buffers used on it mark each use with an event.
    pub fn raw(self) -> ffi::CUstream {
        crate::stream::known_streams::lend(self.raw);
        self.raw
    }

    /// The raw handle, for this crate's own calls.
    #[inline(always)]
    pub(crate) fn handle(self) -> ffi::CUstream {
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
        let pool = crate::stream::scope::shared_pool(self.ctx, priority)?;
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
        let lease = loop {
            let lease = self.pool.acquire()?;
            // Never a stream a leaked current-stream guard names: `current_stream` would lend a
            // plain view of it while it is captured. The pool holds such a stream back when it
            // is given back, so this never repeats; dropping the lease would hold it back too.
            if !crate::stream::guarded_streams::contains(lease.as_stream().handle()) {
                break lease;
            }
        };
        let raw = lease.as_stream().handle();
        // Buffers used on the stream under an earlier lease may have lazy marks on it: settled
        // by one event now, before the stream joins the capture (see the ordering model in
        // `memory::use_tracking`).
        crate::stream::known_streams::settle(raw)?;
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

/// Probes of this module's locks (see `base::lock_probe`).
#[cfg(feature = "test-hooks")]
pub(crate) fn report_locks(out: &mut Vec<String>) {
    crate::base::lock_probe::probe(out, "capture_view::PARKED", &PARKED);
}
