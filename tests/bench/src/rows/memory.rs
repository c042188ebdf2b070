//! Memory on streams: stream-ordered allocation and free (hitting the block cache of a private
//! stream, and missing it), a drop while another stream is busy, use tracking on one stream and
//! across two, and pinned copies of 64 MiB.

use std::hint::black_box;
use std::ptr;

use cuda_stream::{
    DeviceBuffer, Error, LaunchConfig, MemPool, Module, PinnedHostBuffer, kernel_args,
};
use cuda_stream_sys as sys;

use super::Fixture;
use crate::fail::{must, must_cudarc, ok};
use crate::kernel::{PTX_HEADERS, SpinKernel};
use crate::method::case;
use crate::report::{Rows, Target};

/// The raw driver functions of these rows (and of `temporaries`).
pub(super) struct RawMem {
    pub(super) alloc_async: sys::pfn::cuMemAllocFromPoolAsync,
    pub(super) free_async: sys::pfn::cuMemFreeAsync,
    pub(super) memset: sys::pfn::cuMemsetD32Async,
    pub(super) is_capturing: sys::pfn::cuStreamIsCapturing,
    htod: sys::pfn::cuMemcpyHtoDAsync,
    dtoh: sys::pfn::cuMemcpyDtoHAsync,
    /// The device's default pool.
    pub(super) pool: sys::CUmemoryPool,
}

impl RawMem {
    /// The functions and the default pool of `device`; `Err` (why) where it has no pools.
    pub(super) fn load(device: sys::CUdevice) -> Result<RawMem, String> {
        let e = |e: sys::LoadError| e.to_string();
        let get_pool = sys::fns::cuDeviceGetDefaultMemPool().map_err(e)?;
        let mut pool = ptr::null_mut();
        // SAFETY: a valid out-pointer; the device came from the driver.
        let rc = unsafe { get_pool(&mut pool, device) };
        if rc != sys::CUresult::CUDA_SUCCESS {
            return Err(format!(
                "cuDeviceGetDefaultMemPool: {}",
                sys::result_name(rc)
            ));
        }
        Ok(RawMem {
            alloc_async: sys::fns::cuMemAllocFromPoolAsync().map_err(e)?,
            free_async: sys::fns::cuMemFreeAsync().map_err(e)?,
            memset: sys::fns::cuMemsetD32Async().map_err(e)?,
            is_capturing: sys::fns::cuStreamIsCapturing().map_err(e)?,
            htod: sys::fns::cuMemcpyHtoDAsync().map_err(e)?,
            dtoh: sys::fns::cuMemcpyDtoHAsync().map_err(e)?,
            pool,
        })
    }

    /// `cuMemAllocFromPoolAsync` + `cuMemFreeAsync` of `bytes` from the default pool on `s`.
    #[inline(never)]
    fn alloc_free(&self, bytes: usize, s: sys::CUstream) {
        self.alloc_free_in(self.pool, bytes, s);
    }

    /// `cuMemAllocFromPoolAsync` + `cuMemFreeAsync` of `bytes` from `pool` on `s`.
    #[inline(never)]
    fn alloc_free_in(&self, pool: sys::CUmemoryPool, bytes: usize, s: sys::CUstream) {
        let mut p = 0;
        // SAFETY: a valid out-pointer; the pool and the stream are live, of the current context.
        ok(
            unsafe { (self.alloc_async)(&mut p, bytes, pool, s) },
            "cuMemAllocFromPoolAsync",
        );
        // SAFETY: allocated just above on the same stream, freed once.
        ok(
            unsafe { (self.free_async)(black_box(p), s) },
            "cuMemFreeAsync",
        );
    }
}

pub(super) const MIB: usize = 1 << 20;

/// Why the memory rows have no cudarc column.
const NO_PEER: &str = "cudarc's column is not wired for memory yet";

/// The safe side of the alloc + free rows: a stream-ordered buffer of 1 MiB, dropped.
#[inline(never)]
fn safe_alloc_free(ctx: &cuda_stream::Context, s: &cuda_stream::OwnedStream) {
    let b = must(
        DeviceBuffer::<u8>::alloc_on(ctx, s, black_box(MIB)),
        "DeviceBuffer::alloc_on",
    );
    drop(black_box(b));
}

/// cudarc's side of the alloc + free rows: `CudaStream::alloc` of 1 MiB on its stream 1
/// (`cuMemAllocAsync`, and a read and a write event per slice while its event tracking is on),
/// dropped (`cuMemFreeAsync` after those events).
#[inline(never)]
fn cudarc_alloc_free(c: &crate::cudarc_column::Cudarc) {
    // SAFETY: the slice is never read; it is dropped at once.
    let b = must_cudarc(
        unsafe { c.s1.alloc::<u8>(black_box(MIB)) },
        "CudaStream::alloc",
    );
    drop(black_box(b));
}

pub(super) fn rows(fx: &Fixture<'_>, rows: &mut Rows) -> Result<(), Error> {
    let cfg = fx.cfg;
    let ctx = fx.ctx;
    let raw = match RawMem::load(ctx.device().raw()) {
        Ok(r) => r,
        Err(why) => {
            println!("memory rows skipped: {why}");
            return Ok(());
        }
    };
    let (s1, s2) = (&fx.s1, &fx.s2);
    let (r1, r2) = (s1.raw(), s2.raw());
    // The safe sides run on streams whose handle never leaves the crate: one whose handle was
    // taken (`raw()`, as the raw sides take s1's and s2's) may be captured by other code, so
    // every buffer use on it records an event (the ordering model in `memory::use_tracking`).
    let (p1, p2) = (&ctx.new_stream()?, &ctx.new_stream()?);
    let settle = || {
        fx.settle();
        must(p1.synchronize(), "synchronize");
        must(p2.synchronize(), "synchronize");
    };

    // The safe side allocates on a private stream (p1): from the second iteration on, the block
    // its last drop left there comes back with no driver call.
    rows.add(
        "mem_alloc_free",
        "alloc + free of 1 MiB hitting the block cache (raw: cuMemAllocFromPoolAsync + cuMemFreeAsync)",
        Target::Ratio(0.25),
        case(
            cfg.medium,
            || raw.alloc_free(MIB, black_box(r1)),
            || safe_alloc_free(ctx, p1),
        )
        .peer(fx.cudarc().map(|c| move || cudarc_alloc_free(c)))
        .settle(settle)
        .run(cfg),
    );

    // The cache-miss path: a pool of its own whose cache limit is 0, so every drop frees and
    // every allocation asks the driver, against the same driver calls on the same pool (the
    // safe side also asks whether the stream is capturing: an allocation there would be graph
    // memory, refused).
    let no_cache = MemPool::new(ctx)?;
    no_cache.set_cache_limit(0);
    let no_cache_raw = no_cache.raw();
    rows.add(
        "mem_alloc_free_miss",
        "alloc + free of 1 MiB missing the block cache: a pool whose cache limit is 0 (raw: the same calls on the same pool, cuStreamIsCapturing + cuMemAllocFromPoolAsync + cuMemFreeAsync)",
        Target::Ratio(1.10),
        case(
            cfg.medium,
            || {
                let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
                // SAFETY: a live stream and a valid out-pointer.
                ok(
                    unsafe { (raw.is_capturing)(black_box(r1), &mut status) },
                    "cuStreamIsCapturing",
                );
                raw.alloc_free_in(no_cache_raw, MIB, black_box(r1));
            },
            || {
                let b = must(
                    DeviceBuffer::<u8>::alloc_in(&no_cache, p1, black_box(MIB)),
                    "DeviceBuffer::alloc_in",
                );
                drop(black_box(b));
            },
        )
        .peer(fx.cudarc().map(|c| move || cudarc_alloc_free(c)))
        .settle(settle)
        .run(cfg),
    );
    settle();
    drop(no_cache);

    // The same while stream 2 runs a 10 ms kernel for the whole batch: the drop must not wait.
    match SpinKernel::load() {
        Ok(spin) => {
            let busy = || {
                settle();
                spin.spin(r2, 10_000_000);
            };
            busy();
            rows.add(
                "mem_drop_busy",
                "alloc + drop of 1 MiB while another stream runs a 10 ms kernel (host time)",
                Target::BelowNs(50_000.0),
                case(
                    200,
                    || raw.alloc_free(MIB, black_box(r1)),
                    || safe_alloc_free(ctx, p1),
                )
                .no_peer(NO_PEER)
                .settle(busy)
                .run(cfg),
            );
            settle();
        }
        Err(why) => println!("mem_drop_busy skipped: {why}"),
    }

    // A buffer used on one stream only: a fill (memset) against the raw memset.
    let one = must(
        DeviceBuffer::<u32>::zeroed(ctx, p1, 1),
        "DeviceBuffer::zeroed",
    );
    let p = one.device_ptr();
    rows.add(
        "mem_one_stream",
        "fill of a buffer used on one stream: the tracking's cost (raw: the same driver calls, cuStreamIsCapturing + cuMemsetD32Async)",
        Target::Ratio(1.05),
        case(
            cfg.medium,
            || {
                let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
                // SAFETY: a live stream and a valid out-pointer.
                ok(
                    unsafe { (raw.is_capturing)(black_box(r1), &mut status) },
                    "cuStreamIsCapturing",
                );
                // SAFETY: `p` holds one u32 and outlives the work (settled before it is dropped).
                ok(
                    unsafe { (raw.memset)(p, 7, 1, black_box(r1)) },
                    "cuMemsetD32Async",
                );
            },
            || must(one.fill(p1, black_box(7)), "DeviceBuffer::fill"),
        )
        .no_peer(NO_PEER)
        .settle(settle)
        .run(cfg),
    );

    // Alternating streams: each use waits for the other stream's last one.
    let record = fx.raw.event_record;
    let wait = fx.raw.stream_wait_event;
    let e1 = must(
        cuda_stream::Event::new(ctx, cuda_stream::EventOptions::new()),
        "Event::new",
    );
    let e2 = must(
        cuda_stream::Event::new(ctx, cuda_stream::EventOptions::new()),
        "Event::new",
    );
    let (ev1, ev2) = (e1.raw(), e2.raw());
    rows.add(
        "mem_cross_stream",
        "fill alternating between two streams, per use (raw: memset + record + wait)",
        Target::Ratio(1.10),
        case(
            cfg.medium,
            || {
                // SAFETY: as above; the events and streams are live, of one context.
                unsafe {
                    ok((raw.memset)(p, 1, 1, r1), "cuMemsetD32Async");
                    ok(record(ev1, r1), "cuEventRecord");
                    ok(wait(r2, ev1, 0), "cuStreamWaitEvent");
                    ok((raw.memset)(p, 2, 1, r2), "cuMemsetD32Async");
                    ok(record(ev2, r2), "cuEventRecord");
                    ok(wait(r1, ev2, 0), "cuStreamWaitEvent");
                }
            },
            || {
                must(one.fill(p1, 1), "DeviceBuffer::fill");
                must(one.fill(p2, 2), "DeviceBuffer::fill");
            },
        )
        .per_iter(2)
        .no_peer(NO_PEER)
        .settle(settle)
        .run(cfg),
    );
    settle();
    drop(one);

    // Pinned copies of 64 MiB, each waited for.
    let n = 64 * MIB / 4;
    let mut host = must(PinnedHostBuffer::<u32>::zeroed(ctx, n), "PinnedHostBuffer");
    let dev = must(DeviceBuffer::<u32>::alloc_on(ctx, p1, n), "alloc_on");
    must(p1.synchronize(), "synchronize");
    let (hp, dp) = (
        must(host.as_mut_slice(), "as_mut_slice").as_mut_ptr(),
        dev.device_ptr(),
    );
    let sync = fx.raw.stream_synchronize;
    let iters = if cfg.quick { 2 } else { 10 };
    let h2d = case(
        iters,
        // SAFETY: 64 MiB of pinned and device memory, each alive for the row; waited for.
        || unsafe {
            ok((raw.htod)(dp, hp.cast(), n * 4, r1), "cuMemcpyHtoDAsync");
            ok(sync(r1), "cuStreamSynchronize");
        },
        || {
            must(dev.copy_from_pinned(p1, &host), "copy_from_pinned");
            must(p1.synchronize(), "synchronize");
        },
    )
    .no_peer(NO_PEER)
    .run(cfg);
    let gbs = |ns: f64| (n * 4) as f64 / ns;
    println!(
        "pinned H2D 64 MiB: raw {:.1} GB/s, cuda-stream {:.1} GB/s",
        gbs(h2d.raw_ns),
        gbs(h2d.safe.ns)
    );
    rows.add(
        "pinned_h2d",
        "pinned H2D copy of 64 MiB, waited for (raw: cuMemcpyHtoDAsync)",
        Target::Ratio(1.05),
        h2d,
    );
    let d2h = case(
        iters,
        // SAFETY: as above.
        || unsafe {
            ok((raw.dtoh)(hp.cast(), dp, n * 4, r1), "cuMemcpyDtoHAsync");
            ok(sync(r1), "cuStreamSynchronize");
        },
        || {
            must(dev.copy_to_pinned(p1, &mut host), "copy_to_pinned");
            must(p1.synchronize(), "synchronize");
        },
    )
    .no_peer(NO_PEER)
    .run(cfg);
    println!(
        "pinned D2H 64 MiB: raw {:.1} GB/s, cuda-stream {:.1} GB/s",
        gbs(d2h.raw_ns),
        gbs(d2h.safe.ns)
    );
    rows.add(
        "pinned_d2h",
        "pinned D2H copy of 64 MiB, waited for (raw: cuMemcpyDtoHAsync)",
        Target::Ratio(1.05),
        d2h,
    );
    pipeline(fx, &raw, rows)?;
    halves(fx, rows)
}

/// A double-buffered pipeline over three streams: 64 chunks of 4 MiB go up (H2D from pinned
/// memory), are computed on (a memset of the chunk, standing for a kernel), and come back
/// (D2H into pinned memory), two device slots in turn. The raw side orders it with six events;
/// the safe side writes no event (the slots' and the pinned buffers' tracking orders it).
fn pipeline(fx: &Fixture<'_>, raw: &RawMem, rows: &mut Rows) -> Result<(), Error> {
    const CHUNKS: usize = 64;
    const WORDS: usize = MIB; // 4 MiB of u32
    let (cfg, ctx) = (fx.cfg, fx.ctx);
    let streams = [ctx.new_stream()?, ctx.new_stream()?, ctx.new_stream()?];
    let [up, comp, down] = [streams[0].raw(), streams[1].raw(), streams[2].raw()];
    let ins: Vec<PinnedHostBuffer<u32>> = (0..CHUNKS)
        .map(|i| PinnedHostBuffer::from_slice(ctx, &vec![i as u32; WORDS]))
        .collect::<Result<_, _>>()?;
    let mut outs: Vec<PinnedHostBuffer<u32>> = (0..CHUNKS)
        .map(|_| PinnedHostBuffer::zeroed(ctx, WORDS))
        .collect::<Result<_, _>>()?;
    let slots = [
        DeviceBuffer::<u32>::alloc_on(ctx, &streams[1], WORDS)?,
        DeviceBuffer::<u32>::alloc_on(ctx, &streams[1], WORDS)?,
    ];
    for s in &streams {
        s.synchronize()?;
    }
    let in_ptrs: Vec<*const u32> = ins
        .iter()
        .map(|b| must(b.as_slice(), "as_slice").as_ptr())
        .collect();
    let out_ptrs: Vec<*mut u32> = outs
        .iter_mut()
        .map(|b| must(b.as_mut_slice(), "as_mut_slice").as_mut_ptr())
        .collect();
    let ev = |_| {
        must(
            cuda_stream::Event::new(ctx, cuda_stream::EventOptions::new()),
            "Event::new",
        )
    };
    let (h2d_done, comp_done, read_done): (Vec<_>, Vec<_>, Vec<_>) = (
        (0..2).map(ev).collect(),
        (0..2).map(ev).collect(),
        (0..2).map(ev).collect(),
    );
    let (record, wait, sync) = (
        fx.raw.event_record,
        fx.raw.stream_wait_event,
        fx.raw.stream_synchronize,
    );
    let bytes = WORDS * 4;
    let measured = case(
        1,
        || {
            for i in 0..CHUNKS {
                let k = i % 2;
                let d = slots[k].device_ptr();
                // SAFETY: live streams and events of one context; `d` holds 4 MiB and the
                // pinned chunks 4 MiB each, all alive for the row; each step waits for the one
                // it depends on (the slot's last read before it is written again).
                unsafe {
                    if i >= 2 {
                        ok(wait(up, read_done[k].raw(), 0), "cuStreamWaitEvent");
                    }
                    ok(
                        (raw.htod)(d, in_ptrs[i].cast(), bytes, up),
                        "cuMemcpyHtoDAsync",
                    );
                    ok(record(h2d_done[k].raw(), up), "cuEventRecord");
                    ok(wait(comp, h2d_done[k].raw(), 0), "cuStreamWaitEvent");
                    ok(
                        (raw.memset)(d, i as u32 + 1, WORDS, comp),
                        "cuMemsetD32Async",
                    );
                    ok(record(comp_done[k].raw(), comp), "cuEventRecord");
                    ok(wait(down, comp_done[k].raw(), 0), "cuStreamWaitEvent");
                    ok(
                        (raw.dtoh)(out_ptrs[i].cast(), d, bytes, down),
                        "cuMemcpyDtoHAsync",
                    );
                    ok(record(read_done[k].raw(), down), "cuEventRecord");
                }
            }
            // SAFETY: a live stream.
            ok(unsafe { sync(down) }, "cuStreamSynchronize");
        },
        || {
            for i in 0..CHUNKS {
                let slot = &slots[i % 2];
                must(
                    slot.copy_from_pinned(&streams[0], &ins[i]),
                    "copy_from_pinned",
                );
                must(slot.fill(&streams[1], i as u32 + 1), "fill");
                must(
                    slot.copy_to_pinned(&streams[2], &mut outs[i]),
                    "copy_to_pinned",
                );
            }
            must(streams[2].synchronize(), "synchronize");
        },
    )
    .no_peer(NO_PEER)
    .run(cfg);
    for (i, out) in outs.iter().enumerate() {
        if must(out.as_slice(), "as_slice")
            .iter()
            .any(|&v| v != i as u32 + 1)
        {
            crate::fail::fail("pipeline", &format!("chunk {i} came back wrong"));
        }
    }
    println!(
        "pipeline of {CHUNKS} chunks of 4 MiB: raw {:.2} ms, cuda-stream {:.2} ms",
        measured.raw_ns / 1e6,
        measured.safe.ns / 1e6
    );
    rows.add(
        "mem_pipeline",
        "double-buffered pipeline, 64 chunks of 4 MiB up, computed, down over 3 streams (raw: the same with 6 events)",
        Target::Ratio(1.05),
        measured,
    );
    Ok(())
}

/// `csb_touch<<<1, 1>>>(ns, p)`: busy-waits `ns` nanoseconds, then writes 1 at `p`.
const TOUCH_PTX: &str = r#"
.visible .entry csb_touch(
	.param .u64 csb_touch_param_0,
	.param .u64 csb_touch_param_1
)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<2>;
	.reg .b64 	%rd<7>;
	ld.param.u64 	%rd1, [csb_touch_param_0];
	ld.param.u64 	%rd5, [csb_touch_param_1];
	cvta.to.global.u64 	%rd6, %rd5;
	mov.u64 	%rd2, %globaltimer;
$L_touch_loop:
	mov.u64 	%rd3, %globaltimer;
	sub.u64 	%rd4, %rd3, %rd2;
	setp.lt.u64 	%p1, %rd4, %rd1;
	@%p1 bra 	$L_touch_loop;
	mov.u32 	%r1, 1;
	st.global.u32 	[%rd6], %r1;
	ret;
}
"#;

/// Two halves of one buffer, each written by a 200 us kernel on a stream of its own, waited for:
/// views are tracked at the allocation, so the second half's kernel waits for the first's
/// (about twice the time), against the same on two buffers (which overlap, as tracking at the
/// range would let two views) and raw launches on the halves with no ordering. No target: the
/// price of the choice, measured.
fn halves(fx: &Fixture<'_>, rows: &mut Rows) -> Result<(), Error> {
    const NS: u64 = 200_000;
    const WORDS: usize = 1 << 20;
    let (cfg, ctx) = (fx.cfg, fx.ctx);
    let Some(module) = PTX_HEADERS
        .iter()
        .find_map(|h| Module::from_ptx(ctx, &format!("{h}{TOUCH_PTX}")).ok())
    else {
        println!("mem_halves skipped: the driver loads no module");
        return Ok(());
    };
    let touch = module.function("csb_touch")?;
    let (a, b) = (ctx.new_stream()?, ctx.new_stream()?);
    let mut whole = DeviceBuffer::<u32>::zeroed(ctx, &a, 2 * WORDS)?;
    let mut two = [
        DeviceBuffer::<u32>::zeroed(ctx, &a, WORDS)?,
        DeviceBuffer::<u32>::zeroed(ctx, &a, WORDS)?,
    ];
    let (p_lo, p_hi) = (whole.device_ptr(), whole.device_ptr() + 4 * WORDS as u64);
    let one = LaunchConfig::new(1, 1);
    let ns = NS;
    let sync = |x: &cuda_stream::OwnedStream, y: &cuda_stream::OwnedStream| {
        must(x.synchronize(), "synchronize");
        must(y.synchronize(), "synchronize");
    };
    let raw_side = || {
        // SAFETY: `csb_touch` takes (u64, pointer); each half holds 4 MiB, alive for the row.
        unsafe {
            must(touch.launch(&fx.s1, one, &kernel_args![ns, p_lo]), "launch");
            must(touch.launch(&fx.s2, one, &kernel_args![ns, p_hi]), "launch");
        }
        sync(&fx.s1, &fx.s2);
    };
    a.synchronize()?;
    let views = case(20, raw_side, || {
        let (mut lo, mut hi) = must(whole.split_at_mut(WORDS), "split_at_mut");
        // SAFETY: as above, each kernel writing its view.
        unsafe {
            must(
                touch.launch(&a, one, &kernel_args![ns, lo.write()]),
                "launch",
            );
            must(
                touch.launch(&b, one, &kernel_args![ns, hi.write()]),
                "launch",
            );
        }
        sync(&a, &b);
    })
    .no_peer(NO_PEER)
    .run(cfg);
    rows.add(
        "mem_halves_views",
        "two halves of one buffer written by 200 us kernels on two streams, waited for: views (tracked at the allocation: in turn) vs raw",
        Target::None,
        views,
    );
    let buffers = case(20, raw_side, || {
        let [x, y] = &mut two;
        // SAFETY: as above.
        unsafe {
            must(
                touch.launch(&a, one, &kernel_args![ns, x.write()]),
                "launch",
            );
            must(
                touch.launch(&b, one, &kernel_args![ns, y.write()]),
                "launch",
            );
        }
        sync(&a, &b);
    })
    .no_peer(NO_PEER)
    .run(cfg);
    rows.add(
        "mem_halves_buffers",
        "the same on two buffers (what tracking at the range would give two views: they overlap) vs raw",
        Target::None,
        buffers,
    );
    Ok(())
}
