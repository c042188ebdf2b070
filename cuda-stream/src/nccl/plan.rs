//! A planned NCCL call: its communicator, stream, the buffers it touches and the call itself;
//! and running planned calls (one, or several as one NCCL group) with their buffers' uses
//! tracked, or tied to a capture's graph.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use crate::base::error::{Error, Result};
use crate::driver::capture_query::is_capturing;
use crate::ffi;
use crate::ffi::nccl::{ncclComm_t, ncclDataType_t, ncclRedOp_t};
use crate::graph::user_objects::keep_alive;
use crate::memory::allocation::{Allocation, InCapture};
use crate::memory::buffer_ops::{capture_graph, tie_to_graph};
use crate::memory::tracked::{TrackedUse, around_streams};
use crate::memory::use_tracking::Access;
use crate::nccl::call::{bind_for_nccl, nccl_check, nccl_fn};
use crate::nccl::comm::Communicator;
use crate::stream::view::bind_if_special;

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
    /// Makes the call on `stream` with `comm`.
    fn issue(self, comm: ncclComm_t, stream: ffi::CUstream) -> Result<()> {
        match self {
            NcclCall::AllReduce {
                send,
                recv,
                count,
                datatype,
                op,
            } => {
                let f = nccl_fn!(ncclAllReduce);
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
                let f = nccl_fn!(ncclBroadcast);
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
                let f = nccl_fn!(ncclAllGather);
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
                let f = nccl_fn!(ncclReduceScatter);
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
                let f = nccl_fn!(ncclSend);
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
                let f = nccl_fn!(ncclRecv);
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
        let ctx = comm.context().raw();
        if stream_ctx != ctx {
            return Err(Error::ContextMismatch { what: "the stream" });
        }
        if buffers.iter().any(|(a, _)| a.ctx().raw() != ctx) {
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

/// Issues `plans` (as one NCCL group if `grouped`): asks each communicator for an asynchronous
/// error first; ties the buffers of calls on capturing streams to the capture's graph; makes
/// every other stream wait for the earlier uses its buffers conflict with, and records the uses
/// after the calls are issued (after `ncclGroupEnd` for a group, when NCCL enqueues the work).
pub(crate) fn issue<'p>(plans: &[Planned<'p>], grouped: bool) -> Result<()> {
    for p in plans {
        p.comm.check_async()?;
    }
    if grouped {
        crate::nccl::phase!(1);
    }
    // At most two tracked uses a call; up to four calls' on the stack (no allocation per call).
    let mut tracked: InlineList<TrackedUse<'p>, 8> = InlineList::new();
    for p in plans {
        let ctx = p.comm.context().raw();
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
    let first_ctx = plans.first().map(|p| p.comm.context().raw());
    if grouped {
        crate::nccl::phase!(2);
    }
    let out = tracked.with_slice(|tracked| {
        around_streams(tracked, |enqueued| {
            if !grouped {
                let mut out = Ok(());
                for p in plans {
                    let _bound = bind_for_nccl(p.comm.context().raw())?;
                    out = p.call.issue(p.comm.raw(), p.stream);
                    *enqueued = out.is_ok();
                }
                return out;
            }
            crate::nccl::phase!(3);
            let start = nccl_fn!(ncclGroupStart);
            let end = nccl_fn!(ncclGroupEnd);
            // Inside a group NCCL only records the calls; its end launches the work of every
            // communicator, switching devices as it goes. The whole group runs bound to the first
            // call's context, which NCCL finds current and leaves so. A call on a default stream is
            // bound to its own context (NCCL resolves the handle through the current context).
            let _bound = match first_ctx {
                Some(ctx) => Some(bind_for_nccl(ctx)?),
                None => None,
            };
            crate::nccl::phase!(4);
            // SAFETY: no arguments; every start is matched by the end below.
            nccl_check(unsafe { start() }, "ncclGroupStart")?;
            let mut first_err = None;
            for p in plans {
                let r = bind_if_special(p.stream, p.comm.context().raw())
                    .and_then(|_bound| p.call.issue(p.comm.raw(), p.stream));
                if let Err(e) = r {
                    first_err = Some(e);
                    break;
                }
            }
            // SAFETY: ends the group started above, whatever happened inside it.
            let ended = nccl_check(unsafe { end() }, "ncclGroupEnd");
            crate::nccl::phase!(5);
            // NCCL may have enqueued part of the group before an error: treat it as enqueued.
            *enqueued = true;
            match first_err {
                Some(e) => Err(e),
                None => ended,
            }
        })
    });
    if grouped {
        crate::nccl::phase!(6);
    }
    out
}

/// A short list of `Copy` values that allocates nothing up to `N` of them (the rest go to the
/// heap): a group's calls, and the uses they track.
pub(crate) struct InlineList<T: Copy, const N: usize> {
    /// The first `N` values, filled from the front.
    inline: [Option<T>; N],
    more: Vec<T>,
    len: usize,
}

impl<T: Copy, const N: usize> InlineList<T, N> {
    pub(crate) fn new() -> Self {
        InlineList {
            inline: [None; N],
            more: Vec::new(),
            len: 0,
        }
    }

    pub(crate) fn push(&mut self, value: T) {
        match self.inline.get_mut(self.len) {
            Some(slot) => *slot = Some(value),
            None => self.more.push(value),
        }
        self.len += 1;
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Runs `f` on a copy of the values as one slice: an array on the stack, or (past `N`) a
    /// vector.
    pub(crate) fn with_slice<R>(&self, f: impl FnOnce(&mut [T]) -> R) -> R {
        let Some(first) = self.inline[0] else {
            return f(&mut []);
        };
        if self.more.is_empty() {
            let mut values = [first; N];
            for (to, from) in values.iter_mut().zip(self.inline.iter().flatten()) {
                *to = *from;
            }
            return f(&mut values[..self.len]);
        }
        let mut all: Vec<T> = self.inline.iter().flatten().copied().collect();
        all.extend_from_slice(&self.more);
        f(&mut all)
    }
}

impl<T: Copy, const N: usize> Default for InlineList<T, N> {
    fn default() -> Self {
        InlineList::new()
    }
}
