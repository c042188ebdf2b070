//! Two GPUs: cross-device event waits in both directions, borrowed streams report their device,
//! and default streams are bound to their own device's context.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cuda_stream::{Context, Device, Stream, current_stream};
use cuda_stream_tests::{
    DeviceBuffer, Kernels, Window, bind, current_context, gpu, raw_query, raw_stream_create,
    raw_stream_destroy, sys,
};

const SPIN: Duration = Duration::from_millis(200);

fn two_gpus() -> Option<(Context, Context)> {
    let ctx0 = gpu()?;
    let n = Device::count().unwrap();
    if n < 2 {
        println!("skipped: multi-GPU tests need 2 devices, this machine has {n}");
        return None;
    }
    let ctx1 = Context::primary(1).unwrap();
    println!(
        "device 0: {}, device 1: {}",
        ctx0.device().name().unwrap(),
        ctx1.device().name().unwrap()
    );
    Some((ctx0, ctx1))
}

/// `from` stores `value` late and sets a flag from a host function; `to` waits on an event
/// recorded after both. `to`'s own host function must see the flag, `to`'s kernel must run
/// after, and `from`'s store must be visible once only `to` has been synchronised.
fn cross_device_wait(from: (&Context, &Kernels<'_>), to: (&Context, &Kernels<'_>), value: u32) {
    let (fctx, fk) = from;
    let (tctx, tk) = to;
    let (fs, ts) = (fctx.new_stream().unwrap(), tctx.new_stream().unwrap());
    let fbuf = DeviceBuffer::new(fctx, 1);
    let tbuf = DeviceBuffer::new(tctx, 1);
    let flag = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(AtomicBool::new(false));

    let w = Window::start(SPIN);
    fk.store_after_spin(&fs, fbuf.ptr(), value, SPIN);
    {
        let flag = flag.clone();
        fs.launch_host_func(move || flag.store(true, Ordering::SeqCst))
            .unwrap();
    }
    let ev = fs.record_event().unwrap();
    ts.wait_event(&ev).unwrap();
    {
        let (flag, seen) = (flag.clone(), seen.clone());
        ts.launch_host_func(move || seen.store(flag.load(Ordering::SeqCst), Ordering::SeqCst))
            .unwrap();
    }
    tk.store(&ts, tbuf.ptr(), value + 1);
    let ts_done = ts.query().unwrap();
    w.assert_pending(!ts_done, "the waiting device's stream");
    ts.synchronize().unwrap();
    assert!(seen.load(Ordering::SeqCst), "the waiting device ran first");
    assert_eq!(fbuf.get(0), value);
    assert_eq!(tbuf.get(0), value + 1);

    // wait_stream across devices as well.
    fk.store_after_spin(&fs, fbuf.ptr(), value + 2, SPIN);
    ts.wait_stream(&fs).unwrap();
    let done = ts.record_event().unwrap();
    done.synchronize().unwrap();
    assert_eq!(fbuf.get(0), value + 2);
    fs.synchronize().unwrap();
}

#[test]
fn cross_device_event_waits_order_work_both_ways() {
    let Some((ctx0, ctx1)) = two_gpus() else {
        return;
    };
    let (k0, k1) = (Kernels::load(&ctx0), Kernels::load(&ctx1));
    cross_device_wait((&ctx0, &k0), (&ctx1, &k1), 7);
    cross_device_wait((&ctx1, &k1), (&ctx0, &k0), 20);
}

#[test]
fn a_borrowed_stream_reports_its_device() {
    let Some((ctx0, ctx1)) = two_gpus() else {
        return;
    };
    let raw = raw_stream_create(&ctx1, sys::CUstream_flags::CU_STREAM_NON_BLOCKING.0);
    {
        // Borrowed with device 0's context current: the handle decides.
        let _bound = bind(&ctx0);
        // SAFETY: `raw` lives until destroyed below, after the view.
        let view = unsafe { Stream::borrow_raw(raw, &raw) }.unwrap();
        assert_eq!(view.device().unwrap(), ctx1.device());
        assert_eq!(view.device().unwrap().ordinal(), 1);
        assert_eq!(view.context_raw(), ctx1.raw());
        view.synchronize().unwrap();
        assert_eq!(current_context(), ctx0.raw());
    }
    // SAFETY: created above, destroyed once.
    unsafe { raw_stream_destroy(raw) };
}

#[test]
fn default_streams_are_bound_to_their_device() {
    let Some((ctx0, ctx1)) = two_gpus() else {
        return;
    };
    let k1 = Kernels::load(&ctx1);
    let buf1 = DeviceBuffer::new(&ctx1, 1);
    std::thread::scope(|sc| {
        sc.spawn(|| {
            let _bound = bind(&ctx0);
            assert_eq!(ctx0.legacy_stream().device().unwrap(), ctx0.device());
            assert_eq!(ctx1.legacy_stream().device().unwrap(), ctx1.device());
            assert_eq!(ctx1.per_thread_stream().device().unwrap(), ctx1.device());

            // Device 1's legacy stream, synchronised while device 0's context is current.
            let w = Window::start(SPIN);
            k1.store_after_spin(ctx1.legacy_stream(), buf1.ptr(), 11, SPIN);
            let done = ctx1.legacy_stream().query().unwrap();
            w.assert_pending(!done, "device 1's legacy stream");
            ctx1.legacy_stream().synchronize().unwrap();
            // SAFETY: the legacy-stream value, resolved with device 1's context bound.
            let rc = unsafe { raw_query(ctx1.raw(), ctx1.legacy_stream().raw()) };
            assert_eq!(rc, sys::CUresult::CUDA_SUCCESS);
            assert_eq!(buf1.get(0), 11);
            assert_eq!(current_context(), ctx0.raw());
        });
    });
}

#[test]
fn current_streams_are_per_device() {
    let Some((ctx0, ctx1)) = two_gpus() else {
        return;
    };
    let (s0, s1) = (ctx0.new_stream().unwrap(), ctx1.new_stream().unwrap());
    assert_eq!(s0.device().unwrap().ordinal(), 0);
    assert_eq!(s1.device().unwrap().ordinal(), 1);
    let _g0 = s0.make_current();
    let _g1 = s1.make_current();
    current_stream(&ctx0, |s| assert_eq!(s.raw(), s0.raw()));
    current_stream(&ctx1, |s| assert_eq!(s.raw(), s1.raw()));
}
