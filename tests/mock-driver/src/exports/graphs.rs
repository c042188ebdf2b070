//! Graphs and executable graphs: their nodes, instantiation, launches, uploads, updates and
//! destruction. The model is `model/graph.rs`.

use std::ffi::{CStr, c_char, c_uint, c_ulonglong};

use cuda_stream_sys::{
    CUDA_GRAPH_INSTANTIATE_PARAMS, CUgraph, CUgraphExec, CUgraphExecUpdateResult,
    CUgraphExecUpdateResultInfo, CUgraphInstantiateResult, CUgraphNode, CUresult, CUstream,
};

use super::call::{INVALID_VALUE, SUCCESS, api, graph_api, per_thread_null, put};
use crate::model::graph::{ExecRec, GraphJob, GraphRec, Node, NodeKind, fresh_handle};
use crate::model::jobs::Work;
use crate::model::records::StreamRef;
use crate::state::State;
use crate::state::worker::{destroy_graph, release_all};

const AUTO_FREE_ON_LAUNCH: u64 = 1;
const UPLOAD: u64 = 2;
const DEVICE_LAUNCH: u64 = 4;
const USE_NODE_PRIORITY: u64 = 8;

/// A live graph, or a bad use.
pub(crate) fn graph_mut(st: &mut State, h: usize) -> Result<&mut GraphRec, CUresult> {
    match st.graphs.graphs.get_mut(&h) {
        Some(g) if g.alive => Ok(g),
        _ => {
            st.counters.bad_uses += 1;
            crate::base::trace_bad_use(file!(), line!());
            Err(INVALID_VALUE)
        }
    }
}

fn exec_mut(st: &mut State, h: usize) -> Result<&mut ExecRec, CUresult> {
    match st.graphs.execs.get_mut(&h) {
        Some(e) if e.alive => Ok(e),
        _ => {
            st.counters.bad_uses += 1;
            crate::base::trace_bad_use(file!(), line!());
            Err(INVALID_VALUE)
        }
    }
}

/// Takes `count` more references to each object.
pub(crate) fn retain_all(st: &mut State, objects: &[(usize, u64)]) {
    for (o, n) in objects {
        if let Some(obj) = st.graphs.objects.get_mut(o) {
            obj.refs += n;
        }
    }
}

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
    graph_api("cuGraphGetNodes", graph as usize, |mut st| {
        if num_nodes.is_null() {
            return INVALID_VALUE;
        }
        let g = tri!(graph_mut(&mut st, graph as usize));
        let handles: Vec<usize> = g.nodes.iter().map(|n| n.handle).collect();
        if !nodes.is_null() {
            // SAFETY: non-null; the caller's contract makes it readable.
            let room = unsafe { num_nodes.read() };
            if room == 0 {
                // An array of no room: the driver (580.159) answers so.
                return INVALID_VALUE;
            }
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
    graph_api("cuGraphDestroy", graph as usize, |mut st| {
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
    graph_api("cuGraphDebugDotPrint", graph as usize, |mut st| {
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
    graph_api("cuGraphInstantiateWithFlags", graph as usize, |mut st| {
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
    graph_api(symbol, graph as usize, |mut st| {
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
    graph_api(symbol, graph as usize, |mut st| {
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
    st.race_graph_launch(s, h, &nodes);
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
        if let Some(rc) = crate::state::capture::on_enqueue(&mut st, s, "child graph") {
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
