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
//!   `cuStreamSynchronize`, `cuEventQuery`, `cuEventSynchronize`, `cuCtxSynchronize`; and
//!   `cuMemPoolSetAccess`) follow the
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

use std::ffi::c_uint;

use cuda_stream_sys::CUresult;

use super::store::State;
use super::threads::{GLOBAL, RELAXED, thread_mode};
use crate::model::capture::Member;
use crate::model::device::DeviceWork;
use crate::model::graph::{Node, NodeKind, fresh_handle};
use crate::model::records::{HostFn, Key, Object, StreamRef};

const SUCCESS: CUresult = CUresult::CUDA_SUCCESS;
const INVALID_VALUE: CUresult = CUresult::CUDA_ERROR_INVALID_VALUE;
pub(crate) const UNSUPPORTED: CUresult = CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
pub(crate) const INVALIDATED: CUresult = CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
pub(crate) const ISOLATION: CUresult = CUresult::CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
const EVENT_WAIT_EXTERNAL: c_uint = 1;

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
pub(crate) fn add_node(st: &mut State, key: Key, kind: NodeKind) -> Result<(), CUresult> {
    let caps = &st.graphs.captures;
    let m = caps.members.get(&key).expect("a member");
    let c = &caps.captures[&m.capture];
    if c.invalidated {
        return Err(INVALIDATED);
    }
    let graph = c.graph;
    let lane = c.members.iter().position(|k| *k == key).unwrap_or(0);
    let deps = m.tail.clone();
    let handle = fresh_handle();
    let g = st
        .graphs
        .graphs
        .get_mut(&graph)
        .expect("the capture's graph");
    g.nodes.push(Node {
        handle,
        kind,
        deps,
        lane,
    });
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
pub(crate) fn on_device_work(st: &mut State, s: StreamRef, work: &DeviceWork) -> Option<CUresult> {
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

/// `cuStreamAddCallback` (or `cuMemcpyPeerAsync`) on `s`: not supported during capture.
pub(crate) fn on_callback(st: &mut State, s: StreamRef) -> Option<CUresult> {
    let id = st.graphs.captures.capture_of(s.key)?;
    st.graphs.captures.invalidate(id);
    Some(UNSUPPORTED)
}

/// A potentially unsafe call that touches no stream (`cuMemAlloc`, `cuMemFree`, `cuMemHostAlloc`,
/// `cuMemFreeHost`; `cuMemPoolSetAccess`: refused on a
/// capturing thread on two H200s, driver 580): `Some(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)` as
/// [`prohibited`] says.
pub(crate) fn on_unsafe_call(st: &mut State) -> Option<CUresult> {
    prohibited(st)
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
