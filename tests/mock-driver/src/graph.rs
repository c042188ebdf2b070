//! The model of graphs, executable graphs and user objects, and their exports.
//!
//! - A graph is a list of nodes in capture order (so every node's dependencies come before it):
//!   host functions, event record and event wait nodes, and opaque nodes (kernels, memsets,
//!   memcpys and child graphs, which the mock does not run). Graphs come from `capture.rs`.
//! - `cuGraphInstantiateWithFlags` / `cuGraphInstantiateWithParams` copy the nodes into an
//!   executable graph and take the graph's user-object references again (as the driver clones
//!   them). `cuGraphLaunch` queues the nodes on the one worker, in order: a host node is a host
//!   function job, an event record node records the event, an event wait node makes the launch
//!   wait for the event's record; a final job counts the launch as finished.
//! - `cuGraphExecUpdate_v2` accepts a graph of the same shape (node count, node types and
//!   dependencies), takes its parameters and references, and holds the old references back until
//!   the launches in flight have finished. Anything else is `CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE`
//!   with the reason and the node.
//! - User objects count references; when the last goes, the destructor is queued on the worker
//!   (after every launch queued so far). `cuGraphExecDestroy` during a launch releases the
//!   executable graph's references only when its launches have finished.
//! - Destroying or using a graph, executable graph or user object the mock does not know (or
//!   already destroyed) is a bad destroy or a bad use, as for streams and events.

// The driver functions have the exported C names, also where a flavour does not export them.
#![allow(non_snake_case)]

use std::collections::HashMap;
use std::ffi::{CStr, c_char, c_uint, c_ulonglong, c_void};
use std::sync::MutexGuard;

use cuda_sys::{
    CUDA_GRAPH_INSTANTIATE_PARAMS, CUgraph, CUgraphExec, CUgraphExecUpdateResult,
    CUgraphExecUpdateResultInfo, CUgraphInstantiateResult, CUgraphNode, CUhostFn, CUresult,
    CUstream, CUuserObject,
};

use crate::capture::Captures;
use crate::exports::{api, per_thread_null, put};
use crate::state::{self, State, StreamRef, Work};

const SUCCESS: CUresult = CUresult::CUDA_SUCCESS;
const INVALID_VALUE: CUresult = CUresult::CUDA_ERROR_INVALID_VALUE;

const AUTO_FREE_ON_LAUNCH: u64 = 1;
const UPLOAD: u64 = 2;
const DEVICE_LAUNCH: u64 = 4;
const USE_NODE_PRIORITY: u64 = 8;
const USER_OBJECT_NO_DESTRUCTOR_SYNC: c_uint = 1;
const GRAPH_USER_OBJECT_MOVE: c_uint = 1;

/// `?` for functions that return a `CUresult`.
macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(code) => return code,
        }
    };
}

pub(crate) type HostFn = unsafe extern "C" fn(*mut c_void);

/// A fresh, never-freed heap address to serve as a handle (graphs, nodes, user objects).
pub(crate) fn fresh_handle() -> usize {
    let cell: &'static mut u64 = Box::leak(Box::new(0));
    cell as *mut u64 as usize
}

#[derive(Debug, Clone)]
pub(crate) enum NodeKind {
    Host(HostFn, usize),
    /// Records the event whose record state is `core`.
    EventRecord(u64),
    /// Waits for the event whose record state is `core`.
    EventWait(u64),
    /// A kernel, memset or copy (`device_model.rs`), run again on every launch.
    Device(crate::device_model::DeviceWork),
    /// Work the mock does not model (a child graph): its name.
    Opaque(&'static str),
}

impl NodeKind {
    /// Read by `cuGraphExecUpdate`.
    fn same_type(&self, other: &NodeKind) -> bool {
        match (self, other) {
            (NodeKind::Opaque(a), NodeKind::Opaque(b)) => a == b,
            (NodeKind::Device(a), NodeKind::Device(b)) => a.label() == b.label(),
            _ => std::mem::discriminant(self) == std::mem::discriminant(other),
        }
    }

    fn label(&self) -> &'static str {
        match self {
            NodeKind::Host(..) => "host",
            NodeKind::EventRecord(_) => "event record",
            NodeKind::EventWait(_) => "event wait",
            NodeKind::Device(work) => work.label(),
            NodeKind::Opaque(what) => what,
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub(crate) handle: usize,
    pub(crate) kind: NodeKind,
    /// Indices of earlier nodes of the same graph.
    pub(crate) deps: Vec<usize>,
}

#[derive(Debug)]
pub(crate) struct GraphRec {
    pub(crate) alive: bool,
    pub(crate) nodes: Vec<Node>,
    /// User objects this graph holds references to, with how many.
    pub(crate) objects: Vec<(usize, u64)>,
}

#[derive(Debug)]
pub(crate) struct ExecRec {
    alive: bool,
    nodes: Vec<Node>,
    objects: Vec<(usize, u64)>,
    /// References replaced by an update while launches were in flight.
    held: Vec<(usize, u64)>,
    in_flight: u64,
}

#[derive(Debug)]
pub(crate) struct UserObject {
    ptr: usize,
    destroy: HostFn,
    refs: u64,
}

/// Everything about graphs, executable graphs, user objects and captures.
#[derive(Debug, Default)]
pub(crate) struct Graphs {
    pub(crate) graphs: HashMap<usize, GraphRec>,
    execs: HashMap<usize, ExecRec>,
    objects: HashMap<usize, UserObject>,
    pub(crate) captures: Captures,
    pub(crate) live_graphs: u64,
    pub(crate) live_execs: u64,
    /// User objects with references left.
    pub(crate) live_user_objects: u64,
    /// Destructors that have run, over the life of the process.
    pub(crate) destructors_run: u64,
}

/// A job of the worker for graphs.
#[derive(Debug)]
pub(crate) enum GraphJob {
    /// Runs a user object's destructor.
    Destroy(HostFn, usize),
    /// The end of a launch of an executable graph.
    LaunchDone(usize),
}

impl Graphs {
    /// A new, empty graph; counted live.
    pub(crate) fn new_graph(&mut self) -> usize {
        let h = fresh_handle();
        self.graphs.insert(
            h,
            GraphRec {
                alive: true,
                nodes: Vec::new(),
                objects: Vec::new(),
            },
        );
        self.live_graphs += 1;
        h
    }
}

/// A live graph, or a bad use.
fn graph_mut(st: &mut State, h: usize) -> Result<&mut GraphRec, CUresult> {
    match st.graphs.graphs.get_mut(&h) {
        Some(g) if g.alive => Ok(g),
        _ => {
            st.counters.bad_uses += 1;
            Err(INVALID_VALUE)
        }
    }
}

fn exec_mut(st: &mut State, h: usize) -> Result<&mut ExecRec, CUresult> {
    match st.graphs.execs.get_mut(&h) {
        Some(e) if e.alive => Ok(e),
        _ => {
            st.counters.bad_uses += 1;
            Err(INVALID_VALUE)
        }
    }
}

/// Takes `count` more references to each object.
fn retain_all(st: &mut State, objects: &[(usize, u64)]) {
    for (o, n) in objects {
        if let Some(obj) = st.graphs.objects.get_mut(o) {
            obj.refs += n;
        }
    }
}

/// Drops `count` references to `object`; at zero its destructor is queued on the worker.
fn release(st: &mut State, object: usize, count: u64) -> Result<(), CUresult> {
    let Some(obj) = st.graphs.objects.get_mut(&object) else {
        st.counters.bad_destroys += 1;
        return Err(INVALID_VALUE);
    };
    if obj.refs < count || count == 0 {
        st.counters.bad_destroys += 1;
        return Err(INVALID_VALUE);
    }
    obj.refs -= count;
    if obj.refs == 0 {
        let obj = st.graphs.objects.remove(&object).expect("present");
        st.graphs.live_user_objects -= 1;
        st.enqueue_detached(Work::Graph(GraphJob::Destroy(obj.destroy, obj.ptr)))?;
    }
    Ok(())
}

fn release_all(st: &mut State, objects: Vec<(usize, u64)>) {
    for (o, n) in objects {
        let _ = release(st, o, n);
    }
}

/// Destroys a graph (the capture's, when it ends without one, or the caller's).
pub(crate) fn destroy_graph(st: &mut State, h: usize) -> Result<(), CUresult> {
    match st.graphs.graphs.get_mut(&h) {
        Some(g) if g.alive => {
            g.alive = false;
            let objects = std::mem::take(&mut g.objects);
            g.nodes.clear();
            st.graphs.live_graphs -= 1;
            release_all(st, objects);
            Ok(())
        }
        _ => {
            st.counters.bad_destroys += 1;
            Err(INVALID_VALUE)
        }
    }
}

/// Runs a graph job on the worker; the state is unlocked while a destructor runs.
pub(crate) fn run_job(
    mut st: MutexGuard<'static, State>,
    job: GraphJob,
) -> MutexGuard<'static, State> {
    match job {
        GraphJob::Destroy(f, ptr) => {
            drop(st);
            // SAFETY: `cuUserObjectCreate`'s caller gave a destructor to call once with this
            // pointer, from a driver thread, when the last reference is gone: now.
            unsafe { f(ptr as *mut c_void) };
            st = state::lock();
            st.graphs.destructors_run += 1;
        }
        GraphJob::LaunchDone(h) => {
            let mut release_now = Vec::new();
            if let Some(e) = st.graphs.execs.get_mut(&h) {
                e.in_flight -= 1;
                if e.in_flight == 0 {
                    release_now = std::mem::take(&mut e.held);
                    if !e.alive {
                        release_now.extend(std::mem::take(&mut e.objects));
                    }
                }
            }
            release_all(&mut st, release_now);
        }
    }
    st
}

// ---------------------------------------------------------------------------------------------
// Graphs

/// `cuGraphGetNodes`: with a null array, the count; else up to `*num_nodes` handles (the rest
/// of the array nulled) and the count.
///
/// # Safety
///
/// `num_nodes` is null or valid for a read and a write; `nodes` is null or valid for writes of
/// `*num_nodes` handles.
#[cfg_attr(exported = "cuGraphGetNodes", unsafe(no_mangle))]
pub unsafe extern "C" fn cuGraphGetNodes(
    graph: CUgraph,
    nodes: *mut CUgraphNode,
    num_nodes: *mut usize,
) -> CUresult {
    api("cuGraphGetNodes", false, |mut st| {
        if num_nodes.is_null() {
            return INVALID_VALUE;
        }
        let g = tri!(graph_mut(&mut st, graph as usize));
        let handles: Vec<usize> = g.nodes.iter().map(|n| n.handle).collect();
        if !nodes.is_null() {
            // SAFETY: non-null; the caller's contract makes it readable.
            let room = unsafe { num_nodes.read() };
            for i in 0..room {
                let h = handles.get(i).copied().unwrap_or(0);
                // SAFETY: `i < room`, within the caller's array.
                unsafe { put(nodes.add(i), h as CUgraphNode) };
            }
        }
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(num_nodes, handles.len()) };
        SUCCESS
    })
}

/// `cuGraphDestroy`: releases the graph's user-object references.
///
/// # Safety
///
/// None beyond the C contract; the handle is only looked up.
#[cfg_attr(exported = "cuGraphDestroy", unsafe(no_mangle))]
pub unsafe extern "C" fn cuGraphDestroy(graph: CUgraph) -> CUresult {
    api("cuGraphDestroy", false, |mut st| {
        if st.graphs.captures.owns_graph(graph as usize) {
            // The capture owns its graph until it ends.
            return CUresult::CUDA_ERROR_ILLEGAL_STATE;
        }
        tri!(destroy_graph(&mut st, graph as usize));
        SUCCESS
    })
}

/// `cuGraphDebugDotPrint`: a small DOT file, one vertex per node.
///
/// # Safety
///
/// `path` is null or a NUL-terminated string.
#[cfg_attr(exported = "cuGraphDebugDotPrint", unsafe(no_mangle))]
pub unsafe extern "C" fn cuGraphDebugDotPrint(
    graph: CUgraph,
    path: *const c_char,
    _flags: c_uint,
) -> CUresult {
    api("cuGraphDebugDotPrint", false, |mut st| {
        if path.is_null() {
            return INVALID_VALUE;
        }
        // SAFETY: non-null; the caller's contract makes it a C string.
        let Ok(path) = unsafe { CStr::from_ptr(path) }.to_str() else {
            return INVALID_VALUE;
        };
        let g = tri!(graph_mut(&mut st, graph as usize));
        let mut dot = String::from("digraph cuda_mock {\n");
        for (i, n) in g.nodes.iter().enumerate() {
            dot.push_str(&format!("  n{i} [label=\"{}\"];\n", n.kind.label()));
            for d in &n.deps {
                dot.push_str(&format!("  n{d} -> n{i};\n"));
            }
        }
        dot.push_str("}\n");
        match std::fs::write(path, dot) {
            Ok(()) => SUCCESS,
            Err(_) => CUresult::CUDA_ERROR_OPERATING_SYSTEM,
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Executable graphs

fn instantiate(st: &mut State, graph: usize, flags: u64) -> Result<usize, CUresult> {
    if flags & !(AUTO_FREE_ON_LAUNCH | UPLOAD | DEVICE_LAUNCH | USE_NODE_PRIORITY) != 0
        || flags & (AUTO_FREE_ON_LAUNCH | DEVICE_LAUNCH) == (AUTO_FREE_ON_LAUNCH | DEVICE_LAUNCH)
    {
        return Err(INVALID_VALUE);
    }
    if st.graphs.captures.owns_graph(graph) {
        return Err(CUresult::CUDA_ERROR_ILLEGAL_STATE);
    }
    let g = graph_mut(st, graph)?;
    let nodes = g.nodes.clone();
    let objects = g.objects.clone();
    retain_all(st, &objects);
    let h = fresh_handle();
    st.graphs.execs.insert(
        h,
        ExecRec {
            alive: true,
            nodes,
            objects,
            held: Vec::new(),
            in_flight: 0,
        },
    );
    st.graphs.live_execs += 1;
    Ok(h)
}

/// `cuGraphInstantiateWithFlags` (CUDA 11.4): flags `AUTO_FREE_ON_LAUNCH`, `DEVICE_LAUNCH`
/// (not with the former) and `USE_NODE_PRIORITY`; `UPLOAD` needs `cuGraphInstantiateWithParams`.
///
/// # Safety
///
/// `exec` is null or valid for a write.
#[cfg_attr(exported = "cuGraphInstantiateWithFlags", unsafe(no_mangle))]
pub unsafe extern "C" fn cuGraphInstantiateWithFlags(
    exec: *mut CUgraphExec,
    graph: CUgraph,
    flags: c_ulonglong,
) -> CUresult {
    api("cuGraphInstantiateWithFlags", false, |mut st| {
        if exec.is_null() || flags & UPLOAD != 0 {
            return INVALID_VALUE;
        }
        let h = tri!(instantiate(&mut st, graph as usize, flags));
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(exec, h as CUgraphExec) };
        SUCCESS
    })
}

/// `cuGraphInstantiate_v2` (the CUDA 11.0 ABI): no flags; on success the error node is null and
/// the log buffer an empty string.
///
/// # Safety
///
/// `exec` and `error_node` are each null or valid for a write; `log` is null or valid for writes
/// of `log_size` bytes.
#[cfg_attr(exported = "cuGraphInstantiate_v2", unsafe(no_mangle))]
pub unsafe extern "C" fn cuGraphInstantiate_v2(
    exec: *mut CUgraphExec,
    graph: CUgraph,
    error_node: *mut CUgraphNode,
    log: *mut c_char,
    log_size: usize,
) -> CUresult {
    // SAFETY: the caller's promise.
    unsafe {
        instantiate_logged(
            "cuGraphInstantiate_v2",
            exec,
            graph,
            error_node,
            log,
            log_size,
        )
    }
}

/// `cuGraphInstantiate` (the CUDA 10.0 ABI): as `cuGraphInstantiate_v2`.
///
/// # Safety
///
/// As for `cuGraphInstantiate_v2`.
#[cfg_attr(exported = "cuGraphInstantiate", unsafe(no_mangle))]
pub unsafe extern "C" fn cuGraphInstantiate(
    exec: *mut CUgraphExec,
    graph: CUgraph,
    error_node: *mut CUgraphNode,
    log: *mut c_char,
    log_size: usize,
) -> CUresult {
    // SAFETY: the caller's promise.
    unsafe { instantiate_logged("cuGraphInstantiate", exec, graph, error_node, log, log_size) }
}

/// The shared body of the two ABIs of `cuGraphInstantiate` with an error node and a log.
///
/// # Safety
///
/// As for `cuGraphInstantiate_v2`.
unsafe fn instantiate_logged(
    symbol: &'static str,
    exec: *mut CUgraphExec,
    graph: CUgraph,
    error_node: *mut CUgraphNode,
    log: *mut c_char,
    log_size: usize,
) -> CUresult {
    api(symbol, false, |mut st| {
        if exec.is_null() {
            return INVALID_VALUE;
        }
        let h = tri!(instantiate(&mut st, graph as usize, 0));
        // SAFETY: each written pointer is non-null; the caller's contract makes it writable
        // (`log` for `log_size` bytes, of which one is written).
        unsafe {
            put(exec, h as CUgraphExec);
            if !error_node.is_null() {
                put(error_node, std::ptr::null_mut());
            }
            if !log.is_null() && log_size > 0 {
                put(log, 0);
            }
        }
        SUCCESS
    })
}

/// `cuGraphInstantiateWithParams` (CUDA 12.0): as `cuGraphInstantiateWithFlags`, and `UPLOAD`
/// uploads on `hUploadStream`; writes `result_out`.
///
/// # Safety
///
/// `exec` and `params` are each null or valid (`params` for a read and a write).
#[cfg_attr(exported = "cuGraphInstantiateWithParams", unsafe(no_mangle))]
pub unsafe extern "C" fn cuGraphInstantiateWithParams(
    exec: *mut CUgraphExec,
    graph: CUgraph,
    params: *mut CUDA_GRAPH_INSTANTIATE_PARAMS,
) -> CUresult {
    // SAFETY: the caller's promise.
    unsafe { instantiate_params("cuGraphInstantiateWithParams", exec, graph, params, false) }
}

/// `cuGraphInstantiateWithParams_ptsz`: as `cuGraphInstantiateWithParams`, with a null upload
/// stream meaning the calling thread's per-thread default stream.
///
/// # Safety
///
/// As for `cuGraphInstantiateWithParams`.
#[cfg_attr(exported = "cuGraphInstantiateWithParams_ptsz", unsafe(no_mangle))]
pub unsafe extern "C" fn cuGraphInstantiateWithParams_ptsz(
    exec: *mut CUgraphExec,
    graph: CUgraph,
    params: *mut CUDA_GRAPH_INSTANTIATE_PARAMS,
) -> CUresult {
    // SAFETY: the caller's promise.
    unsafe {
        instantiate_params(
            "cuGraphInstantiateWithParams_ptsz",
            exec,
            graph,
            params,
            true,
        )
    }
}

/// # Safety
///
/// As for `cuGraphInstantiateWithParams`.
unsafe fn instantiate_params(
    symbol: &'static str,
    exec: *mut CUgraphExec,
    graph: CUgraph,
    params: *mut CUDA_GRAPH_INSTANTIATE_PARAMS,
    per_thread: bool,
) -> CUresult {
    api(symbol, false, |mut st| {
        if exec.is_null() || params.is_null() {
            return INVALID_VALUE;
        }
        // SAFETY: non-null; the caller's contract makes it readable.
        let p = unsafe { params.read() };
        if p.flags & UPLOAD != 0 {
            tri!(st.stream(per_thread_null(p.hUploadStream, per_thread)));
        }
        let h = tri!(instantiate(&mut st, graph as usize, p.flags));
        let out = CUDA_GRAPH_INSTANTIATE_PARAMS {
            hErrNode_out: std::ptr::null_mut(),
            result_out: CUgraphInstantiateResult::CUDA_GRAPH_INSTANTIATE_SUCCESS,
            ..p
        };
        // SAFETY: both non-null; the caller's contract makes them writable.
        unsafe {
            put(params, out);
            put(exec, h as CUgraphExec);
        }
        SUCCESS
    })
}

/// Queues one launch of executable graph `h` on stream `s`.
fn launch(st: &mut State, h: usize, s: StreamRef) -> Result<(), CUresult> {
    let nodes = exec_mut(st, h)?.nodes.clone();
    for n in &nodes {
        match n.kind {
            NodeKind::Host(f, data) => {
                st.enqueue(s, Work::Host(f, data))?;
            }
            NodeKind::Device(ref work) => {
                st.enqueue(s, Work::Device(work.clone()))?;
            }
            NodeKind::EventRecord(core) => {
                let seq = st.enqueue(s, Work::Marker(core))?;
                if let Some(c) = st.cores.get_mut(&core) {
                    c.record = Some((seq, None));
                }
            }
            NodeKind::EventWait(core) => {
                let seq = st
                    .cores
                    .get(&core)
                    .and_then(|c| c.record)
                    .map_or(0, |r| r.0);
                if seq > st.completed {
                    st.wait_for_job(s.key, s.ctx, seq);
                }
            }
            NodeKind::Opaque(_) => {}
        }
    }
    st.enqueue(s, Work::Graph(GraphJob::LaunchDone(h)))?;
    exec_mut(st, h)?.in_flight += 1;
    Ok(())
}

/// `cuGraphLaunch`: the nodes run on the worker, in order, after the stream's earlier work. On a
/// capturing stream, the launch is captured as an opaque child-graph node.
///
/// # Safety
///
/// None beyond the C contract; the handles are only looked up.
#[cfg_attr(exported = "cuGraphLaunch", unsafe(no_mangle))]
pub unsafe extern "C" fn cuGraphLaunch(exec: CUgraphExec, stream: CUstream) -> CUresult {
    graph_launch("cuGraphLaunch", exec, stream, false)
}

/// `cuGraphLaunch_ptsz`: as `cuGraphLaunch`, with the null stream meaning the calling thread's
/// per-thread default stream.
///
/// # Safety
///
/// None beyond the C contract; the handles are only looked up.
#[cfg_attr(exported = "cuGraphLaunch_ptsz", unsafe(no_mangle))]
pub unsafe extern "C" fn cuGraphLaunch_ptsz(exec: CUgraphExec, stream: CUstream) -> CUresult {
    graph_launch("cuGraphLaunch_ptsz", exec, stream, true)
}

fn graph_launch(
    symbol: &'static str,
    exec: CUgraphExec,
    stream: CUstream,
    per_thread: bool,
) -> CUresult {
    api(symbol, false, |mut st| {
        let s = tri!(st.stream(per_thread_null(stream, per_thread)));
        tri!(exec_mut(&mut st, exec as usize));
        if let Some(rc) = crate::capture::on_enqueue(&mut st, s, "child graph") {
            return rc;
        }
        tri!(launch(&mut st, exec as usize, s));
        SUCCESS
    })
}

/// `cuGraphUpload`: nothing to upload; checks the handles.
///
/// # Safety
///
/// None beyond the C contract; the handles are only looked up.
#[cfg_attr(exported = "cuGraphUpload", unsafe(no_mangle))]
pub unsafe extern "C" fn cuGraphUpload(exec: CUgraphExec, stream: CUstream) -> CUresult {
    graph_upload("cuGraphUpload", exec, stream, false)
}

/// `cuGraphUpload_ptsz`: as `cuGraphUpload`, with the null stream meaning the calling thread's
/// per-thread default stream.
///
/// # Safety
///
/// None beyond the C contract; the handles are only looked up.
#[cfg_attr(exported = "cuGraphUpload_ptsz", unsafe(no_mangle))]
pub unsafe extern "C" fn cuGraphUpload_ptsz(exec: CUgraphExec, stream: CUstream) -> CUresult {
    graph_upload("cuGraphUpload_ptsz", exec, stream, true)
}

fn graph_upload(
    symbol: &'static str,
    exec: CUgraphExec,
    stream: CUstream,
    per_thread: bool,
) -> CUresult {
    api(symbol, false, |mut st| {
        tri!(st.stream(per_thread_null(stream, per_thread)));
        tri!(exec_mut(&mut st, exec as usize));
        SUCCESS
    })
}

/// `cuGraphExecDestroy`: with launches in flight, the executable graph's references are released
/// when they have finished.
///
/// # Safety
///
/// None beyond the C contract; the handle is only looked up.
#[cfg_attr(exported = "cuGraphExecDestroy", unsafe(no_mangle))]
pub unsafe extern "C" fn cuGraphExecDestroy(exec: CUgraphExec) -> CUresult {
    api("cuGraphExecDestroy", false, |mut st| {
        let release_now = match st.graphs.execs.get_mut(&(exec as usize)) {
            Some(e) if e.alive => {
                e.alive = false;
                if e.in_flight == 0 {
                    let mut r = std::mem::take(&mut e.objects);
                    r.extend(std::mem::take(&mut e.held));
                    r
                } else {
                    Vec::new()
                }
            }
            _ => {
                st.counters.bad_destroys += 1;
                return INVALID_VALUE;
            }
        };
        st.graphs.live_execs -= 1;
        release_all(&mut st, release_now);
        SUCCESS
    })
}

/// Why `new` cannot update an executable graph of `old`'s nodes: (result, new node, old node).
fn compare(old: &[Node], new: &[Node]) -> Option<(CUgraphExecUpdateResult, usize, usize)> {
    type R = CUgraphExecUpdateResult;
    for (i, n) in new.iter().enumerate() {
        let Some(o) = old.get(i) else {
            return Some((R::CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, n.handle, 0));
        };
        if o.deps != n.deps {
            return Some((
                R::CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED,
                n.handle,
                o.handle,
            ));
        }
        if !o.kind.same_type(&n.kind) {
            return Some((
                R::CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED,
                n.handle,
                o.handle,
            ));
        }
    }
    if old.len() != new.len() {
        return Some((R::CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, 0, 0));
    }
    None
}

/// `cuGraphExecUpdate_v2` (CUDA 12.0): on a refused update, why and the offending nodes in
/// `info`.
///
/// # Safety
///
/// `info` is null or valid for a write.
#[cfg_attr(exported = "cuGraphExecUpdate_v2", unsafe(no_mangle))]
pub unsafe extern "C" fn cuGraphExecUpdate_v2(
    exec: CUgraphExec,
    graph: CUgraph,
    info: *mut CUgraphExecUpdateResultInfo,
) -> CUresult {
    if info.is_null() {
        // Counted and failed like any call.
        return api("cuGraphExecUpdate_v2", false, |_st| INVALID_VALUE);
    }
    // SAFETY: `info` is non-null; the caller's contract makes it writable.
    let write = |out| unsafe { put(info, out) };
    exec_update("cuGraphExecUpdate_v2", exec, graph, write)
}

/// `cuGraphExecUpdate` (the CUDA 10.2 ABI): as `cuGraphExecUpdate_v2`, with the result and the
/// new graph's offending node in two out-pointers (no node of the old graph).
///
/// # Safety
///
/// `error_node` and `result` are each null or valid for a write.
#[cfg_attr(exported = "cuGraphExecUpdate", unsafe(no_mangle))]
pub unsafe extern "C" fn cuGraphExecUpdate(
    exec: CUgraphExec,
    graph: CUgraph,
    error_node: *mut CUgraphNode,
    result: *mut CUgraphExecUpdateResult,
) -> CUresult {
    if error_node.is_null() || result.is_null() {
        return api("cuGraphExecUpdate", false, |_st| INVALID_VALUE);
    }
    let write = |out: CUgraphExecUpdateResultInfo| {
        // SAFETY: both non-null; the caller's contract makes them writable.
        unsafe {
            put(error_node, out.errorNode);
            put(result, out.result);
        }
    };
    exec_update("cuGraphExecUpdate", exec, graph, write)
}

/// The shared body of both ABIs of `cuGraphExecUpdate`; `write` stores the outcome.
fn exec_update(
    symbol: &'static str,
    exec: CUgraphExec,
    graph: CUgraph,
    write: impl FnOnce(CUgraphExecUpdateResultInfo),
) -> CUresult {
    api(symbol, false, |mut st| {
        let new_nodes = tri!(graph_mut(&mut st, graph as usize)).nodes.clone();
        let new_objects = st.graphs.graphs[&(graph as usize)].objects.clone();
        let e = tri!(exec_mut(&mut st, exec as usize));
        if let Some((result, node, from)) = compare(&e.nodes, &new_nodes) {
            let out = CUgraphExecUpdateResultInfo {
                result,
                errorNode: node as CUgraphNode,
                errorFromNode: from as CUgraphNode,
            };
            write(out);
            return CUresult::CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
        }
        e.nodes = new_nodes;
        let old = std::mem::replace(&mut e.objects, new_objects.clone());
        let release_now = if e.in_flight > 0 {
            e.held.extend(old);
            Vec::new()
        } else {
            old
        };
        retain_all(&mut st, &new_objects);
        release_all(&mut st, release_now);
        let out = CUgraphExecUpdateResultInfo {
            result: CUgraphExecUpdateResult::CU_GRAPH_EXEC_UPDATE_SUCCESS,
            errorNode: std::ptr::null_mut(),
            errorFromNode: std::ptr::null_mut(),
        };
        write(out);
        SUCCESS
    })
}

// ---------------------------------------------------------------------------------------------
// User objects

/// `cuUserObjectCreate`: `flags` must be `CU_USER_OBJECT_NO_DESTRUCTOR_SYNC`, the count at
/// least 1; the caller owns the initial references.
///
/// # Safety
///
/// `object` is null or valid for a write; `destroy` must be sound to call once with `ptr` from
/// another thread.
#[cfg_attr(exported = "cuUserObjectCreate", unsafe(no_mangle))]
pub unsafe extern "C" fn cuUserObjectCreate(
    object: *mut CUuserObject,
    ptr: *mut c_void,
    destroy: CUhostFn,
    initial_refcount: c_uint,
    flags: c_uint,
) -> CUresult {
    api("cuUserObjectCreate", false, |mut st| {
        let Some(destroy) = destroy else {
            return INVALID_VALUE;
        };
        if object.is_null() || initial_refcount == 0 || flags != USER_OBJECT_NO_DESTRUCTOR_SYNC {
            return INVALID_VALUE;
        }
        let h = fresh_handle();
        st.graphs.objects.insert(
            h,
            UserObject {
                ptr: ptr as usize,
                destroy,
                refs: u64::from(initial_refcount),
            },
        );
        st.graphs.live_user_objects += 1;
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(object, h as CUuserObject) };
        SUCCESS
    })
}

/// `cuUserObjectRetain`.
///
/// # Safety
///
/// None beyond the C contract; the handle is only looked up.
#[cfg_attr(exported = "cuUserObjectRetain", unsafe(no_mangle))]
pub unsafe extern "C" fn cuUserObjectRetain(object: CUuserObject, count: c_uint) -> CUresult {
    api("cuUserObjectRetain", false, |mut st| {
        if count == 0 {
            return INVALID_VALUE;
        }
        match st.graphs.objects.get_mut(&(object as usize)) {
            Some(o) => {
                o.refs += u64::from(count);
                SUCCESS
            }
            None => {
                st.counters.bad_uses += 1;
                INVALID_VALUE
            }
        }
    })
}

/// `cuUserObjectRelease`: releasing more references than exist is a bad destroy.
///
/// # Safety
///
/// None beyond the C contract; the handle is only looked up.
#[cfg_attr(exported = "cuUserObjectRelease", unsafe(no_mangle))]
pub unsafe extern "C" fn cuUserObjectRelease(object: CUuserObject, count: c_uint) -> CUresult {
    api("cuUserObjectRelease", false, |mut st| {
        tri!(release(&mut st, object as usize, u64::from(count)));
        SUCCESS
    })
}

/// `cuGraphRetainUserObject`: the graph takes `count` references; with
/// `CU_GRAPH_USER_OBJECT_MOVE` they are the caller's, moved.
///
/// # Safety
///
/// None beyond the C contract; the handles are only looked up.
#[cfg_attr(exported = "cuGraphRetainUserObject", unsafe(no_mangle))]
pub unsafe extern "C" fn cuGraphRetainUserObject(
    graph: CUgraph,
    object: CUuserObject,
    count: c_uint,
    flags: c_uint,
) -> CUresult {
    api("cuGraphRetainUserObject", false, |mut st| {
        if count == 0 || flags & !GRAPH_USER_OBJECT_MOVE != 0 {
            return INVALID_VALUE;
        }
        tri!(graph_mut(&mut st, graph as usize));
        let Some(o) = st.graphs.objects.get_mut(&(object as usize)) else {
            st.counters.bad_uses += 1;
            return INVALID_VALUE;
        };
        if flags & GRAPH_USER_OBJECT_MOVE == 0 {
            o.refs += u64::from(count);
        }
        let g = st
            .graphs
            .graphs
            .get_mut(&(graph as usize))
            .expect("checked alive");
        match g.objects.iter_mut().find(|(h, _)| *h == object as usize) {
            Some((_, n)) => *n += u64::from(count),
            None => g.objects.push((object as usize, u64::from(count))),
        }
        SUCCESS
    })
}

/// `cuGraphReleaseUserObject`: gives back references the graph holds.
///
/// # Safety
///
/// None beyond the C contract; the handles are only looked up.
#[cfg_attr(exported = "cuGraphReleaseUserObject", unsafe(no_mangle))]
pub unsafe extern "C" fn cuGraphReleaseUserObject(
    graph: CUgraph,
    object: CUuserObject,
    count: c_uint,
) -> CUresult {
    api("cuGraphReleaseUserObject", false, |mut st| {
        let g = tri!(graph_mut(&mut st, graph as usize));
        let Some(i) = g.objects.iter().position(|(h, _)| *h == object as usize) else {
            return INVALID_VALUE;
        };
        let count = u64::from(count);
        if count == 0 || g.objects[i].1 < count {
            return INVALID_VALUE;
        }
        g.objects[i].1 -= count;
        if g.objects[i].1 == 0 {
            g.objects.swap_remove(i);
        }
        tri!(release(&mut st, object as usize, count));
        SUCCESS
    })
}

// ---------------------------------------------------------------------------------------------
// Control

/// Graphs created (by captures) and not destroyed.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_live_graphs() -> u64 {
    crate::exports::read(|st| st.graphs.live_graphs)
}

/// Executable graphs instantiated and not destroyed.
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_live_graph_execs() -> u64 {
    crate::exports::read(|st| st.graphs.live_execs)
}

/// User objects with references left (their destructor not yet queued).
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_live_user_objects() -> u64 {
    crate::exports::read(|st| st.graphs.live_user_objects)
}

/// User-object destructors that have run, over the life of the process (not reset).
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_user_object_destructors_run() -> u64 {
    crate::exports::read(|st| st.graphs.destructors_run)
}

/// Captures under way (active or invalidated).
#[unsafe(no_mangle)]
pub extern "C" fn cuda_mock_live_captures() -> u64 {
    crate::exports::read(|st| st.graphs.captures.count())
}
