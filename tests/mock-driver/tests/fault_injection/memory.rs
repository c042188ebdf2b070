//! Fault cases of device memory: allocating, freeing, raw pointers, and buffers filled, copied or
//! tied inside a capture, which the graphs keep alive after their drop. (Memsets and copies on
//! each kind of stream: `stream_kinds.rs`.)

use std::sync::Arc;

use cuda_stream::ffi::CUresult;
use cuda_stream::{CaptureMode, CaptureStatus, DeviceBuffer, Error, Stream};

use crate::harness::SUCCESS;
use crate::harness::capture::{raw_begin, raw_end, then_graph_frees};
use crate::harness::fixture::{Op, op, op_frees};
use crate::harness::swallowed::{
    SWALLOW_DROP, SWALLOW_FREE_DROP, SWALLOW_GRAPH, SWALLOW_GRAPH_FREES,
};

/// Device buffers.
pub(crate) fn ops() -> Vec<Op> {
    vec![
        op_frees("DeviceBuffer::alloc + free", SWALLOW_DROP, |fx| {
            DeviceBuffer::<f64>::alloc(&fx.ctx, 3)?.free()
        }),
        op_frees("DeviceBuffer::alloc + drop", SWALLOW_FREE_DROP, |fx| {
            DeviceBuffer::<f64>::alloc(&fx.ctx, 3).map(drop)
        }),
        // On device 1, which has no memory pools: `from_raw` takes `cuMemAlloc` memory, and a
        // buffer without recorded uses hands it over with no driver call.
        op_frees(
            "DeviceBuffer::into_raw + from_raw + free (no pools)",
            SWALLOW_DROP,
            |fx| {
                let (ptr, len) = DeviceBuffer::<u8>::alloc(&fx.ctx1, 5)?
                    .into_raw()
                    .expect("no graph holds a new buffer, and it has no use to wait for");
                // SAFETY: handed over by `into_raw` just above.
                unsafe { DeviceBuffer::<u8>::from_raw(&fx.ctx1, ptr, len) }.free()
            },
        ),
    ]
}

/// Buffers in captures.
pub(crate) fn captured_ops() -> Vec<Op> {
    vec![
        op_frees(
            "DeviceBuffer::fill, copy_from, keep_alive_in and CaptureStream::keep_alive in a \
             capture; the buffers dropped, the graph replays them",
            SWALLOW_GRAPH_FREES,
            |fx| {
                then_graph_frees(|| {
                    let mut s = fx.pool.acquire()?;
                    let out = DeviceBuffer::<u32>::zeroed(&fx.ctx, &s, 8)?;
                    let tmp = DeviceBuffer::<u32>::alloc(&fx.ctx, 8)?;
                    let kept = DeviceBuffer::<u16>::alloc(&fx.ctx, 4)?;
                    let token = Arc::new(());
                    let graph = s.capture(CaptureMode::ThreadLocal, |cap| {
                        tmp.fill(&cap, 3)?;
                        out.copy_from(&cap, &tmp)?;
                        kept.keep_alive_in(&cap)?;
                        cap.keep_alive(token.clone())
                    })?;
                    drop((tmp, kept));
                    assert!(out.is_held_by_graphs());
                    let exec = graph.instantiate()?;
                    drop(graph);
                    exec.launch(&s)?;
                    assert_eq!(out.to_vec(&s)?, [3; 8]);
                    Ok(())
                })
            },
        ),
        op_frees(
            "DeviceBuffer::fill + copy_from refused, keep_alive_in tying, on a borrowed stream in \
             a capture begun by raw calls",
            SWALLOW_GRAPH_FREES,
            |fx| {
                then_graph_frees(|| {
                    let raw = fx.borrowed_raw();
                    let a = DeviceBuffer::<u8>::alloc(&fx.ctx, 16)?;
                    let b = DeviceBuffer::<u8>::alloc(&fx.ctx, 16)?;
                    raw_begin(raw)?;
                    let inside = (|| {
                        // SAFETY: the fixture's stream lives until `Fixture::finish`.
                        let view = unsafe { Stream::borrow_raw(raw, fx) }?;
                        // Its graphs are launched where no hook orders them: refused.
                        for r in [a.fill(&view, 7), b.copy_from(&view, &a)] {
                            match r {
                                Err(Error::Refused {
                                    call: "cuStreamGetCaptureInfo",
                                    ..
                                }) => {}
                                Err(e) => return Err(e),
                                Ok(()) => panic!("a buffer used in a capture begun elsewhere"),
                            }
                        }
                        assert!(!a.is_held_by_graphs() && !b.is_held_by_graphs());
                        a.keep_alive_in(&view)
                    })();
                    // Destroys the graph, which lets go of what it held; the buffers are
                    // dropped after the capture (an untied one dropped during a thread-local
                    // capture could not wait for its context's work, so would stay allocated).
                    let ended = raw_end(raw, SUCCESS);
                    drop((a, b));
                    inside.and(ended)
                })
            },
        ),
        op(
            "DeviceBuffer::fill in an invalidated capture is refused",
            SWALLOW_GRAPH,
            |fx| {
                let raw = fx.borrowed_raw();
                raw_begin(raw)?;
                let refused = (|| {
                    // SAFETY: the fixture's stream lives until `Fixture::finish`.
                    let view = unsafe { Stream::borrow_raw(raw, fx) }?;
                    if let Err(e) = view.add_callback(|_| ()) {
                        if e.driver_code() != Some(CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
                        {
                            return Err(e);
                        }
                    }
                    match fx.bytes.fill(&view, 1) {
                        Err(Error::NotCapturing {
                            status: CaptureStatus::Invalidated { .. },
                        }) => Ok(()),
                        Err(e) => Err(e),
                        Ok(()) => panic!("a fill entered an invalidated capture"),
                    }
                })();
                assert!(!fx.bytes.is_held_by_graphs(), "nothing tied");
                match refused {
                    Ok(()) => raw_end(raw, CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED),
                    Err(e) => {
                        let _ = raw_end(raw, SUCCESS);
                        Err(e)
                    }
                }
            },
        ),
    ]
}
