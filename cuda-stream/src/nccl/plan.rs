//! A planned NCCL call: its communicator, stream, the buffers it touches and the call itself;
//! and running planned calls (one, or several as one NCCL group) with their buffers' uses
//! tracked, or tied to a capture's graph.

use std::ffi::{c_int, c_void};
use std::mem::MaybeUninit;
use std::sync::Arc;

use crate::base::error::{Error, Result};
use crate::driver::capture_query::is_capturing;
use crate::ffi;
use crate::ffi::nccl::{Nccl, ncclComm_t, ncclDataType_t, ncclRedOp_t};
use crate::graph::user_objects::keep_alive;
use crate::memory::allocation::{Allocation, InCapture};
use crate::memory::buffer_ops::{capture_graph, tie_to_graph};
use crate::memory::tracked::{TrackedUse, around_streams};
use crate::memory::use_tracking::{Access, Repeated};
use crate::nccl::call::{bind_for_nccl, nccl, nccl_check, nccl_fn_of};
use crate::nccl::comm::Communicator;
use crate::stream::view::{bind_if_special, is_special};

/// The NCCL call of a plan with its arguments ready (the buffers' addresses, counts checked
/// against their lengths): plain values, so a plan costs no allocation. Issued on a raw stream
/// with the communicator by [`NcclCall::issue`].
#[derive(Clone, Copy)]
pub(crate) enum NcclCall {
    AllReduce {
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        datatype: ncclDataType_t,
        op: ncclRedOp_t,
    },
    Broadcast {
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        datatype: ncclDataType_t,
        root: c_int,
    },
    AllGather {
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        datatype: ncclDataType_t,
    },
    ReduceScatter {
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        datatype: ncclDataType_t,
        op: ncclRedOp_t,
    },
    Send {
        buf: *const c_void,
        count: usize,
        datatype: ncclDataType_t,
        peer: c_int,
    },
    Recv {
        buf: *mut c_void,
        count: usize,
        datatype: ncclDataType_t,
        peer: c_int,
    },
}

impl NcclCall {
    /// NCCL's name of the call.
    fn name(&self) -> &'static str {
        match self {
            NcclCall::AllReduce { .. } => "ncclAllReduce",
            NcclCall::Broadcast { .. } => "ncclBroadcast",
            NcclCall::AllGather { .. } => "ncclAllGather",
            NcclCall::ReduceScatter { .. } => "ncclReduceScatter",
            NcclCall::Send { .. } => "ncclSend",
            NcclCall::Recv { .. } => "ncclRecv",
        }
    }

    /// Makes the call on `stream` with `comm`, through `n` (the process-wide NCCL, looked up by
    /// the caller on this thread: not inside a host function).
    fn issue(self, n: &Nccl, comm: ncclComm_t, stream: ffi::CUstream) -> Result<()> {
        match self {
            NcclCall::AllReduce {
                send,
                recv,
                count,
                datatype,
                op,
            } => {
                let f = nccl_fn_of!(n, ncclAllReduce);
                // SAFETY: both buffers hold `count` values of `datatype` (checked when planned),
                // live until the work is done (their uses are recorded, or a capture's graph
                // holds them).
                let rc = unsafe { f(send, recv, count, datatype, op, comm, stream) };
                nccl_check(rc, "ncclAllReduce")
            }
            NcclCall::Broadcast {
                send,
                recv,
                count,
                datatype,
                root,
            } => {
                let f = nccl_fn_of!(n, ncclBroadcast);
                // SAFETY: as for all-reduce; NCCL checks the root.
                let rc = unsafe { f(send, recv, count, datatype, root, comm, stream) };
                nccl_check(rc, "ncclBroadcast")
            }
            NcclCall::AllGather {
                send,
                recv,
                count,
                datatype,
            } => {
                let f = nccl_fn_of!(n, ncclAllGather);
                // SAFETY: `send` holds `count` values, `recv` `count` times the communicator's
                // size (checked); live as for all-reduce.
                let rc = unsafe { f(send, recv, count, datatype, comm, stream) };
                nccl_check(rc, "ncclAllGather")
            }
            NcclCall::ReduceScatter {
                send,
                recv,
                count,
                datatype,
                op,
            } => {
                let f = nccl_fn_of!(n, ncclReduceScatter);
                // SAFETY: `recv` holds `count` values, `send` `count` times the communicator's
                // size (checked); live as for all-reduce.
                let rc = unsafe { f(send, recv, count, datatype, op, comm, stream) };
                nccl_check(rc, "ncclReduceScatter")
            }
            NcclCall::Send {
                buf,
                count,
                datatype,
                peer,
            } => {
                let f = nccl_fn_of!(n, ncclSend);
                // SAFETY: `buf` holds `count` values, live as for all-reduce; NCCL checks the
                // peer.
                let rc = unsafe { f(buf, count, datatype, peer, comm, stream) };
                nccl_check(rc, "ncclSend")
            }
            NcclCall::Recv {
                buf,
                count,
                datatype,
                peer,
            } => {
                let f = nccl_fn_of!(n, ncclRecv);
                // SAFETY: as for send.
                let rc = unsafe { f(buf, count, datatype, peer, comm, stream) };
                nccl_check(rc, "ncclRecv")
            }
        }
    }
}

/// The buffers one NCCL call touches, with their access: at most two (what it writes, and what
/// it reads), kept inline.
#[derive(Clone, Copy)]
pub(crate) struct Buffers<'a> {
    first: (&'a Arc<Allocation>, Access),
    second: Option<(&'a Arc<Allocation>, Access)>,
}

impl<'a> Buffers<'a> {
    pub(crate) fn new(
        first: (&'a Arc<Allocation>, Access),
        second: Option<(&'a Arc<Allocation>, Access)>,
    ) -> Buffers<'a> {
        Buffers { first, second }
    }

    fn iter(self) -> impl Iterator<Item = (&'a Arc<Allocation>, Access)> {
        std::iter::once(self.first).chain(self.second)
    }
}

/// One NCCL call, checked and waiting to be issued: plain values, copied into a group's inline
/// storage.
#[derive(Clone, Copy)]
pub(crate) struct Planned<'a> {
    comm: &'a Communicator,
    stream: ffi::CUstream,
    buffers: Buffers<'a>,
    call: NcclCall,
}

impl<'a> Planned<'a> {
    /// Checks that `stream` (raw handle and context) and every buffer belong to `comm`'s
    /// context.
    pub(crate) fn new(
        comm: &'a Communicator,
        (stream, stream_ctx): (ffi::CUstream, ffi::CUcontext),
        buffers: Buffers<'a>,
        call: NcclCall,
    ) -> Result<Planned<'a>> {
        let ctx = comm.ctx_raw();
        if stream_ctx != ctx {
            return Err(Error::ContextMismatch { what: "the stream" });
        }
        if buffers.iter().any(|(a, _)| a.ctx_raw() != ctx) {
            return Err(Error::ContextMismatch { what: "the buffer" });
        }
        Ok(Planned {
            comm,
            stream,
            buffers,
            call,
        })
    }
}

/// Issues `plans` (as one NCCL group if `grouped`): a communicator with an asynchronous error
/// fails the call with that error (NCCL refuses the call; an NCCL before 2.14 is asked first);
/// ties the buffers of calls on capturing streams to the capture's graph; makes
/// every other stream wait for the earlier uses its buffers conflict with, and records the uses
/// after the calls are issued (after `ncclGroupEnd` for a group, when NCCL enqueues the work).
pub(crate) fn issue<'p>(plans: &[Planned<'p>], grouped: bool) -> Result<()> {
    // Looked up once for every call below (this refuses a host function before any NCCL call).
    let first = match (grouped, plans.first()) {
        (_, None) => return Ok(()),
        (true, Some(_)) => "ncclGroupStart",
        (false, Some(p)) => p.call.name(),
    };
    let n = nccl(first)?;
    for p in plans {
        p.comm.check_async_before_call()?;
    }
    if grouped {
        if let Some(out) = issue_repeated(plans, n) {
            return out;
        }
    }
    issue_general(plans, grouped, n)
}

/// [`issue`] past its hot path ([`issue_repeated`]): every case.
#[inline(never)]
fn issue_general<'p>(plans: &[Planned<'p>], grouped: bool, n: &Nccl) -> Result<()> {
    if grouped {
        crate::nccl::phase!(1);
    }
    // At most two tracked uses a call; up to four calls' on the stack (no allocation per call).
    let mut tracked: InlineList<TrackedUse<'p>, 8> = InlineList::new();
    for p in plans {
        let ctx = p.comm.ctx_raw();
        let _bound = bind_if_special(p.stream, ctx)?;
        if is_capturing(p.stream)? {
            // The memory layer's rule for captures: buffers from outside are tied to the graph
            // (after the host waited for their conflicting uses elsewhere), a graph buffer of
            // this capture is tracked inside it, a borrowed one is refused.
            let (graph, capture) = capture_graph(p.stream)?;
            let mut held: Vec<Arc<Allocation>> = Vec::new();
            for (a, access) in p.buffers.iter() {
                match a.in_capture(p.stream, ctx, capture, access, false)? {
                    InCapture::Tie if a.ptr != 0 => held.push(a.clone()),
                    InCapture::Tie => {}
                    InCapture::Track => tracked.push(TrackedUse {
                        uses: &a.uses,
                        access,
                        stream: p.stream,
                        waiter: None,
                    }),
                }
            }
            tie_to_graph(ctx, graph, held)?;
            // The graph replays NCCL's kernels against the communicator's resources: it holds
            // them, so dropping the `Communicator` destroys nothing while a graph can replay.
            keep_alive(ctx, graph, p.comm.keep_alive_value())?;
        } else {
            for (a, _) in p.buffers.iter() {
                a.check_outside_capture()?;
            }
            for (a, access) in p.buffers.iter() {
                tracked.push(TrackedUse {
                    uses: &a.uses,
                    access,
                    stream: p.stream,
                    waiter: None,
                });
            }
        }
    }
    // NCCL works on the CUDA runtime's current device: it asks which device is current, makes
    // the communicator's current for the work and then makes the one it found current again.
    // With no context current the runtime answers device 0, so NCCL left device 0's primary
    // context current on the calling thread (measured: tests/examples/contexts.rs), made it
    // active in processes that never used device 0, and later copies of pool memory of other
    // devices on that thread failed. Each call (each group) runs with its communicator's context
    // bound, so NCCL finds the device it needs current, and the thread's current context is the
    // caller's afterwards.
    if grouped {
        crate::nccl::phase!(2);
    }
    let out = around_streams(tracked.as_mut_slice(), |enqueued| {
        if !grouped {
            let mut out = Ok(());
            for p in plans {
                let mut bound = bind_for_nccl(p.comm.ctx_raw())?;
                out = p
                    .call
                    .issue(n, p.comm.raw(), p.stream)
                    .map_err(|e| p.comm.explain_failure(e));
                if out.is_ok() {
                    bound.left_as_found();
                }
                *enqueued = out.is_ok();
            }
            return out;
        }
        run_group(plans, n, enqueued)
    });
    if grouped {
        crate::nccl::phase!(6);
    }
    out
}

/// The most buffers [`issue_repeated`] takes.
const REPEATED_MAX: usize = 4;

/// The hot path of a group (`issue` with `grouped`) whose calls are all on created streams
/// outside any capture, each buffer's use repeating its last use on its call's stream (the same
/// buffers reduced again and again on their streams): the trackers are locked, the group runs,
/// and the uses stay as they are (renumbered). Kept apart and small: it runs right after NCCL's
/// previous group, with little of the crate's code still cached. The trackers are taken in the
/// calls' order without waiting ([`Uses::try_repeat`]): a busy one (another thread's, or a buffer
/// listed twice) sends the group the general way, which takes them in their global order, so
/// that two threads cannot deadlock. `None`, having enqueued nothing and holding no lock, for any
/// other group (a default stream, a capturing stream, graph memory, more than
/// [`REPEATED_MAX`] buffers, a use that does not repeat): [`issue`]'s general way takes it.
///
/// [`Uses::try_repeat`]: crate::memory::use_tracking::Uses::try_repeat
fn issue_repeated(plans: &[Planned<'_>], n: &Nccl) -> Option<Result<()>> {
    let mut held: [Option<Repeated<'_>>; REPEATED_MAX] = [const { None }; REPEATED_MAX];
    let mut len = 0;
    for p in plans {
        if is_special(p.stream) {
            return None;
        }
        match is_capturing(p.stream) {
            Ok(false) => {}
            Ok(true) => return None,
            Err(e) => return Some(Err(e)),
        }
        for (a, access) in p.buffers.iter() {
            if len == REPEATED_MAX || a.check_outside_capture().is_err() {
                return None;
            }
            // A use that does not repeat, or a busy tracker, lets every lock go (the numbers
            // taken stay: a later number only makes a host completion cover a use later).
            held[len] = Some(a.uses.try_repeat(p.stream, access)?);
            len += 1;
        }
    }
    let mut enqueued = false;
    let out = run_group(plans, n, &mut enqueued);
    // The locks go, each use's epoch checked again.
    drop(held);
    if out.is_err() && enqueued {
        // As the general way does once work may have been enqueued: nothing of it is running
        // when the error is returned.
        synchronize_streams(plans);
    }
    Some(out)
}

/// `ncclGroupStart`, every call, `ncclGroupEnd`; the error of a failed group. `enqueued` is set
/// once the group has started: NCCL may have enqueued part of it before an error.
///
/// Inside a group NCCL only records the calls; its end launches the work of every communicator,
/// switching devices as it goes. The whole group runs bound to the first call's context, which
/// NCCL finds current and leaves so. A call on a default stream is bound to its own context
/// (NCCL resolves the handle through the current context).
#[inline(always)]
fn run_group(plans: &[Planned<'_>], n: &Nccl, enqueued: &mut bool) -> Result<()> {
    crate::nccl::phase!(3);
    let start = nccl_fn_of!(n, ncclGroupStart);
    let end = nccl_fn_of!(n, ncclGroupEnd);
    let mut bound = match plans.first() {
        Some(p) => Some(bind_for_nccl(p.comm.ctx_raw())?),
        None => None,
    };
    crate::nccl::phase!(4);
    // SAFETY: no arguments; every start is matched by the end below.
    nccl_check(unsafe { start() }, "ncclGroupStart")?;
    *enqueued = true;
    let mut first_err = None;
    for p in plans {
        let r = bind_if_special(p.stream, p.comm.ctx_raw())
            .and_then(|_bound| p.call.issue(n, p.comm.raw(), p.stream));
        if let Err(e) = r {
            first_err = Some(e);
            break;
        }
    }
    // SAFETY: ends the group started above, whatever happened inside it.
    let ended = nccl_check(unsafe { end() }, "ncclGroupEnd");
    crate::nccl::phase!(5);
    match (first_err, ended) {
        (None, Ok(())) => {
            if let Some(b) = bound.as_mut() {
                b.left_as_found();
            }
            Ok(())
        }
        (Some(e), _) | (None, Err(e)) => Err(explain_group_failure(plans, e)),
    }
}

/// Synchronises the streams of `plans` (errors ignored), after a group failed.
#[cold]
fn synchronize_streams(plans: &[Planned<'_>]) {
    for p in plans {
        let _ = crate::memory::tracked::synchronize(p.stream);
    }
}

/// A failed group's error: the first communicator's asynchronous error, if one has one (NCCL
/// refused its call, and the group with it), else `err`.
#[cold]
fn explain_group_failure(plans: &[Planned<'_>], err: Error) -> Error {
    plans
        .iter()
        .find_map(|p| p.comm.async_error())
        .unwrap_or(err)
}

/// A short list of `Copy` values that allocates nothing up to `N` of them (past `N` they all move
/// to the heap), seen as one slice in place: a group's calls, and the uses they track. Nothing
/// is written for the slots not used, and nothing is copied to make the slice: on the cold path
/// of a group each line of stack written costs a miss.
pub(crate) struct InlineList<T: Copy, const N: usize> {
    /// The first `len` slots are set while nothing spilled.
    inline: [MaybeUninit<T>; N],
    len: usize,
    /// Every value, once more than `N` were pushed.
    spilled: Vec<T>,
}

impl<T: Copy, const N: usize> InlineList<T, N> {
    #[inline]
    pub(crate) fn new() -> Self {
        InlineList {
            inline: [MaybeUninit::uninit(); N],
            len: 0,
            spilled: Vec::new(),
        }
    }

    #[inline]
    pub(crate) fn push(&mut self, value: T) {
        if self.spilled.is_empty() {
            if let Some(slot) = self.inline.get_mut(self.len) {
                slot.write(value);
                self.len += 1;
                return;
            }
            let mut all = Vec::with_capacity(2 * N);
            all.extend_from_slice(self.as_mut_slice());
            self.spilled = all;
        }
        self.spilled.push(value);
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        if self.spilled.is_empty() {
            self.len
        } else {
            self.spilled.len()
        }
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The values, in the order pushed.
    #[inline]
    pub(crate) fn as_mut_slice(&mut self) -> &mut [T] {
        if !self.spilled.is_empty() {
            return &mut self.spilled;
        }
        let set = &mut self.inline[..self.len];
        // SAFETY: the first `len` slots were written by `push` (a `MaybeUninit<T>` has `T`'s
        // layout), and `T: Copy` has no drop to mind.
        unsafe { std::slice::from_raw_parts_mut(set.as_mut_ptr().cast::<T>(), set.len()) }
    }
}

impl<T: Copy, const N: usize> Default for InlineList<T, N> {
    fn default() -> Self {
        InlineList::new()
    }
}

#[cfg(test)]
mod tests {
    use super::InlineList;

    #[test]
    fn an_inline_list_keeps_its_order_inline_and_past_its_slots() {
        let mut l: InlineList<u32, 3> = InlineList::new();
        assert!(l.is_empty());
        assert_eq!(l.as_mut_slice(), &mut [] as &mut [u32]);
        for i in 0..3 {
            l.push(i);
        }
        assert_eq!(l.as_mut_slice(), &mut [0, 1, 2]);
        for i in 3..8 {
            l.push(i);
            assert_eq!(l.len(), i as usize + 1);
        }
        assert_eq!(l.as_mut_slice(), &mut [0, 1, 2, 3, 4, 5, 6, 7]);
        l.as_mut_slice()[7] = 9;
        assert_eq!(l.as_mut_slice().last(), Some(&9));
    }
}
