//! Memory cases: a stream-ordered alloc + free of 1 MiB, a fill of a buffer used on one
//! stream, fills alternating between two streams and a copy between two buffers of one stream,
//! through `DeviceBuffer` and through the same driver calls by hand. The safe sides run on the
//! fixture's private stream, whose handle never leaves the crate (a stream whose handle was taken
//! with `raw()` may be captured by other code: every buffer use on it records an event).

use std::cell::Cell;
use std::hint::black_box;
use std::sync::{Arc, Mutex};

use cuda_stream::DeviceBuffer;
use cuda_stream_sys as sys;

use crate::{Case, Fixture, ok};

thread_local! {
    /// What `miss-raw-plus:8` reads, as the safe side reads its thread's state.
    static LOCAL: Cell<u64> = const { Cell::new(0) };
}

impl Fixture {
    /// Runs a memory case `c`; false if `c` is not one.
    #[inline(always)]
    pub(crate) fn memory(&self, c: &Case<'_>) -> bool {
        let Case { name, iters, s, .. } = *c;
        let is_capturing = sys::fns::cuStreamIsCapturing().expect("cuStreamIsCapturing");
        let capturing = |s| {
            let mut st = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
            // SAFETY: a live stream and a valid out-pointer.
            ok(unsafe { is_capturing(s, &mut st) });
            black_box(st);
        };
        match name {
            "alloc-free-raw" => {
                let alloc = sys::fns::cuMemAllocFromPoolAsync().expect("cuMemAllocFromPoolAsync");
                let free = sys::fns::cuMemFreeAsync().expect("cuMemFreeAsync");
                let pool_of = sys::fns::cuDeviceGetDefaultMemPool().expect("a default pool");
                let mut pool = std::ptr::null_mut();
                // SAFETY: a valid out-pointer and the fixture's device.
                ok(unsafe { pool_of(&mut pool, self.ctx.device().raw()) });
                for _ in 0..iters {
                    capturing(s);
                    let mut p = 0;
                    // SAFETY: a valid out-pointer, a live pool and stream; freed at once.
                    ok(unsafe { alloc(&mut p, black_box(1 << 20), pool, s) });
                    // SAFETY: as above.
                    ok(unsafe { free(p, s) });
                }
            }
            "alloc-free-safe" => {
                for _ in 0..iters {
                    let b =
                        DeviceBuffer::<u8>::alloc_on(&self.ctx, &self.private, black_box(1 << 20))
                            .expect("alloc_on");
                    drop(black_box(b));
                }
            }
            "alloc-free-miss-safe" => {
                let pool = cuda_stream::MemPool::new(&self.ctx).expect("a pool");
                pool.set_cache_limit(0);
                for _ in 0..iters {
                    let b = DeviceBuffer::<u8>::alloc_in(&pool, &self.private, black_box(1 << 20))
                        .expect("alloc_in");
                    drop(black_box(b));
                }
                self.private.synchronize().expect("synchronize");
            }
            "miss-raw" | "miss-raw-plus" => {
                let alloc = sys::fns::cuMemAllocFromPoolAsync().expect("cuMemAllocFromPoolAsync");
                let free = sys::fns::cuMemFreeAsync().expect("cuMemFreeAsync");
                let pool = cuda_stream::MemPool::new(&self.ctx).expect("a pool");
                pool.set_cache_limit(0);
                let raw_pool = pool.raw();
                let k = if name == "miss-raw" {
                    0
                } else {
                    c.us.expect("miss-raw-plus:K")
                };
                let counts: Vec<Arc<u64>> = (0..6).map(Arc::new).collect();
                let locks: Vec<Mutex<u64>> = (0..2).map(Mutex::new).collect();
                for _ in 0..iters {
                    // Before the allocation: a thread-local read, three counts, a lock.
                    if k & 8 != 0 {
                        black_box(LOCAL.with(|l| l.get()));
                    }
                    let c3 = (k & 2 != 0).then(|| [0, 1, 2].map(|i| counts[i].clone()));
                    let guard = (k & 4 != 0).then(|| locks[0].lock().expect("lock"));
                    capturing(s);
                    let mut p = 0;
                    // SAFETY: a valid out-pointer, a live pool and stream; freed below.
                    ok(unsafe { alloc(&mut p, black_box(1 << 20), raw_pool, s) });
                    drop(black_box(guard));
                    let boxed = (k & 1 != 0).then(|| Box::new(black_box([p; 28])));
                    let boxed = black_box(boxed);
                    // Before the free: a thread-local read, the other three counts, a lock.
                    if k & 8 != 0 {
                        black_box(LOCAL.with(|l| l.get()));
                    }
                    let c6 = (k & 2 != 0).then(|| [3, 4, 5].map(|i| counts[i].clone()));
                    let guard = (k & 4 != 0).then(|| locks[1].lock().expect("lock"));
                    // SAFETY: allocated above on the same stream, freed once.
                    ok(unsafe { free(black_box(p), s) });
                    drop(black_box(guard));
                    drop(black_box(c3));
                    drop(black_box(c6));
                    drop(boxed);
                }
                // The pool goes after its frees have run.
                self.stream.synchronize().expect("synchronize");
            }
            "fill-raw" | "fill-safe" => {
                let buf = DeviceBuffer::<u32>::zeroed(&self.ctx, &self.private, 1).expect("zeroed");
                let memset = sys::fns::cuMemsetD32Async().expect("cuMemsetD32Async");
                let p = buf.device_ptr();
                for _ in 0..iters {
                    if name == "fill-raw" {
                        capturing(s);
                        // SAFETY: `p` holds one u32 and outlives the work (synchronised below).
                        ok(unsafe { memset(p, 7, 1, s) });
                    } else {
                        buf.fill(&self.private, black_box(7)).expect("fill");
                    }
                }
                self.private.synchronize().expect("synchronize");
                self.stream.synchronize().expect("synchronize");
            }
            "copy-raw" | "copy-safe" => {
                let src = DeviceBuffer::<u32>::zeroed(&self.ctx, &self.private, 1).expect("zeroed");
                let dst = DeviceBuffer::<u32>::zeroed(&self.ctx, &self.private, 1).expect("zeroed");
                let copy = sys::fns::cuMemcpyDtoDAsync().expect("cuMemcpyDtoDAsync");
                let (d, p) = (dst.device_ptr(), src.device_ptr());
                for _ in 0..iters {
                    if name == "copy-raw" {
                        capturing(s);
                        // SAFETY: both hold one u32 and outlive the work (synchronised below).
                        ok(unsafe { copy(d, p, 4, s) });
                    } else {
                        dst.copy_from(&self.private, &src).expect("copy_from");
                    }
                }
                self.private.synchronize().expect("synchronize");
                self.stream.synchronize().expect("synchronize");
            }
            "fill-cross-raw" | "fill-cross-safe" => {
                // A buffer filled on two streams in turn: each fill waits for the other's.
                let other = self.ctx.new_stream().expect("a second stream");
                // The safe side's second stream, whose handle never leaves the crate either.
                let mine = self.ctx.new_stream().expect("a second stream");
                let buf = DeviceBuffer::<u32>::zeroed(&self.ctx, &self.private, 1).expect("zeroed");
                let memset = sys::fns::cuMemsetD32Async().expect("cuMemsetD32Async");
                let record = sys::fns::cuEventRecord().expect("cuEventRecord");
                let wait = sys::fns::cuStreamWaitEvent().expect("cuStreamWaitEvent");
                let e = [(); 2].map(|()| {
                    cuda_stream::Event::new(&self.ctx, cuda_stream::EventOptions::new())
                        .expect("Event::new")
                });
                let p = buf.device_ptr();
                let (s1, s2) = (s, other.raw());
                for _ in 0..iters {
                    if name == "fill-cross-raw" {
                        for (a, b, ev) in [(s1, s2, e[0].raw()), (s2, s1, e[1].raw())] {
                            capturing(a);
                            // SAFETY: `p` holds one u32 and outlives the work (synchronised
                            // below); the events and streams are live, of one context.
                            unsafe {
                                ok(memset(p, 7, 1, a));
                                ok(record(ev, a));
                                ok(wait(b, ev, 0));
                            }
                        }
                    } else {
                        buf.fill(&self.private, black_box(1)).expect("fill");
                        buf.fill(&mine, black_box(2)).expect("fill");
                    }
                }
                self.stream.synchronize().expect("synchronize");
                other.synchronize().expect("synchronize");
                self.private.synchronize().expect("synchronize");
                mine.synchronize().expect("synchronize");
            }
            _ => return false,
        }
        true
    }
}
