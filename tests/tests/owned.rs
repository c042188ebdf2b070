//! `OwnedStream` and `Event` destruction: `close` reports success, `Drop` works on threads with
//! no (or another) current context, and work pending at destruction still completes.

use std::time::{Duration, Instant};

use cuda_stream::{Event, EventOptions, OwnedStream, StreamOptions};
use cuda_stream_tests::{
    DeviceBuffer, Kernels, RawContext, current_context, gpu, set_current_context,
};

/// Polls `buf[0]` until it is `value` (without synchronising anything), for up to 30 s.
fn wait_for_value(buf: &DeviceBuffer<'_>, value: u32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if buf.get(0) == value {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

#[test]
fn close_returns_ok() {
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let s = ctx.new_stream().unwrap();
    k.spin(&s, Duration::from_millis(1));
    s.synchronize().unwrap();
    s.close().unwrap();
    let blocking = OwnedStream::new(&ctx, StreamOptions::new().blocking(true)).unwrap();
    blocking.close().unwrap();
    let ev = Event::new(&ctx, EventOptions::new().timing(true)).unwrap();
    ev.close().unwrap();
}

#[test]
fn work_pending_at_close_or_drop_still_completes() {
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let buf = DeviceBuffer::new(&ctx, 1);
    let s = ctx.new_stream().unwrap();
    k.store_after_spin(&s, buf.ptr(), 7, Duration::from_millis(100));
    s.close().unwrap();
    assert!(
        wait_for_value(&buf, 7),
        "work enqueued before close never ran"
    );

    let s = ctx.new_stream().unwrap();
    k.store_after_spin(&s, buf.ptr(), 8, Duration::from_millis(100));
    drop(s);
    assert!(
        wait_for_value(&buf, 8),
        "work enqueued before drop never ran"
    );
}

#[test]
fn drop_and_close_on_a_thread_with_no_current_context() {
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let buf = DeviceBuffer::new(&ctx, 1);
    let dropped = ctx.new_stream().unwrap();
    let closed = ctx.new_stream().unwrap();
    let busy = ctx.new_stream().unwrap();
    let ev = dropped.record_event().unwrap();
    k.store_after_spin(&busy, buf.ptr(), 3, Duration::from_millis(100));
    std::thread::scope(|s| {
        s.spawn(|| {
            assert!(current_context().is_null());
            drop(dropped);
            assert!(current_context().is_null());
            closed.close().unwrap();
            ev.close().unwrap();
            busy.close().unwrap();
            // Creation works there too, and leaves no context behind.
            let fresh = ctx.new_stream().unwrap();
            let fresh_ev = Event::new(&ctx, EventOptions::new()).unwrap();
            assert!(current_context().is_null());
            fresh.record(&fresh_ev).unwrap();
            fresh_ev.synchronize().unwrap();
            fresh_ev.close().unwrap();
            fresh.close().unwrap();
            assert!(current_context().is_null());
        });
    });
    assert!(wait_for_value(&buf, 3));
}

#[test]
fn close_on_a_thread_with_another_context_current() {
    let Some(ctx) = gpu() else { return };
    let other = RawContext::create(ctx.device());
    let s = ctx.new_stream().unwrap();
    let t = ctx.new_stream().unwrap();
    std::thread::scope(|sc| {
        sc.spawn(|| {
            set_current_context(Some(&other));
            s.close().unwrap();
            drop(t);
            assert_eq!(current_context(), other.raw());
            set_current_context(None);
        });
    });
}
