//! Fault injection: every public operation of `cuda-stream`, run against the mock driver with
//! each driver call it makes forced to fail in turn.
//!
//! For every operation of the table in [`operations`]: one clean run warms the process-wide
//! caches (the shared scope pools, the notifier streams), a second clean run records which
//! driver functions the operation calls and how often, then for every `(function, k)` with `k`
//! from 1 to that count the operation runs again with the k-th call of the function failing with
//! [`FAULT`]. Each run must: not panic; return an error naming exactly the failed function (or
//! `Ok`, where the function is one the operation documents as swallowed, see the `SWALLOW`
//! lists); leave no stream, event, primary-context retain, module or device allocation behind
//! (except the one handle whose destroy, release, unload or free was the failed call: it is still
//! alive in the driver, and must not be destroyed a second time; and, for operations that free a
//! module or a buffer, the one object whose free could not bind its context or wait for its
//! context's work, which must not be freed under work that may still use it); destroy nothing
//! twice, use no dead handle or freed memory, and never destroy a stream it does not own.
//!
//! Every run happens on a fresh thread (joined before the checks, so its thread-local caches are
//! destroyed, with their driver calls counted and faulted too), with no context current: the
//! default streams are exercised from a thread that has none. A run ends by waiting for the host
//! functions it enqueued and by clearing the fixture contexts' spare events (part of the run: its
//! `cuEventDestroy` calls are counted and faulted like a drop's), so every run starts with empty
//! event caches and creates what it uses.
//!
//! No driver call may be made from a host function: the mock answers one with
//! `CUDA_ERROR_NOT_PERMITTED` and counts it, and every run (clean or faulted) must leave that
//! count at zero. Host functions that drop the last owner of a stream, event, pool, lease,
//! completion or context, and `close()` inside one, have operations of their own; their deferred
//! destroys must be drained by the end of the run (each such operation drains explicitly, or
//! through the next operation that drains), and nothing may be left queued.
//!
//! The test prints `fault cases (CUDA 13.0): N (M operations)`; it fails if an operation makes no
//! driver call at all or if fewer cases than [`MIN_FAULT_CASES`] ran, so a table that checks
//! nothing cannot pass.
//!
//! # Every driver generation
//!
//! The whole file runs against every flavour of the mock ([`cuda_mock_driver::FLAVOURS`]: CUDA
//! 11.4, 12.0, 12.2, 12.4, 12.8 and 13.0, each with and without `cuGetProcAddress`): in this
//! process against the full one, and through [`the_fault_suite_passes_on_every_driver_flavour`]
//! in one child process per other flavour (the mock's state is per process), each printing its
//! `fault cases (CUDA 12.2, no cuGetProcAddress): N (M operations)` line. A driver function is
//! failed in each ABI the flavour has (`cuEventElapsedTime_v2000` on 12.2, the 12.8 one on 13.0),
//! and the error must name the function as C code does (`cuEventElapsedTime`).

use std::any::Any;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, mpsc};
use std::task::{Context as TaskContext, Poll, Wake, Waker};

use cuda_mock_driver::{FLAVOURS, Flavour, MockDriver, report, run_in_each_flavour};
use cuda_stream::ffi::{self, CUresult};
use cuda_stream::{
    AsStream, CaptureMode, CaptureStatus, Context, Device, DeviceBuffer, DriverCode, Error, Event,
    EventOptions, Graph, InstantiateOptions, JitOptions, LaunchConfig, Module, OwnedStream, Result,
    Stream, StreamOptions, StreamPool, current_context_raw, current_stream, current_stream_raw,
    deferred_pending, drain_deferred, driver_version, exchange_capture_mode, kernel_args,
};
use cuda_sys::SymbolInfo;

/// The code injected: distinctive, and never one that `cuda-stream` maps to something else
/// (`CUDA_ERROR_NOT_READY` would be read as "not yet").
const FAULT: CUresult = CUresult::CUDA_ERROR_LAUNCH_FAILED;
const SUCCESS: CUresult = CUresult::CUDA_SUCCESS;

/// The floor on fault cases: the table discovers about 2,600 on every flavour (2,633 to 2,648
/// measured); a few hundred fewer means operations stopped calling the driver (or the table lost
/// rows), which must not pass silently.
const MIN_FAULT_CASES: usize = 2250;
/// The floor on the table's size on every flavour: stream operations on 6 stream kinds (with
/// `capture_status`, `in_capture`, kernels and device memory), the others, host functions that
/// drop or close values, the event cache, capture and graph operations (buffers in captures
/// among them), modules and buffers (238 measured on CUDA 11.4).
const MIN_OPERATIONS: usize = 238;
/// What the table adds from CUDA 12.0: `id` on each stream kind (244 operations measured).
const ID_OPERATIONS: usize = 6;

/// The module the kernel operations load: one kernel with a pointer and a count.
const PTX: &str = ".version 7.0\n.target sm_50\n.address_size 64\n\
    .visible .entry scale(.param .u64 scale_x, .param .u32 scale_n)\n{\n\tret;\n}\n";

/// Every driver function the mock exports, by the name C code writes (the name `cuda-stream`'s
/// errors use: `cuStreamDestroy` for the symbol `cuStreamDestroy_v2`, and whichever ABI of it is
/// called, see [`abis`]).
const FUNCTIONS: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuGetErrorName",
    "cuGetErrorString",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetAttribute",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxGetState",
    "cuDevicePrimaryCtxRelease",
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    "cuCtxPushCurrent",
    "cuCtxPopCurrent",
    "cuCtxGetDevice",
    "cuCtxSynchronize",
    "cuCtxGetStreamPriorityRange",
    "cuStreamCreate",
    "cuStreamCreateWithPriority",
    "cuStreamDestroy",
    "cuStreamQuery",
    "cuStreamSynchronize",
    "cuStreamWaitEvent",
    "cuStreamAddCallback",
    "cuLaunchHostFunc",
    "cuStreamGetCtx",
    "cuStreamGetDevice",
    "cuStreamGetFlags",
    "cuStreamGetPriority",
    "cuStreamGetId",
    "cuEventCreate",
    "cuEventDestroy",
    "cuEventRecord",
    "cuEventQuery",
    "cuEventSynchronize",
    "cuEventElapsedTime",
    "cuIpcGetEventHandle",
    "cuIpcOpenEventHandle",
    "cuMemGetInfo",
    "cuModuleLoadDataEx",
    "cuModuleUnload",
    "cuModuleGetFunction",
    "cuFuncGetAttribute",
    "cuFuncSetAttribute",
    "cuLaunchKernel",
    "cuMemAlloc",
    "cuMemFree",
    "cuMemsetD8Async",
    "cuMemsetD16Async",
    "cuMemsetD32Async",
    "cuMemcpyDtoDAsync",
    "cuMemcpyHtoDAsync",
    "cuMemcpyDtoHAsync",
    "cuStreamBeginCapture",
    "cuStreamEndCapture",
    "cuStreamIsCapturing",
    "cuStreamGetCaptureInfo",
    "cuThreadExchangeStreamCaptureMode",
    "cuEventRecordWithFlags",
    "cuGraphGetNodes",
    "cuGraphDestroy",
    "cuGraphDebugDotPrint",
    "cuGraphInstantiate",
    "cuGraphInstantiateWithParams",
    "cuGraphLaunch",
    "cuGraphUpload",
    "cuGraphExecDestroy",
    "cuGraphExecUpdate",
    "cuUserObjectCreate",
    "cuUserObjectRetain",
    "cuUserObjectRelease",
    "cuGraphRetainUserObject",
    "cuGraphReleaseUserObject",
];

// The allow-lists: driver functions whose failure an operation may swallow (returning `Ok`).
// Everything else that fails must come back as an error naming it.

/// Calls made from `Drop`, which cannot return an error, so their failure is ignored by design:
/// - `cuCtxPopCurrent`: restoring the caller's context after a call made one current
///   (`context::Bound`); a failed pop leaves the context current, which is harmless;
/// - `cuStreamDestroy`: `OwnedStream`'s `Drop`, a pool's `Drop` (its free streams), a temporary
///   notifier (the explicit `OwnedStream::close` reports it, see [`SWALLOW_CLOSE_STREAM`]);
/// - `cuEventDestroy`: `Event`'s `Drop`, the per-thread `wait_stream` event at thread exit
///   (`Event::close` reports it, see [`SWALLOW_CLOSE_EVENT`]);
/// - `cuDevicePrimaryCtxRelease`: the last `Context` clone's `Drop`.
const SWALLOW_DROP: &[&str] = &[
    "cuCtxPopCurrent",
    "cuStreamDestroy",
    "cuEventDestroy",
    "cuDevicePrimaryCtxRelease",
];
/// `completed` must report a failure of its capture check, its queries and its host function;
/// where no event can be had or recorded it falls back to a host function on the stream, so
/// failures to get or record the event are swallowed; plus the `Drop` cleanup.
const SWALLOW_COMPLETED: &[&str] = &[
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
const VARYING_COMPLETED: &[&str] = &["cuEventQuery", "cuStreamWaitEvent", "cuLaunchHostFunc"];
/// `OwnedStream::close` must report its `cuStreamDestroy`; the rest is `Drop` cleanup.
const SWALLOW_CLOSE_STREAM: &[&str] = &[
    "cuCtxPopCurrent",
    "cuEventDestroy",
    "cuDevicePrimaryCtxRelease",
];
/// `Event::close` must report its `cuEventDestroy`; the rest is `Drop` cleanup.
const SWALLOW_CLOSE_EVENT: &[&str] = &[
    "cuCtxPopCurrent",
    "cuStreamDestroy",
    "cuDevicePrimaryCtxRelease",
];
/// `Stream::make_current` is infallible: `CurrentStreamGuard::install` retains the stream's
/// context if it is an active primary one (`Context::retain_if_primary`: bind, `cuCtxGetDevice`,
/// `cuDevicePrimaryCtxGetState`, `cuDevicePrimaryCtxRetain`) so the guard can keep it alive, and
/// goes without when that fails (the view's lifetime already bounds the guard). Plus the `Drop`
/// cleanup.
const SWALLOW_MAKE_CURRENT: &[&str] = &[
    "cuCtxPopCurrent",
    "cuStreamDestroy",
    "cuEventDestroy",
    "cuDevicePrimaryCtxRelease",
    "cuCtxGetCurrent",
    "cuCtxPushCurrent",
    "cuCtxGetDevice",
    "cuDevicePrimaryCtxGetState",
    "cuDevicePrimaryCtxRetain",
];
/// The `Drop` of a `Module` or a `DeviceBuffer`: binding the context, waiting for its work, and
/// the unload or free, on top of [`SWALLOW_DROP`]. (`Module::close` and `DeviceBuffer::free`
/// report them all.)
const SWALLOW_FREE_DROP: &[&str] = &[
    "cuCtxPopCurrent",
    "cuStreamDestroy",
    "cuEventDestroy",
    "cuDevicePrimaryCtxRelease",
    "cuCtxGetCurrent",
    "cuCtxPushCurrent",
    "cuCtxSynchronize",
    "cuModuleUnload",
    "cuMemFree",
];

static LOCK: Mutex<()> = Mutex::new(());
static MOCK: OnceLock<MockDriver> = OnceLock::new();

/// The flavour of the mock this process runs against: the one `CUDA_MOCK_FLAVOUR` names in a
/// child of [`the_fault_suite_passes_on_every_driver_flavour`], else the full one.
fn flavour() -> &'static Flavour {
    Flavour::from_env().unwrap_or(Flavour::full())
}

/// The bindings of the ABIs of `function` that the flavour exports (`cuEventElapsedTime_v2000`
/// and `cuEventElapsedTime` for `cuEventElapsedTime` on CUDA 13.0), one per exported symbol.
fn abis(m: &MockDriver, function: &str) -> Vec<&'static str> {
    SymbolInfo::abis(function)
        .iter()
        .filter(|s| m.exports(s.name))
        .map(|s| s.name)
        .collect()
}

/// Serialises the test (the mock's state is process-wide), installs the mock as the process-wide
/// driver (once, before any `cuda-stream` call) and resets it.
fn mock() -> (MutexGuard<'static, ()>, &'static MockDriver) {
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let m = MOCK.get_or_init(|| {
        let path = flavour().path();
        let driver = cuda_sys::Driver::open(&path).expect("the mock driver library opens");
        cuda_sys::Driver::install_global(driver).expect("nothing loaded a driver before");
        MockDriver::open(&path).expect("the mock's control functions resolve")
    });
    m.reset();
    (guard, m)
}

/// Waits until every host function the mock has queued has run (their driver calls, if any, are
/// then counted, and what they dropped is queued). Panics after 10 s: a host function that never
/// runs is a hang, and must fail.
fn settle() {
    let m = MOCK.get().expect("the mock is installed");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while m.pending_host_fns() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "host functions still pending after 10 s"
        );
        std::thread::sleep(std::time::Duration::from_micros(50));
    }
}

/// Runs `f` on a fresh thread and joins it: no context is current there, and its thread-local
/// caches (the `wait_stream` events) are destroyed before this returns, not later, outside the
/// test's lock. A panic in `f` comes back as `Err`.
fn on_fresh_thread<R: Send>(f: impl FnOnce() -> R + Send) -> std::thread::Result<R> {
    std::thread::scope(|s| {
        s.spawn(|| catch_unwind(AssertUnwindSafe(f)))
            .join()
            .and_then(|r| r)
    })
}

/// [`on_fresh_thread`] for a test body: a panic continues here.
fn isolated<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    on_fresh_thread(f).unwrap_or_else(|p| resume_unwind(p))
}

fn panic_message(p: &(dyn Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

/// A minimal executor: polls `fut` on this thread, parking until woken.
fn block_on<F: Future>(fut: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = TaskContext::from_waker(&waker);
    let mut fut = pin!(fut);
    loop {
        match fut.as_mut().poll(&mut cx) {
            Poll::Ready(v) => return v,
            Poll::Pending => std::thread::park(),
        }
    }
}

/// A stream created with raw driver calls, as a framework would: `cuda-stream` never owns it.
fn raw_stream(ctx: &Context) -> ffi::CUstream {
    let _bound = ctx.bind().expect("bind");
    let mut s = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; the context is current.
    assert_eq!(unsafe { cuda_sys::cuStreamCreate(&mut s, 1) }, SUCCESS);
    s
}

fn raw_destroy(s: ffi::CUstream) -> CUresult {
    // SAFETY: the mock checks the handle; the caller owns it.
    unsafe { cuda_sys::cuStreamDestroy(s) }
}

/// What exists, and what went wrong, in the mock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Live {
    streams: u64,
    events: u64,
    retains: u64,
    modules: u64,
    allocations: u64,
    graphs: u64,
    execs: u64,
    /// User objects with references left; [`ANY`] in an expectation when a graph or executable
    /// graph legitimately survived (its failed destroy), holding some (and, through them,
    /// events and buffers' allocations: `events` and `allocations` may be higher then too).
    user_objects: u64,
    captures: u64,
}

/// "Any number" in an expected [`Live`].
const ANY: u64 = u64::MAX;

impl Live {
    fn now(m: &MockDriver) -> Live {
        Live {
            streams: m.live_streams(),
            events: m.live_events(),
            retains: m.live_primary_retains(),
            modules: m.live_modules(),
            allocations: m.live_allocations(),
            graphs: m.live_graphs(),
            execs: m.live_graph_execs(),
            user_objects: m.live_user_objects(),
            captures: m.live_captures(),
        }
    }

    /// Whether `self` (what exists) is what `expected` allows.
    fn matches(&self, expected: &Live) -> bool {
        let mut e = *expected;
        if e.user_objects == ANY {
            e.user_objects = self.user_objects;
            e.events = self.events.max(e.events);
            e.allocations = self.allocations.max(e.allocations);
        }
        *self == e
    }
}

/// Objects the operations use without creating them.
struct Fixture {
    ctx: Context,
    /// Device 1's primary context.
    ctx1: Context,
    /// A non-blocking owned stream.
    owned: OwnedStream,
    /// A blocking owned stream: the partner of `wait_stream`.
    other: OwnedStream,
    /// A stream created with raw calls, only ever borrowed (a `usize` so the fixture is `Sync`).
    borrowed: usize,
    /// An event the operations record (reused).
    event: Event,
    /// An event recorded on `owned`.
    recorded: Event,
    /// An event of device 1's context.
    event1: Event,
    /// The pool the `pooled` stream kind leases from.
    pool: StreamPool,
    /// A module of [`PTX`], loaded in `ctx`.
    module: Module,
    /// 64 bytes of device memory in `ctx`.
    bytes: DeviceBuffer<u8>,
}

impl Fixture {
    fn new() -> Fixture {
        let ctx = Context::primary(0).expect("device 0");
        let ctx1 = Context::primary(1).expect("device 1");
        let owned = ctx.new_stream().expect("stream");
        let other = ctx
            .new_stream_with(StreamOptions::new().blocking(true))
            .expect("stream");
        let borrowed = raw_stream(&ctx) as usize;
        let event = ctx.new_event(EventOptions::new()).expect("event");
        let recorded = owned.record_event().expect("record");
        // Recorded: a wait on an event never recorded makes no driver call.
        let event1 = ctx1
            .new_stream()
            .and_then(|s| s.record_event())
            .expect("event");
        let pool = StreamPool::new(&ctx, StreamOptions::new());
        let module = Module::from_ptx(&ctx, PTX).expect("module");
        let bytes = DeviceBuffer::zeroed(&ctx, &owned, 64).expect("buffer");
        Fixture {
            ctx,
            ctx1,
            owned,
            other,
            borrowed,
            event,
            recorded,
            event1,
            pool,
            module,
            bytes,
        }
    }

    fn borrowed_raw(&self) -> ffi::CUstream {
        self.borrowed as ffi::CUstream
    }

    /// The handles that must stay alive through every case.
    fn handles(&self) -> Vec<(&'static str, usize)> {
        vec![
            ("owned stream", self.owned.raw() as usize),
            ("other stream", self.other.raw() as usize),
            ("borrowed stream", self.borrowed),
            ("event", self.event.raw() as usize),
            ("recorded event", self.recorded.raw() as usize),
            ("device 1 event", self.event1.raw() as usize),
        ]
    }

    /// Drops everything; the borrowed stream must survive that, and is then destroyed raw.
    fn finish(self, m: &MockDriver) {
        let borrowed = self.borrowed_raw();
        let Fixture {
            ctx,
            ctx1,
            owned,
            other,
            event,
            recorded,
            event1,
            pool,
            module,
            bytes,
            ..
        } = self;
        let owned_raw = owned.raw();
        bytes.free().expect("free the fixture's buffer");
        module.close().expect("unload the fixture's module");
        drop((owned, other, event, recorded, event1, pool));
        assert_eq!(m.destroyed(owned_raw), Some(true));
        assert_eq!(
            m.destroyed(borrowed),
            Some(false),
            "a borrowed stream was destroyed"
        );
        assert_eq!(raw_destroy(borrowed), SUCCESS);
        drop((ctx, ctx1));
    }
}

/// The streams every stream operation runs on.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Owned,
    Pooled,
    Borrowed,
    Legacy,
    PerThread,
    Null,
}

impl Kind {
    const ALL: [Kind; 6] = [
        Kind::Owned,
        Kind::Pooled,
        Kind::Borrowed,
        Kind::Legacy,
        Kind::PerThread,
        Kind::Null,
    ];
}

/// Runs `f` on a view of the fixture's stream of kind `kind`: the owned one, a lease of the
/// fixture's pool, the raw stream borrowed (`Stream::borrow_raw`, which calls the driver too), or
/// one of the context's default streams.
fn on_stream(fx: &Fixture, kind: Kind, f: impl FnOnce(Stream<'_>) -> Result<()>) -> Result<()> {
    match kind {
        Kind::Owned => f(fx.owned.as_stream()),
        Kind::Pooled => {
            let lease = fx.pool.acquire()?;
            f(lease.as_stream())
        }
        Kind::Borrowed => {
            // SAFETY: `fx.borrowed` is a live stream that only `Fixture::finish` destroys, after
            // every view of it (each borrows `fx`) is gone.
            let s = unsafe { Stream::borrow_raw(fx.borrowed_raw(), fx) }?;
            assert_eq!(s.context_raw(), fx.ctx.raw());
            f(s)
        }
        Kind::Legacy => f(fx.ctx.legacy_stream()),
        Kind::PerThread => f(fx.ctx.per_thread_stream()),
        Kind::Null => f(fx.ctx.null_stream()),
    }
}

type OpFn = Box<dyn Fn(&Fixture) -> Result<()> + Send + Sync>;

/// One public operation (or a short sequence that needs it), and the driver functions whose
/// failure it may swallow.
struct Op {
    name: String,
    swallowed: &'static [&'static str],
    /// Whether it frees a module or a buffer, which a failure may leave allocated (see
    /// [`expected_after`]).
    frees: bool,
    /// Swallowed calls whose number depends on timing (a spin's queries): a case failing one of
    /// them may find the call no longer made.
    varying: &'static [&'static str],
    run: OpFn,
}

impl Op {
    fn varying(mut self, varying: &'static [&'static str]) -> Op {
        self.varying = varying;
        self
    }
}

fn op(
    name: impl Into<String>,
    swallowed: &'static [&'static str],
    run: impl Fn(&Fixture) -> Result<()> + Send + Sync + 'static,
) -> Op {
    Op {
        name: name.into(),
        swallowed,
        frees: false,
        varying: &[],
        run: Box::new(run),
    }
}

/// [`op`] for an operation that frees a module or a buffer.
fn op_frees(
    name: impl Into<String>,
    swallowed: &'static [&'static str],
    run: impl Fn(&Fixture) -> Result<()> + Send + Sync + 'static,
) -> Op {
    Op {
        frees: true,
        ..op(name, swallowed, run)
    }
}

/// A host function's capture that tells whether the closure was dropped without running: if
/// enqueueing fails, the closure (and so the token) must be dropped before the call returns.
fn token_check(token: &Arc<()>, r: &Result<()>) {
    if r.is_err() {
        assert_eq!(
            Arc::strong_count(token),
            1,
            "a refused host function was not dropped"
        );
    }
}

/// The stream operations, on a stream of `kind`.
fn stream_ops(kind: Kind) -> Vec<Op> {
    let k = kind;
    let name = |op: &str| format!("{k:?} stream: {op}");
    let mut ops = vec![
        op(name("query"), SWALLOW_DROP, move |fx| {
            on_stream(fx, k, |s| s.query().map(drop))
        }),
        op(name("synchronize"), SWALLOW_DROP, move |fx| {
            on_stream(fx, k, |s| s.synchronize())
        }),
        op(name("record_event"), SWALLOW_DROP, move |fx| {
            on_stream(fx, k, |s| {
                let e = s.record_event()?;
                assert!(e.is_recorded());
                Ok(())
            })
        }),
        op(name("record_event_with(timing)"), SWALLOW_DROP, move |fx| {
            on_stream(fx, k, |s| {
                s.record_event_with(EventOptions::new().timing(true))?
                    .synchronize()
            })
        }),
        op(name("record"), SWALLOW_DROP, move |fx| {
            on_stream(fx, k, |s| s.record(&fx.event))
        }),
        op(name("wait_event"), SWALLOW_DROP, move |fx| {
            on_stream(fx, k, |s| s.wait_event(&fx.recorded))
        }),
        op(name("wait_event(other context)"), SWALLOW_DROP, move |fx| {
            on_stream(fx, k, |s| s.wait_event(&fx.event1))
        }),
        op(name("wait_stream"), SWALLOW_DROP, move |fx| {
            on_stream(fx, k, |s| s.wait_stream(&fx.other))
        }),
        op(name("waited on by wait_stream"), SWALLOW_DROP, move |fx| {
            on_stream(fx, k, |s| fx.other.wait_stream(s))
        }),
        op(name("launch_host_func"), SWALLOW_DROP, move |fx| {
            on_stream(fx, k, |s| {
                let token = Arc::new(());
                let t = token.clone();
                let r = s.launch_host_func(move || drop(t));
                token_check(&token, &r);
                r
            })
        }),
        // A closure that captures nothing takes another path (no allocation): it is dropped
        // by hand when refused. `ZstDrop` is zero-sized, so the closure is too.
        op(
            name("launch_host_func(capturing nothing)"),
            SWALLOW_DROP,
            move |fx| {
                on_stream(fx, k, |s| {
                    let before = ZST_DROPS.load(Ordering::SeqCst);
                    let z = ZstDrop;
                    let f = move || drop(z);
                    assert_eq!(std::mem::size_of_val(&f), 0);
                    let r = s.launch_host_func(f);
                    if r.is_err() {
                        assert!(ZST_DROPS.load(Ordering::SeqCst) > before, "not dropped");
                    }
                    r
                })
            },
        ),
        op(name("add_callback"), SWALLOW_DROP, move |fx| {
            on_stream(fx, k, |s| {
                let token = Arc::new(());
                let t = token.clone();
                let r = s.add_callback(move |_status| drop(t));
                token_check(&token, &r);
                r
            })
        }),
        op(name("device"), SWALLOW_DROP, move |fx| {
            on_stream(fx, k, |s| {
                assert_eq!(s.device()?, fx.ctx.device());
                Ok(())
            })
        }),
        op(name("flags"), SWALLOW_DROP, move |fx| {
            on_stream(fx, k, |s| s.flags().map(drop))
        }),
        op(name("is_nonblocking"), SWALLOW_DROP, move |fx| {
            on_stream(fx, k, |s| s.is_nonblocking().map(drop))
        }),
        op(name("priority"), SWALLOW_DROP, move |fx| {
            on_stream(fx, k, |s| s.priority().map(drop))
        }),
        op(name("make_current"), SWALLOW_MAKE_CURRENT, move |fx| {
            on_stream(fx, k, |s| {
                let guard = s.make_current();
                let r = current_stream(&fx.ctx, |cur| {
                    assert_eq!(cur, s);
                    cur.query().map(drop)
                });
                drop(guard);
                r
            })
        }),
        op(name("capture_status"), SWALLOW_DROP, move |fx| {
            on_stream(fx, k, |s| {
                assert_eq!(s.capture_status()?, CaptureStatus::None);
                Ok(())
            })
        }),
        op(name("completed"), SWALLOW_COMPLETED, move |fx| {
            on_stream(fx, k, |s| block_on(s.completed()))
        })
        .varying(VARYING_COMPLETED),
        op(name("scope with forks"), SWALLOW_DROP, move |fx| {
            on_stream(fx, k, |s| {
                s.scope(|sc| {
                    assert_eq!(sc.parent(), s);
                    let a = sc.fork()?;
                    let b = sc.fork()?;
                    assert_ne!(a, b);
                    a.launch_host_func(|| ())?;
                    b.wait_stream(a)?;
                    b.query()?;
                    Ok(())
                })
            })
        }),
        op(name("Function::launch"), SWALLOW_DROP, move |fx| {
            on_stream(fx, k, |s| {
                let scale = fx.module.function("scale")?;
                let (x, n) = (fx.bytes.device_ptr(), 16u32);
                let config = LaunchConfig::for_elements(n, 32);
                // SAFETY: `scale` takes a pointer and a u32; the mock runs no device code.
                unsafe { scale.launch(&s, config, &kernel_args![x, n]) }
            })
        }),
        op_frees(
            name("DeviceBuffer::zeroed + fill + copy_from + free"),
            SWALLOW_DROP,
            move |fx| {
                on_stream(fx, k, |s| {
                    let a = DeviceBuffer::<u32>::zeroed(&fx.ctx, &s, 8)?;
                    let b = DeviceBuffer::<u32>::alloc(&fx.ctx, 8)?;
                    b.fill(&s, 3)?;
                    a.copy_from(&s, &b)?;
                    a.free()?;
                    b.free()
                })
            },
        ),
        op_frees(
            name("DeviceBuffer::from_host + copy_from_host + copy_to_host + to_vec + free"),
            SWALLOW_DROP,
            move |fx| {
                on_stream(fx, k, |s| {
                    let a = DeviceBuffer::from_host(&fx.ctx, s, &[1u16, 2, 3])?;
                    a.copy_from_host(s, &[4, 5, 6])?;
                    let mut out = [0u16; 3];
                    a.copy_to_host(s, &mut out)?;
                    assert_eq!(out, [4, 5, 6]);
                    assert_eq!(a.to_vec(s)?, [4, 5, 6]);
                    a.free()
                })
            },
        ),
        op_frees(
            name("DeviceBuffer async host copies + free"),
            SWALLOW_DROP,
            move |fx| {
                on_stream(fx, k, |s| {
                    let a = DeviceBuffer::<u32>::alloc(&fx.ctx, 4)?;
                    let mut out = [0u32; 4];
                    // SAFETY: the host slices are untouched until the stream is synchronised (or
                    // the mock has finished with them: it reads and writes host memory at the call).
                    unsafe {
                        a.copy_from_host_async(&s, &[7; 4])?;
                        a.copy_to_host_async(&s, &mut out)?;
                    }
                    s.synchronize()?;
                    assert_eq!(out, [7; 4]);
                    a.free()
                })
            },
        ),
        op(name("raw memset and memcpy"), SWALLOW_DROP, move |fx| {
            on_stream(fx, k, |s| {
                let p = fx.bytes.device_ptr();
                let mut out = [0u8; 8];
                // SAFETY: every range lies in the fixture's 64-byte buffer, which outlives the
                // work; the host slices live until the stream is synchronised.
                unsafe {
                    cuda_stream::memset_d8_async(&s, p, 1, 8)?;
                    cuda_stream::memset_d16_async(&s, p + 8, 2, 4)?;
                    cuda_stream::memset_d32_async(&s, p + 16, 3, 2)?;
                    cuda_stream::memcpy_dtod_async(&s, p + 24, p, 8)?;
                    cuda_stream::memcpy_htod_async(&s, p + 32, &[9u8; 8])?;
                    cuda_stream::memcpy_dtoh_async(&s, &mut out, p + 24)?;
                }
                s.synchronize()?;
                assert_eq!(out, [1; 8]);
                Ok(())
            })
        }),
    ];
    // Stream ids need CUDA 12.0; before, `id` is `Unsupported` without a driver call
    // (`old_driver.rs` checks that).
    if flavour().has_abi("cuStreamGetId") {
        ops.push(op(name("id"), SWALLOW_DROP, move |fx| {
            on_stream(fx, k, |s| s.id().map(drop))
        }));
    }
    ops
}

/// Every public operation of `cuda-stream` that calls the driver. (`init` is not a row of its
/// own: it caches its outcome for the process, so after the fixture's first call it calls
/// nothing; `missing_library.rs` covers its failure.)
fn operations() -> Vec<Op> {
    let mut ops = vec![
        op("driver_version", SWALLOW_DROP, |_| {
            driver_version().map(drop)
        }),
        op("Device::count", SWALLOW_DROP, |_| Device::count().map(drop)),
        op("Device::new", SWALLOW_DROP, |_| Device::new(1).map(drop)),
        op("Device::name", SWALLOW_DROP, |fx| {
            fx.ctx.device().name().map(drop)
        }),
        op("Device::attribute", SWALLOW_DROP, |fx| {
            let a = ffi::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT;
            fx.ctx1.device().attribute(a).map(drop)
        }),
        op("Device::primary_context", SWALLOW_DROP, |_| {
            Device::new(1)?.primary_context().map(drop)
        }),
        op("Context::primary", SWALLOW_DROP, |_| {
            Context::primary(1).map(drop)
        }),
        op("Context::retain_if_primary", SWALLOW_DROP, |fx| {
            let c = Context::retain_if_primary(fx.ctx.raw())?;
            assert_eq!(c.as_ref(), Some(&fx.ctx));
            Ok(())
        }),
        op("current_context_raw", SWALLOW_DROP, |_| {
            assert!(current_context_raw()?.is_null());
            Ok(())
        }),
        op("Context::priority_range (not cached)", SWALLOW_DROP, |_| {
            Context::primary(0)?.priority_range().map(drop)
        }),
        op("Context::synchronize", SWALLOW_DROP, |fx| {
            fx.ctx.synchronize()
        }),
        op("Context::bind", SWALLOW_DROP, |fx| {
            let _bound = fx.ctx.bind()?;
            assert_eq!(current_context_raw()?, fx.ctx.raw());
            Ok(())
        }),
        op("Context::new_stream + drop", SWALLOW_DROP, |fx| {
            fx.ctx.new_stream().map(drop)
        }),
        op("Context::new_stream_with(priority)", SWALLOW_DROP, |fx| {
            let p = fx.ctx.priority_range()?.greatest();
            let s = fx
                .ctx
                .new_stream_with(StreamOptions::new().blocking(true).priority(p))?;
            assert_eq!(s.priority()?, p);
            Ok(())
        }),
        op(
            "OwnedStream::new(priority), range not cached",
            SWALLOW_DROP,
            |_| {
                let ctx = Context::primary(0)?;
                OwnedStream::new(&ctx, StreamOptions::new().priority(-2)).map(drop)
            },
        ),
        op("OwnedStream::new(priority_clamped)", SWALLOW_DROP, |fx| {
            OwnedStream::new(&fx.ctx, StreamOptions::new().priority_clamped(-100)).map(drop)
        }),
        op("OwnedStream drop after use", SWALLOW_DROP, |fx| {
            let s = fx.ctx.new_stream()?;
            s.launch_host_func(|| ())?;
            s.synchronize()?;
            drop(s);
            Ok(())
        }),
        op("OwnedStream::close", SWALLOW_CLOSE_STREAM, |fx| {
            fx.ctx.new_stream()?.close()
        }),
        op("OwnedStream::into_raw + from_raw", SWALLOW_DROP, |fx| {
            let raw = fx.ctx.new_stream()?.into_raw();
            // SAFETY: `raw` was just handed over by `into_raw`; nothing else uses it.
            let s = unsafe { OwnedStream::from_raw(raw, &fx.ctx) }?;
            s.query().map(drop)
        }),
        op("OwnedStream::make_current", SWALLOW_DROP, |fx| {
            let s = fx.ctx.new_stream()?;
            let guard = s.make_current();
            assert_eq!(current_stream_raw(&fx.ctx), s.raw());
            let r = current_stream(&fx.ctx, |cur| cur.query().map(drop));
            drop(guard);
            r
        }),
        op("Stream::wait_event_raw", SWALLOW_DROP, |fx| {
            // SAFETY: the fixture's event is live for the call.
            unsafe { fx.owned.as_stream().wait_event_raw(fx.recorded.raw()) }
        }),
        op("Event::new_in_current", SWALLOW_DROP, |fx| {
            let _bound = fx.ctx.bind()?;
            // SAFETY: `fx.ctx` was made current just above, and nothing else is bound since.
            let e = unsafe { Event::new_in_current(&fx.ctx, EventOptions::new()) }?;
            fx.owned.record(&e)
        }),
        op("Context::new_event + drop", SWALLOW_DROP, |fx| {
            fx.ctx
                .new_event(EventOptions::new().blocking_sync(true))
                .map(drop)
        }),
        op("Event::new + record + elapsed_since", SWALLOW_DROP, |fx| {
            let timing = EventOptions::new().timing(true);
            let start = Event::new(&fx.ctx, timing)?;
            let end = Event::new(&fx.ctx, timing)?;
            fx.owned.record(&start)?;
            fx.owned.record(&end)?;
            end.synchronize()?;
            end.elapsed_since(&start).map(drop)
        }),
        op("Event::query", SWALLOW_DROP, |fx| {
            fx.recorded.query().map(drop)
        }),
        op("Event::synchronize", SWALLOW_DROP, |fx| {
            fx.recorded.synchronize()
        }),
        op("Event::ipc_handle + open_ipc", SWALLOW_DROP, |fx| {
            let e = Event::new(&fx.ctx, EventOptions::new().interprocess(true))?;
            let handle = e.ipc_handle()?;
            let opened = Event::open_ipc(&fx.ctx, &handle)?;
            fx.owned.record(&e)?;
            opened.synchronize()
        }),
        op("Event::close", SWALLOW_CLOSE_EVENT, |fx| {
            fx.ctx.new_event(EventOptions::new())?.close()
        }),
        op("Event::into_raw + from_raw", SWALLOW_DROP, |fx| {
            let raw = fx.ctx.new_event(EventOptions::new())?.into_raw();
            // SAFETY: `raw` was just handed over by `into_raw`, created with these options.
            let e = unsafe { Event::from_raw(raw, &fx.ctx, EventOptions::new()) };
            e.query().map(drop)
        }),
        op("Event::completed", SWALLOW_COMPLETED, |fx| {
            block_on(fx.recorded.completed())
        })
        .varying(VARYING_COMPLETED),
        op("StreamPool::acquire", SWALLOW_DROP, |fx| {
            let pool = StreamPool::new(&fx.ctx, StreamOptions::new());
            let a = pool.acquire()?;
            let b = pool.acquire()?;
            assert_ne!(a.raw(), b.raw());
            a.wait_stream(&b)?;
            drop((a, b));
            let c = pool.acquire()?;
            assert_eq!(pool.created(), 2);
            c.query().map(drop)
        }),
        op("StreamPool::bounded acquire", SWALLOW_DROP, |fx| {
            let pool = StreamPool::bounded(&fx.ctx, StreamOptions::new().priority(-1), 1);
            let a = pool.acquire()?;
            match pool.acquire() {
                Err(Error::PoolExhausted { limit: 1 }) => {}
                other => panic!("a second lease of a pool of one: {other:?}"),
            }
            assert_eq!(a.priority()?, -1);
            Ok(())
        }),
        op_frees(
            "Module::from_ptx_with + function + attributes + close",
            SWALLOW_DROP,
            |fx| {
                let module = Module::from_ptx_with(&fx.ctx, PTX, JitOptions::new().verbose(true))?;
                let f = module.function("scale")?;
                assert!(f.max_threads_per_block() > 0);
                f.registers()?;
                f.static_shared_memory()?;
                f.local_memory()?;
                f.const_memory()?;
                f.ptx_version()?;
                f.binary_version()?;
                f.max_dynamic_shared_memory()?;
                f.set_max_dynamic_shared_memory(64 * 1024)?;
                module.close()
            },
        ),
        op_frees("Module::from_image + drop", SWALLOW_FREE_DROP, |fx| {
            let image = format!("{PTX}\0");
            // SAFETY: NUL-terminated PTX text.
            let module = unsafe { Module::from_image(&fx.ctx, image.as_bytes()) }?;
            module.function("scale").map(drop)
        }),
        op("Module::function (fixture's module)", SWALLOW_DROP, |fx| {
            fx.module.function("scale").map(drop)
        }),
        op_frees("DeviceBuffer::alloc + free", SWALLOW_DROP, |fx| {
            DeviceBuffer::<f64>::alloc(&fx.ctx, 3)?.free()
        }),
        op_frees("DeviceBuffer::alloc + drop", SWALLOW_FREE_DROP, |fx| {
            DeviceBuffer::<f64>::alloc(&fx.ctx, 3).map(drop)
        }),
        op_frees(
            "DeviceBuffer::into_raw + from_raw + free",
            SWALLOW_DROP,
            |fx| {
                let (ptr, len) = DeviceBuffer::<u8>::alloc(&fx.ctx, 5)?
                    .into_raw()
                    .expect("no graph holds a new buffer");
                // SAFETY: handed over by `into_raw` just above.
                unsafe { DeviceBuffer::<u8>::from_raw(&fx.ctx, ptr, len) }.free()
            },
        ),
        op("StreamPool::reserve", SWALLOW_DROP, |fx| {
            let pool = StreamPool::new(&fx.ctx, StreamOptions::new());
            pool.reserve(1)?;
            assert_eq!(pool.free(), 1);
            let a = pool.acquire()?;
            assert_eq!(pool.created(), 1);
            a.query().map(drop)
        }),
    ];
    ops.extend(event_cache_ops());
    ops.extend(host_fn_drop_ops());
    for kind in Kind::ALL {
        ops.extend(stream_ops(kind));
    }
    ops.extend(graph_ops());
    ops
}

// ---------------------------------------------------------------------------------------------
// Capture and graphs

/// Graph operations may also swallow: the graphs' and executable graphs' destroys in `Drop`
/// (`Graph::close` and `GraphExec::close` report them, see [`SWALLOW_CLOSE_GRAPH`]), the capture
/// mode guard restoring the previous mode in `Drop`, and a capture's destroy of the events it
/// recorded once it has ended (all `Drop` cleanup, which cannot return an error).
const SWALLOW_GRAPH: &[&str] = &[
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
const SWALLOW_AFTER_CLOSURE_ERROR: &[&str] = &[
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
const SWALLOW_SWEEP: &[&str] = &[
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
/// or the drain of what a user object's destructor queued (binding the context, waiting for its
/// work, `cuMemFree`); a failure there leaves that allocation alive (see [`expected_after`]).
const SWALLOW_GRAPH_FREES: &[&str] = &[
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
];

/// `Graph::close` and `GraphExec::close` must report their destroys.
const SWALLOW_CLOSE_GRAPH: &[&str] = &[
    "cuCtxPopCurrent",
    "cuStreamDestroy",
    "cuEventDestroy",
    "cuDevicePrimaryCtxRelease",
];

/// Waits until the mock's worker has run everything queued (host functions, user-object
/// destructors), so that what a run freed has been freed.
fn worker_idle() {
    let m = MOCK.get().expect("the mock is installed");
    let start = std::time::Instant::now();
    while m.pending_host_fns() != 0 {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(10),
            "the worker never went idle"
        );
        std::thread::yield_now();
    }
}

/// Host functions for graphs that count their runs and the drops of their captures.
struct Probes {
    made: AtomicUsize,
    ran: Arc<AtomicUsize>,
    dropped: Arc<AtomicUsize>,
}

impl Probes {
    fn new() -> Probes {
        Probes {
            made: AtomicUsize::new(0),
            ran: Arc::new(AtomicUsize::new(0)),
            dropped: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// A new `Fn` host function that counts its runs; its capture counts its drop.
    fn host_fn(&self) -> impl Fn() + Send + Sync + 'static {
        self.made.fetch_add(1, Ordering::SeqCst);
        let (ran, dropped) = (self.ran.clone(), DropCount(self.dropped.clone()));
        move || {
            let _keep = &dropped;
            ran.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn ran(&self) -> usize {
        self.ran.load(Ordering::SeqCst)
    }

    /// After the run: no closure was dropped twice (a failed graph destroy may keep some).
    fn check(&self) {
        worker_idle();
        let (made, dropped) = (
            self.made.load(Ordering::SeqCst),
            self.dropped.load(Ordering::SeqCst),
        );
        assert!(
            dropped <= made,
            "{dropped} drops of {made} host functions: one was dropped twice"
        );
    }
}

/// Runs a graph operation with fresh probes, then checks them.
fn with_probes(f: impl FnOnce(&Probes) -> Result<()>) -> Result<()> {
    let p = Probes::new();
    let r = f(&p);
    p.check();
    r
}

/// `Ok` for `CUDA_SUCCESS`, else the error a `cuda-stream` call would give.
fn raw_check(rc: CUresult, call: &'static str) -> Result<()> {
    if rc == SUCCESS {
        Ok(())
    } else {
        Err(Error::Driver {
            call,
            code: DriverCode(rc),
        })
    }
}

/// Begins a capture on `s` with raw calls, as a framework would (thread-local mode).
fn raw_begin(s: ffi::CUstream) -> Result<()> {
    let mode = ffi::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    // SAFETY: a live stream; the mock checks it.
    raw_check(
        unsafe { cuda_sys::cuStreamBeginCapture(s, mode) },
        "cuStreamBeginCapture",
    )
}

/// Ends the raw capture of `s` (once more if a failed end left it capturing) and destroys its
/// graph; returns the first failure, or the end's status when it is `expect_end`.
fn raw_end(s: ffi::CUstream, expect_end: CUresult) -> Result<()> {
    let mut graph = std::ptr::null_mut();
    // SAFETY: valid out-pointer; the mock checks the stream.
    let rc = unsafe { cuda_sys::cuStreamEndCapture(s, &mut graph) };
    let mut first = if rc == expect_end {
        Ok(())
    } else {
        raw_check(rc, "cuStreamEndCapture")
    };
    if rc != SUCCESS && rc != expect_end {
        let mut again = std::ptr::null_mut();
        // SAFETY: as above.
        let _ = unsafe { cuda_sys::cuStreamEndCapture(s, &mut again) };
        graph = again;
    }
    if !graph.is_null() {
        // SAFETY: the capture handed the graph over.
        let rc = unsafe { cuda_sys::cuGraphDestroy(graph) };
        if first.is_ok() && rc != FAULT {
            first = raw_check(rc, "cuGraphDestroy");
        }
    }
    first
}

/// A capture of one host function on `s`.
fn one_host_fn(s: &mut cuda_stream::PooledStream<'_>, p: &Probes) -> Result<Graph> {
    s.capture(CaptureMode::ThreadLocal, |cap| {
        cap.launch_host_func(p.host_fn())
    })
}

/// Runs `f`, then (whatever it returned) waits for the user objects' destructors and makes the
/// frees they queued: the buffers a graph held are freed by the end of the run.
fn then_graph_frees(f: impl FnOnce() -> Result<()>) -> Result<()> {
    let r = f();
    worker_idle();
    drain_deferred();
    r
}

/// The capture and graph operations.
fn graph_ops() -> Vec<Op> {
    vec![
        op_frees(
            "DeviceBuffer::fill, copy_from, keep_alive_in and CaptureStream::keep_alive in a \
             capture; the buffers dropped, the graph replays them",
            SWALLOW_GRAPH_FREES,
            |fx| {
                then_graph_frees(|| {
                    let mut s = fx.pool.acquire()?;
                    let out = DeviceBuffer::<u32>::zeroed(&fx.ctx, &s, 8)?;
                    let tmp = DeviceBuffer::<u32>::alloc(&fx.ctx, 8)?;
                    let kept = DeviceBuffer::<u16>::alloc(&fx.ctx, 4)?;
                    let token = Arc::new(());
                    let graph = s.capture(CaptureMode::ThreadLocal, |cap| {
                        tmp.fill(&cap, 3)?;
                        out.copy_from(&cap, &tmp)?;
                        kept.keep_alive_in(&cap)?;
                        cap.keep_alive(token.clone())
                    })?;
                    drop((tmp, kept));
                    assert!(out.is_held_by_graphs());
                    let exec = graph.instantiate()?;
                    drop(graph);
                    exec.launch(&s)?;
                    assert_eq!(out.to_vec(&s)?, [3; 8]);
                    Ok(())
                })
            },
        ),
        op_frees(
            "DeviceBuffer::fill + copy_from on a borrowed stream in a capture begun by raw calls",
            SWALLOW_GRAPH_FREES,
            |fx| {
                then_graph_frees(|| {
                    let raw = fx.borrowed_raw();
                    let a = DeviceBuffer::<u8>::alloc(&fx.ctx, 16)?;
                    let b = DeviceBuffer::<u8>::alloc(&fx.ctx, 16)?;
                    raw_begin(raw)?;
                    let inside = (|| {
                        // SAFETY: the fixture's stream lives until `Fixture::finish`.
                        let view = unsafe { Stream::borrow_raw(raw, fx) }?;
                        a.fill(&view, 7)?;
                        b.copy_from(&view, &a)
                    })();
                    // Destroys the graph, which lets go of what it held; the buffers are
                    // dropped after the capture (an untied one dropped during a thread-local
                    // capture could not wait for its context's work, so would stay allocated).
                    let ended = raw_end(raw, SUCCESS);
                    drop((a, b));
                    inside.and(ended)
                })
            },
        ),
        op(
            "DeviceBuffer::fill in an invalidated capture is refused",
            SWALLOW_GRAPH,
            |fx| {
                let raw = fx.borrowed_raw();
                raw_begin(raw)?;
                let refused = (|| {
                    // SAFETY: the fixture's stream lives until `Fixture::finish`.
                    let view = unsafe { Stream::borrow_raw(raw, fx) }?;
                    if let Err(e) = view.add_callback(|_| ()) {
                        if e.driver_code() != Some(CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
                        {
                            return Err(e);
                        }
                    }
                    match fx.bytes.fill(&view, 1) {
                        Err(Error::NotCapturing {
                            status: CaptureStatus::Invalidated { .. },
                        }) => Ok(()),
                        Err(e) => Err(e),
                        Ok(()) => panic!("a fill entered an invalidated capture"),
                    }
                })();
                assert!(!fx.bytes.is_held_by_graphs(), "nothing tied");
                match refused {
                    Ok(()) => raw_end(raw, CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED),
                    Err(e) => {
                        let _ = raw_end(raw, SUCCESS);
                        Err(e)
                    }
                }
            },
        ),
        op(
            "capture kernels and memsets on two forks and a memcpy; replay twice",
            SWALLOW_GRAPH,
            |fx| {
                let mut s = fx.pool.acquire()?;
                let scale = fx.module.function("scale")?;
                let p = fx.bytes.device_ptr();
                let graph = s.capture(CaptureMode::ThreadLocal, |cap| {
                    cap.scope(|sc| {
                        let (a, b) = (sc.fork()?, sc.fork()?);
                        let config = LaunchConfig::new(1, 32);
                        // SAFETY: every range lies in the fixture's 64-byte buffer, which
                        // outlives the graph; `scale` takes a pointer and a u32 (the mock runs no
                        // code for it).
                        unsafe {
                            cuda_stream::memset_d32_async(&a, p, 0x0101_0101, 4)?;
                            scale.launch(&b, config, &kernel_args![p + 32, 8u32])?;
                            cuda_stream::memset_d8_async(&b, p + 16, 2, 16)?;
                        }
                        Ok(())
                    })?;
                    // SAFETY: as above.
                    unsafe { cuda_stream::memcpy_dtod_async(&cap, p + 32, p, 16) }
                })?;
                assert_eq!(graph.node_count()?, 4);
                fx.bytes.fill(&s, 0)?;
                let exec = graph.instantiate()?;
                exec.launch(&s)?;
                exec.launch(&s)?;
                let got = fx.bytes.to_vec(&s)?;
                assert_eq!(got[..16], [1; 16]);
                assert_eq!(got[16..32], [2; 16]);
                assert_eq!(got[32..48], [1; 16], "the copy ran after both forks");
                Ok(())
            },
        ),
        op(
            "capture (thread-local): host function, node_count, instantiate, launch twice",
            SWALLOW_GRAPH,
            |fx| {
                with_probes(|p| {
                    let mut s = fx.pool.acquire()?;
                    let graph = one_host_fn(&mut s, p)?;
                    assert_eq!(graph.node_count()?, 1);
                    let exec = graph.instantiate()?;
                    exec.launch(&s)?;
                    exec.launch(&s)?;
                    s.synchronize()?;
                    assert_eq!(p.ran(), 2);
                    Ok(())
                })
            },
        ),
        op(
            "capture (global) on an owned stream: captured events, scope forks, wait_stream",
            SWALLOW_GRAPH,
            |fx| {
                with_probes(|p| {
                    let mut s = fx.ctx.new_stream()?;
                    let graph = s.capture(CaptureMode::Global, |cap| {
                        let start = cap.record_event()?;
                        cap.scope(|sc| {
                            let (a, b) = (sc.fork()?, sc.fork()?);
                            assert_ne!(a, b);
                            a.launch_host_func(p.host_fn())?;
                            b.wait_captured(start)?;
                            b.launch_host_func(p.host_fn())?;
                            b.wait_stream(a)?;
                            Ok(())
                        })?;
                        cap.launch_host_func(p.host_fn())
                    })?;
                    assert_eq!(graph.node_count()?, 3);
                    let exec = graph.instantiate()?;
                    drop(graph);
                    exec.launch(&s)?;
                    s.synchronize()?;
                    assert_eq!(p.ran(), 3);
                    Ok(())
                })
            },
        ),
        op(
            "capture (relaxed): external event wait and record nodes",
            SWALLOW_GRAPH,
            |fx| {
                with_probes(|p| {
                    let mut s = fx.pool.acquire()?;
                    let ready = Arc::new(fx.owned.record_event()?);
                    let done = Arc::new(fx.ctx.new_event(EventOptions::new())?);
                    let graph = s.capture(CaptureMode::Relaxed, |cap| {
                        cap.wait_event(&ready)?;
                        cap.launch_host_func(p.host_fn())?;
                        cap.record_external(&done)
                    })?;
                    assert_eq!(graph.node_count()?, 3);
                    let exec = graph.instantiate()?;
                    drop(graph);
                    exec.launch(&s)?;
                    s.synchronize()?;
                    assert!(done.query()?, "the replay recorded the event");
                    assert_eq!(p.ran(), 1);
                    Ok(())
                })
            },
        ),
        op(
            "CaptureStream::status and capture_status inside a capture",
            SWALLOW_GRAPH,
            |fx| {
                let mut s = fx.pool.acquire()?;
                let graph = s.capture(CaptureMode::ThreadLocal, |cap| {
                    let id = cap.capture_id();
                    assert_eq!(cap.status()?, CaptureStatus::Active { id });
                    Ok(())
                })?;
                assert_eq!(graph.node_count()?, 0);
                assert_eq!(s.capture_status()?, CaptureStatus::None);
                Ok(())
            },
        ),
        op(
            "GraphExec::update from a graph of the same shape",
            SWALLOW_GRAPH,
            |fx| {
                with_probes(|p| {
                    let mut s = fx.pool.acquire()?;
                    let first = one_host_fn(&mut s, p)?;
                    let second = one_host_fn(&mut s, p)?;
                    let mut exec = first.instantiate()?;
                    drop(first);
                    exec.launch(&s)?;
                    exec.update(&second)?;
                    drop(second);
                    exec.launch(&s)?;
                    s.synchronize()?;
                    assert_eq!(p.ran(), 2);
                    Ok(())
                })
            },
        ),
        op(
            "GraphExec::update from a graph of another shape is refused",
            SWALLOW_GRAPH,
            |fx| {
                with_probes(|p| {
                    let mut s = fx.pool.acquire()?;
                    let one = one_host_fn(&mut s, p)?;
                    let two = s.capture(CaptureMode::ThreadLocal, |cap| {
                        cap.launch_host_func(p.host_fn())?;
                        cap.launch_host_func(p.host_fn())
                    })?;
                    let mut exec = one.instantiate()?;
                    match exec.update(&two) {
                        Err(Error::GraphUpdate { result, .. }) => assert_eq!(
                            result,
                            ffi::CUgraphExecUpdateResult::CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED
                        ),
                        other => return other,
                    }
                    exec.launch(&s)?;
                    s.synchronize()?;
                    assert_eq!(p.ran(), 1, "the refused update left the old work");
                    Ok(())
                })
            },
        ),
        op(
            "Graph::instantiate_with(auto free, node priority) + GraphExec::upload",
            SWALLOW_GRAPH,
            |fx| {
                with_probes(|p| {
                    let mut s = fx.pool.acquire()?;
                    let graph = one_host_fn(&mut s, p)?;
                    let options = InstantiateOptions::new()
                        .auto_free_on_launch(true)
                        .use_node_priority(true);
                    let exec = graph.instantiate_with(options)?;
                    exec.upload(&s)?;
                    exec.launch(&s)?;
                    s.synchronize()?;
                    assert_eq!(p.ran(), 1);
                    Ok(())
                })
            },
        ),
        op("Graph::instantiate_with(upload)", SWALLOW_GRAPH, |fx| {
            with_probes(|p| {
                let mut s = fx.pool.acquire()?;
                let graph = one_host_fn(&mut s, p)?;
                let exec =
                    graph.instantiate_with(InstantiateOptions::new().upload(s.as_stream()))?;
                exec.launch(&s)?;
                s.synchronize()?;
                assert_eq!(p.ran(), 1);
                Ok(())
            })
        }),
        op("Graph::debug_dot", SWALLOW_GRAPH, |fx| {
            with_probes(|p| {
                let mut s = fx.pool.acquire()?;
                let graph = one_host_fn(&mut s, p)?;
                let path = std::env::temp_dir().join(format!(
                    "cuda-mock-graph-{}-{:?}.dot",
                    std::process::id(),
                    std::thread::current().id()
                ));
                let r = graph.debug_dot(&path);
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                let _ = std::fs::remove_file(&path);
                r?;
                assert!(text.starts_with("digraph"), "{text}");
                Ok(())
            })
        }),
        op(
            "Graph::close + GraphExec::close",
            SWALLOW_CLOSE_GRAPH,
            |fx| {
                with_probes(|p| {
                    let mut s = fx.pool.acquire()?;
                    let graph = one_host_fn(&mut s, p)?;
                    let exec = graph.instantiate()?;
                    graph.close()?;
                    exec.launch(&s)?;
                    exec.close()?;
                    s.synchronize()?;
                    assert_eq!(p.ran(), 1);
                    Ok(())
                })
            },
        ),
        op("Graph::into_raw + from_raw", SWALLOW_GRAPH, |fx| {
            with_probes(|p| {
                let mut s = fx.pool.acquire()?;
                let raw = one_host_fn(&mut s, p)?.into_raw();
                // SAFETY: handed over by `into_raw`; its work is of `fx.ctx`.
                let graph = unsafe { Graph::from_raw(raw, &fx.ctx) }?;
                graph.instantiate()?.launch(&s)?;
                s.synchronize()?;
                assert_eq!(p.ran(), 1);
                Ok(())
            })
        }),
        op(
            "Stream::in_capture on a capture begun by raw calls",
            SWALLOW_SWEEP,
            |fx| {
                with_probes(|p| {
                    let raw = fx.borrowed_raw();
                    raw_begin(raw)?;
                    let inside = (|| {
                        // SAFETY: the fixture's stream lives until `Fixture::finish`.
                        let view = unsafe { Stream::borrow_raw(raw, fx) }?;
                        assert!(matches!(
                            view.capture_status()?,
                            CaptureStatus::Active { .. }
                        ));
                        view.in_capture(|cap| {
                            cap.launch_host_func(p.host_fn())?;
                            let e = cap.record_event()?;
                            cap.scope(|sc| {
                                let f = sc.fork()?;
                                f.wait_captured(e)?;
                                f.launch_host_func(p.host_fn())
                            })
                        })
                    })();
                    let ended = raw_end(raw, SUCCESS);
                    inside.and(ended)
                })
            },
        ),
        op(
            "Stream::in_capture on a stream that is not capturing is refused",
            SWALLOW_GRAPH,
            |fx| match fx.owned.in_capture(|_| Ok(())) {
                Err(Error::NotCapturing {
                    status: CaptureStatus::None,
                }) => Ok(()),
                other => other,
            },
        ),
        op(
            "a run-once host function is refused on a capturing stream",
            SWALLOW_GRAPH,
            |fx| {
                let raw = fx.borrowed_raw();
                raw_begin(raw)?;
                let dropped = Arc::new(AtomicUsize::new(0));
                let d = DropCount(dropped.clone());
                let refused = (|| {
                    // SAFETY: the fixture's stream lives until `Fixture::finish`.
                    let view = unsafe { Stream::borrow_raw(raw, fx) }?;
                    match view.launch_host_func(move || drop(d)) {
                        Err(Error::Refused {
                            call: "cuLaunchHostFunc",
                            ..
                        }) => {}
                        Err(e) => return Err(e),
                        Ok(()) => panic!("a run-once host function entered a capture"),
                    }
                    match block_on(view.completed()) {
                        Err(Error::Refused { .. }) => Ok(()),
                        other => other,
                    }
                })();
                assert_eq!(dropped.load(Ordering::SeqCst), 1, "dropped once, at once");
                let ended = raw_end(raw, SUCCESS);
                refused.and(ended)
            },
        ),
        op(
            "add_callback is refused on a capturing stream, which invalidates it",
            SWALLOW_GRAPH,
            |fx| {
                let raw = fx.borrowed_raw();
                raw_begin(raw)?;
                let refused = (|| {
                    // SAFETY: the fixture's stream lives until `Fixture::finish`.
                    let view = unsafe { Stream::borrow_raw(raw, fx) }?;
                    match view.add_callback(|_| ()) {
                        Err(e)
                            if e.driver_code()
                                == Some(CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) =>
                        {
                            assert_eq!(e.call(), Some("cuStreamAddCallback"));
                            assert!(matches!(
                                view.capture_status()?,
                                CaptureStatus::Invalidated { .. }
                            ));
                            Ok(true)
                        }
                        Err(e) => Err(e),
                        Ok(()) => panic!("a callback entered a capture"),
                    }
                })();
                match refused {
                    Ok(_) => raw_end(raw, CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED),
                    Err(e) => {
                        let _ = raw_end(raw, SUCCESS);
                        Err(e)
                    }
                }
            },
        ),
        op(
            "capture: the closure's error ends it, the stream is usable",
            SWALLOW_AFTER_CLOSURE_ERROR,
            |fx| {
                with_probes(|p| {
                    let mut s = fx.pool.acquire()?;
                    let r = s.capture(CaptureMode::ThreadLocal, |cap| {
                        cap.launch_host_func(p.host_fn())?;
                        Err(Error::NotCapturing {
                            status: CaptureStatus::None,
                        })
                    });
                    match r {
                        Err(Error::NotCapturing { .. }) => {}
                        Err(e) => return Err(e),
                        Ok(_) => panic!("a failed closure gave a graph"),
                    }
                    assert_eq!(s.capture_status()?, CaptureStatus::None);
                    s.synchronize()?;
                    assert_eq!(p.ran(), 0);
                    Ok(())
                })
            },
        ),
        op(
            "capture: a panic in the closure ends it, the stream is usable",
            SWALLOW_AFTER_CLOSURE_ERROR,
            |fx| {
                with_probes(|p| {
                    let mut s = fx.pool.acquire()?;
                    let mut failed = None;
                    let r = catch_unwind(AssertUnwindSafe(|| {
                        s.capture(CaptureMode::ThreadLocal, |cap| {
                            if let Err(e) = cap.launch_host_func(p.host_fn()) {
                                failed = Some(e);
                            }
                            panic!("in the capture")
                        })
                    }));
                    match r {
                        // The capture never began: the closure did not run.
                        Ok(Err(e)) => return Err(e),
                        Ok(Ok(_)) => panic!("a panicking closure gave a graph"),
                        Err(_) => {}
                    }
                    if let Some(e) = failed {
                        return Err(e);
                    }
                    assert_eq!(s.capture_status()?, CaptureStatus::None);
                    s.synchronize()?;
                    Ok(())
                })
            },
        ),
        op(
            "a nested capture on one stream is refused",
            SWALLOW_GRAPH,
            |fx| {
                let s = fx.pool.acquire()?;
                let view = s.as_stream();
                // SAFETY: no other thread uses the stream; the inner call is the misuse tested.
                let outer = unsafe {
                    view.capture(CaptureMode::ThreadLocal, |_cap| {
                        // SAFETY: as above.
                        match view.capture(CaptureMode::ThreadLocal, |_| Ok(())) {
                            Err(e)
                                if e.driver_code() == Some(CUresult::CUDA_ERROR_ILLEGAL_STATE) =>
                            {
                                assert_eq!(e.call(), Some("cuStreamBeginCapture"));
                                Ok(())
                            }
                            Err(e) => Err(e),
                            Ok(_) => panic!("a nested capture began"),
                        }
                    })
                };
                outer.map(drop)?;
                s.query().map(drop)
            },
        ),
        op(
            "capturing the legacy stream is refused by the driver",
            SWALLOW_GRAPH,
            |fx| {
                // SAFETY: nothing else uses the legacy stream of this context meanwhile.
                let r = unsafe {
                    fx.ctx
                        .legacy_stream()
                        .capture(CaptureMode::ThreadLocal, |_| Ok(()))
                };
                match r {
                    Err(e)
                        if e.driver_code()
                            == Some(CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) =>
                    {
                        assert_eq!(e.call(), Some("cuStreamBeginCapture"));
                        fx.ctx.legacy_stream().query().map(drop)
                    }
                    other => other.map(drop),
                }
            },
        ),
        op(
            "a captured event of another capture is refused",
            SWALLOW_GRAPH,
            |fx| {
                let (mut a, mut b) = (fx.pool.acquire()?, fx.pool.acquire()?);
                let graph = a.capture(CaptureMode::ThreadLocal, |outer| {
                    let e = outer.record_event()?;
                    let inner = b.capture(CaptureMode::ThreadLocal, |inner| {
                        match inner.wait_captured(e) {
                            Err(Error::Refused { .. }) => Ok(()),
                            other => other,
                        }
                    })?;
                    assert_eq!(inner.node_count()?, 0);
                    Ok(())
                })?;
                assert_eq!(graph.node_count()?, 0);
                Ok(())
            },
        ),
        op(
            "GraphExec::launch on a stream of another device is refused",
            SWALLOW_GRAPH,
            |fx| {
                with_probes(|p| {
                    let mut s = fx.pool.acquire()?;
                    let exec = one_host_fn(&mut s, p)?.instantiate()?;
                    let other = fx.ctx1.new_stream()?;
                    match exec.launch(&other) {
                        Err(Error::Refused {
                            call: "cuGraphLaunch",
                            ..
                        }) => {}
                        other => panic!("launched on another device: {other:?}"),
                    }
                    assert_eq!(p.ran(), 0);
                    Ok(())
                })
            },
        ),
        op("exchange_capture_mode guards", SWALLOW_GRAPH, |_| {
            let relaxed = exchange_capture_mode(CaptureMode::Relaxed)?;
            assert_eq!(relaxed.previous(), Some(CaptureMode::Global));
            let local = exchange_capture_mode(CaptureMode::ThreadLocal)?;
            assert_eq!(local.previous(), Some(CaptureMode::Relaxed));
            drop(local);
            drop(relaxed);
            Ok(())
        }),
    ]
}

/// The event cache: a dropped event's handle is handed out again by `Event::new` and
/// `record_event` (no `cuEventCreate`), only to the same options.
fn event_cache_ops() -> Vec<Op> {
    vec![
        op(
            "Event::new + drop + Event::new (recycled)",
            SWALLOW_DROP,
            |fx| {
                let timing = EventOptions::new().timing(true);
                let e = Event::new(&fx.ctx, timing)?;
                let raw = e.raw();
                drop(e);
                let again = Event::new(&fx.ctx, timing)?;
                assert_eq!(again.raw(), raw, "the spare event is reused");
                assert!(!again.is_recorded());
                assert!(again.query()?, "a recycled event answers as a new one");
                let untimed = Event::new(&fx.ctx, EventOptions::new())?;
                assert_ne!(untimed.raw(), raw, "never to other options");
                fx.owned.record(&again)?;
                fx.owned.record(&untimed)?;
                again.synchronize()
            },
        ),
        op(
            "record_event + drop + record_event (recycled)",
            SWALLOW_DROP,
            |fx| {
                let e = fx.owned.record_event()?;
                let raw = e.raw();
                drop(e);
                let again = fx.owned.record_event()?;
                assert_eq!(again.raw(), raw);
                assert!(again.is_recorded());
                again.synchronize()
            },
        ),
        op("Context::clear_event_cache", SWALLOW_CLOSE_EVENT, |fx| {
            drop(fx.ctx.new_event(EventOptions::new())?);
            drop(fx.ctx.new_event(EventOptions::new().blocking_sync(true))?);
            assert_eq!(fx.ctx.cached_events(), 2);
            assert_eq!(fx.ctx.clear_event_cache()?, 2);
            assert_eq!(fx.ctx.cached_events(), 0);
            Ok(())
        }),
    ]
}

/// Polls a future once, with a waker that does nothing.
fn poll_once<F: Future + Unpin>(fut: &mut F) -> Poll<F::Output> {
    std::pin::Pin::new(fut).poll(&mut TaskContext::from_waker(Waker::noop()))
}

/// Holds `stream`'s later host functions until the returned sender is dropped (a host function
/// that waits on a channel), so that the test can drop its own owner first and the host function
/// is sure to hold the last one.
fn hold(stream: Stream<'_>) -> Result<mpsc::Sender<()>> {
    let (tx, rx) = mpsc::channel::<()>();
    stream.launch_host_func(move || {
        let _ = rx.recv();
    })?;
    Ok(tx)
}

/// After the host functions ran: exactly `n` destroys are queued (none was made inside a host
/// function), and an explicit drain makes them.
fn drain_expecting(n: usize) {
    settle();
    assert_eq!(deferred_pending(), n, "destroys queued by host functions");
    assert_eq!(drain_deferred(), n);
    assert_eq!(deferred_pending(), 0);
}

/// Host functions that drop the last owner of this crate's values, or close them: no driver call
/// inside (the mock would count it), the destroys queued and drained afterwards.
fn host_fn_drop_ops() -> Vec<Op> {
    vec![
        op(
            "Arc<OwnedStream> dropped in its own host function",
            SWALLOW_DROP,
            |fx| {
                let s = Arc::new(fx.ctx.new_stream()?);
                let gate = hold(s.as_stream())?;
                let keep = s.clone();
                s.launch_host_func(move || drop(keep))?;
                drop(s);
                drop(gate);
                drain_expecting(1);
                Ok(())
            },
        ),
        op(
            "Arc<OwnedStream> dropped in its own callback",
            SWALLOW_DROP,
            |fx| {
                let s = Arc::new(fx.ctx.new_stream()?);
                let gate = hold(s.as_stream())?;
                let keep = s.clone();
                s.add_callback(move |_status| drop(keep))?;
                drop(s);
                drop(gate);
                drain_expecting(1);
                Ok(())
            },
        ),
        op(
            "a deferred stream destroy drained by the next stream creation",
            SWALLOW_DROP,
            |fx| {
                let s = Arc::new(fx.ctx.new_stream()?);
                let gate = hold(s.as_stream())?;
                let keep = s.clone();
                s.launch_host_func(move || drop(keep))?;
                drop(s);
                drop(gate);
                settle();
                assert_eq!(deferred_pending(), 1);
                let next = fx.ctx.new_stream();
                assert_eq!(deferred_pending(), 0, "creation drained the queue first");
                next.map(drop)
            },
        ),
        op(
            "a deferred stream destroy drained by synchronize",
            SWALLOW_DROP,
            |fx| {
                let s = fx.ctx.new_stream()?;
                fx.owned.launch_host_func(move || drop(s))?;
                settle();
                assert_eq!(deferred_pending(), 1);
                let r = fx.owned.synchronize();
                assert_eq!(deferred_pending(), 0, "synchronize drained the queue");
                r
            },
        ),
        op(
            "a panicking host function whose unwinding drops a stream",
            SWALLOW_DROP,
            |fx| {
                let s = fx.ctx.new_stream()?;
                let t = fx.ctx.new_stream()?;
                t.launch_host_func(move || {
                    let _s = s;
                    panic!("dropping a stream while unwinding");
                })?;
                settle();
                assert_eq!(deferred_pending(), 1);
                match t.synchronize() {
                    Err(Error::HostFnPanicked { .. }) => {}
                    Err(e) => return Err(e),
                    Ok(()) => panic!("the panic was not reported"),
                }
                assert_eq!(deferred_pending(), 0);
                Ok(())
            },
        ),
        op(
            "a host function panicking with a stream as its payload",
            SWALLOW_DROP,
            |fx| {
                let s = fx.ctx.new_stream()?;
                // A stream of its own: a panic left unreported (a faulted synchronize) goes
                // with it.
                let t = fx.ctx.new_stream()?;
                t.launch_host_func(move || std::panic::panic_any(s))?;
                drain_expecting(1);
                match t.synchronize() {
                    Err(Error::HostFnPanicked { message, .. }) => {
                        assert_eq!(message, "non-string panic payload");
                        Ok(())
                    }
                    Err(e) => Err(e),
                    Ok(()) => panic!("the panic was not reported"),
                }
            },
        ),
        op("Event dropped in a host function", SWALLOW_DROP, |fx| {
            let e = fx.owned.record_event()?;
            let raw = e.raw();
            fx.owned.launch_host_func(move || drop(e))?;
            drain_expecting(0);
            let again = fx.ctx.new_event(EventOptions::new())?;
            assert_eq!(again.raw(), raw, "returned to the context's spare events");
            assert!(!again.is_recorded());
            assert!(again.query()?, "nothing to wait for until recorded");
            fx.owned.wait_event(&again)
        }),
        op(
            "interprocess Event dropped in a host function",
            SWALLOW_DROP,
            |fx| {
                let e = Event::new(&fx.ctx, EventOptions::new().interprocess(true))?;
                fx.owned.record(&e)?;
                fx.owned.launch_host_func(move || drop(e))?;
                drain_expecting(1);
                Ok(())
            },
        ),
        op(
            "Event dropped in a host function with the cache full",
            SWALLOW_DROP,
            |fx| {
                let options = EventOptions::new().blocking_sync(true);
                let events = (0..33)
                    .map(|_| Event::new(&fx.ctx, options))
                    .collect::<Result<Vec<_>>>()?;
                fx.owned.launch_host_func(move || drop(events))?;
                drain_expecting(1);
                assert_eq!(fx.ctx.cached_events(), 32, "kept up to the bound");
                Ok(())
            },
        ),
        op(
            "pool lease dropped in a host function",
            SWALLOW_DROP,
            |fx| {
                static POOL: OnceLock<StreamPool> = OnceLock::new();
                let pool = POOL.get_or_init(|| StreamPool::new(&fx.ctx, StreamOptions::new()));
                let lease = pool.acquire()?;
                let raw = lease.raw();
                lease.query()?;
                fx.owned.launch_host_func(move || drop(lease))?;
                drain_expecting(0);
                assert_eq!(pool.acquire()?.raw(), raw, "back in the pool");
                Ok(())
            },
        ),
        op(
            "StreamPool dropped in a host function",
            SWALLOW_DROP,
            |fx| {
                let pool = StreamPool::new(&fx.ctx, StreamOptions::new());
                pool.reserve(2)?;
                pool.acquire()?.query()?;
                fx.owned.launch_host_func(move || drop(pool))?;
                drain_expecting(2);
                Ok(())
            },
        ),
        op(
            "Completion dropped in a host function",
            SWALLOW_COMPLETED,
            |fx| {
                let mut c = fx.owned.completed();
                if let Poll::Ready(r) = poll_once(&mut c) {
                    r?;
                }
                fx.owned.launch_host_func(move || drop(c))?;
                drain_expecting(0);
                Ok(())
            },
        )
        .varying(VARYING_COMPLETED),
        op(
            "Context clone (not the last) dropped in a host function",
            SWALLOW_DROP,
            |fx| {
                let c = fx.ctx.clone();
                fx.owned.launch_host_func(move || drop(c))?;
                drain_expecting(0);
                Ok(())
            },
        ),
        op(
            "Context (last clone, with a spare event) dropped in a host function",
            SWALLOW_DROP,
            |fx| {
                let c = Context::primary(1)?;
                drop(c.new_event(EventOptions::new())?);
                assert_eq!(c.cached_events(), 1);
                fx.owned.launch_host_func(move || drop(c))?;
                // The spare event's destroy, then the release.
                drain_expecting(2);
                Ok(())
            },
        ),
        op(
            "OwnedStream and its Context (last owners) dropped in a host function",
            SWALLOW_DROP,
            |fx| {
                let c = Context::primary(1)?;
                let s = c.new_stream()?;
                fx.owned.launch_host_func(move || drop((s, c)))?;
                // The stream's destroy, then the release.
                drain_expecting(2);
                Ok(())
            },
        ),
        op(
            "OwnedStream::close inside a host function",
            SWALLOW_DROP,
            |fx| {
                let s = fx.ctx.new_stream()?;
                let (tx, rx) = mpsc::channel();
                fx.owned
                    .launch_host_func(move || tx.send(s.close()).expect("the test waits"))?;
                settle();
                let r = rx.recv().expect("the host function ran");
                assert!(
                    matches!(
                        r,
                        Err(Error::InHostFunction {
                            call: "cuStreamDestroy"
                        })
                    ),
                    "{r:?}"
                );
                drain_expecting(1);
                Ok(())
            },
        ),
        op("Event::close inside a host function", SWALLOW_DROP, |fx| {
            let e = fx.owned.record_event()?;
            let (tx, rx) = mpsc::channel();
            fx.owned
                .launch_host_func(move || tx.send(e.close()).expect("the test waits"))?;
            settle();
            let r = rx.recv().expect("the host function ran");
            assert!(
                matches!(
                    r,
                    Err(Error::InHostFunction {
                        call: "cuEventDestroy"
                    })
                ),
                "{r:?}"
            );
            drain_expecting(1);
            Ok(())
        }),
        op(
            "Context::clear_event_cache inside a host function",
            SWALLOW_DROP,
            |fx| {
                drop(fx.ctx.new_event(EventOptions::new())?);
                let c = fx.ctx.clone();
                let (tx, rx) = mpsc::channel();
                fx.owned.launch_host_func(move || {
                    tx.send(c.clear_event_cache()).expect("the test waits")
                })?;
                settle();
                let r = rx.recv().expect("the host function ran");
                assert!(matches!(r, Err(Error::InHostFunction { .. })), "{r:?}");
                assert_eq!(fx.ctx.cached_events(), 0);
                drain_expecting(1);
                Ok(())
            },
        ),
        op_frees(
            "Module dropped in a host function",
            SWALLOW_FREE_DROP,
            |fx| {
                let module = Module::from_ptx(&fx.ctx, PTX)?;
                fx.owned.launch_host_func(move || drop(module))?;
                drain_expecting(1);
                Ok(())
            },
        ),
        op_frees(
            "DeviceBuffer::free inside a host function",
            SWALLOW_FREE_DROP,
            |fx| {
                let buf = DeviceBuffer::<u32>::alloc(&fx.ctx, 4)?;
                let (tx, rx) = mpsc::channel();
                fx.owned
                    .launch_host_func(move || tx.send(buf.free()).expect("the test waits"))?;
                settle();
                let r = rx.recv().expect("the host function ran");
                assert!(
                    matches!(r, Err(Error::InHostFunction { call: "cuMemFree" })),
                    "{r:?}"
                );
                drain_expecting(1);
                Ok(())
            },
        ),
    ]
}

/// Runs one operation on a fresh thread; `Err` if it panicked. The run ends by waiting for its
/// host functions and destroying the spare events it left in the fixture's contexts (their
/// failure is swallowed, as a drop's: the handle then stays alive, see [`expected_after`]).
fn run(fx: &Fixture, op: &Op) -> std::thread::Result<Result<()>> {
    on_fresh_thread(|| {
        let r = (op.run)(fx);
        settle();
        let _ = fx.ctx.clear_event_cache();
        let _ = fx.ctx1.clear_event_cache();
        r
    })
}

/// What the mock saw during one run.
struct After {
    live: Live,
    bad_destroys: u64,
    bad_uses: u64,
    orphans: u64,
    host_fn_api_calls: u64,
    deferred: usize,
    dead_fixture_handles: Vec<&'static str>,
}

impl After {
    fn now(m: &MockDriver, fx: &Fixture) -> After {
        After {
            live: Live::now(m),
            bad_destroys: m.bad_destroys(),
            bad_uses: m.bad_uses(),
            orphans: m.orphans(),
            host_fn_api_calls: m.host_fn_api_calls(),
            deferred: deferred_pending(),
            dead_fixture_handles: fx
                .handles()
                .into_iter()
                .filter(|&(_, h)| m.destroyed(h as *mut u8) != Some(false))
                .map(|(what, _)| what)
                .collect(),
        }
    }

    /// The problems, given what may exist now.
    fn problems(&self, expected: &[Live]) -> Vec<String> {
        let mut p = Vec::new();
        if !expected.iter().any(|e| self.live.matches(e)) {
            p.push(format!(
                "left {:?}, expected one of {expected:?}",
                self.live
            ));
        }
        if self.bad_destroys != 0 {
            p.push(format!("{} bad destroys", self.bad_destroys));
        }
        if self.bad_uses != 0 {
            p.push(format!("{} uses of dead handles", self.bad_uses));
        }
        if self.orphans != 0 {
            p.push(format!(
                "{} objects destroyed with their context",
                self.orphans
            ));
        }
        if self.host_fn_api_calls != 0 {
            p.push(format!(
                "{} driver calls from host functions",
                self.host_fn_api_calls
            ));
        }
        if self.deferred != 0 {
            p.push(format!(
                "{} destroys deferred by host functions never drained",
                self.deferred
            ));
        }
        if !self.dead_fixture_handles.is_empty() {
            p.push(format!("destroyed {:?}", self.dead_fixture_handles));
        }
        p
    }
}

/// What may be left alive after `failed` failed: the handle that the failed destroy, release,
/// unload or free was for (the driver refused, so it still exists), and nothing else. In an
/// operation that `frees` a module or a buffer, a failure to bind the context for the free or to
/// wait for the context's work may also leave that one object allocated (freeing it could free
/// it under running work), or nothing if the failure came earlier.
fn expected_after(base: Live, failed: Option<&str>, frees: bool) -> Vec<Live> {
    let mut e = base;
    match failed {
        Some("cuStreamDestroy") => e.streams += 1,
        Some("cuEventDestroy") => e.events += 1,
        Some("cuDevicePrimaryCtxRelease") => e.retains += 1,
        Some("cuModuleUnload") => e.modules += 1,
        Some("cuMemFree") => e.allocations += 1,
        Some("cuCtxGetCurrent" | "cuCtxPushCurrent" | "cuCtxSynchronize") if frees => {
            let module = Live {
                modules: base.modules + 1,
                ..base
            };
            let allocation = Live {
                allocations: base.allocations + 1,
                ..base
            };
            return vec![base, module, allocation];
        }
        // The graph holds its host functions' user objects.
        Some("cuGraphDestroy") => {
            e.graphs += 1;
            e.user_objects = ANY;
        }
        Some("cuGraphExecDestroy") => {
            e.execs += 1;
            e.user_objects = ANY;
        }
        Some("cuUserObjectRelease") => e.user_objects += 1,
        _ => {}
    }
    vec![e]
}

/// The driver functions `run` called since the last reset: `(function, the binding of the ABI
/// called, calls)`.
fn called(m: &MockDriver) -> Vec<(&'static str, &'static str, u64)> {
    FUNCTIONS
        .iter()
        .flat_map(|&f| abis(m, f).into_iter().map(move |b| (f, b)))
        .map(|(f, b)| (f, b, m.calls(b)))
        .filter(|&(_, _, n)| n > 0)
        .collect()
}

/// Bindings that were called but whose function is missing from [`FUNCTIONS`].
fn called_outside_the_list(m: &MockDriver) -> Vec<&'static str> {
    let listed: Vec<_> = FUNCTIONS
        .iter()
        .flat_map(|f| SymbolInfo::abis(f))
        .map(|i| i.symbol)
        .collect();
    SymbolInfo::all()
        .iter()
        .filter(|i| !listed.contains(&i.symbol) && m.calls(i.name) > 0)
        .map(|i| i.name)
        .collect()
}

#[test]
fn every_operation_fails_cleanly_at_every_driver_call() {
    let (_lock, m) = mock();
    let fx = Fixture::new();
    let ops = operations();
    let mut failures: Vec<String> = Vec::new();
    let mut cases = 0usize;
    let mut discovered = 0u64;

    for op in &ops {
        // A clean run to fill the process-wide caches, then the one whose calls are recorded.
        let mut clean = Vec::new();
        for pass in ["warm-up", "clean"] {
            m.reset();
            let base = Live::now(m);
            let r = run(&fx, op);
            let after = After::now(m, &fx);
            // The warm-up may create what is cached for the process (the notifier stream, the
            // scope pools' streams, the fixture pool's stream); the clean run may not.
            let expected = if pass == "warm-up" { after.live } else { base };
            let problems = after.problems(&[expected]);
            match r {
                Ok(Ok(())) if problems.is_empty() => {}
                Ok(Ok(())) => failures.push(format!("{}: {pass} run: {problems:?}", op.name)),
                Ok(Err(e)) => failures.push(format!("{}: {pass} run failed: {e:?}", op.name)),
                Err(p) => failures.push(format!(
                    "{}: {pass} run panicked: {}",
                    op.name,
                    panic_message(&*p)
                )),
            }
            clean = called(m);
            // (The warm-up may resolve bindings, calling cuGetProcAddress; the clean run may not.)
            let outside = called_outside_the_list(m);
            if pass == "clean" && !outside.is_empty() {
                failures.push(format!("{}: calls {outside:?}, not in FUNCTIONS", op.name));
            }
        }
        if clean.is_empty() {
            failures.push(format!("{}: makes no driver call", op.name));
        }

        for &(symbol, binding, n) in &clean {
            discovered += n;
            for k in 1..=n {
                m.reset();
                let base = Live::now(m);
                m.fail(binding, k as u32, FAULT);
                let r = run(&fx, op);
                cases += 1;
                let fired = m.calls(binding) >= k;
                let after = After::now(m, &fx);
                let case = format!("{}: {binding} call {k}/{n} failing", op.name);
                if !fired && !op.varying.contains(&symbol) {
                    failures.push(format!("{case}: the run no longer makes that call"));
                }
                match r {
                    Err(p) => failures.push(format!("{case}: panicked: {}", panic_message(&*p))),
                    Ok(Err(e)) if e.call() == Some(symbol) && e.driver_code() == Some(FAULT) => {}
                    Ok(Err(e)) => failures.push(format!("{case}: returned {e:?}")),
                    Ok(Ok(())) if op.swallowed.contains(&symbol) => {}
                    Ok(Ok(())) => failures.push(format!("{case}: returned Ok")),
                }
                let problems = after.problems(&expected_after(base, Some(symbol), op.frees));
                if !problems.is_empty() {
                    failures.push(format!("{case}: {problems:?}"));
                }
            }
        }
    }
    report(&format!(
        "fault cases ({}): {cases} ({} operations)",
        flavour().name,
        ops.len()
    ));
    assert!(
        failures.is_empty(),
        "{} of {cases} fault cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    m.reset();
    fx.finish(m);
    assert_eq!((m.bad_destroys(), m.bad_uses()), (0, 0));
    assert_eq!(cases as u64, discovered);
    let min_operations = if flavour().has_abi("cuStreamGetId") {
        MIN_OPERATIONS + ID_OPERATIONS
    } else {
        MIN_OPERATIONS
    };
    assert!(
        ops.len() >= min_operations,
        "only {} operations (at least {min_operations} expected)",
        ops.len()
    );
    assert!(
        cases >= MIN_FAULT_CASES,
        "only {cases} fault cases ran (at least {MIN_FAULT_CASES} expected)"
    );
}

#[test]
fn every_listed_function_is_one_the_mock_exports() {
    let (_lock, m) = mock();
    assert_eq!(
        m.flavour(),
        flavour().name,
        "the flavour's library is loaded"
    );
    for f in FUNCTIONS {
        let exported = abis(m, f);
        // The flavour has the function in some ABI unless all of its ABIs are newer.
        let expected = SymbolInfo::abis(f)
            .iter()
            .any(|s| flavour().has_abi(s.name));
        assert_eq!(!exported.is_empty(), expected, "{f}: {exported:?}");
        for b in exported {
            // Panics if the mock does not export it.
            m.fail_always(b, FAULT);
        }
    }
    m.reset();
    assert!(m.configure("version=13000"));
}

/// Runs this whole file again against every other flavour, one child process each, and prints
/// each one's `fault cases (...)` line; fails with the output of every flavour that failed.
#[test]
fn the_fault_suite_passes_on_every_driver_flavour() {
    if Flavour::from_env().is_some() {
        return; // a child: the other tests are the suite
    }
    let others: Vec<&'static Flavour> = FLAVOURS.iter().filter(|f| *f != Flavour::full()).collect();
    let runs = run_in_each_flavour(
        &others,
        &[
            "--test-threads=1",
            "--nocapture",
            "--skip",
            "the_fault_suite_passes_on_every_driver_flavour",
        ],
        &[],
    );
    let mut failed = Vec::new();
    for r in &runs {
        let lines = r.lines_containing("fault cases (");
        match lines.as_slice() {
            [line] => report(line),
            _ => report(&format!("fault cases ({}): none reported", r.flavour.name)),
        }
        if !r.status.success() || lines.len() != 1 {
            failed.push(r.failure_report());
        }
    }
    assert_eq!(runs.len(), FLAVOURS.len() - 1);
    assert!(
        failed.is_empty(),
        "the fault suite failed on {} of {} flavours:\n{}",
        failed.len(),
        runs.len(),
        failed.join("\n")
    );
}

#[test]
fn a_borrowed_stream_is_never_destroyed() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let raw = raw_stream(&ctx);
        let destroyed = m.destroyed_streams();
        {
            let owner = ();
            // SAFETY: `raw` is live until the raw destroy below, after every view is gone.
            let view = unsafe { Stream::borrow_raw(raw, &owner) }.unwrap();
            assert_eq!(view.raw(), raw);
            view.launch_host_func(|| ()).unwrap();
            let ev = view.record_event().unwrap();
            view.wait_event(&ev).unwrap();
            view.wait_stream(ctx.legacy_stream()).unwrap();
            {
                let _guard = view.make_current();
                current_stream(&ctx, |cur| assert_eq!(cur, view));
            }
            view.scope(|s| s.fork()?.query().map(drop)).unwrap();
            block_on(view.completed()).unwrap();
            view.synchronize().unwrap();
            drop(ev);
        }
        assert_eq!(
            m.destroyed(raw),
            Some(false),
            "the view destroyed its stream"
        );
        assert_eq!(m.destroyed_streams(), destroyed);
        assert_eq!(raw_destroy(raw), SUCCESS, "the owner destroys it once");
        assert_eq!(m.destroyed(raw), Some(true));
        assert_eq!((m.bad_destroys(), m.bad_uses()), (0, 0));

        // The special values are refused, with no driver call.
        for special in [0usize, 1, 2] {
            // SAFETY: refused before any use.
            let r = unsafe { Stream::borrow_raw(special as ffi::CUstream, &()) };
            assert!(
                matches!(r, Err(Error::SpecialHandle { handle }) if handle == special),
                "{r:?}"
            );
        }
    });
}

#[test]
fn an_owned_stream_is_destroyed_exactly_once() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let base = Live::now(m);

        let s = ctx.new_stream().unwrap();
        let raw = s.raw();
        let d = m.destroyed_streams();
        drop(s);
        assert_eq!(m.destroyed_streams(), d + 1, "Drop destroys it");
        assert_eq!(m.destroyed(raw), Some(true));

        let s = ctx.new_stream().unwrap();
        let raw = s.raw();
        s.close().unwrap();
        assert_eq!(m.destroyed_streams(), d + 2, "close destroys it");
        assert_eq!(m.destroyed(raw), Some(true));

        // close reports a failed destroy and does not try again.
        let s = ctx.new_stream().unwrap();
        let raw = s.raw();
        m.fail("cuStreamDestroy", 1, FAULT);
        let err = s.close().unwrap_err();
        assert_eq!(err.call(), Some("cuStreamDestroy"), "{err:?}");
        assert_eq!(err.driver_code(), Some(FAULT));
        assert_eq!(m.calls("cuStreamDestroy"), 3, "one destroy per stream");
        assert_eq!(m.destroyed(raw), Some(false));
        assert_eq!(m.destroyed_streams(), d + 2);
        assert_eq!(raw_destroy(raw), SUCCESS, "the handle was left alive, once");

        // So does Drop, silently.
        let s = ctx.new_stream().unwrap();
        let raw = s.raw();
        m.fail("cuStreamDestroy", 1, FAULT);
        drop(s);
        assert_eq!(m.calls("cuStreamDestroy"), 5);
        assert_eq!(m.destroyed(raw), Some(false));
        assert_eq!(raw_destroy(raw), SUCCESS);

        assert_eq!(Live::now(m), base);
        assert_eq!((m.bad_destroys(), m.bad_uses()), (0, 0));
    });
}

#[test]
fn an_owned_event_is_destroyed_exactly_once() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let base = Live::now(m);
        let d = m.destroyed_events();

        // Drop keeps the handle for reuse; clearing the cache destroys it, once.
        let e = ctx.new_event(EventOptions::new()).unwrap();
        let raw = e.raw();
        drop(e);
        assert_eq!(m.destroyed(raw), Some(false), "kept as a spare event");
        assert_eq!(ctx.cached_events(), 1);
        assert_eq!(ctx.clear_event_cache().unwrap(), 1);
        assert_eq!(ctx.cached_events(), 0);
        assert_eq!(m.destroyed_events(), d + 1);
        assert_eq!(m.destroyed(raw), Some(true));

        // close destroys, never keeps.
        let e = ctx.new_event(EventOptions::new()).unwrap();
        let raw = e.raw();
        e.close().unwrap();
        assert_eq!(ctx.cached_events(), 0);
        assert_eq!(m.destroyed_events(), d + 2);
        assert_eq!(m.destroyed(raw), Some(true));

        let e = ctx.new_event(EventOptions::new()).unwrap();
        let raw = e.raw();
        m.fail("cuEventDestroy", 1, FAULT);
        let err = e.close().unwrap_err();
        assert_eq!(err.call(), Some("cuEventDestroy"), "{err:?}");
        assert_eq!(m.destroyed(raw), Some(false));
        assert_eq!(m.destroyed_events(), d + 2);
        // SAFETY: the mock checks the handle; the failed close left it to us.
        assert_eq!(unsafe { cuda_sys::cuEventDestroy(raw) }, SUCCESS);

        assert_eq!(Live::now(m), base);
        assert_eq!((m.bad_destroys(), m.bad_uses()), (0, 0));
    });
}

#[test]
fn a_panicking_host_function_is_reported_not_unwound() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let s = ctx.new_stream().unwrap();

        s.launch_host_func(|| panic!("boom")).unwrap();
        match s.synchronize() {
            Err(Error::HostFnPanicked { stream, message }) => {
                assert_eq!(message, "boom");
                assert_eq!(stream, s.raw() as usize);
            }
            other => panic!("expected HostFnPanicked, got {other:?}"),
        }
        s.synchronize().expect("a panic is reported once");

        // The same for a closure with captures (it travels boxed).
        let word = String::from("boom");
        s.launch_host_func(move || panic!("{word}")).unwrap();
        match s.synchronize() {
            Err(Error::HostFnPanicked { stream, message }) => {
                assert_eq!(message, "boom");
                assert_eq!(stream, s.raw() as usize);
            }
            other => panic!("expected HostFnPanicked, got {other:?}"),
        }
        s.synchronize().expect("a panic is reported once");

        // The driver's thread survived: a later host function runs.
        let (tx, rx) = mpsc::channel();
        s.launch_host_func(move || tx.send(7).unwrap()).unwrap();
        s.synchronize().unwrap();
        assert_eq!(rx.try_recv(), Ok(7));

        // A callback sees the stream's status: Ok.
        let (tx, rx) = mpsc::channel();
        s.add_callback(move |status| tx.send(status.is_ok()).unwrap())
            .unwrap();
        s.synchronize().unwrap();
        assert_eq!(rx.try_recv(), Ok(true));

        // A panicking callback is reported too.
        s.add_callback(|_| panic!("callback {}", 2)).unwrap();
        match s.synchronize() {
            Err(Error::HostFnPanicked { message, .. }) => assert_eq!(message, "callback 2"),
            other => panic!("expected HostFnPanicked, got {other:?}"),
        }

        // By query as well, and only on its own stream.
        let t = ctx.new_stream().unwrap();
        s.launch_host_func(|| panic!("again")).unwrap();
        ctx.synchronize().unwrap();
        assert!(t.query().unwrap());
        t.synchronize().unwrap();
        match s.query() {
            Err(Error::HostFnPanicked { message, .. }) => assert_eq!(message, "again"),
            other => panic!("expected HostFnPanicked, got {other:?}"),
        }
        assert!(s.query().unwrap());
        assert_eq!(m.host_fn_api_calls(), 0);
    });
}

/// Drops of [`ZstDrop`] values, process-wide.
static ZST_DROPS: AtomicUsize = AtomicUsize::new(0);

/// A zero-sized capture that counts its drops, for closures that capture nothing else.
struct ZstDrop;

impl Drop for ZstDrop {
    fn drop(&mut self) {
        ZST_DROPS.fetch_add(1, Ordering::SeqCst);
    }
}

/// Counts drops of a host function's capture.
struct DropCount(Arc<AtomicUsize>);

impl Drop for DropCount {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn a_refused_host_function_is_dropped_once_and_never_run() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let s = ctx.new_stream().unwrap();
        let streams = [s.as_stream(), ctx.legacy_stream(), ctx.per_thread_stream()];
        let refusals = [("cuLaunchHostFunc", false), ("cuStreamAddCallback", true)];
        for stream in streams {
            for (symbol, callback) in refusals {
                m.reset();
                m.fail_always(symbol, FAULT);
                let (ran, dropped) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
                let (r, d) = (ran.clone(), DropCount(dropped.clone()));
                let err = if callback {
                    stream.add_callback(move |_| {
                        let _d = d;
                        r.fetch_add(1, Ordering::SeqCst);
                    })
                } else {
                    stream.launch_host_func(move || {
                        let _d = d;
                        r.fetch_add(1, Ordering::SeqCst);
                    })
                }
                .unwrap_err();
                assert_eq!(err.call(), Some(symbol), "{err:?}");
                assert_eq!(dropped.load(Ordering::SeqCst), 1, "dropped when refused");
                m.reset();
                stream.synchronize().unwrap();
                ctx.synchronize().unwrap();
                assert_eq!(
                    ran.load(Ordering::SeqCst),
                    0,
                    "a refused closure never runs"
                );
                assert_eq!(dropped.load(Ordering::SeqCst), 1, "and is dropped once");
            }
        }
        // A closure that captures nothing (no allocation carries it) is dropped once, too.
        static ZST_RAN: AtomicUsize = AtomicUsize::new(0);
        for stream in streams {
            m.reset();
            m.fail_always("cuLaunchHostFunc", FAULT);
            let before = ZST_DROPS.load(Ordering::SeqCst);
            let z = ZstDrop;
            let f = move || {
                let _z = z;
                ZST_RAN.fetch_add(1, Ordering::SeqCst);
            };
            assert_eq!(std::mem::size_of_val(&f), 0);
            let err = stream.launch_host_func(f).unwrap_err();
            assert_eq!(err.call(), Some("cuLaunchHostFunc"), "{err:?}");
            assert_eq!(ZST_DROPS.load(Ordering::SeqCst), before + 1);
            m.reset();
            ctx.synchronize().unwrap();
            assert_eq!(
                ZST_RAN.load(Ordering::SeqCst),
                0,
                "a refused closure never runs"
            );
            assert_eq!(ZST_DROPS.load(Ordering::SeqCst), before + 1);
        }
        // The same when binding the default stream's context fails, before the driver sees it.
        m.reset();
        m.fail_always("cuCtxPushCurrent", FAULT);
        let dropped = Arc::new(AtomicUsize::new(0));
        let d = DropCount(dropped.clone());
        let err = ctx
            .legacy_stream()
            .launch_host_func(move || drop(d))
            .unwrap_err();
        assert_eq!(err.call(), Some("cuCtxPushCurrent"));
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
        m.reset();
    });
}

/// Regression: `StreamPool::reserve` once returned early on a failing creation and leaked the
/// streams it had made before it; they must stay in the pool.
#[test]
fn pool_reserve_failure_keeps_the_streams_it_made() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let base = Live::now(m);
        {
            let pool = StreamPool::new(&ctx, StreamOptions::new());
            m.fail("cuStreamCreate", 3, FAULT);
            let err = pool.reserve(4).unwrap_err();
            assert_eq!(err.call(), Some("cuStreamCreate"));
            assert_eq!(
                pool.created(),
                pool.free(),
                "every stream created is usable"
            );
        }
        assert_eq!(Live::now(m), base, "the pool's drop destroys what it made");
        assert_eq!((m.bad_destroys(), m.bad_uses()), (0, 0));
    });
}

/// A panic of a host function that captures nothing goes with its stream handle only (the
/// zero-sized fast path of `launch`), which names a default stream (0x1, 0x2, 0x0) in every
/// context: default streams must take the boxed path, which records the context, so that a panic
/// on device 0's legacy stream is not reported by device 1's.
#[test]
fn a_default_stream_panic_is_reported_in_its_own_context_only() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx0 = Context::primary(0).unwrap();
        let ctx1 = Context::primary(1).unwrap();
        ctx0.legacy_stream()
            .launch_host_func(|| panic!("device 0"))
            .unwrap();
        ctx0.synchronize().unwrap();
        let other = ctx1.legacy_stream().synchronize();
        let own = ctx0.legacy_stream().synchronize();
        assert!(other.is_ok(), "device 1's legacy stream reported {other:?}");
        assert!(
            matches!(&own, Err(Error::HostFnPanicked { message, .. }) if message == "device 0"),
            "{own:?}"
        );
        assert_eq!(m.host_fn_api_calls(), 0);
    });
}
