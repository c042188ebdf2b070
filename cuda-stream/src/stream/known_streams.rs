//! The streams this crate created and has not destroyed or handed over, each with the
//! [`StreamEnd`] of its current *epoch*: what a value of the layers above holds when it refers to
//! such a stream by handle alone (a buffer's last use on it, with no event recorded after it, a
//! *lazy mark*).
//!
//! An epoch ends when the stream ends (destroyed, or handed over with `into_raw`), when a capture
//! this crate begins is about to take the stream (its own capture, or a fork joining one), and
//! when its handle leaves the crate (`raw()`: other code may capture it at any moment, unseen).
//! While the epoch lasts its end says so, and the handle stays valid and out of any capture for
//! as long as the end's lock is held: the end is marked under that lock before any of those
//! happens (inside a host function a hand-over does not wait for the lock: see
//! `end_in_host_fn`). When an epoch ends while someone still holds its end, one event is
//! recorded on the stream (the *settling* event): it completes after every piece of work the
//! stream had so far, so it stands for any lazy mark of that epoch, and being recorded before the
//! capture begins it is an ordinary event that any stream may wait for. A buffer used on one
//! stream only therefore never pays for an event, and holding on to a stream costs one reference
//! count, with no registration per value.
//!
//! A stream that is not here (borrowed from another library, the per-thread default stream,
//! which is another stream on every thread, the legacy stream, a stream whose handle left the
//! crate) can end or be captured without notice, so its users record an event after every use
//! instead. Creating and destroying a stream costs one uncontended lock here (the map is split
//! into shards by handle, so that threads working on streams of their own do not meet).
//!
//! An epoch's end also holds the blocks of memory kept for reuse on the stream
//! (`block_cache`): they are freed on the stream, while it still lives and is not captured, as
//! the epoch ends.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::base::error::{Error, Result, check, driver_fn};
use crate::driver::capture_query::is_capturing;
use crate::driver::context::create_plain_event;
use crate::driver::deferred_destroy::in_host_fn;
use crate::driver::recycled_events;
use crate::ffi;
use crate::stream::block_cache::Blocks;

/// What is known of the end of a stream's epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// The epoch lasts: the stream lives, is not captured and its handle has not left the crate
    /// (at least while the end's lock is held).
    Live,
    /// The epoch has ended; this event, recorded on the stream as it ended (outside any
    /// capture), completes after all of its work of the epoch. Owned by the [`StreamEnd`].
    Marked(ffi::CUevent),
    /// The epoch ended where no event could be recorded (inside a host function, on a stream
    /// that had joined a capture, or the record failed): only the context's completion covers
    /// its work.
    Lost,
}

/// The end of one epoch of a stream this crate created; shared by the values that refer to the
/// stream's work of that epoch.
pub(crate) struct StreamEnd {
    raw: usize,
    ctx: usize,
    /// Set once the stream has ended (read without the lock; written under it).
    ended: AtomicBool,
    /// The stream was handed over inside a host function while another thread held the lock:
    /// the next holder ends the epoch as lost (see [`StreamEnd::lock`]).
    handed_over: AtomicBool,
    state: Mutex<EndState>,
}

/// What an end's lock guards.
#[derive(Debug)]
struct EndState {
    end: End,
    /// Blocks kept for reuse on the stream in this epoch (only while it lasts).
    blocks: Blocks,
}

/// An end's state, locked (see [`StreamEnd::lock`]): reads as the [`End`].
pub(crate) struct EndGuard<'a>(MutexGuard<'a, EndState>);

impl Deref for EndGuard<'_> {
    type Target = End;
    fn deref(&self) -> &End {
        &self.0.end
    }
}

impl DerefMut for EndGuard<'_> {
    fn deref_mut(&mut self) -> &mut End {
        &mut self.0.end
    }
}

impl EndGuard<'_> {
    /// Lets go of the blocks kept on `stream` (this end's) as its epoch ends: freed on it while
    /// it lives and is not captured, or, inside a host function (no driver call), handed over as
    /// orphans, freed once the context's work has completed.
    fn let_go_of_blocks(&mut self, stream: ffi::CUstream) {
        if let Some(b) = self.blocks() {
            if in_host_fn() {
                b.orphan_all();
            } else if !b.is_empty() {
                b.free_on(stream, None);
            }
        }
    }

    /// The blocks kept on the stream, while the epoch lasts.
    #[inline]
    pub(crate) fn blocks(&mut self) -> Option<&mut Blocks> {
        let st = &mut *self.0;
        (st.end == End::Live).then_some(&mut st.blocks)
    }
}

// SAFETY: the handles are driver objects usable from any thread; the state is locked.
unsafe impl Send for StreamEnd {}
// SAFETY: as above.
unsafe impl Sync for StreamEnd {}

impl std::fmt::Debug for StreamEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamEnd")
            .field("stream", &self.raw)
            .field("ended", &self.has_ended())
            .finish()
    }
}

impl StreamEnd {
    /// Whether the epoch has ended. `false` means the handle named this stream, in this epoch,
    /// when asked; a caller that holds the stream alive by other means (it is enqueueing work on
    /// a live handle equal to this one, outside a capture) may rely on it.
    #[inline]
    pub(crate) fn has_ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    /// The end's state, locked: while it says [`End::Live`] the stream cannot end, be captured
    /// by this crate or leave it. A hand-over made inside a host function while another thread
    /// held the lock is completed here first: the epoch is lost and its kept blocks orphaned.
    pub(crate) fn lock(&self) -> EndGuard<'_> {
        let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if self.handed_over.load(Ordering::Acquire) {
            self.lose_handed_over(&mut guard);
        }
        EndGuard(guard)
    }

    /// Ends a handed-over epoch under its lock: lost (no event can be recorded on a stream that
    /// left the crate), its kept blocks orphaned (freed once the context's work has completed,
    /// never on the stream), and `ended` set, under the lock like every change of the end (a
    /// holder that found the epoch lasting relies on `has_ended` staying false meanwhile).
    fn lose_handed_over(&self, st: &mut EndState) {
        if st.end == End::Live {
            st.blocks.orphan_all();
            st.end = End::Lost;
        }
        self.ended.store(true, Ordering::Release);
    }

    /// The stream's handle.
    #[inline]
    pub(crate) fn stream(&self) -> ffi::CUstream {
        self.raw as ffi::CUstream
    }

    fn new(raw: usize, ctx: usize) -> StreamEnd {
        StreamEnd {
            raw,
            ctx,
            ended: AtomicBool::new(false),
            handed_over: AtomicBool::new(false),
            state: Mutex::new(EndState {
                end: End::Live,
                blocks: Blocks::default(),
            }),
        }
    }

    /// Frees the blocks kept (of `pool`, where given) on the stream while the epoch lasts, then,
    /// if any was freed, calls `then` with the end still locked (the stream live and not
    /// captured); how many.
    fn free_blocks(&self, pool: Option<ffi::CUmemoryPool>, then: impl FnOnce(&StreamEnd)) -> usize {
        let mut guard = self.lock();
        let freed = match guard.blocks() {
            Some(b) if !b.is_empty() => b.free_on(self.stream(), pool),
            _ => 0,
        };
        if freed > 0 {
            then(self);
        }
        freed
    }

    /// Marks the end under the lock: records the settling event on the stream where it can;
    /// the error of a record that could not be made (the end is then [`End::Lost`]).
    fn finish(&self) -> Result<()> {
        let mut state = self.lock();
        if *state != End::Live {
            return Ok(());
        }
        // The kept blocks go first.
        state.let_go_of_blocks(self.stream());
        let (next, out) = if in_host_fn() {
            (End::Lost, Ok(()))
        } else {
            match record_settling(self.raw as ffi::CUstream, self.ctx as ffi::CUcontext) {
                Ok(ev) => (End::Marked(ev), Ok(())),
                Err(e) => (End::Lost, Err(e)),
            }
        };
        *state = next;
        self.ended.store(true, Ordering::Release);
        out
    }
}

/// A new plain event of `ctx` recorded on `stream`, which must not be capturing (the record
/// would be a node of the capture, and a stream waiting for it would join the capture): a
/// stream that joined a capture begun elsewhere is refused.
fn record_settling(stream: ffi::CUstream, ctx: ffi::CUcontext) -> Result<ffi::CUevent> {
    if is_capturing(stream)? {
        return Err(Error::Refused {
            call: "cuEventRecord",
            reason: "the stream has joined a capture: its earlier work cannot be marked",
        });
    }
    let ev = create_plain_event(ctx)?;
    let f = driver_fn!(cuEventRecord);
    // SAFETY: the event is new and of the stream's context; the stream is live (it ends after
    // this returns). A record on an explicit stream needs no current context.
    match check(unsafe { f(ev, stream) }, "cuEventRecord") {
        Ok(()) => Ok(ev),
        Err(e) => {
            let _ = recycled_events::destroy_or_defer(ev);
            Err(e)
        }
    }
}

impl Drop for StreamEnd {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(|e| e.into_inner()).end;
        if let End::Marked(ev) = state {
            // The holders of an end keep its context retained (they hold its memory's context),
            // so the event is still valid here.
            let _ = recycled_events::destroy_or_defer(ev);
        }
    }
}

/// Hashes a stream handle (an address: already well spread) as itself.
#[derive(Default)]
struct HandleHasher(u64);

impl Hasher for HandleHasher {
    fn finish(&self) -> u64 {
        // Addresses are aligned: the low bits carry little.
        (self.0 >> 4) ^ (self.0 >> 20)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_usize(&mut self, n: usize) {
        self.0 = n as u64;
    }
}

type Map = HashMap<usize, Arc<StreamEnd>, BuildHasherDefault<HandleHasher>>;

/// How many shards the known streams are split into.
const SHARDS: usize = 16;

/// Known streams, each with its end, in shards by handle.
static KNOWN: [Mutex<Option<Map>>; SHARDS] = [const { Mutex::new(None) }; SHARDS];

/// The shard of `raw`, locked.
#[inline]
fn known(raw: usize) -> MutexGuard<'static, Option<Map>> {
    let i = ((raw >> 4) ^ (raw >> 12)) % SHARDS;
    KNOWN[i].lock().unwrap_or_else(|e| e.into_inner())
}

/// This crate created `raw` in `ctx` and will mark its end before it goes.
pub(crate) fn created(raw: ffi::CUstream, ctx: ffi::CUcontext) {
    let end = Arc::new(StreamEnd::new(raw as usize, ctx as usize));
    known(raw as usize)
        .get_or_insert_with(Map::default)
        .insert(raw as usize, end);
}

/// `raw` is about to be destroyed or handed over: forgets it and marks its end (the settling
/// event is recorded only if someone still holds the end). Not called under any lock of this
/// crate.
pub(crate) fn ending(raw: ffi::CUstream) {
    let Some(end) = known(raw as usize)
        .as_mut()
        .and_then(|m| m.remove(&(raw as usize)))
    else {
        return;
    };
    if in_host_fn() {
        end_in_host_fn(end);
        return;
    }
    if Arc::strong_count(&end) == 1 {
        // Nobody held the epoch when it was forgotten. A thread's cache of the last epoch it
        // allocated on (`end_for_allocation`) can still find it until it is marked ended, so
        // the count is asked again under the lock: still unheld, only the kept blocks are left
        // to free, and the epoch ends as lost, which covers nobody's work (an allocation that
        // locks it later finds it over); held meanwhile, it is settled as any held epoch.
        #[cfg(feature = "test-hooks")]
        crate::base::hold_point::reached(crate::base::hold_point::UNHELD_END);
        let mut state = end.lock();
        if Arc::strong_count(&end) == 1 {
            state.let_go_of_blocks(end.stream());
            *state = End::Lost;
            end.ended.store(true, Ordering::Release);
            return;
        }
    }
    // A failed record leaves the end lost: the context's completion covers its work.
    let _ = end.finish();
}

/// The end of `end`'s epoch inside a host function (a stream handed over there: `into_raw`,
/// `raw()`; a drop there queues the whole destroy), where no event can be recorded: lost. The
/// host function never waits for the end's lock. Another thread may hold it while it records an
/// event on the stream, and that record can wait in the driver for a copy to pageable memory
/// that itself waits for this host function (measured: `bin/blocking_calls`, tests/README.md).
/// Then the next thread to take the lock, or the queued item drained on an ordinary thread
/// (`drain_deferred`), completes the end; until then only the call under way uses the stream.
fn end_in_host_fn(end: Arc<StreamEnd>) {
    end.handed_over.store(true, Ordering::Release);
    let busy = match end.state.try_lock() {
        Ok(mut st) => {
            end.lose_handed_over(&mut st);
            false
        }
        Err(std::sync::TryLockError::Poisoned(p)) => {
            end.lose_handed_over(&mut p.into_inner());
            false
        }
        Err(std::sync::TryLockError::WouldBlock) => true,
    };
    if busy {
        let held = Arc::into_raw(end) as usize;
        crate::driver::deferred_destroy::defer([crate::driver::deferred_destroy::Deferred::new(
            held,
            lose_queued,
        )]);
    }
}

/// The queued form of the completion of a hand-over made inside a host function: `held` is an
/// `Arc<StreamEnd>` from `Arc::into_raw`; taking its lock completes the end.
fn lose_queued(held: usize) -> Result<()> {
    // SAFETY: `held` came from `Arc::into_raw` in `end_in_host_fn`, and the queue hands each item
    // to its function exactly once.
    let end = unsafe { Arc::from_raw(held as *const StreamEnd) };
    drop(end.lock());
    Ok(())
}

/// `raw`'s handle leaves the crate (`Stream::raw` and the like): other code may capture it from
/// now on, where no hook of this crate sees it, so the stream is forgotten as at its end (its
/// later uses are marked by events recorded right after each) and its epoch settled now, before
/// other code can capture it (a stream that this crate is capturing records nothing: its epoch
/// was settled as the capture began). A use of the stream made by another thread at this very
/// moment checks the end again after its work (see `use_tracking`). Costs one lookup for a
/// stream that is not here.
pub(crate) fn lend(raw: ffi::CUstream) {
    if (raw as usize) <= 2 {
        return;
    }
    ending(raw);
}

/// A capture this crate begins is about to take `raw` (its own capture, or a fork joining one):
/// ends the current epoch, recording its settling event now, while the stream is not capturing,
/// if anyone holds the end; the stream's later uses start a new one. On an error (no event could
/// be recorded) the capture must not begin: the old epoch's uses are covered only by the
/// context's completion, which a capture would forbid waiting for.
pub(crate) fn settle(raw: ffi::CUstream) -> Result<()> {
    let old = {
        let mut map = known(raw as usize);
        let Some(e) = map.as_mut().and_then(|m| m.get_mut(&(raw as usize))) else {
            return Ok(());
        };
        if Arc::strong_count(e) == 1 {
            // No use holds it: nothing to settle, but the kept blocks are freed before the
            // capture takes the stream (allocations in a capture are graph memory).
            e.free_blocks(None, |_| {});
            return Ok(());
        }
        let fresh = Arc::new(StreamEnd::new(e.raw, e.ctx));
        std::mem::replace(e, fresh)
    };
    old.finish()
}

thread_local! {
    /// The last end this thread found for an allocation (by handle): the next allocation on the
    /// same stream takes it from here, with no lock of the map. Weak: a cached end keeps no
    /// epoch (nor its settling event) alive.
    static LAST_END: std::cell::RefCell<(usize, Weak<StreamEnd>)> =
        const { std::cell::RefCell::new((0, Weak::new())) };
}

/// [`end_of`] for an allocation on `raw`, a stream the caller borrows, through the thread's cache
/// of the last end found. A cached end that has not ended is `raw`'s current one: the stream
/// cannot end while borrowed, and `settle` replaces an epoch only with exclusive access to the
/// stream, when no allocation on it can run. The caller locks the end and checks that the epoch
/// lasts (a cached end can be found after its stream was forgotten: see `ending`).
#[inline]
pub(crate) fn end_for_allocation(raw: ffi::CUstream) -> Option<Arc<StreamEnd>> {
    let cached = LAST_END
        .try_with(|c| {
            let c = c.try_borrow().ok()?;
            if c.0 != raw as usize {
                return None;
            }
            c.1.upgrade().filter(|e| !e.has_ended())
        })
        .ok()
        .flatten();
    if cached.is_some() {
        return cached;
    }
    let end = end_of(raw)?;
    let _ = LAST_END.try_with(|c| {
        if let Ok(mut c) = c.try_borrow_mut() {
            *c = (raw as usize, Arc::downgrade(&end));
        }
    });
    Some(end)
}

/// The end of `raw` if this crate created it and it has not ended; `None` for any other stream,
/// which may end without notice.
#[inline]
pub(crate) fn end_of(raw: ffi::CUstream) -> Option<Arc<StreamEnd>> {
    known(raw as usize).as_ref()?.get(&(raw as usize)).cloned()
}

/// Frees the blocks kept on every known stream (of `pool`, of context `ctx`, where given), each
/// on its stream while its epoch lasts, calling `then` for each stream that freed one (its end
/// still locked); how many. Not under any lock of this crate.
pub(crate) fn free_kept_blocks_with(
    pool: Option<ffi::CUmemoryPool>,
    ctx: Option<ffi::CUcontext>,
    mut then: impl FnMut(&StreamEnd),
) -> usize {
    ends_of(ctx)
        .iter()
        .map(|e| e.free_blocks(pool, &mut then))
        .sum()
}

/// The ends of every known stream (of context `ctx`, where given), taken out of the shards so
/// that the caller locks them under no lock of the map.
fn ends_of(ctx: Option<ffi::CUcontext>) -> Vec<Arc<StreamEnd>> {
    let mut ends = Vec::new();
    for shard in &KNOWN {
        let map = shard.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = map.as_ref() {
            ends.extend(
                m.values()
                    .filter(|e| ctx.is_none_or(|c| c as usize == e.ctx))
                    .cloned(),
            );
        }
    }
    ends
}

/// The bytes of the blocks of `pool` kept on every known stream now.
pub(crate) fn kept_bytes(pool: ffi::CUmemoryPool) -> u64 {
    ends_of(None)
        .iter()
        .map(|e| e.lock().blocks().map_or(0, |b| b.kept_bytes(pool)))
        .sum()
}

/// [`free_kept_blocks_with`] and nothing after.
pub(crate) fn free_kept_blocks(
    pool: Option<ffi::CUmemoryPool>,
    ctx: Option<ffi::CUcontext>,
) -> usize {
    free_kept_blocks_with(pool, ctx, |_| {})
}

/// Frees the blocks of context `ctx` kept on its known streams, each on its stream, and makes
/// `stream` (of `ctx`, not capturing) wait for those frees (an event recorded after them on each
/// other stream), so that an allocation made on `stream` next may reuse the memory whatever the
/// pool's reuse policy; how many blocks. For an allocation that ran out of memory.
pub(crate) fn free_kept_blocks_before(ctx: ffi::CUcontext, stream: ffi::CUstream) -> usize {
    free_kept_blocks_with(None, Some(ctx), |e| {
        if e.stream() == stream {
            return;
        }
        // The wait is best effort: the driver's pool follows the frees on its own where its
        // reuse policy allows (the default).
        if let Ok(ev) = record_settling(e.stream(), ctx) {
            let _ = wait_event(stream, ev);
            let _ = recycled_events::destroy_or_defer(ev);
        }
    })
}

/// [`free_kept_blocks`] of `pool`, with an event recorded after the frees on each stream that
/// freed one (the caller waits for them, then destroys them): for a trim, which gives back only
/// memory whose free has run.
pub(crate) fn free_kept_blocks_marked(pool: ffi::CUmemoryPool) -> Vec<ffi::CUevent> {
    let mut events = Vec::new();
    free_kept_blocks_with(Some(pool), None, |e| {
        if let Ok(ev) = record_settling(e.stream(), e.ctx as ffi::CUcontext) {
            events.push(ev);
        }
    });
    events
}

/// `cuStreamWaitEvent(stream, ev)`.
fn wait_event(stream: ffi::CUstream, ev: ffi::CUevent) -> Result<()> {
    let f = driver_fn!(cuStreamWaitEvent);
    // SAFETY: both live (`stream` is the caller's; the event was just recorded outside any
    // capture on a stream whose end is locked and live).
    check(unsafe { f(stream, ev, 0) }, "cuStreamWaitEvent")
}

/// Probes of this module's locks (see `base::lock_probe`): the shards, and the end of every
/// known stream in a shard that is not held.
#[cfg(feature = "test-hooks")]
pub(crate) fn report_locks(out: &mut Vec<String>) {
    use crate::base::lock_probe::probe;
    for (i, shard) in KNOWN.iter().enumerate() {
        probe(out, &format!("known_streams::KNOWN[{i}]"), shard);
        if let Ok(map) = shard.try_lock() {
            for (raw, end) in map.iter().flatten() {
                probe(out, &format!("end of stream {raw:#x}"), &end.state);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_end_is_found_while_the_stream_lives_and_forgotten_after() {
        let raw = 0x7000_0010usize as ffi::CUstream;
        assert!(end_of(raw).is_none(), "an unknown stream has no end");
        created(raw, std::ptr::null_mut());
        let end = end_of(raw).expect("a known stream");
        assert!(!end.has_ended());
        assert_eq!(*end.lock(), End::Live);
        drop(end);
        // Nobody holds the end: it is marked without a driver call (none is loaded here).
        ending(raw);
        assert!(end_of(raw).is_none(), "an ended stream is forgotten");
        ending(raw);
        assert!(end_of(raw).is_none());
    }
}
