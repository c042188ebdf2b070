//! The values NCCL calls take: element types ([`NcclType`]), reduction operators
//! ([`ReduceOp`]), the id that joins ranks ([`NcclId`]), and NCCL's version.

use std::fmt;

use crate::base::error::{Error, Result};
use crate::base::plain_data::DeviceCopy;
use crate::ffi::nccl::{ncclDataType_t, ncclRedOp_t, ncclUniqueId};
use crate::nccl::call::{nccl, nccl_check, nccl_fn};

/// An element type NCCL reduces and moves: its `ncclDataType_t`.
///
/// # Safety
///
/// `DATATYPE` must describe `Self` exactly (size and representation): NCCL reads and writes
/// device memory of `count * size_of::<Self>()` bytes by it.
pub unsafe trait NcclType: DeviceCopy {
    /// The NCCL datatype of `Self`.
    const DATATYPE: ncclDataType_t;
}

macro_rules! nccl_types {
    ($($t:ty => $d:ident),* $(,)?) => {$(
        // SAFETY: NCCL's datatype of this size and representation.
        unsafe impl NcclType for $t {
            const DATATYPE: ncclDataType_t = ncclDataType_t::$d;
        }
    )*};
}

nccl_types!(
    i8 => ncclInt8, u8 => ncclUint8, i32 => ncclInt32, u32 => ncclUint32, i64 => ncclInt64,
    u64 => ncclUint64, f32 => ncclFloat32, f64 => ncclFloat64,
);

/// A reduction operator of [`all_reduce`](crate::nccl::Communicator::all_reduce) and
/// [`reduce_scatter`](crate::nccl::Communicator::reduce_scatter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// `ncclSum`.
    Sum,
    /// `ncclProd`.
    Prod,
    /// `ncclMax`.
    Max,
    /// `ncclMin`.
    Min,
    /// `ncclAvg` (NCCL 2.10+).
    Avg,
}

impl ReduceOp {
    pub(crate) fn raw(self) -> ncclRedOp_t {
        match self {
            ReduceOp::Sum => ncclRedOp_t::ncclSum,
            ReduceOp::Prod => ncclRedOp_t::ncclProd,
            ReduceOp::Max => ncclRedOp_t::ncclMax,
            ReduceOp::Min => ncclRedOp_t::ncclMin,
            ReduceOp::Avg => ncclRedOp_t::ncclAvg,
        }
    }
}

/// The id that joins the ranks of one communicator (`ncclUniqueId`, 128 bytes): made once by
/// [`NcclId::new`] (in the process of rank 0, which must then take part), handed to every rank
/// as bytes ([`as_bytes`](NcclId::as_bytes) / [`from_bytes`](NcclId::from_bytes)) through a
/// file, a pipe or the network.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct NcclId(ncclUniqueId);

impl fmt::Debug for NcclId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("NcclId(..)")
    }
}

impl NcclId {
    /// The number of bytes of an id.
    pub const BYTES: usize = 128;

    /// A new id (`ncclGetUniqueId`): NCCL's bootstrap root starts listening in this process.
    pub fn new() -> Result<NcclId> {
        let f = nccl_fn!(ncclGetUniqueId);
        let mut id = ncclUniqueId::default();
        // SAFETY: `id` is a valid out-pointer.
        nccl_check(unsafe { f(&mut id) }, "ncclGetUniqueId")?;
        Ok(NcclId(id))
    }

    /// The id as bytes, to send to the other ranks.
    pub fn as_bytes(&self) -> &[u8; NcclId::BYTES] {
        // SAFETY: `ncclUniqueId` is `[c_char; 128]` in a `repr(C)` struct: 128 plain bytes.
        unsafe { &*(&self.0 as *const ncclUniqueId).cast::<[u8; NcclId::BYTES]>() }
    }

    /// An id from the bytes [`as_bytes`](NcclId::as_bytes) gave (in any process); any other
    /// length is [`Error::InvalidArgument`]. NCCL checks the contents when a rank joins.
    pub fn from_bytes(bytes: &[u8]) -> Result<NcclId> {
        let bytes: &[u8; NcclId::BYTES] = bytes.try_into().map_err(|_| Error::InvalidArgument {
            reason: format!(
                "an NCCL id is {} bytes, {} given",
                NcclId::BYTES,
                bytes.len()
            ),
        })?;
        let mut id = ncclUniqueId::default();
        for (d, s) in id.internal.iter_mut().zip(bytes) {
            *d = *s as _;
        }
        Ok(NcclId(id))
    }

    pub(crate) fn raw(&self) -> ncclUniqueId {
        self.0
    }
}

/// The NCCL version of the process-wide library (`ncclGetVersion`: 22707 for 2.27.7), loading
/// it if needed.
pub fn nccl_version() -> Result<i32> {
    Ok(nccl("ncclGetVersion")?.version())
}
