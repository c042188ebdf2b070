//! What the replays of a graph touch that use tracking must hear of: the allocations whose work
//! was captured into it. The memory layer (above) registers each allocation it ties to a
//! capture's graph, by the graph's handle, and installs the hook that orders a launch against
//! their other uses; a [`Graph`](crate::Graph) takes its list when the capture ends, and its
//! executable graphs launch through the hook. A graph that holds no buffer pays one length test
//! per launch.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use crate::base::error::Result;
use crate::ffi;

/// An allocation a graph's work uses, as the memory layer registered it.
pub(crate) type Held = Weak<dyn Any + Send + Sync>;

/// Orders `launch` (a graph launch on `stream`, of context `ctx`) after the other uses of `held`
/// and records it as a use of each.
pub(crate) type Hook =
    fn(&[Held], ffi::CUstream, ffi::CUcontext, &mut dyn FnMut() -> Result<()>) -> Result<()>;

/// Registered allocations by the handle of the graph being captured.
static BY_GRAPH: Mutex<Option<HashMap<usize, Vec<Held>>>> = Mutex::new(None);
static HOOK: OnceLock<Hook> = OnceLock::new();

/// Registers `item` as used by the replays of `graph` (a capture's graph), and `hook` as the
/// way launches are ordered (the first hook registered stays).
pub(crate) fn register(graph: ffi::CUgraph, item: Held, hook: Hook) {
    let _ = HOOK.set(hook);
    let mut map = BY_GRAPH.lock().unwrap_or_else(|e| e.into_inner());
    let map = map.get_or_insert_with(HashMap::new);
    // Lists left by captures that failed (their graph was never taken) are dropped once all
    // their allocations are gone, when the map has grown (amortised).
    if map.len() >= 16 && map.len().is_power_of_two() {
        map.retain(|_, v| v.iter().any(|w| w.strong_count() > 0));
    }
    map.entry(graph as usize).or_default().push(item);
}

/// The allocations registered for `graph`, taken (a graph takes its list once, when it is made
/// from the capture's handle).
pub(crate) fn take(graph: ffi::CUgraph) -> Arc<[Held]> {
    let mut map = BY_GRAPH.lock().unwrap_or_else(|e| e.into_inner());
    map.as_mut()
        .and_then(|m| m.remove(&(graph as usize)))
        .map_or_else(|| Arc::from(Vec::new()), Arc::from)
}

/// Runs `launch` on `stream` (of context `ctx`), ordered against the other uses of `held`
/// through the hook (just `launch` when nothing is held).
#[inline]
pub(crate) fn around_launch(
    held: &[Held],
    stream: ffi::CUstream,
    ctx: ffi::CUcontext,
    mut launch: impl FnMut() -> Result<()>,
) -> Result<()> {
    if held.is_empty() {
        return launch();
    }
    match HOOK.get() {
        Some(hook) => hook(held, stream, ctx, &mut launch),
        None => launch(),
    }
}

/// Probes of this module's locks (see `base::lock_probe`).
#[cfg(feature = "test-hooks")]
pub(crate) fn report_locks(out: &mut Vec<String>) {
    crate::base::lock_probe::probe(out, "replay_uses::BY_GRAPH", &BY_GRAPH);
}
