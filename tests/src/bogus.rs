//! Bogus values fed to every safe function that passes a caller's value to the driver (see
//! "Caller-supplied values reaching the driver" in `tests/README.md`), one case per function.
//!
//! Each case runs in a child process ([`run_in_child`]: this test binary again, filtered to the
//! one test, with [`CHILD_VAR`] naming it), so a crash fails the case with its signal instead of
//! killing the suite. The same cases run on the GPU (`tests/tests/bogus_values.rs`) and against
//! the test driver (`tests/mock-driver/tests/bogus_values.rs`, which includes this file): what
//! the driver answers differs between the two only where [`Env::driver`] says so, and what the
//! crate refuses must never reach the driver ([`Env::calls`]).

use std::fmt::Debug;
use std::process::Command;

use cuda_stream::{
    CaptureMode, Context, Device, Error, Event, EventOptions, IpcEventHandle, JitOptions, Module,
    Result, Stream, StreamOptions,
};
use cuda_stream_sys::{self as sys, CUresult};

/// The environment variable that makes a test binary run one case (its value: the case's name).
pub const CHILD_VAR: &str = "CUDA_STREAM_BOGUS_CASE";
const PASSED: &str = "bogus-values case passed: ";

/// Which driver the cases run against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    /// The NVIDIA driver, on a GPU.
    Real,
    /// The test driver (`tests/mock-driver`).
    Mock,
}

/// A case's way to run something with a stream of a context other than [`Env::ctx`]'s.
pub type WithOtherStream = Box<dyn Fn(&mut dyn FnMut(Stream<'_>))>;

/// How often a driver function was called so far (see [`Env::calls`]).
pub type CallCount = Box<dyn Fn(&str) -> u64>;

/// What a case runs with.
#[allow(missing_debug_implementations)]
pub struct Env {
    /// The primary context of device 0.
    pub ctx: Context,
    /// The driver.
    pub driver: Driver,
    /// How often a driver function (by exported symbol) was called so far, and `"bad uses"`:
    /// how often a handle the driver never made was used (the test driver counts both); `None`
    /// on the GPU.
    pub calls: Option<CallCount>,
    /// Runs the closure with a stream of another context (another device's primary context, or
    /// a non-primary context); `None` where there is none.
    pub other_stream: Option<WithOtherStream>,
    /// Context handles that are no primary context: a live non-primary context and a destroyed
    /// one (the GPU only: the test driver has no `cuCtxCreate`).
    pub non_primary_contexts: Vec<sys::CUcontext>,
}

impl Env {
    /// Runs `f` and asserts that it made no call of any of `calls` (where calls are counted).
    fn no_call_of<T>(&self, calls: &[&str], f: impl FnOnce() -> T) -> T {
        let count = |calls: &[&str]| {
            self.calls
                .as_ref()
                .map(|n| calls.iter().map(|c| n(c)).sum::<u64>())
        };
        let before = count(calls);
        let out = f();
        assert_eq!(count(calls), before, "the crate called one of {calls:?}");
        out
    }
}

/// One `#[test]` per case of this module, each calling `$runner(name, case)`: the one list of
/// cases that the GPU suite and the test driver's suite both run.
#[macro_export]
macro_rules! bogus_cases {
    ($runner:ident) => {
        $crate::bogus_cases!(@each $runner:
        error_names_of_unknown_codes,
        device_from_raw_with_a_bogus_ordinal,
        device_attribute_out_of_range,
        function_attribute_out_of_range,
        function_dynamic_shared_memory_too_large,
        occupancy_with_sizes_the_kernel_cannot_take,
        open_ipc_with_garbage_bytes,
        open_ipc_of_a_destroyed_event,
        ptx_that_is_not_ptx,
        ptx_with_an_elf_header_or_a_nul,
        jit_options_out_of_range,
        kernel_names_that_do_not_exist,
        device_ordinal_out_of_range,
        stream_priority_out_of_range,
        retain_if_primary_with_values_that_are_no_primary_context,
        objects_of_another_context,
        debug_dot_to_bad_paths,
        );
    };
    (@each $runner:ident: $($name:ident),* $(,)?) => {$(
        #[test]
        fn $name() {
            $runner(stringify!($name), $crate::bogus::$name);
        }
    )*};
}

/// Whether this process is the child that runs case `name`.
pub fn is_child(name: &str) -> bool {
    std::env::var(CHILD_VAR).is_ok_and(|v| v == name)
}

/// In the child: runs the case and prints the marker the parent looks for.
pub fn run_case(name: &str, env: &Env, case: fn(&Env)) {
    case(env);
    println!("{PASSED}{name}");
}

/// In the parent: runs this test binary again with only the test `name` (which must be a test
/// at the top level of the binary), and fails with the signal if the child crashed, or with its
/// output if it failed or ran no case.
pub fn run_in_child(name: &str) {
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = Command::new(exe)
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_VAR, name)
        .output()
        .expect("the test binary runs again");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("--- child {name}:\n{stdout}{stderr}---");
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = out.status.signal() {
            panic!("case {name}: the child process was killed by signal {signal} (a crash)");
        }
    }
    assert!(
        out.status.success(),
        "case {name}: the child process failed ({})",
        out.status
    );
    assert!(
        stdout.contains(&format!("{PASSED}{name}")),
        "case {name}: the child ran no case"
    );
}

/// Asserts that `r` is the driver's error `code` from `call`.
#[track_caller]
fn driver_error<T: Debug>(r: Result<T>, call: &str, code: CUresult) {
    println!("  {call}: {r:?}");
    match &r {
        Err(e) if e.call() == Some(call) && e.driver_code() == Some(code) => {}
        _ => panic!(
            "expected {call} to fail with {}, got {r:?}",
            sys::result_name(code)
        ),
    }
}

/// Asserts that `r` is an [`Error::InvalidArgument`].
#[track_caller]
fn invalid_argument<T: Debug>(r: Result<T>) {
    println!("  {r:?}");
    assert!(matches!(r, Err(Error::InvalidArgument { .. })), "{r:?}");
}

/// A module with one kernel, `noop()`.
const NOOP_PTX: &str = ".version 7.0\n.target sm_50\n.address_size 64\n\
                        .visible .entry noop()\n{\n\tret;\n}\n";

fn noop_module(env: &Env) -> Module {
    Module::from_ptx(&env.ctx, NOOP_PTX).expect("the noop module loads")
}

/// `result_name` / `result_description` (and so every error's `Display`) with codes that are
/// no `CUresult`: `cuGetErrorName` / `cuGetErrorString` answer `CUDA_ERROR_INVALID_VALUE`.
pub fn error_names_of_unknown_codes(_env: &Env) {
    let driver = sys::Driver::global().expect("the driver is loaded");
    let (name, string) = (
        driver.cuGetErrorName().expect("cuGetErrorName"),
        driver.cuGetErrorString().expect("cuGetErrorString"),
    );
    for code in [12_345, 0x7fff_fff0, u32::MAX].map(CUresult) {
        assert_eq!(sys::result_name(code), "CUDA_ERROR_UNKNOWN_CODE");
        assert_eq!(sys::result_description(code), "unrecognized CUresult");
        for f in [name, string] {
            let mut p = std::ptr::null();
            // SAFETY: `p` is a valid out-pointer; the code is the bogus value under test.
            let rc = unsafe { f(code, &mut p) };
            assert_eq!(rc, CUresult::CUDA_ERROR_INVALID_VALUE, "{code:?}");
        }
    }
    // The check can fail: a known code has a name.
    assert_eq!(
        sys::result_name(CUresult::CUDA_ERROR_INVALID_VALUE),
        "CUDA_ERROR_INVALID_VALUE"
    );
}

/// `Device::from_raw` with ordinals that name no device: each method that hands the ordinal to
/// the driver gets `CUDA_ERROR_INVALID_DEVICE`.
pub fn device_from_raw_with_a_bogus_ordinal(_env: &Env) {
    let count = Device::count().expect("cuDeviceGetCount") as i32;
    for raw in [-1, 0x1234, count, i32::MAX, i32::MIN] {
        let device = Device::from_raw(raw);
        let invalid = CUresult::CUDA_ERROR_INVALID_DEVICE;
        driver_error(device.name(), "cuDeviceGetName", invalid);
        let warp = sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_WARP_SIZE;
        driver_error(device.attribute(warp), "cuDeviceGetAttribute", invalid);
        driver_error(
            device.primary_context(),
            "cuDevicePrimaryCtxRetain",
            invalid,
        );
    }
}

/// `Device::attribute` with attributes that do not exist: `CUDA_ERROR_INVALID_VALUE`.
pub fn device_attribute_out_of_range(env: &Env) {
    let device = env.ctx.device();
    for a in [
        sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX,
        sys::CUdevice_attribute(0x7fff_ffff),
        sys::CUdevice_attribute(u32::MAX),
    ] {
        let r = device.attribute(a);
        driver_error(
            r,
            "cuDeviceGetAttribute",
            CUresult::CUDA_ERROR_INVALID_VALUE,
        );
    }
}

/// `Function::attribute` with attributes that do not exist: `CUDA_ERROR_INVALID_VALUE`.
pub fn function_attribute_out_of_range(env: &Env) {
    let module = noop_module(env);
    let f = module.function("noop").expect("noop");
    for a in [
        sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX,
        sys::CUfunction_attribute(0x7fff_ffff),
        sys::CUfunction_attribute(u32::MAX),
    ] {
        driver_error(
            f.attribute(a),
            "cuFuncGetAttribute",
            CUresult::CUDA_ERROR_INVALID_VALUE,
        );
    }
}

/// `Function::set_max_dynamic_shared_memory` with sizes no device has: above `i32::MAX` the
/// crate refuses it, below the driver does.
/// Occupancy questions with block sizes the kernel cannot take and more dynamic shared memory
/// than it may ask for, answered before the driver is asked: a block of no threads and too much
/// shared memory are refused, a block larger than the kernel's limit (or than an `int`) fits 0
/// times; the limits themselves are answered by the driver.
pub fn occupancy_with_sizes_the_kernel_cannot_take(env: &Env) {
    let module = noop_module(env);
    let f = module.function("noop").expect("noop");
    let max = f.max_threads_per_block();
    assert!(max > 0, "the function's block limit is known");
    let occupancy = [
        "cuOccupancyMaxActiveBlocksPerMultiprocessor",
        "cuOccupancyMaxPotentialBlockSize",
    ];
    env.no_call_of(&occupancy, || {
        invalid_argument(f.max_active_blocks_per_multiprocessor(0, 0));
    });
    for block in [max + 1, 1 << 31, u32::MAX] {
        let n = env.no_call_of(&occupancy, || {
            f.max_active_blocks_per_multiprocessor(block, 0)
        });
        println!("  a block of {block} threads: {n:?}");
        assert_eq!(n.ok(), Some(0));
    }
    let limit = f.max_dynamic_shared_memory().expect("the kernel's limit");
    for bytes in [limit + 1, 1 << 31, u32::MAX] {
        env.no_call_of(&occupancy, || {
            invalid_argument(f.max_active_blocks_per_multiprocessor(32, bytes));
            invalid_argument(f.max_potential_block_size(bytes));
        });
    }
    let n = f.max_active_blocks_per_multiprocessor(max, limit);
    println!("  a block of {max} threads and {limit} bytes: {n:?}");
    assert!(n.is_ok(), "{n:?}");
    let size = f.max_potential_block_size(limit).expect("a block size");
    assert!((1..=max).contains(&size.block), "{size:?}");
}

pub fn function_dynamic_shared_memory_too_large(env: &Env) {
    let module = noop_module(env);
    let f = module.function("noop").expect("noop");
    for bytes in [u32::MAX, 1 << 31] {
        env.no_call_of(&["cuFuncSetAttribute"], || {
            invalid_argument(f.set_max_dynamic_shared_memory(bytes));
        });
    }
    for bytes in [1 << 30, i32::MAX as u32] {
        driver_error(
            f.set_max_dynamic_shared_memory(bytes),
            "cuFuncSetAttribute",
            CUresult::CUDA_ERROR_INVALID_VALUE,
        );
    }
}

/// `Event::open_ipc` with bytes no process exported: the driver refuses them.
pub fn open_ipc_with_garbage_bytes(env: &Env) {
    for bytes in [[0u8; 64], [0x5a; 64], [0xff; 64]] {
        let r = Event::open_ipc(&env.ctx, &IpcEventHandle::from_bytes(bytes));
        let code = match env.driver {
            Driver::Real => CUresult::CUDA_ERROR_MAP_FAILED,
            Driver::Mock => CUresult::CUDA_ERROR_INVALID_VALUE,
        };
        driver_error(r, "cuIpcOpenEventHandle", code);
    }
}

/// `Event::open_ipc` with the handle of an event this process has destroyed: the driver
/// refuses it (`CUDA_ERROR_INVALID_CONTEXT`, measured on driver 580); the test driver, which
/// keeps every event's record state, opens it as an event that has nothing to wait for.
pub fn open_ipc_of_a_destroyed_event(env: &Env) {
    let event = Event::new(&env.ctx, EventOptions::new().interprocess(true)).expect("event");
    let handle = event.ipc_handle().expect("cuIpcGetEventHandle");
    event.close().expect("cuEventDestroy");
    let r = Event::open_ipc(&env.ctx, &handle);
    match env.driver {
        Driver::Real => driver_error(
            r,
            "cuIpcOpenEventHandle",
            CUresult::CUDA_ERROR_INVALID_CONTEXT,
        ),
        Driver::Mock => {
            println!("  {r:?}");
            let opened = r.expect("the test driver opens it");
            opened.synchronize().expect("cuEventSynchronize");
            assert!(opened.query().expect("cuEventQuery"));
        }
    }
}

/// `Module::from_ptx` with text that is no PTX: the driver refuses it (`CUDA_ERROR_INVALID_IMAGE`
/// for text without a `.version`, `CUDA_ERROR_INVALID_PTX` for a truncated kernel).
pub fn ptx_that_is_not_ptx(env: &Env) {
    let mut texts = vec!["this is not PTX", ""];
    if env.driver == Driver::Real {
        // The test driver does not compile PTX: it finds no fault in a truncated kernel.
        texts.push(&NOOP_PTX[..NOOP_PTX.len() - 4]);
    }
    for text in texts {
        let r = Module::from_ptx(&env.ctx, text);
        println!("  {text:?}: {r:?}");
        match &r {
            Err(Error::ModuleLoad { call, code, .. }) => {
                assert_eq!(*call, "cuModuleLoadDataEx");
                let ok = [
                    CUresult::CUDA_ERROR_INVALID_PTX,
                    CUresult::CUDA_ERROR_INVALID_IMAGE,
                ];
                assert!(ok.contains(&code.0), "{r:?}");
            }
            _ => panic!("expected ModuleLoad for {text:?}, got {r:?}"),
        }
    }
}

/// `Module::from_ptx` with text the driver would not read as PTX text (an ELF header, which it
/// would follow past the end) or that a C string cannot carry: refused before the driver.
pub fn ptx_with_an_elf_header_or_a_nul(env: &Env) {
    for text in [
        "\x7fELF",
        "\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0",
        "\x7fELF\x02\x01\x01\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f",
        ".version 7.0\0 .target sm_50",
    ] {
        env.no_call_of(&["cuModuleLoadDataEx"], || {
            invalid_argument(Module::from_ptx(&env.ctx, text));
            invalid_argument(env.ctx.load_ptx(text));
        });
    }
}

/// `JitOptions` with values out of range: the driver reads them as integers (never as
/// pointers) and refuses or ignores them. Measured on driver 580: an optimisation level of 1000
/// and a register limit of `u32::MAX` are ignored, a level of `u32::MAX` is
/// `CUDA_ERROR_INVALID_PTX`, a register limit of 0 `CUDA_ERROR_INVALID_VALUE`. The test driver
/// ignores every option.
pub fn jit_options_out_of_range(env: &Env) {
    use CUresult as R;
    for (options, real) in [
        (JitOptions::new().optimization_level(1000), None),
        (
            JitOptions::new().optimization_level(u32::MAX),
            Some(R::CUDA_ERROR_INVALID_PTX),
        ),
        (JitOptions::new().max_registers(u32::MAX), None),
        (
            JitOptions::new().max_registers(0),
            Some(R::CUDA_ERROR_INVALID_VALUE),
        ),
    ] {
        let r = Module::from_ptx_with(&env.ctx, NOOP_PTX, options);
        println!("  {options:?}: {r:?}");
        let expected = if env.driver == Driver::Real {
            real
        } else {
            None
        };
        match (r, expected) {
            (Ok(_), None) => {}
            (Err(e), Some(code)) => {
                assert_eq!(e.call(), Some("cuModuleLoadDataEx"), "{e:?}");
                assert_eq!(e.driver_code(), Some(code), "{e:?}");
            }
            (r, _) => panic!("{options:?}: expected {expected:?}, got {r:?}"),
        }
    }
}

/// `Module::function` with names the module does not define (the driver answers
/// `CUDA_ERROR_NOT_FOUND`, and `CUDA_ERROR_INVALID_VALUE` for an empty name), and one a C string
/// cannot carry (refused before the driver).
pub fn kernel_names_that_do_not_exist(env: &Env) {
    let module = noop_module(env);
    for name in ["does_not_exist", "noop "] {
        let r = module.function(name);
        println!("  {name:?}: {r:?}");
        assert!(matches!(r, Err(Error::FunctionNotFound { .. })), "{r:?}");
    }
    let r = module.function("");
    match env.driver {
        Driver::Real => driver_error(r, "cuModuleGetFunction", CUresult::CUDA_ERROR_INVALID_VALUE),
        Driver::Mock => assert!(matches!(r, Err(Error::FunctionNotFound { .. })), "{r:?}"),
    }
    env.no_call_of(&["cuModuleGetFunction"], || {
        invalid_argument(module.function("no\0op"));
    });
    assert!(module.function("noop").is_ok(), "the check can fail");
}

/// `Device::new` and `Context::primary` with ordinals past the last device: refused with the
/// count, before `cuDeviceGet`.
pub fn device_ordinal_out_of_range(env: &Env) {
    let count = Device::count().expect("cuDeviceGetCount");
    for ordinal in [count, count + 1, 1 << 31, 1 << 32, usize::MAX] {
        env.no_call_of(&["cuDeviceGet", "cuDevicePrimaryCtxRetain"], || {
            let r = Device::new(ordinal);
            println!("  {ordinal}: {r:?}");
            assert!(
                matches!(r, Err(Error::NoSuchDevice { ordinal: o, count: c }) if o == ordinal && c == count),
                "{r:?}"
            );
            let r = Context::primary(ordinal);
            assert!(matches!(r, Err(Error::NoSuchDevice { .. })), "{r:?}");
        });
    }
}

/// Stream priorities outside the context's range: refused before `cuStreamCreateWithPriority`,
/// or clamped when asked.
pub fn stream_priority_out_of_range(env: &Env) {
    let range = env
        .ctx
        .priority_range()
        .expect("cuCtxGetStreamPriorityRange");
    for priority in [i32::MIN, i32::MAX, range.greatest() - 1, range.least() + 1] {
        env.no_call_of(&["cuStreamCreateWithPriority"], || {
            let r = env
                .ctx
                .new_stream_with(StreamOptions::new().priority(priority));
            println!("  {priority}: {r:?}");
            assert!(matches!(r, Err(Error::InvalidPriority { .. })), "{r:?}");
        });
    }
    let s = env
        .ctx
        .new_stream_with(StreamOptions::new().priority_clamped(i32::MIN))
        .expect("a clamped priority");
    assert_eq!(s.priority().expect("cuStreamGetPriority"), range.greatest());
}

/// `Context::retain_if_primary` with values that are no primary context: `Ok(None)`, and the
/// value never reaches the driver (which would dereference it).
pub fn retain_if_primary_with_values_that_are_no_primary_context(env: &Env) {
    let on_stack = 0u64;
    let freed = Box::into_raw(Box::new([0u64; 8]));
    // SAFETY: made by `Box::into_raw` just above and freed once; only its address is used.
    drop(unsafe { Box::from_raw(freed) });
    let mut values: Vec<sys::CUcontext> = vec![
        std::ptr::null_mut(),
        0x1234 as sys::CUcontext,
        usize::MAX as sys::CUcontext,
        (&on_stack as *const u64).cast_mut().cast(),
        freed.cast(),
        (env.ctx.raw() as usize + 8) as sys::CUcontext,
    ];
    values.extend(&env.non_primary_contexts);
    for raw in values {
        let r = env.no_call_of(
            &[
                "bad uses",
                "cuCtxPushCurrent_v2",
                "cuCtxPushCurrent",
                "cuCtxSetCurrent",
                "cuCtxGetDevice",
            ],
            || Context::retain_if_primary(raw),
        );
        println!("  {raw:?}: {r:?}");
        assert!(matches!(r, Ok(None)), "{raw:?}: {r:?}");
    }
    // The check can fail: the primary context is found.
    let found = Context::retain_if_primary(env.ctx.raw()).expect("retain_if_primary");
    assert_eq!(found.as_ref(), Some(&env.ctx));
}

/// Work of one context handed a stream of another: refused by the crate (the driver would
/// answer `CUDA_ERROR_INVALID_HANDLE` or worse); a cross-context wait is legal.
pub fn objects_of_another_context(env: &Env) {
    let Some(other) = &env.other_stream else {
        println!("  skipped: no second context here");
        return;
    };
    let event = env.ctx.new_stream().expect("stream").record_event();
    let event = event.expect("cuEventRecord");
    let mut stream = env.ctx.new_stream().expect("stream");
    let graph = stream
        .capture(CaptureMode::ThreadLocal, |cap| cap.launch_host_func(|| ()))
        .expect("capture");
    let exec = graph.instantiate().expect("cuGraphInstantiate");
    let mut ran = false;
    other(&mut |s: Stream<'_>| {
        env.no_call_of(&["cuEventRecord", "cuGraphLaunch", "cuGraphUpload"], || {
            let r = s.record(&event);
            println!("  record: {r:?}");
            assert!(matches!(r, Err(Error::ContextMismatch { .. })), "{r:?}");
            for r in [exec.launch(&s), exec.upload(&s)] {
                println!("  {r:?}");
                assert!(matches!(r, Err(Error::Refused { .. })), "{r:?}");
            }
        });
        s.wait_event(&event)
            .expect("a wait across contexts is legal");
        s.synchronize().expect("cuStreamSynchronize");
        ran = true;
    });
    assert!(ran, "the other stream was lent");
    // The check can fail: on its own context's stream the graph launches.
    exec.launch(&stream).expect("cuGraphLaunch");
    stream.synchronize().expect("cuStreamSynchronize");
}

/// `Graph::debug_dot` with a path the driver cannot write, and one a C string cannot carry.
pub fn debug_dot_to_bad_paths(env: &Env) {
    let mut stream = env.ctx.new_stream().expect("stream");
    let graph = stream
        .capture(CaptureMode::ThreadLocal, |cap| cap.launch_host_func(|| ()))
        .expect("capture");
    let r = graph.debug_dot("/nonexistent-cuda-stream-dir/graph.dot");
    println!("  missing folder: {r:?}");
    let e = r.expect_err("a file in a missing folder");
    assert_eq!(e.call(), Some("cuGraphDebugDotPrint"), "{e:?}");
    assert!(e.driver_code().is_some(), "{e:?}");
    if env.driver == Driver::Real {
        let code = e.driver_code();
        assert_eq!(code, Some(CUresult::CUDA_ERROR_OPERATING_SYSTEM), "{e:?}");
    }
    env.no_call_of(&["cuGraphDebugDotPrint"], || {
        let r = graph.debug_dot("graph\0.dot");
        assert!(matches!(r, Err(Error::Refused { .. })), "{r:?}");
    });
}
