//! Default streams (legacy, per-thread, null) work whatever context is current on the thread
//! (none, or another one), and leave that state as it was; explicit handles need no current
//! context; two contexts on one GPU behave as the driver does.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cuda_stream::{Context, Error, Event, EventOptions, Stream};
use cuda_stream_tests::{
    DeviceBuffer, Kernels, RawContext, Window, current_context, gpu, raw_query, raw_stream_create,
    raw_stream_destroy, set_current_context, sys,
};

const SPIN: Duration = Duration::from_millis(150);
const NON_BLOCKING: u32 = sys::CUstream_flags::CU_STREAM_NON_BLOCKING.0;

/// The legacy stream is one per context, shared by every test of this binary: the tests that
/// check it is idle right after synchronising it take turns.
static LEGACY: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn legacy_turn() -> std::sync::MutexGuard<'static, ()> {
    LEGACY.lock().unwrap_or_else(|e| e.into_inner())
}

/// Exercises `s` (a default stream of `ctx`) on the calling thread, whose current context is
/// `expected` and must stay so after every call.
fn exercise(ctx: &Context, k: &Kernels<'_>, s: Stream<'_>, name: &str, expected: sys::CUcontext) {
    let here = || {
        assert_eq!(
            current_context(),
            expected,
            "{name}: current context changed"
        )
    };
    let buf = DeviceBuffer::new(ctx, 3);
    let out = DeviceBuffer::new(ctx, 2);
    here();

    // synchronize and query act on `ctx`'s default stream, not the current context's.
    let w = Window::start(SPIN);
    k.store_after_spin(s, buf.at(0), 10, SPIN);
    here();
    let done = s.query().unwrap();
    here();
    w.assert_pending(!done, name);
    s.synchronize().unwrap();
    here();
    assert_eq!(
        buf.get(0),
        10,
        "{name}: synchronize returned before the kernel ended"
    );
    // SAFETY: a default-stream value, resolved with `ctx` bound.
    let rc = unsafe { raw_query(ctx.raw(), s.raw()) };
    assert_eq!(
        rc,
        sys::CUresult::CUDA_SUCCESS,
        "{name}: synchronize waited on another context's stream"
    );
    assert!(s.query().unwrap());

    // Recording an event of `ctx`: fails with CUDA_ERROR_INVALID_HANDLE if the driver resolved
    // the default stream through another context.
    let ev = Event::new(ctx, EventOptions::new()).unwrap();
    k.store_after_spin(s, buf.at(1), 11, SPIN);
    s.record(&ev).unwrap();
    here();
    let recorded = s.record_event().unwrap();
    here();
    assert_eq!(recorded.context_raw(), ctx.raw());
    ev.synchronize().unwrap();
    assert_eq!(buf.get(1), 11);
    recorded.synchronize().unwrap();

    // wait_event / wait_stream order the default stream after an explicit stream.
    let producer = ctx.new_stream().unwrap();
    here();
    k.store_after_spin(&producer, buf.at(2), 12, SPIN);
    let pev = producer.record_event().unwrap();
    s.wait_event(&pev).unwrap();
    here();
    k.copy_u32(s, out.at(0), buf.at(2));
    s.synchronize().unwrap();
    assert_eq!(
        out.get(0),
        12,
        "{name}: wait_event did not order the default stream"
    );

    k.store_after_spin(&producer, buf.at(2), 13, SPIN);
    s.wait_stream(&producer).unwrap();
    here();
    k.copy_u32(s, out.at(1), buf.at(2));
    s.synchronize().unwrap();
    assert_eq!(
        out.get(1),
        13,
        "{name}: wait_stream did not order the default stream"
    );

    // ... and an explicit stream after the default stream.
    k.store_after_spin(s, buf.at(0), 14, SPIN);
    producer.wait_stream(&s).unwrap();
    here();
    k.copy_u32(&producer, out.at(0), buf.at(0));
    producer.synchronize().unwrap();
    assert_eq!(out.get(0), 14, "{name}: wait_stream on the default stream");

    // Host functions and callbacks run after the default stream's prior work.
    let flag = Arc::new(AtomicBool::new(false));
    let status_ok = Arc::new(AtomicBool::new(false));
    k.store_after_spin(s, buf.at(0), 15, SPIN);
    {
        let flag = flag.clone();
        s.launch_host_func(move || flag.store(true, Ordering::SeqCst))
            .unwrap();
        let status_ok = status_ok.clone();
        s.add_callback(move |r| status_ok.store(r.is_ok(), Ordering::SeqCst))
            .unwrap();
    }
    here();
    s.synchronize().unwrap();
    assert!(flag.load(Ordering::SeqCst));
    assert!(status_ok.load(Ordering::SeqCst));
    assert_eq!(buf.get(0), 15);

    // Properties, through the right context.
    assert_eq!(s.device().unwrap(), ctx.device());
    here();
    match s.priority() {
        Ok(p) => assert!(
            ctx.priority_range().unwrap().contains(p),
            "{name}: priority {p}"
        ),
        Err(e) => println!("note: {name}: the driver gives no priority: {e}"),
    }
    match s.flags() {
        Ok(f) => println!("{name}: flags {f:#x}"),
        Err(e) => println!("note: {name}: the driver gives no flags: {e}"),
    }
    here();
}

fn all_default_streams(ctx: &Context, k: &Kernels<'_>, expected: sys::CUcontext) {
    exercise(ctx, k, ctx.legacy_stream(), "legacy", expected);
    exercise(ctx, k, ctx.per_thread_stream(), "per-thread", expected);
    exercise(ctx, k, ctx.null_stream(), "null", expected);
}

#[test]
fn default_streams_work_with_no_current_context() {
    let _turn = legacy_turn();
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    std::thread::scope(|s| {
        s.spawn(|| {
            assert!(current_context().is_null(), "a fresh thread has no context");
            all_default_streams(&ctx, &k, std::ptr::null_mut());
            assert!(current_context().is_null());
        });
    });
}

#[test]
fn default_streams_work_with_another_context_current() {
    let _turn = legacy_turn();
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let other = RawContext::create(ctx.device());
    assert_ne!(other.raw(), ctx.raw());
    std::thread::scope(|s| {
        s.spawn(|| {
            set_current_context(Some(&other));
            all_default_streams(&ctx, &k, other.raw());
            assert_eq!(current_context(), other.raw());
            set_current_context(None);
        });
    });
}

/// Operations on explicit handles, on a thread whose current context is `expected`.
fn explicit_ops(ctx: &Context, k: &Kernels<'_>, expected: sys::CUcontext) {
    let here = || assert_eq!(current_context(), expected, "current context changed");
    let (a, b) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    here();
    let buf = DeviceBuffer::new(ctx, 1);
    let out = DeviceBuffer::new(ctx, 2);
    let ev = ctx.new_event(EventOptions::new()).unwrap();
    here();

    let w = Window::start(SPIN);
    k.store_after_spin(&a, buf.ptr(), 21, SPIN);
    let done = a.query().unwrap();
    here();
    w.assert_pending(!done, "explicit query");
    a.record(&ev).unwrap();
    here();
    b.wait_event(&ev).unwrap();
    here();
    k.copy_u32(&b, out.at(0), buf.ptr());
    let flag = Arc::new(AtomicBool::new(false));
    let f = flag.clone();
    b.launch_host_func(move || f.store(true, Ordering::SeqCst))
        .unwrap();
    here();
    b.synchronize().unwrap();
    here();
    assert_eq!(out.get(0), 21);
    assert!(flag.load(Ordering::SeqCst));

    k.store_after_spin(&a, buf.ptr(), 22, SPIN);
    b.wait_stream(&a).unwrap();
    here();
    k.copy_u32(&b, out.at(1), buf.ptr());
    let e2 = b.record_event().unwrap();
    here();
    e2.synchronize().unwrap();
    assert_eq!(out.get(1), 22);
    assert!(ev.query().unwrap());
    let _ = (a.id().unwrap(), a.flags().unwrap(), a.priority().unwrap());
    assert_eq!(a.device().unwrap(), ctx.device());
    here();
}

#[test]
fn explicit_handles_need_no_current_context() {
    let Some(ctx) = gpu() else { return };
    let k = Kernels::load(&ctx);
    let other = RawContext::create(ctx.device());
    std::thread::scope(|s| {
        s.spawn(|| {
            assert!(current_context().is_null());
            explicit_ops(&ctx, &k, std::ptr::null_mut());
        });
    });
    std::thread::scope(|s| {
        s.spawn(|| {
            set_current_context(Some(&other));
            explicit_ops(&ctx, &k, other.raw());
            set_current_context(None);
        });
    });
}

#[test]
fn two_contexts_on_one_gpu() {
    let Some(ctx) = gpu() else { return };
    // Declared first: dropped last, after everything of it.
    let other = RawContext::create(ctx.device());
    let k = Kernels::load(&ctx);
    let ko = Kernels::load(&other);
    let buf = DeviceBuffer::new(&ctx, 2);
    let buf_o = DeviceBuffer::new(&other, 2);
    let a = ctx.new_stream().unwrap();
    let raw_o = raw_stream_create(&other, NON_BLOCKING);
    {
        // SAFETY: `raw_o` lives until destroyed at the end, after this block.
        let b = unsafe { Stream::borrow_raw(raw_o, &other) }.unwrap();
        assert_eq!(b.context_raw(), other.raw());
        assert_eq!(b.device().unwrap(), ctx.device());

        // The crate checks that event and stream share a context before the driver does.
        let ev_a = Event::new(&ctx, EventOptions::new()).unwrap();
        let r = b.record(&ev_a);
        assert!(matches!(r, Err(Error::ContextMismatch { .. })), "{r:?}");
        let ev_b = b.record_event().unwrap();
        assert_eq!(ev_b.context_raw(), other.raw());
        let r = a.record(&ev_b);
        assert!(matches!(r, Err(Error::ContextMismatch { .. })), "{r:?}");
        let r = ctx.legacy_stream().record(&ev_b);
        assert!(matches!(r, Err(Error::ContextMismatch { .. })), "{r:?}");

        // Waiting on an event of another context works and orders the work.
        let a_done = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(AtomicBool::new(false));
        let w = Window::start(SPIN);
        k.store_after_spin(&a, buf.at(0), 7, SPIN);
        {
            let a_done = a_done.clone();
            a.launch_host_func(move || a_done.store(true, Ordering::SeqCst))
                .unwrap();
        }
        let ev_a2 = a.record_event().unwrap();
        b.wait_event(&ev_a2).unwrap();
        {
            let (a_done, seen) = (a_done.clone(), seen.clone());
            b.launch_host_func(move || seen.store(a_done.load(Ordering::SeqCst), Ordering::SeqCst))
                .unwrap();
        }
        ko.store(b, buf_o.at(0), 9);
        let b_done = b.query().unwrap();
        w.assert_pending(!b_done, "a stream waiting on another context's event");
        let ev_b2 = b.record_event().unwrap();
        ev_b2.synchronize().unwrap();
        assert!(seen.load(Ordering::SeqCst), "b ran before a's work");
        // `a` was not synchronised: its store is done because `b` waited for it.
        assert_eq!(buf.get(0), 7);
        assert_eq!(buf_o.get(0), 9);

        // The other direction, with wait_stream (its temporary event for a non-primary context).
        let b_flag = Arc::new(AtomicBool::new(false));
        let seen2 = Arc::new(AtomicBool::new(false));
        ko.store_after_spin(b, buf_o.at(1), 5, SPIN);
        {
            let b_flag = b_flag.clone();
            b.launch_host_func(move || b_flag.store(true, Ordering::SeqCst))
                .unwrap();
        }
        a.wait_stream(&b).unwrap();
        {
            let (b_flag, seen2) = (b_flag.clone(), seen2.clone());
            a.launch_host_func(move || {
                seen2.store(b_flag.load(Ordering::SeqCst), Ordering::SeqCst)
            })
            .unwrap();
        }
        a.synchronize().unwrap();
        assert!(seen2.load(Ordering::SeqCst), "a ran before b's work");
        assert_eq!(buf_o.get(1), 5);

        // And b after a with wait_stream (the cached event of the primary context).
        k.store_after_spin(&a, buf.at(1), 8, SPIN);
        b.wait_stream(&a).unwrap();
        let ev_b3 = b.record_event().unwrap();
        ev_b3.synchronize().unwrap();
        assert_eq!(buf.get(1), 8);
        b.synchronize().unwrap();
        a.synchronize().unwrap();
        // Events of `other` drop here, before it is destroyed.
    }
    // SAFETY: created above; no view of it is left.
    unsafe { raw_stream_destroy(raw_o) };
}
