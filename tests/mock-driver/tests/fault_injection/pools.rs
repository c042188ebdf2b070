//! Fault cases of memory on streams: stream-ordered allocation from the default pool and from
//! pools of the caller's, `MemPool`'s settings and statistics, a buffer moving between streams,
//! kernel arguments that record buffer uses, page-locked host buffers and their copies, and the
//! same on device 1, which has no memory pools (the plain `cuMemAlloc` path with deferred frees).

use std::sync::mpsc;
use std::time::Duration;

use cuda_stream::{
    DeviceBuffer, Error, LaunchConfig, ManagedBuffer, MemAdvice, MemPool, PinnedHostBuffer,
    RegisteredHost, Result, kernel_args,
};

use crate::harness::fixture::{Op, op, op_frees};
use crate::harness::settle;
use crate::harness::swallowed::{
    SWALLOW_CACHE, SWALLOW_DROP, SWALLOW_FREE_DROP, SWALLOW_PINNED_DROP, SWALLOW_PLAIN_FREE,
    SWALLOW_POOL_DROP,
};

/// Frees whose uses are polled (`cuEventQuery`) may find them complete at the first query or a
/// later one, depending on when the worker ran them.
const VARYING_POLL: &[&str] = &["cuEventQuery"];

pub(crate) fn ops() -> Vec<Op> {
    vec![
        op(
            "MemPool::default_for + release_threshold + set_release_threshold + usage + \
             reset_high_water + trim_to",
            SWALLOW_POOL_DROP,
            |fx| {
                let pool = MemPool::default_for(&fx.ctx)?;
                assert!(pool.is_default());
                pool.set_release_threshold(1 << 20)?;
                assert_eq!(pool.release_threshold()?, 1 << 20);
                let usage = pool.usage()?;
                assert!(usage.used_high >= usage.used && usage.reserved >= usage.used);
                pool.reset_high_water()?;
                pool.trim_to(0)?;
                pool.set_release_threshold(0)
            },
        ),
        op_frees(
            "MemPool::new + DeviceBuffer::zeroed_in + alloc_in + usage + free; the pool dropped \
             before its last buffer",
            SWALLOW_POOL_DROP,
            |fx| {
                let pool = MemPool::new(&fx.ctx)?;
                assert!(!pool.is_default());
                pool.set_release_threshold(u64::MAX)?;
                let a = DeviceBuffer::<u32>::zeroed_in(&pool, &fx.owned, 16)?;
                let b = DeviceBuffer::<u8>::alloc_in(&pool, &fx.other, 8)?;
                assert_eq!(a.pool().as_ref(), Some(&pool));
                let usage = pool.usage()?;
                assert_eq!((usage.used, usage.cached), (72, 0));
                a.free()?;
                pool.trim_to(0)?;
                drop(pool); // `b` keeps it alive: destroyed with its last buffer
                b.free()
            },
        ),
        op_frees(
            "MemPool with a cache limit: a block kept and reused on its stream, released; an \
             allocation out of memory frees the kept blocks and tries once more",
            SWALLOW_CACHE,
            |fx| {
                // A stream of its own: the fixture's handles have left the crate (`raw()`), so
                // their streams keep no block.
                let s = fx.ctx.new_stream()?;
                let pool = MemPool::new(&fx.ctx)?;
                pool.set_cache_limit(u64::MAX);
                let a = DeviceBuffer::<u32>::zeroed_in(&pool, &s, 16)?;
                let kept = a.device_ptr();
                a.free()?;
                let b = DeviceBuffer::<u32>::alloc_in(&pool, &s, 16)?;
                assert_eq!(b.device_ptr(), kept, "the kept block");
                b.fill(&s, 3)?;
                b.free()?;
                // More than the test driver ever allocates: out of memory, then the kept block
                // is freed and the allocation made once more (out of memory again).
                match DeviceBuffer::<u8>::alloc_in(&pool, &fx.other, 2 << 30) {
                    Err(e)
                        if e.driver_code()
                            == Some(cuda_stream::ffi::CUresult::CUDA_ERROR_OUT_OF_MEMORY) => {}
                    Err(e) => return Err(e),
                    Ok(_) => panic!("2 GiB allocated"),
                }
                let c = DeviceBuffer::<u32>::zeroed_in(&pool, &s, 16)?;
                c.free()?;
                pool.release_cached();
                let d = DeviceBuffer::<u32>::zeroed_in(&pool, &s, 16)?;
                d.free()?;
                drop(s); // its end frees the block kept on it
                Ok(())
            },
        ),
        op_frees(
            "DeviceBuffer::alloc_on + fill on one stream, copy_from + to_vec on another",
            SWALLOW_FREE_DROP,
            |fx| {
                let a = DeviceBuffer::<u32>::alloc_on(&fx.ctx, &fx.owned, 8)?;
                a.fill(&fx.owned, 5)?;
                let b = DeviceBuffer::<u32>::alloc_on(&fx.ctx, &fx.other, 8)?;
                b.copy_from(&fx.other, &a)?;
                assert_eq!(b.to_vec(&fx.other)?, [5; 8]);
                a.free()?;
                b.free()
            },
        ),
        op_frees(
            "Function::launch with buffer arguments (read and write) on two streams",
            SWALLOW_FREE_DROP,
            |fx| {
                let scale = fx.module.function("scale")?;
                let mut x = DeviceBuffer::<u32>::zeroed(&fx.ctx, &fx.owned, 16)?;
                let y = DeviceBuffer::<u32>::alloc(&fx.ctx, 16)?;
                let config = LaunchConfig::for_elements(16, 32);
                // SAFETY: `scale` takes a pointer and a u32; the mock runs no device code.
                unsafe {
                    scale.launch(&fx.other, config, &kernel_args![x.write(), 16u32])?;
                    scale.launch(&fx.owned, config, &kernel_args![y.read(), 16u32])?;
                    scale.launch(&fx.owned, config, &kernel_args![x.read(), 16u32])?;
                }
                x.free()?;
                y.free()
            },
        ),
        op_frees(
            "PinnedHostBuffer::from_slice + zeroed + copy_from_pinned + copy_to_pinned + \
             as_slice + as_mut_slice + try_as_slice + try_as_mut_slice",
            SWALLOW_PINNED_DROP,
            |fx| {
                let mut host = PinnedHostBuffer::<u32>::from_slice(&fx.ctx, &[3; 8])?;
                let mut back = PinnedHostBuffer::<u32>::zeroed(&fx.ctx, 8)?;
                let dev = DeviceBuffer::<u32>::alloc_on(&fx.ctx, &fx.owned, 8)?;
                dev.copy_from_pinned(&fx.owned, &host)?;
                dev.copy_to_pinned(&fx.owned, &mut back)?;
                assert_eq!(back.as_slice()?, [3; 8]);
                host.as_mut_slice()?[0] = 4;
                assert_eq!(back.try_as_slice()?[0], 3);
                back.try_as_mut_slice()?[0] = 5;
                assert_eq!(back.copies_in_flight(), 0);
                dev.free()
            },
        )
        .varying(VARYING_POLL),
        op_frees(
            "RegisteredHost::scope + copy_from_pinned + copy_to_pinned + as_slice + as_mut_slice",
            SWALLOW_PINNED_DROP,
            |fx| {
                let dev = DeviceBuffer::<u32>::alloc_on(&fx.ctx, &fx.owned, 8)?;
                let mut data = vec![3u32; 8];
                RegisteredHost::scope(&fx.ctx, &mut data, |host| {
                    // Synchronised between the copies, so that no copy is in flight when the
                    // next one comes (the calls a copy makes depend on that).
                    dev.copy_from_pinned(&fx.owned, host)?;
                    fx.owned.synchronize()?;
                    dev.fill(&fx.owned, 4)?;
                    dev.copy_to_pinned(&fx.owned, host)?;
                    fx.owned.synchronize()?;
                    assert_eq!(host.as_slice()?, [4; 8]);
                    host.as_mut_slice()?[0] = 5;
                    Ok::<(), Error>(())
                })??;
                assert_eq!(data[0], 5);
                dev.free()
            },
        )
        .varying(VARYING_POLL),
        op_frees(
            "ManagedBuffer::from_slice + prefetch_to_device + fill + prefetch_to_host + advise + \
             as_slice",
            SWALLOW_PLAIN_FREE,
            |fx| {
                let mut m = ManagedBuffer::<u32>::from_slice(&fx.ctx, &[1; 8])?;
                m.prefetch_to_device(&fx.owned)?;
                m.fill(&fx.owned, 2)?;
                m.prefetch_to_host(&fx.owned)?;
                m.advise(MemAdvice::ReadMostly(true))?;
                assert_eq!(m.as_slice()?, [2; 8]);
                Ok(())
            },
        )
        .varying(VARYING_POLL),
        op_frees(
            "PinnedHostBuffer dropped with a copy in flight",
            SWALLOW_PINNED_DROP,
            |fx| {
                let s = fx.ctx.new_stream()?;
                let (gate, wait) = mpsc::channel::<()>();
                let run = || -> Result<()> {
                    // Holds the stream until the buffer is dropped; bounded, since a failure to
                    // record an event after the copy makes the library wait for the stream.
                    s.launch_host_func(move || {
                        let _ = wait.recv_timeout(Duration::from_millis(500));
                    })?;
                    let dev = DeviceBuffer::<u32>::zeroed(&fx.ctx, &s, 8)?;
                    let mut host = PinnedHostBuffer::<u32>::zeroed(&fx.ctx, 8)?;
                    dev.copy_to_pinned(&s, &mut host)?;
                    assert!(matches!(host.try_as_slice(), Err(Error::Busy { .. })));
                    drop(host); // the free waits for the copy
                    dev.free()
                };
                let r = run();
                drop(gate);
                r
            },
        )
        .varying(VARYING_POLL),
        // Device 1 has no memory pools (`harness::mock`).
        op_frees(
            "no pools: DeviceBuffer::alloc_on + fill on one stream, copy_from + to_vec on \
             another, drop + free",
            SWALLOW_PLAIN_FREE,
            |fx| {
                let (s1, s2) = (fx.ctx1.new_stream()?, fx.ctx1.new_stream()?);
                let a = DeviceBuffer::<u32>::alloc_on(&fx.ctx1, &s1, 8)?;
                assert!(a.pool().is_none());
                a.fill(&s1, 2)?;
                let b = DeviceBuffer::<u32>::alloc(&fx.ctx1, 8)?;
                b.copy_from(&s2, &a)?;
                assert_eq!(b.to_vec(&s2)?, [2; 8]);
                drop(a);
                b.free()
            },
        )
        .varying(VARYING_POLL),
        op(
            "no pools: MemPool::new and MemPool::default_for are refused",
            SWALLOW_DROP,
            |fx| {
                for r in [MemPool::new(&fx.ctx1), MemPool::default_for(&fx.ctx1)] {
                    match r {
                        Err(Error::Refused { .. }) => {}
                        Err(e) => return Err(e),
                        Ok(p) => panic!("a pool on a device without pools: {p:?}"),
                    }
                }
                // The answer is cached: ask the driver something to make this a driver call.
                fx.ctx1.device().name().map(drop)
            },
        ),
        op_frees(
            "no pools: DeviceBuffer::free inside a host function",
            SWALLOW_PLAIN_FREE,
            |fx| {
                let s = fx.ctx1.new_stream()?;
                let buf = DeviceBuffer::<u32>::zeroed(&fx.ctx1, &s, 4)?;
                let (tx, rx) = mpsc::channel();
                s.launch_host_func(move || tx.send(buf.free()).expect("the test waits"))?;
                settle();
                let r = rx.recv().expect("the host function ran");
                assert!(
                    matches!(r, Err(Error::InHostFunction { call: "cuMemFree" })),
                    "{r:?}"
                );
                assert_eq!(cuda_stream::drain_deferred(), 1);
                Ok(())
            },
        )
        .varying(VARYING_POLL),
    ]
}
