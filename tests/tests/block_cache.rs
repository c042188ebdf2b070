//! Blocks kept for reuse on private streams, on the GPU: a block freed on its stream serves the
//! next allocation of its size there (the same address, no driver call needed) with the right
//! contents after a kernel; and, with the device full of kept blocks, an allocation on another
//! stream that runs out of memory frees them and succeeds. The device-filling test holds the
//! binary's lock alone: nothing else may allocate meanwhile.

use cuda_stream::ffi::CUresult;
use cuda_stream::{DeviceBuffer, MemPool};
use cuda_stream_tests::{alone, alongside_others, error_chain, gpu, sanitizer};

#[test]
fn a_block_freed_on_its_stream_serves_the_next_allocation_there() {
    let Some(ctx) = gpu() else { return };
    let _g = alongside_others();
    let (s, t) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let pool = MemPool::new(&ctx).unwrap();
    pool.set_cache_limit(u64::MAX);
    let n = 1 << 20;
    let x = DeviceBuffer::<u32>::zeroed_in(&pool, &s, n).unwrap();
    x.fill(&s, 7).unwrap();
    let kept = x.device_ptr();
    drop(x);
    assert_eq!(pool.usage().unwrap().cached, 4 << 20);
    let y = DeviceBuffer::<u32>::alloc_in(&pool, &s, n).unwrap();
    assert_eq!(y.device_ptr(), kept, "the kept block");
    y.fill(&s, 9).unwrap();
    // Read on another stream: ordered after the fill by the tracking, as for any allocation.
    assert_eq!(y.to_vec(&t).unwrap(), vec![9; n]);
    let z = DeviceBuffer::<u32>::alloc_in(&pool, &t, n).unwrap();
    assert_ne!(z.device_ptr(), kept, "never handed out on another stream");
    // `y` was read on `t` (its write on `s` then got an event): a buffer that moved between
    // streams is freed, not kept; `z`, used on `t` alone, is kept there.
    drop((y, z));
    assert_eq!(ctx.release_cached(), 1);
    assert_eq!(pool.usage().unwrap().cached, 0);
}

#[test]
fn out_of_memory_with_the_device_full_of_kept_blocks_frees_them_and_succeeds() {
    let Some(ctx) = gpu() else { return };
    if sanitizer().is_some() {
        println!("skipped under compute-sanitizer: it fills the device");
        return;
    }
    let _g = alone();
    let (a, b) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let pool = MemPool::new(&ctx).unwrap();
    pool.set_cache_limit(u64::MAX);
    // Fill the device with blocks of 1 GiB on `a` until the driver refuses one.
    const GIB: usize = 1 << 30;
    let mut held = Vec::new();
    loop {
        match DeviceBuffer::<u8>::alloc_in(&pool, &a, GIB) {
            Ok(buf) => held.push(buf),
            Err(e) if e.driver_code() == Some(CUresult::CUDA_ERROR_OUT_OF_MEMORY) => break,
            Err(e) => panic!("allocating: {}", error_chain(&e)),
        }
        assert!(held.len() < 1024, "the device never filled");
    }
    let blocks = held.len();
    assert!(blocks > 0, "not even one GiB allocated");
    drop(held);
    let usage = pool.usage().unwrap();
    assert_eq!(
        usage.cached,
        (blocks * GIB) as u64,
        "every block kept on `a`"
    );
    println!(
        "{blocks} GiB kept on stream a (pool reserved {} GiB)",
        usage.reserved >> 30
    );
    // Another stream cannot take them: the driver runs out of memory, the kept blocks are freed
    // on `a`, and the allocation made again succeeds (the pool follows `a`'s frees).
    let c = DeviceBuffer::<u32>::zeroed_in(&pool, &b, GIB / 4)
        .unwrap_or_else(|e| panic!("the retry failed: {}", error_chain(&e)));
    assert_eq!(
        pool.usage().unwrap().cached,
        0,
        "the kept blocks were freed"
    );
    c.fill(&b, 0x5a5a_5a5a).unwrap();
    let back = c.to_vec(&b).unwrap();
    assert!(back.iter().all(|&v| v == 0x5a5a_5a5a));
    println!(
        "out of memory on stream b with {blocks} GiB kept: the kept blocks freed, 1 GiB allocated"
    );
    drop(c);
    drop((a, b));
    pool.trim_to(0).unwrap();
}
