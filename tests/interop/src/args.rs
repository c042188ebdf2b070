//! Checks of plain arguments: element counts, and out-pointers written only when not null.

use crate::error::{CSI_ERR_INVALID_ARGUMENT, Fail};

/// Writes through `out` if it is not null.
///
/// # Safety
/// `out` must be null or valid for a write of `T`.
pub(crate) unsafe fn write_out<T>(out: *mut T, value: T, what: &str) -> Result<(), Fail> {
    if out.is_null() {
        return Err(Fail::new(
            CSI_ERR_INVALID_ARGUMENT,
            format!("{what} is a null pointer"),
        ));
    }
    // SAFETY: `out` is not null and the caller promises it is valid for a write.
    unsafe { out.write(value) };
    Ok(())
}

pub(crate) fn element_count(n: u64) -> Result<usize, Fail> {
    usize::try_from(n)
        .ok()
        .filter(|n| n.checked_mul(4).is_some())
        .ok_or_else(|| {
            Fail::new(
                CSI_ERR_INVALID_ARGUMENT,
                format!("{n} elements is too many"),
            )
        })
}
