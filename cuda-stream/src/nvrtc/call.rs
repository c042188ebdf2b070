//! The NVRTC chokepoint: an `nvrtcResult` becomes a `Result` naming the call, and a function
//! NVRTC lacks (or NVRTC itself missing) an error value naming the call; and what the loaded
//! NVRTC says about itself ([`version`]).
//!
//! NVRTC makes no CUDA call (it needs no driver and no GPU), so unlike the driver's and NCCL's
//! chokepoints this one does not refuse to run inside a host function.

use crate::base::error::{Error, Result};
use crate::ffi::nvrtc::{Nvrtc, nvrtcResult};

/// `NVRTC_SUCCESS` is `Ok`, anything else an [`Error::Nvrtc`] naming `call`.
#[inline]
pub(crate) fn nvrtc_check(code: nvrtcResult, call: &'static str) -> Result<()> {
    if code == nvrtcResult::NVRTC_SUCCESS {
        Ok(())
    } else {
        Err(Error::Nvrtc { call, code })
    }
}

/// The process-wide NVRTC for a call of `call`, or the error naming `call`.
#[inline]
pub(crate) fn nvrtc(call: &'static str) -> Result<&'static Nvrtc> {
    Nvrtc::global().map_err(|source| Error::NvrtcLoad { call, source })
}

/// The process-wide NVRTC's function `$f`, or (returned from the enclosing function) the error
/// saying why it is unavailable.
macro_rules! nvrtc_fn {
    ($f:ident) => {
        match $crate::nvrtc::call::nvrtc(stringify!($f)).and_then(|n| {
            n.$f()
                .map_err(|source| $crate::base::error::Error::NvrtcLoad {
                    call: stringify!($f),
                    source,
                })
        }) {
            Ok(f) => f,
            Err(e) => return Err(e),
        }
    };
}
pub(crate) use nvrtc_fn;

/// The version of the process-wide NVRTC (`nvrtcVersion`: major, minor), loading it if need be.
///
/// ```no_run
/// let (major, minor) = cuda_stream::nvrtc::version()?;
/// println!("NVRTC {major}.{minor}");
/// # Ok::<(), cuda_stream::Error>(())
/// ```
pub fn version() -> Result<(i32, i32)> {
    Ok(nvrtc("nvrtcVersion")?.version())
}
