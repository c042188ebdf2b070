//! Fault cases of graph memory nodes (`GraphBuffer`, used on a fork of the capture and freed in
//! it, the graph replayed) and of borrowed memory (`BorrowedBuffer` on an owned and on a
//! borrowed owner stream: the first use waits for the owner, the end of the borrow makes the
//! owner wait).
//!
//! The owner of the borrowed memory is a `DeviceBuffer` of this crate, freed when the operation
//! returns. After an error the borrow's uses are not ordered before that free (see
//! `BorrowedBuffer::release`: "synchronise before the owner reuses the memory"; and the owner's
//! free is on the context's service stream or its own stream, not necessarily the borrow's
//! owner stream), so the operations synchronise the context then, as the caller of the `unsafe`
//! `BorrowedBuffer::from_raw` must. (Without it the race detector reports each such free.)

use cuda_stream::{BorrowedBuffer, CaptureMode, DeviceBuffer, GraphBuffer, Result, Stream};

use crate::harness::capture::then_graph_frees;
use crate::harness::fixture::{Op, op_frees};
use crate::harness::swallowed::{SWALLOW_FREE_DROP, SWALLOW_GRAPH_FREES};

pub(crate) fn ops() -> Vec<Op> {
    vec![
        op_frees(
            "GraphBuffer::zeroed + fill on a fork + write + copy_from + free in a capture; \
             replayed",
            SWALLOW_GRAPH_FREES,
            |fx| {
                then_graph_frees(|| {
                    let mut s = fx.pool.acquire()?;
                    let out = DeviceBuffer::<u32>::zeroed(&fx.ctx, &fx.other, 8)?;
                    let graph = s.capture(CaptureMode::ThreadLocal, |cap| {
                        let mut scratch = GraphBuffer::<u32>::zeroed(&fx.ctx, cap, 8)?;
                        cap.scope(|sc| {
                            let f = sc.fork()?;
                            scratch.fill(&f, 4)
                        })?;
                        let _ = scratch.write();
                        out.copy_from(&cap, &scratch)?;
                        scratch.free()
                    })?;
                    let exec = graph.instantiate()?;
                    drop(graph);
                    exec.launch(&s)?;
                    assert_eq!(out.to_vec(&s)?, [4; 8]);
                    Ok(())
                })
            },
        )
        // The capture's host wait for `out`'s zeroing polls its event until it completes.
        .varying(&["cuEventQuery"]),
        op_frees(
            "BorrowedBuffer::from_raw (owned owner stream) + copy_from + release",
            SWALLOW_FREE_DROP,
            |fx| {
                let owned = DeviceBuffer::<u8>::zeroed(&fx.ctx, &fx.owned, 16)?;
                let out = DeviceBuffer::<u8>::alloc_on(&fx.ctx, &fx.other, 16)?;
                synchronized_on_error(&fx.ctx, || {
                    let view = cuda_stream::AsStream::as_stream(&fx.owned);
                    // SAFETY: `owned` holds 16 bytes for the whole borrow, used on `fx.owned`.
                    let x = unsafe {
                        BorrowedBuffer::<u8>::from_raw(
                            &fx.ctx,
                            owned.device_ptr(),
                            16,
                            view,
                            &owned,
                        )
                    }?;
                    out.copy_from(&fx.other, &x)?;
                    x.release()?;
                    assert_eq!(out.to_vec(&fx.other)?, [0; 16]);
                    Ok(())
                })
            },
        ),
        op_frees(
            "BorrowedBuffer::from_raw (borrowed owner stream) + fill + release",
            SWALLOW_FREE_DROP,
            |fx| {
                let raw = fx.borrowed_raw();
                // SAFETY: the fixture's stream lives until `Fixture::finish`.
                let owner = unsafe { Stream::borrow_raw(raw, fx) }?;
                let owned = DeviceBuffer::<u16>::zeroed(&fx.ctx, &owner, 8)?;
                synchronized_on_error(&fx.ctx, || {
                    // SAFETY: as above, with `owned` used on the borrowed stream.
                    let x = unsafe {
                        BorrowedBuffer::<u16>::from_raw(
                            &fx.ctx,
                            owned.device_ptr(),
                            8,
                            owner,
                            &owned,
                        )
                    }?;
                    x.fill(&fx.owned, 3)?;
                    x.release()?;
                    assert_eq!(owned.to_vec(&owner)?, [3; 8]);
                    Ok(())
                })
            },
        ),
    ]
}

/// Runs `f`; after an error, waits for the context's work (ignoring a failure of that wait too)
/// before the owner of the borrowed memory is freed, as `BorrowedBuffer::release` asks.
fn synchronized_on_error(ctx: &cuda_stream::Context, f: impl FnOnce() -> Result<()>) -> Result<()> {
    let r = f();
    if r.is_err() {
        let _ = ctx.synchronize();
    }
    r
}
