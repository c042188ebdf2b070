//! Whether the calling thread runs one of this crate's host functions, stream callbacks, graph
//! host nodes or user-object destructors: a thread-local flag the trampolines set around the
//! user's code ([`HostFnScope`]) and two readers. The driver lookup (`base::error`) refuses every
//! driver function while it is set, and the destroy paths (`driver::deferred_destroy`) queue
//! their destroys instead. Imports nothing.

use std::cell::Cell;

thread_local! {
    /// Whether this thread is inside one of our host functions. `const` and without a
    /// destructor, so reading it is one thread-local load, at any time (thread teardown
    /// included).
    static IN_HOST_FN: Cell<bool> = const { Cell::new(false) };
}

/// Whether the calling thread is inside a host function, stream callback, graph host node or
/// user-object destructor run by this crate.
#[inline(always)]
pub(crate) fn in_host_fn() -> bool {
    IN_HOST_FN.try_with(Cell::get).unwrap_or(false)
}

/// Marks the calling thread as inside a host function until dropped; restores the previous state
/// (also when the closure panics and the scope unwinds).
pub(crate) struct HostFnScope {
    was: bool,
}

impl HostFnScope {
    /// Entered by the trampolines around the user's closure and the drop of its captures.
    #[inline(always)]
    pub(crate) fn enter() -> HostFnScope {
        let was = IN_HOST_FN.try_with(|c| c.replace(true)).unwrap_or(false);
        HostFnScope { was }
    }
}

impl Drop for HostFnScope {
    #[inline(always)]
    fn drop(&mut self) {
        let _ = IN_HOST_FN.try_with(|c| c.set(self.was));
    }
}
