//! The jobs of the queue that the worker thread runs in order.

use super::device::DeviceWork;
use super::graph::GraphJob;
use super::records::{HostFn, StreamCallback};

#[derive(Debug)]
pub(crate) enum Work {
    Host(HostFn, usize),
    Callback(StreamCallback, usize, usize),
    /// Marks an event's record complete.
    Marker(u64),
    /// A memset, a copy or a kernel (`model/device.rs`).
    Device(DeviceWork),
    /// A graph launch's end, or a user object's destructor (`model/graph.rs`).
    Graph(GraphJob),
}

#[derive(Debug)]
pub(crate) struct Job {
    pub(crate) seq: u64,
    pub(crate) work: Work,
}
