//! The error type and the one chokepoint that turns a `CUresult` into a `Result`.

use std::fmt;

use crate::base::capture_mode::CaptureStatus;
use crate::base::host_fn_flag::in_host_fn;
use crate::base::params::ArgMismatch;
use crate::base::priority::PriorityRange;
use crate::ffi;

/// What can go wrong in `cuda-stream`.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A driver call returned an error code.
    #[error("{call}: {}", ffi::result_name(code.0))]
    Driver {
        /// The driver function, as C code names it (`cuStreamCreate`).
        call: &'static str,
        /// What the driver returned; its `Display` is the driver's description.
        #[source]
        code: DriverCode,
    },
    /// The driver library could not be loaded.
    #[error("no usable CUDA driver")]
    Load(#[source] ffi::LoadError),
    /// The loaded driver lacks a function this operation needs (in every ABI this crate can use),
    /// or has it only in an ABI above the configured limit (`CUDA_SYS_ABI_VERSION`).
    #[error("{}", unsupported(call, *driver_version, source))]
    Unsupported {
        /// The missing driver function.
        call: &'static str,
        /// The loaded driver's version (`1000 * major + 10 * minor`), if known.
        driver_version: Option<i32>,
        /// The loader's account, with the version that introduced the function.
        #[source]
        source: ffi::LoadError,
    },
    /// A stream priority outside the context's range.
    #[error("stream priority {priority} is outside the context's range {range}")]
    InvalidPriority {
        /// The priority asked for.
        priority: i32,
        /// What the context supports.
        range: PriorityRange,
    },
    /// An event and a stream (or two objects) that must share a context do not.
    #[error("{what} belongs to another context")]
    ContextMismatch {
        /// What was mismatched, such as `the event`.
        what: &'static str,
    },
    /// A host function or callback enqueued on this stream panicked; the panic was caught on the
    /// driver's thread and is reported here.
    #[error("a host function on stream {stream:#x} panicked: {message}")]
    HostFnPanicked {
        /// The stream's raw handle.
        stream: usize,
        /// The panic message, when it was a string.
        message: String,
    },
    /// Elapsed time was asked of an event created without timing.
    #[error("the event was created with timing disabled")]
    TimingDisabled,
    /// Elapsed time was asked of an event that was never recorded.
    #[error("the event was never recorded")]
    NotRecorded,
    /// Elapsed time was asked before both events completed.
    #[error("the event has not completed")]
    NotCompleted,
    /// Elapsed time between two events where the end completed before the start.
    #[error("the end event completed {ms} ms before the start event")]
    NegativeElapsed {
        /// The driver's (negative) answer, in milliseconds.
        ms: f32,
    },
    /// A special default-stream value (0x0, 0x1, 0x2) was passed where a real stream handle is
    /// needed; use the context's `null_stream`, `legacy_stream` or `per_thread_stream`.
    #[error("{handle:#x} is a default-stream value, not a stream handle")]
    SpecialHandle {
        /// The value passed.
        handle: usize,
    },
    /// A null handle was passed where a handle is needed.
    #[error("null {what} handle")]
    NullHandle {
        /// What kind of handle.
        what: &'static str,
    },
    /// Event options that the driver rejects, such as interprocess with timing.
    #[error("invalid event options: {reason}")]
    InvalidEventOptions {
        /// Why.
        reason: &'static str,
    },
    /// A device ordinal past the number of devices.
    #[error("no CUDA device {ordinal} (this machine has {count})")]
    NoSuchDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// How many devices there are.
        count: usize,
    },
    /// An operation was asked for inside a host function, stream callback or graph host node
    /// run by this crate, where no CUDA call may be made (the driver forbids it, and a call can
    /// deadlock: a `synchronize` of the host function's own stream waits for itself). It was
    /// refused before anything reached the driver, naming the first driver function it needed,
    /// and failed as it would on that function's error. A destroy (`close`, `free`) was queued
    /// instead and is made later on an ordinary thread, as for a drop (see
    /// [`drain_deferred`](crate::drain_deferred)).
    #[error("{call} cannot be made inside a host function")]
    InHostFunction {
        /// The driver (or NCCL) function that was not called, such as `cuStreamSynchronize`,
        /// or the destroy that was queued, such as `cuStreamDestroy`.
        call: &'static str,
    },
    /// A `try_` operation that would have to wait for work in flight.
    #[error("{what} has not completed")]
    Busy {
        /// What is still running.
        what: &'static str,
    },
    /// A stream pool at its size limit has no free stream.
    #[error("the stream pool is exhausted ({limit} streams leased)")]
    PoolExhausted {
        /// The pool's limit.
        limit: usize,
    },
    /// The driver refused to load a module (`cuModuleLoadDataEx`); the JIT compiler's error log
    /// is the `source()`.
    #[error("{call}: {}", ffi::result_name(code.0))]
    ModuleLoad {
        /// The driver function (`cuModuleLoadDataEx`).
        call: &'static str,
        /// What the driver returned.
        code: DriverCode,
        /// What the JIT compiler (or the loader) wrote to its error log.
        #[source]
        log: JitLog,
    },
    /// A module has no kernel of this name (`cuModuleGetFunction` answered
    /// `CUDA_ERROR_NOT_FOUND`).
    #[error("the module has no kernel named `{name}`")]
    FunctionNotFound {
        /// The name asked for.
        name: String,
    },
    /// A module has no global variable of this name (`cuModuleGetGlobal` answered
    /// `CUDA_ERROR_NOT_FOUND`).
    #[error("the module has no global variable named `{name}`")]
    GlobalNotFound {
        /// The name asked for.
        name: String,
    },
    /// A launch configuration the kernel cannot run with, refused before the driver is called.
    #[error("invalid launch configuration: {reason}")]
    InvalidLaunch {
        /// Why.
        reason: String,
    },
    /// A launch's arguments do not match the kernel's parameters (their number, a size, or a
    /// float for an integer), refused before the driver is called.
    #[error("kernel `{kernel}` {mismatch}")]
    ArgumentMismatch {
        /// The kernel's name.
        kernel: String,
        /// How the arguments differ.
        mismatch: ArgMismatch,
    },
    /// A typed kernel asked of a kernel whose parameters are unknown ([`Function::params`] is
    /// `None`), so that its argument tuple cannot be checked: declare it with the `unsafe`
    /// [`Function::typed_unchecked`].
    ///
    /// [`Function::params`]: crate::Function::params
    /// [`Function::typed_unchecked`]: crate::Function::typed_unchecked
    #[error("the parameters of kernel `{kernel}` are unknown")]
    UnknownParameters {
        /// The kernel's name.
        kernel: String,
    },
    /// A launch attribute the driver or the device does not have, refused before the launch.
    #[error("launch attribute {attribute} is not supported: {reason}")]
    UnsupportedAttribute {
        /// The attribute, as the header names it (`CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION`).
        attribute: &'static str,
        /// Why (the driver's version, or what the device lacks).
        reason: String,
    },
    /// Host and device sides of a copy (or two buffers) of different lengths.
    #[error("length mismatch: {expected} elements expected, {actual} given")]
    LengthMismatch {
        /// The length of the destination (or of the buffer).
        expected: usize,
        /// The length given.
        actual: usize,
    },
    /// A view of a buffer ([`DeviceBuffer::slice`](crate::DeviceBuffer::slice) and the like)
    /// whose range does not lie inside it.
    #[error("range {start}..{end} is out of bounds of {len} values")]
    OutOfRange {
        /// The range's first value.
        start: usize,
        /// One past the range's last value.
        end: usize,
        /// How many values the buffer (or view) holds.
        len: usize,
    },
    /// An argument refused before any driver call, such as PTX text with a NUL byte.
    #[error("invalid argument: {reason}")]
    InvalidArgument {
        /// Why.
        reason: String,
    },
    /// A buffer operation that waits for the stream (`DeviceBuffer::to_vec`, `copy_to_host`,
    /// `copy_from_host`) or allocates (`DeviceBuffer::zeroed`, `from_host`), on a stream that is
    /// capturing a graph: waiting would break the capture, and a graph cannot replay an
    /// allocation. (`DeviceBuffer::fill` and `copy_from` only enqueue, and work in a capture.)
    #[error("{op} cannot be recorded into a graph capture (it allocates or waits for the stream)")]
    Capturing {
        /// The operation, such as `DeviceBuffer::fill`.
        op: &'static str,
    },
    /// This crate refused to make a driver call that would be unsound or is certain to fail,
    /// such as a run-once host function on a stream that is being captured (it would run on
    /// every replay of the graph).
    #[error("{call}: {reason}")]
    Refused {
        /// The driver function that was not called.
        call: &'static str,
        /// Why.
        reason: &'static str,
    },
    /// A capture ended without a graph: the driver refused to end it (an invalidated capture, a
    /// fork that was never joined, ...). The partial graph is destroyed and the stream is out of
    /// capture mode.
    #[error("{call} ({status}): {}", ffi::result_name(code.0))]
    CaptureFailed {
        /// The driver function that failed (`cuStreamEndCapture`).
        call: &'static str,
        /// The capture's status when it ended.
        status: CaptureStatus,
        /// What the driver returned.
        #[source]
        code: DriverCode,
    },
    /// An operation that needs a capture in progress on the stream found none, or found it
    /// invalidated (`DeviceBuffer::fill`, `copy_from` and `keep_alive_in` on a stream whose
    /// capture a prohibited call invalidated: nothing is enqueued or tied).
    #[error("the stream is not being captured ({status})")]
    NotCapturing {
        /// What the stream's status was.
        status: CaptureStatus,
    },
    /// `cuGraphExecUpdate` refused to update an executable graph from a graph, and said why.
    #[error("cuGraphExecUpdate refused the update: {}", update_reason(*result))]
    GraphUpdate {
        /// The driver's reason.
        result: ffi::CUgraphExecUpdateResult,
        /// The node of the new graph that could not be applied (a `CUgraphNode`), 0 if none.
        node: usize,
        /// The node of the executable graph it was compared with, 0 if none (always 0 before
        /// CUDA 12.0, whose `cuGraphExecUpdate` does not say).
        from_node: usize,
        /// What `cuGraphExecUpdate` returned (`CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE`).
        #[source]
        code: DriverCode,
    },
    /// An NCCL call returned an error (feature `nccl`), or a communicator reported an
    /// asynchronous error (`call` is then `ncclCommGetAsyncError`).
    #[cfg(feature = "nccl")]
    #[cfg_attr(docsrs, doc(cfg(feature = "nccl")))]
    #[error("{call}: {}", ffi::nccl::nccl_result_name(*code))]
    Nccl {
        /// The NCCL function, as C code names it (`ncclCommInitRank`).
        call: &'static str,
        /// What NCCL returned (or reported asynchronously).
        code: ffi::nccl::ncclResult_t,
    },
    /// NCCL could not be loaded, or lacks a function this operation needs (feature `nccl`).
    #[cfg(feature = "nccl")]
    #[cfg_attr(docsrs, doc(cfg(feature = "nccl")))]
    #[error("{call}: no usable NCCL")]
    NcclLoad {
        /// The NCCL function that was needed.
        call: &'static str,
        /// The loader's account: which files were tried, or which symbol is missing.
        #[source]
        source: ffi::nccl::NcclLoadError,
    },
    /// An NVRTC call returned an error (feature `nvrtc`).
    #[cfg(feature = "nvrtc")]
    #[cfg_attr(docsrs, doc(cfg(feature = "nvrtc")))]
    #[error("{call}: {}", ffi::nvrtc::nvrtc_result_name(*code))]
    Nvrtc {
        /// The NVRTC function, as C code names it (`nvrtcCreateProgram`).
        call: &'static str,
        /// What NVRTC returned.
        code: ffi::nvrtc::nvrtcResult,
    },
    /// NVRTC refused to compile a program (feature `nvrtc`); the compiler's log, with each
    /// error's file and line, is the `source()`.
    #[cfg(feature = "nvrtc")]
    #[cfg_attr(docsrs, doc(cfg(feature = "nvrtc")))]
    #[error("{call}: {}", ffi::nvrtc::nvrtc_result_name(*code))]
    NvrtcCompile {
        /// The NVRTC function (`nvrtcCompileProgram`).
        call: &'static str,
        /// What NVRTC returned (`NVRTC_ERROR_COMPILATION`, or `NVRTC_ERROR_INVALID_OPTION` for
        /// an option it does not know).
        code: ffi::nvrtc::nvrtcResult,
        /// What the compiler wrote to the program's log.
        #[source]
        log: CompileLog,
    },
    /// NVRTC could not be loaded, or lacks a function this operation needs (feature `nvrtc`).
    #[cfg(feature = "nvrtc")]
    #[cfg_attr(docsrs, doc(cfg(feature = "nvrtc")))]
    #[error("{call}: no usable NVRTC")]
    NvrtcLoad {
        /// The NVRTC function that was needed.
        call: &'static str,
        /// The loader's account: every place tried and why, or which symbol is missing.
        #[source]
        source: ffi::nvrtc::NvrtcLoadError,
    },
}

/// The header's account of a `CUgraphExecUpdateResult`.
pub(crate) fn update_reason(result: ffi::CUgraphExecUpdateResult) -> &'static str {
    use ffi::CUgraphExecUpdateResult as R;
    match result {
        R::CU_GRAPH_EXEC_UPDATE_SUCCESS => "no error",
        R::CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED => "the graph topology changed",
        R::CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED => "a node's type changed",
        R::CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED => {
            "a kernel node's function changed (CUDA 11.2 and older)"
        }
        R::CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED => {
            "a node's parameters changed in a way that is not supported"
        }
        R::CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED => {
            "something about a node is not supported by updates"
        }
        R::CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE => {
            "a kernel node's function changed in an unsupported way"
        }
        R::CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED => {
            "a node's attributes changed in a way that is not supported"
        }
        _ => "the update failed for an unspecified reason",
    }
}

/// The JIT compiler's error log of a module that failed to load, as the `source()` of
/// [`Error::ModuleLoad`]; `Display` gives the log, or says that it is empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JitLog(pub String);

impl JitLog {
    /// The log's text (empty if the driver wrote none).
    pub fn text(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for JitLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.trim().is_empty() {
            f.write_str("the JIT compiler wrote no error log")
        } else {
            f.write_str(self.0.trim_end())
        }
    }
}

impl std::error::Error for JitLog {}

/// NVRTC's log of a program that failed to compile, as the `source()` of
/// [`Error::NvrtcCompile`]; `Display` gives the log, or says that it is empty.
#[cfg(feature = "nvrtc")]
#[cfg_attr(docsrs, doc(cfg(feature = "nvrtc")))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileLog(pub String);

#[cfg(feature = "nvrtc")]
impl CompileLog {
    /// The log's text (empty if NVRTC wrote none).
    pub fn text(&self) -> &str {
        &self.0
    }
}

#[cfg(feature = "nvrtc")]
impl fmt::Display for CompileLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.trim().is_empty() {
            f.write_str("NVRTC wrote no log")
        } else {
            f.write_str(self.0.trim_end())
        }
    }
}

#[cfg(feature = "nvrtc")]
impl std::error::Error for CompileLog {}

fn version(v: Option<i32>) -> String {
    v.map(|v| format!(" (CUDA {})", ffi::format_version(v)))
        .unwrap_or_default()
}

fn unsupported(call: &str, driver_version: Option<i32>, source: &ffi::LoadError) -> String {
    match source {
        ffi::LoadError::MissingSymbol {
            abi_limit: Some(limit),
            ..
        } => format!(
            "{call} is not available with the driver's ABI limited to CUDA {}{}",
            ffi::format_version(*limit),
            version(driver_version)
        ),
        _ => format!(
            "{call} is not supported by this CUDA driver{}",
            version(driver_version)
        ),
    }
}

/// A `CUresult` that is not `CUDA_SUCCESS`, as the `source()` of [`Error::Driver`]; `Display`
/// gives the driver's description of it.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct DriverCode(pub ffi::CUresult);

impl DriverCode {
    /// The enumerator name, such as `CUDA_ERROR_INVALID_CONTEXT`.
    pub fn name(self) -> &'static str {
        ffi::result_name(self.0)
    }
}

impl fmt::Debug for DriverCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", self.name(), self.0.0)
    }
}

impl fmt::Display for DriverCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(ffi::result_description(self.0))
    }
}

impl std::error::Error for DriverCode {}

impl Error {
    /// The `CUresult` of a driver error (of a failed capture and a refused graph update too).
    pub fn driver_code(&self) -> Option<ffi::CUresult> {
        match self {
            Error::Driver { code, .. }
            | Error::ModuleLoad { code, .. }
            | Error::CaptureFailed { code, .. }
            | Error::GraphUpdate { code, .. } => Some(code.0),
            _ => None,
        }
    }

    /// The driver call that failed (or, for [`Error::Refused`], that was not made), for driver
    /// errors, module loads, unsupported calls, failed captures and refused graph updates (and
    /// the NCCL or NVRTC call, with those features).
    pub fn call(&self) -> Option<&'static str> {
        match self {
            Error::Driver { call, .. }
            | Error::ModuleLoad { call, .. }
            | Error::Unsupported { call, .. }
            | Error::Refused { call, .. }
            | Error::CaptureFailed { call, .. } => Some(call),
            #[cfg(feature = "nccl")]
            Error::Nccl { call, .. } | Error::NcclLoad { call, .. } => Some(call),
            #[cfg(feature = "nvrtc")]
            Error::Nvrtc { call, .. }
            | Error::NvrtcCompile { call, .. }
            | Error::NvrtcLoad { call, .. } => Some(call),
            Error::GraphUpdate { .. } => Some("cuGraphExecUpdate"),
            _ => None,
        }
    }

    /// Whether this is `Unsupported` or a driver error saying the call is not supported here.
    pub fn is_unsupported(&self) -> bool {
        matches!(
            self,
            Error::Unsupported { .. } | Error::UnsupportedAttribute { .. }
        ) || self.driver_code() == Some(ffi::CUresult::CUDA_ERROR_NOT_SUPPORTED)
    }

    #[cold]
    #[inline(never)]
    pub(crate) fn from_load(e: ffi::LoadError, call: &'static str) -> Error {
        match e {
            ffi::LoadError::MissingSymbol { driver_version, .. } => Error::Unsupported {
                call,
                driver_version,
                source: e,
            },
            other => Error::Load(other),
        }
    }

    /// The error of a failed driver call `call` that returned `code`, as this crate makes it:
    /// for code that calls the raw API ([`ffi`]) for what this crate does not wrap, so that its
    /// errors read like the crate's (`cuCtxSetLimit: CUDA_ERROR_INVALID_VALUE`). See also
    /// [`Error::check`].
    #[cold]
    #[inline(never)]
    pub fn driver(call: &'static str, code: ffi::CUresult) -> Error {
        Error::Driver {
            call,
            code: DriverCode(code),
        }
    }
}

impl Error {
    /// `Ok` for `CUDA_SUCCESS`, else [`Error::driver`] naming `call`: the crate's own check of
    /// a driver call's result, for raw calls made beside it.
    ///
    /// ```no_run
    /// use cuda_stream::{Context, Error, ffi};
    ///
    /// let ctx = Context::primary(0)?;
    /// let _bound = ctx.bind()?;
    /// let mut value = 0usize;
    /// // SAFETY: a valid out-pointer; the context is current.
    /// let rc = unsafe { ffi::cuCtxGetLimit(&mut value, ffi::CUlimit::CU_LIMIT_STACK_SIZE) };
    /// Error::check(rc, "cuCtxGetLimit")?;
    /// # Ok::<(), Error>(())
    /// ```
    #[inline]
    pub fn check(code: ffi::CUresult, call: &'static str) -> Result<()> {
        check(code, call)
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The chokepoint: `CUDA_SUCCESS` is `Ok`, anything else an [`Error::Driver`] naming `call`.
#[inline(always)]
pub(crate) fn check(code: ffi::CUresult, call: &'static str) -> Result<()> {
    if code == ffi::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::driver(call, code))
    }
}

/// Refuses a driver (or NCCL) call `call` inside a host function: [`Error::InHostFunction`]
/// there, `Ok` on any other thread (one thread-local load).
#[inline(always)]
pub(crate) fn refuse_in_host_fn(call: &'static str) -> Result<()> {
    if in_host_fn() {
        return Err(in_host_fn_error(call));
    }
    Ok(())
}

#[cold]
#[inline(never)]
fn in_host_fn_error(call: &'static str) -> Error {
    Error::InHostFunction { call }
}

/// The chokepoint every driver function is looked up through before it is called: inside a host
/// function (where the driver forbids CUDA calls, and one can deadlock) [`Error::InHostFunction`]
/// naming `call`, before anything reaches the driver; else the process-wide driver's function,
/// or the error saying why it is unavailable. `accessor` is the function's `ffi::fns` accessor.
///
/// Pointers kept past one operation (`Newest`, a scope's links) are checked where they are used
/// (`Newest::get`, the scope's start), and the destroy paths ask `in_host_fn` themselves, to
/// queue their destroy instead.
#[inline(always)]
pub(crate) fn lookup<F>(
    call: &'static str,
    accessor: fn() -> std::result::Result<F, ffi::LoadError>,
) -> Result<F> {
    refuse_in_host_fn(call)?;
    accessor().map_err(|e| Error::from_load(e, call))
}

/// The process-wide driver's function `$f` through [`lookup`], or (returned from the enclosing
/// function) the error saying why it cannot be called: inside a host function, or unavailable.
macro_rules! driver_fn {
    ($f:ident) => {
        match $crate::base::error::lookup(stringify!($f), $crate::ffi::fns::$f) {
            Ok(f) => f,
            Err(e) => return Err(e.into()),
        }
    };
}
pub(crate) use driver_fn;
