//! Driver functions with several ABIs of the same meaning: each operation uses the newest one the
//! driver has, chosen once.
//!
//! cuda-stream-sys binds every ABI of such a function on its own (`cuEventElapsedTime_v12080`, the one
//! `cuEventElapsedTime` means, and `cuEventElapsedTime_v2000`) and reports an ABI newer than the
//! driver (or than `CUDA_SYS_ABI_VERSION`) as missing. [`Newest`] tries them newest first on the
//! first call and remembers the outcome, so a later call costs one load, whichever ABI won.

use std::sync::OnceLock;

use crate::base::error::{Error, Result, refuse_in_host_fn};

/// The accessor of one ABI of a driver function (`ffi::fns::cuEventElapsedTime_v2000`).
pub(crate) type Abi<F> = fn() -> std::result::Result<F, ffi::LoadError>;

/// The newest of a driver function's ABIs that the process-wide driver has, looked up once.
pub(crate) struct Newest<F: 'static> {
    choice: OnceLock<std::result::Result<F, ffi::LoadError>>,
}

impl<F: Copy> Newest<F> {
    pub(crate) const fn new() -> Newest<F> {
        Newest {
            choice: OnceLock::new(),
        }
    }

    /// The first of `abis` (newest first) that resolves; when none does, the oldest one's error
    /// (which names the least the driver would need) as the error of `call`. Refused inside a
    /// host function, as every lookup is (`base::error::lookup`): the pointer kept here must not
    /// bypass that check.
    #[inline]
    pub(crate) fn get(&self, call: &'static str, abis: &[Abi<F>]) -> Result<F> {
        refuse_in_host_fn(call)?;
        match self.choice.get_or_init(|| first(abis)) {
            Ok(f) => Ok(*f),
            Err(e) => Err(Error::from_load(e.clone(), call)),
        }
    }
}

#[cold]
#[inline(never)]
fn first<F>(abis: &[Abi<F>]) -> std::result::Result<F, ffi::LoadError> {
    let mut last = None;
    for abi in abis {
        match abi() {
            Ok(f) => return Ok(f),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or(ffi::LoadError::NotFound { tried: Vec::new() }))
}
