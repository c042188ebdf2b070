//! Values that describe graph capture: how a capture treats the other threads' calls
//! ([`CaptureMode`]) and where a stream stands ([`CaptureStatus`]). No driver calls; the error
//! type names them, so they sit at the bottom with it.

use std::fmt;

use crate::ffi;

/// How a capture treats calls that could break it ("potentially unsafe" calls such as a
/// synchronising allocation), made on the capturing thread or on others: the driver's
/// `CUstreamCaptureMode`, passed to `cuStreamBeginCapture` and `cuThreadExchangeStreamCaptureMode`.
///
/// A call that a capture prohibits fails with `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` and
/// invalidates the capture, which then ends with [`Error::CaptureFailed`](crate::Error) and no
/// graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CaptureMode {
    /// The driver's default: prohibited calls are refused on the capturing thread and, while any
    /// global-mode capture is under way, on every thread whose own mode is global.
    Global,
    /// Prohibited calls are refused on the capturing thread only. What PyTorch uses, and the
    /// mode to choose unless another thread must be stopped from breaking the capture.
    ThreadLocal,
    /// Nothing is refused: the caller vouches that no call made during the capture breaks it.
    Relaxed,
}

impl CaptureMode {
    /// The driver's value.
    pub fn raw(self) -> ffi::CUstreamCaptureMode {
        use ffi::CUstreamCaptureMode as M;
        match self {
            CaptureMode::Global => M::CU_STREAM_CAPTURE_MODE_GLOBAL,
            CaptureMode::ThreadLocal => M::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            CaptureMode::Relaxed => M::CU_STREAM_CAPTURE_MODE_RELAXED,
        }
    }

    /// The mode a driver value stands for; `None` for a value this crate does not know.
    pub fn from_raw(raw: ffi::CUstreamCaptureMode) -> Option<CaptureMode> {
        use ffi::CUstreamCaptureMode as M;
        match raw {
            M::CU_STREAM_CAPTURE_MODE_GLOBAL => Some(CaptureMode::Global),
            M::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL => Some(CaptureMode::ThreadLocal),
            M::CU_STREAM_CAPTURE_MODE_RELAXED => Some(CaptureMode::Relaxed),
            _ => None,
        }
    }
}

/// Whether a stream is being captured into a graph (`cuStreamGetCaptureInfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CaptureStatus {
    /// Work enqueued on the stream runs.
    None,
    /// Work enqueued on the stream is recorded into the graph of capture `id` (unique in the
    /// process) instead of running.
    Active {
        /// The capture's id.
        id: u64,
    },
    /// Capture `id` was broken by a prohibited call; it ends with an error and no graph.
    Invalidated {
        /// The capture's id.
        id: u64,
    },
}

impl CaptureStatus {
    /// The status the driver reports: `raw` with the capture's `id` (ignored for `None`).
    pub fn from_raw(raw: ffi::CUstreamCaptureStatus, id: u64) -> CaptureStatus {
        use ffi::CUstreamCaptureStatus as S;
        match raw {
            S::CU_STREAM_CAPTURE_STATUS_NONE => CaptureStatus::None,
            S::CU_STREAM_CAPTURE_STATUS_ACTIVE => CaptureStatus::Active { id },
            // INVALIDATED, and anything a newer driver may add: not capturing usefully.
            _ => CaptureStatus::Invalidated { id },
        }
    }

    /// Whether the stream is in a capture (active or invalidated), so that its work is not run.
    pub fn is_capturing(self) -> bool {
        !matches!(self, CaptureStatus::None)
    }

    /// The capture's id, if there is a capture.
    pub fn id(self) -> Option<u64> {
        match self {
            CaptureStatus::None => None,
            CaptureStatus::Active { id } | CaptureStatus::Invalidated { id } => Some(id),
        }
    }
}

impl fmt::Display for CaptureStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CaptureStatus::None => f.write_str("not capturing"),
            CaptureStatus::Active { id } => write!(f, "capture {id} active"),
            CaptureStatus::Invalidated { id } => write!(f, "capture {id} invalidated"),
        }
    }
}
