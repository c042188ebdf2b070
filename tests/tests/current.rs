//! The per-thread current stream: default, nesting, out-of-order drop, per context, per thread.

use std::time::Duration;

use cuda_stream::{AsStream, current_stream, current_stream_raw};
use cuda_stream_tests::{
    DeviceBuffer, Kernels, RawContext, gpu, raw_stream_create, raw_stream_destroy, sys,
};

#[test]
fn legacy_stream_when_none_is_set() {
    let Some(ctx) = gpu() else { return };
    current_stream(&ctx, |s| assert_eq!(s, ctx.legacy_stream()));
    assert_eq!(current_stream_raw(&ctx) as usize, 1);
    std::thread::scope(|sc| {
        sc.spawn(|| current_stream(&ctx, |s| assert_eq!(s, ctx.legacy_stream())));
    });
}

#[test]
fn guards_nest_and_restore() {
    let Some(ctx) = gpu() else { return };
    let (a, b, c) = (
        ctx.new_stream().unwrap(),
        ctx.new_stream().unwrap(),
        ctx.new_stream().unwrap(),
    );
    {
        let _ga = a.make_current();
        current_stream(&ctx, |s| assert_eq!(s, a.as_stream()));
        {
            let _gb = b.make_current();
            current_stream(&ctx, |s| assert_eq!(s, b.as_stream()));
            {
                let _gc = c.as_stream().make_current();
                assert_eq!(current_stream_raw(&ctx), c.raw());
            }
            current_stream(&ctx, |s| assert_eq!(s, b.as_stream()));
        }
        current_stream(&ctx, |s| assert_eq!(s, a.as_stream()));
        // Another thread does not see this thread's setting.
        std::thread::scope(|sc| {
            sc.spawn(|| current_stream(&ctx, |s| assert_eq!(s, ctx.legacy_stream())));
        });
    }
    current_stream(&ctx, |s| assert_eq!(s, ctx.legacy_stream()));
}

#[test]
fn out_of_order_drop_restores_correctly() {
    let Some(ctx) = gpu() else { return };
    let (a, b, c) = (
        ctx.new_stream().unwrap(),
        ctx.new_stream().unwrap(),
        ctx.new_stream().unwrap(),
    );
    let ga = a.make_current();
    let gb = b.make_current();
    let gc = c.make_current();
    drop(gb); // the middle one: c stays current
    current_stream(&ctx, |s| assert_eq!(s, c.as_stream()));
    drop(gc);
    current_stream(&ctx, |s| assert_eq!(s, a.as_stream()));
    drop(ga);
    current_stream(&ctx, |s| assert_eq!(s, ctx.legacy_stream()));

    let ga = a.make_current();
    let gb = b.make_current();
    drop(ga); // the outer one first: b stays current
    current_stream(&ctx, |s| assert_eq!(s, b.as_stream()));
    drop(gb);
    current_stream(&ctx, |s| assert_eq!(s, ctx.legacy_stream()));

    // The same stream twice.
    let g1 = a.make_current();
    let g2 = b.make_current();
    let g3 = a.make_current();
    drop(g3);
    current_stream(&ctx, |s| assert_eq!(s, b.as_stream()));
    drop(g2);
    current_stream(&ctx, |s| assert_eq!(s, a.as_stream()));
    drop(g1);
    current_stream(&ctx, |s| assert_eq!(s, ctx.legacy_stream()));
}

#[test]
fn current_stream_is_per_context() {
    let Some(ctx) = gpu() else { return };
    let other = RawContext::create(ctx.device());
    let raw_o = raw_stream_create(&other, sys::CUstream_flags::CU_STREAM_NON_BLOCKING.0);
    {
        // SAFETY: `raw_o` lives until destroyed below, after every view and guard.
        let in_other = unsafe { cuda_stream::Stream::borrow_raw(raw_o, &other) }.unwrap();
        let a = ctx.new_stream().unwrap();
        let ga = a.make_current();
        let go = in_other.make_current();
        // The innermost guard is of the other context: `ctx`'s current stream is still `a`.
        current_stream(&ctx, |s| assert_eq!(s, a.as_stream()));
        drop(ga);
        current_stream(&ctx, |s| assert_eq!(s, ctx.legacy_stream()));
        drop(go);
    }
    // SAFETY: created above; nothing refers to it any more.
    unsafe { raw_stream_destroy(raw_o) };
}

#[test]
fn work_goes_to_the_current_stream() {
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let buf = DeviceBuffer::new(&ctx, 1);
    let a = ctx.new_stream().unwrap();
    {
        let _g = a.make_current();
        current_stream(&ctx, |s| {
            k.store_after_spin(s, buf.ptr(), 6, Duration::from_millis(50))
        });
    }
    a.synchronize().unwrap();
    assert_eq!(buf.get(0), 6);
}

/// A leaked guard keeps its stream's handle valid even after the `OwnedStream` is dropped.
#[test]
fn a_leaked_guard_keeps_its_stream_valid() {
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let buf = DeviceBuffer::new(&ctx, 1);
    // On a thread of its own, so the leaked entry dies with it.
    std::thread::scope(|sc| {
        sc.spawn(|| {
            let s = ctx.new_stream().unwrap();
            let raw = s.raw();
            std::mem::forget(s.make_current());
            drop(s);
            current_stream(&ctx, |cur| {
                assert_eq!(cur.raw(), raw);
                k.store(cur, buf.ptr(), 4);
                cur.synchronize().unwrap();
                assert!(cur.query().unwrap());
            });
        });
    });
    assert_eq!(buf.get(0), 4);
}
