//! What each thread has of its own: its context stack, its capture mode, and whether it is the
//! worker.

use std::cell::{Cell, RefCell};

/// Capture modes (`CUstreamCaptureMode`).
pub(crate) const GLOBAL: u32 = 0;
pub(crate) const RELAXED: u32 = 2;

thread_local! {
    /// This thread's context stack; the top is the current context.
    static CTX_STACK: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
    static IS_WORKER: Cell<bool> = const { Cell::new(false) };
    /// This thread's capture interaction mode (`cuThreadExchangeStreamCaptureMode`).
    pub(crate) static MODE: Cell<u32> = const { Cell::new(GLOBAL) };
}

pub(crate) fn current() -> Option<usize> {
    CTX_STACK
        .try_with(|s| s.borrow().last().copied())
        .ok()
        .flatten()
}

/// Runs `f` on this thread's context stack.
pub(crate) fn with_stack<R>(f: impl FnOnce(&mut Vec<usize>) -> R) -> Option<R> {
    CTX_STACK.try_with(|s| f(&mut s.borrow_mut())).ok()
}

pub(crate) fn on_worker() -> bool {
    IS_WORKER.try_with(Cell::get).unwrap_or(false)
}

/// Marks the calling thread as the worker.
pub(crate) fn become_worker() {
    let _ = IS_WORKER.try_with(|w| w.set(true));
}

pub(crate) fn thread_mode() -> u32 {
    MODE.try_with(Cell::get).unwrap_or(GLOBAL)
}
