//! The NCCL chokepoint: an `ncclResult_t` becomes a `Result` naming the call, and a function
//! NCCL lacks (or NCCL itself missing) an error value naming the call; and the binding of a
//! communicator's context around NCCL calls ([`bind_for_nccl`]).

use crate::base::error::{Error, Result, refuse_in_host_fn};
use crate::driver::context::{Bound, bind_found, current_context_raw};
use crate::ffi;
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

/// Function `$f` of the NCCL `$n` (a `&Nccl` the caller looked up through [`nccl`]), or
/// (returned from the enclosing function) the error saying it is missing.
macro_rules! nccl_fn_of {
    ($n:expr, $f:ident) => {
        match $n.$f() {
            Ok(f) => f,
            Err(source) => {
                return Err($crate::base::error::Error::NcclLoad {
                    call: stringify!($f),
                    source,
                });
            }
        }
    };
}
pub(crate) use nccl_fn_of;

/// The process-wide NCCL's function `$f`, or the error saying why it is unavailable.
macro_rules! nccl_fn {
    ($f:ident) => {
        match $crate::nccl::call::nccl(stringify!($f)) {
            Ok(n) => $crate::nccl::call::nccl_fn_of!(n, $f),
            Err(e) => return Err(e),
        }
    };
}
pub(crate) use nccl_fn;

/// A communicator's context bound for NCCL calls (see `plan::issue` for why): on drop the
/// binding is undone, and if NCCL left another context current than the caller had, the
/// caller's is made current again (`KeepCurrent`). Measured on two H100s with NCCL 2.28.9:
/// NCCL's first initialisation in a process (`ncclCommInitAll` from a thread with nothing
/// current, its first device's context bound) left device 0's primary context current after the
/// binding was undone; later calls leave the binding as they found it.
pub(crate) struct NcclBound {
    // Dropped first: the binding is undone before the caller's context is checked.
    _bound: Bound,
    _keep: KeepCurrent,
}

impl NcclBound {
    /// After collectives (or a group of them) that NCCL issued without an error: NCCL made each
    /// communicator's device current in turn and then the device it found current again, which
    /// with the bound context current (a primary context, as every `Context` is) makes that same
    /// context current again (measured on two H100s with NCCL 2.28.9: calls after the first
    /// initialisation leave the binding as they found it). So the caller's context needs no
    /// check: only the binding is undone. An error may have left NCCL between devices, and
    /// keeps the check.
    #[inline]
    pub(crate) fn left_as_found(&mut self) {
        self._keep.forget();
    }
}

/// Binds `ctx` for NCCL calls until the guard drops (see [`NcclBound`]).
pub(crate) fn bind_for_nccl(ctx: ffi::CUcontext) -> Result<NcclBound> {
    let before = current_context_raw()?;
    Ok(NcclBound {
        _keep: KeepCurrent::found(before),
        _bound: bind_found(before, ctx)?,
    })
}

/// The calling thread's current context, kept: on drop, if other code (NCCL, the CUDA runtime)
/// left another current, the one found is made current again, or with none found, what that
/// code pushed is popped (setting the top to nothing left another context current on two
/// H200s). Without a driver it does nothing.
pub(crate) struct KeepCurrent {
    before: Option<ffi::CUcontext>,
    // Not Send: the context stack is the thread's.
    _not_send: std::marker::PhantomData<*const ()>,
}

fn current_raw() -> Option<ffi::CUcontext> {
    let f = ffi::fns::cuCtxGetCurrent().ok()?;
    let mut cur = std::ptr::null_mut();
    // SAFETY: `cur` is a valid out-pointer.
    (unsafe { f(&mut cur) } == ffi::CUresult::CUDA_SUCCESS).then_some(cur)
}

impl KeepCurrent {
    /// Remembers what is current now.
    pub(crate) fn new() -> KeepCurrent {
        KeepCurrent {
            before: current_raw(),
            _not_send: std::marker::PhantomData,
        }
    }

    /// Checks nothing on drop.
    #[inline]
    pub(crate) fn forget(&mut self) {
        self.before = None;
    }

    /// Keeps `before`, which the caller has just read.
    pub(crate) fn found(before: ffi::CUcontext) -> KeepCurrent {
        KeepCurrent {
            before: Some(before),
            _not_send: std::marker::PhantomData,
        }
    }
}

impl Drop for KeepCurrent {
    fn drop(&mut self) {
        let Some(before) = self.before else { return };
        for _ in 0..8 {
            match current_raw() {
                Some(now) if now != before => {}
                _ => return,
            }
            if before.is_null() {
                let Ok(f) = ffi::fns::cuCtxPopCurrent() else {
                    return;
                };
                let mut popped = std::ptr::null_mut();
                // SAFETY: a valid out-pointer; pops what other code left on this thread's stack.
                if unsafe { f(&mut popped) } != ffi::CUresult::CUDA_SUCCESS {
                    return;
                }
            } else {
                if let Ok(f) = ffi::fns::cuCtxSetCurrent() {
                    // SAFETY: `before` was current on this thread when the guard was made, and
                    // its holder keeps it alive for the guard's life (no code this guard covers
                    // destroys a context of the caller's).
                    let _ = unsafe { f(before) };
                }
                return;
            }
        }
    }
}
