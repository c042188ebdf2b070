//! The process-wide driver ([`Driver::global`]) and its own slots, which the C-shaped functions
//! and `fns` read.

use std::ffi::c_void;
use std::ptr;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicPtr, Ordering};

use super::{Driver, LoadError};
use crate::generated::symbols::SYMBOL_COUNT;

impl Driver {
    /// The process-wide driver, opened by [`Driver::open_default`] on first use (so the
    /// environment's `CUDA_SYS_LIBCUDA` and `CUDA_SYS_ABI_VERSION` apply; why that is safe is
    /// said there). A failure is remembered: every later call returns the same error.
    pub fn global() -> Result<&'static Driver, LoadError> {
        GLOBAL
            .get_or_init(Driver::open_default)
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The process-wide driver if it has been loaded already; never loads it.
    pub fn global_if_loaded() -> Option<&'static Driver> {
        GLOBAL.get().and_then(|r| r.as_ref().ok())
    }

    /// Makes `driver` the process-wide driver, if none has been loaded (or tried) yet; otherwise
    /// hands it back. Lets a program pick the library and options explicitly before anything
    /// else loads one (opening a library by path is `unsafe`: [`Driver::open`]).
    pub fn install_global(driver: Driver) -> Result<(), Driver> {
        let mut slot = Some(driver);
        GLOBAL.get_or_init(|| match slot.take() {
            Some(d) => Ok(d),
            None => Err(LoadError::NotFound { tried: Vec::new() }),
        });
        match slot {
            None => Ok(()),
            Some(d) => Err(d),
        }
    }
}

static GLOBAL: OnceLock<Result<Driver, LoadError>> = OnceLock::new();

/// The process-wide driver's slots: non-null once resolved, so the hot path is one load.
static GLOBAL_SLOTS: [AtomicPtr<c_void>; SYMBOL_COUNT] =
    [const { AtomicPtr::new(ptr::null_mut()) }; SYMBOL_COUNT];

/// The process-wide driver's pointer for slot `index`.
#[inline(always)]
pub(crate) fn global_symbol(index: usize) -> Result<*mut c_void, LoadError> {
    let p = GLOBAL_SLOTS[index].load(Ordering::Acquire);
    if p.is_null() {
        global_symbol_slow(index)
    } else {
        Ok(p)
    }
}

#[cold]
#[inline(never)]
fn global_symbol_slow(index: usize) -> Result<*mut c_void, LoadError> {
    let p = Driver::global()?.symbol(index)?;
    GLOBAL_SLOTS[index].store(p, Ordering::Release);
    Ok(p)
}
