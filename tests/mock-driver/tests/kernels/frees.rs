//! Freeing and unloading: a drop waits for the work that still uses the buffer or module, and
//! frees queued by host functions are made later, on an ordinary thread, after that work.

use std::sync::mpsc;
use std::time::Duration;

use cuda_stream::{
    Context, DeviceBuffer, Error, LaunchConfig, Module, deferred_failed, deferred_pending,
    drain_deferred,
};

use super::{PTX, SUCCESS, assert_clean, isolated, mock};

#[test]
fn freeing_and_unloading_wait_for_the_work_that_uses_them() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let s = ctx.new_stream().unwrap();
        let (open_tx, open_rx) = mpsc::channel::<()>();

        // Work held back by a host function that waits for the test: a memset into `buf` and a
        // kernel of `module` are queued behind it.
        let buf = DeviceBuffer::<u32>::alloc(&ctx, 16).unwrap();
        let module = Module::from_ptx(&ctx, PTX).unwrap();
        let nothing = module.function("nothing").unwrap();
        s.launch_host_func(move || {
            let _ = open_rx.recv();
        })
        .unwrap();
        buf.fill(&s, 7).unwrap();
        // SAFETY: no parameters.
        unsafe { nothing.launch(&s, LaunchConfig::new(1, 1), &[]) }.unwrap();
        assert!(!s.query().unwrap());

        // Dropping them blocks until the work has run, then frees: no use after free.
        let (dropped_tx, dropped_rx) = mpsc::channel();
        std::thread::scope(|scope| {
            scope.spawn(move || {
                drop(buf);
                drop(module);
                dropped_tx.send(()).unwrap();
            });
            assert!(
                dropped_rx.recv_timeout(Duration::from_millis(200)).is_err(),
                "the drops returned while work using them was queued"
            );
            open_tx.send(()).unwrap();
            dropped_rx.recv().unwrap();
        });
        assert_clean(m);

        // The mock does catch a free that does not wait: a raw `cuMemFree` under queued work.
        let (open_tx, open_rx) = mpsc::channel::<()>();
        let buf = DeviceBuffer::<u32>::alloc(&ctx, 16).unwrap();
        s.launch_host_func(move || {
            let _ = open_rx.recv();
        })
        .unwrap();
        buf.fill(&s, 7).unwrap();
        let (ptr, _) = buf.into_raw().expect("no graph holds it");
        {
            let _bound = ctx.bind().unwrap();
            // SAFETY: the test's deliberate use after free, which the mock detects.
            assert_eq!(unsafe { cuda_sys::cuMemFree(ptr) }, SUCCESS);
        }
        open_tx.send(()).unwrap();
        s.synchronize().unwrap();
        assert_eq!(m.bad_uses(), 1, "the queued memset found its memory freed");
    });
}

/// No CUDA call inside a host function: a module and buffers whose last owners are dropped (or
/// closed) there, together with the last clone of their context, are unloaded and freed later on
/// an ordinary thread, after their context's work and before the context's release.
#[test]
fn modules_and_buffers_dropped_inside_a_host_function_are_freed_later() {
    let (_lock, m) = mock();
    isolated(|| {
        let (failed, frees) = (deferred_failed(), m.calls("cuMemFree"));
        // Retains that outlive tests (the fork pools of `scope`) are not this test's.
        let retains = m.live_primary_retains();
        let ctx = Context::primary(0).unwrap();
        let (module, closed, buf, freed) = {
            let s0 = ctx.new_stream().unwrap();
            let buf = DeviceBuffer::<u32>::zeroed(&ctx, &s0, 16).unwrap();
            s0.synchronize().unwrap();
            (
                Module::from_ptx(&ctx, PTX).unwrap(),
                Module::from_ptx(&ctx, PTX).unwrap(),
                buf,
                DeviceBuffer::<u8>::alloc(&ctx, 8).unwrap(),
            )
        };
        assert_eq!((m.live_modules(), m.live_allocations()), (2, 2));
        // The host function runs on a stream of another context, and holds the last owners of
        // everything of context 0, the context included.
        let other = Context::primary(1).unwrap();
        let s = other.new_stream().unwrap();
        let (gate_tx, gate_rx) = mpsc::channel::<()>();
        s.launch_host_func(move || {
            let _ = gate_rx.recv();
        })
        .unwrap();
        let (answers_tx, answers_rx) = mpsc::channel();
        let last_ctx = ctx.clone();
        s.launch_host_func(move || {
            drop(module);
            drop(buf);
            let answers = (closed.close(), freed.free());
            drop(last_ctx);
            answers_tx.send(answers).unwrap();
        })
        .unwrap();
        drop(ctx);
        drop(gate_tx);
        let (closed, freed) = answers_rx.recv().unwrap();
        assert!(
            matches!(
                closed,
                Err(Error::InHostFunction {
                    call: "cuModuleUnload"
                })
            ),
            "{closed:?}"
        );
        assert!(
            matches!(freed, Err(Error::InHostFunction { call: "cuMemFree" })),
            "{freed:?}"
        );
        assert_eq!(
            m.host_fn_api_calls(),
            0,
            "no driver call from the host function"
        );
        // Two unloads, two frees and the release of context 0; nothing destroyed yet.
        assert_eq!(deferred_pending(), 5);
        assert_eq!((m.live_modules(), m.live_allocations()), (2, 2));
        assert_eq!(m.calls("cuMemFree"), frees);
        assert_eq!(m.live_primary_retains(), retains + 2);

        // Drained in order: the unloads and frees (each after context 0's work) before the
        // release, so nothing is orphaned.
        assert_eq!(drain_deferred(), 5);
        assert_eq!(deferred_pending(), 0);
        assert_eq!(deferred_failed(), failed);
        assert_eq!((m.live_modules(), m.live_allocations()), (0, 0));
        assert_eq!(m.calls("cuMemFree"), frees + 2);
        assert_eq!(m.live_primary_retains(), retains + 1);
        assert_eq!(m.host_fn_api_calls(), 0);
        assert_clean(m);
    });
}

/// A free queued by a host function waits, when drained, for the context's work still using the
/// memory (no use after free), like a drop on an ordinary thread.
#[test]
fn a_deferred_free_waits_for_the_work_still_using_the_buffer() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let s = ctx.new_stream().unwrap();
        let t = ctx.new_stream().unwrap();
        let buf = DeviceBuffer::<u32>::alloc(&ctx, 16).unwrap();
        let ptr = buf.device_ptr();
        // The host function drops the buffer: its free is queued.
        let (dropped_tx, dropped_rx) = mpsc::channel();
        s.launch_host_func(move || {
            drop(buf);
            dropped_tx.send(()).unwrap();
        })
        .unwrap();
        dropped_rx.recv().unwrap();
        assert_eq!(deferred_pending(), 1);
        assert_eq!(m.live_allocations(), 1);
        // Then `t` holds back a memset into the memory, which is still allocated.
        let (open_tx, open_rx) = mpsc::channel::<()>();
        t.launch_host_func(move || {
            let _ = open_rx.recv();
        })
        .unwrap();
        // SAFETY: the allocation lives until the queued free runs, which waits for this memset.
        unsafe { cuda_stream::memset_d32_async(&t, ptr, 7, 16) }.unwrap();
        // The drain waits for the context's work: it returns only after `t` is let go.
        std::thread::scope(|scope| {
            let drained = scope.spawn(drain_deferred);
            std::thread::sleep(Duration::from_millis(100));
            assert!(
                !drained.is_finished(),
                "the free did not wait for the queued memset"
            );
            open_tx.send(()).unwrap();
            assert_eq!(drained.join().unwrap(), 1);
        });
        assert_eq!(m.live_allocations(), 0);
        assert_eq!(m.host_fn_api_calls(), 0);
        assert_clean(m);
    });
}
