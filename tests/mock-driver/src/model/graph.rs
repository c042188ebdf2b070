//! The model of graphs, executable graphs and user objects, and their exports.
//!
//! - A graph is a list of nodes in capture order (so every node's dependencies come before it):
//!   host functions, event record and event wait nodes, and opaque nodes (kernels, memsets,
//!   memcpys and child graphs, which the mock does not run). Graphs come from captures.
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

use std::collections::HashMap;

use super::capture::Captures;
use super::device::DeviceWork;
use super::records::HostFn;

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
    /// A kernel, memset or copy (`model/device.rs`), run again on every launch.
    Device(DeviceWork),
    /// Work the mock does not model (a child graph): its name.
    Opaque(&'static str),
}

impl NodeKind {
    /// Read by `cuGraphExecUpdate`.
    pub(crate) fn same_type(&self, other: &NodeKind) -> bool {
        match (self, other) {
            (NodeKind::Opaque(a), NodeKind::Opaque(b)) => a == b,
            (NodeKind::Device(a), NodeKind::Device(b)) => a.label() == b.label(),
            _ => std::mem::discriminant(self) == std::mem::discriminant(other),
        }
    }

    pub(crate) fn label(&self) -> &'static str {
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
    /// Which stream of the capture recorded it (its index among the capture's streams): the
    /// node's branch, for the race detector.
    pub(crate) lane: usize,
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
    pub(crate) alive: bool,
    pub(crate) nodes: Vec<Node>,
    pub(crate) objects: Vec<(usize, u64)>,
    /// References replaced by an update while launches were in flight.
    pub(crate) held: Vec<(usize, u64)>,
    pub(crate) in_flight: u64,
}

#[derive(Debug)]
pub(crate) struct UserObject {
    pub(crate) ptr: usize,
    pub(crate) destroy: HostFn,
    pub(crate) refs: u64,
}

/// Everything about graphs, executable graphs, user objects and captures.
#[derive(Debug, Default)]
pub(crate) struct Graphs {
    pub(crate) graphs: HashMap<usize, GraphRec>,
    pub(crate) execs: HashMap<usize, ExecRec>,
    pub(crate) objects: HashMap<usize, UserObject>,
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
