//! The allow-lists: driver functions whose failure an operation may swallow (returning `Ok`).
//! Everything else that fails must come back as an error naming it.

/// Calls made from `Drop`, which cannot return an error, so their failure is ignored by design:
/// - `cuCtxPopCurrent`: restoring the caller's context after a call made one current
///   (`context::Bound`); a failed pop leaves the context current, which is harmless;
/// - `cuStreamDestroy`: `OwnedStream`'s `Drop`, a pool's `Drop` (its free streams), a temporary
///   notifier (the explicit `OwnedStream::close` reports it, see [`SWALLOW_CLOSE_STREAM`]);
/// - `cuEventDestroy`: `Event`'s `Drop`, the per-thread `wait_stream` event at thread exit
///   (`Event::close` reports it, see [`SWALLOW_CLOSE_EVENT`]);
/// - `cuDevicePrimaryCtxRelease`: the last `Context` clone's `Drop`.
pub(crate) const SWALLOW_DROP: &[&str] = &[
    "cuCtxPopCurrent",
    "cuStreamDestroy",
    "cuEventDestroy",
    "cuDevicePrimaryCtxRelease",
];
/// `completed` must report a failure of its capture check, its queries and its host function;
/// where no event can be had or recorded it falls back to a host function on the stream, so
/// failures to get or record the event are swallowed; plus the `Drop` cleanup.
pub(crate) const SWALLOW_COMPLETED: &[&str] = &[
    "cuCtxPopCurrent",
    "cuStreamDestroy",
    "cuEventDestroy",
    "cuDevicePrimaryCtxRelease",
    "cuCtxGetCurrent",
    "cuCtxPushCurrent",
    "cuEventCreate",
    "cuEventRecord",
];
/// How often the spin of `completed` queries its event depends on when the work finishes, and so
/// whether the host function that wakes it (on the notifier stream, after a wait for the event)
/// is needed at all; each of them, when made and failing, is reported.
pub(crate) const VARYING_COMPLETED: &[&str] =
    &["cuEventQuery", "cuStreamWaitEvent", "cuLaunchHostFunc"];
/// `OwnedStream::close` must report its `cuStreamDestroy`; the rest is `Drop` cleanup.
pub(crate) const SWALLOW_CLOSE_STREAM: &[&str] = &[
    "cuCtxPopCurrent",
    "cuEventDestroy",
    "cuDevicePrimaryCtxRelease",
];
/// `Event::close` must report its `cuEventDestroy`; the rest is `Drop` cleanup.
pub(crate) const SWALLOW_CLOSE_EVENT: &[&str] = &[
    "cuCtxPopCurrent",
    "cuStreamDestroy",
    "cuDevicePrimaryCtxRelease",
];
/// `Stream::make_current` is infallible: `CurrentStreamGuard::install` retains the stream's
/// context if it is an active primary one (`Context::retain_if_primary`: a context this crate
/// holds costs no call, another is compared with each device's active primary context through
/// `cuDeviceGetCount`, `cuDeviceGet`, `cuDevicePrimaryCtxGetState`, `cuDevicePrimaryCtxRetain`)
/// so the guard can keep it alive, and goes without when that fails (the view's lifetime already
/// bounds the guard). Plus the `Drop` cleanup.
pub(crate) const SWALLOW_MAKE_CURRENT: &[&str] = &[
    "cuCtxPopCurrent",
    "cuStreamDestroy",
    "cuEventDestroy",
    "cuDevicePrimaryCtxRelease",
    "cuCtxGetCurrent",
    "cuCtxPushCurrent",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDevicePrimaryCtxGetState",
    "cuDevicePrimaryCtxRetain",
];
/// The `Drop` of a `Module` or a `DeviceBuffer`: binding the context, waiting for its work (a
/// buffer: for its recorded uses, an event recorded after a use and a wait for it on the stream
/// of the free), and the unload or free (`cuMemFreeAsync` with memory pools, `cuMemFree`
/// without), on top of [`SWALLOW_DROP`]. (`Module::close` and `DeviceBuffer::free` report them
/// all.) Also what the ordering model asks before them: whether the stream a free or a settling
/// event would be made on is capturing (`cuStreamIsCapturing`: a failure makes the free go to
/// the context's service stream, or leaves an ending epoch to the context's completion), and the
/// capture mode relaxed around the polls of frees without pools
/// (`cuThreadExchangeStreamCaptureMode`: a failure leaves the free waiting for the next poll).
pub(crate) const SWALLOW_FREE_DROP: &[&str] = &[
    "cuCtxPopCurrent",
    "cuStreamDestroy",
    "cuEventDestroy",
    "cuDevicePrimaryCtxRelease",
    "cuCtxGetCurrent",
    "cuCtxPushCurrent",
    "cuCtxSynchronize",
    "cuModuleUnload",
    "cuMemFree",
    "cuMemFreeAsync",
    "cuEventCreate",
    "cuEventRecord",
    "cuStreamWaitEvent",
    "cuStreamIsCapturing",
    "cuThreadExchangeStreamCaptureMode",
];

/// Memory pools: the `Drop` of a buffer ([`SWALLOW_FREE_DROP`]) and of the last `MemPool` value
/// of a pool of the caller's (`cuMemPoolDestroy`, which a drop cannot report; the pool then
/// stays alive, see [`expected_after`]).
pub(crate) const SWALLOW_POOL_DROP: &[&str] = &[
    "cuCtxPopCurrent",
    "cuStreamDestroy",
    "cuEventDestroy",
    "cuDevicePrimaryCtxRelease",
    "cuCtxGetCurrent",
    "cuCtxPushCurrent",
    "cuCtxSynchronize",
    "cuMemFree",
    "cuMemFreeAsync",
    "cuEventCreate",
    "cuEventRecord",
    "cuStreamWaitEvent",
    "cuMemPoolDestroy",
    "cuStreamIsCapturing",
    "cuThreadExchangeStreamCaptureMode",
];
/// Blocks kept for reuse ([`SWALLOW_POOL_DROP`], where a failed free of a kept block makes it an
/// orphan, freed after the context's completion at the next poll), and the device's memory asked
/// for the default cache limit (`cuDeviceTotalMem`: without an answer, no limit).
pub(crate) const SWALLOW_CACHE: &[&str] = &[
    "cuCtxPopCurrent",
    "cuStreamDestroy",
    "cuEventDestroy",
    "cuDevicePrimaryCtxRelease",
    "cuCtxGetCurrent",
    "cuCtxPushCurrent",
    "cuCtxSynchronize",
    "cuMemFree",
    "cuMemFreeAsync",
    "cuEventCreate",
    "cuEventRecord",
    "cuStreamWaitEvent",
    "cuMemPoolDestroy",
    "cuStreamIsCapturing",
    "cuThreadExchangeStreamCaptureMode",
    "cuDeviceTotalMem",
];
/// A pool of the caller's and a module ([`SWALLOW_POOL_DROP`], and `cuModuleUnload`, which a
/// drop cannot report either).
pub(crate) const SWALLOW_POOL_MODULE_DROP: &[&str] = &[
    "cuCtxPopCurrent",
    "cuStreamDestroy",
    "cuEventDestroy",
    "cuDevicePrimaryCtxRelease",
    "cuCtxGetCurrent",
    "cuCtxPushCurrent",
    "cuCtxSynchronize",
    "cuMemFree",
    "cuMemFreeAsync",
    "cuEventCreate",
    "cuEventRecord",
    "cuStreamWaitEvent",
    "cuMemPoolDestroy",
    "cuModuleUnload",
];
/// Buffers on a device without memory pools: [`SWALLOW_FREE_DROP`], and the `cuEventQuery` with
/// which a free asks whether the buffer's uses have completed (a failure leaves the free waiting,
/// asked again at the next poll: nothing is freed early, nothing leaks).
pub(crate) const SWALLOW_PLAIN_FREE: &[&str] = &[
    "cuCtxPopCurrent",
    "cuStreamDestroy",
    "cuEventDestroy",
    "cuDevicePrimaryCtxRelease",
    "cuCtxGetCurrent",
    "cuCtxPushCurrent",
    "cuCtxSynchronize",
    "cuMemFree",
    "cuEventCreate",
    "cuEventRecord",
    "cuStreamWaitEvent",
    "cuEventQuery",
    "cuStreamIsCapturing",
    "cuThreadExchangeStreamCaptureMode",
];
/// Page-locked buffers: the `Drop` of a device buffer ([`SWALLOW_FREE_DROP`]) and of a
/// `PinnedHostBuffer`, whose free waits for its copies' events: asked with `cuEventQuery` (a
/// failure leaves the free waiting, asked again at the next poll; in `try_as_slice` and
/// `copies_in_flight` it leaves the copy counted as in flight, so the answer is `Busy`), then
/// made with the context bound (`cuMemFreeHost`; its failure leaves the memory allocated, see
/// [`expected_after`]).
pub(crate) const SWALLOW_PINNED_DROP: &[&str] = &[
    "cuCtxPopCurrent",
    "cuStreamDestroy",
    "cuEventDestroy",
    "cuDevicePrimaryCtxRelease",
    "cuCtxGetCurrent",
    "cuCtxPushCurrent",
    "cuCtxSynchronize",
    "cuMemFree",
    "cuMemFreeAsync",
    "cuEventCreate",
    "cuEventRecord",
    "cuStreamWaitEvent",
    "cuEventQuery",
    "cuMemFreeHost",
    "cuStreamIsCapturing",
    "cuThreadExchangeStreamCaptureMode",
];

/// Graph operations may also swallow: the graphs' and executable graphs' destroys in `Drop`
/// (`Graph::close` and `GraphExec::close` report them, see [`SWALLOW_CLOSE_GRAPH`]), the capture
/// mode guard restoring the previous mode in `Drop`, and a capture's destroy of the events it
/// recorded once it has ended (all `Drop` cleanup, which cannot return an error).
pub(crate) const SWALLOW_GRAPH: &[&str] = &[
    "cuCtxPopCurrent",
    "cuStreamDestroy",
    "cuEventDestroy",
    "cuDevicePrimaryCtxRelease",
    "cuGraphDestroy",
    "cuGraphExecDestroy",
    "cuThreadExchangeStreamCaptureMode",
];
/// When the closure fails (or panics), its error is the one returned: a failure to end the
/// capture after it is not reported (the capture is still ended, by a second try).
pub(crate) const SWALLOW_AFTER_CLOSURE_ERROR: &[&str] = &[
    "cuCtxPopCurrent",
    "cuStreamDestroy",
    "cuEventDestroy",
    "cuDevicePrimaryCtxRelease",
    "cuGraphDestroy",
    "cuGraphExecDestroy",
    "cuStreamEndCapture",
];
/// `Stream::in_capture` first returns the forks of captures that have ended to their pools; a
/// failure to ask whether they have (`cuStreamIsCapturing`) leaves them parked for the next try.
pub(crate) const SWALLOW_SWEEP: &[&str] = &[
    "cuCtxPopCurrent",
    "cuStreamDestroy",
    "cuEventDestroy",
    "cuDevicePrimaryCtxRelease",
    "cuGraphDestroy",
    "cuGraphExecDestroy",
    "cuStreamIsCapturing",
];
/// Captured buffer operations: the graph cleanup of [`SWALLOW_GRAPH`], and the frees of the
/// buffers the graphs held, made by whichever owner lets go last: a drop on the test's thread,
/// or the drain of what a user object's destructor queued (binding the context, ordering the free
/// after the buffer's uses, `cuMemFreeAsync` or `cuMemFree`); a failure there leaves that
/// allocation alive (see [`expected_after`]).
pub(crate) const SWALLOW_GRAPH_FREES: &[&str] = &[
    "cuCtxPopCurrent",
    "cuStreamDestroy",
    "cuEventDestroy",
    "cuDevicePrimaryCtxRelease",
    "cuGraphDestroy",
    "cuGraphExecDestroy",
    "cuThreadExchangeStreamCaptureMode",
    "cuCtxGetCurrent",
    "cuCtxPushCurrent",
    "cuCtxSynchronize",
    "cuMemFree",
    "cuMemFreeAsync",
    "cuEventCreate",
    "cuEventRecord",
    "cuStreamWaitEvent",
    "cuStreamIsCapturing",
];

/// `Graph::close` and `GraphExec::close` must report their destroys.
pub(crate) const SWALLOW_CLOSE_GRAPH: &[&str] = &[
    "cuCtxPopCurrent",
    "cuStreamDestroy",
    "cuEventDestroy",
    "cuDevicePrimaryCtxRelease",
];
