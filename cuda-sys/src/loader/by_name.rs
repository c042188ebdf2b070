//! [`ByName`]: the function pointers of a library with one ABI per exported name (NCCL, NVRTC),
//! each looked up by its name on first use and cached, found or missing.

use std::ffi::{CStr, c_void};
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

/// A slot's mark for a symbol looked up and not found.
const MISSING: *mut c_void = ptr::dangling_mut::<c_void>();

/// One slot per function of a table of exported names: null until looked up, then the
/// function's address or [`MISSING`].
pub(super) struct ByName {
    slots: Box<[AtomicPtr<c_void>]>,
}

impl ByName {
    /// Slots for `count` functions, none looked up yet.
    pub(super) fn new(count: usize) -> ByName {
        ByName {
            slots: (0..count)
                .map(|_| AtomicPtr::new(ptr::null_mut()))
                .collect(),
        }
    }

    /// The address of function `i` of `names` in `lib`, looked up on first use; `None` if `lib`
    /// does not export it.
    #[inline]
    pub(super) fn get(
        &self,
        lib: &libloading::Library,
        names: &[&CStr],
        i: usize,
    ) -> Option<*mut c_void> {
        let p = self.slots[i].load(Ordering::Acquire);
        if !p.is_null() && p != MISSING {
            return Some(p);
        }
        self.resolve(lib, names[i], i, p)
    }

    #[cold]
    fn resolve(
        &self,
        lib: &libloading::Library,
        name: &CStr,
        i: usize,
        cached: *mut c_void,
    ) -> Option<*mut c_void> {
        if cached == MISSING {
            return None;
        }
        // SAFETY: only the address is taken; its type is the binding's, applied by the caller.
        let found = unsafe { lib.get::<*mut c_void>(name.to_bytes_with_nul()) }
            .ok()
            .map(|s| *s)
            .filter(|p| !p.is_null());
        self.slots[i].store(found.unwrap_or(MISSING), Ordering::Release);
        found
    }
}
