//! A pool of streams leased exclusively: never the same stream to two live leases, and never a
//! stream that a leaked current-stream guard names (it is held back when given back).

use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::base::error::{Error, Result};
use crate::driver::context::Context;
use crate::ffi;
use crate::stream::owned::StreamOptions;
use crate::stream::view::{AsStream, KnownContext, Stream, forward_stream_ops};

/// Streams of one context and one set of options, created on demand and leased exclusively.
///
/// PyTorch hands out 32 pooled streams per priority round-robin, so lease N and lease N+32
/// alias and silently lose concurrency. Here a stream belongs to one live lease at a time; a
/// returned stream is reused without synchronising (its pending work simply stays ordered before
/// the next lease's work). The pool grows on demand, up to an optional limit. Streams are
/// destroyed when the pool drops. A stream whose lease made a
/// [`CurrentStreamGuard`](crate::CurrentStreamGuard) that was leaked (`mem::forget`) is not
/// leased again: the guard names it for the rest of the process.
///
/// ```no_run
/// use cuda_stream::{Context, StreamOptions, StreamPool};
///
/// let ctx = Context::primary(0)?;
/// let pool = StreamPool::new(&ctx, StreamOptions::new());
/// let a = pool.acquire()?;
/// let b = pool.acquire()?;
/// assert_ne!(a.raw(), b.raw()); // never the same stream twice while leased
/// # Ok::<(), cuda_stream::Error>(())
/// ```
pub struct StreamPool {
    inner: Arc<PoolInner>,
}

pub(crate) struct PoolInner {
    ctx: ffi::CUcontext,
    options: StreamOptions,
    limit: Option<usize>,
    free: FreeList,
    /// Streams given back while a leaked current-stream guard names them: never handed out again
    /// (see [`PoolInner::release`]).
    held_back: Mutex<Vec<usize>>,
    created: Mutex<usize>,
    _keep: Option<Context>,
}

/// How many free streams a pool keeps in lock-free slots before it uses its locked list.
const FAST_SLOTS: usize = 16;

/// The free streams of a pool: lock-free slots for the common case (taking one is an atomic
/// swap, putting one back a compare-exchange; 0 means empty), and a locked list beyond them. A
/// handle is in at most one place, and a swap hands it to exactly one taker.
struct FreeList {
    slots: [AtomicUsize; FAST_SLOTS],
    overflow: Mutex<Vec<usize>>,
}

impl FreeList {
    fn new() -> FreeList {
        FreeList {
            slots: [const { AtomicUsize::new(0) }; FAST_SLOTS],
            overflow: Mutex::new(Vec::new()),
        }
    }

    #[inline]
    fn pop(&self) -> Option<usize> {
        for slot in &self.slots {
            if slot.load(Ordering::Relaxed) != 0 {
                let raw = slot.swap(0, Ordering::Acquire);
                if raw != 0 {
                    return Some(raw);
                }
            }
        }
        self.overflow
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
    }

    #[inline]
    fn push(&self, raw: usize) {
        for slot in &self.slots {
            if slot.load(Ordering::Relaxed) == 0
                && slot
                    .compare_exchange(0, raw, Ordering::Release, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
        }
        self.overflow
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(raw);
    }

    fn len(&self) -> usize {
        let fast = self
            .slots
            .iter()
            .filter(|s| s.load(Ordering::Acquire) != 0)
            .count();
        fast + self
            .overflow
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    fn drain(&mut self) -> Vec<usize> {
        let mut all: Vec<usize> =
            std::mem::take(self.overflow.get_mut().unwrap_or_else(|e| e.into_inner()));
        all.extend(
            self.slots
                .iter_mut()
                .map(|s| std::mem::take(s.get_mut()))
                .filter(|&raw| raw != 0),
        );
        all
    }
}

// SAFETY: the handles are thread-safe driver objects; the mutable state is atomic or locked.
unsafe impl Send for PoolInner {}
// SAFETY: as above.
unsafe impl Sync for PoolInner {}

impl fmt::Debug for StreamPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamPool")
            .field("ctx", &self.inner.ctx)
            .field("options", &self.inner.options)
            .field("created", &self.created())
            .field("limit", &self.inner.limit)
            .finish()
    }
}

impl StreamPool {
    /// An empty pool of streams created in `ctx` with `options`.
    pub fn new(ctx: &Context, options: StreamOptions) -> StreamPool {
        StreamPool::build(ctx.raw(), Some(ctx.clone()), options, None)
    }

    pub(crate) fn build(
        ctx: ffi::CUcontext,
        keep: Option<Context>,
        options: StreamOptions,
        limit: Option<usize>,
    ) -> StreamPool {
        StreamPool {
            inner: Arc::new(PoolInner {
                ctx,
                options,
                limit,
                free: FreeList::new(),
                held_back: Mutex::new(Vec::new()),
                created: Mutex::new(0),
                _keep: keep,
            }),
        }
    }

    /// A pool that creates at most `limit` streams; `acquire` past it fails with
    /// [`Error::PoolExhausted`].
    pub fn bounded(ctx: &Context, options: StreamOptions, limit: usize) -> StreamPool {
        StreamPool::build(ctx.raw(), Some(ctx.clone()), options, Some(limit))
    }

    /// How many streams the pool has created.
    pub fn created(&self) -> usize {
        *self.inner.created.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many streams are free (not leased).
    pub fn free(&self) -> usize {
        self.inner.free.len()
    }

    /// Creates streams until `n` are free, so later leases need no creation. On an error, the
    /// streams made so far stay in the pool.
    pub fn reserve(&self, n: usize) -> Result<()> {
        let mut fresh = Vec::new();
        let mut made = Ok(());
        while self.free() + fresh.len() < n {
            match self.inner.create() {
                Ok(raw) => fresh.push(raw),
                Err(e) => {
                    made = Err(e);
                    break;
                }
            }
        }
        // Streams made before a failure are kept, not leaked.
        for raw in fresh {
            self.inner.free.push(raw);
        }
        made
    }

    /// Takes a stream out of the pool (a free one, else a new one) for a scope, which returns it
    /// with [`give_back`](StreamPool::give_back).
    #[inline]
    pub(crate) fn take_raw(&self) -> Result<ffi::CUstream> {
        let raw = match self.inner.free.pop() {
            Some(raw) => raw,
            None => self.inner.create()?,
        };
        Ok(raw as ffi::CUstream)
    }

    /// Returns a stream taken by a scope.
    #[inline]
    pub(crate) fn give_back(&self, raw: usize) {
        self.inner.release(raw);
    }

    /// Leases a stream: a free one if any, else a new one. The lease returns it on drop.
    #[inline]
    pub fn acquire(&self) -> Result<PooledStream<'_>> {
        let raw = match self.inner.free.pop() {
            Some(raw) => raw,
            None => self.inner.create()?,
        };
        Ok(PooledStream {
            raw: raw as ffi::CUstream,
            pool: &self.inner,
            _pool: PhantomData,
        })
    }
}

impl PoolInner {
    #[cold]
    fn create(&self) -> Result<usize> {
        {
            let mut created = self.created.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(limit) = self.limit {
                if *created >= limit {
                    return Err(Error::PoolExhausted { limit });
                }
            }
            *created += 1;
        }
        let made = crate::stream::owned::create_raw(self.ctx, self._keep.as_ref(), self.options)
            .map(|raw| raw as usize);
        if made.is_err() {
            *self.created.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
        }
        made
    }

    /// Takes back a stream that was leased or taken. One that a current-stream guard still
    /// names is held back instead, for good: a guard outlives the lease it was made from only
    /// when it was leaked (`mem::forget`), and it then names the stream for the rest of the
    /// process, so that `current_stream` would lend a plain view of whoever leased it next, a
    /// capture's fork among them (see `stream::host_fn` on why no safe code may see a stream
    /// being captured). One atomic load when no guard exists.
    #[inline]
    pub(crate) fn release(&self, raw: usize) {
        if crate::stream::guarded_streams::contains(raw as ffi::CUstream) {
            self.hold_back(raw);
            return;
        }
        self.free.push(raw);
    }

    #[cold]
    #[inline(never)]
    fn hold_back(&self, raw: usize) {
        self.held_back
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(raw);
    }
}

impl Drop for PoolInner {
    /// Destroys the free and held-back streams (no lease exists: leases borrow the pool), each
    /// exactly once, except one a leaked current-stream guard still names; inside a host
    /// function the destroys are queued for an ordinary thread.
    fn drop(&mut self) {
        let held = std::mem::take(self.held_back.get_mut().unwrap_or_else(|e| e.into_inner()));
        for raw in self.free.drain().into_iter().chain(held) {
            let _ = crate::stream::owned::destroy_or_defer(raw as ffi::CUstream);
        }
    }
}

/// A stream leased from a [`StreamPool`]; it cannot outlive the pool, and goes back to it on
/// drop without synchronising.
pub struct PooledStream<'pool> {
    raw: ffi::CUstream,
    pool: &'pool PoolInner,
    _pool: PhantomData<&'pool StreamPool>,
}

// SAFETY: the stream handle is a thread-safe driver object; the pool is behind a Mutex.
unsafe impl Send for PooledStream<'_> {}
// SAFETY: as above.
unsafe impl Sync for PooledStream<'_> {}

impl fmt::Debug for PooledStream<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PooledStream")
            .field("raw", &self.raw)
            .finish()
    }
}

impl AsStream for PooledStream<'_> {
    #[inline(always)]
    fn as_stream(&self) -> Stream<'_> {
        Stream::from_parts(self.raw, self.pool.ctx)
    }
}

impl Drop for PooledStream<'_> {
    #[inline]
    fn drop(&mut self) {
        self.pool.release(self.raw as usize);
    }
}

impl KnownContext for PooledStream<'_> {
    fn known_context(&self) -> Option<Context> {
        self.pool._keep.clone()
    }
}

forward_stream_ops!(PooledStream<'_>);

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn the_free_list_never_hands_one_stream_to_two_takers() {
        const N: usize = 40; // more than FAST_SLOTS: the locked overflow is exercised too
        let list = FreeList::new();
        for raw in 1..=N {
            list.push(raw);
        }
        assert_eq!(list.len(), N);
        let held: Vec<AtomicBool> = (0..=N).map(|_| AtomicBool::new(false)).collect();
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..20_000 {
                        let Some(raw) = list.pop() else { continue };
                        assert!(!held[raw].swap(true, Ordering::SeqCst), "{raw} taken twice");
                        held[raw].store(false, Ordering::SeqCst);
                        list.push(raw);
                    }
                });
            }
        });
        let mut list = list;
        let mut all = list.drain();
        all.sort_unstable();
        assert_eq!(all, (1..=N).collect::<Vec<_>>());
        assert_eq!(list.len(), 0);
    }
}
