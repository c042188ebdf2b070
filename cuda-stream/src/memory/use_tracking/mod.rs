//! Use tracking: the streams a buffer's work was enqueued on, so that a use on another stream
//! first waits for the earlier uses it conflicts with (a read for the last write; a write for the
//! last write and every read since), and the free waits for all of them. Reads on several
//! streams overlap. Nothing is asked of the user: no event to remember, no `record_stream`.
//!
//! What a use costs depends on its stream:
//!
//! - a stream this crate created, or the legacy default stream: nothing but a lock and a
//!   comparison. Only the handle is kept (*lazy*): a later use on another stream records an
//!   event on it then, which covers the use. Such a stream tells the tracker before it ends
//!   (`stream::known_streams`), while it can still record the event;
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
//! ordered, and a stream cannot end between the check and the record. Nothing under the lock
//! can destroy a stream (no deferred destroy is drained), so the end of a stream, which takes
//! the same lock, cannot be announced to a tracker by the thread that holds it.

use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::base::capture_mode::CaptureMode;
use crate::base::error::{Error, Result, check, driver_fn};
use crate::driver::context::{Context, bind};
use crate::driver::deferred_destroy::in_host_fn;
use crate::ffi;
use crate::graph::capture_mode_guard::exchange_capture_mode;
use crate::stream::known_streams::{self, StreamUser};
use crate::stream::view::bind_if_special;

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
    /// By recording an event on its stream when needed: the stream outlives the use's record
    /// (it tells the tracker before it ends).
    Lazy,
    /// By this event, recorded after the use and owned here.
    Event(ffi::CUevent),
    /// The stream ended inside a host function, where no event could be recorded: only the
    /// context's completion covers the use.
    Lost,
    /// Complete: nothing to wait for.
    Done,
}

#[derive(Debug, Clone, Copy)]
struct Use {
    stream: ffi::CUstream,
    mark: Mark,
}

#[derive(Debug, Default)]
struct State {
    write: Option<Use>,
    /// Reads since the last write, one per stream.
    reads: Vec<Use>,
    /// Streams looked up in `known_streams`: registered (true), or unknown (false).
    streams: Vec<(usize, bool)>,
    /// The allocation moves between streams: each use is marked by an event recorded right
    /// after it. A lazy mark is recorded only when another stream asks, and then covers
    /// everything its stream has enqueued since, later uses of other buffers included, which
    /// would serialise a pipeline (a copy in waiting for the previous chunk's copy out).
    eager: bool,
}

// SAFETY: the raw handles are driver objects usable from any thread; the state is locked.
unsafe impl Send for State {}

struct Inner {
    ctx: Context,
    state: Mutex<State>,
}

/// The uses of one allocation; shared by its buffer and the graphs that hold the allocation.
/// A clone shares the same uses; the last one gives their events back.
#[derive(Clone)]
pub(crate) struct Uses(Arc<Inner>);

impl std::fmt::Debug for Uses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.0.lock();
        f.debug_struct("Uses")
            .field("write", &s.write)
            .field("reads", &s.reads)
            .finish()
    }
}

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
        // stream tells us before it ends; otherwise it is the caller's).
        check(unsafe { f(ev, stream) }, "cuEventRecord")
    }

    /// Makes `waiter` wait for `ev` (`cuStreamWaitEvent`).
    fn wait(&self, waiter: ffi::CUstream, ev: ffi::CUevent) -> Result<()> {
        let _bound = bind_if_special(waiter, self.raw_ctx())?;
        let f = driver_fn!(cuStreamWaitEvent);
        // SAFETY: both are live; the waiter's context is the buffer's (checked by the caller),
        // and a wait on an event of the same context is always legal.
        check(unsafe { f(waiter, ev, 0) }, "cuStreamWaitEvent")
    }

    /// Makes `waiter` wait for the use `u` (nothing if it is on `waiter` itself): a lazy use
    /// becomes an evented one (the event is recorded now and kept, so other waiters reuse it).
    fn wait_for(&self, waiter: ffi::CUstream, u: &mut Use) -> Result<()> {
        if u.mark == Mark::Done || (u.stream == waiter && u.mark != Mark::Lost) {
            return Ok(());
        }
        match u.mark {
            Mark::Lazy => {
                let ev = self.event()?;
                if let Err(e) = self.record(ev, u.stream) {
                    self.release(ev);
                    return Err(e);
                }
                u.mark = Mark::Event(ev);
                self.wait(waiter, ev)
            }
            Mark::Event(ev) => self.wait(waiter, ev),
            Mark::Lost => {
                // The stream is gone and nothing marks the end of the use: wait for the
                // context's work (rare: a stream handed over or ended inside a host function).
                let _bound = bind(self.raw_ctx())?;
                let f = driver_fn!(cuCtxSynchronize);
                // SAFETY: the context is current.
                check(unsafe { f() }, "cuCtxSynchronize")?;
                u.mark = Mark::Done;
                Ok(())
            }
            Mark::Done => Ok(()),
        }
    }

    /// Whether a use on `stream` may stay lazy, registering this tracker with the stream on its
    /// first lazy use there.
    fn lasting(self: &Arc<Self>, state: &mut State, stream: ffi::CUstream) -> bool {
        if let Some(&(_, known)) = state.streams.iter().find(|(s, _)| *s == stream as usize) {
            return known;
        }
        match stream as usize {
            // The legacy default stream lives as long as the context, which the tracker holds.
            0 | 1 => return true,
            // The per-thread default stream is another stream on every thread.
            2 => return false,
            // The context's service stream also lives as long as the context.
            _ if self.ctx.service_stream_if_created() == Some(stream) => return true,
            _ => {}
        }
        let weak: Weak<dyn StreamUser> = Arc::downgrade(self) as Weak<dyn StreamUser>;
        let known = known_streams::add_user(stream, weak);
        state.streams.push((stream as usize, known));
        known
    }

    /// The mark of a new use on `stream` just enqueued, reusing `old` (the stream's previous
    /// mark in this role) where it can.
    fn mark_after(
        self: &Arc<Self>,
        state: &mut State,
        stream: ffi::CUstream,
        old: Option<Mark>,
    ) -> Result<Mark> {
        if !state.eager && self.lasting(state, stream) {
            if let Some(Mark::Event(ev)) = old {
                self.release(ev);
            }
            return Ok(Mark::Lazy);
        }
        let ev = match old {
            Some(Mark::Event(ev)) => ev,
            _ => self.event()?,
        };
        match self.record(ev, stream) {
            Ok(()) => Ok(Mark::Event(ev)),
            Err(e) => {
                self.release(ev);
                Err(e)
            }
        }
    }

    fn release_use(&self, u: Use) {
        if let Mark::Event(ev) = u.mark {
            self.release(ev);
        }
    }
}

impl StreamUser for Inner {
    fn stream_ending(&self, stream: ffi::CUstream) {
        let mut state = self.lock();
        state.streams.retain(|(s, _)| *s != stream as usize);
        let host_fn = in_host_fn();
        let State { write, reads, .. } = &mut *state;
        for u in write.iter_mut().chain(reads.iter_mut()) {
            if u.stream != stream || u.mark != Mark::Lazy {
                continue;
            }
            u.mark = Mark::Lost;
            if host_fn {
                continue;
            }
            if let Ok(ev) = self.event() {
                if self.record(ev, stream).is_ok() {
                    u.mark = Mark::Event(ev);
                } else {
                    self.release(ev);
                }
            }
        }
    }
}

impl Uses {
    /// No use yet, for memory of `ctx`.
    pub(crate) fn new(ctx: &Context) -> Uses {
        Uses(Arc::new(Inner {
            ctx: ctx.clone(),
            state: Mutex::new(State::default()),
        }))
    }

    /// No use yet, for memory of `ctx` that moves between streams from the start: every use is
    /// marked by an event recorded right after it (a graph allocation, whose uses are all in
    /// one capture, where a lazy mark could be asked for after a fork has joined).
    pub(crate) fn new_eager(ctx: &Context) -> Uses {
        Uses(Arc::new(Inner {
            ctx: ctx.clone(),
            state: Mutex::new(State {
                eager: true,
                ..State::default()
            }),
        }))
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
        let lazy_here = |u: &Use| u.stream == stream && u.mark == Mark::Lazy;
        let unchanged = match access {
            Access::Write => s.reads.is_empty() && s.write.as_ref().is_some_and(lazy_here),
            Access::Read => {
                s.write
                    .as_ref()
                    .is_none_or(|w| w.stream == stream || w.mark == Mark::Done)
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
        if access == Access::Write {
            for r in s.reads.iter_mut() {
                inner.wait_for(stream, r).map_err(not_enqueued)?;
            }
        }
        let out = match op() {
            Err(f) if !f.enqueued => return Err(f),
            r => r.map_err(|f| f.err),
        };
        let mut failed = None;
        // The work is enqueued: it is recorded even when no event can mark it (then only the
        // context's completion covers it, `Mark::Lost`), so that the free still waits for it.
        // `mark_after` consumes the stream's previous mark in this role either way.
        let mut marked = |r: Result<Mark>| {
            r.unwrap_or_else(|e| {
                failed.get_or_insert(e);
                Mark::Lost
            })
        };
        match access {
            Access::Write => {
                let same = s.write.filter(|w| w.stream == stream).map(|w| w.mark);
                let mark = marked(inner.mark_after(s, stream, same));
                if let Some(old) = s.write.replace(Use { stream, mark }) {
                    if old.stream != stream {
                        inner.release_use(old);
                    }
                }
                for r in std::mem::take(&mut s.reads) {
                    inner.release_use(r);
                }
            }
            Access::Read => {
                let i = s.reads.iter().position(|r| r.stream == stream);
                let old = i.map(|i| s.reads[i].mark);
                let mark = marked(inner.mark_after(s, stream, old));
                match i {
                    Some(i) => s.reads[i].mark = mark,
                    None => s.reads.push(Use { stream, mark }),
                }
            }
        }
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
        list.sort_by_key(|(u, _)| Arc::as_ptr(&u.0) as usize);
        list.dedup_by(|later, kept| {
            let same = Arc::ptr_eq(&later.0.0, &kept.0.0);
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

    /// For work recorded into a graph capture on `stream`: the graph orders its own nodes, and
    /// the graph holds the memory, so no use is recorded. An earlier use on another stream that
    /// this access conflicts with cannot be waited for from inside the capture (its event is not
    /// part of the graph), so the host waits for it here, before the node is recorded: an event
    /// recorded after it (`cuEventRecord` on its stream, which is not capturing), asked
    /// (`cuEventQuery`) until it has completed, with the thread's capture mode relaxed meanwhile
    /// (`cuThreadExchangeStreamCaptureMode`). A use on a
    /// stream that has joined a capture since is refused.
    pub(crate) fn settle_for_capture(&self, stream: ffi::CUstream, access: Access) -> Result<()> {
        let inner = &self.0;
        let mut state = inner.lock();
        let State { write, reads, .. } = &mut *state;
        let conflicting = write
            .iter_mut()
            .chain(reads.iter_mut().filter(|_| access == Access::Write));
        for u in conflicting {
            if u.stream == stream || u.mark == Mark::Done {
                continue;
            }
            // What follows is for work outside the capture (an event made and recorded on
            // another stream, asked about, waited for), so it cannot break the capture; but the
            // driver refuses such calls from a thread with a capture of its own (and during a
            // global-mode capture) unless the thread's mode is relaxed, and invalidates the
            // capture. Relaxed for this use, then restored.
            let _relaxed = exchange_capture_mode(CaptureMode::Relaxed)?;
            if u.mark == Mark::Lazy {
                let _bound = bind_if_special(u.stream, inner.raw_ctx())?;
                if crate::driver::capture_query::is_capturing(u.stream)? {
                    return Err(Error::Refused {
                        call: "cuEventRecord",
                        reason: "the buffer's earlier use is on a stream that has joined a \
                                 capture since: use the buffer on the capturing stream",
                    });
                }
                let ev = inner.event()?;
                if let Err(e) = inner.record(ev, u.stream) {
                    inner.release(ev);
                    return Err(e);
                }
                u.mark = Mark::Event(ev);
            }
            match u.mark {
                Mark::Event(ev) => {
                    // Polled, not `cuEventSynchronize`: a blocking wait invalidates the
                    // thread's capture on driver 580 even in relaxed mode (measured on the
                    // H100), a query does not.
                    let query = driver_fn!(cuEventQuery);
                    let mut pause = std::time::Duration::from_micros(1);
                    loop {
                        // SAFETY: the event is live (the tracker's).
                        let rc = unsafe { query(ev) };
                        if rc != ffi::CUresult::CUDA_ERROR_NOT_READY {
                            check(rc, "cuEventQuery")?;
                            break;
                        }
                        std::thread::sleep(pause);
                        pause = (pause * 2).min(std::time::Duration::from_micros(200));
                    }
                    inner.release(ev);
                    u.mark = Mark::Done;
                }
                Mark::Lost => {
                    return Err(Error::Refused {
                        call: "cuEventQuery",
                        reason: "the buffer's earlier use was on a stream that ended inside a \
                                 host function: synchronise the context before the capture",
                    });
                }
                Mark::Lazy | Mark::Done => {}
            }
        }
        Ok(())
    }

    /// `stream`'s work so far has completed (the caller synchronised it): uses on it need no
    /// more waiting.
    pub(crate) fn completed_on(&self, stream: ffi::CUstream) {
        let inner = &self.0;
        let mut state = inner.lock();
        let State { write, reads, .. } = &mut *state;
        for u in write.iter_mut().chain(reads.iter_mut()) {
            if u.stream == stream && u.mark != Mark::Lost {
                if let Mark::Event(ev) = u.mark {
                    inner.release(ev);
                }
                u.mark = Mark::Done;
            }
        }
    }

    /// Enqueues `free` (a stream-ordered free of the memory) after every recorded use: on the
    /// stream of a lazy use, which then needs no event, or else on `fallback()` (the context's
    /// service stream), after waits for each use. All under the tracker's lock, so no stream
    /// ends meanwhile. The tracker keeps no use afterwards. On an error nothing is freed.
    pub(crate) fn free_after_uses(
        &self,
        fallback: impl FnOnce() -> Result<ffi::CUstream>,
        free: impl FnOnce(ffi::CUstream) -> Result<()>,
    ) -> Result<()> {
        let inner = &self.0;
        let mut state = inner.lock();
        let State { write, reads, .. } = &mut *state;
        let lazy = write
            .iter()
            .chain(reads.iter())
            .find(|u| u.mark == Mark::Lazy)
            .map(|u| u.stream);
        let stream = match lazy {
            Some(s) => s,
            None => fallback()?,
        };
        for u in write.iter_mut().chain(reads.iter_mut()) {
            inner.wait_for(stream, u)?;
        }
        free(stream)?;
        if let Some(w) = write.take() {
            inner.release_use(w);
        }
        for r in reads.drain(..) {
            inner.release_use(r);
        }
        Ok(())
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

    /// Records an event after every lazy use (on its stream) and returns the events of all
    /// uses, for a free that waits by polling them; `Err` when a use is lost (only the
    /// context's completion covers it). The tracker keeps no use afterwards.
    pub(crate) fn take_events(&self) -> std::result::Result<Vec<ffi::CUevent>, Error> {
        let inner = &self.0;
        let mut state = inner.lock();
        let mut uses: Vec<Use> = state.write.take().into_iter().collect();
        uses.append(&mut state.reads);
        let mut events = Vec::with_capacity(uses.len());
        let mut lost = None;
        for mut u in uses {
            if u.mark == Mark::Lazy {
                match inner.event().and_then(|ev| {
                    inner
                        .record(ev, u.stream)
                        .map(|()| ev)
                        .inspect_err(|_| inner.release(ev))
                }) {
                    Ok(ev) => u.mark = Mark::Event(ev),
                    Err(e) => lost = Some(e),
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
    /// cannot deadlock.
    pub(crate) fn key(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
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
        let state = std::mem::take(self.state.get_mut().unwrap_or_else(|e| e.into_inner()));
        for u in state.write.into_iter().chain(state.reads) {
            self.release_use(u);
        }
    }
}
