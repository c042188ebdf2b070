//! The model of stream capture and its exports.
//!
//! - `cuStreamBeginCapture_v2` (and its CUDA 10.0 ABI `cuStreamBeginCapture`, which has no mode
//!   and captures in global mode) puts a created stream (or a per-thread default stream) into a new
//!   capture with a new graph; the legacy stream is refused (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`),
//!   a stream already in a capture is `CUDA_ERROR_ILLEGAL_STATE`. Each stream of a capture has a
//!   *tail*: the nodes its next work depends on.
//! - While a stream is capturing, `cuLaunchHostFunc` adds a host node, `cuEventRecord` captures
//!   the event (it stands for the stream's tail), `cuEventRecordWithFlags(EXTERNAL)` adds an event
//!   record node, `cuStreamWaitEvent` on a captured event of the same capture merges the event's
//!   nodes into the tail, and with `CU_EVENT_WAIT_EXTERNAL` adds an event wait node. Kernel
//!   launches, memsets and copies add device nodes through [`on_device_work`], which every launch
//!   of the graph runs again (host-to-device copies read the host memory then, device-to-host
//!   copies write it then); graph launches add opaque nodes through [`on_enqueue`].
//!   A stream that is not capturing and waits on a captured event joins that capture (a fork).
//! - Illegal while capturing, as the driver's documentation says: querying or synchronising a
//!   capturing stream, a captured event, or the context of a capturing stream, and
//!   `cuStreamAddCallback` on a capturing stream: each returns
//!   `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` and invalidates the capture. Waiting on an event
//!   that is not part of the capture without `CU_EVENT_WAIT_EXTERNAL`, or on one of another
//!   capture, is `CUDA_ERROR_STREAM_CAPTURE_ISOLATION` and invalidates the capture. Work enqueued
//!   into an invalidated capture gets `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`.
//! - "Potentially unsafe" calls (the mock's polling and synchronising calls: `cuStreamQuery`,
//!   `cuStreamSynchronize`, `cuEventQuery`, `cuEventSynchronize`, `cuCtxSynchronize`) follow the
//!   capture modes: a thread whose mode (`cuThreadExchangeStreamCaptureMode`, default global) is
//!   not relaxed may not make them while it has a capture of its own that was not begun relaxed;
//!   a thread in global mode may not make them while any thread has a global-mode capture. Such a
//!   call invalidates those captures and returns `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`.
//! - `cuStreamEndCapture` on the capture's origin stream (else `CUDA_ERROR_STREAM_CAPTURE_UNMATCHED`,
//!   or `CUDA_ERROR_ILLEGAL_STATE` when not capturing), from the thread that began it unless it
//!   was begun relaxed (else `CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD`), takes every stream of the
//!   capture out of capture mode and returns the graph; or, for an invalidated capture or one
//!   with a stream whose tail the origin's tail does not depend on, destroys the graph and returns
//!   `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED` / `_UNJOINED` with a null graph.

// The driver functions have the exported C names, also where a flavour does not export them.
#![allow(non_snake_case)]

use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::ffi::c_uint;
use std::thread::ThreadId;
use std::time::Instant;

use cuda_sys::{
    CUevent, CUgraph, CUgraphEdgeData, CUgraphNode, CUresult, CUstream, CUstreamCaptureMode,
    CUstreamCaptureStatus, cuuint64_t,
};

use crate::exports::{api, per_thread_null, put};
use crate::graph::{HostFn, Node, NodeKind, destroy_graph};
use crate::state::{Key, Object, State, StreamRef, Work};

const SUCCESS: CUresult = CUresult::CUDA_SUCCESS;
const INVALID_VALUE: CUresult = CUresult::CUDA_ERROR_INVALID_VALUE;
const UNSUPPORTED: CUresult = CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
const INVALIDATED: CUresult = CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
const ISOLATION: CUresult = CUresult::CUDA_ERROR_STREAM_CAPTURE_ISOLATION;

const GLOBAL: u32 = 0;
const RELAXED: u32 = 2;
const EVENT_RECORD_EXTERNAL: c_uint = 1;
const EVENT_WAIT_EXTERNAL: c_uint = 1;

/// `?` for functions that return a `CUresult`.
macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(code) => return code,
        }
    };
}

thread_local! {
    /// This thread's capture interaction mode (`cuThreadExchangeStreamCaptureMode`).
    static MODE: Cell<u32> = const { Cell::new(GLOBAL) };
}

fn thread_mode() -> u32 {
    MODE.try_with(Cell::get).unwrap_or(GLOBAL)
}

#[derive(Debug)]
struct Capture {
    origin: Key,
    graph: usize,
    mode: u32,
    thread: ThreadId,
    invalidated: bool,
    members: Vec<Key>,
}

#[derive(Debug)]
struct Member {
    capture: u64,
    /// Indices of the nodes the stream's next work depends on.
    tail: Vec<usize>,
    /// Their handles, for `cuStreamGetCaptureInfo`'s dependency array.
    tail_handles: Vec<usize>,
}

/// The captures under way, which streams are in them, and which events they captured.
#[derive(Debug, Default)]
pub(crate) struct Captures {
    captures: HashMap<u64, Capture>,
    members: HashMap<Key, Member>,
    /// Captured events (by record state): the capture and the nodes the record stands for.
    events: HashMap<u64, (u64, Vec<usize>)>,
    next_id: u64,
}

impl Captures {
    /// Whether a capture under way owns `graph`.
    pub(crate) fn owns_graph(&self, graph: usize) -> bool {
        self.captures.values().any(|c| c.graph == graph)
    }

    pub(crate) fn count(&self) -> u64 {
        self.captures.len() as u64
    }

    fn invalidate(&mut self, id: u64) {
        if let Some(c) = self.captures.get_mut(&id) {
            c.invalidated = true;
        }
    }

    /// The capture `key` is in, if any.
    fn capture_of(&self, key: Key) -> Option<u64> {
        self.members.get(&key).map(|m| m.capture)
    }

    /// The capture an event's record was captured in, if that capture is still under way.
    fn event_capture(&self, core: u64) -> Option<(u64, Vec<usize>)> {
        self.events
            .get(&core)
            .filter(|(id, _)| self.captures.contains_key(id))
            .cloned()
    }

    fn set_tail(&mut self, key: Key, tail: Vec<usize>, handles: Vec<usize>) {
        if let Some(m) = self.members.get_mut(&key) {
            m.tail = tail;
            m.tail_handles = handles;
        }
    }
}

/// The handles of a graph's nodes at `indices`.
fn handles(st: &State, graph: usize, indices: &[usize]) -> Vec<usize> {
    let nodes = &st.graphs.graphs[&graph].nodes;
    indices.iter().map(|&i| nodes[i].handle).collect()
}

/// The context of created stream `h`.
fn stream_ctx(st: &State, h: usize) -> Option<usize> {
    match st.objects.get(&h) {
        Some(Object::Stream(s)) => Some(s.ctx),
        _ => None,
    }
}

/// Adds a node of `kind` after `key`'s tail; the node becomes the tail. `Err` with
/// `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED` if the capture was invalidated.
fn add_node(st: &mut State, key: Key, kind: NodeKind) -> Result<(), CUresult> {
    let caps = &st.graphs.captures;
    let m = caps.members.get(&key).expect("a member");
    let c = &caps.captures[&m.capture];
    if c.invalidated {
        return Err(INVALIDATED);
    }
    let graph = c.graph;
    let deps = m.tail.clone();
    let handle = crate::graph::fresh_handle();
    let g = st
        .graphs
        .graphs
        .get_mut(&graph)
        .expect("the capture's graph");
    g.nodes.push(Node { handle, kind, deps });
    let index = g.nodes.len() - 1;
    st.graphs.captures.set_tail(key, vec![index], vec![handle]);
    Ok(())
}

/// For the potentially unsafe calls: `Some(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)` if a capture
/// prohibits the calling thread from making them (which invalidates that capture).
fn prohibited(st: &mut State) -> Option<CUresult> {
    let mode = thread_mode();
    if mode == RELAXED {
        return None;
    }
    let me = std::thread::current().id();
    let hit: Vec<u64> = st
        .graphs
        .captures
        .captures
        .iter()
        .filter(|(_, c)| {
            c.mode != RELAXED && (c.thread == me || (mode == GLOBAL && c.mode == GLOBAL))
        })
        .map(|(id, _)| *id)
        .collect();
    if hit.is_empty() {
        return None;
    }
    for id in hit {
        st.graphs.captures.invalidate(id);
    }
    Some(UNSUPPORTED)
}

/// An enqueue of unmodelled work (`what`: a kernel, a memset, a copy, a graph launch) on `s`:
/// `Some(result)` if `s` is capturing (the work became an opaque node), `None` to run it.
pub(crate) fn on_enqueue(st: &mut State, s: StreamRef, what: &'static str) -> Option<CUresult> {
    st.graphs.captures.capture_of(s.key)?;
    Some(match add_node(st, s.key, NodeKind::Opaque(what)) {
        Ok(()) => SUCCESS,
        Err(rc) => rc,
    })
}

/// A kernel launch, memset or copy on `s` (`exports/kernels.rs`, `exports/memory.rs`):
/// `Some(result)` if `s` is capturing (the work became a node, run on every launch of the
/// graph), `None` to run it now.
pub(crate) fn on_device_work(
    st: &mut State,
    s: StreamRef,
    work: &crate::device_model::DeviceWork,
) -> Option<CUresult> {
    st.graphs.captures.capture_of(s.key)?;
    Some(match add_node(st, s.key, NodeKind::Device(work.clone())) {
        Ok(()) => SUCCESS,
        Err(rc) => rc,
    })
}

/// `cuLaunchHostFunc` on `s`: a host node if `s` is capturing.
pub(crate) fn on_host_fn(st: &mut State, s: StreamRef, f: HostFn, data: usize) -> Option<CUresult> {
    st.graphs.captures.capture_of(s.key)?;
    Some(match add_node(st, s.key, NodeKind::Host(f, data)) {
        Ok(()) => SUCCESS,
        Err(rc) => rc,
    })
}

/// `cuStreamAddCallback` on `s`: not supported during capture.
pub(crate) fn on_callback(st: &mut State, s: StreamRef) -> Option<CUresult> {
    let id = st.graphs.captures.capture_of(s.key)?;
    st.graphs.captures.invalidate(id);
    Some(UNSUPPORTED)
}

/// `cuStreamQuery` / `cuStreamSynchronize` on `s`.
pub(crate) fn on_stream_poll(st: &mut State, s: StreamRef) -> Option<CUresult> {
    if let Some(id) = st.graphs.captures.capture_of(s.key) {
        st.graphs.captures.invalidate(id);
        return Some(UNSUPPORTED);
    }
    prohibited(st)
}

/// `cuEventQuery` / `cuEventSynchronize` on the event of record state `core`.
pub(crate) fn on_event_poll(st: &mut State, core: u64) -> Option<CUresult> {
    if let Some((id, _)) = st.graphs.captures.event_capture(core) {
        st.graphs.captures.invalidate(id);
        return Some(UNSUPPORTED);
    }
    prohibited(st)
}

/// `cuCtxSynchronize` in `ctx`: illegal while a stream of the context is capturing.
pub(crate) fn on_ctx_sync(st: &mut State, ctx: usize) -> Option<CUresult> {
    let in_ctx: Vec<u64> = st
        .graphs
        .captures
        .members
        .iter()
        .filter(|(key, _)| match key {
            Key::Stream(h) => stream_ctx(st, *h) == Some(ctx),
            Key::Legacy(c) | Key::PerThread(c, _) => *c == ctx,
        })
        .map(|(_, m)| m.capture)
        .collect();
    if !in_ctx.is_empty() {
        for id in in_ctx {
            st.graphs.captures.invalidate(id);
        }
        return Some(UNSUPPORTED);
    }
    prohibited(st)
}

/// `cuEventRecord` of `core` on `s`: captured if `s` is capturing; otherwise the event is no
/// longer a captured one and the normal record follows (`None`).
pub(crate) fn on_event_record(st: &mut State, s: StreamRef, core: u64) -> Option<CUresult> {
    let Some(id) = st.graphs.captures.capture_of(s.key) else {
        st.graphs.captures.events.remove(&core);
        return None;
    };
    if st.graphs.captures.captures[&id].invalidated {
        return Some(INVALIDATED);
    }
    let tail = st.graphs.captures.members[&s.key].tail.clone();
    st.graphs.captures.events.insert(core, (id, tail));
    Some(SUCCESS)
}

/// `cuStreamWaitEvent(s, event of core, flags)`: the capture rules, or `None` for a plain wait.
pub(crate) fn on_wait(st: &mut State, s: StreamRef, core: u64, flags: c_uint) -> Option<CUresult> {
    let caps = &st.graphs.captures;
    let stream_cap = caps.capture_of(s.key);
    let event_cap = caps.event_capture(core);
    let external = flags & EVENT_WAIT_EXTERNAL != 0;
    match (stream_cap, event_cap) {
        (None, None) if external => Some(INVALID_VALUE),
        (None, None) => None,
        // A fork: the stream joins the event's capture, after the captured record.
        (None, Some((id, nodes))) => {
            if caps.captures[&id].invalidated {
                return Some(INVALIDATED);
            }
            let hs = handles(st, caps.captures[&id].graph, &nodes);
            let caps = &mut st.graphs.captures;
            caps.members.insert(
                s.key,
                Member {
                    capture: id,
                    tail: nodes,
                    tail_handles: hs,
                },
            );
            caps.captures
                .get_mut(&id)
                .expect("under way")
                .members
                .push(s.key);
            Some(SUCCESS)
        }
        (Some(id), _) if caps.captures[&id].invalidated => Some(INVALIDATED),
        (Some(_), _) if external => Some(match add_node(st, s.key, NodeKind::EventWait(core)) {
            Ok(()) => SUCCESS,
            Err(rc) => rc,
        }),
        (Some(id), Some((eid, nodes))) if eid == id => {
            let mut tail = caps.members[&s.key].tail.clone();
            for n in nodes {
                if !tail.contains(&n) {
                    tail.push(n);
                }
            }
            let hs = handles(st, caps.captures[&id].graph, &tail);
            st.graphs.captures.set_tail(s.key, tail, hs);
            Some(SUCCESS)
        }
        // A wait on an event of no capture, or of another one, would cross the boundary.
        (Some(id), _) => {
            st.graphs.captures.invalidate(id);
            Some(ISOLATION)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Exports

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
