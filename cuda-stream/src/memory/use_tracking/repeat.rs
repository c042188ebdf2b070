//! The hot path of a use that repeats the last one on its stream (see `Uses::around`): the
//! tracker locked, the use renumbered, the work enqueued under the lock, and the epoch of the
//! use checked again as the lock goes.

#[cfg(feature = "nccl")]
use std::sync::MutexGuard;

use crate::base::error::Result;
use crate::ffi;

use super::{Access, Inner, Mark, State, Use, Uses};

impl Uses {
    /// Runs `op`, which enqueues work of kind `access` on `stream`, with the tracker locked, if
    /// the work repeats the last use there (the same stream's lazy mark in a live epoch, with
    /// nothing to wait for: see [`around`](Uses::around)), renumbering that use; as the lock
    /// goes the epoch is checked again (another thread may have taken the stream's handle
    /// meanwhile, ending the epoch with a settling event that may precede the work, which then
    /// gets an event of its own). `Err(op)`, unrun and unlocked, for any other work.
    // Always inline, the lock a local of the caller's: the hot path is this and the work, in
    // one function (across codegen units a plain `#[inline]`, and the drop of a guard value,
    // were not followed, and the path took more lines of code).
    #[inline(always)]
    pub(crate) fn run_repeated<R, F: FnOnce() -> Result<R>>(
        &self,
        stream: ffi::CUstream,
        access: Access,
        op: F,
    ) -> std::result::Result<Result<R>, F> {
        let inner = &self.0;
        let mut state = inner.lock();
        let Some((_, u)) = repeated(inner, &mut state, stream, access) else {
            return Err(op);
        };
        // Checked as this returns (or unwinds), before the lock goes.
        let _recheck = Recheck { inner, u };
        #[cfg(feature = "test-hooks")]
        crate::base::hold_point::reached(crate::base::hold_point::REPEATED_USE);
        Ok(op())
    }

    /// Locks the tracker for work of kind `access` on `stream` that repeats the last use there
    /// (as [`run_repeated`](Uses::run_repeated) would run it), renumbering that use, without
    /// waiting for the lock: the caller enqueues the work while the guard lives, and as it drops
    /// the epoch is checked again. `None`, unlocked, for any other work, and also when another
    /// thread (or the caller) holds the lock. For work on several trackers at once that takes
    /// them in any order, and takes its general way, in the trackers' order, when one is busy.
    #[inline(always)]
    #[cfg(feature = "nccl")]
    pub(crate) fn try_repeat(&self, stream: ffi::CUstream, access: Access) -> Option<Repeated<'_>> {
        let inner = &self.0;
        let mut state = inner.state.try_lock().ok()?;
        let (which, _) = repeated(inner, &mut state, stream, access)?;
        Some(Repeated {
            inner,
            state,
            which,
        })
    }
}

/// Which recorded use a repeated use is (what a `Repeated` holds, with NCCL).
#[derive(Clone, Copy)]
#[cfg_attr(not(feature = "nccl"), allow(dead_code))]
pub(super) enum Which {
    Write,
    Read(usize),
}

#[cfg(feature = "nccl")]
impl State {
    pub(super) fn use_of(&mut self, which: Which) -> Option<&mut Use> {
        match which {
            Which::Write => self.write.as_mut(),
            Which::Read(i) => self.reads.get_mut(i),
        }
    }
}

/// The use that work of kind `access` on `stream` would repeat, if it leaves the marks as they
/// are: the same stream's lazy mark in a live epoch, with nothing to wait for (a write after a
/// lone write there; a read after reads, with the write done or on the same stream). It is
/// renumbered then, even if the work fails: a later number only makes a host completion cover
/// the use later.
#[inline(always)]
pub(super) fn repeated<'s>(
    inner: &Inner,
    s: &'s mut State,
    stream: ffi::CUstream,
    access: Access,
) -> Option<(Which, &'s mut Use)> {
    let State {
        write, reads, seq, ..
    } = s;
    let lazy_here = |u: &Use| u.mark == Mark::Lazy && inner.same_stream(u, stream);
    let (which, u) = match access {
        Access::Write if reads.is_empty() => {
            (Which::Write, write.as_mut().filter(|w| lazy_here(w))?)
        }
        Access::Write => return None,
        Access::Read
            if write
                .as_ref()
                .is_none_or(|w| w.mark == Mark::Done || inner.same_stream(w, stream)) =>
        {
            let i = reads.iter().position(lazy_here)?;
            (Which::Read(i), &mut reads[i])
        }
        Access::Read => return None,
    };
    *seq += 1;
    u.seq = *seq;
    Some((which, u))
}

/// A tracker locked by [`Uses::try_repeat`] for work that repeats its last use on a stream: the
/// lock is held until it drops, and the epoch of that use is checked again then.
#[cfg(feature = "nccl")]
pub(crate) struct Repeated<'a> {
    inner: &'a Inner,
    state: MutexGuard<'a, State>,
    which: Which,
}

#[cfg(feature = "nccl")]
impl Drop for Repeated<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        if let Some(u) = self.state.use_of(self.which) {
            recheck(self.inner, u);
        }
    }
}

/// Checks, once the work of a use on the stream and epoch of the last one has been enqueued (it
/// drops after the work's result is made), that the epoch did not end meanwhile: the handle was
/// taken (`raw()`) on another thread, whose settling event may then precede the work, which gets
/// an event of its own (the stream cannot be captured while this call is in progress).
pub(super) struct Recheck<'a> {
    pub(super) inner: &'a Inner,
    pub(super) u: &'a mut Use,
}

impl Drop for Recheck<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        recheck(self.inner, self.u);
    }
}

/// Gives `u`, a use whose work was just enqueued on its stream in what was its epoch, an event of
/// its own if that epoch has ended meanwhile: the handle was taken (`raw()`) on another thread,
/// whose settling event may precede the work.
#[inline(always)]
fn recheck(inner: &Inner, u: &mut Use) {
    if u.end.as_ref().is_some_and(|e| e.has_ended()) {
        inner.mark_now(u);
    }
}
