//! Stream capture: begin, end, status and info, the thread's capture mode, and event records
//! with flags. The rules are `state/capture.rs`.

use std::collections::HashSet;
use std::ffi::c_uint;
use std::time::Instant;

use cuda_stream_sys::{
    CUevent, CUgraph, CUgraphEdgeData, CUgraphNode, CUresult, CUstream, CUstreamCaptureMode,
    CUstreamCaptureStatus, cuuint64_t,
};

use super::call::{INVALID_VALUE, SUCCESS, api, per_thread_null, put};
use crate::model::capture::{Capture, Member};
use crate::model::graph::NodeKind;
use crate::model::jobs::Work;
use crate::model::records::Key;
use crate::state::State;
use crate::state::capture::{INVALIDATED, UNSUPPORTED, add_node, on_event_record};
use crate::state::threads::{GLOBAL, MODE, RELAXED};
use crate::state::worker::destroy_graph;

const EVENT_RECORD_EXTERNAL: c_uint = 1;

/// `cuStreamBeginCapture_v2` (CUDA 10.1): begins a capture in `mode`.
///
/// # Safety
///
/// None beyond the C contract; the handle is only looked up.
#[cfg_attr(exported = "cuStreamBeginCapture_v2", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamBeginCapture_v2(
    h_stream: CUstream,
    mode: CUstreamCaptureMode,
) -> CUresult {
    begin_capture("cuStreamBeginCapture_v2", h_stream, mode, false)
}

/// `cuStreamBeginCapture_v2_ptsz`: as `cuStreamBeginCapture_v2`, with the null stream meaning
/// the calling thread's per-thread default stream.
///
/// # Safety
///
/// None beyond the C contract; the handle is only looked up.
#[cfg_attr(exported = "cuStreamBeginCapture_v2_ptsz", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamBeginCapture_v2_ptsz(
    h_stream: CUstream,
    mode: CUstreamCaptureMode,
) -> CUresult {
    begin_capture("cuStreamBeginCapture_v2_ptsz", h_stream, mode, true)
}

/// `cuStreamBeginCapture` (the CUDA 10.0 ABI, with no mode): a global-mode capture.
///
/// # Safety
///
/// None beyond the C contract; the handle is only looked up.
#[cfg_attr(exported = "cuStreamBeginCapture", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamBeginCapture(h_stream: CUstream) -> CUresult {
    let global = CUstreamCaptureMode(GLOBAL);
    begin_capture("cuStreamBeginCapture", h_stream, global, false)
}

/// `cuStreamBeginCapture_ptsz` (the CUDA 10.0 ABI): as `cuStreamBeginCapture`, with the null
/// stream meaning the calling thread's per-thread default stream.
///
/// # Safety
///
/// None beyond the C contract; the handle is only looked up.
#[cfg_attr(exported = "cuStreamBeginCapture_ptsz", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamBeginCapture_ptsz(h_stream: CUstream) -> CUresult {
    let global = CUstreamCaptureMode(GLOBAL);
    begin_capture("cuStreamBeginCapture_ptsz", h_stream, global, true)
}

fn begin_capture(
    symbol: &'static str,
    h_stream: CUstream,
    mode: CUstreamCaptureMode,
    per_thread: bool,
) -> CUresult {
    api(symbol, false, |mut st| {
        let s = tri!(st.stream(per_thread_null(h_stream, per_thread)));
        if mode.0 > RELAXED {
            return INVALID_VALUE;
        }
        if matches!(s.key, Key::Legacy(_)) {
            return UNSUPPORTED;
        }
        if st.graphs.captures.capture_of(s.key).is_some() {
            return CUresult::CUDA_ERROR_ILLEGAL_STATE;
        }
        let graph = st.graphs.new_graph();
        let caps = &mut st.graphs.captures;
        caps.next_id += 1;
        let id = caps.next_id;
        caps.captures.insert(
            id,
            Capture {
                origin: s.key,
                graph,
                mode: mode.0,
                thread: std::thread::current().id(),
                invalidated: false,
                members: vec![s.key],
            },
        );
        caps.members.insert(
            s.key,
            Member {
                capture: id,
                tail: Vec::new(),
                tail_handles: Vec::new(),
            },
        );
        SUCCESS
    })
}

/// Whether the capture's every stream is joined: each tail node is one the origin's tail depends
/// on (or is).
fn joined(st: &State, c: &Capture) -> bool {
    let caps = &st.graphs.captures;
    let nodes = &st.graphs.graphs[&c.graph].nodes;
    let mut seen: HashSet<usize> = HashSet::new();
    let mut todo: Vec<usize> = caps.members[&c.origin].tail.clone();
    while let Some(n) = todo.pop() {
        if seen.insert(n) {
            todo.extend(nodes[n].deps.iter().copied());
        }
    }
    c.members
        .iter()
        .filter(|k| **k != c.origin)
        .all(|k| caps.members[k].tail.iter().all(|t| seen.contains(t)))
}

/// `cuStreamEndCapture`.
///
/// # Safety
///
/// `ph_graph` is null or valid for a write.
#[cfg_attr(exported = "cuStreamEndCapture", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamEndCapture(
    h_stream: CUstream,
    ph_graph: *mut CUgraph,
) -> CUresult {
    end_capture("cuStreamEndCapture", h_stream, ph_graph, false)
}

/// `cuStreamEndCapture_ptsz`: as `cuStreamEndCapture`, with the null stream meaning the calling
/// thread's per-thread default stream.
///
/// # Safety
///
/// `ph_graph` is null or valid for a write.
#[cfg_attr(exported = "cuStreamEndCapture_ptsz", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamEndCapture_ptsz(
    h_stream: CUstream,
    ph_graph: *mut CUgraph,
) -> CUresult {
    end_capture("cuStreamEndCapture_ptsz", h_stream, ph_graph, true)
}

fn end_capture(
    symbol: &'static str,
    h_stream: CUstream,
    ph_graph: *mut CUgraph,
    per_thread: bool,
) -> CUresult {
    api(symbol, false, |mut st| {
        if ph_graph.is_null() {
            return INVALID_VALUE;
        }
        let s = tri!(st.stream(per_thread_null(h_stream, per_thread)));
        let Some(id) = st.graphs.captures.capture_of(s.key) else {
            return CUresult::CUDA_ERROR_ILLEGAL_STATE;
        };
        let c = &st.graphs.captures.captures[&id];
        if c.origin != s.key {
            return CUresult::CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
        }
        if c.mode != RELAXED && c.thread != std::thread::current().id() {
            return CUresult::CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
        }
        let rc = if c.invalidated {
            INVALIDATED
        } else if !joined(&st, c) {
            CUresult::CUDA_ERROR_STREAM_CAPTURE_UNJOINED
        } else {
            SUCCESS
        };
        let c = st.graphs.captures.captures.remove(&id).expect("under way");
        for k in &c.members {
            st.graphs.captures.members.remove(k);
        }
        st.graphs.captures.events.retain(|_, (cap, _)| *cap != id);
        let out = if rc == SUCCESS {
            c.graph
        } else {
            let _ = destroy_graph(&mut st, c.graph);
            0
        };
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(ph_graph, out as CUgraph) };
        rc
    })
}

fn status_of(st: &State, key: Key) -> (CUstreamCaptureStatus, u64, usize) {
    match st.graphs.captures.capture_of(key) {
        None => (CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE, 0, 0),
        Some(id) => {
            let c = &st.graphs.captures.captures[&id];
            let status = if c.invalidated {
                CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_INVALIDATED
            } else {
                CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE
            };
            (status, id, c.graph)
        }
    }
}

/// `cuStreamIsCapturing`.
///
/// # Safety
///
/// `status` is null or valid for a write.
#[cfg_attr(exported = "cuStreamIsCapturing", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamIsCapturing(
    h_stream: CUstream,
    status: *mut CUstreamCaptureStatus,
) -> CUresult {
    is_capturing("cuStreamIsCapturing", h_stream, status, false)
}

/// `cuStreamIsCapturing_ptsz`: as `cuStreamIsCapturing`, with the null stream meaning the
/// calling thread's per-thread default stream.
///
/// # Safety
///
/// `status` is null or valid for a write.
#[cfg_attr(exported = "cuStreamIsCapturing_ptsz", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamIsCapturing_ptsz(
    h_stream: CUstream,
    status: *mut CUstreamCaptureStatus,
) -> CUresult {
    is_capturing("cuStreamIsCapturing_ptsz", h_stream, status, true)
}

fn is_capturing(
    symbol: &'static str,
    h_stream: CUstream,
    status: *mut CUstreamCaptureStatus,
    per_thread: bool,
) -> CUresult {
    api(symbol, false, |mut st| {
        if status.is_null() {
            return INVALID_VALUE;
        }
        let s = tri!(st.stream(per_thread_null(h_stream, per_thread)));
        let (v, _, _) = status_of(&st, s.key);
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(status, v) };
        SUCCESS
    })
}

/// What `cuStreamGetCaptureInfo` writes, each output null when not wanted (the ABIs differ in
/// which outputs they have).
struct InfoOut {
    status: *mut CUstreamCaptureStatus,
    id: *mut cuuint64_t,
    graph: *mut CUgraph,
    dependencies: *mut *const CUgraphNode,
    edge_data: *mut *const CUgraphEdgeData,
    num_dependencies: *mut usize,
}

impl InfoOut {
    fn status_and_id(status: *mut CUstreamCaptureStatus, id: *mut cuuint64_t) -> InfoOut {
        InfoOut {
            status,
            id,
            graph: std::ptr::null_mut(),
            dependencies: std::ptr::null_mut(),
            edge_data: std::ptr::null_mut(),
            num_dependencies: std::ptr::null_mut(),
        }
    }
}

/// The shared body of every ABI of `cuStreamGetCaptureInfo`: the status, and for a capture its
/// id, graph and the stream's current dependencies (no edge data). Every output but the status
/// may be null.
///
/// # Safety
///
/// Each pointer of `out` is null or valid for a write.
unsafe fn capture_info(
    symbol: &'static str,
    h_stream: CUstream,
    per_thread: bool,
    out: InfoOut,
) -> CUresult {
    api(symbol, false, |mut st| {
        if out.status.is_null() {
            return INVALID_VALUE;
        }
        let s = tri!(st.stream(per_thread_null(h_stream, per_thread)));
        let (status, id, graph) = status_of(&st, s.key);
        let (deps, n) = match st.graphs.captures.members.get(&s.key) {
            Some(m) => (
                m.tail_handles.as_ptr().cast::<CUgraphNode>(),
                m.tail_handles.len(),
            ),
            None => (std::ptr::null(), 0),
        };
        // SAFETY: each written pointer is non-null; the caller's contract makes it writable. The
        // dependency array lives until the stream's next capture call, as the driver promises.
        unsafe {
            put(out.status, status);
            if !out.id.is_null() {
                put(out.id, id);
            }
            if !out.graph.is_null() {
                put(out.graph, graph as CUgraph);
            }
            if !out.dependencies.is_null() {
                put(out.dependencies, deps);
            }
            if !out.edge_data.is_null() {
                put(out.edge_data, std::ptr::null());
            }
            if !out.num_dependencies.is_null() {
                put(out.num_dependencies, n);
            }
        }
        SUCCESS
    })
}

/// `cuStreamGetCaptureInfo_v3` (CUDA 12.3): the status, id, graph, dependencies and their edge
/// data (always none here).
///
/// # Safety
///
/// Each pointer is null or valid for a write.
#[cfg_attr(exported = "cuStreamGetCaptureInfo_v3", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamGetCaptureInfo_v3(
    h_stream: CUstream,
    status_out: *mut CUstreamCaptureStatus,
    id_out: *mut cuuint64_t,
    graph_out: *mut CUgraph,
    dependencies_out: *mut *const CUgraphNode,
    edge_data_out: *mut *const CUgraphEdgeData,
    num_dependencies_out: *mut usize,
) -> CUresult {
    let out = InfoOut {
        status: status_out,
        id: id_out,
        graph: graph_out,
        dependencies: dependencies_out,
        edge_data: edge_data_out,
        num_dependencies: num_dependencies_out,
    };
    // SAFETY: the caller's promise.
    unsafe { capture_info("cuStreamGetCaptureInfo_v3", h_stream, false, out) }
}

/// `cuStreamGetCaptureInfo_v3_ptsz`: as `cuStreamGetCaptureInfo_v3`, with the null stream
/// meaning the calling thread's per-thread default stream.
///
/// # Safety
///
/// Each pointer is null or valid for a write.
#[cfg_attr(exported = "cuStreamGetCaptureInfo_v3_ptsz", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamGetCaptureInfo_v3_ptsz(
    h_stream: CUstream,
    status_out: *mut CUstreamCaptureStatus,
    id_out: *mut cuuint64_t,
    graph_out: *mut CUgraph,
    dependencies_out: *mut *const CUgraphNode,
    edge_data_out: *mut *const CUgraphEdgeData,
    num_dependencies_out: *mut usize,
) -> CUresult {
    let out = InfoOut {
        status: status_out,
        id: id_out,
        graph: graph_out,
        dependencies: dependencies_out,
        edge_data: edge_data_out,
        num_dependencies: num_dependencies_out,
    };
    // SAFETY: the caller's promise.
    unsafe { capture_info("cuStreamGetCaptureInfo_v3_ptsz", h_stream, true, out) }
}

/// `cuStreamGetCaptureInfo_v2` (CUDA 11.3): as `_v3`, without the edge data.
///
/// # Safety
///
/// Each pointer is null or valid for a write.
#[cfg_attr(exported = "cuStreamGetCaptureInfo_v2", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamGetCaptureInfo_v2(
    h_stream: CUstream,
    status_out: *mut CUstreamCaptureStatus,
    id_out: *mut cuuint64_t,
    graph_out: *mut CUgraph,
    dependencies_out: *mut *const CUgraphNode,
    num_dependencies_out: *mut usize,
) -> CUresult {
    let out = InfoOut {
        status: status_out,
        id: id_out,
        graph: graph_out,
        dependencies: dependencies_out,
        edge_data: std::ptr::null_mut(),
        num_dependencies: num_dependencies_out,
    };
    // SAFETY: the caller's promise.
    unsafe { capture_info("cuStreamGetCaptureInfo_v2", h_stream, false, out) }
}

/// `cuStreamGetCaptureInfo_v2_ptsz`: as `cuStreamGetCaptureInfo_v2`, with the null stream
/// meaning the calling thread's per-thread default stream.
///
/// # Safety
///
/// Each pointer is null or valid for a write.
#[cfg_attr(exported = "cuStreamGetCaptureInfo_v2_ptsz", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamGetCaptureInfo_v2_ptsz(
    h_stream: CUstream,
    status_out: *mut CUstreamCaptureStatus,
    id_out: *mut cuuint64_t,
    graph_out: *mut CUgraph,
    dependencies_out: *mut *const CUgraphNode,
    num_dependencies_out: *mut usize,
) -> CUresult {
    let out = InfoOut {
        status: status_out,
        id: id_out,
        graph: graph_out,
        dependencies: dependencies_out,
        edge_data: std::ptr::null_mut(),
        num_dependencies: num_dependencies_out,
    };
    // SAFETY: the caller's promise.
    unsafe { capture_info("cuStreamGetCaptureInfo_v2_ptsz", h_stream, true, out) }
}

/// `cuStreamGetCaptureInfo` (the CUDA 10.1 ABI): the status and the capture's id only.
///
/// # Safety
///
/// Each pointer is null or valid for a write.
#[cfg_attr(exported = "cuStreamGetCaptureInfo", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamGetCaptureInfo(
    h_stream: CUstream,
    status_out: *mut CUstreamCaptureStatus,
    id_out: *mut cuuint64_t,
) -> CUresult {
    let out = InfoOut::status_and_id(status_out, id_out);
    // SAFETY: the caller's promise.
    unsafe { capture_info("cuStreamGetCaptureInfo", h_stream, false, out) }
}

/// `cuStreamGetCaptureInfo_ptsz` (the CUDA 10.1 ABI): as `cuStreamGetCaptureInfo`, with the null
/// stream meaning the calling thread's per-thread default stream.
///
/// # Safety
///
/// Each pointer is null or valid for a write.
#[cfg_attr(exported = "cuStreamGetCaptureInfo_ptsz", unsafe(no_mangle))]
pub unsafe extern "C" fn cuStreamGetCaptureInfo_ptsz(
    h_stream: CUstream,
    status_out: *mut CUstreamCaptureStatus,
    id_out: *mut cuuint64_t,
) -> CUresult {
    let out = InfoOut::status_and_id(status_out, id_out);
    // SAFETY: the caller's promise.
    unsafe { capture_info("cuStreamGetCaptureInfo_ptsz", h_stream, true, out) }
}

/// `cuThreadExchangeStreamCaptureMode`: swaps the calling thread's mode.
///
/// # Safety
///
/// `mode` is null or valid for a read and a write.
#[cfg_attr(exported = "cuThreadExchangeStreamCaptureMode", unsafe(no_mangle))]
pub unsafe extern "C" fn cuThreadExchangeStreamCaptureMode(
    mode: *mut CUstreamCaptureMode,
) -> CUresult {
    api("cuThreadExchangeStreamCaptureMode", false, |_st| {
        if mode.is_null() {
            return INVALID_VALUE;
        }
        // SAFETY: non-null; the caller's contract makes it readable.
        let new = unsafe { mode.read() };
        if new.0 > RELAXED {
            return INVALID_VALUE;
        }
        let old = MODE.try_with(|m| m.replace(new.0)).unwrap_or(GLOBAL);
        // SAFETY: non-null; the caller's contract makes it writable.
        unsafe { put(mode, CUstreamCaptureMode(old)) };
        SUCCESS
    })
}

/// `cuEventRecordWithFlags`: flags 0 is `cuEventRecord`; `CU_EVENT_RECORD_EXTERNAL` adds an event
/// record node to a capture and is invalid outside one.
///
/// # Safety
///
/// None beyond the C contract; the handles are only looked up.
#[cfg_attr(exported = "cuEventRecordWithFlags", unsafe(no_mangle))]
pub unsafe extern "C" fn cuEventRecordWithFlags(
    h_event: CUevent,
    h_stream: CUstream,
    flags: c_uint,
) -> CUresult {
    record_with_flags("cuEventRecordWithFlags", h_event, h_stream, flags, false)
}

/// `cuEventRecordWithFlags_ptsz`: as `cuEventRecordWithFlags`, with the null stream meaning the
/// calling thread's per-thread default stream.
///
/// # Safety
///
/// None beyond the C contract; the handles are only looked up.
#[cfg_attr(exported = "cuEventRecordWithFlags_ptsz", unsafe(no_mangle))]
pub unsafe extern "C" fn cuEventRecordWithFlags_ptsz(
    h_event: CUevent,
    h_stream: CUstream,
    flags: c_uint,
) -> CUresult {
    record_with_flags(
        "cuEventRecordWithFlags_ptsz",
        h_event,
        h_stream,
        flags,
        true,
    )
}

fn record_with_flags(
    symbol: &'static str,
    h_event: CUevent,
    h_stream: CUstream,
    flags: c_uint,
    per_thread: bool,
) -> CUresult {
    api(symbol, false, |mut st| {
        let (ctx, _, core) = tri!(st.event(h_event as usize));
        let s = tri!(st.stream(per_thread_null(h_stream, per_thread)));
        if flags & !EVENT_RECORD_EXTERNAL != 0 {
            return INVALID_VALUE;
        }
        if s.ctx != ctx {
            return CUresult::CUDA_ERROR_INVALID_HANDLE;
        }
        if flags & EVENT_RECORD_EXTERNAL != 0 {
            if st.graphs.captures.capture_of(s.key).is_none() {
                return INVALID_VALUE;
            }
            tri!(add_node(&mut st, s.key, NodeKind::EventRecord(core)));
            return SUCCESS;
        }
        if let Some(rc) = on_event_record(&mut st, s, core) {
            return rc;
        }
        st.race_record(s, core);
        let record = if st.idle(s.key) {
            (0, Some(Instant::now()))
        } else {
            (tri!(st.enqueue(s, Work::Marker(core))), None)
        };
        if let Some(c) = st.cores.get_mut(&core) {
            c.record = Some(record);
        }
        SUCCESS
    })
}
