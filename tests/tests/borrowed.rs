//! Borrowed streams (`Stream::borrow_raw`): never destroyed by Rust, context and device
//! discovered from the handle, special values rejected.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use cuda_stream::{AsStream, Error, OwnedStream, Stream};
use cuda_stream_tests::{
    DeviceBuffer, Kernels, RawContext, bind, check, current_context, gpu, raw_query,
    raw_stream_create, raw_stream_destroy, set_current_context, sys,
};

const NON_BLOCKING: u32 = sys::CUstream_flags::CU_STREAM_NON_BLOCKING.0;

#[test]
fn a_borrowed_stream_is_never_destroyed_by_rust() {
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let buf = DeviceBuffer::new(&ctx, 2);
    let raw = raw_stream_create(&ctx, NON_BLOCKING);
    {
        let owner = (); // stands for whoever owns `raw`
        // SAFETY: `raw` is live until the raw destroy below, after the view is gone.
        let view = unsafe { Stream::borrow_raw(raw, &owner) }.unwrap();
        assert_eq!(view.raw(), raw);
        assert_eq!(view.context_raw(), ctx.raw());
        assert_eq!(view.device().unwrap(), ctx.device());
        assert!(view.is_nonblocking().unwrap());
        let copy = view;
        k.store_after_spin(copy, buf.at(0), 5, std::time::Duration::from_millis(20));
        let ran = Arc::new(AtomicBool::new(false));
        let r = ran.clone();
        view.launch_host_func(move || r.store(true, Ordering::SeqCst))
            .unwrap();
        let ev = view.record_event().unwrap();
        view.synchronize().unwrap();
        assert!(ran.load(Ordering::SeqCst));
        assert!(ev.query().unwrap());
        assert_eq!(buf.get(0), 5);
        // Views and events go out of scope here; nothing may destroy `raw`.
    }
    // The raw owner can still enqueue and synchronise.
    {
        let _bound = bind(&ctx);
        check(
            // SAFETY: the buffer holds 2 u32s; `raw` is a live stream of the bound context.
            unsafe { sys::cuMemsetD32Async(buf.at(1), 11, 1, raw) },
            "cuMemsetD32Async",
        );
        // SAFETY: `raw` is live.
        check(
            unsafe { sys::cuStreamSynchronize(raw) },
            "cuStreamSynchronize",
        );
    }
    assert_eq!(buf.get(1), 11);
    // SAFETY: `raw` is live and of `ctx`.
    let rc = unsafe { raw_query(ctx.raw(), raw) };
    assert_eq!(rc, sys::CUresult::CUDA_SUCCESS);
    // SAFETY: created above, not destroyed by anything else; destroyed once here.
    unsafe { raw_stream_destroy(raw) };
}

#[test]
fn borrow_raw_discovers_the_context_on_any_thread() {
    let Some(ctx) = gpu() else { return };
    let raw = raw_stream_create(&ctx, NON_BLOCKING) as usize;
    let other = RawContext::create(ctx.device());
    std::thread::scope(|s| {
        // No context current.
        s.spawn(|| {
            assert!(current_context().is_null());
            // SAFETY: the stream is live until destroyed after this scope.
            let view = unsafe { Stream::borrow_raw(raw as sys::CUstream, &raw) }.unwrap();
            assert_eq!(view.context_raw(), ctx.raw());
            assert_eq!(view.device().unwrap(), ctx.device());
            view.synchronize().unwrap();
            assert!(current_context().is_null());
        });
    });
    std::thread::scope(|s| {
        // Another context current.
        s.spawn(|| {
            set_current_context(Some(&other));
            // SAFETY: as above.
            let view = unsafe { Stream::borrow_raw(raw as sys::CUstream, &raw) }.unwrap();
            assert_eq!(view.context_raw(), ctx.raw());
            assert_ne!(view.context_raw(), other.raw());
            assert_eq!(view.device().unwrap(), ctx.device());
            view.synchronize().unwrap();
            assert_eq!(current_context(), other.raw());
            set_current_context(None);
        });
    });
    // A stream of the non-primary context is attributed to it.
    let in_other = raw_stream_create(&other, NON_BLOCKING);
    {
        // SAFETY: `in_other` lives until destroyed below; `other` outlives the view.
        let view = unsafe { Stream::borrow_raw(in_other, &other) }.unwrap();
        assert_eq!(view.context_raw(), other.raw());
        assert_eq!(view.device().unwrap(), other.device());
        view.synchronize().unwrap();
    }
    // SAFETY: both created above, destroyed once.
    unsafe {
        raw_stream_destroy(in_other);
        raw_stream_destroy(raw as sys::CUstream);
    }
}

#[test]
fn special_handles_are_rejected() {
    let Some(ctx) = gpu() else { return };
    for h in [0usize, 1, 2] {
        // SAFETY: special values are rejected before any use.
        match unsafe { Stream::borrow_raw(h as sys::CUstream, &ctx) } {
            Err(Error::SpecialHandle { handle }) => assert_eq!(handle, h),
            other => panic!("{h:#x}: expected SpecialHandle, got {other:?}"),
        }
        // SAFETY: as above.
        match unsafe { OwnedStream::from_raw(h as sys::CUstream, &ctx) } {
            Err(Error::SpecialHandle { handle }) => assert_eq!(handle, h),
            other => panic!("{h:#x}: expected SpecialHandle, got {other:?}"),
        }
    }
    assert!(ctx.legacy_stream().is_default());
    assert_eq!(ctx.legacy_stream().raw() as usize, 1);
    assert_eq!(ctx.per_thread_stream().raw() as usize, 2);
    assert_eq!(ctx.null_stream().raw() as usize, 0);
}

#[test]
fn into_raw_and_from_raw_hand_ownership_over() {
    let Some(ctx) = gpu() else { return };
    let s = ctx.new_stream().unwrap();
    let raw = s.into_raw();
    // SAFETY: `into_raw` did not destroy it.
    let rc = unsafe { raw_query(ctx.raw(), raw) };
    assert_eq!(rc, sys::CUresult::CUDA_SUCCESS);
    // SAFETY: now ours; destroyed once.
    unsafe { raw_stream_destroy(raw) };

    let raw = raw_stream_create(&ctx, NON_BLOCKING);
    // SAFETY: a live stream of `ctx` that nothing else destroys.
    let owned = unsafe { OwnedStream::from_raw(raw, &ctx) }.unwrap();
    assert_eq!(owned.raw(), raw);
    assert_eq!(owned.as_stream().context_raw(), ctx.raw());
    owned.synchronize().unwrap();
    owned.close().unwrap();
}
