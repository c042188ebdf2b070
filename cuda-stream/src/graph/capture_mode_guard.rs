//! The capture-interaction-mode guard: [`exchange_capture_mode`] sets the calling thread's mode
//! (`cuThreadExchangeStreamCaptureMode`) until the [`CaptureModeGuard`] drops.

use std::fmt;

use crate::base::capture_mode::CaptureMode;
use crate::base::error::{Result, check, driver_fn};
use crate::ffi;
use std::marker::PhantomData;

/// Sets the calling thread's capture interaction mode until the guard drops
/// (`cuThreadExchangeStreamCaptureMode`), which then restores the previous one. For example,
/// [`CaptureMode::Relaxed`] lets this thread make calls that a global-mode capture elsewhere
/// would otherwise refuse (and be invalidated by); the caller vouches that they do not break it.
/// Guards nest; drop them in reverse order.
pub fn exchange_capture_mode(mode: CaptureMode) -> Result<CaptureModeGuard> {
    let previous = exchange(mode.raw())?;
    Ok(CaptureModeGuard {
        previous,
        _not_send: PhantomData,
    })
}

fn exchange(mode: ffi::CUstreamCaptureMode) -> Result<ffi::CUstreamCaptureMode> {
    let f = driver_fn!(cuThreadExchangeStreamCaptureMode);
    let mut m = mode;
    // SAFETY: `m` is a valid in/out pointer.
    check(unsafe { f(&mut m) }, "cuThreadExchangeStreamCaptureMode")?;
    Ok(m)
}

/// Keeps a capture interaction mode on this thread; see [`exchange_capture_mode`]. Not `Send`:
/// the mode belongs to the thread that set it.
#[must_use = "the mode is set only while the guard lives"]
pub struct CaptureModeGuard {
    previous: ffi::CUstreamCaptureMode,
    _not_send: PhantomData<*const ()>,
}

impl fmt::Debug for CaptureModeGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaptureModeGuard")
            .field("previous", &self.previous())
            .finish()
    }
}

impl CaptureModeGuard {
    /// The mode the thread had before, which the guard restores (`None` for a value this crate
    /// does not know).
    pub fn previous(&self) -> Option<CaptureMode> {
        CaptureMode::from_raw(self.previous)
    }
}

impl Drop for CaptureModeGuard {
    fn drop(&mut self) {
        let _ = exchange(self.previous);
    }
}
