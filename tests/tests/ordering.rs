//! `wait_event` and `wait_stream` order work across streams: checked by values that a consumer
//! kernel copies from memory a producer kernel writes late.

use std::time::Duration;

use cuda_stream::{AsStream, EventOptions};
use cuda_stream_tests::{DeviceBuffer, Kernels, Window, gpu};

const SPIN: Duration = Duration::from_millis(200);

#[test]
fn wait_event_orders_a_consumer_after_a_producer() {
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let (a, b) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let buf = DeviceBuffer::new(&ctx, 1);
    let out = DeviceBuffer::new(&ctx, 1);

    let w = Window::start(SPIN);
    k.store_after_spin(&a, buf.ptr(), 7, SPIN);
    let ev = a.record_event().unwrap();
    b.wait_event(&ev).unwrap();
    k.copy_u32(&b, out.ptr(), buf.ptr());
    let b_done = b.query().unwrap();
    w.assert_pending(!b_done, "the consumer stream waits for the producer");

    b.synchronize().unwrap();
    // Only `b` was synchronised: its copy ran after `a`'s store.
    assert_eq!(out.get(0), 7);
    assert!(ev.query().unwrap());
    a.synchronize().unwrap();
}

#[test]
fn wait_event_raw_orders_too() {
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let (a, b) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let buf = DeviceBuffer::new(&ctx, 1);
    let out = DeviceBuffer::new(&ctx, 1);
    k.store_after_spin(&a, buf.ptr(), 17, SPIN);
    let ev = a.record_event().unwrap();
    // SAFETY: `ev` is live for the call.
    unsafe { b.as_stream().wait_event_raw(ev.raw()) }.unwrap();
    k.copy_u32(&b, out.ptr(), buf.ptr());
    b.synchronize().unwrap();
    assert_eq!(out.get(0), 17);
}

#[test]
fn wait_stream_orders_a_consumer_after_a_producer() {
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let (a, b, c) = (
        ctx.new_stream().unwrap(),
        ctx.new_stream().unwrap(),
        ctx.new_stream().unwrap(),
    );
    let buf = DeviceBuffer::new(&ctx, 1);
    let out = DeviceBuffer::new(&ctx, 2);

    k.store_after_spin(&a, buf.ptr(), 7, SPIN);
    b.wait_stream(&a).unwrap();
    k.copy_u32(&b, out.at(0), buf.ptr());
    // Transitively: c after b after a.
    c.wait_stream(&b).unwrap();
    k.copy_u32(&c, out.at(1), out.at(0));
    c.synchronize().unwrap();
    assert_eq!(out.read(), [7, 7]);

    // Waiting on oneself is a no-op, not a deadlock.
    c.wait_stream(&c).unwrap();
    c.synchronize().unwrap();
}

#[test]
fn wait_stream_captures_the_producer_state_at_the_call() {
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let (a, b, d) = (
        ctx.new_stream().unwrap(),
        ctx.new_stream().unwrap(),
        ctx.new_stream().unwrap(),
    );
    let buf = DeviceBuffer::new(&ctx, 1);
    let out = DeviceBuffer::new(&ctx, 1);
    let long = SPIN * 5;

    k.store_after_spin(&a, buf.ptr(), 7, SPIN);
    b.wait_stream(&a).unwrap();
    k.copy_u32(&b, out.ptr(), buf.ptr());
    // Work enqueued on `a` after the wait must not delay `b`; nor may reusing the per-thread
    // event for another wait (here of `a` by `d`) change what `b` waits for.
    let w = Window::start(long);
    k.store_after_spin(&a, buf.ptr(), 9, long);
    d.wait_stream(&a).unwrap();
    b.synchronize().unwrap();
    let a_done = a.query().unwrap();
    let d_done = d.query().unwrap();
    assert_eq!(out.get(0), 7, "b copied before the second store");
    w.assert_pending(!a_done, "the second store");
    w.assert_pending(!d_done, "d waits for the second store");
    d.synchronize().unwrap();
    assert_eq!(buf.get(0), 9);
}

#[test]
fn reused_event_orders_each_record() {
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let (a, b) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let buf = DeviceBuffer::new(&ctx, 3);
    let out = DeviceBuffer::new(&ctx, 3);
    let ev = ctx.new_event(EventOptions::new()).unwrap();
    assert!(!ev.is_recorded());
    for i in 0..3 {
        k.store_after_spin(&a, buf.at(i), 100 + i as u32, SPIN / 4);
        a.record(&ev).unwrap();
        b.wait_event(&ev).unwrap();
        k.copy_u32(&b, out.at(i), buf.at(i));
    }
    assert!(ev.is_recorded());
    b.synchronize().unwrap();
    assert_eq!(out.read(), [100, 101, 102]);
}

/// Without a wait the consumer races the producer: documented, never asserted.
#[test]
fn negative_control_without_wait_races() {
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let (a, b) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let buf = DeviceBuffer::new(&ctx, 1);
    let out = DeviceBuffer::new(&ctx, 1);
    k.store_after_spin(&a, buf.ptr(), 7, SPIN);
    k.copy_u32(&b, out.ptr(), buf.ptr());
    b.synchronize().unwrap();
    let raced = out.get(0);
    a.synchronize().unwrap();
    println!(
        "negative control: without a wait the consumer copied {raced} (expected 0: it ran first)"
    );
    // The producer did finish: the control itself worked.
    assert_eq!(buf.get(0), 7);
}
