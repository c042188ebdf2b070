//! [`Group`]: several NCCL calls issued as one group (`ncclGroupStart` ... `ncclGroupEnd`).

use std::fmt;

use crate::base::error::Result;
use crate::memory::slice::{AsDeviceSlice, AsDeviceSliceMut};
use crate::nccl::collectives::{span, span_mut};
use crate::nccl::comm::Communicator;
use crate::nccl::plan::{InlineList, Planned, issue};
use crate::nccl::types::{NcclType, ReduceOp};
use crate::stream::view::Enqueue;

/// NCCL calls collected to be issued as one group: a send and a receive that must progress
/// together (to another rank, or to this rank itself), or one collective per communicator of
/// [`Communicator::init_all`] from one thread.
///
/// Each method checks its arguments and borrows its buffers (writes mutably) until the group
/// runs; [`run`](Group::run) issues `ncclGroupStart`, every call in order, and `ncclGroupEnd`,
/// with the buffers' earlier uses waited for before and their new uses recorded after the end
/// (when NCCL enqueues the work). Dropping a group that has not run issues nothing. One buffer
/// may appear on one stream only.
///
/// ```no_run
/// use cuda_stream::nccl::{Communicator, Group};
/// use cuda_stream::{Context, DeviceBuffer, Device};
///
/// let comm = Communicator::init_all(&[Device::new(0)?])?.remove(0);
/// let ctx = comm.context().clone();
/// let stream = ctx.new_stream()?;
/// let x = DeviceBuffer::from_host(&ctx, &stream, &[7u32; 256])?;
/// let mut y = DeviceBuffer::<u32>::zeroed(&ctx, &stream, 256)?;
/// let mut g = Group::new();
/// g.send(&comm, &stream, &x, 0)?; // to this rank itself
/// g.recv(&comm, &stream, &mut y, 0)?;
/// g.run()?;
/// assert_eq!(y.to_vec(&stream)?, vec![7; 256]);
/// # Ok::<(), cuda_stream::Error>(())
/// ```
#[derive(Default)]
pub struct Group<'a> {
    /// The calls: the first four kept inline (a group of a few calls allocates nothing).
    plans: InlineList<Planned<'a>, 4>,
}

impl fmt::Debug for Group<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Group").field("calls", &self.len()).finish()
    }
}

impl<'a> Group<'a> {
    /// An empty group.
    pub fn new() -> Group<'a> {
        crate::nccl::phase!(start);
        Group {
            plans: InlineList::new(),
        }
    }

    /// How many calls the group holds.
    pub fn len(&self) -> usize {
        self.plans.len()
    }

    /// Whether the group holds no call.
    pub fn is_empty(&self) -> bool {
        self.plans.is_empty()
    }

    /// Adds [`Communicator::all_reduce`].
    pub fn all_reduce<T: NcclType>(
        &mut self,
        comm: &'a Communicator,
        stream: &'a impl Enqueue,
        send: &'a impl AsDeviceSlice<T>,
        recv: &'a mut impl AsDeviceSliceMut<T>,
        op: ReduceOp,
    ) -> Result<()> {
        let p = comm.plan_all_reduce(
            stream.enqueue_handle(),
            Some(span(send)),
            span_mut(recv),
            op,
        )?;
        self.plans.push(p);
        Ok(())
    }

    /// Adds [`Communicator::all_reduce_in_place`].
    pub fn all_reduce_in_place<T: NcclType>(
        &mut self,
        comm: &'a Communicator,
        stream: &'a impl Enqueue,
        buf: &'a mut impl AsDeviceSliceMut<T>,
        op: ReduceOp,
    ) -> Result<()> {
        let p = comm.plan_all_reduce(stream.enqueue_handle(), None, span_mut(buf), op)?;
        self.plans.push(p);
        Ok(())
    }

    /// Adds [`Communicator::broadcast_in_place`].
    pub fn broadcast_in_place<T: NcclType>(
        &mut self,
        comm: &'a Communicator,
        stream: &'a impl Enqueue,
        buf: &'a mut impl AsDeviceSliceMut<T>,
        root: usize,
    ) -> Result<()> {
        let p = comm.plan_broadcast(stream.enqueue_handle(), None, span_mut(buf), root)?;
        self.plans.push(p);
        Ok(())
    }

    /// Adds [`Communicator::all_gather`].
    pub fn all_gather<T: NcclType>(
        &mut self,
        comm: &'a Communicator,
        stream: &'a impl Enqueue,
        send: &'a impl AsDeviceSlice<T>,
        recv: &'a mut impl AsDeviceSliceMut<T>,
    ) -> Result<()> {
        let p = comm.plan_all_gather(stream.enqueue_handle(), span(send), span_mut(recv))?;
        self.plans.push(p);
        Ok(())
    }

    /// Adds [`Communicator::reduce_scatter`].
    pub fn reduce_scatter<T: NcclType>(
        &mut self,
        comm: &'a Communicator,
        stream: &'a impl Enqueue,
        send: &'a impl AsDeviceSlice<T>,
        recv: &'a mut impl AsDeviceSliceMut<T>,
        op: ReduceOp,
    ) -> Result<()> {
        let p =
            comm.plan_reduce_scatter(stream.enqueue_handle(), span(send), span_mut(recv), op)?;
        self.plans.push(p);
        Ok(())
    }

    /// Adds [`Communicator::send`].
    pub fn send<T: NcclType>(
        &mut self,
        comm: &'a Communicator,
        stream: &'a impl Enqueue,
        buf: &'a impl AsDeviceSlice<T>,
        peer: usize,
    ) -> Result<()> {
        let p = comm.plan_send(stream.enqueue_handle(), span(buf), peer)?;
        self.plans.push(p);
        Ok(())
    }

    /// Adds [`Communicator::recv`].
    pub fn recv<T: NcclType>(
        &mut self,
        comm: &'a Communicator,
        stream: &'a impl Enqueue,
        buf: &'a mut impl AsDeviceSliceMut<T>,
        peer: usize,
    ) -> Result<()> {
        let p = comm.plan_recv(stream.enqueue_handle(), span_mut(buf), peer)?;
        self.plans.push(p);
        Ok(())
    }

    /// Issues the calls as one NCCL group (nothing for an empty group).
    pub fn run(mut self) -> Result<()> {
        if self.plans.is_empty() {
            return Ok(());
        }
        crate::nccl::phase!(0);
        let out = issue(self.plans.as_mut_slice(), true);
        crate::nccl::phase!(7);
        out
    }
}

/// Runs `build` on a new [`Group`], then the group: `nccl::group(|g| { g.send(..)?;
/// g.recv(..) })`. If `build` fails nothing is issued.
pub fn group<'a>(build: impl FnOnce(&mut Group<'a>) -> Result<()>) -> Result<()> {
    let mut g = Group::new();
    build(&mut g)?;
    g.run()
}
