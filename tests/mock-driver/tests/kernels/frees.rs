//! Freeing and unloading: a drop never waits for the device for a buffer (its free is enqueued
//! behind the work recorded on it, or made once that work is done) and waits for the context's
//! work for a module; frees and unloads queued by host functions are made later, on an ordinary
//! thread, and never under work that uses the memory.

use std::sync::mpsc;
use std::time::Duration;

use cuda_mock_driver::MockDriver;
use cuda_stream::{
    Context, DeviceBuffer, Error, LaunchConfig, Module, deferred_failed, deferred_pending,
    drain_deferred, kernel_args, pending_frees, poll_pending_frees,
};

use super::{PTX, SUCCESS, assert_clean, gate, idle, isolated, mock};

/// A buffer filled on `device`'s stream and then written by a kernel (as `write()`, read from
/// another buffer as `read()`), both held back: dropping the buffers returns at once, they stay
/// allocated while the work is queued, and are freed after it: with pools (device 0) by a
/// `cuMemFreeAsync` enqueued behind the kernel, without (device 1) once the events recorded after
/// the uses have completed.
fn drops_return_at_once_and_free_after_the_work(m: &MockDriver, device: usize) {
    const N: usize = 16;
    let pools = device == 0;
    let ctx = Context::primary(device).unwrap();
    let s = ctx.new_stream().unwrap();
    let module = Module::from_ptx(&ctx, PTX).unwrap();
    let saxpy = module.function("saxpy").unwrap();
    let base = (m.live_allocations(), pending_frees());
    let x = DeviceBuffer::<f32>::from_host(&ctx, &s, &[2.0; N]).unwrap();
    let mut y = DeviceBuffer::<f32>::alloc(&ctx, N).unwrap();
    let held = gate(&s);
    y.fill(&s, 1.0).unwrap();
    let n = N as u32;
    // SAFETY: saxpy takes (u32, f32, pointer, pointer); `x` and `y` hold N floats, and the
    // launch records its uses of them, so their frees wait for it.
    unsafe {
        saxpy.launch(
            &s,
            LaunchConfig::for_elements(n, 64),
            &kernel_args![n, 3.0f32, x.read(), y.write()],
        )
    }
    .unwrap();
    let (async_frees, frees) = (m.calls("cuMemFreeAsync"), m.calls("cuMemFree"));
    drop((x, y));
    assert!(!s.query().unwrap(), "the work is still held back");
    assert_eq!(m.live_allocations(), base.0 + 2, "not freed under the work");
    if pools {
        assert_eq!(
            m.calls("cuMemFreeAsync"),
            async_frees + 2,
            "both frees enqueued"
        );
        assert_eq!(pending_frees(), base.1);
    } else {
        assert_eq!(m.calls("cuMemFree"), frees, "nothing freed yet");
        assert_eq!(
            pending_frees(),
            base.1 + 2,
            "both frees wait for their events"
        );
    }
    drop(held);
    s.synchronize().unwrap();
    if !pools {
        assert_eq!(poll_pending_frees(), base.1, "made once the work was done");
        assert_eq!(m.calls("cuMemFree"), frees + 2);
    }
    idle(m);
    assert_eq!(m.live_allocations(), base.0);
    drop(module);
    assert_clean(m);
}

#[test]
fn freeing_and_unloading_wait_for_the_work_that_uses_them() {
    let (_lock, m) = mock();
    isolated(|| {
        drops_return_at_once_and_free_after_the_work(m, 0);
        drops_return_at_once_and_free_after_the_work(m, 1);

        // A module's unload does wait for the context's work: a kernel of the module is queued.
        let ctx = Context::primary(0).unwrap();
        let s = ctx.new_stream().unwrap();
        let module = Module::from_ptx(&ctx, PTX).unwrap();
        let nothing = module.function("nothing").unwrap();
        let held = gate(&s);
        // SAFETY: no parameters.
        unsafe { nothing.launch(&s, LaunchConfig::new(1, 1), &[]) }.unwrap();
        let (dropped_tx, dropped_rx) = mpsc::channel();
        std::thread::scope(|scope| {
            let dropping = scope.spawn(move || {
                drop(module);
                dropped_tx.send(()).unwrap();
            });
            let early = dropped_rx.recv_timeout(Duration::from_millis(200)).is_ok();
            drop(held);
            dropping.join().unwrap();
            assert!(
                !early,
                "the unload returned while a kernel of the module was queued"
            );
        });
        assert!(s.query().unwrap());
        assert_clean(m);

        // The mock does catch a free that does not wait: a raw `cuMemFree` under queued work
        // (device 1, whose memory comes from `cuMemAlloc`).
        let ctx1 = Context::primary(1).unwrap();
        let s1 = ctx1.new_stream().unwrap();
        let buf = DeviceBuffer::<u32>::alloc(&ctx1, 16).unwrap();
        let (ptr, _) = buf.into_raw().expect("no graph holds it");
        let held = gate(&s1);
        // SAFETY: the test's deliberate use after free below, which the mock detects.
        unsafe { cuda_stream::memset_d32_async(&s1, ptr, 7, 16) }.unwrap();
        {
            let _bound = ctx1.bind().unwrap();
            // SAFETY: as above.
            assert_eq!(unsafe { cuda_stream_sys::cuMemFree(ptr) }, SUCCESS);
        }
        drop(held);
        s1.synchronize().unwrap();
        assert_eq!(m.bad_uses(), 1, "the queued memset found its memory freed");
        // And the race detector names the free and the memset it is not ordered after.
        let races = m.race_reports();
        assert_eq!(races.len(), 1, "{races:?}");
        assert!(races[0].starts_with("cuMemFree (free of"), "{races:?}");
        assert!(
            races[0].contains("is not ordered after cuMemsetD32Async"),
            "{races:?}"
        );
        m.clear_races();
    });
}

/// No CUDA call inside a host function: a module and buffers whose last owners are dropped (or
/// closed) there, together with the last clone of their context, are unloaded and freed later on
/// an ordinary thread (the buffers, of device 0, in stream order with `cuMemFreeAsync`), after
/// their context's work and before the context's release.
#[test]
fn modules_and_buffers_dropped_inside_a_host_function_are_freed_later() {
    let (_lock, m) = mock();
    isolated(|| {
        let (failed, frees) = (deferred_failed(), m.calls("cuMemFreeAsync"));
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
            matches!(
                freed,
                Err(Error::InHostFunction {
                    call: "cuMemFreeAsync"
                })
            ),
            "{freed:?}"
        );
        assert_eq!(
            m.host_fn_api_calls(),
            0,
            "no driver call from the host function"
        );
        // Two unloads and two frees; nothing destroyed yet. The queued frees hold context 0
        // (each allocation keeps a clone), so dropping `last_ctx` there released nothing: the
        // context is released by the drain, once the last queued free has let go of it.
        assert_eq!(deferred_pending(), 4);
        assert_eq!((m.live_modules(), m.live_allocations()), (2, 2));
        assert_eq!(m.calls("cuMemFreeAsync"), frees);
        assert_eq!(m.live_primary_retains(), retains + 2);

        // Drained in order: the unloads, the frees (in stream order after context 0's work)
        // and then the release of context 0 (its service stream first), so nothing is orphaned.
        assert_eq!(drain_deferred(), 4);
        assert_eq!(deferred_pending(), 0);
        assert_eq!(deferred_failed(), failed);
        idle(m);
        assert_eq!((m.live_modules(), m.live_allocations()), (0, 0));
        assert_eq!(m.calls("cuMemFreeAsync"), frees + 2);
        assert_eq!(m.live_primary_retains(), retains + 1);
        assert_eq!(m.host_fn_api_calls(), 0);
        assert_clean(m);
    });
}

/// A free queued by a host function does not wait for the device when it is drained: it is
/// ordered after the work recorded on the buffer (enqueued behind it with pools, made once its
/// events have completed without), so that work still finds the memory.
fn a_deferred_free_is_ordered_after_the_recorded_work(m: &MockDriver, device: usize) {
    let pools = device == 0;
    let free_call = if pools { "cuMemFreeAsync" } else { "cuMemFree" };
    let ctx = Context::primary(device).unwrap();
    let s = ctx.new_stream().unwrap();
    let t = ctx.new_stream().unwrap();
    let base = (m.live_allocations(), pending_frees());
    let buf = DeviceBuffer::<u32>::alloc(&ctx, 16).unwrap();
    // A host function on `s` is handed the buffer, drops it (the free is queued), then waits
    // for the test. The mock runs queued work in order, so a memset into the buffer on `t`,
    // recorded on it before it is handed over, is held back until the host function returns.
    let (buf_tx, buf_rx) = mpsc::channel::<DeviceBuffer<u32>>();
    let (dropped_tx, dropped_rx) = mpsc::channel();
    let (open_tx, open_rx) = mpsc::channel::<()>();
    s.launch_host_func(move || {
        drop(buf_rx.recv());
        dropped_tx.send(()).unwrap();
        let _ = open_rx.recv();
    })
    .unwrap();
    buf.fill(&t, 7).unwrap();
    buf_tx.send(buf).unwrap();
    dropped_rx.recv().unwrap();
    assert_eq!(deferred_pending(), 1);
    assert_eq!(m.live_allocations(), base.0 + 1);
    // The drain returns at once, with the memory still allocated under the held-back memset.
    let frees = m.calls(free_call);
    assert_eq!(drain_deferred(), 1);
    assert!(!t.query().unwrap(), "the memset is still held back");
    assert_eq!(
        m.live_allocations(),
        base.0 + 1,
        "not freed under the memset"
    );
    if pools {
        assert_eq!(m.calls("cuMemFreeAsync"), frees + 1, "enqueued behind it");
    } else {
        assert_eq!(m.calls("cuMemFree"), frees);
        assert_eq!(pending_frees(), base.1 + 1, "waits for the memset's event");
    }
    drop(open_tx);
    t.synchronize().unwrap();
    if !pools {
        assert_eq!(poll_pending_frees(), base.1);
    }
    idle(m);
    assert_eq!(m.calls(free_call), frees + 1);
    assert_eq!(m.live_allocations(), base.0);
    assert_eq!(m.host_fn_api_calls(), 0);
    assert_clean(m);
}

#[test]
fn a_deferred_free_waits_for_the_work_still_using_the_buffer() {
    let (_lock, m) = mock();
    isolated(|| {
        a_deferred_free_is_ordered_after_the_recorded_work(m, 0);
        a_deferred_free_is_ordered_after_the_recorded_work(m, 1);
    });
}
