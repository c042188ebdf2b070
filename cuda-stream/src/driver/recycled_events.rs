//! A context's spare events: handles of dropped [`Event`](crate::Event)s, kept to be handed out
//! again by `Event::new` and `record_event` instead of a `cuEventCreate` + `cuEventDestroy` pair.
//!
//! Reuse is sound because an event's handle carries no obligation once its owner is gone: a
//! `cuStreamWaitEvent` captures the event's state when it is enqueued, so recording the handle
//! again cannot change what an earlier wait waits for, and a record may be made on a handle whose
//! previous record is still pending. What a handle may still carry is the *driver's* answer for
//! its last record (`cuEventQuery`), which is why `Event` answers `query` / `synchronize` for a
//! value it never recorded without asking the driver.
//!
//! One set per context (the events belong to it), in four kinds by creation flags (timing on or
//! off, blocking-sync on or off); interprocess events are never kept (their handle may have been
//! exported). Each kind keeps at most [`PER_KIND`] handles in lock-free slots, so taking or
//! returning one is an atomic swap or compare-exchange: no lock, no allocation and no driver call,
//! which also makes dropping an `Event` inside a host function safe. Beyond the bound a drop
//! destroys the handle. The context destroys what is kept when its last retain goes, or on
//! request ([`Context::clear_event_cache`](crate::Context::clear_event_cache)).

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::base::error::{Error, Result, check, driver_fn};
use crate::driver::deferred_destroy::{self, Deferred};
use crate::ffi;

/// How many kinds of events are kept apart: timing x blocking-sync.
pub(crate) const KINDS: usize = 4;

/// How many spare events a context keeps per kind (so at most `4 * PER_KIND` in all).
pub(crate) const PER_KIND: usize = 32;

/// The spare event handles of one context; 0 is an empty slot.
pub(crate) struct SpareEvents {
    slots: [[AtomicUsize; PER_KIND]; KINDS],
}

impl SpareEvents {
    pub(crate) fn new() -> SpareEvents {
        SpareEvents {
            slots: [const { [const { AtomicUsize::new(0) }; PER_KIND] }; KINDS],
        }
    }

    /// A kept handle of kind `kind`, if any; it is the caller's from now on.
    #[inline]
    pub(crate) fn take(&self, kind: usize) -> Option<ffi::CUevent> {
        for slot in &self.slots[kind] {
            if slot.load(Ordering::Relaxed) != 0 {
                let raw = slot.swap(0, Ordering::Acquire);
                if raw != 0 {
                    return Some(raw as ffi::CUevent);
                }
            }
        }
        None
    }

    /// Keeps `raw` (of kind `kind`, owned by the caller until now); false when the kind is full,
    /// and the caller still owns it.
    #[inline]
    pub(crate) fn put(&self, kind: usize, raw: ffi::CUevent) -> bool {
        for slot in &self.slots[kind] {
            if slot.load(Ordering::Relaxed) == 0
                && slot
                    .compare_exchange(0, raw as usize, Ordering::Release, Ordering::Relaxed)
                    .is_ok()
            {
                return true;
            }
        }
        false
    }

    /// How many handles are kept now.
    pub(crate) fn len(&self) -> usize {
        self.slots
            .iter()
            .flatten()
            .filter(|s| s.load(Ordering::Acquire) != 0)
            .count()
    }

    /// Takes every kept handle; they are the caller's to destroy.
    pub(crate) fn take_all(&self) -> Vec<usize> {
        self.slots
            .iter()
            .flatten()
            .map(|s| s.swap(0, Ordering::Acquire))
            .filter(|&raw| raw != 0)
            .collect()
    }
}

/// `cuEventDestroy`, reporting the driver's answer.
pub(crate) fn try_destroy(raw: ffi::CUevent) -> Result<()> {
    let f = driver_fn!(cuEventDestroy);
    // SAFETY: the caller owns `raw` and never uses it again.
    check(unsafe { f(raw) }, "cuEventDestroy")
}

/// `cuEventDestroy` of a handle as a deferred destroy holds it.
pub(crate) fn destroy(raw: usize) -> Result<()> {
    try_destroy(raw as ffi::CUevent)
}

/// Destroys an event this crate owns; inside a host function, queues the destroy instead and
/// says so with [`Error::InHostFunction`].
pub(crate) fn destroy_or_defer(raw: ffi::CUevent) -> Result<()> {
    if deferred_destroy::in_host_fn() {
        deferred_destroy::defer([Deferred::new(raw as usize, destroy)]);
        return Err(Error::InHostFunction {
            call: "cuEventDestroy",
        });
    }
    deferred_destroy::drain_if_pending();
    try_destroy(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_kept_apart_and_bounded() {
        let spare = SpareEvents::new();
        assert_eq!(spare.take(0), None);
        for h in 1..=PER_KIND {
            assert!(spare.put(1, std::ptr::without_provenance_mut(h)));
        }
        assert!(!spare.put(1, std::ptr::without_provenance_mut(999)), "full");
        assert_eq!(spare.take(0), None, "another kind");
        assert_eq!(spare.len(), PER_KIND);
        let got = spare.take(1).map(|e| e as usize);
        assert!(got.is_some_and(|h| (1..=PER_KIND).contains(&h)));
        assert_eq!(spare.len(), PER_KIND - 1);
        let mut rest = spare.take_all();
        rest.sort_unstable();
        assert_eq!(rest.len(), PER_KIND - 1);
        assert_eq!(spare.len(), 0);
    }
}
