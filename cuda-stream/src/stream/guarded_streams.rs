//! The streams named by a live current-stream guard, process-wide: `stream::current` adds and removes
//! them; the destroy paths (`owned`, `pool`) ask before destroying, so that dropping an
//! `OwnedStream` whose guard was leaked (`mem::forget`) keeps the handle valid instead of leaving a
//! dangling current stream; a pool asks when a stream comes back (one a leaked guard names is
//! never lent again), and a capture before it begins on or forks a stream, so that
//! `current_stream` never lends a view of a stream being captured. Depends on nothing else in the
//! crate.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::ffi;

static COUNT: AtomicUsize = AtomicUsize::new(0);
static STREAMS: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// Whether a live guard names `raw` (one atomic load, inlined, when no guard exists).
#[inline]
pub(crate) fn contains(raw: ffi::CUstream) -> bool {
    if COUNT.load(Ordering::Acquire) == 0 {
        return false;
    }
    contains_slow(raw)
}

#[cold]
#[inline(never)]
fn contains_slow(raw: ffi::CUstream) -> bool {
    let list = STREAMS.lock().unwrap_or_else(|e| e.into_inner());
    list.contains(&(raw as usize))
}

/// A guard now names `raw`.
pub(crate) fn add(raw: ffi::CUstream) {
    let mut list = STREAMS.lock().unwrap_or_else(|e| e.into_inner());
    list.push(raw as usize);
    COUNT.fetch_add(1, Ordering::Release);
}

/// A guard naming `raw` ended.
pub(crate) fn remove(raw: ffi::CUstream) {
    let mut list = STREAMS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(i) = list.iter().position(|&r| r == raw as usize) {
        list.swap_remove(i);
        COUNT.fetch_sub(1, Ordering::Release);
    }
}

/// Probes of this module's locks (see `base::lock_probe`).
#[cfg(feature = "test-hooks")]
pub(crate) fn report_locks(out: &mut Vec<String>) {
    crate::base::lock_probe::probe(out, "guarded_streams::STREAMS", &STREAMS);
}
