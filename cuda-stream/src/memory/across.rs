//! Use tracking for work that touches buffers of several contexts at once: a peer copy or a
//! kernel reading a buffer of another device, whose remote side is recorded on a stream of the
//! remote context ([`enqueue_across`]), through the nesting of trackers of `memory::tracked`.

use std::sync::Arc;

use crate::base::error::Result;
use crate::driver::capture_query::is_capturing;
use crate::driver::context::Context;
use crate::ffi;
use crate::memory::allocation::Allocation;
use crate::memory::buffer_ops::enqueue_with_uses;
use crate::memory::tracked::{TrackedUse, around_streams, hand_over};
use crate::memory::use_tracking::Access;

/// Runs `op`, work on `raw` (a stream of `ctx`, with the context bound where the call needs it)
/// touching each allocation of `list` with its access, where some allocations may belong to
/// other contexts (memory of another device that this device may address: peer copies, and
/// kernels reading or writing a peer's buffer).
///
/// Allocations of `ctx` are tracked on `raw` as [`enqueue_with_uses`] does (which handles
/// captures, and every list of one context). Outside a capture, each allocation of another
/// context is tracked on that context's service stream, which stands for the work there: `raw`
/// itself waits for the allocation's conflicting uses (through their events, of the remote
/// context: [`Uses::around_from`](crate::memory::use_tracking::Uses::around_from)), and after
/// `op` the service stream waits for `raw` (an event of `ctx` recorded on `raw`), so that the
/// use recorded there follows the work. Later work on the remote context (its unordered
/// allocations and some frees) also waits for the work.
///
/// `raw` never waits for the service stream: a wait there would follow the service stream's
/// own wait for the previous such work on `raw`, a round trip between the devices before every
/// operation (about 9 us per peer copy measured on two H100s: 0.953-0.970 of raw
/// `cuMemcpyPeerAsync` at 64 MiB). A default stream (a special handle, which resolves through
/// the current context) is the exception: its waits take the old way, through the service
/// stream, since a wait of the remote tracker binds the remote context for a special handle.
pub(crate) fn enqueue_across(
    raw: ffi::CUstream,
    ctx: &Context,
    list: &[(&Arc<Allocation>, Access)],
    op: impl FnOnce() -> Result<()>,
) -> Result<()> {
    let foreign = |a: &Allocation| a.ctx_raw() != ctx.raw();
    if !list.iter().any(|(a, _)| foreign(a)) || is_capturing(raw)? {
        return enqueue_with_uses(raw, ctx.raw(), list, op);
    }
    // A created stream waits for the remote uses itself; a default stream through the proxy.
    let direct = raw as usize > 2;
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
            waiter: (direct && stream != raw).then_some(raw),
        });
    }
    around_streams(&mut tracked, |enqueued| {
        // On a default stream each proxy has waited for its buffers' conflicting uses: so does
        // `raw`.
        if !direct {
            for &(remote, proxy) in &remotes {
                hand_over(proxy, remote.raw(), raw)?;
            }
        }
        op()?;
        *enqueued = true;
        // And each proxy, which stands for the work on its context, waits for it.
        for &(_, proxy) in &remotes {
            hand_over(raw, ctx.raw(), proxy)?;
        }
        Ok(())
    })
}
