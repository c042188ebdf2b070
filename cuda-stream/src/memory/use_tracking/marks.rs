//! Marks: recording, settling and waiting for the uses of one tracker (see the module docs of
//! `use_tracking` for the model).
//!
//! Every driver call here runs under the tracker's lock; a call on the stream of a lazy use also
//! holds that stream's epoch end locked, so the epoch cannot end meanwhile. Locks are taken in
//! that order only (tracker, then the global list of streams or an epoch's end); an epoch's end
//! takes no tracker's lock.

use std::sync::{Arc, MutexGuard};

use crate::base::capture_mode::CaptureMode;
use crate::base::error::{Error, Result, check, driver_fn};
use crate::driver::capture_query::is_capturing;
use crate::driver::context::{bind, create_plain_event};
use crate::driver::recycled_events::try_destroy;
use crate::ffi;
use crate::graph::capture::unless_capturing_in;
use crate::graph::capture_mode_guard::exchange_capture_mode;
use crate::stream::known_streams::{self, End, StreamEnd};
use crate::stream::view::bind_if_special;

use super::{Inner, Mark, State, Use, context_capturing, joined_capture};

/// `cuCtxSynchronize` of `ctx` (the end of a use nothing marks), unless a capture this crate
/// began on a stream of the context is under way (`None`, no driver call): the call would fail
/// and invalidate it (a capture other code began is not seen). No such capture begins
/// meanwhile; one in another context, begun by this thread or in the global mode by another,
/// would refuse the call (and be invalidated) unless the thread's mode is relaxed for it, as it
/// is here.
#[cold]
pub(crate) fn synchronize_context_outside_captures(ctx: ffi::CUcontext) -> Option<Result<()>> {
    unless_capturing_in(ctx, || {
        let _bound = bind(ctx)?;
        let _relaxed = exchange_capture_mode(CaptureMode::Relaxed)?;
        let f = driver_fn!(cuCtxSynchronize);
        #[cfg(feature = "test-hooks")]
        IN_CTX_SYNCHRONIZE.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        // SAFETY: the context is current.
        let rc = unsafe { f() };
        #[cfg(feature = "test-hooks")]
        IN_CTX_SYNCHRONIZE.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        check(rc, "cuCtxSynchronize")
    })
}

/// How many threads are in the `cuCtxSynchronize` of [`synchronize_context_outside_captures`]
/// now (feature `test-hooks`: for a test driver's watchdog).
#[cfg(feature = "test-hooks")]
pub(crate) static IN_CTX_SYNCHRONIZE: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

impl Inner {
    #[inline]
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn raw_ctx(&self) -> ffi::CUcontext {
        self.ctx.raw()
    }

    /// A plain event of the context (a spare one, or a new one).
    fn event(&self) -> Result<ffi::CUevent> {
        self.ctx.plain_event()
    }

    /// Gives an event back: kept for reuse, or destroyed (queued inside a host function).
    pub(super) fn release(&self, ev: ffi::CUevent) {
        self.ctx.recycle_plain_event(ev);
    }

    /// Records `ev` on `stream` (`cuEventRecord`; a default stream with the context current).
    fn record(&self, ev: ffi::CUevent, stream: ffi::CUstream) -> Result<()> {
        let _bound = bind_if_special(stream, self.raw_ctx())?;
        let f = driver_fn!(cuEventRecord);
        // SAFETY: the event is ours and of the stream's context (this one, or the capture's in
        // `order_after`); the stream is live (a lazy use's stream is held by its end's lock, or
        // lives as long as the context; otherwise it is the caller's).
        check(unsafe { f(ev, stream) }, "cuEventRecord")
    }

    /// A new event of ours recorded on `stream`.
    pub(super) fn record_new(&self, stream: ffi::CUstream) -> Result<ffi::CUevent> {
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
    pub(super) fn wait(&self, waiter: ffi::CUstream, ev: ffi::CUevent) -> Result<()> {
        let _bound = bind_if_special(waiter, self.raw_ctx())?;
        let f = driver_fn!(cuStreamWaitEvent);
        // SAFETY: both are live; the waiter's context is the buffer's (checked by the caller),
        // or, for work across contexts (`Uses::around_from`), a created stream of another
        // context, which may wait for an event of any context.
        check(unsafe { f(waiter, ev, 0) }, "cuStreamWaitEvent")
    }

    /// Makes `later` wait for the work enqueued so far on `earlier` (both streams of one
    /// capture, so of one context, `ctx`: a node recorded on `earlier`, an edge to `later`).
    /// The event is one of the memory's context, given back at once; where the capture is in
    /// another context (a peer copy captured on the other device's stream) one of that context,
    /// made and destroyed here (an event records only on a stream of its own context).
    pub(super) fn order_after(
        &self,
        later: ffi::CUstream,
        earlier: ffi::CUstream,
        ctx: ffi::CUcontext,
    ) -> Result<()> {
        let ours = ctx == self.raw_ctx();
        let ev = if ours {
            self.event()?
        } else {
            create_plain_event(ctx)?
        };
        let r = self.record(ev, earlier).and_then(|()| self.wait(later, ev));
        if ours {
            self.release(ev);
        } else {
            let _ = try_destroy(ev);
        }
        r
    }

    /// Waits on the host for the context's work (the end of a use nothing marks). Refused, with
    /// no driver call, while a capture this crate began on a stream of the context is under way
    /// (see [`synchronize_context_outside_captures`]).
    #[cold]
    pub(super) fn synchronize_context(&self) -> Result<()> {
        synchronize_context_outside_captures(self.raw_ctx())
            .unwrap_or_else(|| Err(context_capturing()))
    }

    /// Whether `stream` is the context's service stream: private for the context's life (never
    /// lent, never captured), it takes lazy marks without an epoch.
    #[inline]
    fn is_service(&self, stream: ffi::CUstream) -> bool {
        self.ctx.service_stream_if_created() == Some(stream)
    }

    /// Whether the use `u` was made on `stream`, a live stream of the caller's, in the epoch
    /// that lasts: the same handle, and `u`'s epoch has not ended since (a handle may be reused
    /// by a later stream, and a capture or a lent handle ends the epoch). Never for a stream
    /// whose end is unknown, except those that live as long as the context (the legacy stream,
    /// whose uses are evented, and the service stream).
    #[inline]
    pub(super) fn same_stream(&self, u: &Use, stream: ffi::CUstream) -> bool {
        u.stream == stream
            && match &u.end {
                Some(end) => !end.has_ended(),
                None => matches!(stream as usize, 0 | 1) || self.is_service(stream),
            }
    }

    /// The end of `stream`'s epoch if the stream is private (looked up, or the cached answer
    /// that it is not).
    fn find_end(&self, state: &mut State, stream: ffi::CUstream) -> Option<Arc<StreamEnd>> {
        let raw = stream as usize;
        if raw <= 2 || raw == state.unknown {
            return None;
        }
        let cached = state.ends.iter().find(|(r, _)| *r == raw);
        if let Some(e) = cached
            .and_then(|(_, e)| e.upgrade())
            .filter(|e| !e.has_ended())
        {
            return Some(e);
        }
        let end = known_streams::end_of(stream);
        match &end {
            None => state.unknown = raw,
            Some(e) if state.eager => {
                // The newest first; the older of the two goes.
                state.ends.swap(0, 1);
                state.ends[0] = (raw, Arc::downgrade(e));
            }
            Some(_) => {}
        }
        end
    }

    /// A new event recorded on the stream of the lazy use `u`, whose epoch lasts (its end, if
    /// any, is locked by the caller): refused if the stream has joined a capture begun elsewhere
    /// (the record would be a node of that capture). The service stream is never captured.
    fn settle_live(&self, u: &Use) -> Result<ffi::CUevent> {
        if u.end.is_some() && is_capturing(u.stream)? {
            return Err(joined_capture());
        }
        self.record_new(u.stream)
    }

    /// Marks the use `u`, whose work was just enqueued on its stream, with an event recorded
    /// there now (lost if none can be recorded).
    #[cold]
    #[inline(never)]
    pub(super) fn mark_now(&self, u: &mut Use) {
        u.mark = match self.record_new(u.stream) {
            Ok(ev) => Mark::Event(ev),
            Err(_) => Mark::Lost,
        };
    }

    /// Makes `waiter` wait for the use `u` (nothing if it is on `waiter` itself, in the same
    /// epoch): a lazy use whose epoch lasts becomes an evented one (the event is recorded now
    /// and kept, so other waiters reuse it); one of an ended epoch is waited for by the epoch's
    /// settling event.
    pub(super) fn wait_for(&self, waiter: ffi::CUstream, u: &mut Use) -> Result<()> {
        if u.mark == Mark::Done || (u.mark != Mark::Lost && self.same_stream(u, waiter)) {
            return Ok(());
        }
        match u.mark {
            Mark::Lazy => {
                let ended = {
                    let guard = u.end.as_ref().map(|e| e.lock());
                    match guard.as_deref() {
                        None | Some(End::Live) => {
                            u.mark = Mark::Event(self.settle_live(u)?);
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
                // The epoch ended and nothing marks the end of the use: wait for the context's
                // work (rare: a stream handed over or ended inside a host function).
                self.synchronize_context()?;
                u.mark = Mark::Done;
                Ok(())
            }
            Mark::Done => Ok(()),
        }
    }

    /// Gives the lazy use `u` an event of its own, recorded after it: on its stream while its
    /// epoch lasts, else after the epoch's settling event (on the context's service stream). An
    /// epoch that ended where no event could be recorded leaves the use lost.
    pub(super) fn own_event(&self, u: &mut Use) -> Result<()> {
        let guard = u.end.as_ref().map(|e| e.lock());
        let ev = match guard.as_deref() {
            None | Some(End::Live) => self.settle_live(u)?,
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
    /// lost, and the error comes with it. Lazy only on a private stream (or the service stream)
    /// of an allocation that has not moved.
    pub(super) fn use_after(
        &self,
        state: &mut State,
        stream: ffi::CUstream,
        old: Option<Use>,
    ) -> (Use, Option<Error>) {
        let seq = state.next_seq();
        // The old use's event is ours to record again, whatever its stream (a wait already
        // enqueued on it keeps what it waits for); its end only if it is this stream's.
        let (old_ev, old_end) = match old {
            Some(Use {
                mark,
                end,
                stream: s,
                ..
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
        if !state.eager && (end.is_some() || self.is_service(stream)) {
            if let Some(ev) = old_ev {
                self.release(ev);
            }
            let u = Use {
                stream,
                end,
                mark: Mark::Lazy,
                seq,
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
        (
            Use {
                stream,
                end,
                mark,
                seq,
            },
            err,
        )
    }

    pub(super) fn release_use(&self, u: Use) {
        if let Mark::Event(ev) = u.mark {
            self.release(ev);
        }
    }
}
