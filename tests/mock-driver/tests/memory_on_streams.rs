//! Memory on streams against the mock's counters: uses on two streams are ordered and never
//! reach freed memory, a stream-ordered free waits behind queued work, the no-pool path (device
//! 1, switched off) frees only after the uses' events complete, a page-locked buffer dropped
//! with a copy in flight is freed after it, a buffer used on one owned stream needs no event, and
//! a use on a stream that has ended since is waited for through the stream's final event; a
//! failed wait of `into_raw` gives the buffer back with the error.

use std::sync::Mutex;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use cuda_mock_driver::{MockDriver, Serialized};
use cuda_stream::{Context, DeviceBuffer, PinnedHostBuffer, pending_frees, poll_pending_frees};

static LOCK: Mutex<()> = Mutex::new(());

/// Serialises the test, installs the mock (device 1 without memory pools, before anything asks)
/// and resets it.
fn mock() -> (Serialized, &'static MockDriver) {
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let m = MockDriver::global();
    m.set_memory_pools(1, false);
    m.reset();
    no_kept_blocks();
    (m.checked(guard), m)
}

/// The tests here follow each free to the driver: device 0's default pool keeps no freed block
/// for reuse (set before anything allocates; the pool outlives its contexts).
fn no_kept_blocks() {
    let ctx = cuda_stream::Context::primary(0).expect("device 0");
    cuda_stream::MemPool::default_for(&ctx)
        .expect("device 0 has pools")
        .set_cache_limit(0);
}

fn settle(m: &MockDriver) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while m.pending_host_fns() > 0 {
        assert!(Instant::now() < deadline, "work still pending");
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// Holds `stream`'s later work until the returned sender is dropped.
fn gate(stream: &cuda_stream::OwnedStream) -> mpsc::Sender<()> {
    let (tx, rx) = mpsc::channel::<()>();
    stream
        .launch_host_func(move || {
            let _ = rx.recv();
        })
        .expect("host function");
    tx
}

#[test]
fn uses_on_two_streams_are_ordered_and_freed_after() {
    let (_lock, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let (a, b) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let live = m.live_allocations();
    let x = DeviceBuffer::<u32>::alloc_on(&ctx, &a, 64).unwrap();
    assert!(x.pool().is_some(), "device 0 has pools");
    x.fill(&a, 7).unwrap();
    let y = DeviceBuffer::<u32>::alloc_on(&ctx, &b, 64).unwrap();
    y.copy_from(&b, &x).unwrap();
    assert_eq!(y.to_vec(&b).unwrap(), [7; 64]);
    drop((x, y));
    settle(m);
    assert_eq!(m.live_allocations(), live);
    assert_eq!((m.bad_uses(), m.bad_destroys()), (0, 0));
}

#[test]
fn a_free_queued_behind_work_does_not_free_under_it() {
    let (_lock, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let s = ctx.new_stream().unwrap();
    let live = m.live_allocations();
    let hold = gate(&s);
    let x = DeviceBuffer::<u32>::alloc_on(&ctx, &s, 16).unwrap();
    x.fill(&s, 1).unwrap();
    drop(x); // returns at once: the free is queued behind the fill
    assert_eq!(m.calls("cuMemFreeAsync"), 1);
    assert_eq!(
        m.live_allocations(),
        live + 1,
        "not freed under the queued fill"
    );
    drop(hold);
    settle(m);
    assert_eq!(m.live_allocations(), live);
    assert_eq!((m.bad_uses(), m.bad_destroys()), (0, 0));
}

#[test]
fn without_pools_the_free_waits_for_the_uses_events() {
    let (_lock, m) = mock();
    let ctx = Context::primary(1).unwrap();
    let s = ctx.new_stream().unwrap();
    let live = m.live_allocations();
    let hold = gate(&s);
    let x = DeviceBuffer::<u32>::alloc_on(&ctx, &s, 16).unwrap();
    assert!(x.pool().is_none(), "device 1 has no pools");
    x.fill(&s, 1).unwrap();
    drop(x);
    assert_eq!(m.calls("cuMemAllocFromPoolAsync"), 0);
    assert_eq!(m.calls("cuMemFree"), 0, "not freed under the queued fill");
    assert_eq!(pending_frees(), 1);
    assert_eq!(poll_pending_frees(), 1, "its event has not completed");
    drop(hold);
    settle(m);
    assert_eq!(poll_pending_frees(), 0);
    assert_eq!(m.calls("cuMemFree"), 1);
    assert_eq!(m.live_allocations(), live);
    assert_eq!((m.bad_uses(), m.bad_destroys()), (0, 0));
}

#[test]
fn a_pinned_buffer_dropped_with_a_copy_in_flight_is_freed_after_it() {
    let (_lock, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let s = ctx.new_stream().unwrap();
    let x = DeviceBuffer::<u32>::zeroed(&ctx, &s, 1024).unwrap();
    let hold = gate(&s);
    let mut host = PinnedHostBuffer::<u32>::zeroed(&ctx, 1024).unwrap();
    assert_eq!(m.live_host_allocations(), 1);
    x.copy_to_pinned(&s, &mut host).unwrap();
    assert_eq!(host.copies_in_flight(), 1);
    drop(host);
    assert_eq!(m.calls("cuMemFreeHost"), 0, "not freed under the copy");
    assert_eq!(m.live_host_allocations(), 1);
    drop(hold);
    settle(m);
    poll_pending_frees();
    assert_eq!(m.calls("cuMemFreeHost"), 1);
    assert_eq!(m.live_host_allocations(), 0);
    drop(x);
    settle(m);
    assert_eq!((m.bad_uses(), m.bad_destroys()), (0, 0));
}

#[test]
fn a_buffer_used_on_one_owned_stream_creates_no_event() {
    let (_lock, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let s = ctx.new_stream().unwrap();
    let before = (m.calls("cuEventCreate"), m.calls("cuEventRecord"));
    let x = DeviceBuffer::<u32>::zeroed(&ctx, &s, 256).unwrap();
    let y = DeviceBuffer::<u32>::alloc_on(&ctx, &s, 256).unwrap();
    x.fill(&s, 3).unwrap();
    y.copy_from(&s, &x).unwrap();
    assert_eq!(y.to_vec(&s).unwrap(), [3; 256]);
    drop((x, y));
    settle(m);
    assert_eq!(
        (m.calls("cuEventCreate"), m.calls("cuEventRecord")),
        before,
        "no event for a buffer that never left its stream"
    );
    assert_eq!((m.bad_uses(), m.bad_destroys()), (0, 0));
}

#[test]
fn a_use_on_a_stream_that_ended_is_waited_for_through_its_final_event() {
    let (_lock, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let (a, b) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let x = DeviceBuffer::<u32>::zeroed(&ctx, &a, 64).unwrap();
    let y = DeviceBuffer::<u32>::zeroed(&ctx, &b, 64).unwrap();
    let hold = gate(&a);
    x.fill(&a, 9).unwrap(); // lazy: no event yet
    let records = m.calls("cuEventRecord");
    drop(a); // ends with the fill queued: one final event for every buffer used there
    assert_eq!(m.calls("cuEventRecord"), records + 1, "the final event");
    // The mock runs all work in order on one thread, so the data alone cannot show a missing
    // wait: the calls do.
    let (waits, records) = (m.calls("cuStreamWaitEvent"), m.calls("cuEventRecord"));
    y.copy_from(&b, &x).unwrap();
    assert_eq!(
        (m.calls("cuStreamWaitEvent"), m.calls("cuEventRecord")),
        (waits + 1, records + 1),
        "b waits for the final event (and marks its read: the buffer moves between streams)"
    );
    drop(hold);
    assert_eq!(y.to_vec(&b).unwrap(), [9; 64]);
    drop(x);
    settle(m);
    assert_eq!((m.bad_uses(), m.bad_destroys()), (0, 0));
}

#[test]
fn a_buffer_whose_stream_ended_is_freed_after_its_use() {
    let (_lock, m) = mock();
    for device in [0, 1] {
        m.reset();
        let ctx = Context::primary(device).unwrap();
        let a = ctx.new_stream().unwrap();
        let live = m.live_allocations();
        let x = DeviceBuffer::<u32>::zeroed(&ctx, &a, 16).unwrap();
        let hold = gate(&a);
        x.fill(&a, 1).unwrap();
        drop(a);
        let waits = m.calls("cuStreamWaitEvent");
        drop(x); // pools: freed on the service stream behind the final event; else deferred
        assert_eq!(
            m.calls("cuStreamWaitEvent"),
            waits + 1,
            "device {device}: the service stream waits for the final event"
        );
        std::thread::sleep(Duration::from_millis(10));
        poll_pending_frees();
        assert_eq!(
            m.live_allocations(),
            live + 1,
            "device {device}: not freed under the fill"
        );
        drop(hold);
        settle(m);
        let deadline = Instant::now() + Duration::from_secs(60);
        while poll_pending_frees() > 0 || m.live_allocations() > live {
            assert!(Instant::now() < deadline, "device {device}: never freed");
            std::thread::sleep(Duration::from_micros(100));
        }
        assert_eq!((m.bad_uses(), m.bad_destroys()), (0, 0));
    }
}

#[test]
fn into_raw_gives_the_buffer_back_with_the_error_when_its_wait_fails() {
    let (_lock, m) = mock();
    let ctx = Context::primary(0).unwrap();
    let s = ctx.new_stream().unwrap();
    let live = m.live_allocations();
    let x = DeviceBuffer::<u32>::zeroed(&ctx, &s, 16).unwrap();
    x.fill(&s, 5).unwrap();
    m.fail(
        "cuEventSynchronize",
        1,
        cuda_stream::ffi::CUresult::CUDA_ERROR_LAUNCH_FAILED,
    );
    let kept = x.into_raw().unwrap_err();
    assert!(!kept.is_held_by_graphs());
    assert_eq!(kept.to_string(), "waiting for the buffer's uses failed");
    let cause = std::error::Error::source(&kept).expect("the driver's error");
    assert_eq!(
        cause.to_string(),
        "cuEventSynchronize: CUDA_ERROR_LAUNCH_FAILED"
    );
    let x = kept.into_buffer();
    assert_eq!(x.to_vec(&s).unwrap(), [5; 16], "the buffer is unchanged");
    let (ptr, len) = x.into_raw().expect("the wait succeeds now");
    assert_eq!((len, m.live_allocations()), (16, live + 1));
    // SAFETY: handed over by `into_raw` with no work pending; freed once.
    let rc = unsafe { cuda_stream_sys::cuMemFreeAsync(ptr, s.raw()) };
    assert_eq!(rc, cuda_stream::ffi::CUresult::CUDA_SUCCESS);
    s.synchronize().unwrap();
    assert_eq!(m.live_allocations(), live);
    assert_eq!((m.bad_uses(), m.bad_destroys()), (0, 0));
}
