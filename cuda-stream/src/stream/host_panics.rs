//! The record of panics caught in host functions and callbacks: written on the driver's thread by
//! the trampolines (`host_fn`), reported by the next `synchronize` / `query` / launch on the
//! stream (`view`, `host_fn`), forgotten when the stream is destroyed (`owned`, `pool`). Keyed
//! by raw handles, so it sits below every stream type.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::base::error::{Error, Result};
use crate::ffi;

/// How many caught panics wait in `PANICS` to be reported: the fast path checks only this.
static PENDING: AtomicUsize = AtomicUsize::new(0);
/// `(stream, context, message)` of each caught panic not yet reported.
static PANICS: Mutex<Vec<(usize, usize, String)>> = Mutex::new(Vec::new());

fn message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

/// Stores a caught panic of a host function of `stream` (in context `ctx`; 0 matches any
/// context), on the driver's thread; never unwinds.
pub(crate) fn record(stream: usize, ctx: usize, payload: Box<dyn Any + Send>) {
    let msg = message(&*payload);
    // The payload's own destructor could panic: contain it too.
    if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        std::mem::forget(again);
    }
    let mut list = PANICS.lock().unwrap_or_else(|e| e.into_inner());
    list.push((stream, ctx, msg));
    PENDING.fetch_add(1, Ordering::Release);
}

/// Returns the oldest unreported panic of the host functions of stream `raw` (of context `ctx`)
/// as an error.
#[inline(always)]
pub(crate) fn report(raw: ffi::CUstream, ctx: ffi::CUcontext) -> Result<()> {
    if PENDING.load(Ordering::Acquire) == 0 {
        return Ok(());
    }
    report_slow(raw as usize, ctx as usize)
}

#[cold]
#[inline(never)]
fn report_slow(raw: usize, ctx: usize) -> Result<()> {
    let mut list = PANICS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(i) = list
        .iter()
        .position(|(s, c, _)| *s == raw && (*c == 0 || *c == ctx))
    {
        let (s, _, message) = list.remove(i);
        PENDING.fetch_sub(1, Ordering::Release);
        return Err(Error::HostFnPanicked { stream: s, message });
    }
    Ok(())
}

/// Drops the unreported panics of a stream that is being destroyed, so that a later stream that
/// gets the same handle value does not inherit them (one atomic load, inlined, when there are
/// none).
#[inline]
pub(crate) fn forget(raw: ffi::CUstream) {
    if PENDING.load(Ordering::Acquire) == 0 {
        return;
    }
    forget_slow(raw)
}

#[cold]
#[inline(never)]
fn forget_slow(raw: ffi::CUstream) {
    let mut list = PANICS.lock().unwrap_or_else(|e| e.into_inner());
    let before = list.len();
    list.retain(|(s, _, _)| *s != raw as usize);
    PENDING.fetch_sub(before - list.len(), Ordering::Release);
}

/// Probes of this module's locks (see `base::lock_probe`).
#[cfg(feature = "test-hooks")]
pub(crate) fn report_locks(out: &mut Vec<String>) {
    crate::base::lock_probe::probe(out, "host_panics::PANICS", &PANICS);
}
