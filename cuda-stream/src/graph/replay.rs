//! CUDA graphs: [`Graph`] (a recorded DAG of work, from [`Stream::capture`](crate::Stream::capture))
//! and [`GraphExec`] (an instantiated graph that replays it), each destroyed on `Drop`.

use std::cell::Cell;
use std::ffi::CString;
use std::fmt;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::path::Path;
use std::ptr;
use std::sync::Arc;

use crate::base::error::{DriverCode, Error, Result, check, driver_fn, lookup};
use crate::base::newest_abi::Newest;
use crate::driver::context::{Context, bind};
use crate::driver::deferred_destroy::{self, Deferred};
use crate::ffi;
use crate::graph::replay_uses::{self, Held};
use crate::graph::user_objects::HostRoute;
use crate::stream::view::{AsStream, Stream};

/// How to instantiate a [`Graph`] into a [`GraphExec`]: the flags the driver offers.
///
/// ```no_run
/// # fn f(graph: &cuda_stream::Graph, stream: &cuda_stream::OwnedStream) -> cuda_stream::Result<()> {
/// use cuda_stream::{AsStream, InstantiateOptions};
///
/// let exec = graph.instantiate_with(
///     InstantiateOptions::new()
///         .use_node_priority(true)
///         .upload(stream.as_stream()), // ready to launch on `stream` without a first-launch cost
/// )?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct InstantiateOptions<'s> {
    auto_free_on_launch: bool,
    use_node_priority: bool,
    upload: Option<Stream<'s>>,
}

impl<'s> InstantiateOptions<'s> {
    /// No flags: what [`Graph::instantiate`] uses.
    pub fn new() -> InstantiateOptions<'s> {
        InstantiateOptions::default()
    }

    /// `CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH`: memory the graph allocated and did not
    /// free is freed before each relaunch (otherwise such a relaunch fails).
    pub fn auto_free_on_launch(mut self, on: bool) -> InstantiateOptions<'s> {
        self.auto_free_on_launch = on;
        self
    }

    /// `CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY`: each kernel node runs at the priority it
    /// was captured with (that of its stream), not at the priority of the launch stream.
    pub fn use_node_priority(mut self, on: bool) -> InstantiateOptions<'s> {
        self.use_node_priority = on;
        self
    }

    /// `CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD`: uploads the executable graph on `stream` as part of
    /// instantiation (`cuGraphInstantiateWithParams`, CUDA 12.0), as [`GraphExec::upload`] would.
    /// Before CUDA 12.0 the graph is instantiated and then uploaded with `cuGraphUpload`, which
    /// is what the flag does.
    pub fn upload(mut self, stream: Stream<'s>) -> InstantiateOptions<'s> {
        self.upload = Some(stream);
        self
    }

    /// The driver's flags word.
    pub fn flags(&self) -> u64 {
        use ffi::CUgraphInstantiate_flags as F;
        let mut flags = 0u64;
        if self.auto_free_on_launch {
            flags |= u64::from(F::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH.0);
        }
        if self.use_node_priority {
            flags |= u64::from(F::CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY.0);
        }
        if self.upload.is_some() {
            flags |= u64::from(F::CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD.0);
        }
        flags
    }
}

/// A graph of recorded work, made by [`Stream::capture`](crate::Stream::capture) and destroyed on
/// `Drop` (`cuGraphDestroy`). Instantiate it to run it: [`Graph::instantiate`].
///
/// `Send` but not `Sync`: the driver does not synchronise graph objects internally, not even for
/// calls that look read-only such as instantiation, so a graph is used from one thread at a time.
///
/// Host functions captured into the graph are owned by the driver's user objects that the graph
/// (and every executable graph made from it) holds: dropping the graph never frees a closure that
/// an executable graph can still run.
pub struct Graph {
    raw: ffi::CUgraph,
    ctx: ffi::CUcontext,
    route: Option<Arc<HostRoute>>,
    /// The buffers whose work was captured into it: its replays are recorded as their uses.
    replayed: Arc<[Held]>,
    /// Keeps the context alive (a primary one this crate could retain), so that a destroy
    /// deferred by the host-function rule is made before the context's release.
    keep: Option<Context>,
    _not_sync: PhantomData<Cell<()>>,
}

// SAFETY: a graph handle may be used from any thread, one thread at a time (`Graph` is not
// `Sync`); it is destroyed exactly once.
unsafe impl Send for Graph {}

static_assertions::assert_impl_all!(Graph: Send);
static_assertions::assert_not_impl_any!(Graph: Sync, Clone);

impl fmt::Debug for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Graph")
            .field("raw", &self.raw)
            .field("ctx", &self.ctx)
            .finish()
    }
}

impl Graph {
    /// Takes ownership of a graph the driver returned by `cuStreamEndCapture` for a capture on a
    /// stream of context `ctx` (kept alive by `keep`, when this crate could retain it).
    pub(crate) fn from_capture(
        raw: ffi::CUgraph,
        ctx: ffi::CUcontext,
        keep: Option<Context>,
        route: Option<Arc<HostRoute>>,
    ) -> Graph {
        Graph {
            raw,
            ctx,
            route,
            replayed: replay_uses::take(raw),
            keep,
            _not_sync: PhantomData,
        }
    }

    /// Takes ownership of a graph handle made elsewhere (by a framework's capture, or raw calls):
    /// it is destroyed when the value drops. Its work belongs to `ctx`, which the value keeps
    /// alive; its executable graphs launch on streams of `ctx` only.
    ///
    /// # Safety
    /// `raw` must be a live graph that nothing else destroys or uses after this value takes it,
    /// whose work belongs to `ctx`; whatever its nodes use (host functions and their data,
    /// events, memory) must stay valid for as long as the graph or an executable graph made from
    /// it can run them.
    pub unsafe fn from_raw(raw: ffi::CUgraph, ctx: &Context) -> Result<Graph> {
        if raw.is_null() {
            return Err(Error::NullHandle { what: "graph" });
        }
        Ok(Graph::from_capture(raw, ctx.raw(), Some(ctx.clone()), None))
    }

    /// The raw handle.
    pub fn raw(&self) -> ffi::CUgraph {
        self.raw
    }

    /// The raw handle of the context the graph's work belongs to (that of the stream captured).
    pub fn context_raw(&self) -> ffi::CUcontext {
        self.ctx
    }

    /// How many nodes the graph has (`cuGraphGetNodes`).
    pub fn node_count(&self) -> Result<usize> {
        let f = driver_fn!(cuGraphGetNodes);
        let mut n = 0usize;
        // SAFETY: the graph is live; a null node array asks for the count only.
        let rc = unsafe { f(self.raw, ptr::null_mut(), &mut n) };
        check(rc, "cuGraphGetNodes")?;
        Ok(n)
    }

    /// Writes a Graphviz description of the graph to `path` (`cuGraphDebugDotPrint`, verbose).
    pub fn debug_dot(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let c = path
            .to_str()
            .and_then(|s| CString::new(s).ok())
            .ok_or(Error::Refused {
                call: "cuGraphDebugDotPrint",
                reason: "the path is not UTF-8 or contains a NUL byte",
            })?;
        let f = driver_fn!(cuGraphDebugDotPrint);
        let verbose = ffi::CUgraphDebugDot_flags::CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE.0;
        // SAFETY: the graph is live; `c` is a NUL-terminated path that outlives the call.
        let rc = unsafe { f(self.raw, c.as_ptr(), verbose) };
        check(rc, "cuGraphDebugDotPrint")
    }

    /// Instantiates the graph with no flags (`cuGraphInstantiate`, which is
    /// `cuGraphInstantiateWithFlags` from CUDA 11.4 on, and its CUDA 11.0 ABI before).
    pub fn instantiate(&self) -> Result<GraphExec> {
        self.instantiate_with(InstantiateOptions::new())
    }

    /// Instantiates the graph with `options`: `cuGraphInstantiateWithFlags`, or
    /// `cuGraphInstantiateWithParams` when the options upload it on a stream (before CUDA 12.0:
    /// `cuGraphInstantiateWithFlags`, then `cuGraphUpload`). The graph's context is made current
    /// for the call. Flags need CUDA 11.4 (`cuGraphInstantiateWithFlags`): on an older driver
    /// they are [`Error::Unsupported`], and no flags work from CUDA 11.0.
    pub fn instantiate_with(&self, options: InstantiateOptions<'_>) -> Result<GraphExec> {
        if let Some(stream) = options.upload {
            if stream.context_raw() != self.ctx {
                return Err(other_context("cuGraphInstantiateWithParams"));
            }
        }
        // Instantiation is not a call on a stream: the graph's context is made current for it.
        let _bound = bind(self.ctx)?;
        let raw = match options.upload {
            None => instantiate_flags(self.raw, options.flags())?,
            Some(stream) => match lookup(
                "cuGraphInstantiateWithParams",
                ffi::fns::cuGraphInstantiateWithParams,
            ) {
                Ok(f) => instantiate_params(f, self.raw, options.flags(), stream.handle())?,
                Err(e @ Error::InHostFunction { .. }) => return Err(e),
                // Before CUDA 12.0: what the upload flag does, in two calls.
                Err(_) => {
                    let upload = ffi::CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD;
                    let flags = options.flags() & !u64::from(upload.0);
                    instantiate_then_upload(self.raw, flags, stream.handle())?
                }
            },
        };
        Ok(GraphExec {
            raw,
            ctx: self.ctx,
            route: self.route.clone(),
            replayed: self.replayed.clone(),
            keep: self.keep.clone(),
            _not_sync: PhantomData,
        })
    }

    /// Hands the handle over without destroying it. Host functions captured into it stay alive
    /// until the driver releases the graph's user objects (when it is destroyed). The graph stays
    /// valid only while its context is retained by someone.
    pub fn into_raw(self) -> ffi::CUgraph {
        let this = ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again; the route and the context retain are
        // released here.
        let _parts = unsafe {
            (
                ptr::read(&this.route),
                ptr::read(&this.keep),
                ptr::read(&this.replayed),
            )
        };
        this.raw
    }

    /// Destroys the graph, returning the driver's error if `cuGraphDestroy` fails. Inside a host
    /// function the destroy is queued for an ordinary thread and the answer is
    /// [`Error::InHostFunction`].
    pub fn close(self) -> Result<()> {
        let this = ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again; the context retain is released after
        // the destroy.
        let _parts = unsafe {
            (
                ptr::read(&this.route),
                ptr::read(&this.keep),
                ptr::read(&this.replayed),
            )
        };
        destroy_or_defer(this.raw as usize, destroy_graph, "cuGraphDestroy")
    }
}

/// Destroys `raw` with `destroy` now, or, inside a host function, queues it for an ordinary
/// thread and says so.
fn destroy_or_defer(
    raw: usize,
    destroy: fn(usize) -> Result<()>,
    call: &'static str,
) -> Result<()> {
    if deferred_destroy::in_host_fn() {
        deferred_destroy::defer([Deferred::new(raw, destroy)]);
        return Err(Error::InHostFunction { call });
    }
    deferred_destroy::drain_if_pending();
    destroy(raw)
}

/// `cuGraphDestroy`, in the form a deferred destroy takes.
fn destroy_graph(raw: usize) -> Result<()> {
    let f = driver_fn!(cuGraphDestroy);
    // SAFETY: the owner handed `raw` over and never uses it again.
    check(unsafe { f(raw as ffi::CUgraph) }, "cuGraphDestroy")
}

impl Drop for Graph {
    fn drop(&mut self) {
        let _ = destroy_or_defer(self.raw as usize, destroy_graph, "cuGraphDestroy");
    }
}

fn other_context(call: &'static str) -> Error {
    Error::Refused {
        call,
        reason: "the stream belongs to another context than the graph's work",
    }
}

/// `cuGraphInstantiate`: `cuGraphInstantiateWithFlags` (CUDA 11.4) where the driver has it,
/// else, for no flags, the CUDA 11.0 ABI (`cuGraphInstantiate_v2`, whose error node and log
/// are not asked for).
fn instantiate_flags(graph: ffi::CUgraph, flags: u64) -> Result<ffi::CUgraphExec> {
    let mut exec = ptr::null_mut();
    let rc = match lookup("cuGraphInstantiate", ffi::fns::cuGraphInstantiate) {
        // SAFETY: the graph is live; `exec` is a valid out-pointer.
        Ok(f) => unsafe { f(&mut exec, graph, flags) },
        Err(e) if flags != 0 || matches!(e, Error::InHostFunction { .. }) => return Err(e),
        Err(_) => {
            static V11: Newest<ffi::pfn::cuGraphInstantiate_v11000> = Newest::new();
            let f = V11.get("cuGraphInstantiate", &[ffi::fns::cuGraphInstantiate_v11000])?;
            let (node, log) = (ptr::null_mut(), ptr::null_mut());
            // SAFETY: the graph is live; `exec` is a valid out-pointer; the error node and the
            // log buffer are optional, passed as null with a size of 0.
            unsafe { f(&mut exec, graph, node, log, 0) }
        }
    };
    check(rc, "cuGraphInstantiate")?;
    if exec.is_null() {
        return Err(Error::NullHandle {
            what: "executable graph",
        });
    }
    Ok(exec)
}

/// `cuGraphInstantiateWithParams` (CUDA 12.0), the one call that instantiates with an upload.
fn instantiate_params(
    f: ffi::pfn::cuGraphInstantiateWithParams,
    graph: ffi::CUgraph,
    flags: u64,
    upload: ffi::CUstream,
) -> Result<ffi::CUgraphExec> {
    let mut params = ffi::CUDA_GRAPH_INSTANTIATE_PARAMS {
        flags,
        hUploadStream: upload,
        ..Default::default()
    };
    let mut exec = ptr::null_mut();
    // SAFETY: the graph and the stream are live; `exec` and `params` are valid for the call.
    let rc = unsafe { f(&mut exec, graph, &mut params) };
    check(rc, "cuGraphInstantiateWithParams")?;
    if exec.is_null() {
        return Err(Error::NullHandle {
            what: "executable graph",
        });
    }
    Ok(exec)
}

/// Before CUDA 12.0, the upload flag's work in two calls: instantiate with the other flags, then
/// `cuGraphUpload` on `upload` (of the graph's context, which is current); the executable graph
/// is destroyed again if the upload fails.
fn instantiate_then_upload(
    graph: ffi::CUgraph,
    flags: u64,
    upload: ffi::CUstream,
) -> Result<ffi::CUgraphExec> {
    let exec = instantiate_flags(graph, flags)?;
    let uploaded = match lookup("cuGraphUpload", ffi::fns::cuGraphUpload) {
        // SAFETY: the executable graph and the stream are live and of the current context.
        Ok(f) => check(unsafe { f(exec, upload) }, "cuGraphUpload"),
        Err(e) => Err(e),
    };
    if let Err(e) = uploaded {
        // Never handed out: destroyed here, once (a failed destroy leaves nothing to retry).
        let _ = destroy_exec(exec as usize);
        return Err(e);
    }
    Ok(exec)
}

/// An instantiated graph, launched with [`GraphExec::launch`] as often as wanted; destroyed on
/// `Drop` (`cuGraphExecDestroy`).
///
/// Dropping it while a launch is in flight is safe: the driver frees it when the launch has
/// finished, and the host functions the launch runs are freed after that (they are owned by
/// user objects the executable graph holds). `Send` but not `Sync`, as [`Graph`].
///
/// A panic in a host function the graph runs is reported like one enqueued with
/// [`Stream::launch_host_func`](crate::Stream::launch_host_func): as
/// [`Error::HostFnPanicked`] from the next `synchronize`, `query` or `launch_host_func` on the
/// stream the graph was last launched on (or the next [`GraphExec::launch`] on it).
pub struct GraphExec {
    raw: ffi::CUgraphExec,
    ctx: ffi::CUcontext,
    route: Option<Arc<HostRoute>>,
    /// The graph's buffers: each launch waits for their other uses and is recorded as theirs.
    replayed: Arc<[Held]>,
    keep: Option<Context>,
    _not_sync: PhantomData<Cell<()>>,
}

// SAFETY: an executable graph handle may be used from any thread, one at a time (`GraphExec` is
// not `Sync`); it is destroyed exactly once.
unsafe impl Send for GraphExec {}

static_assertions::assert_impl_all!(GraphExec: Send);
static_assertions::assert_not_impl_any!(GraphExec: Sync, Clone);

impl fmt::Debug for GraphExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GraphExec")
            .field("raw", &self.raw)
            .field("ctx", &self.ctx)
            .finish()
    }
}

impl GraphExec {
    /// The raw handle.
    pub fn raw(&self) -> ffi::CUgraphExec {
        self.raw
    }

    /// Launches the graph on `stream` (`cuGraphLaunch`): it runs after the work enqueued there so
    /// far and after every earlier launch of this executable graph. The stream must belong to
    /// the graph's context ([`Error::Refused`] otherwise). Reports an unreported panic of a host
    /// function on `stream` first, as `launch_host_func` does.
    #[inline]
    pub fn launch(&self, stream: &impl AsStream) -> Result<()> {
        let stream = stream.as_stream();
        if stream.context_raw() != self.ctx {
            return Err(other_context("cuGraphLaunch"));
        }
        crate::stream::host_panics::report(stream.handle(), stream.context_raw())?;
        let f = driver_fn!(cuGraphLaunch);
        if let Some(route) = &self.route {
            route.set(stream.handle(), stream.context_raw());
        }
        let _bound = stream.bind_if_default()?;
        // The buffers the graph uses: the launch waits for their other uses and counts as one.
        replay_uses::around_launch(&self.replayed, stream.handle(), self.ctx, || {
            // SAFETY: the executable graph and the stream are live and of the same context.
            check(unsafe { f(self.raw, stream.handle()) }, "cuGraphLaunch")
        })
    }

    /// Uploads the graph's work to the device on `stream` (`cuGraphUpload`), so that the first
    /// launch does not pay for it. The stream must belong to the graph's context.
    pub fn upload(&self, stream: &impl AsStream) -> Result<()> {
        let stream = stream.as_stream();
        if stream.context_raw() != self.ctx {
            return Err(other_context("cuGraphUpload"));
        }
        let f = driver_fn!(cuGraphUpload);
        let _bound = stream.bind_if_default()?;
        // SAFETY: the executable graph and the stream are live and of the same context.
        check(unsafe { f(self.raw, stream.handle()) }, "cuGraphUpload")
    }

    /// Updates the executable graph in place from `graph`, which must have the same shape (the
    /// same nodes, of the same types, with the same dependencies) and may differ in node
    /// parameters such as kernel arguments (`cuGraphExecUpdate`: its CUDA 12.0 ABI, or the CUDA
    /// 10.2 one on older drivers). A refused update is [`Error::GraphUpdate`], which says why
    /// and names the offending node; the executable graph
    /// is then unchanged. Launches already enqueued run the old work; host functions they run are
    /// kept alive until they finish.
    pub fn update(&mut self, graph: &Graph) -> Result<()> {
        if graph.ctx != self.ctx {
            return Err(Error::Refused {
                call: "cuGraphExecUpdate",
                reason: "the graph's work belongs to another context than the executable graph's",
            });
        }
        let _bound = bind(self.ctx)?;
        exec_update(self.raw, graph.raw)?;
        // Panics of the new host functions go where this executable graph is launched.
        self.route = graph.route.clone();
        self.replayed = graph.replayed.clone();
        Ok(())
    }

    /// Hands the handle over without destroying it. It stays valid only while its context is
    /// retained by someone.
    pub fn into_raw(self) -> ffi::CUgraphExec {
        let this = ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again; the route and the context retain are
        // released here.
        let _parts = unsafe {
            (
                ptr::read(&this.route),
                ptr::read(&this.keep),
                ptr::read(&this.replayed),
            )
        };
        this.raw
    }

    /// Destroys the executable graph, returning the driver's error if `cuGraphExecDestroy`
    /// fails. A launch in flight still completes. Inside a host function the destroy is queued
    /// for an ordinary thread and the answer is [`Error::InHostFunction`].
    pub fn close(self) -> Result<()> {
        let this = ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again; the context retain is released after
        // the destroy.
        let _parts = unsafe {
            (
                ptr::read(&this.route),
                ptr::read(&this.keep),
                ptr::read(&this.replayed),
            )
        };
        destroy_or_defer(this.raw as usize, destroy_exec, "cuGraphExecDestroy")
    }
}

/// `cuGraphExecUpdate`: its CUDA 12.0 ABI (`cuGraphExecUpdate_v2`, with the nodes of both graphs
/// in a result info) where the driver has it, else the CUDA 10.2 one (the result and the new
/// graph's node in two out-pointers). A refusal is the same [`Error::GraphUpdate`] either way,
/// with no node of the executable graph from the older ABI.
fn exec_update(exec: ffi::CUgraphExec, graph: ffi::CUgraph) -> Result<()> {
    static V12: Newest<ffi::pfn::cuGraphExecUpdate> = Newest::new();
    static V10: Newest<ffi::pfn::cuGraphExecUpdate_v10020> = Newest::new();
    let mut info = ffi::CUgraphExecUpdateResultInfo {
        result: ffi::CUgraphExecUpdateResult::CU_GRAPH_EXEC_UPDATE_SUCCESS,
        errorNode: ptr::null_mut(),
        errorFromNode: ptr::null_mut(),
    };
    let rc = if let Ok(f) = V12.get("cuGraphExecUpdate", &[ffi::fns::cuGraphExecUpdate]) {
        // SAFETY: both handles are live; `info` is a valid out-pointer.
        unsafe { f(exec, graph, &mut info) }
    } else {
        // Inside a host function this is refused too.
        let f = V10.get("cuGraphExecUpdate", &[ffi::fns::cuGraphExecUpdate_v10020])?;
        // SAFETY: both handles are live; the node and the result are valid out-pointers.
        unsafe { f(exec, graph, &mut info.errorNode, &mut info.result) }
    };
    match rc {
        ffi::CUresult::CUDA_SUCCESS => Ok(()),
        ffi::CUresult::CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE => Err(Error::GraphUpdate {
            result: info.result,
            node: info.errorNode as usize,
            from_node: info.errorFromNode as usize,
            code: DriverCode(rc),
        }),
        rc => Err(Error::driver("cuGraphExecUpdate", rc)),
    }
}

/// `cuGraphExecDestroy`, in the form a deferred destroy takes.
fn destroy_exec(raw: usize) -> Result<()> {
    let f = driver_fn!(cuGraphExecDestroy);
    // SAFETY: the owner handed `raw` over and never uses it again.
    check(unsafe { f(raw as ffi::CUgraphExec) }, "cuGraphExecDestroy")
}

impl Drop for GraphExec {
    fn drop(&mut self) {
        let _ = destroy_or_defer(self.raw as usize, destroy_exec, "cuGraphExecDestroy");
    }
}
