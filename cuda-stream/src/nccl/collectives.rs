//! The collectives and point-to-point calls of a [`Communicator`], each planned here (lengths
//! checked, the NCCL call prepared) and issued alone, or added to a
//! [`Group`](crate::nccl::Group).

use std::ffi::{c_int, c_void};

use crate::base::error::{Error, Result};
use crate::ffi;
use crate::memory::slice::{AsDeviceSlice, AsDeviceSliceMut, Span};
use crate::memory::use_tracking::Access;
use crate::nccl::comm::Communicator;
use crate::nccl::plan::{Buffers, NcclCall, Planned, issue};
use crate::nccl::types::{NcclType, ReduceOp};
use crate::stream::view::Enqueue;

type Handle = (ffi::CUstream, ffi::CUcontext);

fn same_len(expected: usize, actual: usize) -> Result<()> {
    if expected == actual {
        Ok(())
    } else {
        Err(Error::LengthMismatch { expected, actual })
    }
}

/// A rank number as NCCL takes it (NCCL checks that it is one of the communicator's).
/// The span of memory a collective reads.
pub(crate) fn span<T: NcclType>(b: &impl AsDeviceSlice<T>) -> Span<'_, T> {
    b.as_device_slice().span()
}

/// The span of memory a collective writes.
pub(crate) fn span_mut<T: NcclType>(b: &mut impl AsDeviceSliceMut<T>) -> Span<'_, T> {
    b.as_device_slice_mut().span()
}

fn rank_arg(rank: usize) -> c_int {
    c_int::try_from(rank).unwrap_or(c_int::MAX)
}

fn send_ptr<T: NcclType>(b: Span<'_, T>) -> *const c_void {
    b.device_ptr() as *const c_void
}

fn recv_ptr<T: NcclType>(b: Span<'_, T>) -> *mut c_void {
    b.device_ptr() as *mut c_void
}

impl Communicator {
    pub(crate) fn plan_all_reduce<'a, T: NcclType>(
        &'a self,
        stream: Handle,
        send: Option<Span<'a, T>>,
        recv: Span<'a, T>,
        op: ReduceOp,
    ) -> Result<Planned<'a>> {
        let src = send.unwrap_or(recv);
        same_len(recv.len(), src.len())?;
        let count = recv.len();
        let buffers = Buffers::new(
            (recv.alloc_ref(), Access::Write),
            send.map(|s| (s.alloc_ref(), Access::Read)),
        );
        let (s, r) = (send_ptr(src), recv_ptr(recv));
        Planned::new(
            self,
            stream,
            buffers,
            NcclCall::AllReduce {
                send: s,
                recv: r,
                count,
                datatype: T::DATATYPE,
                op: op.raw(),
            },
        )
    }

    pub(crate) fn plan_broadcast<'a, T: NcclType>(
        &'a self,
        stream: Handle,
        send: Option<Span<'a, T>>,
        recv: Span<'a, T>,
        root: usize,
    ) -> Result<Planned<'a>> {
        let src = send.unwrap_or(recv);
        same_len(recv.len(), src.len())?;
        let (count, root) = (recv.len(), rank_arg(root));
        let buffers = Buffers::new(
            (recv.alloc_ref(), Access::Write),
            send.map(|s| (s.alloc_ref(), Access::Read)),
        );
        let (s, r) = (send_ptr(src), recv_ptr(recv));
        Planned::new(
            self,
            stream,
            buffers,
            NcclCall::Broadcast {
                send: s,
                recv: r,
                count,
                datatype: T::DATATYPE,
                root,
            },
        )
    }

    pub(crate) fn plan_all_gather<'a, T: NcclType>(
        &'a self,
        stream: Handle,
        send: Span<'a, T>,
        recv: Span<'a, T>,
    ) -> Result<Planned<'a>> {
        same_len(send.len().saturating_mul(self.size()), recv.len())?;
        let count = send.len();
        let (s, r) = (send_ptr(send), recv_ptr(recv));
        Planned::new(
            self,
            stream,
            Buffers::new(
                (recv.alloc_ref(), Access::Write),
                Some((send.alloc_ref(), Access::Read)),
            ),
            NcclCall::AllGather {
                send: s,
                recv: r,
                count,
                datatype: T::DATATYPE,
            },
        )
    }

    pub(crate) fn plan_reduce_scatter<'a, T: NcclType>(
        &'a self,
        stream: Handle,
        send: Span<'a, T>,
        recv: Span<'a, T>,
        op: ReduceOp,
    ) -> Result<Planned<'a>> {
        same_len(recv.len().saturating_mul(self.size()), send.len())?;
        let count = recv.len();
        let (s, r) = (send_ptr(send), recv_ptr(recv));
        Planned::new(
            self,
            stream,
            Buffers::new(
                (recv.alloc_ref(), Access::Write),
                Some((send.alloc_ref(), Access::Read)),
            ),
            NcclCall::ReduceScatter {
                send: s,
                recv: r,
                count,
                datatype: T::DATATYPE,
                op: op.raw(),
            },
        )
    }

    pub(crate) fn plan_send<'a, T: NcclType>(
        &'a self,
        stream: Handle,
        buf: Span<'a, T>,
        peer: usize,
    ) -> Result<Planned<'a>> {
        let (count, peer, s) = (buf.len(), rank_arg(peer), send_ptr(buf));
        Planned::new(
            self,
            stream,
            Buffers::new((buf.alloc_ref(), Access::Read), None),
            NcclCall::Send {
                buf: s,
                count,
                datatype: T::DATATYPE,
                peer,
            },
        )
    }

    pub(crate) fn plan_recv<'a, T: NcclType>(
        &'a self,
        stream: Handle,
        buf: Span<'a, T>,
        peer: usize,
    ) -> Result<Planned<'a>> {
        let (count, peer, r) = (buf.len(), rank_arg(peer), recv_ptr(buf));
        Planned::new(
            self,
            stream,
            Buffers::new((buf.alloc_ref(), Access::Write), None),
            NcclCall::Recv {
                buf: r,
                count,
                datatype: T::DATATYPE,
                peer,
            },
        )
    }

    /// Reduces `send` over every rank with `op` into `recv` (`ncclAllReduce`) on `stream`, of
    /// this rank's context; both of the same length. On a capturing stream the call becomes part
    /// of the graph, which keeps both buffers allocated for its replays.
    pub fn all_reduce<T: NcclType>(
        &self,
        stream: &impl Enqueue,
        send: &impl AsDeviceSlice<T>,
        recv: &mut impl AsDeviceSliceMut<T>,
        op: ReduceOp,
    ) -> Result<()> {
        issue(
            &[self.plan_all_reduce(
                stream.enqueue_handle(),
                Some(span(send)),
                span_mut(recv),
                op,
            )?],
            false,
        )
    }

    /// [`all_reduce`](Communicator::all_reduce) with `buf` as both input and output.
    pub fn all_reduce_in_place<T: NcclType>(
        &self,
        stream: &impl Enqueue,
        buf: &mut impl AsDeviceSliceMut<T>,
        op: ReduceOp,
    ) -> Result<()> {
        issue(
            &[self.plan_all_reduce(stream.enqueue_handle(), None, span_mut(buf), op)?],
            false,
        )
    }

    /// Copies `send` of rank `root` into `recv` of every rank (`ncclBroadcast`); `send` is read
    /// on the root only. Both of the same length.
    pub fn broadcast<T: NcclType>(
        &self,
        stream: &impl Enqueue,
        send: &impl AsDeviceSlice<T>,
        recv: &mut impl AsDeviceSliceMut<T>,
        root: usize,
    ) -> Result<()> {
        issue(
            &[self.plan_broadcast(
                stream.enqueue_handle(),
                Some(span(send)),
                span_mut(recv),
                root,
            )?],
            false,
        )
    }

    /// [`broadcast`](Communicator::broadcast) of the root's `buf` into `buf` of every rank.
    pub fn broadcast_in_place<T: NcclType>(
        &self,
        stream: &impl Enqueue,
        buf: &mut impl AsDeviceSliceMut<T>,
        root: usize,
    ) -> Result<()> {
        issue(
            &[self.plan_broadcast(stream.enqueue_handle(), None, span_mut(buf), root)?],
            false,
        )
    }

    /// Gathers `send` of every rank into `recv`, rank `i`'s at `i * send.len()`
    /// (`ncclAllGather`); `recv` holds `send.len() * size()` values.
    pub fn all_gather<T: NcclType>(
        &self,
        stream: &impl Enqueue,
        send: &impl AsDeviceSlice<T>,
        recv: &mut impl AsDeviceSliceMut<T>,
    ) -> Result<()> {
        issue(
            &[self.plan_all_gather(stream.enqueue_handle(), span(send), span_mut(recv))?],
            false,
        )
    }

    /// Reduces `send` over every rank with `op` and leaves block `rank()` of the result in
    /// `recv` (`ncclReduceScatter`); `send` holds `recv.len() * size()` values.
    pub fn reduce_scatter<T: NcclType>(
        &self,
        stream: &impl Enqueue,
        send: &impl AsDeviceSlice<T>,
        recv: &mut impl AsDeviceSliceMut<T>,
        op: ReduceOp,
    ) -> Result<()> {
        issue(
            &[self.plan_reduce_scatter(stream.enqueue_handle(), span(send), span_mut(recv), op)?],
            false,
        )
    }

    /// Sends `buf` to rank `peer` (`ncclSend`), which must post a matching
    /// [`recv`](Communicator::recv). Alone it blocks the stream until the peer receives: to
    /// exchange, or to send to this rank itself, put both in a [`Group`](crate::nccl::Group).
    pub fn send<T: NcclType>(
        &self,
        stream: &impl Enqueue,
        buf: &impl AsDeviceSlice<T>,
        peer: usize,
    ) -> Result<()> {
        issue(
            &[self.plan_send(stream.enqueue_handle(), span(buf), peer)?],
            false,
        )
    }

    /// Receives into `buf` from rank `peer` (`ncclRecv`); see [`send`](Communicator::send).
    pub fn recv<T: NcclType>(
        &self,
        stream: &impl Enqueue,
        buf: &mut impl AsDeviceSliceMut<T>,
        peer: usize,
    ) -> Result<()> {
        issue(
            &[self.plan_recv(stream.enqueue_handle(), span_mut(buf), peer)?],
            false,
        )
    }
}
