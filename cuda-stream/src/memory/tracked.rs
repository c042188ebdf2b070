//! Use tracking for work that touches buffers on several streams at once: each tracker waits
//! and records on its own stream, the trackers are locked in one global order, and the streams
//! are joined around the work with [`hand_over`]. Shared by the work across contexts
//! (`memory::across`: peer copies, kernels on a peer's buffers), graph replays holding buffers of
//! other contexts (`memory::buffer_ops`) and NCCL groups.

use crate::base::error::{Error, Result, check, driver_fn};
use crate::ffi;
use crate::memory::use_tracking::{Access, Uses};
use crate::stream::wait_event_cache::WAIT_EVENTS;

/// One tracker's use: what the work does to the buffer, and the stream (of the buffer's
/// context) whose position stands for the work.
#[derive(Clone, Copy)]
pub(crate) struct TrackedUse<'a> {
    pub(crate) uses: &'a Uses,
    pub(crate) access: Access,
    pub(crate) stream: ffi::CUstream,
    /// The stream the work is enqueued on when it is not `stream` (a stream of another context
    /// that waits for the conflicting uses itself: see [`Uses::around_from`]), else `None`.
    pub(crate) waiter: Option<ffi::CUstream>,
}

/// Runs `op` inside [`Uses::around`] of every entry of `list`, locked in the trackers' global
/// order (a tracker listed twice on one stream counts once, as a write if either is; on two
/// streams it is refused). `op` sets its flag once its work is enqueued: if an error comes
/// after that (a tracker could not mark its use), the work's streams are synchronised before
/// the error is returned, so that no unrecorded use is still running.
pub(crate) fn around_streams(
    list: &mut [TrackedUse<'_>],
    op: impl FnOnce(&mut bool) -> Result<()>,
) -> Result<()> {
    list.sort_unstable_by_key(|u| (u.uses.key(), u.stream as usize));
    // Dedup in place: entries of one tracker on one stream become one, a write if either is.
    let mut len = 0;
    for i in 0..list.len() {
        let u = list[i];
        if len > 0 && list[len - 1].uses.key() == u.uses.key() && list[len - 1].stream == u.stream {
            if u.access == Access::Write {
                list[len - 1].access = Access::Write;
            }
        } else {
            list[len] = u;
            len += 1;
        }
    }
    let list = &list[..len];
    if list.windows(2).any(|w| w[0].uses.key() == w[1].uses.key()) {
        return Err(Error::InvalidArgument {
            reason: "one buffer is used on two streams in one operation".into(),
        });
    }
    let mut enqueued = false;
    let mut op = Some(op);
    let out = nest(
        list,
        &mut |flag: &mut bool| match op.take() {
            Some(f) => f(flag),
            None => Ok(()),
        },
        &mut enqueued,
    );
    if out.is_err() && enqueued {
        let mut streams: Vec<ffi::CUstream> = list
            .iter()
            .flat_map(|u| std::iter::once(u.stream).chain(u.waiter))
            .collect();
        streams.sort_unstable();
        streams.dedup();
        for s in streams {
            let _ = synchronize(s);
        }
    }
    out
}

fn nest(
    list: &[TrackedUse<'_>],
    op: &mut dyn FnMut(&mut bool) -> Result<()>,
    enqueued: &mut bool,
) -> Result<()> {
    match list.split_first() {
        None => op(enqueued),
        Some((u, rest)) => match u.waiter {
            Some(waiter) => u
                .uses
                .around_from(waiter, u.stream, u.access, || nest(rest, op, enqueued)),
            None => u
                .uses
                .around(u.stream, u.access, || nest(rest, op, enqueued)),
        },
    }
}

/// `cuStreamSynchronize` on a stream of the crate's own (never a special handle here).
pub(crate) fn synchronize(stream: ffi::CUstream) -> Result<()> {
    let f = driver_fn!(cuStreamSynchronize);
    // SAFETY: the stream is live (the caller's, or a context's service stream).
    check(unsafe { f(stream) }, "cuStreamSynchronize")
}

/// Makes `to` wait for the work enqueued on `from` (a stream of context `from_ctx`) so far: this
/// thread's cached event of `from_ctx` recorded on `from` and waited for by `to`, of any context
/// (a wait holds the record it was made for, so the event is reused at once). Neither stream is
/// capturing; a default stream needs its context bound by the caller.
pub(crate) fn hand_over(
    from: ffi::CUstream,
    from_ctx: ffi::CUcontext,
    to: ffi::CUstream,
) -> Result<()> {
    WAIT_EVENTS.with_event(from_ctx, |ev| {
        let record = driver_fn!(cuEventRecord);
        // SAFETY: the event is of `from_ctx`, as `from` is; both streams are live (the caller's).
        check(unsafe { record(ev, from) }, "cuEventRecord")?;
        let wait = driver_fn!(cuStreamWaitEvent);
        // SAFETY: as above; a stream may wait for an event of another context.
        check(unsafe { wait(to, ev, 0) }, "cuStreamWaitEvent")
    })
}
