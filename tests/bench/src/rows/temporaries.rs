//! Temporaries: buffers of mixed sizes allocated around small pieces of work and dropped, the
//! pattern the block cache of a private stream is for (`mem_temporaries`), the memory each side's
//! pool holds afterwards, and alloc + fill + free of 1 MiB on 1 to 16 threads, each on its own
//! stream (`mem_threads_*`).

use std::hint::black_box;
use std::sync::Barrier;

use cuda_stream::{Context, DeviceBuffer, Error, MemPool, OwnedStream};
use cuda_stream_sys as sys;

use super::Fixture;
use super::memory::{MIB, RawMem};
use crate::fail::{fail, must, must_cudarc, ok};
use crate::method::case;
use crate::pin::unpin_this_thread;
use crate::report::{Rows, Target};

/// The sizes the temporaries cycle through, in 32-bit words: 4 KiB, 96 KiB, 1 MiB, 3 MiB, 256 KiB.
const SIZES: [usize; 5] = [1 << 10, 24 << 10, 1 << 18, 3 << 18, 1 << 16];

/// Steps per iteration of `mem_temporaries`: each takes the next three sizes of [`SIZES`], so
/// five steps go through every size three times.
const STEPS: usize = 5;

/// The three sizes (in words) of each step.
const PLAN: [[usize; 3]; STEPS] = {
    let mut plan = [[0; 3]; STEPS];
    let mut k = 0;
    while k < STEPS {
        let mut j = 0;
        while j < 3 {
            plan[k][j] = SIZES[(3 * k + j) % SIZES.len()];
            j += 1;
        }
        k += 1;
    }
    plan
};

/// The value every fill writes.
const FILL: u32 = 7;

/// The raw side of `mem_temporaries`, one iteration: per step three buffers from the default
/// pool, each filled once allocated (`cuMemsetD32Async`), then freed in the order allocated.
#[inline(never)]
fn raw_temporaries(raw: &RawMem, s: sys::CUstream) {
    for sizes in PLAN {
        let ptrs = sizes.map(|words| {
            let mut p = 0;
            // SAFETY: a valid out-pointer; the pool and the stream are live, of the current
            // context.
            ok(
                unsafe { (raw.alloc_async)(&mut p, black_box(words) * 4, raw.pool, s) },
                "cuMemAllocFromPoolAsync",
            );
            // SAFETY: `p` holds `words` u32, allocated just above on the same stream.
            ok(
                unsafe { (raw.memset)(p, FILL, words, s) },
                "cuMemsetD32Async",
            );
            p
        });
        for p in ptrs {
            // SAFETY: allocated above on the same stream (which orders the fill before it),
            // freed once.
            ok(
                unsafe { (raw.free_async)(black_box(p), s) },
                "cuMemFreeAsync",
            );
        }
    }
}

/// The safe side of `mem_temporaries`, one iteration: the same on a private stream, each
/// buffer `alloc_on` + `fill`, dropped in the order allocated.
#[inline(never)]
fn safe_temporaries(ctx: &Context, s: &OwnedStream) {
    for sizes in PLAN {
        let bufs = sizes.map(|words| {
            let b = must(
                DeviceBuffer::<u32>::alloc_on(ctx, s, black_box(words)),
                "DeviceBuffer::alloc_on",
            );
            must(b.fill(s, FILL), "DeviceBuffer::fill");
            b
        });
        for b in bufs {
            drop(black_box(b));
        }
    }
}

/// cudarc's side of `mem_temporaries`, one iteration: the same with `CudaStream::alloc_zeros`
/// (`cuMemAllocAsync` + `cuMemsetD8Async`) on its stream 1, dropped in the order allocated.
#[inline(never)]
fn cudarc_temporaries(c: &crate::cudarc_column::Cudarc) {
    for sizes in PLAN {
        let bufs = sizes.map(|words| {
            must_cudarc(
                c.s1.alloc_zeros::<u32>(black_box(words)),
                "CudaStream::alloc_zeros",
            )
        });
        for b in bufs {
            drop(black_box(b));
        }
    }
}

pub(super) fn rows(fx: &Fixture<'_>, rows: &mut Rows) -> Result<(), Error> {
    let (cfg, ctx) = (fx.cfg, fx.ctx);
    let raw = match RawMem::load(ctx.device().raw()) {
        Ok(r) => r,
        Err(why) => {
            println!("temporaries rows skipped (no memory pools): {why}");
            return Ok(());
        }
    };
    let r1 = fx.s1.raw();
    // The safe side's stream is private (its handle never leaves the crate), so its drops leave
    // their blocks there for the next allocation of the same size class.
    let t1 = ctx.new_stream()?;
    let settle = || {
        fx.settle();
        must(t1.synchronize(), "synchronize");
    };
    // Target: no slower than the raw calls doing the same work. Every allocation after the first
    // round hits the cache, so the safe side makes only the fills' driver calls; the fills'
    // GPU time, the same on both sides, bounds how far below 1 the ratio can go.
    rows.add(
        "mem_temporaries",
        "temporaries, per step: 3 buffers of mixed sizes (4 KiB to 3 MiB), each allocated then filled (memset), then all freed, on a private stream (raw: 3 x cuMemAllocFromPoolAsync + cuMemsetD32Async, then 3 x cuMemFreeAsync, default pool)",
        Target::Ratio(1.0),
        case(
            cfg.slow,
            || raw_temporaries(&raw, black_box(r1)),
            || safe_temporaries(ctx, &t1),
        )
        .per_iter(STEPS as u64)
        .peer(fx.cudarc().map(|c| move || cudarc_temporaries(c)))
        .settle(settle)
        .run(cfg),
    );
    settle();
    memory_held(fx, &raw, &t1, r1)?;
    drop(t1);
    threads(fx, &raw, rows)
}

/// Prints the memory the default pool holds after each side's loop of `mem_temporaries`, each
/// run alone, from a pool emptied first: no buffer of this process in it, no block kept, trimmed.
fn memory_held(
    fx: &Fixture<'_>,
    raw: &RawMem,
    t1: &OwnedStream,
    r1: sys::CUstream,
) -> Result<(), Error> {
    let (cfg, ctx) = (fx.cfg, fx.ctx);
    let pool = MemPool::default_for(ctx)?;
    let get = sys::fns::cuMemPoolGetAttribute().map_err(Error::Load)?;
    let raw_attr = |attr: sys::CUmemPool_attribute| {
        let mut value = 0u64;
        // SAFETY: the default pool is live; the 64-bit attributes write a `cuuint64_t`.
        ok(
            unsafe { get(raw.pool, attr, std::ptr::from_mut(&mut value).cast()) },
            "cuMemPoolGetAttribute",
        );
        value
    };
    // Every kept block freed on its stream, those frees run, the pool trimmed to nothing.
    let empty = || -> Result<u64, Error> {
        ctx.release_cached();
        ctx.synchronize()?;
        pool.trim_to(0)?;
        pool.reset_high_water()?;
        Ok(pool.usage()?.reserved)
    };
    let iters = cfg.slow;
    let steps = iters * STEPS as u64;

    let safe_base = empty()?;
    for _ in 0..iters {
        safe_temporaries(ctx, t1);
    }
    t1.synchronize()?;
    let safe = pool.usage()?;

    let raw_base = empty()?;
    for _ in 0..iters {
        raw_temporaries(raw, r1);
    }
    fx.sync_raw(r1);
    use sys::CUmemPool_attribute as A;
    let raw_reserved = raw_attr(A::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
    let raw_high = raw_attr(A::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH);
    let raw_used = raw_attr(A::CU_MEMPOOL_ATTR_USED_MEM_CURRENT);
    let threshold = pool.release_threshold()?;
    empty()?;

    let mib = |b: u64| b as f64 / MIB as f64;
    println!(
        "memory held after mem_temporaries: cuda-stream reserved {:.1} MiB (cached {:.1} MiB), \
         raw pool reserved {:.1} MiB",
        mib(safe.reserved),
        mib(safe.cached),
        mib(raw_reserved)
    );
    println!(
        "  cuda-stream: reserved {:.1} MiB, in buffers {:.1} MiB, cached {:.1} MiB, peak reserved \
         {:.1} MiB (MemPool::default_for(ctx).usage() after its loop of {steps} steps on its \
         private stream, run first, then that stream synchronized; the pool held {:.1} MiB before)",
        mib(safe.reserved),
        mib(safe.used),
        mib(safe.cached),
        mib(safe.reserved_high),
        mib(safe_base)
    );
    let threshold = if threshold == u64::MAX {
        "unlimited".to_string()
    } else {
        format!("{:.1} MiB", mib(threshold))
    };
    println!(
        "  raw: reserved {:.1} MiB, in use {:.1} MiB, peak reserved {:.1} MiB \
         (cuMemPoolGetAttribute RESERVED_MEM_CURRENT, USED_MEM_CURRENT, RESERVED_MEM_HIGH of the \
         default pool after its loop of {steps} steps, run second, then cuStreamSynchronize; before \
         it the safe side's blocks were released: Context::release_cached + Context::synchronize + \
         MemPool::trim_to(0), leaving {:.1} MiB); the pool's release threshold: {threshold}",
        mib(raw_reserved),
        mib(raw_used),
        mib(raw_high),
        mib(raw_base)
    );
    Ok(())
}

/// The `mem_threads_*` rows: their ids and thread counts.
const THREADS: [(&str, usize); 5] = [
    ("mem_threads_1", 1),
    ("mem_threads_2", 2),
    ("mem_threads_4", 4),
    ("mem_threads_8", 8),
    ("mem_threads_16", 16),
];

/// The 32-bit words of one operation's buffer (1 MiB).
const WORDS: usize = MIB / 4;

/// Why the thread rows have no cudarc column.
const NO_PEER_THREADS: &str = "the thread rows compare raw and cuda-stream only";

/// The raw driver functions one raw thread calls, and the default pool (as an address), which
/// every thread may hold.
#[derive(Clone, Copy)]
struct RawOp {
    alloc: sys::pfn::cuMemAllocFromPoolAsync,
    memset: sys::pfn::cuMemsetD32Async,
    free: sys::pfn::cuMemFreeAsync,
    sync: sys::pfn::cuStreamSynchronize,
    pool: usize,
}

impl RawOp {
    /// `cuMemAllocFromPoolAsync` + `cuMemsetD32Async` + `cuMemFreeAsync` of 1 MiB on `s`.
    #[inline(never)]
    fn alloc_fill_free(self, s: sys::CUstream) {
        let mut p = 0;
        // SAFETY: a valid out-pointer; the pool and the stream are live, of the context bound
        // on this thread.
        ok(
            unsafe { (self.alloc)(&mut p, WORDS * 4, self.pool as sys::CUmemoryPool, s) },
            "cuMemAllocFromPoolAsync",
        );
        // SAFETY: `p` holds WORDS u32, allocated just above on the same stream.
        ok(
            unsafe { (self.memset)(p, FILL, WORDS, s) },
            "cuMemsetD32Async",
        );
        // SAFETY: allocated above on the same stream, freed once.
        ok(unsafe { (self.free)(black_box(p), s) }, "cuMemFreeAsync");
    }
}

/// Threads inherit the measuring thread's pinning (`--pin-cpu`): each worker lets itself run
/// on every CPU again.
fn unpin() {
    if let Err(e) = unpin_this_thread() {
        fail("unpinning a worker thread", &e);
    }
}

/// The raw side of a thread row: one thread per stream handle, each binding the context, then
/// `ops` operations on its stream, then `cuStreamSynchronize`.
fn raw_threads(ctx: &Context, op: RawOp, streams: &[usize], ops: u64) {
    let start = Barrier::new(streams.len());
    std::thread::scope(|sc| {
        for &handle in streams {
            let start = &start;
            sc.spawn(move || {
                unpin();
                let _bound = must(ctx.bind(), "Context::bind");
                let s = handle as sys::CUstream;
                start.wait();
                for _ in 0..ops {
                    op.alloc_fill_free(black_box(s));
                }
                // SAFETY: a live stream of the bound context.
                ok(unsafe { (op.sync)(s) }, "cuStreamSynchronize");
            });
        }
    });
}

/// The safe side of a thread row: one thread per (private) stream, the context left unbound
/// (the crate binds what needs it), `ops` times `alloc_on` + `fill` + drop, then `synchronize`.
fn safe_threads(ctx: &Context, streams: &[OwnedStream], ops: u64) {
    let start = Barrier::new(streams.len());
    std::thread::scope(|sc| {
        for s in streams {
            let start = &start;
            sc.spawn(move || {
                unpin();
                start.wait();
                for _ in 0..ops {
                    let b = must(
                        DeviceBuffer::<u32>::alloc_on(ctx, s, black_box(WORDS)),
                        "DeviceBuffer::alloc_on",
                    );
                    must(b.fill(s, FILL), "DeviceBuffer::fill");
                    drop(black_box(b));
                }
                must(s.synchronize(), "synchronize");
            });
        }
    });
}

/// Alloc + fill + free of 1 MiB on 1 to 16 threads, each on its own stream made before timing:
/// one row per thread count (ns per operation: a batch's wall time over all its operations)
/// and a table of operations per second.
fn threads(fx: &Fixture<'_>, raw: &RawMem, rows: &mut Rows) -> Result<(), Error> {
    let (cfg, ctx) = (fx.cfg, fx.ctx);
    let ops: u64 = if cfg.quick { 50 } else { 2_000 };
    let most = THREADS[THREADS.len() - 1].1;
    let safe_streams: Vec<OwnedStream> = (0..most)
        .map(|_| ctx.new_stream())
        .collect::<Result<_, _>>()?;
    // The raw side's streams: their handles leave the crate, so cuda-stream treats them as
    // any raw stream (and its own side never uses them).
    let raw_streams: Vec<OwnedStream> = (0..most)
        .map(|_| ctx.new_stream())
        .collect::<Result<_, _>>()?;
    let handles: Vec<usize> = raw_streams.iter().map(|s| s.raw() as usize).collect();
    let op = RawOp {
        alloc: raw.alloc_async,
        memset: raw.memset,
        free: raw.free_async,
        sync: fx.raw.stream_synchronize,
        pool: raw.pool as usize,
    };
    let cpus = std::thread::spawn(|| {
        unpin();
        std::thread::available_parallelism().map_or(0, |n| n.get())
    })
    .join()
    .unwrap_or(0);
    let mut table = Vec::with_capacity(THREADS.len());
    for (id, n) in THREADS {
        let measured = case(
            1,
            || raw_threads(ctx, op, &handles[..n], ops),
            || safe_threads(ctx, &safe_streams[..n], ops),
        )
        .per_iter(n as u64 * ops)
        .no_peer(NO_PEER_THREADS)
        .run(cfg);
        table.push((n, measured.raw_ns, measured.safe.ns));
        rows.add(
            id,
            format!(
                "alloc + fill + free of 1 MiB on {n} thread(s), each on its own stream, per operation of all threads (wall time; raw: cuMemAllocFromPoolAsync + cuMemsetD32Async + cuMemFreeAsync)"
            ),
            Target::None,
            measured,
        );
    }
    println!();
    println!(
        "Threads, each on its own stream (made before timing), {ops} operations per thread, each \
         alloc + fill (memset) + free of 1 MiB; a batch is timed from spawning the threads to the \
         last one's synchronize of its stream; median of {} repetitions, raw and cuda-stream \
         alternating; the raw threads bind the context (Context::bind), cuda-stream's leave it \
         unbound; workers may run on any of {cpus} CPUs; ratio: cuda-stream ops/s / raw ops/s \
         (the mem_threads_* rows give the time ratio, cuda-stream / raw):",
        cfg.reps
    );
    println!();
    println!("| threads | raw ops/s | cuda-stream ops/s | ratio |");
    println!("|---:|---:|---:|---:|");
    for (n, raw_ns, safe_ns) in table {
        println!(
            "| {n} | {:.0} | {:.0} | {:.3} |",
            1e9 / raw_ns,
            1e9 / safe_ns,
            raw_ns / safe_ns
        );
    }
    println!();
    Ok(())
}
