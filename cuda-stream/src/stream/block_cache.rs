//! Freed blocks of stream-ordered memory, kept on the private stream they were last used on for
//! the next allocation of the same size there: a hit costs no driver call and no event.
//!
//! # Why this is safe
//!
//! A block is kept only when its free would be enqueued on a *private* stream `s` (this crate
//! created it, it lives, its handle never left the crate: see `known_streams`) with nothing to
//! wait for, or after waits enqueued on `s` for every other use: then every use of the block is
//! ordered before whatever `s` runs next. The block is kept in the cache of `s`'s current
//! *epoch* (its [`StreamEnd`](super::known_streams::StreamEnd)), under the end's lock, and only
//! while the epoch lasts. An allocation on `s` in the same epoch takes it back: its work comes
//! after the old uses in `s`'s order, and its first use is recorded as a write on `s` like any
//! fresh allocation's, so work on another stream waits for `s` (an event), never neither. When
//! the epoch ends (the stream is destroyed, its handle leaves the crate, a capture this crate
//! begins is about to take it) the blocks are freed first, on `s` (`cuMemFreeAsync`), while it
//! still lives and is not capturing. Blocks are never handed out on another stream, and
//! allocations in a capture are graph memory nodes, which never touch a cache.
//!
//! A hit asks the driver nothing, not even whether `s` is being captured. This crate captures a
//! private stream only through exclusive access (`&mut` to its owner, or a pool stream leased to
//! one fork), after settling its epoch: the blocks are freed then, or the epoch is replaced by a
//! new one that no use holds. While the capture lasts nothing can keep a block in the stream's
//! epoch: a block is kept only by the free of a buffer whose lazy use holds that epoch, and no
//! use is recorded on a capturing stream (an allocation there asks the driver first, and is
//! refused). A private stream that joined a capture begun elsewhere (by waiting on captured
//! work) may hand out a kept block: the memory is real and ordered as above, and every later use
//! of the buffer checks its stream (a use on `s` is refused in that capture, and a wait for the
//! lazy write from another stream is refused while `s` is captured).
//!
//! # Sizes
//!
//! A block serves a later request of exactly its size. PyTorch's caching allocator rounds
//! requests up (to 512 bytes, then to 2 MiB segments it splits), so that nearby sizes share
//! blocks; here the driver's pool already packs allocations of any size into its own segments on
//! a miss, and an exact size keeps what a buffer spans what it asked for: `cuMemGetAddressRange`
//! and compute-sanitizer's bounds checks see the buffer's own end, not a rounded one. A program
//! that allocates the same shapes again and again (a tensor per layer per step) hits every time.
//!
//! # Memory comes back
//!
//! Each pool has a limit on the bytes its blocks may hold in all caches together (a quarter of
//! the device's memory unless set: [`MemPool::set_cache_limit`](crate::MemPool::set_cache_limit));
//! a free past it goes to the driver. A cache counts its blocks against the limit in the pool's
//! shared counter, and keeps the count of one block of each size after a hit takes it out (a
//! *spare*): the block that comes back to the cache at that buffer's free fits in it, so a
//! stream that allocates and frees the same sizes again and again touches no shared counter
//! (else each hit and each free would make an atomic operation on a line that the caches of
//! every stream share). A spare counts against the limit until its cache lets go of its blocks;
//! [`MemPool::usage`](crate::MemPool::usage) reports kept blocks only. An allocation that fails
//! for lack of memory empties every cache of its context and tries once more; trimming a pool,
//! dropping a pool of the caller's and ending a stream empty the caches concerned. A block that
//! cannot be freed on its stream (the stream joined a capture begun elsewhere, or its epoch ended
//! inside a host function) is an *orphan*: freed on the context's service stream once the
//! context's work has completed, at a later allocation or free.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::base::error::{Result, check, driver_fn};
use crate::driver::context::Context;
use crate::ffi;

/// The bytes one pool's blocks count against its limit (kept blocks and spares), and the limit,
/// shared by every cache holding its blocks.
#[derive(Debug)]
pub(crate) struct PoolCache {
    counted: AtomicU64,
    limit: AtomicU64,
}

impl PoolCache {
    /// Bytes counted against the limit now, in all caches: kept blocks and spares (see the
    /// module docs; `MemPool::usage` counts the blocks alone).
    pub(crate) fn counted(&self) -> u64 {
        self.counted.load(Ordering::Acquire)
    }

    /// The most its blocks may hold.
    pub(crate) fn limit(&self) -> u64 {
        self.limit.load(Ordering::Acquire)
    }

    pub(crate) fn set_limit(&self, bytes: u64) {
        self.limit.store(bytes, Ordering::Release);
    }

    /// Counts `bytes` more if the limit allows.
    fn try_add(&self, bytes: u64) -> bool {
        let limit = self.limit();
        self.counted
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
                c.checked_add(bytes).filter(|&n| n <= limit)
            })
            .is_ok()
    }

    fn sub(&self, bytes: u64) {
        self.counted.fetch_sub(bytes, Ordering::AcqRel);
    }
}

type PoolMap = HashMap<usize, Arc<PoolCache>>;

/// Every pool that ever had a block cached or a limit set, by handle.
static POOLS: Mutex<Option<PoolMap>> = Mutex::new(None);

fn pools() -> MutexGuard<'static, Option<PoolMap>> {
    POOLS.lock().unwrap_or_else(|e| e.into_inner())
}

/// The cache accounting of `pool` (of `ctx`'s device), made on first use with the default
/// limit (a quarter of the device's memory; no limit where the driver does not say).
pub(crate) fn pool_cache(pool: ffi::CUmemoryPool, ctx: &Context) -> Arc<PoolCache> {
    if let Some(p) = pools().as_ref().and_then(|m| m.get(&(pool as usize))) {
        return p.clone();
    }
    // Asked outside the lock: a driver call.
    let limit = ctx
        .device()
        .total_memory()
        .map_or(u64::MAX, |t| t as u64 / 4);
    pools()
        .get_or_insert_with(PoolMap::new)
        .entry(pool as usize)
        .or_insert_with(|| {
            Arc::new(PoolCache {
                counted: AtomicU64::new(0),
                limit: AtomicU64::new(limit),
            })
        })
        .clone()
}

/// The cache accounting of `pool` if it has any.
pub(crate) fn pool_cache_if_any(pool: ffi::CUmemoryPool) -> Option<Arc<PoolCache>> {
    pools().as_ref()?.get(&(pool as usize)).cloned()
}

/// Forgets a pool being destroyed (its blocks were freed first).
pub(crate) fn forget_pool(pool: ffi::CUmemoryPool) {
    if let Some(m) = pools().as_mut() {
        m.remove(&(pool as usize));
    }
}

/// The blocks of one pool and size in one cache.
struct Bin {
    pool: usize,
    bytes: usize,
    stats: Arc<PoolCache>,
    /// The memory's context (held while a block of it is kept).
    ctx: Context,
    ptrs: Vec<ffi::CUdeviceptr>,
    /// Whether the bin counts one block more than it keeps in `stats` (a spare: see the module
    /// docs): after a hit, until the next free into the bin fills it.
    spare: bool,
}

/// The blocks one epoch of a private stream keeps (see the module docs). Lives in the epoch's
/// end, under its lock.
#[derive(Default)]
pub(crate) struct Blocks {
    bins: Vec<Bin>,
}

impl std::fmt::Debug for Blocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Blocks")
            .field(
                "count",
                &self.bins.iter().map(|b| b.ptrs.len()).sum::<usize>(),
            )
            .finish()
    }
}

/// A block that could not be freed on its stream, with its context.
struct Orphan {
    ctx: Context,
    ptr: ffi::CUdeviceptr,
    bytes: usize,
    stats: Arc<PoolCache>,
}

static ORPHANS: Mutex<Vec<Orphan>> = Mutex::new(Vec::new());
static ORPHAN_COUNT: AtomicUsize = AtomicUsize::new(0);

impl Blocks {
    /// Whether nothing is kept or counted: no block, no spare.
    pub(crate) fn is_empty(&self) -> bool {
        self.bins.is_empty()
    }

    /// The bytes of the blocks of `pool` kept here.
    pub(crate) fn kept_bytes(&self, pool: ffi::CUmemoryPool) -> u64 {
        self.bins
            .iter()
            .filter(|b| b.pool == pool as usize)
            .map(|b| b.ptrs.len() as u64 * b.bytes as u64)
            .sum()
    }

    /// A kept block of `pool` of `bytes` bytes, taken out. Its count stays as the bin's spare
    /// (a spare the bin already had goes back to the pool's counter).
    #[inline]
    pub(crate) fn take(
        &mut self,
        pool: ffi::CUmemoryPool,
        bytes: usize,
    ) -> Option<ffi::CUdeviceptr> {
        let bin = self
            .bins
            .iter_mut()
            .find(|b| b.pool == pool as usize && b.bytes == bytes)?;
        let ptr = bin.ptrs.pop()?;
        if std::mem::replace(&mut bin.spare, true) {
            bin.stats.sub(bytes as u64);
        }
        Some(ptr)
    }

    /// Keeps the block at `ptr` (of `pool`, memory of `ctx`, `bytes` bytes) if its pool's limit
    /// allows; `false` when it does not (the caller frees it).
    pub(crate) fn put(
        &mut self,
        ctx: &Context,
        pool: ffi::CUmemoryPool,
        bytes: usize,
        ptr: ffi::CUdeviceptr,
    ) -> bool {
        let i = match self
            .bins
            .iter()
            .position(|b| b.pool == pool as usize && b.bytes == bytes)
        {
            Some(i) => i,
            None => {
                self.bins.push(Bin {
                    pool: pool as usize,
                    bytes,
                    stats: pool_cache(pool, ctx),
                    ctx: ctx.clone(),
                    ptrs: Vec::new(),
                    spare: false,
                });
                self.bins.len() - 1
            }
        };
        let bin = &mut self.bins[i];
        // The spare's count, if the limit has not been lowered under what is counted (then the
        // count goes back and the block is freed); else a count of its own.
        if bin.spare {
            bin.spare = false;
            if bin.stats.counted() > bin.stats.limit() {
                bin.stats.sub(bytes as u64);
                return false;
            }
        } else if !bin.stats.try_add(bytes as u64) {
            return false;
        }
        bin.ptrs.push(ptr);
        true
    }

    /// Frees on `stream` (the epoch's, live and not captured by this crate) every kept block of
    /// `pool` (`None`: of every pool). A block the driver does not free there becomes an orphan
    /// (see the module docs). Returns how many were freed on the stream.
    pub(crate) fn free_on(
        &mut self,
        stream: ffi::CUstream,
        pool: Option<ffi::CUmemoryPool>,
    ) -> usize {
        let mut freed = 0;
        self.bins.retain_mut(|bin| {
            if pool.is_some_and(|p| p as usize != bin.pool) {
                return true;
            }
            if std::mem::take(&mut bin.spare) {
                bin.stats.sub(bin.bytes as u64);
            }
            for ptr in bin.ptrs.drain(..) {
                if free_async(ptr, stream).is_ok() {
                    bin.stats.sub(bin.bytes as u64);
                    freed += 1;
                } else {
                    orphan(Orphan {
                        ctx: bin.ctx.clone(),
                        ptr,
                        bytes: bin.bytes,
                        stats: bin.stats.clone(),
                    });
                }
            }
            false
        });
        freed
    }

    /// Hands every kept block over as an orphan (no driver call: inside a host function, or
    /// on a stream that can no longer be freed on).
    pub(crate) fn orphan_all(&mut self) {
        for bin in self.bins.drain(..) {
            if bin.spare {
                bin.stats.sub(bin.bytes as u64);
            }
            for ptr in bin.ptrs {
                orphan(Orphan {
                    ctx: bin.ctx.clone(),
                    ptr,
                    bytes: bin.bytes,
                    stats: bin.stats.clone(),
                });
            }
        }
    }
}

impl Drop for Blocks {
    /// Blocks still kept when the cache goes (an epoch ended without freeing them) are orphans;
    /// spares go back to their pools' counters.
    fn drop(&mut self) {
        if !self.is_empty() {
            self.orphan_all();
        }
    }
}

fn orphan(o: Orphan) {
    ORPHANS.lock().unwrap_or_else(|e| e.into_inner()).push(o);
    ORPHAN_COUNT.fetch_add(1, Ordering::Release);
}

/// `cuMemFreeAsync(ptr, stream)`.
fn free_async(ptr: ffi::CUdeviceptr, stream: ffi::CUstream) -> Result<()> {
    let f = driver_fn!(cuMemFreeAsync);
    // SAFETY: the block is pool memory of the stream's device that nothing refers to any more
    // (it was kept here, out of every buffer), freed once; every use of it is ordered before
    // the stream's later work (see the module docs).
    check(unsafe { f(ptr, stream) }, "cuMemFreeAsync")
}

/// How many orphans wait.
#[cfg(feature = "test-hooks")]
pub(crate) fn orphan_count() -> usize {
    ORPHAN_COUNT.load(Ordering::Acquire)
}

/// The bytes of the orphans of the pool counted in `cache`.
pub(crate) fn orphan_bytes(cache: &Arc<PoolCache>) -> u64 {
    ORPHANS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|o| Arc::ptr_eq(&o.stats, cache))
        .map(|o| o.bytes as u64)
        .sum()
}

/// Whether orphans wait (one atomic load).
#[inline]
pub(crate) fn orphans_pending() -> bool {
    ORPHAN_COUNT.load(Ordering::Acquire) != 0
}

/// Frees the orphans whose context's work has completed: `complete(ctx)` waits for it
/// (`Some(Ok)`), or says it cannot now (`None`: a capture of the context is under way; the
/// orphan is kept for a later poll); each is then freed on the context's service stream. An
/// orphan whose context cannot be waited for (`Some(Err)`) or freed is given up: the memory
/// stays allocated until its pool goes (nothing can say when its last use ends).
pub(crate) fn free_orphans(complete: impl Fn(&Context) -> Option<Result<()>>) {
    let taken = std::mem::take(&mut *ORPHANS.lock().unwrap_or_else(|e| e.into_inner()));
    if taken.is_empty() {
        return;
    }
    ORPHAN_COUNT.fetch_sub(taken.len(), Ordering::AcqRel);
    // Contexts waited for in this call, and their answer.
    let mut asked: Vec<(usize, Option<bool>)> = Vec::new();
    for o in taken {
        let key = o.ctx.raw() as usize;
        let answer = match asked.iter().find(|(c, _)| *c == key) {
            Some(&(_, a)) => a,
            None => {
                let a = complete(&o.ctx).map(|r| r.is_ok());
                asked.push((key, a));
                a
            }
        };
        match answer {
            None => orphan(o),
            Some(true) => {
                let _ = o.ctx.service_stream().and_then(|s| free_async(o.ptr, s));
                o.stats.sub(o.bytes as u64);
            }
            Some(false) => o.stats.sub(o.bytes as u64),
        }
    }
}

/// Probes of this module's locks (see `base::lock_probe`).
#[cfg(feature = "test-hooks")]
pub(crate) fn report_locks(out: &mut Vec<String>) {
    use crate::base::lock_probe::probe;
    probe(out, "block_cache::POOLS", &POOLS);
    probe(out, "block_cache::ORPHANS", &ORPHANS);
}
