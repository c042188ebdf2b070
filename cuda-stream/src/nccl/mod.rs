//! NCCL collectives on this crate's streams (cargo feature `nccl`).
//!
//! NCCL is opened at run time (`libnccl.so.2`, or the file named by `CUDA_SYS_LIBNCCL`): a
//! machine without it gets [`Error::NcclLoad`](crate::Error::NcclLoad) from the first call,
//! never a panic. A [`Communicator`] is one rank on one device, made for all the GPUs of one
//! process by [`Communicator::init_all`], or one per process by [`Communicator::init_rank`] with
//! an [`NcclId`] that rank 0 makes and the caller passes to the others as bytes (a file, a pipe,
//! a socket: the same code spans machines).
//!
//! Collectives ([`all_reduce`](Communicator::all_reduce), [`broadcast`](Communicator::broadcast),
//! [`all_gather`](Communicator::all_gather), [`reduce_scatter`](Communicator::reduce_scatter),
//! [`send`](Communicator::send) / [`recv`](Communicator::recv)) take any [`Enqueue`](crate::Enqueue)
//! (a stream or a graph capture) and [`DeviceBuffer`](crate::DeviceBuffer)s of an [`NcclType`]:
//! each buffer records its use on the stream like any other operation, so a collective waits for
//! the kernel that wrote its input, and a later read waits for the collective. Several calls made
//! as one NCCL group (`ncclGroupStart` / `ncclGroupEnd`: send and recv pairs, one call per
//! communicator of a process) go through a [`Group`], which issues them together when it runs.
//! An error a communicator reports asynchronously (`ncclCommGetAsyncError`) is returned by its
//! next call; a communicator is destroyed on `Drop` (aborted if it has such an error), once no
//! graph holds work of it: a collective captured into a graph ties its buffers and its
//! communicator to the graph, so replays never run on freed memory or a destroyed communicator.
//!
//! NCCL works on the CUDA runtime's current device, and makes the device it found current again
//! after its work (device 0, where no context was current). Every call of this module runs with
//! its communicator's context bound (a group with its first call's), so NCCL finds the right
//! device current and the calling thread's current context is the caller's afterwards.
//!
//! ```no_run
//! use cuda_stream::nccl::{Communicator, NcclId, ReduceOp};
//! use cuda_stream::{Context, DeviceBuffer};
//!
//! // Two processes, one GPU each: rank 0 makes the id and hands its bytes to rank 1.
//! let (rank, nranks) = (0usize, 2usize);
//! let id = if rank == 0 { NcclId::new()? } else { NcclId::from_bytes(&[0u8; 128])? };
//! // ... write `id.as_bytes()` to a file or pipe; rank 1 reads it with `NcclId::from_bytes` ...
//! let ctx = Context::primary(0)?;
//! let comm = Communicator::init_rank(&ctx, nranks, &id, rank)?;
//! let stream = ctx.new_stream()?;
//! let mut x = DeviceBuffer::from_host(&ctx, &stream, &[rank as f32 + 1.0; 1024])?;
//! comm.all_reduce_in_place(&stream, &mut x, ReduceOp::Sum)?;
//! assert_eq!(x.to_vec(&stream)?, vec![3.0; 1024]);
//! # Ok::<(), cuda_stream::Error>(())
//! ```

// Bottom to top: each module imports only the ones above it (checked by tests/layers.rs).
pub(crate) mod call;

pub(crate) mod types;

pub(crate) mod comm;

pub(crate) mod plan;

pub(crate) mod collectives;

pub(crate) mod group;

#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub mod phases;

/// Marks the end of phase `$i` of a group's host time (`phases`; nothing without `test-hooks`).
macro_rules! phase {
    (start) => {
        #[cfg(feature = "test-hooks")]
        $crate::nccl::phases::start();
    };
    ($i:expr) => {
        #[cfg(feature = "test-hooks")]
        $crate::nccl::phases::mark($i);
    };
}
pub(crate) use phase;

pub use comm::Communicator;
pub use group::{Group, group};
pub use types::{NcclId, NcclType, ReduceOp, nccl_version};
