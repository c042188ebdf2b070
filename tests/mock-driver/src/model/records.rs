//! The records of contexts, streams and events, the counters, and how a stream handle resolves.

use std::ffi::c_void;
use std::thread::ThreadId;
use std::time::Instant;

use cuda_stream_sys::{CUresult, CUstream};

/// Counters that `cuda_mock_reset` zeroes.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Counters {
    pub(crate) destroyed_streams: u64,
    pub(crate) destroyed_events: u64,
    pub(crate) bad_destroys: u64,
    pub(crate) bad_uses: u64,
    pub(crate) orphans: u64,
    pub(crate) host_fn_api_calls: u64,
    /// Explicit graph calls that began while another on the same graph was under way
    /// (`exports::call::graph_api`).
    pub(crate) concurrent_graph_calls: u64,
}

/// A device's primary context.
#[derive(Debug)]
pub(crate) struct Ctx {
    pub(crate) handle: usize,
    pub(crate) device: i32,
    pub(crate) refs: u64,
}

#[derive(Debug)]
pub(crate) struct StreamRec {
    pub(crate) ctx: usize,
    pub(crate) flags: u32,
    pub(crate) priority: i32,
    pub(crate) id: u64,
    pub(crate) alive: bool,
}

#[derive(Debug)]
pub(crate) struct EventRec {
    pub(crate) ctx: usize,
    pub(crate) flags: u32,
    pub(crate) core: u64,
    pub(crate) alive: bool,
}

/// A stream or an event, alive or destroyed: records are never removed, and handle memory is
/// never freed, so a handle value is never reused and a double destroy is always recognised.
#[derive(Debug)]
pub(crate) enum Object {
    Stream(StreamRec),
    Event(EventRec),
}

/// The recorded state of an event, shared by the event and handles opened from its IPC handle.
#[derive(Debug, Default)]
pub(crate) struct Core {
    /// The last record: complete once job `seq` has run (0: complete at once), and when.
    pub(crate) record: Option<(u64, Option<Instant>)>,
}

/// Which queue a job belongs to: a created stream, or a context's legacy or per-thread default
/// stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Key {
    Stream(usize),
    Legacy(usize),
    PerThread(usize, ThreadId),
}

/// A stream handle resolved to what it stands for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StreamRef {
    pub(crate) key: Key,
    pub(crate) ctx: usize,
    pub(crate) flags: u32,
    pub(crate) priority: i32,
    /// Read by `cuStreamGetId`.
    pub(crate) id: u64,
}

pub(crate) type HostFn = unsafe extern "C" fn(*mut c_void);
pub(crate) type StreamCallback = unsafe extern "C" fn(CUstream, CUresult, *mut c_void);

/// A fresh, never-freed heap address to serve as a handle.
pub(crate) fn new_address() -> usize {
    let cell: &'static mut u64 = Box::leak(Box::new(0));
    cell as *mut u64 as usize
}
