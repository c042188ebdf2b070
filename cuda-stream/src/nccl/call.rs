//! The NCCL chokepoint: an `ncclResult_t` becomes a `Result` naming the call, and a function
//! NCCL lacks (or NCCL itself missing) an error value naming the call.

use crate::base::error::{Error, Result, refuse_in_host_fn};
use crate::ffi::nccl::{Nccl, ncclResult_t};

/// `ncclSuccess` is `Ok`, anything else an [`Error::Nccl`] naming `call`.
#[inline(always)]
pub(crate) fn nccl_check(code: ncclResult_t, call: &'static str) -> Result<()> {
    if code == ncclResult_t::ncclSuccess {
        Ok(())
    } else {
        Err(Error::Nccl { call, code })
    }
}

/// The process-wide NCCL for a call of `call`: the chokepoint every NCCL function is looked up
/// through (by [`nccl_fn!`] and the drop paths). Inside a host function, where NCCL's calls
/// would call CUDA, [`Error::InHostFunction`] before anything reaches NCCL (see
/// `base::error::lookup`); else the library, or the error naming `call`.
#[inline]
pub(crate) fn nccl(call: &'static str) -> Result<&'static Nccl> {
    refuse_in_host_fn(call)?;
    Nccl::global().map_err(|source| Error::NcclLoad { call, source })
}

/// The process-wide NCCL's function `$f`, or the error saying why it is unavailable.
macro_rules! nccl_fn {
    ($f:ident) => {
        match $crate::nccl::call::nccl(stringify!($f)).and_then(|n| {
            n.$f()
                .map_err(|source| $crate::base::error::Error::NcclLoad {
                    call: stringify!($f),
                    source,
                })
        }) {
            Ok(f) => f,
            Err(e) => return Err(e),
        }
    };
}
pub(crate) use nccl_fn;
