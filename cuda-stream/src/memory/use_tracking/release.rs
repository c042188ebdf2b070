//! The ends of a tracker's uses: the free after them, the hand-back of borrowed memory, the
//! host's waits for them (`into_raw`, frees without pools) and the completion a host
//! synchronisation shows (see the module docs of `use_tracking` for the model).

use crate::base::error::{Error, Result, refuse_in_host_fn};
use crate::base::host_fn_flag::in_host_fn;
use crate::driver::capture_query::is_capturing;
use crate::driver::context::Context;
use crate::ffi;
use crate::stream::block_cache::Blocks;
use crate::stream::known_streams::End;

use super::{Inner, Mark, State, Uses, joined_capture};

impl Inner {
    /// The body of [`Uses::free_after_uses`], on the tracker's state taken out of it.
    fn free_after(
        &self,
        state: &mut State,
        fallback: impl FnOnce(&Context) -> Result<ffi::CUstream>,
        free: impl FnOnce(ffi::CUstream, &Context, Option<&mut Blocks>) -> Result<()>,
    ) -> Result<()> {
        let State { write, reads, .. } = state;
        let lazy = write
            .iter()
            .chain(reads.iter())
            .find(|u| u.mark == Mark::Lazy && u.end.as_ref().is_none_or(|e| !e.has_ended()))
            .map(|u| (u.stream, u.end.clone()));
        let (found, end) = match lazy {
            Some((stream, end)) => (Some(stream), end),
            None => (None, None),
        };
        // The chosen stream cannot end, be captured by this crate or leave it while its end is
        // locked (and says it lives); one that joined a capture begun elsewhere (or that cannot
        // be asked) is not freed on: the service stream is, and its wait for the use is refused
        // if the stream did join one (the free is then made later).
        let guard = end.as_ref().map(|e| e.lock());
        let live = guard.as_deref().is_none_or(|st| *st == End::Live);
        let here = |s| end.is_none() || matches!(is_capturing(s), Ok(false));
        let (stream, mut guard) = match found {
            Some(stream) if live && here(stream) => (stream, guard),
            _ => {
                // Its lock is taken again by the wait for that use.
                drop(guard);
                (fallback(&self.ctx)?, None)
            }
        };
        for u in write.iter_mut().chain(reads.iter_mut()) {
            self.wait_for(stream, u)?;
        }
        // The stream waits for every use now: a block kept there is ordered after them all.
        free(stream, &self.ctx, guard.as_mut().and_then(|g| g.blocks()))?;
        drop(guard);
        if let Some(w) = write.take() {
            self.release_use(w);
        }
        for r in reads.drain(..) {
            self.release_use(r);
        }
        Ok(())
    }

    /// Gives every lazy use an event of its own (recorded on its stream, or after its epoch's
    /// settling event), in place; the events of all uses, still owned by the uses. `Err` when a
    /// use is lost (only the context's completion covers it) or cannot be marked; the uses stay
    /// either way (those marked meanwhile keep their events).
    fn mark_all(&self, state: &mut State) -> Result<Vec<ffi::CUevent>> {
        let State { write, reads, .. } = state;
        let mut events = Vec::with_capacity(reads.len() + 1);
        for u in write.iter_mut().chain(reads.iter_mut()) {
            if u.mark == Mark::Lazy {
                self.own_event(u)?;
            }
            match u.mark {
                Mark::Event(ev) => events.push(ev),
                Mark::Lost => {
                    return Err(Error::Refused {
                        call: "cuEventRecord",
                        reason: "a stream that used the buffer ended inside a host function",
                    });
                }
                Mark::Lazy | Mark::Done => {}
            }
        }
        Ok(events)
    }
}

impl Uses {
    /// Enqueues `free` (a stream-ordered free of the memory) after every recorded use: on the
    /// stream of a lazy use whose epoch lasts (its end locked meanwhile), which then needs no
    /// event, or else on `fallback()` (the context's service stream), after waits for each use.
    /// On a private stream `free` is also given the blocks kept there (`block_cache`), where it
    /// may keep the memory instead: every use is ordered before the stream's later work.
    /// Nothing else refers to a tracker being freed (`&mut`): no lock. The tracker keeps no use
    /// afterwards; on an error nothing is freed, and the uses stay (with an error for which
    /// [`waits_for_a_capture`](super::waits_for_a_capture) holds, the free can be made once the
    /// capture that a use's stream joined has ended).
    pub(crate) fn free_after_uses(
        &mut self,
        fallback: impl FnOnce(&Context) -> Result<ffi::CUstream>,
        free: impl FnOnce(ffi::CUstream, &Context, Option<&mut Blocks>) -> Result<()>,
    ) -> Result<()> {
        let Inner { ctx, state, .. } = &mut self.0;
        let slot = state.get_mut().unwrap_or_else(|e| e.into_inner());
        // The usual case: one write on a private stream, never waited for elsewhere (a buffer
        // allocated, used and freed on one stream). Freed there, its end locked.
        if let (Some(w), true) = (&slot.write, slot.reads.is_empty()) {
            if w.mark == Mark::Lazy {
                let mut guard = w.end.as_ref().map(|e| e.lock());
                if guard.as_deref().is_none_or(|st| *st == End::Live) {
                    let blocks = guard.as_mut().and_then(|g| g.blocks());
                    if let Err(e) = free(w.stream, ctx, blocks) {
                        // Memory from outside a capture cannot be freed on a capturing stream:
                        // the stream has joined a capture begun elsewhere.
                        if w.end.is_some() && is_capturing(w.stream).unwrap_or(false) {
                            return Err(joined_capture());
                        }
                        return Err(e);
                    }
                    drop(guard);
                    // A lazy use owns no event: only its end's reference goes.
                    slot.write = None;
                    return Ok(());
                }
            }
        }
        let mut state = std::mem::take(slot);
        let r = self.0.free_after(&mut state, fallback, free);
        *self.0.state.get_mut().unwrap_or_else(|e| e.into_inner()) = state;
        r
    }

    /// Makes `owner` wait for every recorded use on other streams (the end of a borrow: the
    /// owner's later work comes after ours). The tracker keeps no use afterwards. All under the
    /// tracker's lock.
    pub(crate) fn hand_back(&self, owner: ffi::CUstream) -> Result<()> {
        let inner = &self.0;
        let mut state = inner.lock();
        let State { write, reads, .. } = &mut *state;
        let mut first_err = None;
        for u in write.iter_mut().chain(reads.iter_mut()) {
            if let Err(e) = inner.wait_for(owner, u) {
                first_err.get_or_insert(e);
            }
        }
        if let Some(w) = write.take() {
            inner.release_use(w);
        }
        for r in reads.drain(..) {
            inner.release_use(r);
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Gives every lazy use an event of its own (recorded on its stream, or after its epoch's
    /// settling event) and returns the events of all uses, for a free that waits by polling
    /// them; `Err` when a use is lost or cannot be marked (only the context's completion covers
    /// it). The tracker keeps no use afterwards, except after an error for which
    /// [`waits_for_a_capture`](super::waits_for_a_capture) holds (the free is then made later).
    pub(crate) fn take_events(&self) -> Result<Vec<ffi::CUevent>> {
        let inner = &self.0;
        let mut state = inner.lock();
        let marked = inner.mark_all(&mut state);
        if let Err(e) = marked {
            if super::waits_for_a_capture(&e) {
                return Err(e);
            }
            let uses = state.write.take().into_iter().chain(state.reads.drain(..));
            for u in uses.collect::<Vec<_>>() {
                inner.release_use(u);
            }
            return Err(e);
        }
        // The events go with the free; the uses (their ends' references) go.
        state.write = None;
        state.reads.clear();
        marked
    }

    /// Waits on the host, with `wait`, for an event recorded after every use (a lazy use gets one
    /// now); then the tracker keeps no use. On an error (a use that cannot be marked, or a wait
    /// that failed) every use stays recorded, marked as far as it got: nothing is forgotten.
    /// Nothing else refers to the tracker (`&mut`): no lock.
    pub(crate) fn wait_on_host(
        &mut self,
        wait: impl FnOnce(&[ffi::CUevent]) -> Result<()>,
    ) -> Result<()> {
        let Inner { state, .. } = &mut self.0;
        let st = state.get_mut().unwrap_or_else(|e| e.into_inner());
        // Inside a host function no wait can be made, and marking a lazy use would take its
        // stream's end lock, which another thread may hold in a driver call that waits for this
        // host function (see `known_streams::end_in_host_fn`): refused before anything is
        // touched, unless every use is known done.
        if in_host_fn()
            && st
                .write
                .iter()
                .chain(st.reads.iter())
                .any(|u| u.mark != Mark::Done)
        {
            return refuse_in_host_fn("cuEventSynchronize");
        }
        let mut taken = std::mem::take(st);
        let r = self.0.mark_all(&mut taken).and_then(|events| wait(&events));
        if r.is_ok() {
            for u in taken.write.take().into_iter().chain(taken.reads.drain(..)) {
                self.0.release_use(u);
            }
        }
        *self.0.state.get_mut().unwrap_or_else(|e| e.into_inner()) = taken;
        r
    }

    /// [`wait_on_host`](Uses::wait_on_host), where a use nothing marks (a failed record, a
    /// stream that ended inside a host function) falls back to the context's completion (`cuCtxSynchronize`; refused while a capture this crate began in the context is
    /// under way): then the tracker keeps no use. For host access to memory whose uses are all
    /// on its own context's streams (managed memory).
    pub(crate) fn wait_on_host_or_context(
        &mut self,
        wait: impl FnOnce(&[ffi::CUevent]) -> Result<()>,
    ) -> Result<()> {
        // Only a use that cannot be marked falls back; a wait that fails is the driver's answer.
        let mut marked = false;
        let r = self.wait_on_host(|events| {
            marked = true;
            wait(events)
        });
        match r {
            Err(e @ Error::InHostFunction { .. }) => Err(e),
            Err(e) if !marked && !super::waits_for_a_capture(&e) => {
                self.0.synchronize_context()?;
                let state =
                    std::mem::take(self.0.state.get_mut().unwrap_or_else(|e| e.into_inner()));
                for u in state.write.into_iter().chain(state.reads) {
                    self.0.release_use(u);
                }
                Ok(())
            }
            r => r,
        }
    }

    /// The sequence number of the last use recorded so far: a host synchronisation of a stream
    /// that begins after this is read covers every use on that stream numbered up to it.
    pub(crate) fn last_recorded(&self) -> u64 {
        self.0.lock().seq
    }

    /// `stream`'s work enqueued before a synchronisation has completed (the caller synchronised
    /// the stream after reading [`last_recorded`](Uses::last_recorded) as `upto`): the uses on it
    /// numbered up to `upto` need no more waiting. A use recorded later, by another thread while
    /// the synchronisation waited, is left as it is.
    pub(crate) fn completed_on(&self, stream: ffi::CUstream, upto: u64) {
        let inner = &self.0;
        let mut state = inner.lock();
        let State { write, reads, .. } = &mut *state;
        for u in write.iter_mut().chain(reads.iter_mut()) {
            if u.seq <= upto && u.mark != Mark::Lost && inner.same_stream(u, stream) {
                if let Mark::Event(ev) = u.mark {
                    inner.release(ev);
                }
                u.mark = Mark::Done;
            }
        }
    }
}
