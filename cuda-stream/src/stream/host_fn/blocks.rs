//! Recycled heap blocks for the values host functions and callbacks carry to the driver's thread.
//!
//! A closure that captures data reaches the driver's thread in a heap block written on the
//! launching thread and released on the driver's, inside the host function, where the driver
//! waits for it to return before the stream moves on. Through the global allocator every such
//! block is a free of another thread's allocation: glibc puts it on the freeing thread's cache or
//! (once that is full) the owning arena's shared bins, and the launching thread's cache never
//! refills, so each of its allocations goes to the arena too. Here the blocks are instead:
//!
//! - of a few sizes (32, 64, 128, 256 bytes, aligned to 16 like `malloc`'s); a larger or
//!   over-aligned value goes in a plain `Box`;
//! - recycled: a released block goes on the releasing thread's own list; a list that reaches
//!   [`BATCH`] blocks moves, whole, to a shared pool (one lock per batch), and a thread whose list
//!   is empty takes a whole batch from it, so each side pays one uncontended lock per [`BATCH`]
//!   calls and no atomic operation otherwise;
//! - bounded: a thread's list holds fewer than [`BATCH`] blocks per size, and the pool at most
//!   [`POOL_BYTES`] per size; a batch that finds the pool full goes back to the allocator. A
//!   thread's list goes back to the allocator when the thread exits; what the pool holds stays
//!   reachable from it.
//!
//! A block moves from the launching thread to the driver's through the driver (the launch
//! happens before the host function runs) and back through the pool's lock.

use std::alloc::{Layout, alloc, dealloc, handle_alloc_error};
use std::cell::Cell;
use std::mem::{align_of, size_of};
use std::ptr::{self, NonNull};
use std::sync::Mutex;

/// The smallest block.
const SMALLEST: usize = 32;
/// The alignment of every block: what `malloc` gives on 64-bit platforms, so that a fresh block
/// is a plain `malloc` (a larger alignment would make it `posix_memalign`, several times dearer).
const ALIGN: usize = 16;
/// Size classes: 32, 64, 128 and 256 bytes.
const CLASSES: usize = 4;
/// Blocks that move between a thread's list and the shared pool at once.
pub(crate) const BATCH: usize = 32;
/// The most the shared pool keeps of each size class, in bytes.
pub(crate) const POOL_BYTES: usize = 256 * 1024;

/// The size class of a value of `size` and `align` bytes, or `None` for a plain `Box`.
const fn class_of(size: usize, align: usize) -> Option<usize> {
    if align > ALIGN {
        return None;
    }
    let mut class = 0;
    while class < CLASSES {
        if size <= SMALLEST << class {
            return Some(class);
        }
        class += 1;
    }
    None
}

/// How many batches the pool keeps of `class`.
const fn pool_batches(class: usize) -> usize {
    POOL_BYTES / (BATCH * (SMALLEST << class))
}

fn layout(class: usize) -> Layout {
    // SAFETY: the size is a non-zero multiple of the alignment, a power of two, far below
    // `isize::MAX`.
    unsafe { Layout::from_size_align_unchecked(SMALLEST << class, ALIGN) }
}

/// A free block: its first word links to the next free block of the list.
struct Free {
    next: *mut Free,
}

/// A list of free blocks of one class, linked through their first word.
struct Chain {
    head: *mut Free,
    len: usize,
}

// SAFETY: a chain owns its blocks, plain memory that no one else refers to.
unsafe impl Send for Chain {}

impl Chain {
    /// Returns every block of the chain to the allocator.
    fn release_all(self, class: usize) {
        let mut p = self.head;
        while !p.is_null() {
            // SAFETY: `p` is a free block of this chain, allocated with `layout(class)`; its link
            // is read before it is freed, and it is freed once.
            unsafe {
                let next = (*p).next;
                dealloc(p.cast(), layout(class));
                p = next;
            }
        }
    }
}

/// Full batches, by class.
static POOL: Mutex<[Vec<Chain>; CLASSES]> = Mutex::new([const { Vec::new() }; CLASSES]);

/// Gives a full batch to the pool, or back to the allocator when the pool is full.
fn give(class: usize, chain: Chain) {
    let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    if pool[class].len() < pool_batches(class) {
        pool[class].push(chain);
        return;
    }
    drop(pool);
    chain.release_all(class);
}

/// Takes a batch from the pool, if it has one.
fn take_batch(class: usize) -> Option<Chain> {
    POOL.lock().unwrap_or_else(|e| e.into_inner())[class].pop()
}

/// This thread's free blocks, by class.
struct Local {
    head: [Cell<*mut Free>; CLASSES],
    len: [Cell<usize>; CLASSES],
}

impl Local {
    const fn new() -> Local {
        Local {
            head: [const { Cell::new(ptr::null_mut()) }; CLASSES],
            len: [const { Cell::new(0) }; CLASSES],
        }
    }

    fn pop(&self, class: usize) -> Option<NonNull<u8>> {
        let mut head = self.head[class].get();
        if head.is_null() {
            let chain = take_batch(class)?;
            head = chain.head;
            self.len[class].set(chain.len);
        }
        // SAFETY: `head` is a free block of this list (or of the batch just taken, which this
        // thread now owns); its first word is the link.
        self.head[class].set(unsafe { (*head).next });
        self.len[class].set(self.len[class].get() - 1);
        NonNull::new(head.cast())
    }

    fn push(&self, class: usize, block: NonNull<u8>) {
        let free = block.cast::<Free>().as_ptr();
        // SAFETY: the block is at least 32 bytes, aligned for a pointer, and no longer used: its
        // first word becomes the link.
        unsafe {
            free.write(Free {
                next: self.head[class].get(),
            })
        };
        let len = self.len[class].get() + 1;
        if len < BATCH {
            self.head[class].set(free);
            self.len[class].set(len);
        } else {
            self.head[class].set(ptr::null_mut());
            self.len[class].set(0);
            give(class, Chain { head: free, len });
        }
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        for class in 0..CLASSES {
            let chain = Chain {
                head: self.head[class].replace(ptr::null_mut()),
                len: self.len[class].replace(0),
            };
            if !chain.head.is_null() {
                // A partial batch: the pool holds full ones only.
                chain.release_all(class);
            }
        }
    }
}

thread_local! {
    static LOCAL: Local = const { Local::new() };
}

/// A block of `class`: from this thread's list, a batch of the pool, or the allocator.
fn block(class: usize) -> NonNull<u8> {
    if let Ok(Some(b)) = LOCAL.try_with(|l| l.pop(class)) {
        return b;
    }
    let layout = layout(class);
    // SAFETY: the layout has a non-zero size.
    NonNull::new(unsafe { alloc(layout) }).unwrap_or_else(|| handle_alloc_error(layout))
}

/// Returns a block of `class` for reuse (to the allocator while this thread is exiting).
fn recycle(class: usize, b: NonNull<u8>) {
    if LOCAL.try_with(|l| l.push(class, b)).is_err() {
        // SAFETY: the block was allocated with `layout(class)` and is no longer used.
        unsafe { dealloc(b.as_ptr(), layout(class)) };
    }
}

/// Moves `value` to the heap, into a recycled block when it fits one.
#[inline]
pub(crate) fn put<T>(value: T) -> NonNull<T> {
    match const { class_of(size_of::<T>(), align_of::<T>()) } {
        Some(class) => {
            let p = block(class).cast::<T>();
            // SAFETY: the block is at least `size_of::<T>()` bytes, aligned for `T`, and unused.
            unsafe { p.as_ptr().write(value) };
            p
        }
        None => NonNull::from(Box::leak(Box::new(value))),
    }
}

/// Moves the value back out of `p` and recycles its block.
///
/// # Safety
/// `p` came from [`put::<T>`](put) and is taken back once.
#[inline]
pub(crate) unsafe fn take<T>(p: NonNull<T>) -> T {
    match const { class_of(size_of::<T>(), align_of::<T>()) } {
        Some(class) => {
            // SAFETY: `put` wrote a `T` here, and this is the one read of it.
            let value = unsafe { p.as_ptr().read() };
            recycle(class, p.cast());
            value
        }
        // SAFETY: `put` leaked a `Box<T>` for a `T` of no class; reclaimed once.
        None => *unsafe { Box::from_raw(p.as_ptr()) },
    }
}

/// Probes of this module's locks (see `base::lock_probe`).
#[cfg(feature = "test-hooks")]
pub(crate) fn report_locks(out: &mut Vec<String>) {
    crate::base::lock_probe::probe(out, "host_fn::blocks::POOL", &POOL);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn classes_by_size_and_alignment() {
        assert_eq!(class_of(0, 1), Some(0));
        assert_eq!(class_of(24, 8), Some(0));
        assert_eq!(class_of(32, 16), Some(0));
        assert_eq!(class_of(33, 8), Some(1));
        assert_eq!(class_of(64, 8), Some(1));
        assert_eq!(class_of(128, 8), Some(2));
        assert_eq!(class_of(256, 16), Some(3));
        assert_eq!(class_of(257, 8), None);
        assert_eq!(class_of(8, 32), None);
        assert_eq!(pool_batches(0), 256);
        assert_eq!(pool_batches(3), 32);
    }

    /// Counts its drops, to check every value is dropped exactly once.
    struct Counted<const N: usize>(Arc<AtomicUsize>, [u8; N]);
    impl<const N: usize> Drop for Counted<N> {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn values_come_back_whole() {
        let drops = Arc::new(AtomicUsize::new(0));
        // The 32- and 64-byte classes (the larger ones are the pool tests' own), and a box.
        let a = put(Counted(drops.clone(), [1; 8]));
        let b = put(Counted(drops.clone(), [2; 40]));
        let c = put(Counted(drops.clone(), [3; 48]));
        let d = put(Counted(drops.clone(), [4; 1000]));
        assert_eq!(a.as_ptr() as usize % ALIGN, 0);
        assert_eq!(b.as_ptr() as usize % ALIGN, 0);
        assert_eq!(c.as_ptr() as usize % ALIGN, 0);
        // SAFETY: each came from `put` of its type and is taken once.
        unsafe {
            assert_eq!(take(a).1, [1; 8]);
            assert_eq!(take(b).1, [2; 40]);
            assert_eq!(take(c).1, [3; 48]);
            assert_eq!(take(d).1, [4; 1000]);
        }
        assert_eq!(drops.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn a_released_block_is_reused_by_the_same_thread() {
        let p = put([7u64; 3]);
        // SAFETY: from `put`, taken once.
        assert_eq!(unsafe { take(p) }, [7; 3]);
        let q = put([8u64; 3]);
        assert_eq!(p.cast::<u8>(), q.cast::<u8>());
        // SAFETY: from `put`, taken once.
        assert_eq!(unsafe { take(q) }, [8; 3]);
    }

    // The two tests below each use a size class no other test gives to the pool (128 and 256
    // bytes), since tests run in parallel and the pool is process-wide.

    #[test]
    fn blocks_released_on_another_thread_come_back_in_batches() {
        // Blocks made here and released on another thread, as the driver's thread does.
        type V = [usize; 12]; // 96 bytes: the 128-byte class
        struct Sent(Vec<NonNull<V>>);
        // SAFETY: the blocks are plain memory handed over whole.
        unsafe impl Send for Sent {}
        const N: usize = BATCH * 4;
        let made: Vec<NonNull<V>> = (0..N).map(|i| put::<V>([i; 12])).collect();
        let sent = Sent(made.clone());
        std::thread::spawn(move || {
            let sent = sent;
            for (i, p) in sent.0.into_iter().enumerate() {
                // SAFETY: each came from `put::<V>` and is taken once, here.
                assert_eq!(unsafe { take(p) }, [i; 12]);
            }
        })
        .join()
        .unwrap();
        // The releasing thread handed full batches to the pool: the next blocks here come from
        // there, not from the allocator.
        let again: Vec<NonNull<V>> = (0..BATCH).map(|_| put::<V>([0; 12])).collect();
        let reused = again.iter().filter(|p| made.contains(p)).count();
        for p in again {
            // SAFETY: from `put`, taken once.
            unsafe { take(p) };
        }
        assert_eq!(reused, BATCH);
    }

    #[test]
    fn the_pool_is_bounded() {
        // Release more full batches than the pool keeps, from a thread of their own.
        std::thread::spawn(|| {
            let blocks: Vec<NonNull<[u8; 200]>> = (0..BATCH * (pool_batches(3) + 4))
                .map(|_| put([0; 200]))
                .collect();
            for p in blocks {
                // SAFETY: from `put`, taken once.
                unsafe { take(p) };
            }
        })
        .join()
        .unwrap();
        let pool = POOL.lock().unwrap();
        assert_eq!(pool[3].len(), pool_batches(3));
        assert!(pool[3].iter().all(|c| c.len == BATCH));
    }
}
