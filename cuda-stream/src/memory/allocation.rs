//! One device allocation and its free, which never waits for the device:
//!
//! - **stream-ordered** (a device with memory pools, CUDA 11.2+): allocated from a pool on a
//!   stream (`cuMemAllocFromPoolAsync`) and freed on a stream after every recorded use
//!   (`cuMemFreeAsync`): on the stream of the last use where that needs no event, else on the
//!   context's service stream behind waits for each use. The host never waits. A free that
//!   would be made on a private stream keeps the block there instead, for the next allocation
//!   of its size on that stream (`stream::block_cache`).
//! - **plain** (no pools): `cuMemAlloc`, and a free deferred until events recorded after every
//!   use have completed: polled (`cuEventQuery`) at later allocations and frees, then
//!   `cuMemFree`. Never a context-wide synchronisation, except for a use whose stream ended
//!   inside a host function, which nothing else marks.
//!
//! Inside a host function (or a user object's destructor) no CUDA call is made: the free is
//! queued for an ordinary thread, as streams and events are. A free that cannot be ordered yet
//! (a use's stream joined a capture begun elsewhere: see the ordering model in
//! `memory::use_tracking`) is queued too, and made at a later allocation or free.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::base::error::{Error, Result, check, driver_fn};
use crate::driver::context::{Context, bind};
use crate::driver::deferred_destroy::{self, Deferred, in_host_fn, must_defer_free};
use crate::driver::device::Device;
use crate::ffi;
use crate::graph::capture::begun_here;
use crate::memory::alloc_calls::{
    all_done, alloc_from_pool, free_plain_now, on_private, out_of_memory, refuse_capturing,
    synchronize_events,
};
use crate::memory::pool::{MemPool, PoolAccess, default_pool_raw, granted, pools_supported};
use crate::memory::use_tracking::{
    Access, Uses, synchronize_context_outside_captures, waits_for_a_capture,
};
use crate::stream::block_cache;
use crate::stream::known_streams;
use crate::stream::view::bind_if_special;

/// Where the memory came from, and so how it is freed.
pub(crate) enum Origin {
    /// A pool: `None` for the device's default pool (not held open), or the caller's pool; and
    /// the bytes allocated (a block a free may keep for reuse: `stream::block_cache`).
    Pool(Option<MemPool>, usize),
    /// `cuMemAlloc`.
    Plain,
    /// Handed over by the caller (`from_raw`): `cuMemAlloc` memory, freed like plain memory.
    Adopted,
    /// Managed memory (`cuMemAllocManaged`), freed like plain memory; never in a graph (the host
    /// reads it while no recorded use is pending, which a replay would break).
    Managed,
    /// Another library's memory, borrowed ([`BorrowedBuffer`](crate::BorrowedBuffer)): never
    /// freed here; at the end of the borrow `owner` (the owner's stream) waits for every use.
    Borrowed { owner: usize },
    /// Memory that another object owns for as long as `owner` lives (a module's global
    /// variable, owned by the loaded module): never freed here. The allocation holds `owner`,
    /// so a graph that holds the allocation keeps the owner (the module loaded) for its replays;
    /// the last drop waits on the host for every recorded use before letting go of it.
    Static {
        /// What keeps the memory (held, never read).
        _owner: Arc<dyn std::any::Any + Send + Sync>,
    },
    /// A graph memory node (`cuMemAllocAsync` in capture `capture` on `stream`): used only
    /// inside that capture, and freed by a free node on `stream` after every use.
    Graph { stream: usize, capture: u64 },
}

/// How work recorded into a capture treats an allocation it uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InCapture {
    /// The capture's graph takes a reference to it (the host waited for conflicting uses
    /// elsewhere first).
    Tie,
    /// A graph allocation of this capture: its uses are tracked inside the capture, with
    /// captured events, like uses outside one.
    Track,
}

/// One allocation (0 for none: a zero-byte buffer) of a context, with the uses recorded on it;
/// shared by its buffer and the graphs that work on it was captured into. The last owner frees
/// it.
pub(crate) struct Allocation {
    pub(crate) ptr: ffi::CUdeviceptr,
    /// The uses, which hold the memory's context.
    pub(crate) uses: Uses,
    pub(crate) origin: Origin,
}

impl Allocation {
    /// The memory's context.
    #[inline]
    pub(crate) fn ctx(&self) -> &Context {
        self.uses.ctx()
    }

    /// The memory's context's handle, read from the allocation itself.
    #[inline]
    pub(crate) fn ctx_raw(&self) -> ffi::CUcontext {
        self.uses.ctx_raw()
    }

    /// `bytes` (> 0) bytes in `ctx` for work on `stream` (of `ctx`): from `pool` (or the device's
    /// default pool) on `stream` where the device has pools, recorded as a write on `stream` so
    /// that use on any other stream waits for the allocation; else `cuMemAlloc` (with no use
    /// recorded: the memory is ready when the call returns). Pool memory is taken from the
    /// blocks kept on `stream` where one has the size (no driver call: see
    /// `stream::block_cache`); an allocation the driver refuses for lack of memory is made again
    /// once every block kept in the context is freed. With `refuse`, an allocation that asks the
    /// driver is refused on a capturing stream (`Error::Capturing { op: refuse }`): there it
    /// would be a graph memory node. A kept block needs no such check (see `stream::block_cache`).
    pub(crate) fn new(
        ctx: &Context,
        stream: ffi::CUstream,
        bytes: usize,
        pool: Option<&MemPool>,
        refuse: Option<&'static str>,
    ) -> Result<Arc<Allocation>> {
        // Frees that host functions queued, and plain frees whose uses are done, are made
        // before more memory is taken.
        deferred_destroy::drain_if_pending();
        poll_pending_frees();
        if let Some(p) = pool {
            if p.context().raw() != ctx.raw() {
                return Err(Error::ContextMismatch { what: "the pool" });
            }
        } else if !pools_supported(ctx) {
            refuse_capturing(ctx, stream, refuse)?;
            return Allocation::plain(ctx, bytes).map(Arc::new);
        }
        let raw_pool = match pool {
            Some(p) => p.raw(),
            None => default_pool_raw(ctx.device())?,
        };
        // Built in place in its `Arc` (the value is large: each move is a copy).
        let origin = Origin::Pool(pool.cloned(), bytes);
        if let Some(end) = known_streams::end_for_allocation(stream) {
            if let Some(ptr) = on_private(ctx, &end, bytes, raw_pool, refuse)? {
                // The allocation is the memory's first use: a lazy write on `stream`.
                return Ok(Arc::new(Allocation {
                    ptr,
                    uses: Uses::written_on_private(ctx, stream, end),
                    origin,
                }));
            }
            // The epoch ended since the lookup: the stream is treated as any other.
        }
        refuse_capturing(ctx, stream, refuse)?;
        let ptr = match alloc_from_pool(ctx, stream, bytes, raw_pool) {
            Err(e)
                if out_of_memory(&e)
                    && known_streams::free_kept_blocks_before(ctx.raw(), stream) > 0 =>
            {
                // The kept blocks are free again, in their streams' order, which `stream` now
                // follows: once more.
                alloc_from_pool(ctx, stream, bytes, raw_pool)?
            }
            r => r?,
        };
        // The allocation is the memory's first use: a write on `stream`, marked by an event.
        let (uses, made) = Uses::written_on_unknown(ctx, stream);
        let alloc = Arc::new(Allocation { ptr, uses, origin });
        // Allocated, but the use could not be marked: the drop frees it after the use.
        made.map(|()| alloc)
    }

    /// `bytes` (> 0) bytes in `ctx` with no stream: on the context's service stream where the
    /// device has pools (the first use on another stream waits for it), else `cuMemAlloc`.
    pub(crate) fn new_unordered(ctx: &Context, bytes: usize) -> Result<Arc<Allocation>> {
        if pools_supported(ctx) {
            let service = ctx.service_stream()?;
            Allocation::new(ctx, service, bytes, None, None)
        } else {
            deferred_destroy::drain_if_pending();
            poll_pending_frees();
            Allocation::plain(ctx, bytes).map(Arc::new)
        }
    }

    fn plain(ctx: &Context, bytes: usize) -> Result<Allocation> {
        let f = driver_fn!(cuMemAlloc);
        let _bound = bind(ctx.raw())?;
        let mut ptr = 0;
        // SAFETY: `ptr` is a valid out-pointer; the context is current.
        check(unsafe { f(&mut ptr, bytes) }, "cuMemAlloc")?;
        Ok(Allocation {
            ptr,
            uses: Uses::new(ctx),
            origin: Origin::Plain,
        })
    }

    /// Memory the caller hands over (`cuMemAlloc` memory of `ctx`, or 0), freed like plain
    /// memory.
    pub(crate) fn adopt(ctx: &Context, ptr: ffi::CUdeviceptr) -> Allocation {
        Allocation {
            ptr,
            uses: Uses::new(ctx),
            origin: Origin::Adopted,
        }
    }

    /// Memory of `ctx` at `ptr` that `owner` keeps (see [`Origin::Static`]), with no use yet.
    pub(crate) fn owned_by(
        ctx: &Context,
        ptr: ffi::CUdeviceptr,
        owner: Arc<dyn std::any::Any + Send + Sync>,
    ) -> Allocation {
        Allocation {
            ptr,
            uses: Uses::new(ctx),
            origin: Origin::Static { _owner: owner },
        }
    }

    /// Managed memory of `ctx` (`cuMemAllocManaged` at `ptr`), with no use yet.
    pub(crate) fn managed(ctx: &Context, ptr: ffi::CUdeviceptr) -> Allocation {
        Allocation {
            ptr,
            uses: Uses::new(ctx),
            origin: Origin::Managed,
        }
    }

    /// The pool the memory came from, if any (the default pool opened on demand).
    pub(crate) fn pool(&self) -> Result<Option<MemPool>> {
        match &self.origin {
            Origin::Pool(Some(p), _) => Ok(Some(p.clone())),
            Origin::Pool(None, _) => MemPool::default_for(self.ctx()).map(Some),
            Origin::Plain
            | Origin::Adopted
            | Origin::Managed
            | Origin::Borrowed { .. }
            | Origin::Static { .. } => Ok(None),
            Origin::Graph { .. } => MemPool::default_for(self.ctx()).map(Some),
        }
    }

    /// The raw pool the memory came from, if any, without making a [`MemPool`] value for a
    /// default pool.
    pub(crate) fn pool_raw(&self) -> Result<Option<ffi::CUmemoryPool>> {
        match &self.origin {
            Origin::Pool(Some(p), _) => Ok(Some(p.raw())),
            Origin::Pool(None, _) | Origin::Graph { .. } => {
                default_pool_raw(self.ctx().device()).map(Some)
            }
            Origin::Plain
            | Origin::Adopted
            | Origin::Managed
            | Origin::Borrowed { .. }
            | Origin::Static { .. } => Ok(None),
        }
    }

    /// What work of `device` (another device than the memory's) may do with this memory: what
    /// this process granted `device` on the memory's pool ([`MemPool::set_access`]). Memory
    /// from no pool (`cuMemAlloc`, adopted or borrowed) is [`PoolAccess::None`]: context peer
    /// access would map it, but the driver cannot be asked whether it is enabled now.
    pub(crate) fn peer_access(&self, device: Device) -> Result<PoolAccess> {
        Ok(match self.pool_raw()? {
            Some(pool) => granted(pool, device),
            None => PoolAccess::None,
        })
    }

    /// Another library's memory (`owner`, of `ctx`) at `ptr`, whose earlier work on `owner`
    /// the first use elsewhere waits for.
    pub(crate) fn borrow(
        ctx: &Context,
        ptr: ffi::CUdeviceptr,
        owner: ffi::CUstream,
    ) -> Result<Allocation> {
        let alloc = Allocation {
            ptr,
            uses: Uses::new(ctx),
            origin: Origin::Borrowed {
                owner: owner as usize,
            },
        };
        if ptr != 0 {
            // The owner's work so far counts as a write on its stream.
            alloc.uses.around(owner, Access::Write, || Ok(()))?;
        }
        Ok(alloc)
    }

    /// `bytes` (> 0) bytes as a graph memory node: `cuMemAllocAsync` on `stream`, which is being
    /// captured in capture `capture`. Every use is marked by an event recorded in the capture.
    pub(crate) fn in_graph(
        ctx: &Context,
        stream: ffi::CUstream,
        capture: u64,
        bytes: usize,
    ) -> Result<Allocation> {
        // A device without memory pools has no graph memory nodes either: the driver's
        // `CUDA_ERROR_NOT_SUPPORTED` says so.
        let uses = Uses::new_eager(ctx);
        let mut ptr = 0;
        let made = uses.around(stream, Access::Write, || {
            let f = driver_fn!(cuMemAllocAsync);
            let _bound = bind_if_special(stream, ctx.raw())?;
            // SAFETY: `ptr` is a valid out-pointer; the stream is live (the capture's view) and
            // of `ctx`; in a capture the call adds an allocation node.
            check(unsafe { f(&mut ptr, bytes, stream) }, "cuMemAllocAsync")
        });
        let alloc = Allocation {
            ptr,
            uses,
            origin: Origin::Graph {
                stream: stream as usize,
                capture,
            },
        };
        // Allocated, but the use could not be marked: the drop adds the free node (or, with a
        // use nothing marks, breaks the capture, which then has no graph).
        made?;
        Ok(alloc)
    }

    /// How work recorded into capture `capture` on `stream` (of context `stream_ctx`) treats
    /// this allocation (`access`):
    /// borrowed memory is refused (the graph could outlive the borrow), a graph allocation of
    /// another capture too, and so is any other memory in a capture this crate did not begin
    /// (its graphs are launched where no hook orders them against the memory's other uses)
    /// unless the caller only ties it (`keep_only`: `keep_alive_in`, for raw work whose ordering
    /// is that unsafe code's promise); anything else is tied to the graph, after the host waited
    /// for its conflicting uses on other streams.
    pub(crate) fn in_capture(
        &self,
        stream: ffi::CUstream,
        stream_ctx: ffi::CUcontext,
        capture: u64,
        access: Access,
        keep_only: bool,
    ) -> Result<InCapture> {
        match self.origin {
            Origin::Borrowed { .. } => Err(Error::Refused {
                call: "cuUserObjectCreate",
                reason: "a borrowed buffer cannot be held by a graph, which could outlive the \
                         borrow: capture work on it through device_ptr in unsafe code",
            }),
            Origin::Managed => Err(Error::Refused {
                call: "cuStreamGetCaptureInfo",
                reason: "managed memory is not used in graphs: the host reads it once its \
                         recorded uses are done, which a replay would break",
            }),
            Origin::Graph { capture: c, .. } if c == capture => Ok(InCapture::Track),
            Origin::Graph { .. } => Err(graph_memory_elsewhere()),
            _ if !keep_only && !begun_here(capture) => Err(Error::Refused {
                call: "cuStreamGetCaptureInfo",
                reason: "the capture was begun elsewhere (by a framework or raw calls), whose \
                         graphs are launched where this crate cannot order them against the \
                         buffer's other uses: pass device_ptr in unsafe code, and keep the \
                         buffer alive with keep_alive_in",
            }),
            _ => {
                self.uses
                    .settle_for_capture(stream, stream_ctx, capture, access)?;
                Ok(InCapture::Tie)
            }
        }
    }

    /// Refuses a use outside a capture of a graph allocation (its memory exists only while the
    /// graph runs).
    #[inline]
    pub(crate) fn check_outside_capture(&self) -> Result<()> {
        match self.origin {
            Origin::Graph { .. } => Err(graph_memory_elsewhere()),
            _ => Ok(()),
        }
    }

    /// Hands the memory over without freeing it, once every recorded use has completed (the
    /// caller may free it with `cuMemFree`/`cuMemFreeAsync` at once): waits for them on the
    /// host (`cuEventSynchronize` on an event recorded after each). Pool memory is handed over as
    /// it is (free it with `cuMemFreeAsync`). On an error the allocation comes back with every
    /// use still recorded.
    pub(crate) fn into_raw(mut self) -> Result<ffi::CUdeviceptr, Box<(Allocation, Error)>> {
        if let Origin::Static { .. } = self.origin {
            let refused = Error::Refused {
                call: "cuModuleGetGlobal",
                reason: "a module's global variable is the module's memory: it cannot be handed \
                         over",
            };
            return Err(Box::new((self, refused)));
        }
        match self.uses.wait_on_host(synchronize_events) {
            Ok(()) => Ok(std::mem::replace(&mut self.ptr, 0)),
            Err(e) => Err(Box::new((self, e))),
        }
    }

    /// Waits on the host for every recorded use, which are then forgotten (nothing else holds
    /// the allocation: `&mut`); a use nothing marks is covered by the context's completion. On
    /// an error every use stays recorded.
    pub(crate) fn wait_for_uses(&mut self) -> Result<()> {
        self.uses.wait_on_host_or_context(synchronize_events)
    }

    /// The driver call that frees this memory.
    pub(crate) fn free_call(&self) -> &'static str {
        match self.origin {
            Origin::Pool(..) | Origin::Graph { .. } => "cuMemFreeAsync",
            Origin::Plain | Origin::Adopted | Origin::Managed => "cuMemFree",
            Origin::Borrowed { .. } => "cuStreamWaitEvent",
            Origin::Static { .. } => "cuEventSynchronize",
        }
    }

    /// Frees the memory now (in stream order, or deferred), returning the driver's answer. A
    /// free that must wait for a capture begun elsewhere is queued (`Ok`).
    pub(crate) fn free(mut self) -> Result<()> {
        match self.free_ptr(self.ptr) {
            // Dropped with its pointer: the drop queues it.
            Err(e) if waits_for_a_capture(&e) => Ok(()),
            r => {
                self.ptr = 0;
                r
            }
        }
    }

    fn free_ptr(&mut self, ptr: ffi::CUdeviceptr) -> Result<()> {
        if ptr == 0 {
            return Ok(());
        }
        match self.origin {
            Origin::Pool(ref pool, bytes) => self.uses.free_after_uses(
                |ctx| ctx.service_stream(),
                |stream, ctx, blocks| {
                    // Kept on a private stream that waits for every use, if the pool's limit
                    // allows: the next allocation of its size there takes it back.
                    if let Some(b) = blocks {
                        let raw_pool = match pool {
                            Some(p) => p.raw(),
                            None => default_pool_raw(ctx.device())?,
                        };
                        if b.put(ctx, raw_pool, bytes, ptr) {
                            return Ok(());
                        }
                    }
                    let f = driver_fn!(cuMemFreeAsync);
                    let _bound = bind_if_special(stream, ctx.raw())?;
                    // SAFETY: the allocation is ours and freed once; `stream` waits for every
                    // use recorded on it, and no use can be enqueued after this.
                    check(unsafe { f(ptr, stream) }, "cuMemFreeAsync")
                },
            ),
            Origin::Graph { stream, .. } => self.uses.free_after_uses(
                |_| Ok(stream as ffi::CUstream),
                |stream, ctx, _| {
                    let f = driver_fn!(cuMemFreeAsync);
                    let _bound = bind_if_special(stream, ctx.raw())?;
                    // SAFETY: the graph allocation is ours and freed once, in its capture (the
                    // buffer cannot leave it), after every use recorded there.
                    check(unsafe { f(ptr, stream) }, "cuMemFreeAsync")
                },
            ),
            // The owner's stream waits for every use; the memory stays the owner's.
            Origin::Borrowed { owner } => self.uses.hand_back(owner as ffi::CUstream),
            // Every use done before the owner may go (a module unloads after its own context's
            // work only; a use on another context's stream, a peer copy, is waited for here).
            Origin::Static { .. } => self.uses.wait_on_host(synchronize_events),
            Origin::Plain | Origin::Adopted | Origin::Managed => {
                let events = match self.uses.take_events() {
                    Ok(events) => events,
                    // A use's stream joined a capture begun elsewhere: later (the uses stay).
                    Err(e) if waits_for_a_capture(&e) => return Err(e),
                    // No event marks a use (one could not be recorded, or its stream ended
                    // inside a host function): only the context's completion covers it. The
                    // memory is freed after it, and the error that forced the wait reported.
                    Err(e) => return free_plain_after_context(self.ctx(), ptr).and(Err(e)),
                };
                let events = events
                    .into_iter()
                    .map(|e| (self.ctx().clone(), e))
                    .collect();
                free_when_done(self.ctx(), ptr as usize, events, |ctx, ptr| {
                    free_plain_now(ctx, ptr as ffi::CUdeviceptr)
                })
            }
        }
    }
}

#[cold]
fn graph_memory_elsewhere() -> Error {
    Error::Refused {
        call: "cuStreamGetCaptureInfo",
        reason: "a graph buffer is used only on the streams of the capture that allocated it",
    }
}

impl Allocation {
    /// Whether a free made now is queued until the capture this thread runs has ended (see
    /// [`deferred_destroy::in_own_capture`]). Never for graph memory, which its capture frees,
    /// nor for borrowed memory, whose hand-back (waits of the owner's stream, no free) is due
    /// while the owner's stream lives.
    pub(crate) fn deferred_in_capture(&self) -> bool {
        !matches!(self.origin, Origin::Graph { .. } | Origin::Borrowed { .. })
            && deferred_destroy::in_own_capture()
    }

    /// Moves the allocation out of `self`, which is left empty (it frees nothing).
    fn take(&mut self) -> Allocation {
        let ctx = self.ctx().clone();
        Allocation {
            ptr: std::mem::replace(&mut self.ptr, 0),
            uses: std::mem::replace(&mut self.uses, Uses::new(&ctx)),
            origin: std::mem::replace(&mut self.origin, Origin::Plain),
        }
    }
}

impl Drop for Allocation {
    /// Frees the memory in stream order after its uses (see the module docs); inside a host
    /// function or a user object's destructor (the last graph holding it going away), later, on
    /// an ordinary thread; while a use's stream has joined a capture begun elsewhere, at a later
    /// allocation or free. An error leaves the memory allocated: something might still use it.
    fn drop(&mut self) {
        if self.ptr == 0 {
            return;
        }
        // Inside a host function, or a capture this thread began (where the free's calls would
        // invalidate it): queued, made on an ordinary thread or once the capture has ended.
        if in_host_fn() || self.deferred_in_capture() {
            let queued = Box::into_raw(Box::new(self.take())) as usize;
            deferred_destroy::defer([Deferred::new(queued, free_queued)]);
            return;
        }
        match self.free_ptr(self.ptr) {
            // Graph memory is freed in its capture or not at all: never retried after it.
            Err(e) if waits_for_a_capture(&e) && !matches!(self.origin, Origin::Graph { .. }) => {
                // Not freed, every use kept: queued whole, retried at the next poll.
                let mut blocked = BLOCKED.lock().unwrap_or_else(|e| e.into_inner());
                blocked.push(self.take());
                PENDING_COUNT.fetch_add(1, Ordering::Release);
            }
            _ => self.ptr = 0,
        }
    }
}

/// Frees that wait for a capture begun elsewhere to end (a use's stream joined it), retried by
/// [`poll_pending_frees`]; counted in `PENDING_COUNT` with the pending plain frees.
static BLOCKED: Mutex<Vec<Allocation>> = Mutex::new(Vec::new());

/// Retries the frees of [`BLOCKED`]: each is made once the capture it waits for has ended, and
/// queued again otherwise.
fn retry_blocked() {
    let blocked = std::mem::take(&mut *BLOCKED.lock().unwrap_or_else(|e| e.into_inner()));
    if blocked.is_empty() {
        return;
    }
    PENDING_COUNT.fetch_sub(blocked.len(), Ordering::Release);
    // Each drop frees, or queues the allocation again.
    drop(blocked);
}

/// The queued form of a free made inside a host function: `queued` is a `Box<Allocation>`.
fn free_queued(queued: usize) -> Result<()> {
    // SAFETY: `queued` came from `Box::into_raw` in `Allocation::drop`, and the queue hands each
    // item to its function exactly once.
    let alloc = unsafe { Box::from_raw(queued as *mut Allocation) };
    alloc.free()
}

/// A free waiting for the events recorded after the memory's uses (each with its context).
struct PendingFree {
    handle: usize,
    ctx: Context,
    events: Vec<(Context, ffi::CUevent)>,
    free: fn(&Context, usize) -> Result<()>,
}

// SAFETY: addresses and event handles are driver values usable from any thread.
unsafe impl Send for PendingFree {}

/// Frees whose uses may still run.
static PENDING: Mutex<Vec<PendingFree>> = Mutex::new(Vec::new());
/// How many entries `PENDING` holds, read without the lock.
static PENDING_COUNT: AtomicUsize = AtomicUsize::new(0);

/// Queues `p`, made at a later allocation or free ([`poll_pending_frees`]).
fn queue_free(p: PendingFree) {
    PENDING.lock().unwrap_or_else(|e| e.into_inner()).push(p);
    PENDING_COUNT.fetch_add(1, Ordering::Release);
}

/// Calls `free(ctx, handle)` once every event of `events` (each of its context, handed over) has
/// completed: now if they have (returning its answer), else at a later allocation or free
/// ([`poll_pending_frees`]; `Ok` now). Inside a host function always later.
pub(crate) fn free_when_done(
    ctx: &Context,
    handle: usize,
    events: Vec<(Context, ffi::CUevent)>,
    free: fn(&Context, usize) -> Result<()>,
) -> Result<()> {
    if must_defer_free() || !all_done(&events) {
        queue_free(PendingFree {
            handle,
            ctx: ctx.clone(),
            events,
            free,
        });
        return Ok(());
    }
    for (c, ev) in events {
        c.recycle_plain_event(ev);
    }
    poll_pending_frees();
    free(ctx, handle)
}

/// Makes the frees whose uses have all completed (`cuEventQuery`), and gives their events back
/// to their context; retries the frees that waited for a capture begun elsewhere. One atomic
/// load when none is pending (inline), and one for orphaned blocks. Not inside a host function.
#[inline]
pub(crate) fn poll_pending_frees() {
    if block_cache::orphans_pending() || PENDING_COUNT.load(Ordering::Acquire) != 0 {
        poll_pending_frees_now();
    }
}

#[cold]
#[inline(never)]
fn poll_pending_frees_now() {
    if block_cache::orphans_pending() && !must_defer_free() {
        block_cache::free_orphans(|ctx| synchronize_context_outside_captures(ctx.raw()));
    }
    if PENDING_COUNT.load(Ordering::Acquire) == 0 || must_defer_free() {
        return;
    }
    retry_blocked();
    let ready: Vec<PendingFree> = {
        let mut pending = PENDING.lock().unwrap_or_else(|e| e.into_inner());
        if pending.is_empty() {
            return;
        }
        let mut ready = Vec::new();
        let mut i = 0;
        while i < pending.len() {
            if all_done(&pending[i].events) {
                ready.push(pending.swap_remove(i));
            } else {
                i += 1;
            }
        }
        PENDING_COUNT.fetch_sub(ready.len(), Ordering::Release);
        ready
    };
    for p in ready {
        for (c, ev) in p.events {
            c.recycle_plain_event(ev);
        }
        let _ = (p.free)(&p.ctx, p.handle);
    }
}

/// How many frees wait: plain frees for their uses, frees for a capture begun elsewhere (for
/// tests: feature `test-hooks`).
#[cfg(feature = "test-hooks")]
pub(crate) fn pending_frees() -> usize {
    PENDING.lock().unwrap_or_else(|e| e.into_inner()).len()
        + BLOCKED.lock().unwrap_or_else(|e| e.into_inner()).len()
        + block_cache::orphan_count()
}

/// The rare case of a use nothing marks: waits for the context's work, then frees. If the wait
/// fails the memory is left allocated. While a capture this crate began on a stream of the
/// context is under way the wait would fail and invalidate it: the free is queued (no events)
/// and tried again at a later allocation or free.
#[cold]
fn free_plain_after_context(ctx: &Context, ptr: ffi::CUdeviceptr) -> Result<()> {
    match synchronize_context_outside_captures(ctx.raw()) {
        Some(r) => r.and_then(|()| free_plain_now(ctx, ptr)),
        None => {
            queue_free(PendingFree {
                handle: ptr as usize,
                ctx: ctx.clone(),
                events: Vec::new(),
                free: |ctx, ptr| free_plain_after_context(ctx, ptr as ffi::CUdeviceptr),
            });
            Ok(())
        }
    }
}

/// Probes of this module's locks (see `base::lock_probe`).
#[cfg(feature = "test-hooks")]
pub(crate) fn report_locks(out: &mut Vec<String>) {
    use crate::base::lock_probe::probe;
    probe(out, "allocation::BLOCKED", &BLOCKED);
    probe(out, "allocation::PENDING", &PENDING);
}
