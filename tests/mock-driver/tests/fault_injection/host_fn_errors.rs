//! Single checks of host functions that fail: a panic is reported on its own stream (and only in
//! its own context), never unwound into the driver; a refused host function is dropped once and
//! never run.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

use cuda_stream::{AsStream, Context, Error};

use crate::harness::{DropCount, FAULT, ZST_DROPS, ZstDrop, isolated, mock};

#[test]
fn a_panicking_host_function_is_reported_not_unwound() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let s = ctx.new_stream().unwrap();

        s.launch_host_func(|| panic!("boom")).unwrap();
        match s.synchronize() {
            Err(Error::HostFnPanicked { stream, message }) => {
                assert_eq!(message, "boom");
                assert_eq!(stream, s.raw() as usize);
            }
            other => panic!("expected HostFnPanicked, got {other:?}"),
        }
        s.synchronize().expect("a panic is reported once");

        // The same for a closure with captures (it travels boxed).
        let word = String::from("boom");
        s.launch_host_func(move || panic!("{word}")).unwrap();
        match s.synchronize() {
            Err(Error::HostFnPanicked { stream, message }) => {
                assert_eq!(message, "boom");
                assert_eq!(stream, s.raw() as usize);
            }
            other => panic!("expected HostFnPanicked, got {other:?}"),
        }
        s.synchronize().expect("a panic is reported once");

        // The driver's thread survived: a later host function runs.
        let (tx, rx) = mpsc::channel();
        s.launch_host_func(move || tx.send(7).unwrap()).unwrap();
        s.synchronize().unwrap();
        assert_eq!(rx.try_recv(), Ok(7));

        // A callback sees the stream's status: Ok.
        let (tx, rx) = mpsc::channel();
        s.add_callback(move |status| tx.send(status.is_ok()).unwrap())
            .unwrap();
        s.synchronize().unwrap();
        assert_eq!(rx.try_recv(), Ok(true));

        // A panicking callback is reported too.
        s.add_callback(|_| panic!("callback {}", 2)).unwrap();
        match s.synchronize() {
            Err(Error::HostFnPanicked { message, .. }) => assert_eq!(message, "callback 2"),
            other => panic!("expected HostFnPanicked, got {other:?}"),
        }

        // By query as well, and only on its own stream.
        let t = ctx.new_stream().unwrap();
        s.launch_host_func(|| panic!("again")).unwrap();
        ctx.synchronize().unwrap();
        assert!(t.query().unwrap());
        t.synchronize().unwrap();
        match s.query() {
            Err(Error::HostFnPanicked { message, .. }) => assert_eq!(message, "again"),
            other => panic!("expected HostFnPanicked, got {other:?}"),
        }
        assert!(s.query().unwrap());
        assert_eq!(m.host_fn_api_calls(), 0);
    });
}

#[test]
fn a_refused_host_function_is_dropped_once_and_never_run() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let s = ctx.new_stream().unwrap();
        let streams = [s.as_stream(), ctx.legacy_stream(), ctx.per_thread_stream()];
        let refusals = [("cuLaunchHostFunc", false), ("cuStreamAddCallback", true)];
        for stream in streams {
            for (symbol, callback) in refusals {
                m.reset();
                m.fail_always(symbol, FAULT);
                let (ran, dropped) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
                let (r, d) = (ran.clone(), DropCount(dropped.clone()));
                let err = if callback {
                    stream.add_callback(move |_| {
                        let _d = d;
                        r.fetch_add(1, Ordering::SeqCst);
                    })
                } else {
                    stream.launch_host_func(move || {
                        let _d = d;
                        r.fetch_add(1, Ordering::SeqCst);
                    })
                }
                .unwrap_err();
                assert_eq!(err.call(), Some(symbol), "{err:?}");
                assert_eq!(dropped.load(Ordering::SeqCst), 1, "dropped when refused");
                m.reset();
                stream.synchronize().unwrap();
                ctx.synchronize().unwrap();
                assert_eq!(
                    ran.load(Ordering::SeqCst),
                    0,
                    "a refused closure never runs"
                );
                assert_eq!(dropped.load(Ordering::SeqCst), 1, "and is dropped once");
            }
        }
        // A closure that captures nothing (no allocation carries it) is dropped once, too.
        static ZST_RAN: AtomicUsize = AtomicUsize::new(0);
        for stream in streams {
            m.reset();
            m.fail_always("cuLaunchHostFunc", FAULT);
            let before = ZST_DROPS.load(Ordering::SeqCst);
            let z = ZstDrop;
            let f = move || {
                let _z = z;
                ZST_RAN.fetch_add(1, Ordering::SeqCst);
            };
            assert_eq!(std::mem::size_of_val(&f), 0);
            let err = stream.launch_host_func(f).unwrap_err();
            assert_eq!(err.call(), Some("cuLaunchHostFunc"), "{err:?}");
            assert_eq!(ZST_DROPS.load(Ordering::SeqCst), before + 1);
            m.reset();
            ctx.synchronize().unwrap();
            assert_eq!(
                ZST_RAN.load(Ordering::SeqCst),
                0,
                "a refused closure never runs"
            );
            assert_eq!(ZST_DROPS.load(Ordering::SeqCst), before + 1);
        }
        // The same when binding the default stream's context fails, before the driver sees it.
        m.reset();
        m.fail_always("cuCtxPushCurrent", FAULT);
        let dropped = Arc::new(AtomicUsize::new(0));
        let d = DropCount(dropped.clone());
        let err = ctx
            .legacy_stream()
            .launch_host_func(move || drop(d))
            .unwrap_err();
        assert_eq!(err.call(), Some("cuCtxPushCurrent"));
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
        m.reset();
    });
}

/// A panic of a host function that captures nothing goes with its stream handle only (the
/// zero-sized fast path of `launch`), which names a default stream (0x1, 0x2, 0x0) in every
/// context: default streams must take the boxed path, which records the context, so that a panic
/// on device 0's legacy stream is not reported by device 1's.
#[test]
fn a_default_stream_panic_is_reported_in_its_own_context_only() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx0 = Context::primary(0).unwrap();
        let ctx1 = Context::primary(1).unwrap();
        ctx0.legacy_stream()
            .launch_host_func(|| panic!("device 0"))
            .unwrap();
        ctx0.synchronize().unwrap();
        let other = ctx1.legacy_stream().synchronize();
        let own = ctx0.legacy_stream().synchronize();
        assert!(other.is_ok(), "device 1's legacy stream reported {other:?}");
        assert!(
            matches!(&own, Err(Error::HostFnPanicked { message, .. }) if message == "device 0"),
            "{own:?}"
        );
        assert_eq!(m.host_fn_api_calls(), 0);
    });
}
