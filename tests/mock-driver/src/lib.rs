//! **A test instrument, not a driver.** A fault-injecting stand-in for libcuda that tests load
//! through `cuda_stream_sys::Driver::open`, so that the safe layer's ownership rules, error paths and
//! fallbacks can be checked on a machine without a GPU. Nothing ships it (`publish = false`);
//! it needs no GPU, no CUDA toolkit and no libcuda.
//!
//! # What it is
//!
//! This package builds a `cdylib`, `libcuda_mock_driver.so`, that exports the driver functions the
//! safe layer (`cuda-stream`) uses under the symbols the real libcuda exports (`cuStreamDestroy_v2`,
//! `cuCtxPushCurrent_v2`, `cuEventElapsedTime_v2`, ...) with the real signatures (the types come
//! from `cuda-stream-sys`), every older ABI of them the real driver still exports (`cuStreamDestroy`,
//! `cuEventElapsedTime`, ...), its own `cuGetProcAddress` and `cuGetProcAddress_v2`, plus
//! `cuda_mock_*` control functions. Its `rlib` side holds only [`mock_driver_path`], the
//! [`FLAVOURS`] and [`MockDriver`], the control handle; the exports are private to the cdylib and
//! must be reached through the loaded library, never by linking: a test binary that links the
//! rlib has its own, unused, copy of the mock's state.
//!
//! ```ignore
//! let path = cuda_mock_driver::mock_driver_path();
//! cuda_stream_sys::Driver::install_global(unsafe { cuda_stream_sys::Driver::open(&path) }?).unwrap();
//! let mock = unsafe { cuda_mock_driver::MockDriver::open(&path) }?; // same library, same state
//! mock.fail("cuStreamCreate", 2, cuda_stream_sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY);
//! // ... exercise the code under test ...
//! assert_eq!(mock.live_streams(), 0);
//! assert_eq!(mock.bad_destroys(), 0);
//! ```
//!
//! # The model
//!
//! - 2 devices (configurable, 0 to 8; with 0, `cuInit` returns `CUDA_ERROR_NO_DEVICE`), each with
//!   one primary context whose handle never changes. `cuDevicePrimaryCtxRetain`/`Release_v2`
//!   count references; when the last one goes the context is destroyed with every stream and
//!   event still in it (counted as *orphans*), and using it as current then gives
//!   `CUDA_ERROR_CONTEXT_IS_DESTROYED`. Releasing an unretained context is a bad destroy.
//! - Every function but `cuInit`, `cuDriverGetVersion`, `cuGetErrorName`, `cuGetErrorString` and
//!   `cuGetProcAddress` returns `CUDA_ERROR_NOT_INITIALIZED` before a successful `cuInit`.
//! - `cuGetProcAddress` (v1 and v2) answers by base name, version and per-thread flag from the
//!   functions the flavour exports, as the driver documents it: the newest ABI no newer than the
//!   version asked, `CUDA_ERROR_INVALID_VALUE` for a version above the driver's, and "not found"
//!   or "version not sufficient" otherwise (v2: `CUDA_SUCCESS`, a null pointer and the status;
//!   v1: `CUDA_ERROR_NOT_FOUND`). It is counted like any call (`cuda_mock_calls`), so tests can
//!   tell how a symbol was resolved.
//! - Each thread has its own context stack (`cuCtxSetCurrent`/`PushCurrent_v2`/`PopCurrent_v2`
//!   with the real semantics). Stream priorities range from 0 (least) to -5 (greatest); the
//!   requested priority is clamped.
//! - Streams and events are heap addresses the mock allocates and never frees, so a handle value
//!   is never reused and a stale handle is always recognised. The special stream handles 0x0
//!   (the NULL stream, i.e. legacy), 0x1 (`CU_STREAM_LEGACY`) and 0x2 (`CU_STREAM_PER_THREAD`)
//!   resolve through the calling thread's current context; with none, `CUDA_ERROR_INVALID_CONTEXT`.
//! - A stream is idle unless it has host functions or device work (below) queued:
//!   `cuLaunchHostFunc` and `cuStreamAddCallback` (called as `(stream, CUDA_SUCCESS, userData)`)
//!   run on one dedicated worker thread of the library, in the order they were queued over all
//!   streams. `cuStreamQuery` gives `CUDA_ERROR_NOT_READY` while the stream has one queued or
//!   running; `cuStreamSynchronize`, `cuEventSynchronize` and `cuCtxSynchronize` wait for them.
//!   The legacy stream's implicit synchronisation with blocking streams is not modelled beyond
//!   that global order. A driver call made from inside a host function returns
//!   `CUDA_ERROR_NOT_PERMITTED` (the driver's documented answer) and is counted.
//! - Capture (`state/capture.rs`) and graphs, executable graphs, user objects (`model/graph.rs`),
//!   with the driver's rules for the three capture modes, forks and joins through events,
//!   invalidation and unjoined captures; captured host functions, kernels, memsets and copies run
//!   on the worker on every launch (kernels and memory reach the capture through
//!   `capture::on_device_work`, graph launches through `capture::on_enqueue`, an opaque node); a
//!   user object's destructor runs on the worker after the launches that hold it. Each module's
//!   documentation states its model. Graph objects are not synchronised, as in the driver: an
//!   explicit graph call (`cuGraphRetainUserObject`, `cuGraphGetNodes`, ...) that begins while
//!   another on the same graph is under way is counted (`cuda_mock_concurrent_graph_calls`).
//! - A stream "owned by someone else" (for borrowing tests) is just one the test creates with
//!   `cuStreamCreate` through the driver: the mock does not care who created a handle, only that
//!   it did and that it is still alive.
//! - Events: flags `CU_EVENT_BLOCKING_SYNC` (1), `CU_EVENT_DISABLE_TIMING` (2),
//!   `CU_EVENT_INTERPROCESS` (4, only together with `DISABLE_TIMING`, else
//!   `CUDA_ERROR_INVALID_VALUE`). A record completes when everything queued on the stream before
//!   it has run, and takes its timestamp then. Recording on a stream of another context is
//!   `CUDA_ERROR_INVALID_HANDLE`; `cuStreamWaitEvent` across contexts is legal and keeps the
//!   stream not-ready until the record completes. `cuEventQuery` on a never-recorded event is
//!   `CUDA_SUCCESS`. `cuEventElapsedTime_v2`: an event without timing or never recorded gives
//!   `CUDA_ERROR_INVALID_HANDLE`, one not complete gives `CUDA_ERROR_NOT_READY`.
//!   `cuIpcGetEventHandle` needs `CU_EVENT_INTERPROCESS`; `cuIpcOpenEventHandle` in the same
//!   process opens a new handle (to destroy separately) sharing the original's record state.
//! - Modules, kernels and device memory (`model/device.rs`): `cuModuleLoadDataEx` takes PTX
//!   text, whose `.entry` kernels (with their parameter sizes and `.maxntid`) become the module's
//!   functions; text without one fails with `CUDA_ERROR_INVALID_PTX` and a `ptxas`-style error
//!   log. Device memory is host memory behind never-reused fake addresses. Memsets,
//!   device-to-device copies, the device side of host-to-device copies (the host side is read at
//!   the call) and kernel launches (counted) are queued on the stream and run by the worker in
//!   order; a device-to-host copy waits for the stream and copies before returning. The PTX is
//!   not executed, but a few kernels are computed on the host by name and signature
//!   (`model/kernels.rs`: `saxpy`, as in the example, the GPU tests' `store_after_spin`,
//!   `copy_u32`, `add_u32`, `spin`, and the random programs' `rp_set`, `rp_add`, `rp_scale`), so
//!   results can be checked; other kernels do nothing.
//!   `cuMemFree` and `cuModuleUnload` do not wait: queued work that reaches freed memory or an
//!   unloaded module counts as a bad use. `cuLaunchKernel` keeps the parameter bytes it read.
//! - **A race detector** (`model/races.rs`): the happens-before relation of what the mock runs
//!   (per stream a vector clock, advanced by stream order, event records and waits, the legacy
//!   stream's implicit synchronisation, host synchronisation and successful queries, graph
//!   launches with their nodes' dependencies), against which every access to device memory and
//!   page-locked host memory is checked when it is enqueued (memsets, copies, the kernels of
//!   `model/kernels.rs`, stream-ordered allocations and frees, `cuMemFree`, graph nodes at each
//!   launch, and what another library reports through `cuda_mock_stream_access`). A conflicting
//!   access not ordered after an earlier one, or a free not ordered after every access, is a
//!   race, recorded with both operations named; [`MockDriver::races`],
//!   [`MockDriver::race_reports`] and [`MockDriver::serialize`] (which fails a test that races)
//!   read them.
//! - Any use or destroy of a handle the mock did not create, or already destroyed, returns
//!   `CUDA_ERROR_INVALID_HANDLE` (`CUDA_ERROR_INVALID_CONTEXT` for contexts), is counted, and
//!   never crashes. No export unwinds into C: every body runs under `catch_unwind`, and a poisoned
//!   lock is taken over, never a panic.
//!
//! # Control
//!
//! Through the exported C functions (wrapped by [`MockDriver`]):
//!
//! ```c
//! void     cuda_mock_reset(void);                         // rules, overrides, counters -> CUDA_MOCK_CONFIG's
//! int      cuda_mock_configure(const char *spec);         // CUDA_MOCK_CONFIG syntax; 0, or -1 on a parse error
//! int      cuda_mock_fail(const char *name, uint32_t nth, uint32_t code); // nth >= 1, counted from now
//! int      cuda_mock_fail_always(const char *name, uint32_t code);
//! void     cuda_mock_clear_failures(void);                // the rules added since the reset go
//! void     cuda_mock_set_version(int version);            // cuDriverGetVersion's answer
//! const char *cuda_mock_flavour(void);                    // "CUDA 12.2, no cuGetProcAddress"
//! int      cuda_mock_exports(const char *name);           // 1 if this flavour exports it
//! int      cuda_mock_set_device_count(int count);         // 0..=8
//! uint64_t cuda_mock_live_streams(void);
//! uint64_t cuda_mock_live_events(void);
//! uint64_t cuda_mock_live_primary_retains(void);
//! uint64_t cuda_mock_destroyed_streams(void);             // successful destroys
//! uint64_t cuda_mock_destroyed_events(void);
//! uint64_t cuda_mock_bad_destroys(void);                  // unknown/double/special destroys, over-releases
//! uint64_t cuda_mock_bad_uses(void);                      // unknown/destroyed handles used
//! uint64_t cuda_mock_orphans(void);                       // destroyed with their context
//! uint64_t cuda_mock_host_fn_api_calls(void);             // driver calls from host functions
//! uint64_t cuda_mock_pending_host_fns(void);              // queued or running
//! uint64_t cuda_mock_live_graphs(void);                   // exports/user_objects.rs
//! uint64_t cuda_mock_live_graph_execs(void);
//! uint64_t cuda_mock_live_user_objects(void);             // with references left
//! uint64_t cuda_mock_user_object_destructors_run(void);   // since load, never reset
//! uint64_t cuda_mock_live_captures(void);                 // active or invalidated
//! uint64_t cuda_mock_concurrent_graph_calls(void);        // explicit graph calls on a graph already in use
//! int      cuda_mock_pause_after(const char *name);       // hold the next caller of name, once answered
//! int      cuda_mock_paused(void);                        // 1 while a caller is held
//! void     cuda_mock_resume(void);                        // let it go (cuda_mock_reset does too)
//! uint64_t cuda_mock_calls(const char *name);             // calls of a symbol, failed ones included
//! int      cuda_mock_destroyed(void *handle);             // 1 destroyed, 0 alive, -1 never created
//! uint64_t cuda_mock_live_modules(void);
//! uint64_t cuda_mock_live_allocations(void);
//! uint64_t cuda_mock_kernels_run(void);                   // never reset
//! int      cuda_mock_last_launch(uint32_t out[8]);        // grid, block, shared bytes, #params
//! int64_t  cuda_mock_last_launch_param(uint32_t i, uint8_t *out, size_t cap); // its size, or -1
//! int      cuda_mock_last_launch_attribute(uint32_t i, uint32_t out[4]); // id, values; or -1
//! int      cuda_mock_read_memory(uint64_t ptr, uint8_t *out, size_t len);     // 0, or -1
//! int64_t  cuda_mock_event_flags(void *handle);           // an event's creation flags, -1 if not one
//! uint64_t cuda_mock_races(void);                         // races found since the last reset
//! int64_t  cuda_mock_race_report(uint32_t i, uint8_t *out, size_t cap); // its length, or -1
//! void     cuda_mock_clear_races(void);
//! int      cuda_mock_host_access(uint64_t ptr, size_t len, int write); // checked as the host's
//! CUresult cuda_mock_stream_access(CUstream, const char *name, size_t n, const uint64_t *ptrs,
//!                                  const size_t *lens, const uint8_t *writes); // another library's work
//! ```
//!
//! A `name` is a binding name of cuda-stream-sys, meaning that binding's exported symbol: the name C
//! code writes (`cuStreamDestroy` means `cuStreamDestroy_v2`) or an ABI variant
//! (`cuStreamDestroy_v2000` means `cuStreamDestroy`); any other name is an exported symbol
//! (`cuStreamDestroy_v2`). So `cuEventElapsedTime` always means the CUDA 12.8 ABI, and
//! `cuEventElapsedTime_v2000` the original one. The functions taking a name return -1 (or 0
//! calls) for a symbol the flavour does not export. The first rule that fires on a call decides its result; a failed call has no other
//! effect (no handle is created, no out-pointer written). Counters and call counts cover the time
//! since the last reset, except the `live_*` ones, which count what exists.
//!
//! Through the environment: `CUDA_MOCK_CONFIG`, read once, at the first call into the library,
//! is the baseline `cuda_mock_reset` returns to. Entries are `key=value`, separated by `;`:
//!
//! ```text
//! CUDA_MOCK_CONFIG='fail=cuStreamCreate:1:2;fail=cuEventCreate:*:CUDA_ERROR_OUT_OF_MEMORY;version=12040;devices=1'
//! ```
//!
//! - `fail=SYMBOL:N:CODE`: fail the Nth call (1, 2, ...) or every call (`*`) with CODE, a number
//!   or a `CUDA_*` name;
//! - `version=V`: what `cuDriverGetVersion` reports (default: the flavour's version);
//! - `devices=N`: 0 to 8 devices (default 2);
//! - `pools=0` / `pools=1`: no device, or every device, has memory pools;
//! - `races=print`: each race the detector finds is also printed to stderr, as
//!   `cuda-mock-driver: race: ...` (for a child process such as an example); `races=off`: no
//!   race detector (to measure its cost).
//!
//! A string that does not parse aborts the process with a message: a misconfigured test must not
//! run on.
//!
//! # Flavours: one library per driver generation
//!
//! A loaded library cannot take back an export, so which symbols exist cannot be a run-time
//! setting (an `omit=` entry is refused). Instead the same source is built as several libraries,
//! one per [`Flavour`], each exporting exactly the symbols of its CUDA version: those whose ABI
//! version (cuda-stream-sys's `SymbolInfo::since`, from `cudaTypedefs.h`) is no newer, derived by the
//! build script from cuda-stream-sys's generated table, not from hand lists. Each version comes with
//! and without `cuGetProcAddress` (`-noproc`), so both of cuda-stream-sys's resolution paths run.
//!
//! - `cuda-mock-driver` (this package): CUDA 13.0, `libcuda_mock_driver.so`;
//! - `tests/mock-driver/flavours/cuda-X.Y[-noproc]`: packages `cuda-mock-driver-X-Y[-noproc]`
//!   with only a manifest (the same `src/` and `build.rs`), `libcuda_mock_driver_X_Y[_noproc].so`,
//!   for CUDA 11.4, 12.0, 12.2, 12.4, 12.8 and 13.0. [`FLAVOURS`] lists them all.
//!
//! Each reports its version from `cuDriverGetVersion`. They are separate libraries with separate
//! state, all linked with `-z nodelete`, so a dropped `Driver` never unloads one (its worker
//! thread and state live as long as the process, like the real driver's).
//!
//! # Finding the library
//!
//! Cargo builds the cdylib together with the rlib (one `rustc` run, `crate-type = ["cdylib",
//! "rlib"]`), so any test of a package that has this one as a (dev-)dependency gets it built
//! before the test runs: it lands as `target/<profile>/deps/libcuda_mock_driver.so` (no hash in
//! the name), and is also copied to `target/<profile>/` when the package itself is built. Test
//! executables live in `target/<profile>/deps/`; [`mock_driver_path`] looks there and one folder
//! up, from [`std::env::current_exe`]. A package that wants the other flavours adds their
//! packages as dev-dependencies too (never `use` them: their rlibs would bring more copies of the
//! exports), as this one does, and calls [`Flavour::path`].
//!
//! The mock becomes the driver either explicitly, with
//! `cuda_stream_sys::Driver::install_global(unsafe { Driver::open(mock_driver_path()) }?)` before
//! anything loads a driver ([`MockDriver::global`] does that once per process and returns the
//! control handle), or for a whole process (an example, a child process) through cuda-stream-sys's
//! `CUDA_SYS_LIBCUDA=/path/to/libcuda_mock_driver.so`.
//!
//! The mock's state is process-wide: tests in one binary that use it must be serialised (a static
//! `Mutex`) and call [`MockDriver::reset`] first.

// Without `cuGetProcAddress`, the functions a flavour's version lacks are compiled but unreached.
#![cfg_attr(not(exported = "cuGetProcAddress"), allow(dead_code))]

mod base;

mod model;

mod state;

mod exports;

mod control_device;

mod control_races;

mod flavours;

mod flavour_runs;

pub use control_device::MockLaunch;
pub use control_races::{RaceCheck, Serialized};
pub use flavour_runs::{FlavourRun, report, run_in_each_flavour};
pub use flavours::{FLAVOUR_VAR, FLAVOURS, Flavour, mock_driver_file_name, mock_driver_path};

use std::ffi::{CString, c_char, c_int, c_void};
use std::fmt;
use std::path::{Path, PathBuf};

use cuda_stream_sys::{CUresult, Driver};

type Counter = extern "C" fn() -> u64;

/// The control functions of a loaded mock library.
///
/// Open it from the same path as the `cuda_stream_sys::Driver` under test: the dynamic loader then hands
/// out the same library, so both see the same state.
pub struct MockDriver {
    path: PathBuf,
    _lib: libloading::Library,
    reset: extern "C" fn(),
    configure: unsafe extern "C" fn(*const c_char) -> c_int,
    fail: unsafe extern "C" fn(*const c_char, u32, u32) -> c_int,
    fail_always: unsafe extern "C" fn(*const c_char, u32) -> c_int,
    set_version: extern "C" fn(c_int),
    flavour: extern "C" fn() -> *const c_char,
    exports: unsafe extern "C" fn(*const c_char) -> c_int,
    set_device_count: extern "C" fn(c_int) -> c_int,
    counters: [Counter; 10],
    graph_counters: [Counter; 6],
    calls: unsafe extern "C" fn(*const c_char) -> u64,
    destroyed: extern "C" fn(*mut c_void) -> c_int,
    event_flags: extern "C" fn(*mut c_void) -> i64,
}

impl fmt::Debug for MockDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MockDriver")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

const COUNTERS: [&[u8]; 10] = [
    b"cuda_mock_live_streams\0",
    b"cuda_mock_live_events\0",
    b"cuda_mock_live_primary_retains\0",
    b"cuda_mock_destroyed_streams\0",
    b"cuda_mock_destroyed_events\0",
    b"cuda_mock_bad_destroys\0",
    b"cuda_mock_bad_uses\0",
    b"cuda_mock_orphans\0",
    b"cuda_mock_host_fn_api_calls\0",
    b"cuda_mock_pending_host_fns\0",
];

/// The counters of graphs and captures (`exports/user_objects.rs`).
const GRAPH_COUNTERS: [&[u8]; 6] = [
    b"cuda_mock_live_graphs\0",
    b"cuda_mock_live_graph_execs\0",
    b"cuda_mock_live_user_objects\0",
    b"cuda_mock_user_object_destructors_run\0",
    b"cuda_mock_live_captures\0",
    b"cuda_mock_concurrent_graph_calls\0",
];

fn c_string(s: &str) -> CString {
    CString::new(s.replace('\0', "")).unwrap_or_default()
}

impl MockDriver {
    /// The mock (the full flavour, [`mock_driver_path`]) as the process-wide driver: on the
    /// first call it is opened, installed with `cuda_stream_sys::Driver::install_global` and its control
    /// functions resolved; later calls return the same handle. For tests, which panic if a driver
    /// was installed before.
    pub fn global() -> &'static MockDriver {
        static MOCK: std::sync::OnceLock<MockDriver> = std::sync::OnceLock::new();
        MOCK.get_or_init(|| {
            let path = mock_driver_path();
            // SAFETY: both open the mock driver, built with this test.
            let (driver, mock) = unsafe { (Driver::open(&path), MockDriver::open(&path)) };
            let driver = driver.expect("the mock driver library opens");
            Driver::install_global(driver).expect("nothing loaded a driver before");
            mock.expect("the mock's control functions resolve")
        })
    }

    /// Opens the mock library at `path` and resolves its control functions.
    ///
    /// # Safety
    ///
    /// `path` is a build of this mock ([`mock_driver_path`], a [`Flavour::path`]): its control
    /// functions are called through the types they are defined with here, unchecked.
    pub unsafe fn open(path: impl AsRef<Path>) -> Result<MockDriver, libloading::Error> {
        let path = path.as_ref();
        // SAFETY: the mock (the caller's promise), whose initialisers are Rust statics
        // initialised lazily; loading it runs no code that could be unsound at any time.
        let lib = unsafe { libloading::Library::new(path) }?;
        // SAFETY: each symbol is one of the mock's exports, declared with exactly these types in
        // `exports/`; the pointers are copied out and used only while `_lib` keeps the library
        // loaded (and it is linked `-z nodelete`, so it stays loaded anyway).
        unsafe {
            let mut counters = [cuda_mock_never as Counter; 10];
            for (slot, name) in counters.iter_mut().zip(COUNTERS) {
                *slot = *lib.get::<Counter>(name)?;
            }
            let mut graph_counters = [cuda_mock_never as Counter; 6];
            for (slot, name) in graph_counters.iter_mut().zip(GRAPH_COUNTERS) {
                *slot = *lib.get::<Counter>(name)?;
            }
            Ok(MockDriver {
                path: path.to_path_buf(),
                reset: *lib.get(b"cuda_mock_reset\0")?,
                configure: *lib.get(b"cuda_mock_configure\0")?,
                fail: *lib.get(b"cuda_mock_fail\0")?,
                fail_always: *lib.get(b"cuda_mock_fail_always\0")?,
                set_version: *lib.get(b"cuda_mock_set_version\0")?,
                flavour: *lib.get(b"cuda_mock_flavour\0")?,
                exports: *lib.get(b"cuda_mock_exports\0")?,
                set_device_count: *lib.get(b"cuda_mock_set_device_count\0")?,
                counters,
                graph_counters,
                calls: *lib.get(b"cuda_mock_calls\0")?,
                destroyed: *lib.get(b"cuda_mock_destroyed\0")?,
                event_flags: *lib.get(b"cuda_mock_event_flags\0")?,
                _lib: lib,
            })
        }
    }

    /// The path it was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `cuda_mock_reset`: back to `CUDA_MOCK_CONFIG`'s rules and overrides, counters zeroed.
    pub fn reset(&self) {
        (self.reset)()
    }

    /// `cuda_mock_configure`: applies a `CUDA_MOCK_CONFIG`-style string on top of the current
    /// configuration. Returns false (and the mock prints why to stderr) if it does not parse.
    #[must_use]
    pub fn configure(&self, spec: &str) -> bool {
        let spec = c_string(spec);
        // SAFETY: a NUL-terminated string that outlives the call.
        unsafe { (self.configure)(spec.as_ptr()) == 0 }
    }

    /// `cuda_mock_fail`: fails the `nth` call (1-based, from now) of `name` with `code`. Panics
    /// if the mock does not export `name` or `nth` is 0 (a mistake in the test).
    pub fn fail(&self, name: &str, nth: u32, code: CUresult) {
        let c = c_string(name);
        // SAFETY: a NUL-terminated string that outlives the call.
        let rc = unsafe { (self.fail)(c.as_ptr(), nth, code.0) };
        assert_eq!(rc, 0, "cuda_mock_fail({name}, {nth}) refused");
    }

    /// `cuda_mock_fail_always`: fails every call of `name` with `code` until the next reset.
    /// Panics if the mock does not export `name`.
    pub fn fail_always(&self, name: &str, code: CUresult) {
        let c = c_string(name);
        // SAFETY: a NUL-terminated string that outlives the call.
        let rc = unsafe { (self.fail_always)(c.as_ptr(), code.0) };
        assert_eq!(rc, 0, "cuda_mock_fail_always({name}) refused");
    }

    /// `cuda_mock_clear_failures`: forgets the failure rules added since the last reset, and
    /// nothing else (counters and races stay).
    pub fn clear_failures(&self) {
        self.control::<extern "C" fn()>(b"cuda_mock_clear_failures\0")()
    }

    /// `cuda_mock_set_version`.
    pub fn set_version(&self, version: i32) {
        (self.set_version)(version)
    }

    /// `cuda_mock_flavour`: which flavour the library is, such as `CUDA 12.2`.
    pub fn flavour(&self) -> String {
        let p = (self.flavour)();
        if p.is_null() {
            return String::new();
        }
        // SAFETY: the mock returns a NUL-terminated string that lives as long as the process.
        unsafe { std::ffi::CStr::from_ptr(p) }
            .to_string_lossy()
            .into_owned()
    }

    /// `cuda_mock_exports`: whether this library exports the symbol `name` means.
    pub fn exports(&self, name: &str) -> bool {
        let c = c_string(name);
        // SAFETY: a NUL-terminated string that outlives the call.
        unsafe { (self.exports)(c.as_ptr()) == 1 }
    }

    /// `cuda_mock_set_device_count` (0 to 8); panics outside that range.
    pub fn set_device_count(&self, count: i32) {
        assert_eq!((self.set_device_count)(count), 0, "device count {count}");
    }

    /// Streams alive now.
    pub fn live_streams(&self) -> u64 {
        (self.counters[0])()
    }
    /// Events alive now.
    pub fn live_events(&self) -> u64 {
        (self.counters[1])()
    }
    /// Primary-context references held now.
    pub fn live_primary_retains(&self) -> u64 {
        (self.counters[2])()
    }
    /// Successful stream destroys since the last reset.
    pub fn destroyed_streams(&self) -> u64 {
        (self.counters[3])()
    }
    /// Successful event destroys since the last reset.
    pub fn destroyed_events(&self) -> u64 {
        (self.counters[4])()
    }
    /// Destroys of unknown, destroyed or special handles, and over-releases, since the last reset.
    pub fn bad_destroys(&self) -> u64 {
        (self.counters[5])()
    }
    /// Uses of unknown or destroyed handles since the last reset.
    pub fn bad_uses(&self) -> u64 {
        (self.counters[6])()
    }
    /// Streams and events destroyed with their context since the last reset.
    pub fn orphans(&self) -> u64 {
        (self.counters[7])()
    }
    /// Driver calls from inside host functions since the last reset.
    pub fn host_fn_api_calls(&self) -> u64 {
        (self.counters[8])()
    }
    /// Host functions, callbacks and event records queued or running now.
    pub fn pending_host_fns(&self) -> u64 {
        (self.counters[9])()
    }

    /// Graphs alive now (made by captures, not destroyed).
    pub fn live_graphs(&self) -> u64 {
        (self.graph_counters[0])()
    }
    /// Executable graphs alive now.
    pub fn live_graph_execs(&self) -> u64 {
        (self.graph_counters[1])()
    }
    /// User objects with references left now.
    pub fn live_user_objects(&self) -> u64 {
        (self.graph_counters[2])()
    }
    /// User-object destructors run since the library was loaded (not reset).
    pub fn user_object_destructors_run(&self) -> u64 {
        (self.graph_counters[3])()
    }
    /// Captures under way now (active or invalidated).
    pub fn live_captures(&self) -> u64 {
        (self.graph_counters[4])()
    }
    /// Explicit graph calls (`cuGraphRetainUserObject`, `cuGraphGetNodes`, ...) that began while
    /// another call on the same graph was under way, since the last reset: the driver does not
    /// synchronise graph objects, so callers must serialise them.
    pub fn concurrent_graph_calls(&self) -> u64 {
        (self.graph_counters[5])()
    }

    /// Calls of `name` since the last reset, failed ones included.
    pub fn calls(&self, name: &str) -> u64 {
        let c = c_string(name);
        // SAFETY: a NUL-terminated string that outlives the call.
        unsafe { (self.calls)(c.as_ptr()) }
    }

    /// The creation flags (`CU_EVENT_*`) of an event handle the mock created, alive or destroyed;
    /// `None` for anything else.
    pub fn event_flags<T>(&self, handle: *mut T) -> Option<u32> {
        u32::try_from((self.event_flags)(handle.cast())).ok()
    }

    /// Whether a stream or event handle was destroyed: `Some(true)` destroyed, `Some(false)`
    /// alive, `None` never created by the mock.
    pub fn destroyed<T>(&self, handle: *mut T) -> Option<bool> {
        match (self.destroyed)(handle.cast()) {
            1 => Some(true),
            0 => Some(false),
            _ => None,
        }
    }
}

extern "C" fn cuda_mock_never() -> u64 {
    0
}
