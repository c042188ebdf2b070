//! Use tracking for work that touches buffers on several streams or contexts at once: a peer
//! copy or a kernel reading a buffer of another device, whose remote side is recorded on a
//! stream of the remote context ([`enqueue_across`]); an NCCL group over several communicators
//! ([`around_streams`]). Each tracker waits and records on its own stream, and the trackers are
//! locked in one global order.

use std::sync::Arc;

use crate::base::error::{Error, Result, check, driver_fn};
use crate::driver::capture_query::is_capturing;
use crate::driver::context::Context;
use crate::ffi;
use crate::memory::allocation::Allocation;
use crate::memory::buffer_ops::enqueue_with_uses;
use crate::memory::use_tracking::{Access, Uses};

/// One tracker's use: what the work does to the buffer, and the stream (of the buffer's
/// context) whose position stands for the work.
#[derive(Clone, Copy)]
pub(crate) struct TrackedUse<'a> {
    pub(crate) uses: &'a Uses,
    pub(crate) access: Access,
    pub(crate) stream: ffi::CUstream,
}

/// Runs `op` inside [`Uses::around`] of every entry of `list`, locked in the trackers' global
/// order (a tracker listed twice on one stream counts once, as a write if either is; on two
/// streams it is refused). `op` sets its flag once its work is enqueued: if an error comes
/// after that (a tracker could not mark its use), the work's streams are synchronised before
/// the error is returned, so that no unrecorded use is still running.
pub(crate) fn around_streams(
    mut list: Vec<TrackedUse<'_>>,
    op: impl FnOnce(&mut bool) -> Result<()>,
) -> Result<()> {
    list.sort_by_key(|u| (u.uses.key(), u.stream as usize));
    list.dedup_by(|later, kept| {
        let same = later.uses.key() == kept.uses.key() && later.stream == kept.stream;
        if same && later.access == Access::Write {
            kept.access = Access::Write;
        }
        same
    });
    if list.windows(2).any(|w| w[0].uses.key() == w[1].uses.key()) {
        return Err(Error::InvalidArgument {
            reason: "one buffer is used on two streams in one operation".into(),
        });
    }
    let mut enqueued = false;
    let mut op = Some(op);
    let out = nest(
        &list,
        &mut |flag: &mut bool| match op.take() {
            Some(f) => f(flag),
            None => Ok(()),
        },
        &mut enqueued,
    );
    if out.is_err() && enqueued {
        let mut streams: Vec<ffi::CUstream> = list.iter().map(|u| u.stream).collect();
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
        Some((u, rest)) => u
            .uses
            .around(u.stream, u.access, || nest(rest, op, enqueued)),
    }
}

/// `cuStreamSynchronize` on a stream of the crate's own (never a special handle here).
pub(crate) fn synchronize(stream: ffi::CUstream) -> Result<()> {
    let f = driver_fn!(cuStreamSynchronize);
    // SAFETY: the stream is live (the caller's, or a context's service stream).
    check(unsafe { f(stream) }, "cuStreamSynchronize")
}

/// Runs `op`, work on `raw` (a stream of `ctx`, with the context bound where the call needs it)
/// touching each allocation of `list` with its access, where some allocations may belong to
/// other contexts (memory of another device that this device may address: peer copies, and
/// kernels reading or writing a peer's buffer).
///
/// Allocations of `ctx` are tracked on `raw` as [`enqueue_with_uses`] does (which handles
/// captures, and every list of one context). Outside a capture, each allocation of another
/// context is tracked on that context's service stream, which stands for the work there: before
/// `op`, `raw` waits for the service stream (which has waited for the allocation's conflicting
/// uses), and after it the service stream waits for `raw`, each through an event of the context
/// recorded on the stream waited for. Later work on the remote context (its unordered
/// allocations and some frees) also waits for the work.
pub(crate) fn enqueue_across(
    raw: ffi::CUstream,
    ctx: &Context,
    list: &[(&Arc<Allocation>, Access)],
    op: impl FnOnce() -> Result<()>,
) -> Result<()> {
    let foreign = |a: &Allocation| a.ctx().raw() != ctx.raw();
    if !list.iter().any(|(a, _)| foreign(a)) || is_capturing(raw)? {
        return enqueue_with_uses(raw, ctx.raw(), list, op);
    }
    let mut remotes: Vec<(&Context, ffi::CUstream)> = Vec::new();
    let mut tracked = Vec::with_capacity(list.len());
    for (a, access) in list {
        a.check_outside_capture()?;
        let stream = if foreign(a) {
            let remote = a.ctx();
            match remotes.iter().find(|(c, _)| c.raw() == remote.raw()) {
                Some(&(_, proxy)) => proxy,
                None => {
                    let proxy = remote.service_stream()?;
                    remotes.push((remote, proxy));
                    proxy
                }
            }
        } else {
            raw
        };
        tracked.push(TrackedUse {
            uses: &a.uses,
            access: *access,
            stream,
        });
    }
    around_streams(tracked, |enqueued| {
        // Each proxy has waited for its buffers' conflicting uses: so does `raw`.
        for &(remote, proxy) in &remotes {
            hand_over(remote, proxy, raw)?;
        }
        op()?;
        *enqueued = true;
        // And each proxy, which stands for the work on its context, waits for it.
        for &(_, proxy) in &remotes {
            hand_over(ctx, raw, proxy)?;
        }
        Ok(())
    })
}

/// Makes `to` wait for the work enqueued on `from` so far (a stream of `ctx`): an event of
/// `ctx` recorded on `from`, waited for by `to` (of any context), then recycled (a wait holds
/// the record it was made for).
fn hand_over(ctx: &Context, from: ffi::CUstream, to: ffi::CUstream) -> Result<()> {
    let ev = ctx.plain_event()?;
    let out = (|| {
        let record = driver_fn!(cuEventRecord);
        // SAFETY: the event is ours, of `ctx`, as `from` is; both streams are live.
        check(unsafe { record(ev, from) }, "cuEventRecord")?;
        let wait = driver_fn!(cuStreamWaitEvent);
        // SAFETY: as above; a stream may wait for an event of another context.
        check(unsafe { wait(to, ev, 0) }, "cuStreamWaitEvent")
    })();
    ctx.recycle_plain_event(ev);
    out
}
