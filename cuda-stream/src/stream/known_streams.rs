//! The streams this crate created and has not destroyed or handed over, each with its
//! [`StreamEnd`]: what a value of the layers above holds when it refers to such a stream by
//! handle alone (a buffer's last use on it, with no event recorded after it).
//!
//! While the stream lives its end says so, and the handle stays valid for as long as the end's
//! lock is held: the end is marked under that lock before the stream is destroyed or handed
//! over. When the stream ends while someone still holds its end, one event is recorded on it
//! (the *final* event): it completes after every piece of work the stream ever had, so it stands
//! for any use made there. A buffer used on one stream only therefore never pays for an event,
//! and holding on to a stream costs one reference count, with no registration per value.
//!
//! A stream that is not here (borrowed from another library, or the per-thread default stream,
//! which is another stream on every thread) can end without notice, so its users record an event
//! after every use instead. Creating and destroying a stream costs one uncontended lock here.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::base::error::{Result, check, driver_fn};
use crate::driver::context::create_plain_event;
use crate::driver::deferred_destroy::in_host_fn;
use crate::driver::recycled_events;
use crate::ffi;

/// What is known of a stream's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// The stream lives (at least while the end's lock is held).
    Live,
    /// The stream has ended; this event, recorded on it as it ended, completes after all of its
    /// work. Owned by the [`StreamEnd`].
    Marked(ffi::CUevent),
    /// The stream ended where no event could be recorded (inside a host function, or the record
    /// failed): only the context's completion covers its work.
    Lost,
}

/// The end of one stream this crate created; shared by the values that refer to the stream.
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
    /// The stream's handle (valid only while the stream lives).
    #[inline]
    pub(crate) fn raw(&self) -> usize {
        self.raw
    }

    /// Whether the stream has ended. `false` means the handle named this stream when asked; a
    /// caller that holds the stream alive by other means (it is enqueueing work on a live handle
    /// equal to this one) may rely on it.
    #[inline]
    pub(crate) fn has_ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    /// The end's state, locked: while it says [`End::Live`] the stream cannot end.
    pub(crate) fn lock(&self) -> MutexGuard<'_, End> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Marks the end under the lock: records the final event on the stream where it can.
    fn finish(&self) {
        let mut state = self.lock();
        if *state != End::Live {
            return;
        }
        *state = if in_host_fn() {
            End::Lost
        } else {
            match record_final(self.raw as ffi::CUstream, self.ctx as ffi::CUcontext) {
                Ok(ev) => End::Marked(ev),
                Err(_) => End::Lost,
            }
        };
        self.ended.store(true, Ordering::Release);
    }
}

/// A new plain event of `ctx` recorded on `stream`.
fn record_final(stream: ffi::CUstream, ctx: ffi::CUcontext) -> Result<ffi::CUevent> {
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
    let end = Arc::new(StreamEnd {
        raw: raw as usize,
        ctx: ctx as usize,
        ended: AtomicBool::new(false),
        state: Mutex::new(End::Live),
    });
    known()
        .get_or_insert_with(Map::default)
        .insert(raw as usize, end);
}

/// `raw` is about to be destroyed or handed over: forgets it and marks its end (the final event
/// is recorded only if someone still holds the end). Not called under any lock of this crate.
pub(crate) fn ending(raw: ffi::CUstream) {
    let Some(end) = known().as_mut().and_then(|m| m.remove(&(raw as usize))) else {
        return;
    };
    if Arc::strong_count(&end) == 1 {
        // Nobody refers to the stream, and nobody can find it any more.
        end.ended.store(true, Ordering::Release);
        return;
    }
    end.finish();
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
