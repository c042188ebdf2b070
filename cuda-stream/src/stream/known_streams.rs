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
//! happens. When an epoch ends while someone still holds its end, one event is recorded on the
//! stream (the *settling* event): it completes after every piece of work the stream had so far,
//! so it stands for any lazy mark of that epoch, and being recorded before the capture begins it
//! is an ordinary event that any stream may wait for. A buffer used on one stream only therefore
//! never pays for an event, and holding on to a stream costs one reference count, with no
//! registration per value.
//!
//! A stream that is not here (borrowed from another library, the per-thread default stream,
//! which is another stream on every thread, the legacy stream, a stream whose handle left the
//! crate) can end or be captured without notice, so its users record an event after every use
//! instead. Creating and destroying a stream costs one uncontended lock here.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::base::error::{Error, Result, check, driver_fn};
use crate::driver::capture_query::is_capturing;
use crate::driver::context::create_plain_event;
use crate::driver::deferred_destroy::in_host_fn;
use crate::driver::recycled_events;
use crate::ffi;

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
    state: Mutex<End>,
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
    /// by this crate or leave it.
    pub(crate) fn lock(&self) -> MutexGuard<'_, End> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn new(raw: usize, ctx: usize) -> StreamEnd {
        StreamEnd {
            raw,
            ctx,
            ended: AtomicBool::new(false),
            state: Mutex::new(End::Live),
        }
    }

    /// Marks the end under the lock: records the settling event on the stream where it can;
    /// the error of a record that could not be made (the end is then [`End::Lost`]).
    fn finish(&self) -> Result<()> {
        let mut state = self.lock();
        if *state != End::Live {
            return Ok(());
        }
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
        let state = *self.state.get_mut().unwrap_or_else(|e| e.into_inner());
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

/// Known streams, each with its end.
static KNOWN: Mutex<Option<Map>> = Mutex::new(None);

fn known() -> MutexGuard<'static, Option<Map>> {
    KNOWN.lock().unwrap_or_else(|e| e.into_inner())
}

/// This crate created `raw` in `ctx` and will mark its end before it goes.
pub(crate) fn created(raw: ffi::CUstream, ctx: ffi::CUcontext) {
    let end = Arc::new(StreamEnd::new(raw as usize, ctx as usize));
    known()
        .get_or_insert_with(Map::default)
        .insert(raw as usize, end);
}

/// `raw` is about to be destroyed or handed over: forgets it and marks its end (the settling
/// event is recorded only if someone still holds the end). Not called under any lock of this
/// crate.
pub(crate) fn ending(raw: ffi::CUstream) {
    let Some(end) = known().as_mut().and_then(|m| m.remove(&(raw as usize))) else {
        return;
    };
    if Arc::strong_count(&end) == 1 {
        // Nobody refers to the stream, and nobody can find it any more.
        end.ended.store(true, Ordering::Release);
        return;
    }
    // A failed record leaves the end lost: the context's completion covers its work.
    let _ = end.finish();
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
        let mut map = known();
        let Some(e) = map.as_mut().and_then(|m| m.get_mut(&(raw as usize))) else {
            return Ok(());
        };
        if Arc::strong_count(e) == 1 {
            // No use holds it: nothing to settle.
            return Ok(());
        }
        let fresh = Arc::new(StreamEnd::new(e.raw, e.ctx));
        std::mem::replace(e, fresh)
    };
    old.finish()
}

/// The end of `raw` if this crate created it and it has not ended; `None` for any other stream,
/// which may end without notice.
#[inline]
pub(crate) fn end_of(raw: ffi::CUstream) -> Option<Arc<StreamEnd>> {
    known().as_ref()?.get(&(raw as usize)).cloned()
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
