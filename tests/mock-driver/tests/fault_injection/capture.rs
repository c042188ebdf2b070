//! Fault cases of capture: kernels, memsets and copies on forks, host functions, captured and
//! external events, in each capture mode, and the capture status from inside.

use std::sync::Arc;

use cuda_stream::{
    CaptureMode, CaptureStatus, DeviceBuffer, EventOptions, LaunchConfig, kernel_args,
};

use crate::harness::capture::{one_host_fn, with_probes};
use crate::harness::fixture::{Op, op, op_frees};
use crate::harness::swallowed::SWALLOW_GRAPH;

/// Captures that succeed, replayed.
pub(crate) fn ops() -> Vec<Op> {
    vec![
        op_frees(
            "capture kernels and memsets on two forks and a memcpy; replay twice",
            SWALLOW_GRAPH,
            |fx| {
                let mut s = fx.pool.acquire()?;
                let scale = fx.module.function("scale")?;
                // A buffer of the op's own: its tracker's events go with it, whichever call
                // fails (a long-lived buffer keeps the event marking a use that a failure left
                // pending).
                let bytes = DeviceBuffer::<u8>::zeroed(&fx.ctx, &s, 64)?;
                let p = bytes.device_ptr();
                let graph = s.capture(CaptureMode::ThreadLocal, |cap| {
                    cap.scope(|sc| {
                        let (a, b) = (sc.fork()?, sc.fork()?);
                        let config = LaunchConfig::new(1, 32);
                        // SAFETY: every range lies in the op's 64-byte buffer, which outlives
                        // the graph (dropped after it, its free ordered after the replays on `s`); `scale` takes a pointer and a u32 (the mock runs no
                        // code for it).
                        unsafe {
                            cuda_stream::memset_d32_async(&a, p, 0x0101_0101, 4)?;
                            scale.launch(&b, config, &kernel_args![p + 32, 8u32])?;
                            cuda_stream::memset_d8_async(&b, p + 16, 2, 16)?;
                        }
                        Ok(())
                    })?;
                    // SAFETY: as above.
                    unsafe { cuda_stream::memcpy_dtod_async(&cap, p + 32, p, 16) }
                })?;
                assert_eq!(graph.node_count()?, 4);
                bytes.fill(&s, 0)?;
                let exec = graph.instantiate()?;
                exec.launch(&s)?;
                exec.launch(&s)?;
                let got = bytes.to_vec(&s)?;
                assert_eq!(got[..16], [1; 16]);
                assert_eq!(got[16..32], [2; 16]);
                assert_eq!(got[32..48], [1; 16], "the copy ran after both forks");
                // The graph holds nothing of the buffer (its nodes use a raw address): the free
                // is made here, and reports its error.
                drop((exec, graph));
                bytes.free()
            },
        ),
        op(
            "capture (thread-local): host function, node_count, instantiate, launch twice",
            SWALLOW_GRAPH,
            |fx| {
                with_probes(|p| {
                    let mut s = fx.pool.acquire()?;
                    let graph = one_host_fn(&mut s, p)?;
                    assert_eq!(graph.node_count()?, 1);
                    let exec = graph.instantiate()?;
                    exec.launch(&s)?;
                    exec.launch(&s)?;
                    s.synchronize()?;
                    assert_eq!(p.ran(), 2);
                    Ok(())
                })
            },
        ),
        op(
            "capture (global) on an owned stream: captured events, scope forks, wait_stream",
            SWALLOW_GRAPH,
            |fx| {
                with_probes(|p| {
                    let mut s = fx.ctx.new_stream()?;
                    let graph = s.capture(CaptureMode::Global, |cap| {
                        let start = cap.record_event()?;
                        cap.scope(|sc| {
                            let (a, b) = (sc.fork()?, sc.fork()?);
                            assert_ne!(a, b);
                            a.launch_host_func(p.host_fn())?;
                            b.wait_captured(start)?;
                            b.launch_host_func(p.host_fn())?;
                            b.wait_stream(a)?;
                            Ok(())
                        })?;
                        cap.launch_host_func(p.host_fn())
                    })?;
                    assert_eq!(graph.node_count()?, 3);
                    let exec = graph.instantiate()?;
                    drop(graph);
                    exec.launch(&s)?;
                    s.synchronize()?;
                    assert_eq!(p.ran(), 3);
                    Ok(())
                })
            },
        ),
        op(
            "capture (relaxed): external event wait and record nodes",
            SWALLOW_GRAPH,
            |fx| {
                with_probes(|p| {
                    let mut s = fx.pool.acquire()?;
                    let ready = Arc::new(fx.owned.record_event()?);
                    let done = Arc::new(fx.ctx.new_event(EventOptions::new())?);
                    let graph = s.capture(CaptureMode::Relaxed, |cap| {
                        cap.wait_event(&ready)?;
                        cap.launch_host_func(p.host_fn())?;
                        cap.record_external(&done)
                    })?;
                    assert_eq!(graph.node_count()?, 3);
                    let exec = graph.instantiate()?;
                    drop(graph);
                    exec.launch(&s)?;
                    s.synchronize()?;
                    assert!(done.query()?, "the replay recorded the event");
                    assert_eq!(p.ran(), 1);
                    Ok(())
                })
            },
        ),
        op(
            "CaptureStream::status and capture_status inside a capture",
            SWALLOW_GRAPH,
            |fx| {
                let mut s = fx.pool.acquire()?;
                let graph = s.capture(CaptureMode::ThreadLocal, |cap| {
                    let id = cap.capture_id();
                    assert_eq!(cap.status()?, CaptureStatus::Active { id });
                    Ok(())
                })?;
                assert_eq!(graph.node_count()?, 0);
                assert_eq!(s.capture_status()?, CaptureStatus::None);
                Ok(())
            },
        ),
    ]
}
