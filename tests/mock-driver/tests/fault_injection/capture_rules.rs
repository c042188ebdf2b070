//! Fault cases of the capture rules: joining a capture begun by raw calls (`in_capture`), what a
//! capturing stream refuses, a closure that fails or panics, nested and legacy-stream captures,
//! events of another capture, a launch on another device, the capture-mode guards.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use cuda_stream::ffi::CUresult;
use cuda_stream::{AsStream, CaptureMode, CaptureStatus, Error, Stream, exchange_capture_mode};

use crate::harness::capture::{one_host_fn, raw_begin, raw_end, with_probes};
use crate::harness::fixture::{Op, op};
use crate::harness::swallowed::{SWALLOW_AFTER_CLOSURE_ERROR, SWALLOW_GRAPH, SWALLOW_SWEEP};
use crate::harness::{DropCount, SUCCESS, block_on};

/// Captures begun elsewhere, refusals, and captures ended by their closure's failure.
pub(crate) fn ops() -> Vec<Op> {
    vec![
        op(
            "Stream::in_capture on a capture begun by raw calls",
            SWALLOW_SWEEP,
            |fx| {
                with_probes(|p| {
                    let raw = fx.borrowed_raw();
                    raw_begin(raw)?;
                    let inside = (|| {
                        // SAFETY: the fixture's stream lives until `Fixture::finish`.
                        let view = unsafe { Stream::borrow_raw(raw, fx) }?;
                        assert!(matches!(
                            view.capture_status()?,
                            CaptureStatus::Active { .. }
                        ));
                        view.in_capture(|cap| {
                            cap.launch_host_func(p.host_fn())?;
                            let e = cap.record_event()?;
                            cap.scope(|sc| {
                                let f = sc.fork()?;
                                f.wait_captured(e)?;
                                f.launch_host_func(p.host_fn())
                            })
                        })
                    })();
                    let ended = raw_end(raw, SUCCESS);
                    inside.and(ended)
                })
            },
        ),
        op(
            "Stream::in_capture on a stream that is not capturing is refused",
            SWALLOW_GRAPH,
            |fx| match fx.owned.in_capture(|_| Ok(())) {
                Err(Error::NotCapturing {
                    status: CaptureStatus::None,
                }) => Ok(()),
                other => other,
            },
        ),
        op(
            "a run-once host function is refused on a capturing stream",
            SWALLOW_GRAPH,
            |fx| {
                let raw = fx.borrowed_raw();
                raw_begin(raw)?;
                let dropped = Arc::new(AtomicUsize::new(0));
                let d = DropCount(dropped.clone());
                let refused = (|| {
                    // SAFETY: the fixture's stream lives until `Fixture::finish`.
                    let view = unsafe { Stream::borrow_raw(raw, fx) }?;
                    match view.launch_host_func(move || drop(d)) {
                        Err(Error::Refused {
                            call: "cuLaunchHostFunc",
                            ..
                        }) => {}
                        Err(e) => return Err(e),
                        Ok(()) => panic!("a run-once host function entered a capture"),
                    }
                    match block_on(view.completed()) {
                        Err(Error::Refused { .. }) => Ok(()),
                        other => other,
                    }
                })();
                assert_eq!(dropped.load(Ordering::SeqCst), 1, "dropped once, at once");
                let ended = raw_end(raw, SUCCESS);
                refused.and(ended)
            },
        ),
        op(
            "add_callback is refused on a capturing stream, which invalidates it",
            SWALLOW_GRAPH,
            |fx| {
                let raw = fx.borrowed_raw();
                raw_begin(raw)?;
                let refused = (|| {
                    // SAFETY: the fixture's stream lives until `Fixture::finish`.
                    let view = unsafe { Stream::borrow_raw(raw, fx) }?;
                    match view.add_callback(|_| ()) {
                        Err(e)
                            if e.driver_code()
                                == Some(CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) =>
                        {
                            assert_eq!(e.call(), Some("cuStreamAddCallback"));
                            assert!(matches!(
                                view.capture_status()?,
                                CaptureStatus::Invalidated { .. }
                            ));
                            Ok(true)
                        }
                        Err(e) => Err(e),
                        Ok(()) => panic!("a callback entered a capture"),
                    }
                })();
                match refused {
                    Ok(_) => raw_end(raw, CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED),
                    Err(e) => {
                        let _ = raw_end(raw, SUCCESS);
                        Err(e)
                    }
                }
            },
        ),
        op(
            "capture: the closure's error ends it, the stream is usable",
            SWALLOW_AFTER_CLOSURE_ERROR,
            |fx| {
                with_probes(|p| {
                    let mut s = fx.pool.acquire()?;
                    let r = s.capture(CaptureMode::ThreadLocal, |cap| {
                        cap.launch_host_func(p.host_fn())?;
                        Err(Error::NotCapturing {
                            status: CaptureStatus::None,
                        })
                    });
                    match r {
                        Err(Error::NotCapturing { .. }) => {}
                        Err(e) => return Err(e),
                        Ok(_) => panic!("a failed closure gave a graph"),
                    }
                    assert_eq!(s.capture_status()?, CaptureStatus::None);
                    s.synchronize()?;
                    assert_eq!(p.ran(), 0);
                    Ok(())
                })
            },
        ),
        op(
            "capture: a panic in the closure ends it, the stream is usable",
            SWALLOW_AFTER_CLOSURE_ERROR,
            |fx| {
                with_probes(|p| {
                    let mut s = fx.pool.acquire()?;
                    let mut failed = None;
                    let r = catch_unwind(AssertUnwindSafe(|| {
                        s.capture(CaptureMode::ThreadLocal, |cap| {
                            if let Err(e) = cap.launch_host_func(p.host_fn()) {
                                failed = Some(e);
                            }
                            panic!("in the capture")
                        })
                    }));
                    match r {
                        // The capture never began: the closure did not run.
                        Ok(Err(e)) => return Err(e),
                        Ok(Ok(_)) => panic!("a panicking closure gave a graph"),
                        Err(_) => {}
                    }
                    if let Some(e) = failed {
                        return Err(e);
                    }
                    assert_eq!(s.capture_status()?, CaptureStatus::None);
                    s.synchronize()?;
                    Ok(())
                })
            },
        ),
        op(
            "a nested capture on one stream is refused",
            SWALLOW_GRAPH,
            |fx| {
                let s = fx.pool.acquire()?;
                let view = s.as_stream();
                // SAFETY: no other thread uses the stream; the inner call is the misuse tested.
                let outer = unsafe {
                    view.capture(CaptureMode::ThreadLocal, |_cap| {
                        // SAFETY: as above.
                        match view.capture(CaptureMode::ThreadLocal, |_| Ok(())) {
                            Err(e)
                                if e.driver_code() == Some(CUresult::CUDA_ERROR_ILLEGAL_STATE) =>
                            {
                                assert_eq!(e.call(), Some("cuStreamBeginCapture"));
                                Ok(())
                            }
                            Err(e) => Err(e),
                            Ok(_) => panic!("a nested capture began"),
                        }
                    })
                };
                outer.map(drop)?;
                s.query().map(drop)
            },
        ),
        op(
            "capturing the legacy stream is refused by the driver",
            SWALLOW_GRAPH,
            |fx| {
                // SAFETY: nothing else uses the legacy stream of this context meanwhile.
                let r = unsafe {
                    fx.ctx
                        .legacy_stream()
                        .capture(CaptureMode::ThreadLocal, |_| Ok(()))
                };
                match r {
                    Err(e)
                        if e.driver_code()
                            == Some(CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) =>
                    {
                        assert_eq!(e.call(), Some("cuStreamBeginCapture"));
                        fx.ctx.legacy_stream().query().map(drop)
                    }
                    other => other.map(drop),
                }
            },
        ),
        op(
            "a captured event of another capture is refused",
            SWALLOW_GRAPH,
            |fx| {
                let (mut a, mut b) = (fx.pool.acquire()?, fx.pool.acquire()?);
                let graph = a.capture(CaptureMode::ThreadLocal, |outer| {
                    let e = outer.record_event()?;
                    let inner = b.capture(CaptureMode::ThreadLocal, |inner| {
                        match inner.wait_captured(e) {
                            Err(Error::Refused { .. }) => Ok(()),
                            other => other,
                        }
                    })?;
                    assert_eq!(inner.node_count()?, 0);
                    Ok(())
                })?;
                assert_eq!(graph.node_count()?, 0);
                Ok(())
            },
        ),
        op(
            "GraphExec::launch on a stream of another device is refused",
            SWALLOW_GRAPH,
            |fx| {
                with_probes(|p| {
                    let mut s = fx.pool.acquire()?;
                    let exec = one_host_fn(&mut s, p)?.instantiate()?;
                    let other = fx.ctx1.new_stream()?;
                    match exec.launch(&other) {
                        Err(Error::Refused {
                            call: "cuGraphLaunch",
                            ..
                        }) => {}
                        other => panic!("launched on another device: {other:?}"),
                    }
                    assert_eq!(p.ran(), 0);
                    Ok(())
                })
            },
        ),
        op("exchange_capture_mode guards", SWALLOW_GRAPH, |_| {
            let relaxed = exchange_capture_mode(CaptureMode::Relaxed)?;
            assert_eq!(relaxed.previous(), Some(CaptureMode::Global));
            let local = exchange_capture_mode(CaptureMode::ThreadLocal)?;
            assert_eq!(local.previous(), Some(CaptureMode::Relaxed));
            drop(local);
            drop(relaxed);
            Ok(())
        }),
    ]
}
