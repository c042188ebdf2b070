//! The blocks kept for reuse on private streams (`stream::block_cache`), against the test
//! driver's counters and race detector: a block freed on its stream serves the next allocation
//! of its size there with no driver call and no event; another stream, another size, or a
//! stream whose handle left the crate goes to the driver; a buffer that moved between streams is
//! kept only behind waits for its other uses; the limit bounds what is kept; a stream's end, a
//! capture, a trim, the drop of a pool and `Context::release_cached` free the blocks on their
//! streams; an allocation that runs out of memory frees them and tries once more.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use cuda_mock_driver::{MockDriver, Serialized};
use cuda_stream::ffi;
use cuda_stream::ffi::CUresult;
use cuda_stream::{CaptureMode, Context, DeviceBuffer, Error, MemPool};
use cuda_stream_tests::gate;

static LOCK: Mutex<()> = Mutex::new(());

/// Serialises the test, resets the mock and gives the default pool of device 0 no limit.
fn mock() -> (Serialized, &'static MockDriver, Context) {
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let m = MockDriver::global();
    m.set_memory_pools(0, true);
    m.reset();
    let ctx = Context::primary(0).unwrap();
    MemPool::default_for(&ctx)
        .unwrap()
        .set_cache_limit(u64::MAX);
    (m.checked(guard), m, ctx)
}

fn settle(m: &MockDriver) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while m.pending_host_fns() > 0 {
        assert!(Instant::now() < deadline, "work still pending");
        std::thread::sleep(Duration::from_micros(50));
    }
}

fn cached(ctx: &Context) -> u64 {
    MemPool::default_for(ctx).unwrap().usage().unwrap().cached
}

fn calls(m: &MockDriver) -> [u64; 4] {
    [
        m.calls("cuMemAllocFromPoolAsync"),
        m.calls("cuMemFreeAsync"),
        m.calls("cuEventRecord"),
        m.calls("cuStreamIsCapturing"),
    ]
}

#[test]
fn a_block_freed_on_its_stream_serves_the_next_allocation_there_with_no_driver_call() {
    let (_lock, m, ctx) = mock();
    let s = ctx.new_stream().unwrap();
    let live = m.live_allocations();
    let x = DeviceBuffer::<u32>::alloc_on(&ctx, &s, 64).unwrap();
    x.fill(&s, 1).unwrap();
    let first = x.device_ptr();
    drop(x);
    assert_eq!(cached(&ctx), 256, "kept, not freed");
    let before = calls(m);
    let y = DeviceBuffer::<u32>::alloc_on(&ctx, &s, 64).unwrap();
    assert_eq!(y.device_ptr(), first, "the kept block");
    assert_eq!(
        calls(m),
        before,
        "no allocation, free, event or capture check"
    );
    assert_eq!(cached(&ctx), 0);
    y.fill(&s, 9).unwrap();
    assert_eq!(y.to_vec(&s).unwrap(), [9; 64]);
    drop(y);
    drop(s); // the stream's end frees its blocks on it
    settle(m);
    assert_eq!(m.live_allocations(), live);
    assert_eq!(cached(&ctx), 0);
    assert_eq!((m.bad_uses(), m.bad_destroys(), m.races()), (0, 0, 0));
}

#[test]
fn another_stream_or_another_size_goes_to_the_driver() {
    let (_lock, m, ctx) = mock();
    let (a, b) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let x = DeviceBuffer::<u32>::zeroed(&ctx, &a, 64).unwrap();
    let kept = x.device_ptr();
    drop(x);
    let allocs = m.calls("cuMemAllocFromPoolAsync");
    let y = DeviceBuffer::<u32>::alloc_on(&ctx, &b, 64).unwrap();
    assert_ne!(y.device_ptr(), kept, "never handed out on another stream");
    let z = DeviceBuffer::<u32>::alloc_on(&ctx, &a, 65).unwrap();
    assert_ne!(z.device_ptr(), kept, "nor for another size");
    assert_eq!(m.calls("cuMemAllocFromPoolAsync"), allocs + 2);
    assert_eq!(cached(&ctx), 256);
    drop((y, z, a, b));
    settle(m);
    assert_eq!(cached(&ctx), 0);
    assert_eq!((m.bad_uses(), m.races()), (0, 0));
}

#[test]
fn a_buffer_read_again_on_its_stream_is_kept_and_one_that_moved_is_freed() {
    let (_lock, m, ctx) = mock();
    let (a, b) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    // Written and read on `a` only: kept there.
    let x = DeviceBuffer::<u32>::zeroed(&ctx, &a, 64).unwrap();
    let out = DeviceBuffer::<u32>::alloc_on(&ctx, &a, 64).unwrap();
    out.copy_from(&a, &x).unwrap();
    let kept = x.device_ptr();
    drop(x);
    assert_eq!(cached(&ctx), 256);
    let y = DeviceBuffer::<u32>::alloc_on(&ctx, &a, 64).unwrap();
    assert_eq!(y.device_ptr(), kept);
    // Read on `b` behind a gate, then dropped: its uses are marked by events, and the free
    // goes to the context's service stream behind waits for them, never to a cache.
    let far = DeviceBuffer::<u32>::alloc_on(&ctx, &b, 64).unwrap();
    let hold = gate(&b);
    far.copy_from(&b, &y).unwrap();
    let frees = m.calls("cuMemFreeAsync");
    drop(y);
    assert_eq!(m.calls("cuMemFreeAsync"), frees + 1, "freed, not kept");
    assert_eq!(cached(&ctx), 0);
    let z = DeviceBuffer::<u32>::alloc_on(&ctx, &a, 64).unwrap();
    assert_ne!(z.device_ptr(), kept);
    z.fill(&a, 5).unwrap();
    drop(hold);
    assert_eq!(
        far.to_vec(&b).unwrap(),
        [0; 64],
        "the read saw the old contents"
    );
    assert_eq!(z.to_vec(&a).unwrap(), [5; 64]);
    drop((z, out, far, a, b));
    settle(m);
    assert_eq!((m.bad_uses(), m.races()), (0, 0), "{:?}", m.race_reports());
}

#[test]
fn a_stream_whose_handle_left_the_crate_keeps_nothing() {
    let (_lock, m, ctx) = mock();
    let s = ctx.new_stream().unwrap();
    let x = DeviceBuffer::<u32>::zeroed(&ctx, &s, 64).unwrap();
    drop(x);
    assert_eq!(cached(&ctx), 256);
    let frees = m.calls("cuMemFreeAsync");
    let _ = s.raw(); // ends the epoch: the kept block is freed on the stream
    assert_eq!(m.calls("cuMemFreeAsync"), frees + 1);
    assert_eq!(cached(&ctx), 0);
    let y = DeviceBuffer::<u32>::zeroed(&ctx, &s, 64).unwrap();
    drop(y); // the stream may be captured by other code now: freed, not kept
    assert_eq!(m.calls("cuMemFreeAsync"), frees + 2);
    assert_eq!(cached(&ctx), 0);
    drop(s);
    settle(m);
    assert_eq!((m.bad_uses(), m.races()), (0, 0));
}

#[test]
fn a_capture_frees_the_blocks_of_its_stream_before_it_begins() {
    let (_lock, m, ctx) = mock();
    let mut s = ctx.new_stream().unwrap();
    let x = DeviceBuffer::<u32>::zeroed(&ctx, &s, 64).unwrap();
    drop(x);
    assert_eq!(cached(&ctx), 256);
    let graph = s
        .capture(CaptureMode::ThreadLocal, |cap| {
            // Graph memory, never a kept block.
            let g = cuda_stream::GraphBuffer::<u32>::zeroed(&ctx, cap, 64)?;
            g.free()
        })
        .unwrap();
    assert_eq!(cached(&ctx), 0, "freed before the capture began");
    drop(graph);
    // After the capture the stream keeps blocks again.
    let y = DeviceBuffer::<u32>::zeroed(&ctx, &s, 64).unwrap();
    drop(y);
    assert_eq!(cached(&ctx), 256);
    drop(s);
    settle(m);
    assert_eq!(cached(&ctx), 0);
    assert_eq!((m.bad_uses(), m.races()), (0, 0));
}

#[test]
fn the_limit_bounds_what_is_kept_and_release_and_trim_free_it() {
    let (_lock, m, ctx) = mock();
    let s = ctx.new_stream().unwrap();
    let pool = MemPool::new(&ctx).unwrap();
    pool.set_cache_limit(300);
    assert_eq!(pool.cache_limit(), 300);
    let (x, y) = (
        DeviceBuffer::<u32>::zeroed_in(&pool, &s, 64).unwrap(),
        DeviceBuffer::<u32>::zeroed_in(&pool, &s, 64).unwrap(),
    );
    let frees = m.calls("cuMemFreeAsync");
    drop((x, y));
    assert_eq!(
        pool.usage().unwrap().cached,
        256,
        "one block within the limit"
    );
    assert_eq!(m.calls("cuMemFreeAsync"), frees + 1, "the other freed");
    s.synchronize().unwrap();
    assert_eq!(
        pool.usage().unwrap().used,
        0,
        "the kept block is not in use"
    );
    assert_eq!(ctx.release_cached(), 1);
    assert_eq!(pool.usage().unwrap().cached, 0);
    let z = DeviceBuffer::<u32>::zeroed_in(&pool, &s, 64).unwrap();
    drop(z);
    assert_eq!(pool.release_cached(), 1);
    let z = DeviceBuffer::<u32>::zeroed_in(&pool, &s, 64).unwrap();
    drop(z);
    pool.trim_to(0).unwrap();
    assert_eq!(
        pool.usage().unwrap().cached,
        0,
        "a trim frees the kept blocks first"
    );
    let z = DeviceBuffer::<u32>::zeroed_in(&pool, &s, 64).unwrap();
    drop(z);
    pool.set_cache_limit(0);
    assert_eq!(
        pool.usage().unwrap().cached,
        0,
        "a lower limit frees what is past it"
    );
    let z = DeviceBuffer::<u32>::zeroed_in(&pool, &s, 64).unwrap();
    drop(z);
    assert_eq!(pool.usage().unwrap().cached, 0, "limit 0 keeps nothing");
    settle(m);
    assert_eq!((m.bad_uses(), m.races()), (0, 0));
}

#[test]
fn a_block_taken_back_keeps_its_count_for_its_return_and_gives_it_back_when_let_go() {
    let (_lock, m, ctx) = mock();
    let (s, t) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let pool = MemPool::new(&ctx).unwrap();
    // Room for one block of 256 bytes.
    pool.set_cache_limit(300);
    drop(DeviceBuffer::<u32>::zeroed_in(&pool, &s, 64).unwrap());
    assert_eq!(pool.usage().unwrap().cached, 256);
    let y = DeviceBuffer::<u32>::alloc_in(&pool, &s, 64).unwrap();
    assert_eq!(
        pool.usage().unwrap().cached,
        0,
        "a block taken back is in use, not kept"
    );
    // The taken block's count stays with `s` for its return: `t` finds no room.
    let frees = m.calls("cuMemFreeAsync");
    drop(DeviceBuffer::<u32>::zeroed_in(&pool, &t, 64).unwrap());
    assert_eq!(m.calls("cuMemFreeAsync"), frees + 1, "t's block freed");
    assert_eq!(pool.usage().unwrap().cached, 0);
    // Its return fits in the count: kept again, with no free.
    drop(y);
    assert_eq!(m.calls("cuMemFreeAsync"), frees + 1, "y's block kept");
    assert_eq!(pool.usage().unwrap().cached, 256);
    // Taken once more, then the caches let go: the count goes back to the pool, and `t` may
    // keep a block again.
    let y = DeviceBuffer::<u32>::alloc_in(&pool, &s, 64).unwrap();
    assert_eq!(ctx.release_cached(), 0, "no block kept, only a count");
    drop(DeviceBuffer::<u32>::zeroed_in(&pool, &t, 64).unwrap());
    assert_eq!(pool.usage().unwrap().cached, 256, "t's block kept");
    // `y` comes back past the limit now: freed.
    let frees = m.calls("cuMemFreeAsync");
    drop(y);
    assert_eq!(m.calls("cuMemFreeAsync"), frees + 1, "y's block freed");
    assert_eq!(pool.usage().unwrap().cached, 256);
    // A lower limit: what is counted goes, and nothing is kept past it.
    let z = DeviceBuffer::<u32>::alloc_in(&pool, &t, 64).unwrap();
    pool.set_cache_limit(0);
    drop(z);
    assert_eq!(pool.usage().unwrap().cached, 0, "limit 0 keeps nothing");
    pool.set_cache_limit(300);
    drop(DeviceBuffer::<u32>::zeroed_in(&pool, &s, 64).unwrap());
    assert_eq!(pool.usage().unwrap().cached, 256, "every count went back");
    drop((s, t));
    settle(m);
    assert_eq!((m.bad_uses(), m.races()), (0, 0));
}

#[test]
fn two_blocks_taken_back_count_one_spare() {
    let (_lock, m, ctx) = mock();
    let s = ctx.new_stream().unwrap();
    let pool = MemPool::new(&ctx).unwrap();
    // Room for two blocks of 256 bytes.
    pool.set_cache_limit(600);
    let (x, y) = (
        DeviceBuffer::<u32>::zeroed_in(&pool, &s, 64).unwrap(),
        DeviceBuffer::<u32>::zeroed_in(&pool, &s, 64).unwrap(),
    );
    drop((x, y));
    assert_eq!(pool.usage().unwrap().cached, 512);
    // Both taken back: one count stays as the spare, the other goes back to the pool.
    let (x, y) = (
        DeviceBuffer::<u32>::alloc_in(&pool, &s, 64).unwrap(),
        DeviceBuffer::<u32>::alloc_in(&pool, &s, 64).unwrap(),
    );
    let frees = m.calls("cuMemFreeAsync");
    drop((x, y));
    assert_eq!(m.calls("cuMemFreeAsync"), frees, "both kept again");
    assert_eq!(pool.usage().unwrap().cached, 512);
    drop(s);
    settle(m);
    assert_eq!((m.bad_uses(), m.races()), (0, 0));
}

#[test]
fn a_pool_dropped_with_blocks_kept_frees_them_and_goes() {
    let (_lock, m, ctx) = mock();
    let s = ctx.new_stream().unwrap();
    let pools = m.live_pools();
    let pool = MemPool::new(&ctx).unwrap();
    pool.set_cache_limit(u64::MAX);
    let x = DeviceBuffer::<u8>::zeroed_in(&pool, &s, 100).unwrap();
    drop(x);
    assert_eq!(pool.usage().unwrap().cached, 100);
    let frees = m.calls("cuMemFreeAsync");
    drop(pool);
    assert_eq!(
        m.calls("cuMemFreeAsync"),
        frees + 1,
        "freed before the destroy"
    );
    s.synchronize().unwrap();
    settle(m);
    assert_eq!(m.live_pools(), pools);
    assert_eq!((m.bad_uses(), m.bad_destroys(), m.races()), (0, 0, 0));
}

#[test]
fn an_allocation_out_of_memory_frees_the_kept_blocks_and_tries_once_more() {
    let (_lock, m, ctx) = mock();
    let (a, b) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let x = DeviceBuffer::<u32>::zeroed(&ctx, &a, 64).unwrap();
    drop(x);
    assert_eq!(cached(&ctx), 256);
    // The next allocation fails for lack of memory: the kept block of `a` is freed on `a`, and
    // the allocation made again succeeds.
    m.fail(
        "cuMemAllocFromPoolAsync",
        1,
        CUresult::CUDA_ERROR_OUT_OF_MEMORY,
    );
    let (allocs, frees) = (
        m.calls("cuMemAllocFromPoolAsync"),
        m.calls("cuMemFreeAsync"),
    );
    let y = DeviceBuffer::<u32>::zeroed(&ctx, &b, 1000).unwrap();
    assert_eq!(
        m.calls("cuMemAllocFromPoolAsync"),
        allocs + 2,
        "tried again"
    );
    assert_eq!(m.calls("cuMemFreeAsync"), frees + 1, "the kept block freed");
    assert_eq!(cached(&ctx), 0);
    assert_eq!(y.to_vec(&b).unwrap(), [0; 1000]);
    // With nothing kept, the error is the driver's, at once.
    m.fail(
        "cuMemAllocFromPoolAsync",
        1,
        CUresult::CUDA_ERROR_OUT_OF_MEMORY,
    );
    let allocs = m.calls("cuMemAllocFromPoolAsync");
    let err = DeviceBuffer::<u32>::alloc_on(&ctx, &b, 10).unwrap_err();
    assert_eq!(err.driver_code(), Some(CUresult::CUDA_ERROR_OUT_OF_MEMORY));
    assert_eq!(m.calls("cuMemAllocFromPoolAsync"), allocs + 1, "no retry");
    m.clear_failures();
    drop((y, a, b));
    settle(m);
    assert_eq!((m.bad_uses(), m.races()), (0, 0));
}

#[test]
fn threads_on_streams_of_their_own_reuse_their_own_blocks() {
    let (_lock, m, ctx) = mock();
    let live = m.live_allocations();
    std::thread::scope(|sc| {
        for t in 0..4u32 {
            let ctx = &ctx;
            sc.spawn(move || {
                let s = ctx.new_stream().unwrap();
                for i in 0..50u32 {
                    let x = DeviceBuffer::<u32>::alloc_on(ctx, &s, 16 + t as usize).unwrap();
                    x.fill(&s, t * 1000 + i).unwrap();
                    if i % 10 == 0 {
                        assert_eq!(x.to_vec(&s).unwrap(), vec![t * 1000 + i; 16 + t as usize]);
                    }
                }
            });
        }
    });
    settle(m);
    assert_eq!(
        m.live_allocations(),
        live,
        "every stream's end freed its blocks"
    );
    assert_eq!(cached(&ctx), 0);
    assert_eq!((m.bad_uses(), m.races()), (0, 0));
}

#[test]
fn an_allocation_while_another_thread_takes_the_handle_is_ordered_before_the_settling() {
    // An allocation on a private stream made while another thread takes the stream's handle
    // (ending its epoch): the allocation is a lazy write on the epoch, so it must come before the
    // epoch's settling event on the stream, or a use elsewhere that waits for that event would
    // run unordered with it. The allocating thread is held right after its capture check, with
    // the epoch looked up and the allocation not made yet.
    let (_lock, m, ctx) = mock();
    let s = std::sync::Arc::new(ctx.new_stream().unwrap());
    let t = ctx.new_stream().unwrap();
    // Everything on `s` waits behind the gate: a use on `t` that does not wait for the
    // allocation runs before it.
    let hold = gate(&s);
    m.pause_after("cuStreamIsCapturing");
    let (c, s1) = (ctx.clone(), s.clone());
    let allocating =
        std::thread::spawn(move || DeviceBuffer::<u32>::alloc_on(&c, &*s1, 64).unwrap());
    m.wait_until_paused("the allocation never asked");
    let s2 = s.clone();
    let lending = std::thread::spawn(move || {
        let _ = s2.raw();
    });
    // The hand-over's settling record, if it does not wait for the allocation, is made now.
    std::thread::sleep(Duration::from_millis(50));
    m.resume();
    let x = allocating.join().unwrap();
    lending.join().unwrap();
    x.fill(&t, 3).unwrap();
    drop(hold);
    assert_eq!(x.to_vec(&t).unwrap(), [3; 64]);
    drop(x);
    settle(m);
    assert_eq!((m.bad_uses(), m.races()), (0, 0), "{:?}", m.race_reports());
}

/// Begins a capture on `s` with raw calls, as a framework would (thread-local mode).
fn raw_begin(s: ffi::CUstream) {
    let mode = ffi::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    // SAFETY: a live stream.
    let rc = unsafe { cuda_stream_sys::cuStreamBeginCapture(s, mode) };
    assert_eq!(rc, CUresult::CUDA_SUCCESS);
}

/// Ends the raw capture of `s` and destroys its graph: the driver's answer.
fn raw_end(s: ffi::CUstream) -> CUresult {
    let mut graph = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; the capture was begun on this thread.
    let rc = unsafe { cuda_stream_sys::cuStreamEndCapture(s, &mut graph) };
    if !graph.is_null() {
        // SAFETY: the capture handed the graph over.
        let destroyed = unsafe { cuda_stream_sys::cuGraphDestroy(graph) };
        assert_eq!(destroyed, CUresult::CUDA_SUCCESS);
    }
    rc
}

#[test]
fn a_stream_that_joined_a_capture_begun_elsewhere_hands_out_its_block_and_refuses_its_uses() {
    // A kept block is handed out with no capture check; on a private stream that joined a
    // framework's capture the memory is still real, and every use of the buffer is refused
    // while the capture lasts, which survives.
    let (_lock, m, ctx) = mock();
    let framework = ctx.new_stream().unwrap();
    let raw = framework.raw();
    let (j, t) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let x = DeviceBuffer::<u32>::zeroed(&ctx, &j, 16).unwrap();
    let kept = x.device_ptr();
    drop(x);
    assert_eq!(cached(&ctx), 64);
    raw_begin(raw);
    j.wait_stream(&framework).unwrap(); // `j` joins the framework's capture
    let y = DeviceBuffer::<u32>::alloc_on(&ctx, &j, 16).unwrap();
    assert_eq!(y.device_ptr(), kept, "the kept block");
    match DeviceBuffer::<u32>::alloc_on(&ctx, &j, 17) {
        Err(Error::Capturing { .. }) => {}
        other => panic!("an allocation that asks the driver on a joined stream: {other:?}"),
    }
    match y.fill(&t, 7) {
        Err(Error::Refused { reason, .. }) if reason.contains("joined a capture") => {}
        other => panic!("a use waiting for a stream in a capture begun elsewhere: {other:?}"),
    }
    match y.fill(&j, 7) {
        Err(Error::Refused { reason, .. }) if reason.contains("begun elsewhere") => {}
        other => panic!("a use in a capture begun elsewhere: {other:?}"),
    }
    drop(y);
    framework.wait_stream(&j).unwrap(); // joined back
    assert_eq!(
        raw_end(raw),
        CUresult::CUDA_SUCCESS,
        "the framework's capture"
    );
    let z = DeviceBuffer::<u32>::alloc_on(&ctx, &j, 16).unwrap();
    assert_eq!(z.device_ptr(), kept, "kept again by the drop");
    z.fill(&t, 5).unwrap();
    assert_eq!(z.to_vec(&t).unwrap(), [5; 16]);
    drop((z, j, t, framework));
    settle(m);
    assert_eq!((m.bad_uses(), m.races()), (0, 0), "{:?}", m.race_reports());
}
