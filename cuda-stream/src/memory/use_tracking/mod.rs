//! Use tracking, and the ordering model of device memory on streams that it implements.
//!
//! Every allocation (a [`DeviceBuffer`](crate::DeviceBuffer)'s, shared with the graphs that hold
//! it) records the streams its work was enqueued on, so that a use on another stream first waits
//! for the earlier uses it conflicts with (a read for the last write; a write for the last write
//! and every read since), and the free waits for all of them. Reads on several streams overlap.
//! Nothing is asked of the user: no event to remember, no `record_stream`. What follows is the
//! model every operation of the memory layer (and the peer copies, NCCL calls and graph replays
//! that use it) is checked against.
//!
//! # What a buffer records
//!
//! At most one *write* (the last) and one *read* per stream since it. Each is a *use*: the
//! stream's handle, the end of the stream's current *epoch* for a private stream (below), a
//! sequence number (a use recorded later has a larger one), and a *mark*, which says how the end
//! of the use is waited for:
//!
//! - `Lazy`: nothing but the handle and the epoch; only on a private stream. A lazy mark is
//!   *settled* when someone needs it: while its epoch lasts, by an event recorded on its stream
//!   then (which covers the use and whatever the stream enqueued since, and becomes the mark);
//!   once the epoch has ended, by the epoch's settling event.
//! - `Event`: an event of the tracker's, recorded on the stream right after the use (or when a
//!   lazy mark was settled).
//! - `Lost`: the use's epoch ended where no event could be recorded (inside a host function, or
//!   the record failed): only the context's completion (`cuCtxSynchronize`) covers it.
//! - `Done`: the host has seen the use complete.
//!
//! A use is recorded once its work is enqueued, under the tracker's lock, which is held from the
//! waits before the work to the record after it, so two threads using one buffer are ordered.
//! Work that was enqueued but could not be marked is recorded `Lost`: the free still waits for it.
//!
//! # Private streams and epochs
//!
//! A stream is *private* while this crate created it, it lives and its handle has not left the
//! crate (`raw()` of [`Stream`](crate::Stream), of its owners and of
//! [`CaptureStream`](crate::CaptureStream), [`current_stream_raw`](crate::current_stream_raw),
//! `into_raw`); the context's service stream is private for the context's life. Only this crate
//! can capture a private stream. Every other stream (borrowed, the per-thread default stream, the
//! legacy stream, a stream whose handle was taken) may end or be captured by other code at any
//! moment, unseen, so a use there is marked by an event recorded right after it, in the call that
//! enqueued it. So is every use of a buffer that has moved between streams (*eager*): a lazy mark
//! settled later would also cover the work its stream enqueued since for other buffers, and
//! serialise a pipeline.
//!
//! A private stream's life is cut into epochs (`stream::known_streams`), each with an end that
//! its lazy uses share. An epoch ends when the stream ends, right before a capture this crate
//! begins takes the stream (`capture` on it, or a fork joining one), and when its handle leaves
//! the crate. If a use still holds the end then, one *settling* event is recorded on the stream,
//! under the end's lock, while the stream is not capturing: it completes after all of the
//! epoch's work, and, recorded outside any capture, any stream may wait for it.
//!
//! # The invariant
//!
//! **Every recorded use is covered by something that completes after it (its stream's order, for
//! a later use on that stream in the same epoch; an event recorded after it outside any capture;
//! or, for `Lost`, the context's completion), and nothing the tracker does on its own records
//! on, waits on, polls or frees on a stream that is being captured.**
//!
//! Each operation keeps it as follows.
//!
//! - *A use on stream `s`* (fill, copies, launches with `read()` / `write()`, pinned copies, NCCL
//!   calls, a graph replay) that is not captured: under the tracker's lock, `s` waits for each
//!   conflicting use made on another stream or in another epoch: on its event; for a lazy mark
//!   whose epoch lasts, on an event recorded on its stream now, under its end's lock (so the
//!   epoch cannot end meanwhile), after checking that stream is not capturing (a private stream
//!   can join a capture begun elsewhere by waiting on captured work: the use is then refused);
//!   for a lazy mark of an ended epoch, on the settling event; for `Lost`, by synchronising the
//!   context. Then the work is enqueued and the use recorded: lazy on a private stream of a
//!   buffer that has not moved, else with an event recorded on `s` now. A use on the stream and
//!   epoch of the last one, with nothing to wait for, only takes a new sequence number (and an
//!   event of its own if another thread took the stream's handle meanwhile, ending the epoch
//!   under it: `s` cannot be captured while the call is in progress).
//! - *Work on several streams at once* (a peer copy, whose remote buffer is recorded on its
//!   context's service stream; a graph replay holding buffers of other contexts, likewise; an
//!   NCCL group): each tracker waits and records on its own stream, the trackers locked in one
//!   global order, and the streams joined around the work by events both ways. A peer copy or
//!   kernel on a created stream is joined one way only: that stream waits for the remote
//!   buffer's conflicting uses itself ([`Uses::around_from`]), and the service stream waits for
//!   the work before the remote use is recorded there (no round trip between the devices).
//! - *The free*, in stream order after every use: on the stream of a lazy use whose epoch lasts
//!   (its end locked during `cuMemFreeAsync`), else on the context's service stream after waits
//!   for each use. A free whose use is on a private stream that joined a capture begun elsewhere
//!   cannot be ordered yet: it is queued and made at a later allocation or free, once that capture
//!   has ended. Memory without pools is freed once events recorded after each use have completed
//!   (polled at later allocations and frees). Where the free would be enqueued on a private
//!   stream whose epoch lasts (its end locked), the block may be kept in that epoch's cache
//!   instead (`stream::block_cache`): every use is ordered before the stream's later work, an
//!   allocation there in the same epoch takes it back as a fresh write on the stream, and the
//!   epoch's end frees what is left on the stream before it ends or is captured.
//! - *Completion seen on the host*: `copy_from_host` and `to_vec` synchronise their stream, then
//!   mark `Done` the uses on it numbered no later than their own: recorded before the
//!   synchronisation began, never one that another thread recorded meanwhile. `into_raw` waits
//!   for an event of every use and, if it cannot, leaves them all as they were.
//! - *A capture this crate begins* on `s`, and each fork that joins it: `s`'s epoch ends first
//!   (its settling event recorded before `cuStreamBeginCapture` or the joining wait); if that
//!   event cannot be recorded, the capture does not begin.
//! - *Work recorded into a capture*: no use is recorded. The conflicting uses outside the
//!   capture are waited for on the host before the node exists (their events polled with the
//!   thread's capture mode relaxed; a lazy mark on a stream that has joined a capture is refused),
//!   and the graph holds the allocation; every launch of an executable graph made from it
//!   through [`GraphExec::launch`](crate::GraphExec::launch) is a use (a write of each buffer).
//!   A buffer allocated in the capture ([`GraphBuffer`](crate::GraphBuffer)) is tracked inside it
//!   with captured events. In a capture this crate did not begin
//!   ([`Stream::in_capture`](crate::Stream::in_capture), a stream captured by raw calls), whose
//!   graphs are launched where no hook sees them, buffers are refused; `keep_alive_in` only
//!   ties one to the graph (ordering the raw work that uses it is that unsafe code's promise).
//!
//! # Calls while a stream is being captured
//!
//! While stream `c` is captured, by this thread or another: work enqueued on `c` becomes a node;
//! an event recorded on `c` becomes a node, and a stream that waits for it joins the capture; a
//! query or synchronisation of `c`, or of an event recorded in it, fails and invalidates the
//! capture; `cuMemFreeAsync` of memory from outside the capture fails. So the tracker records,
//! waits, polls and frees only on streams that are not capturing: `s` itself was checked, a lazy
//! mark's stream is checked (or, being private in a live epoch, cannot be captured by anyone but
//! this crate, which ends the epoch first), and events it waits for were recorded outside any
//! capture. Polling and synchronising calls (`cuEventQuery`, `cuEventSynchronize`,
//! `cuStreamSynchronize`, `cuCtxSynchronize`), on any stream or event, are refused too, and
//! invalidate the capture, when made by the capturing thread (unless its mode is relaxed) or,
//! during a global-mode capture, by any thread in global mode: the polls the tracker makes on its
//! own (the events of frees without pools, at allocations and frees; the host waits before a
//! captured node) relax the thread's mode for their duration. The waits the caller asks for
//! (`to_vec`, `copy_from_host`, `into_raw`) are the caller's calls and follow those rules. The
//! context synchronisation for a `Lost` use is refused, with no driver call, while a capture this
//! crate began on a stream of the context is under way (it would fail and invalidate that
//! capture; the operation returns `Error::Refused` and the use stays), and is made in the relaxed
//! mode otherwise, so that a capture in another context is not refused it. A free that needs it
//! waits for a later allocation or free. A memory free dropped inside a capture this thread
//! began (any mode but relaxed) is queued, and made once the capture has ended.
//!
//! # What the model leaves to unsafe code
//!
//! - A private stream made to wait on work captured elsewhere (`Stream::wait_stream` or
//!   `wait_event` on a stream that another library is capturing) joins that capture unseen. Its
//!   lazy marks are then refused, as above, but a join made at the very moment another thread
//!   settles one of them cannot be told apart: code that forks a capture it did not begin does
//!   not do it while other threads move buffers last used on the joining stream.
//! - With `programmatic_serialization` a kernel may start before the previous one on its stream
//!   has ended: the launch's `# Safety` contract covers it
//!   ([`Function::launch`](crate::Function::launch)).

use std::sync::{Arc, Mutex, Weak};

use crate::base::error::{Error, Result};
use crate::driver::context::Context;
use crate::ffi;
use crate::stream::known_streams::StreamEnd;

mod capture;
mod marks;
mod repeat;

#[cfg(feature = "nccl")]
pub(crate) use repeat::Repeated;
use repeat::{Recheck, repeated};

/// See `marks::IN_CTX_SYNCHRONIZE`.
#[cfg(feature = "test-hooks")]
pub(crate) fn threads_in_ctx_synchronize() -> usize {
    marks::IN_CTX_SYNCHRONIZE.load(std::sync::atomic::Ordering::SeqCst)
}
mod release;

pub(crate) use marks::synchronize_context_outside_captures;

/// What a use does to the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Reads it: may overlap other reads.
    Read,
    /// Writes it (or reads and writes): ordered after every earlier use.
    Write,
}

/// How a recorded use is waited for (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mark {
    /// By an event recorded on its stream when needed while its epoch lasts, else by the
    /// epoch's settling event. Only on a private stream (`Use::end`) or the service stream.
    Lazy,
    /// By this event, recorded after the use and owned here.
    Event(ffi::CUevent),
    /// The epoch ended where no event could be recorded: only the context's completion covers
    /// the use.
    Lost,
    /// Complete: nothing to wait for.
    Done,
}

#[derive(Debug)]
struct Use {
    stream: ffi::CUstream,
    /// The end of the stream's epoch, for a private stream (`None` for any other).
    end: Option<Arc<StreamEnd>>,
    mark: Mark,
    /// When the use was recorded, in the tracker's numbering.
    seq: u64,
}

#[derive(Debug, Default)]
struct State {
    write: Option<Use>,
    /// Reads since the last write, one per stream.
    reads: Vec<Use>,
    /// The last sequence number given to a use.
    seq: u64,
    /// The last stream looked up and found not to be this crate's (0: none), so that a buffer
    /// used again and again on a borrowed stream looks it up once.
    unknown: usize,
    /// The ends of the last two private streams the allocation moved between (kept once it is
    /// eager), by handle, so that a buffer passed back and forth looks neither up again. Weak:
    /// an epoch's end (and its settling event) goes with the last use that holds it, not with
    /// the cache.
    ends: [(usize, Weak<StreamEnd>); 2],
    /// The allocation moves between streams: each use is marked by an event recorded right
    /// after it. A lazy mark is recorded only when another stream asks, and then covers
    /// everything its stream has enqueued since, later uses of other buffers included, which
    /// would serialise a pipeline (a copy in waiting for the previous chunk's copy out).
    eager: bool,
    /// Uses by work recorded into captures this crate began and that are under way (purged at
    /// the next capture use once their capture has ended): conflicting uses on two streams of
    /// one capture are ordered inside its graph (see `capture.rs`).
    captured: Vec<Captured>,
}

/// A use of the memory by work recorded into capture `capture` on `stream`.
#[derive(Debug, Clone, Copy)]
struct Captured {
    capture: u64,
    stream: usize,
    write: bool,
}

impl State {
    /// The next sequence number.
    #[inline(always)]
    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }
}

// SAFETY: the raw handles are driver objects usable from any thread; the state is locked.
unsafe impl Send for State {}

#[derive(Debug)]
struct Inner {
    ctx: Context,
    /// `ctx.raw()`, kept beside the state: checks that compare contexts read it without
    /// reaching the context (a line fewer to miss on a cold path).
    /// (An address, so that the tracker stays `Send` and `Sync`.)
    ctx_raw: usize,
    state: Mutex<State>,
}

/// The uses of one allocation, held by the allocation (which its buffer and the graphs that
/// hold it share).
#[derive(Debug)]
pub(crate) struct Uses(Inner);

/// The reason of the refusal of a lazy mark on a private stream that has joined a capture begun
/// elsewhere (see [`joined_capture`]).
const JOINED: &str = "the buffer's earlier use is on a stream that has joined a capture begun \
                      elsewhere: it can be waited for once that capture has ended";

/// The refusal of a lazy mark whose stream has joined a capture begun elsewhere.
#[cold]
fn joined_capture() -> Error {
    Error::Refused {
        call: "cuEventRecord",
        reason: JOINED,
    }
}

/// The reason of the refusal of a context synchronisation (the end of a use nothing marks)
/// while a capture this crate began in the context is under way (see [`context_capturing`]).
const CONTEXT_CAPTURING: &str = "only the context's completion covers a use of the buffer, and a \
                                 stream of the context is being captured: it can be waited for \
                                 once that capture has ended";

/// The refusal of a context synchronisation while a capture of the context is under way.
#[cold]
fn context_capturing() -> Error {
    Error::Refused {
        call: "cuCtxSynchronize",
        reason: CONTEXT_CAPTURING,
    }
}

/// Whether `e` is [`joined_capture`]'s or [`context_capturing`]'s refusal: the operation can be
/// made once the capture has ended.
pub(crate) fn waits_for_a_capture(e: &Error) -> bool {
    matches!(e, Error::Refused { reason, .. }
        if *reason == JOINED || *reason == CONTEXT_CAPTURING)
}

impl Uses {
    /// A probe of the tracker's lock (see `base::lock_probe`).
    #[cfg(feature = "test-hooks")]
    pub(crate) fn report_lock(&self, out: &mut Vec<String>) {
        crate::base::lock_probe::probe(out, "tracker", &self.0.state);
    }

    /// The memory's context.
    #[inline]
    pub(crate) fn ctx(&self) -> &Context {
        &self.0.ctx
    }

    /// The memory's context's handle (`ctx().raw()`, read from the tracker itself).
    #[inline]
    pub(crate) fn ctx_raw(&self) -> ffi::CUcontext {
        self.0.ctx_raw as ffi::CUcontext
    }

    /// No use yet, for memory of `ctx`.
    pub(crate) fn new(ctx: &Context) -> Uses {
        Uses(Inner {
            ctx: ctx.clone(),
            ctx_raw: ctx.raw() as usize,
            state: Mutex::new(State::default()),
        })
    }

    /// Memory of `ctx` just written by work enqueued on `stream` (its allocation), a stream
    /// that is not private (the caller found no end for it), with no earlier use: the use is
    /// recorded without the checks and waits of
    /// [`around`](Uses::around). An error says the use could not be marked (it is recorded as
    /// covered by the context's completion only).
    pub(crate) fn written_on_unknown(ctx: &Context, stream: ffi::CUstream) -> (Uses, Result<()>) {
        let mut inner = Inner {
            ctx: ctx.clone(),
            ctx_raw: ctx.raw() as usize,
            state: Mutex::new(State::default()),
        };
        // Looked up by the caller: not a stream of the crate's (no second lookup).
        let mut state = State {
            unknown: stream as usize,
            ..State::default()
        };
        let (u, failed) = inner.use_after(&mut state, stream, None);
        state.write = Some(u);
        // Not shared yet: no lock.
        *inner.state.get_mut().unwrap_or_else(|e| e.into_inner()) = state;
        (Uses(inner), failed.map_or(Ok(()), Err))
    }

    /// Memory of `ctx` just allocated (or taken from the blocks kept) on `stream`, a private
    /// stream whose current epoch's end is `end`: a lazy write there, with no driver call.
    #[inline(always)]
    pub(crate) fn written_on_private(
        ctx: &Context,
        stream: ffi::CUstream,
        end: Arc<StreamEnd>,
    ) -> Uses {
        let mut state = State::default();
        let seq = state.next_seq();
        state.write = Some(Use {
            stream,
            end: Some(end),
            mark: Mark::Lazy,
            seq,
        });
        Uses(Inner {
            ctx: ctx.clone(),
            ctx_raw: ctx.raw() as usize,
            state: Mutex::new(state),
        })
    }

    /// No use yet, for memory of `ctx` that moves between streams from the start: every use is
    /// marked by an event recorded right after it (a graph allocation, whose uses are all in
    /// one capture, where a lazy mark could be asked for after a fork has joined).
    pub(crate) fn new_eager(ctx: &Context) -> Uses {
        Uses(Inner {
            ctx: ctx.clone(),
            ctx_raw: ctx.raw() as usize,
            state: Mutex::new(State {
                eager: true,
                ..State::default()
            }),
        })
    }

    /// Runs `op`, which enqueues work of kind `access` on `stream` (of the buffer's context,
    /// checked by the caller, and not capturing unless the allocation is a graph allocation of
    /// that capture), after making the stream wait for the earlier uses it conflicts with;
    /// records the use once `op` has succeeded. If `op` fails nothing is recorded; if the use
    /// cannot be marked after `op` succeeded (no event could be recorded), it is recorded as
    /// covered by the context's completion only, and the error returned.
    #[inline]
    pub(crate) fn around<R>(
        &self,
        stream: ffi::CUstream,
        access: Access,
        op: impl FnOnce() -> Result<R>,
    ) -> Result<R> {
        // The hot path of a buffer used again and again on one private stream, kept apart and
        // small (it runs right after a driver call, with little of the crate's code cached): the
        // use repeats the last one there, so only the work runs, under the lock.
        match self.run_repeated(stream, access, op) {
            Ok(out) => out,
            Err(op) => self.around_again(stream, access, op),
        }
    }

    /// [`around`](Uses::around) past its hot path: the lock taken again, every case.
    #[inline(never)]
    fn around_again<R>(
        &self,
        stream: ffi::CUstream,
        access: Access,
        op: impl FnOnce() -> Result<R>,
    ) -> Result<R> {
        self.around_tracked(stream, stream, access, || {
            op().map_err(|err| Failed {
                err,
                enqueued: false,
            })
        })
        .map_err(|f| f.err)
    }

    /// [`around`](Uses::around) for work enqueued on `waiter`, a stream of **another** context,
    /// whose use is recorded on `stream` (of the buffer's context), which `op` makes wait for
    /// the work after enqueueing it (see `memory::across`): the earlier uses the work conflicts
    /// with are waited for by `waiter` itself, through their events (a stream may wait for an
    /// event of another context), so that `waiter` never waits for `stream`, whose position
    /// after `op` follows the work. An earlier read recorded on `stream` that the new read
    /// replaces needs no wait: the new record, made on `stream` after `op`, comes after it in
    /// `stream`'s order.
    pub(crate) fn around_from(
        &self,
        waiter: ffi::CUstream,
        stream: ffi::CUstream,
        access: Access,
        op: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        self.around_tracked(waiter, stream, access, || {
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
    ///
    /// The work is enqueued on `waiter`, which waits for the conflicting uses; it is recorded
    /// on `stream`: the same stream but for [`around_from`](Uses::around_from).
    fn around_tracked<R>(
        &self,
        waiter: ffi::CUstream,
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
        // The hot path of a buffer used on one private stream: the use would leave the marks as
        // they are (the same stream's lazy mark in a live epoch, nothing to wait for), so only
        // the work runs, under the lock, and the use it repeats takes a new number (a host
        // completion seen before it must not cover it).
        let split = waiter != stream;
        // Work on another stream than the one it is recorded on: the marks' stream is not the
        // work's, so their order does not cover the work.
        let which = if split {
            None
        } else {
            repeated(inner, s, stream, access)
        };
        if let Some((_, u)) = which {
            let _recheck = Recheck { inner, u };
            return op();
        }
        if !s.eager {
            let elsewhere = |u: &Use| u.stream != stream && u.mark != Mark::Done;
            s.eager = s.write.iter().any(elsewhere)
                || (access == Access::Write && s.reads.iter().any(elsewhere));
        }
        if let Some(w) = s.write.as_mut() {
            inner.wait_for(waiter, w).map_err(not_enqueued)?;
        }
        // A write waits for every read; a read for an earlier read recorded under the same
        // handle that may be another stream's (it replaces that record below), unless the new
        // record is made on that stream after the work (`around_from`).
        for r in s.reads.iter_mut() {
            if access == Access::Write || (r.stream == stream && !split) {
                inner.wait_for(waiter, r).map_err(not_enqueued)?;
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
            uses.around_tracked(stream, stream, *access, || nest(rest, stream, op))
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
