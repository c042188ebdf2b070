//! The nodes of a graph, by handle: their type (`cuGraphNodeGetType`) and a host node's function
//! and data (`cuGraphHostNodeGetParams`). The model is `model/graph.rs`: a handle is looked up in
//! every live graph.

use cuda_stream_sys::{CUDA_HOST_NODE_PARAMS, CUgraphNode, CUgraphNodeType, CUresult};

use super::call::{INVALID_VALUE, SUCCESS, api, put};
use crate::model::graph::{Node, NodeKind};
use crate::state::State;

/// The node `h` of a live graph, or a bad use.
fn node(st: &mut State, h: usize) -> Result<Node, CUresult> {
    let found = st
        .graphs
        .graphs
        .values()
        .filter(|g| g.alive)
        .flat_map(|g| g.nodes.iter())
        .find(|n| n.handle == h)
        .cloned();
    found.ok_or_else(|| {
        st.counters.bad_uses += 1;
        crate::base::trace_bad_use(file!(), line!());
        INVALID_VALUE
    })
}

/// `cuGraphNodeGetType`: what the node models (a kernel, memset or copy as such; work the mock
/// does not model, such as a launched graph, is a child graph node).
///
/// # Safety
///
/// `kind` is null or valid for a write.
#[cfg_attr(exported = "cuGraphNodeGetType", unsafe(no_mangle))]
pub unsafe extern "C" fn cuGraphNodeGetType(
    node_h: CUgraphNode,
    kind: *mut CUgraphNodeType,
) -> CUresult {
    api("cuGraphNodeGetType", false, |mut st| {
        if kind.is_null() {
            return INVALID_VALUE;
        }
        let n = tri!(node(&mut st, node_h as usize));
        use CUgraphNodeType as T;
        let t = match &n.kind {
            NodeKind::Host(..) => T::CU_GRAPH_NODE_TYPE_HOST,
            NodeKind::EventRecord(_) => T::CU_GRAPH_NODE_TYPE_EVENT_RECORD,
            NodeKind::EventWait(_) => T::CU_GRAPH_NODE_TYPE_WAIT_EVENT,
            NodeKind::Device(work) => match work.label() {
                "kernel" => T::CU_GRAPH_NODE_TYPE_KERNEL,
                "memset" => T::CU_GRAPH_NODE_TYPE_MEMSET,
                "mem alloc" => T::CU_GRAPH_NODE_TYPE_MEM_ALLOC,
                "free" => T::CU_GRAPH_NODE_TYPE_MEM_FREE,
                _ => T::CU_GRAPH_NODE_TYPE_MEMCPY,
            },
            NodeKind::Opaque(_) => T::CU_GRAPH_NODE_TYPE_GRAPH,
        };
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(kind, t) };
        SUCCESS
    })
}

/// `cuGraphHostNodeGetParams`: a host node's function and user data; another node is
/// `CUDA_ERROR_INVALID_VALUE`.
///
/// # Safety
///
/// `params` is null or valid for a write.
#[cfg_attr(exported = "cuGraphHostNodeGetParams", unsafe(no_mangle))]
pub unsafe extern "C" fn cuGraphHostNodeGetParams(
    node_h: CUgraphNode,
    params: *mut CUDA_HOST_NODE_PARAMS,
) -> CUresult {
    api("cuGraphHostNodeGetParams", false, |mut st| {
        if params.is_null() {
            return INVALID_VALUE;
        }
        let NodeKind::Host(f, data) = tri!(node(&mut st, node_h as usize)).kind else {
            return INVALID_VALUE;
        };
        let p = CUDA_HOST_NODE_PARAMS {
            fn_: Some(f),
            userData: data as *mut std::ffi::c_void,
        };
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(params, p) };
        SUCCESS
    })
}
