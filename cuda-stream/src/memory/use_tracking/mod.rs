//! Use tracking: the streams a buffer's work was enqueued on, so that a use on another stream
//! first waits for the earlier uses it conflicts with (a read for the last write; a write for the
//! last write and every read since), and the free waits for all of them. Reads on several
//! streams overlap. Nothing is asked of the user: no event to remember, no `record_stream`.
//!
//! What a use costs depends on its stream:
//!
//! - a stream this crate created, or a stream that lives as long as the context (the legacy
//!   default stream, the context's service stream): nothing but a lock and a comparison. Only
//!   the handle is kept (*lazy*), with the stream's end (`stream::known_streams`): a later use on
//!   another stream records an event on it then, which covers the use, or waits for the final
//!   event the stream recorded as it ended;
//! - any other stream (borrowed from another library, the per-thread default stream): an event
//!   recorded after each use, since the stream may end without notice.
//!
//! So a buffer used on one stream of this crate never pays for an event. Once a buffer is used
//! on a second stream while an earlier use elsewhere is pending, it is marked by an event
//! recorded right after each use (a lazy mark recorded later would also cover work enqueued
//! since, and serialise pipelines): one record and one wait per move, what a careful user
//! writes by hand.
//!
//! Every driver call here runs under the tracker's lock, so two threads using one buffer are
//! ordered; a call on the stream of a lazy use also holds that stream's end locked, so the
//! stream cannot end meanwhile. Locks are taken in that order only (tracker, then the global
//! list of streams or a stream's end); a stream's end takes no tracker's lock.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::base::error::{Error, Result, check, driver_fn};
use crate::driver::context::{Context, bind};
use crate::ffi;
use crate::stream::known_streams::{self, End, StreamEnd};
use crate::stream::view::bind_if_special;

mod capture;

/// What a use does to the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Reads it: may overlap other reads.
    Read,
    /// Writes it (or reads and writes): ordered after every earlier use.
    Write,
}

/// How a recorded use is waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mark {
    /// By recording an event on its stream when needed while the stream lives, else by the
    /// stream's final event. Only on a stream whose end is known (`Use::end`) or that lives as
    /// long as the context.
    Lazy,
    /// By this event, recorded after the use and owned here.
    Event(ffi::CUevent),
    /// The stream ended where no event could be recorded: only the context's completion covers
    /// the use.
    Lost,
    /// Complete: nothing to wait for.
    Done,
}

#[derive(Debug)]
struct Use {
    stream: ffi::CUstream,
    /// The stream's end, for a stream this crate created (`None` for any other).
    end: Option<Arc<StreamEnd>>,
    mark: Mark,
}

#[derive(Debug, Default)]
struct State {
    write: Option<Use>,
    /// Reads since the last write, one per stream.
    reads: Vec<Use>,
    /// The last stream looked up and found not to be this crate's (0: none), so that a buffer
    /// used again and again on a borrowed stream looks it up once.
    unknown: usize,
    /// The ends of the last two streams this crate created that the allocation moved between
    /// (kept once it is eager), so that a buffer passed back and forth looks neither up again.
    ends: [Option<Arc<StreamEnd>>; 2],
    /// The allocation moves between streams: each use is marked by an event recorded right
    /// after it. A lazy mark is recorded only when another stream asks, and then covers
    /// everything its stream has enqueued since, later uses of other buffers included, which
    /// would serialise a pipeline (a copy in waiting for the previous chunk's copy out).
    eager: bool,
}

// SAFETY: the raw handles are driver objects usable from any thread; the state is locked.
unsafe impl Send for State {}

#[derive(Debug)]
struct Inner {
    ctx: Context,
    state: Mutex<State>,
}

/// The uses of one allocation, held by the allocation (which its buffer and the graphs that
/// hold it share).
#[derive(Debug)]
pub(crate) struct Uses(Inner);

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn raw_ctx(&self) -> ffi::CUcontext {
        self.ctx.raw()
    }

    /// A plain event of the context (a spare one, or a new one).
    fn event(&self) -> Result<ffi::CUevent> {
        self.ctx.plain_event()
    }

    /// Gives an event back: kept for reuse, or destroyed (queued inside a host function).
    fn release(&self, ev: ffi::CUevent) {
        self.ctx.recycle_plain_event(ev);
    }

    /// Records `ev` on `stream` (`cuEventRecord`; a default stream with the context current).
    fn record(&self, ev: ffi::CUevent, stream: ffi::CUstream) -> Result<()> {
        let _bound = bind_if_special(stream, self.raw_ctx())?;
        let f = driver_fn!(cuEventRecord);
        // SAFETY: the event is ours and of this context; the stream is live (a lazy use's
        // stream is held by its end's lock, or lives as long as the context; otherwise it is
        // the caller's).
        check(unsafe { f(ev, stream) }, "cuEventRecord")
    }

    /// A new event of ours recorded on `stream`.
    fn record_new(&self, stream: ffi::CUstream) -> Result<ffi::CUevent> {
        let ev = self.event()?;
        match self.record(ev, stream) {
            Ok(()) => Ok(ev),
            Err(e) => {
                self.release(ev);
                Err(e)
            }
        }
    }

    /// Makes `waiter` wait for `ev` (`cuStreamWaitEvent`).
    fn wait(&self, waiter: ffi::CUstream, ev: ffi::CUevent) -> Result<()> {
        let _bound = bind_if_special(waiter, self.raw_ctx())?;
        let f = driver_fn!(cuStreamWaitEvent);
        // SAFETY: both are live; the waiter's context is the buffer's (checked by the caller),
        // and a wait on an event of the same context is always legal.
        check(unsafe { f(waiter, ev, 0) }, "cuStreamWaitEvent")
    }

    /// Waits on the host for the context's work (the end of a use nothing marks).
    #[cold]
    fn synchronize_context(&self) -> Result<()> {
        let _bound = bind(self.raw_ctx())?;
        let f = driver_fn!(cuCtxSynchronize);
        // SAFETY: the context is current.
        check(unsafe { f() }, "cuCtxSynchronize")
    }

    /// Whether `stream` lives as long as the context (the legacy default stream, the service
    /// stream), which the tracker holds.
    fn context_lived(&self, stream: ffi::CUstream) -> bool {
        matches!(stream as usize, 0 | 1) || self.ctx.service_stream_if_created() == Some(stream)
    }

    /// Whether the use `u` was made on `stream`, a live stream of the caller's: the same handle,
    /// and `u`'s stream has not ended since (a handle may be reused by a later stream). Never
    /// for a stream whose end is unknown, except those that live as long as the context.
    #[inline]
    fn same_stream(&self, u: &Use, stream: ffi::CUstream) -> bool {
        u.stream == stream
            && match &u.end {
                Some(end) => !end.has_ended(),
                None => self.context_lived(stream),
            }
    }

    /// The end of `stream` if this crate created it (looked up, or the cached answer that it
    /// did not).
    fn find_end(&self, state: &mut State, stream: ffi::CUstream) -> Option<Arc<StreamEnd>> {
        let raw = stream as usize;
        if raw <= 2 || raw == state.unknown {
            return None;
        }
        let cached = state.ends.iter().flatten();
        if let Some(e) = cached.filter(|e| !e.has_ended()).find(|e| e.raw() == raw) {
            return Some(Arc::clone(e));
        }
        let end = known_streams::end_of(stream);
        match &end {
            None => state.unknown = raw,
            Some(e) if state.eager => {
                // The newest first; the older of the two goes.
                state.ends.swap(0, 1);
                state.ends[0] = Some(Arc::clone(e));
            }
            Some(_) => {}
        }
        end
    }

    /// Makes `waiter` wait for the use `u` (nothing if it is on `waiter` itself): a lazy use on
    /// a live stream becomes an evented one (the event is recorded now and kept, so other
    /// waiters reuse it); one on a stream that has ended is waited for by its final event.
    fn wait_for(&self, waiter: ffi::CUstream, u: &mut Use) -> Result<()> {
        if u.mark == Mark::Done || (u.mark != Mark::Lost && self.same_stream(u, waiter)) {
            return Ok(());
        }
        match u.mark {
            Mark::Lazy => {
                let ended = {
                    let guard = u.end.as_ref().map(|e| e.lock());
                    match guard.as_deref() {
                        None | Some(End::Live) => {
                            u.mark = Mark::Event(self.record_new(u.stream)?);
                            None
                        }
                        Some(&ended) => Some(ended),
                    }
                };
                match (ended, u.mark) {
                    (None, Mark::Event(ev)) => self.wait(waiter, ev),
                    (Some(End::Marked(fev)), _) => self.wait(waiter, fev),
                    _ => {
                        self.synchronize_context()?;
                        u.mark = Mark::Done;
                        Ok(())
                    }
                }
            }
            Mark::Event(ev) => self.wait(waiter, ev),
            Mark::Lost => {
                // The stream is gone and nothing marks the end of the use: wait for the
                // context's work (rare: a stream handed over or ended inside a host function).
                self.synchronize_context()?;
                u.mark = Mark::Done;
                Ok(())
            }
            Mark::Done => Ok(()),
        }
    }

    /// Gives the lazy use `u` an event of its own, recorded after it: on its stream while it
    /// lives, else after the stream's final event (on the context's service stream). A stream
    /// that ended where no event could be recorded leaves the use lost.
    fn own_event(&self, u: &mut Use) -> Result<()> {
        let guard = u.end.as_ref().map(|e| e.lock());
        let ev = match guard.as_deref() {
            None | Some(End::Live) => self.record_new(u.stream)?,
            Some(&End::Marked(fev)) => {
                let service = self.ctx.service_stream()?;
                self.wait(service, fev)?;
                self.record_new(service)?
            }
            Some(End::Lost) => {
                u.mark = Mark::Lost;
                return Ok(());
            }
        };
        u.mark = Mark::Event(ev);
        Ok(())
    }

    /// The use of new work on `stream` just enqueued, reusing `old` (the stream's previous use
    /// in this role, consumed) where it can; on an error (no event could be recorded) the use is
    /// lost, and the error comes with it.
    fn use_after(
        &self,
        state: &mut State,
        stream: ffi::CUstream,
        old: Option<Use>,
    ) -> (Use, Option<Error>) {
        // The old use's event is ours to record again, whatever its stream (a wait already
        // enqueued on it keeps what it waits for); its end only if it is this stream's.
        let (old_ev, old_end) = match old {
            Some(Use {
                mark,
                end,
                stream: s,
            }) => (
                match mark {
                    Mark::Event(ev) => Some(ev),
                    _ => None,
                },
                end.filter(|e| s == stream && !e.has_ended()),
            ),
            None => (None, None),
        };
        let end = match old_end {
            Some(e) => Some(e),
            None => self.find_end(state, stream),
        };
        if !state.eager && (end.is_some() || self.context_lived(stream)) {
            if let Some(ev) = old_ev {
                self.release(ev);
            }
            let u = Use {
                stream,
                end,
                mark: Mark::Lazy,
            };
            return (u, None);
        }
        let recorded = match old_ev {
            Some(ev) => self
                .record(ev, stream)
                .map(|()| ev)
                .inspect_err(|_| self.release(ev)),
            None => self.record_new(stream),
        };
        let (mark, err) = match recorded {
            Ok(ev) => (Mark::Event(ev), None),
            Err(e) => (Mark::Lost, Some(e)),
        };
        (Use { stream, end, mark }, err)
    }

    /// The body of [`Uses::free_after_uses`], on the tracker's state taken out of it.
    fn free_after(
        &self,
        state: &mut State,
        fallback: impl FnOnce(&Context) -> Result<ffi::CUstream>,
        free: impl FnOnce(ffi::CUstream, &Context) -> Result<()>,
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
        // The chosen stream cannot end while its end is locked (and says it lives).
        let guard = end.as_ref().map(|e| e.lock());
        let live = guard.as_deref().is_none_or(|st| *st == End::Live);
        let stream = match found {
            Some(stream) if live => stream,
            _ => fallback(&self.ctx)?,
        };
        for u in write.iter_mut().chain(reads.iter_mut()) {
            self.wait_for(stream, u)?;
        }
        free(stream, &self.ctx)?;
        drop(guard);
        if let Some(w) = write.take() {
            self.release_use(w);
        }
        for r in reads.drain(..) {
            self.release_use(r);
        }
        Ok(())
    }

    fn release_use(&self, u: Use) {
        if let Mark::Event(ev) = u.mark {
            self.release(ev);
        }
    }
}

impl Uses {
    /// The memory's context.
    #[inline]
    pub(crate) fn ctx(&self) -> &Context {
        &self.0.ctx
    }

    /// No use yet, for memory of `ctx`.
    pub(crate) fn new(ctx: &Context) -> Uses {
        Uses(Inner {
            ctx: ctx.clone(),
            state: Mutex::new(State::default()),
        })
    }

    /// Memory of `ctx` just written by work enqueued on `stream` (its allocation), with no
    /// earlier use: the use is recorded without the checks and waits of
    /// [`around`](Uses::around). An error says the use could not be marked (it is recorded as
    /// covered by the context's completion only).
    pub(crate) fn written_on(ctx: &Context, stream: ffi::CUstream) -> (Uses, Result<()>) {
        let mut inner = Inner {
            ctx: ctx.clone(),
            state: Mutex::new(State::default()),
        };
        let mut state = State::default();
        let (u, failed) = inner.use_after(&mut state, stream, None);
        state.write = Some(u);
        // Not shared yet: no lock.
        *inner.state.get_mut().unwrap_or_else(|e| e.into_inner()) = state;
        (Uses(inner), failed.map_or(Ok(()), Err))
    }

    /// No use yet, for memory of `ctx` that moves between streams from the start: every use is
    /// marked by an event recorded right after it (a graph allocation, whose uses are all in
    /// one capture, where a lazy mark could be asked for after a fork has joined).
    pub(crate) fn new_eager(ctx: &Context) -> Uses {
        Uses(Inner {
            ctx: ctx.clone(),
            state: Mutex::new(State {
                eager: true,
                ..State::default()
            }),
        })
    }

    /// Runs `op`, which enqueues work of kind `access` on `stream` (of the buffer's context,
    /// checked by the caller), after making the stream wait for the earlier uses it conflicts
    /// with; records the use once `op` has succeeded. If `op` fails nothing is recorded; if the
    /// use cannot be marked after `op` succeeded (no event could be recorded), it is recorded as
    /// covered by the context's completion only, and the error returned.
    pub(crate) fn around<R>(
        &self,
        stream: ffi::CUstream,
        access: Access,
        op: impl FnOnce() -> Result<R>,
    ) -> Result<R> {
        self.around_tracked(stream, access, || {
            op().map_err(|err| Failed {
                err,
                enqueued: false,
            })
        })
        .map_err(|f| f.err)
    }

    /// [`around`](Uses::around) for work that may fail after it was enqueued (an inner
    /// tracker's marking, when several allocations are used at once): such work is recorded
    /// like work that succeeded, so the free still waits for it.
    fn around_tracked<R>(
        &self,
        stream: ffi::CUstream,
        access: Access,
        op: impl FnOnce() -> Result<R, Failed>,
    ) -> Result<R, Failed> {
        let not_enqueued = |err| Failed {
            err,
            enqueued: false,
        };
        let inner = &self.0;
        let mut state = inner.lock();
        let s = &mut *state;
        // The hot path of a buffer used on one stream of this crate: the use would leave the
        // state as it is (the same stream's lazy mark, nothing to wait for), so only the work
        // runs, under the lock.
        let lazy_here = |u: &Use| u.mark == Mark::Lazy && inner.same_stream(u, stream);
        let unchanged = match access {
            Access::Write => s.reads.is_empty() && s.write.as_ref().is_some_and(lazy_here),
            Access::Read => {
                s.write
                    .as_ref()
                    .is_none_or(|w| w.mark == Mark::Done || inner.same_stream(w, stream))
                    && s.reads.iter().any(lazy_here)
            }
        };
        if unchanged {
            return op();
        }
        if !s.eager {
            let elsewhere = |u: &Use| u.stream != stream && u.mark != Mark::Done;
            s.eager = s.write.iter().any(elsewhere)
                || (access == Access::Write && s.reads.iter().any(elsewhere));
        }
        if let Some(w) = s.write.as_mut() {
            inner.wait_for(stream, w).map_err(not_enqueued)?;
        }
        // A write waits for every read; a read for an earlier read recorded under the same
        // handle that may be another stream's (it replaces that record below).
        for r in s.reads.iter_mut() {
            if access == Access::Write || r.stream == stream {
                inner.wait_for(stream, r).map_err(not_enqueued)?;
            }
        }
        let out = match op() {
            Err(f) if !f.enqueued => return Err(f),
            r => r.map_err(|f| f.err),
        };
        // The work is enqueued: it is recorded even when no event can mark it (then only the
        // context's completion covers it, `Mark::Lost`), so that the free still waits for it.
        // `use_after` consumes the stream's previous use in this role either way.
        let failed = match access {
            Access::Write => {
                let old = s.write.take();
                let (u, failed) = inner.use_after(s, stream, old);
                s.write = Some(u);
                if !s.reads.is_empty() {
                    for r in s.reads.drain(..) {
                        inner.release_use(r);
                    }
                }
                failed
            }
            Access::Read => {
                let old = s
                    .reads
                    .iter()
                    .position(|r| r.stream == stream)
                    .map(|i| s.reads.swap_remove(i));
                let (u, failed) = inner.use_after(s, stream, old);
                s.reads.push(u);
                failed
            }
        };
        // The work's own error first, else the marking's.
        match (out, failed) {
            (Ok(out), None) => Ok(out),
            (Err(err), _) | (Ok(_), Some(err)) => Err(Failed {
                err,
                enqueued: true,
            }),
        }
    }

    /// [`around`](Uses::around) for work touching several allocations at once: `list` holds
    /// each tracker and its access (one allocation listed twice counts once, as a write if
    /// either is). The trackers are locked in address order, so two threads working on the same
    /// allocations in another order cannot deadlock.
    pub(crate) fn around_all(
        list: &mut Vec<(&Uses, Access)>,
        stream: ffi::CUstream,
        op: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        list.sort_by_key(|(u, _)| u.key());
        list.dedup_by(|later, kept| {
            let same = later.0.key() == kept.0.key();
            if same && later.1 == Access::Write {
                kept.1 = Access::Write;
            }
            same
        });
        let mut op = Some(op);
        nest(list, stream, &mut || match op.take() {
            Some(f) => f(),
            None => Ok(()),
        })
        .map_err(|f| f.err)
    }

    /// `stream`'s work so far has completed (the caller synchronised it): uses on it need no
    /// more waiting.
    pub(crate) fn completed_on(&self, stream: ffi::CUstream) {
        let inner = &self.0;
        let mut state = inner.lock();
        let State { write, reads, .. } = &mut *state;
        for u in write.iter_mut().chain(reads.iter_mut()) {
            if u.mark != Mark::Lost && inner.same_stream(u, stream) {
                if let Mark::Event(ev) = u.mark {
                    inner.release(ev);
                }
                u.mark = Mark::Done;
            }
        }
    }

    /// Enqueues `free` (a stream-ordered free of the memory) after every recorded use: on the
    /// stream of a lazy use while it lives (its end locked meanwhile), which then needs no
    /// event, or else on `fallback()` (the context's service stream), after waits for each use.
    /// Nothing else refers to a tracker being freed (`&mut`): no lock. The tracker keeps no use
    /// afterwards; on an error nothing is freed, and the uses stay.
    pub(crate) fn free_after_uses(
        &mut self,
        fallback: impl FnOnce(&Context) -> Result<ffi::CUstream>,
        free: impl FnOnce(ffi::CUstream, &Context) -> Result<()>,
    ) -> Result<()> {
        let Inner { ctx, state } = &mut self.0;
        let slot = state.get_mut().unwrap_or_else(|e| e.into_inner());
        // The usual case: one write on a stream of this crate, never waited for elsewhere (a
        // buffer allocated, used and freed on one stream). Freed there, its end locked.
        if let (Some(w), true) = (&slot.write, slot.reads.is_empty()) {
            if w.mark == Mark::Lazy {
                let guard = w.end.as_ref().map(|e| e.lock());
                if guard.as_deref().is_none_or(|st| *st == End::Live) {
                    free(w.stream, ctx)?;
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

    /// Gives every lazy use an event of its own (recorded on its stream, or after the stream's
    /// final event) and returns the events of all uses, for a free that waits by polling them;
    /// `Err` when a use is lost (only the context's completion covers it). The tracker keeps no
    /// use afterwards.
    pub(crate) fn take_events(&self) -> std::result::Result<Vec<ffi::CUevent>, Error> {
        let inner = &self.0;
        let mut state = inner.lock();
        let mut uses: Vec<Use> = state.write.take().into_iter().collect();
        uses.append(&mut state.reads);
        let mut events = Vec::with_capacity(uses.len());
        let mut lost = None;
        for mut u in uses {
            if u.mark == Mark::Lazy {
                if let Err(e) = inner.own_event(&mut u) {
                    lost = Some(e);
                }
            }
            match u.mark {
                Mark::Event(ev) => events.push(ev),
                Mark::Lost => {
                    lost.get_or_insert(Error::Refused {
                        call: "cuEventRecord",
                        reason: "a stream that used the buffer ended inside a host function",
                    });
                }
                Mark::Lazy | Mark::Done => {}
            }
        }
        match lost {
            None => Ok(events),
            Some(e) => {
                for ev in events {
                    inner.release(ev);
                }
                Err(e)
            }
        }
    }

    /// Gives events from [`take_events`](Uses::take_events) back.
    pub(crate) fn release_events(&self, events: Vec<ffi::CUevent>) {
        for ev in events {
            self.0.release(ev);
        }
    }

    /// The tracker's address: the order in which nested [`around`](Uses::around) calls over
    /// several trackers lock them (as [`around_all`](Uses::around_all) does), so that two threads
    /// cannot deadlock. Stable while the tracker is borrowed.
    pub(crate) fn key(&self) -> usize {
        &self.0 as *const Inner as usize
    }
}

/// An error of work run inside [`Uses::around`], and whether the work was enqueued before it.
struct Failed {
    err: Error,
    enqueued: bool,
}

/// Runs `op` inside [`Uses::around_tracked`] of each tracker of `list`, the first outermost.
fn nest(
    list: &[(&Uses, Access)],
    stream: ffi::CUstream,
    op: &mut dyn FnMut() -> Result<()>,
) -> Result<(), Failed> {
    match list.split_first() {
        None => op().map_err(|err| Failed {
            err,
            enqueued: false,
        }),
        Some(((uses, access), rest)) => {
            uses.around_tracked(stream, *access, || nest(rest, stream, op))
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        if state.write.is_none() && state.reads.is_empty() {
            return;
        }
        let state = std::mem::take(state);
        for u in state.write.into_iter().chain(state.reads) {
            self.release_use(u);
        }
    }
}
