//! The captures under way: which streams are in them, each stream's tail, and the events they
//! captured. The rules are `state/capture.rs`, the exports `exports/capture.rs`.

use std::collections::HashMap;
use std::thread::ThreadId;

use super::records::Key;

#[derive(Debug)]
pub(crate) struct Capture {
    pub(crate) origin: Key,
    pub(crate) graph: usize,
    pub(crate) mode: u32,
    pub(crate) thread: ThreadId,
    pub(crate) invalidated: bool,
    pub(crate) members: Vec<Key>,
}

#[derive(Debug)]
pub(crate) struct Member {
    pub(crate) capture: u64,
    /// Indices of the nodes the stream's next work depends on.
    pub(crate) tail: Vec<usize>,
    /// Their handles, for `cuStreamGetCaptureInfo`'s dependency array.
    pub(crate) tail_handles: Vec<usize>,
}

/// The captures under way, which streams are in them, and which events they captured.
#[derive(Debug, Default)]
pub(crate) struct Captures {
    pub(crate) captures: HashMap<u64, Capture>,
    pub(crate) members: HashMap<Key, Member>,
    /// Captured events (by record state): the capture and the nodes the record stands for.
    pub(crate) events: HashMap<u64, (u64, Vec<usize>)>,
    pub(crate) next_id: u64,
}

impl Captures {
    /// Whether a capture under way owns `graph`.
    pub(crate) fn owns_graph(&self, graph: usize) -> bool {
        self.captures.values().any(|c| c.graph == graph)
    }

    pub(crate) fn count(&self) -> u64 {
        self.captures.len() as u64
    }

    pub(crate) fn invalidate(&mut self, id: u64) {
        if let Some(c) = self.captures.get_mut(&id) {
            c.invalidated = true;
        }
    }

    /// The capture `key` is in, if any.
    pub(crate) fn capture_of(&self, key: Key) -> Option<u64> {
        self.members.get(&key).map(|m| m.capture)
    }

    /// The capture an event's record was captured in, if that capture is still under way.
    pub(crate) fn event_capture(&self, core: u64) -> Option<(u64, Vec<usize>)> {
        self.events
            .get(&core)
            .filter(|(id, _)| self.captures.contains_key(id))
            .cloned()
    }

    pub(crate) fn set_tail(&mut self, key: Key, tail: Vec<usize>, handles: Vec<usize>) {
        if let Some(m) = self.members.get_mut(&key) {
            m.tail = tail;
            m.tail_handles = handles;
        }
    }
}
