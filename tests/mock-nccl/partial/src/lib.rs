//! An "NCCL" that exports `ncclGetVersion` (2.27.7) and `ncclGetUniqueId` only: loading it
//! works, and every other function is a missing symbol.

use std::ffi::c_int;

/// `ncclGetVersion`: 22707.
///
/// # Safety
///
/// `version` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGetVersion(version: *mut c_int) -> u32 {
    if version.is_null() {
        return 4;
    }
    // SAFETY: non-null; the caller's contract makes it writable.
    unsafe { version.write(22707) };
    0
}

/// `ncclGetUniqueId`: zeroes.
///
/// # Safety
///
/// `id` is null or valid for a write of 128 bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGetUniqueId(id: *mut [u8; 128]) -> u32 {
    if id.is_null() {
        return 4;
    }
    // SAFETY: as above.
    unsafe { id.write([0; 128]) };
    0
}
