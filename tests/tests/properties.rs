//! Stream properties read back as set: priority, flags, id, device, context.

use std::collections::HashSet;
use std::time::Duration;

use cuda_stream::{AsStream, Error, OwnedStream, StreamOptions};
use cuda_stream_tests::{DeviceBuffer, Kernels, gpu, sys};

const NON_BLOCKING: u32 = sys::CUstream_flags::CU_STREAM_NON_BLOCKING.0;

#[test]
fn priority_and_flags_read_back_as_set() {
    let Some(ctx) = gpu() else { return };
    let range = ctx.priority_range().unwrap();
    println!("priority range {range}");
    assert!(range.greatest() <= range.least());
    assert_eq!(
        ctx.priority_range().unwrap(),
        range,
        "cached range is stable"
    );

    let hi = OwnedStream::new(&ctx, StreamOptions::new().priority(range.greatest())).unwrap();
    assert_eq!(hi.priority().unwrap(), range.greatest());
    let lo = OwnedStream::new(&ctx, StreamOptions::new().priority(range.least())).unwrap();
    assert_eq!(lo.priority().unwrap(), range.least());
    let default = ctx.new_stream().unwrap();
    assert!(range.contains(default.priority().unwrap()));

    // Non-blocking by default.
    assert!(default.is_nonblocking().unwrap());
    assert_ne!(default.flags().unwrap() & NON_BLOCKING, 0);
    assert_eq!(StreamOptions::new().flags(), NON_BLOCKING);

    let blocking = ctx
        .new_stream_with(StreamOptions::new().blocking(true))
        .unwrap();
    assert!(!blocking.is_nonblocking().unwrap());
    assert_eq!(blocking.flags().unwrap() & NON_BLOCKING, 0);

    let both = OwnedStream::new(
        &ctx,
        StreamOptions::new()
            .blocking(true)
            .priority(range.greatest()),
    )
    .unwrap();
    assert!(!both.is_nonblocking().unwrap());
    assert_eq!(both.priority().unwrap(), range.greatest());
    // Through a view too.
    assert_eq!(both.as_stream().priority().unwrap(), range.greatest());
    assert!(!both.as_stream().is_nonblocking().unwrap());
}

#[test]
fn out_of_range_priority_is_rejected() {
    let Some(ctx) = gpu() else { return };
    let range = ctx.priority_range().unwrap();
    for p in [range.greatest() - 1, range.least() + 1, i32::MIN, i32::MAX] {
        match OwnedStream::new(&ctx, StreamOptions::new().priority(p)) {
            Err(Error::InvalidPriority { priority, range: r }) => {
                assert_eq!(priority, p);
                assert_eq!(r, range);
            }
            other => panic!("priority {p}: expected InvalidPriority, got {other:?}"),
        }
    }
}

#[test]
fn priority_clamped_clamps_into_the_range() {
    let Some(ctx) = gpu() else { return };
    let range = ctx.priority_range().unwrap();
    let cases = [
        (range.greatest() - 100, range.greatest()),
        (range.least() + 100, range.least()),
        (range.greatest(), range.greatest()),
        (range.least(), range.least()),
    ];
    for (asked, expected) in cases {
        let s = OwnedStream::new(&ctx, StreamOptions::new().priority_clamped(asked)).unwrap();
        assert_eq!(s.priority().unwrap(), expected, "asked {asked}");
    }
}

#[test]
fn ids_device_and_context_identify_the_stream() {
    let Some(ctx) = gpu() else { return };
    let streams: Vec<OwnedStream> = (0..8).map(|_| ctx.new_stream().unwrap()).collect();
    let ids: HashSet<u64> = streams.iter().map(|s| s.id().unwrap()).collect();
    println!("stream ids {ids:?}");
    assert_eq!(ids.len(), streams.len(), "stream ids must differ");
    for s in &streams {
        assert_eq!(s.id().unwrap(), s.as_stream().id().unwrap());
        assert_eq!(s.device().unwrap(), ctx.device());
        assert_eq!(s.as_stream().context_raw(), ctx.raw());
        assert_eq!(s.context(), &ctx);
        assert!(!s.as_stream().is_default());
    }
    assert_ne!(streams[0].as_stream(), streams[1].as_stream());
    assert_eq!(streams[0].as_stream(), streams[0].as_stream());
    // The default streams report the context's device, and have ids of their own.
    assert_eq!(ctx.legacy_stream().device().unwrap(), ctx.device());
    assert_eq!(ctx.per_thread_stream().device().unwrap(), ctx.device());
    match ctx.legacy_stream().id() {
        Ok(legacy_id) => assert!(!ids.contains(&legacy_id), "legacy stream id {legacy_id}"),
        Err(e) => println!("note: the driver gives no id for the legacy stream: {e}"),
    }
}

/// A blocking stream is ordered with the legacy default stream; a non-blocking one is not
/// (that half is a negative control, printed only).
#[test]
fn blocking_streams_synchronise_with_the_legacy_stream() {
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let spin = Duration::from_millis(200);
    let buf = DeviceBuffer::new(&ctx, 2);
    let out = DeviceBuffer::new(&ctx, 2);

    let blocking = ctx
        .new_stream_with(StreamOptions::new().blocking(true))
        .unwrap();
    k.store_after_spin(&blocking, buf.at(0), 7, spin);
    let legacy = ctx.legacy_stream();
    k.copy_u32(legacy, out.at(0), buf.at(0));
    legacy.synchronize().unwrap();
    assert_eq!(
        out.get(0),
        7,
        "the legacy stream waited for the blocking stream"
    );

    let nonblocking = ctx.new_stream().unwrap();
    k.store_after_spin(&nonblocking, buf.at(1), 8, spin);
    k.copy_u32(legacy, out.at(1), buf.at(1));
    legacy.synchronize().unwrap();
    let raced = out.get(1);
    nonblocking.synchronize().unwrap();
    println!(
        "negative control: legacy copy from a non-blocking stream's buffer saw {raced} (0 expected)"
    );
    assert_eq!(buf.get(1), 8);
}

/// Device and context facts as the driver reports them: the properties printed, the total
/// memory two ways, a limit set and read back (the driver may round up), the cache preference.
#[test]
fn device_facts_and_context_limits() {
    use cuda_stream::{CacheConfig, DeviceAttribute, Limit};
    let Some(ctx) = gpu() else { return };
    let d = ctx.device();
    let p = d.properties().unwrap();
    println!("{p}");
    assert!(p.compute_capability.0 >= 5, "{:?}", p.compute_capability);
    assert_eq!(d.compute_capability().unwrap(), p.compute_capability);
    assert_eq!(
        d.get_attribute(DeviceAttribute::MultiprocessorCount)
            .unwrap() as u32,
        p.multiprocessors
    );
    assert!(p.multiprocessors > 0 && p.warp_size == 32 && p.max_threads_per_block >= 512);
    let info = ctx.memory_info().unwrap();
    println!(
        "memory: {} of {} bytes free; total memory {}",
        info.free, info.total, p.total_memory
    );
    assert_eq!(info.total, d.total_memory().unwrap());
    assert!(info.free <= info.total && info.free > 0);
    let stack = ctx.limit(Limit::StackSize).unwrap();
    ctx.set_limit(Limit::StackSize, 8192).unwrap();
    let now = ctx.limit(Limit::StackSize).unwrap();
    println!("stack size: {stack} -> {now} after asking for 8192");
    assert!(now >= 8192);
    ctx.set_limit(Limit::StackSize, stack).unwrap();
    assert!(ctx.limit(Limit::MallocHeapSize).unwrap() > 0);
    let before = ctx.cache_config().unwrap();
    ctx.set_cache_config(CacheConfig::PreferL1).unwrap();
    println!(
        "cache preference: {before:?} -> {:?}",
        ctx.cache_config().unwrap()
    );
    ctx.set_cache_config(before).unwrap();
}
