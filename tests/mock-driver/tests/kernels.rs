//! `cuda-stream`'s modules, launches and device memory against the mock driver: what each
//! operation asks the driver for (arguments as bytes, dimensions), what it refuses before calling
//! it, the bytes that memsets and copies leave in (host-backed) device memory, and that freeing
//! and unloading wait for the work still using them.

use std::error::Error as _;
use std::sync::mpsc;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use cuda_mock_driver::{MockDriver, MockLaunch};
use cuda_stream::ffi::CUresult;
use cuda_stream::{
    AsStream, CaptureMode, Context, DeviceBuffer, Error, JitOptions, LaunchConfig, Module, Stream,
    current_context_raw, deferred_failed, deferred_pending, drain_deferred, kernel_args,
};

const SUCCESS: CUresult = CUresult::CUDA_SUCCESS;

/// Three kernels: parameters of several sizes, none, and a `.maxntid` limit.
const PTX: &str = r#"
.version 7.0
.target sm_50
.address_size 64

.visible .entry saxpy(
    .param .u32 saxpy_n,
    .param .f32 saxpy_a,
    .param .u64 saxpy_x,
    .param .u64 saxpy_y
)
{
    ret;
}

.visible .entry nothing()
{
    ret;
}

.visible .entry small(.param .align 8 .b8 small_p[16])
.maxntid 128, 1, 1
{
    ret;
}
"#;

static LOCK: Mutex<()> = Mutex::new(());

/// Serialises the test, installs the mock as the process-wide driver (once) and resets it.
fn mock() -> (MutexGuard<'static, ()>, &'static MockDriver) {
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let m = MockDriver::global();
    m.reset();
    (guard, m)
}

/// Runs `f` on a fresh thread (no context current there) and joins it; a panic continues here.
fn isolated<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    std::thread::scope(|s| s.spawn(f).join()).unwrap_or_else(|p| std::panic::resume_unwind(p))
}

fn assert_clean(m: &MockDriver) {
    assert_eq!(
        (m.bad_destroys(), m.bad_uses(), m.orphans()),
        (0, 0, 0),
        "bad destroys, bad uses, orphans"
    );
}

#[test]
fn a_module_loads_from_ptx_with_its_logs_and_kernels() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let modules = m.live_modules();
        let module = Module::from_ptx_with(&ctx, PTX, JitOptions::new().line_info(true)).unwrap();
        assert_eq!(m.live_modules(), modules + 1);
        assert_eq!(
            current_context_raw().unwrap(),
            std::ptr::null_mut(),
            "unbound again"
        );
        assert!(
            module.info_log().contains("'saxpy'") && module.info_log().contains("'small'"),
            "the info log is kept: {:?}",
            module.info_log()
        );
        assert_eq!(module.context(), &ctx);

        let saxpy = module.function("saxpy").unwrap();
        assert_eq!(
            saxpy,
            module.function("saxpy").unwrap(),
            "one handle per kernel"
        );
        assert_eq!(saxpy.context_raw(), ctx.raw());
        assert_eq!(saxpy.max_threads_per_block(), 1024);
        assert_eq!(saxpy.registers().unwrap(), 16 + 2 * 4);
        assert_eq!(saxpy.ptx_version().unwrap(), 50);
        assert_eq!(saxpy.binary_version().unwrap(), 90);
        assert_eq!(saxpy.static_shared_memory().unwrap(), 0);
        assert_eq!(saxpy.local_memory().unwrap(), 0);
        assert_eq!(saxpy.const_memory().unwrap(), 0);
        assert_eq!(saxpy.max_dynamic_shared_memory().unwrap(), 48 * 1024);
        saxpy.set_max_dynamic_shared_memory(100 * 1024).unwrap();
        assert_eq!(saxpy.max_dynamic_shared_memory().unwrap(), 100 * 1024);
        let err = saxpy.set_max_dynamic_shared_memory(1 << 20).unwrap_err();
        assert_eq!(err.call(), Some("cuFuncSetAttribute"), "{err:?}");
        assert_eq!(
            module.function("small").unwrap().max_threads_per_block(),
            128
        );

        let err = module.function("saxpy_typo").unwrap_err();
        assert!(
            matches!(&err, Error::FunctionNotFound { name } if name == "saxpy_typo"),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "the module has no kernel named `saxpy_typo`"
        );
        assert!(matches!(
            module.function("a\0b"),
            Err(Error::InvalidArgument { .. })
        ));

        let syncs = m.calls("cuCtxSynchronize");
        drop(module);
        assert_eq!(m.live_modules(), modules);
        assert_eq!(m.calls("cuModuleUnload"), 1);
        assert_eq!(
            m.calls("cuCtxSynchronize"),
            syncs + 1,
            "the unload waits first"
        );

        // The same through `close`, and through `Context::load_ptx`.
        ctx.load_ptx(PTX).unwrap().close().unwrap();
        assert_eq!(m.live_modules(), modules);
        assert_clean(m);
    });
}

#[test]
fn a_bad_module_is_an_error_with_the_jit_log() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let modules = m.live_modules();
        let err =
            Module::from_ptx(&ctx, ".version 7.0\n.target sm_50\n// no kernels\n").unwrap_err();
        assert_eq!(err.call(), Some("cuModuleLoadDataEx"));
        assert_eq!(err.driver_code(), Some(CUresult::CUDA_ERROR_INVALID_PTX));
        assert_eq!(
            err.to_string(),
            "cuModuleLoadDataEx: CUDA_ERROR_INVALID_PTX"
        );
        let log = err.source().expect("the JIT log is the source").to_string();
        assert!(log.contains("ptxas") && log.contains(".entry"), "{log}");
        match &err {
            Error::ModuleLoad { log: l, .. } => assert_eq!(l.text(), log),
            other => panic!("{other:?}"),
        }
        assert_eq!(m.live_modules(), modules, "nothing loaded");

        // Refused before the driver sees it.
        let loads = m.calls("cuModuleLoadDataEx");
        let err = Module::from_ptx(&ctx, "a\0b").unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
        let truncated_elf = b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0";
        for image in [
            &truncated_elf[..],
            b"",
            b"no NUL byte",
            &0xBA55_ED50u32.to_le_bytes(),
        ] {
            // SAFETY: refused before the driver reads it.
            let err = unsafe { Module::from_image(&ctx, image) }.unwrap_err();
            assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
        }
        assert_eq!(m.calls("cuModuleLoadDataEx"), loads);

        // NUL-terminated PTX is an image too.
        let mut image = PTX.as_bytes().to_vec();
        image.push(0);
        // SAFETY: NUL-terminated PTX text.
        let module = unsafe { Module::from_image(&ctx, &image) }.unwrap();
        module.function("nothing").unwrap();
        drop(module);
        assert_eq!(m.live_modules(), modules);
        assert_clean(m);
    });
}

#[test]
fn a_launch_passes_its_arguments_and_shape() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let module = Module::from_ptx(&ctx, PTX).unwrap();
        let saxpy = module.function("saxpy").unwrap();
        let stream = ctx.new_stream().unwrap();
        let host_x: Vec<f32> = (0..1024).map(|i| i as f32).collect();
        let xs = DeviceBuffer::from_host(&ctx, &stream, &host_x).unwrap();
        let ys = DeviceBuffer::from_host(&ctx, &stream, &[1.0f32; 1024]).unwrap();
        let (n, a, x, y) = (1000u32, 2.5f32, xs.device_ptr(), ys.device_ptr());
        let run = m.kernels_run();
        let config = LaunchConfig::for_elements(n, 256).shared_memory(1024);
        // SAFETY: the arguments match the PTX's parameters; x and y hold 1024 floats.
        unsafe { saxpy.launch(&stream, config, &kernel_args![n, a, x, y]) }.unwrap();
        let launch = m.last_launch().expect("a launch");
        assert_eq!(
            launch,
            MockLaunch {
                grid: [4, 1, 1],
                block: [256, 1, 1],
                shared_memory_bytes: 1024,
                params: vec![
                    n.to_ne_bytes().to_vec(),
                    a.to_ne_bytes().to_vec(),
                    x.to_ne_bytes().to_vec(),
                    y.to_ne_bytes().to_vec(),
                ],
            }
        );
        stream.synchronize().unwrap();
        assert_eq!(m.kernels_run(), run + 1, "the kernel ran on the stream");
        // The mock computes `saxpy` (by name and signature): the first n values only.
        let got = ys.to_vec(&stream).unwrap();
        for (i, v) in got.iter().enumerate() {
            let expected = if i < 1000 { 2.5 * host_x[i] + 1.0 } else { 1.0 };
            assert_eq!(*v, expected, "y[{i}]");
        }

        // A kernel without parameters, a struct parameter, 3-D shapes.
        let nothing = module.function("nothing").unwrap();
        // SAFETY: no parameters.
        unsafe { nothing.launch(&stream, LaunchConfig::new((2, 3, 4), (8, 8, 2)), &[]) }.unwrap();
        let launch = m.last_launch().unwrap();
        assert_eq!((launch.grid, launch.block), ([2, 3, 4], [8, 8, 2]));
        assert!(launch.params.is_empty());
        let small = module.function("small").unwrap();
        let p = [7u64, 9u64];
        // SAFETY: `small` takes 16 bytes.
        unsafe { small.launch(&stream, LaunchConfig::new(1, 128), &kernel_args![p]) }.unwrap();
        let bytes: Vec<u8> = p.iter().flat_map(|v| v.to_ne_bytes()).collect();
        assert_eq!(m.last_launch().unwrap().params, vec![bytes]);
        stream.synchronize().unwrap();
        assert_eq!(m.kernels_run(), run + 3);
        assert_clean(m);
    });
}

#[test]
fn a_launch_the_kernel_cannot_run_is_refused_before_the_driver() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let ctx1 = Context::primary(1).unwrap();
        let module = Module::from_ptx(&ctx, PTX).unwrap();
        let small = module.function("small").unwrap();
        let (s0, s1) = (ctx.new_stream().unwrap(), ctx1.new_stream().unwrap());
        let p = [0u64; 2];
        let launch = |stream: Stream<'_>, config: LaunchConfig| {
            // SAFETY: `small` takes 16 bytes; the mock runs no code.
            unsafe { small.launch(&stream, config, &kernel_args![p]) }
        };
        let calls = m.calls("cuLaunchKernel");
        for s in [
            s1.as_stream(),
            ctx1.legacy_stream(),
            ctx1.per_thread_stream(),
        ] {
            let err = launch(s, LaunchConfig::new(1, 32)).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::ContextMismatch {
                        what: "the kernel's module"
                    }
                ),
                "{err:?}"
            );
        }
        for (config, words) in [
            (LaunchConfig::new(0, 32), "empty grid (0, 1, 1)"),
            (LaunchConfig::new((1, 0), 32), "empty grid (1, 0, 1)"),
            (LaunchConfig::new(1, (32, 1, 0)), "empty block (32, 1, 0)"),
            (LaunchConfig::for_elements(0, 128), "empty grid"),
            (
                LaunchConfig::new(1, (16, 16)),
                "a block (16, 16, 1) of 256 threads, more than the kernel's maximum of 128",
            ),
        ] {
            let err = launch(s0.as_stream(), config).unwrap_err();
            assert!(
                matches!(&err, Error::InvalidLaunch { reason } if reason.contains(words)),
                "{err}"
            );
        }
        assert_eq!(m.calls("cuLaunchKernel"), calls, "no driver call");
        // What the driver itself refuses comes back named.
        let err = launch(
            s0.as_stream(),
            LaunchConfig::new(1, 128).shared_memory(1 << 20),
        )
        .unwrap_err();
        assert_eq!(err.call(), Some("cuLaunchKernel"), "{err:?}");
        assert_eq!(err.driver_code(), Some(CUresult::CUDA_ERROR_INVALID_VALUE));
        assert_clean(m);
    });
}

#[test]
fn a_launch_on_a_default_stream_binds_its_context_for_the_call_only() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let ctx1 = Context::primary(1).unwrap();
        let module = Module::from_ptx(&ctx, PTX).unwrap();
        let nothing = module.function("nothing").unwrap();
        let run = m.kernels_run();
        for s in [
            ctx.legacy_stream(),
            ctx.per_thread_stream(),
            ctx.null_stream(),
        ] {
            // No context current: the launch makes `ctx` current for the call.
            assert!(current_context_raw().unwrap().is_null());
            // SAFETY: no parameters.
            unsafe { nothing.launch(&s, LaunchConfig::new(1, 1), &[]) }.unwrap();
            assert!(current_context_raw().unwrap().is_null(), "left unbound");
            // Another context current: the launch still goes to `ctx`'s stream.
            let bound = ctx1.bind().unwrap();
            // SAFETY: as above.
            unsafe { nothing.launch(&s, LaunchConfig::new(1, 1), &[]) }.unwrap();
            assert_eq!(current_context_raw().unwrap(), ctx1.raw(), "restored");
            drop(bound);
            s.synchronize().unwrap();
        }
        assert_eq!(m.kernels_run(), run + 6);
        // An explicit stream needs no binding: the mock resolves it without a current context.
        let s = ctx.new_stream().unwrap();
        let pushes = m.calls("cuCtxPushCurrent");
        // SAFETY: as above.
        unsafe { nothing.launch(&s, LaunchConfig::new(1, 1), &[]) }.unwrap();
        assert_eq!(m.calls("cuCtxPushCurrent"), pushes);
        s.synchronize().unwrap();
        assert_clean(m);
    });
}

#[test]
fn buffers_hold_what_memsets_and_copies_write() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let s = ctx.new_stream().unwrap();
        let allocations = m.live_allocations();

        let a = DeviceBuffer::<u32>::zeroed(&ctx, &s, 5).unwrap();
        assert_eq!((a.len(), a.byte_len(), a.is_empty()), (5, 20, false));
        assert_eq!(a.context(), &ctx);
        assert_eq!(m.live_allocations(), allocations + 1);
        s.synchronize().unwrap();
        assert_eq!(m.read_memory(a.device_ptr(), 20), Some(vec![0; 20]));

        a.fill(&s, 0x0102_0304).unwrap();
        assert_eq!(a.to_vec(&s).unwrap(), [0x0102_0304; 5]);
        let b = DeviceBuffer::from_host(&ctx, &s, &[1u32, 2, 3, 4, 5]).unwrap();
        a.copy_from(&s, &b).unwrap();
        let mut host = [0u32; 5];
        a.copy_to_host(&s, &mut host).unwrap();
        assert_eq!(host, [1, 2, 3, 4, 5]);
        a.copy_from_host(&s, &[9, 8, 7, 6, 5]).unwrap();
        assert_eq!(a.to_vec(&s).unwrap(), [9, 8, 7, 6, 5]);
        a.copy_from(&s, &a).unwrap();
        assert_eq!(
            a.to_vec(&s).unwrap(),
            [9, 8, 7, 6, 5],
            "a copy onto itself is a no-op"
        );

        // Fills pick the widest memset the value allows.
        let (d8, d16, d32) = ("cuMemsetD8Async", "cuMemsetD16Async", "cuMemsetD32Async");
        let count = |m: &MockDriver| (m.calls(d8), m.calls(d16), m.calls(d32));
        let bytes = DeviceBuffer::<u8>::alloc(&ctx, 7).unwrap();
        let before = count(m);
        bytes.fill(&s, 0xab).unwrap();
        assert_eq!(count(m), (before.0 + 1, before.1, before.2), "7 bytes: D8");
        assert_eq!(bytes.to_vec(&s).unwrap(), [0xab; 7]);
        let halves = DeviceBuffer::<u16>::alloc(&ctx, 3).unwrap();
        halves.fill(&s, 0xbeef).unwrap();
        assert_eq!(halves.to_vec(&s).unwrap(), [0xbeef; 3]);
        let doubles = DeviceBuffer::<f64>::alloc(&ctx, 4).unwrap();
        let before = count(m);
        doubles.fill(&s, 0.0).unwrap();
        assert_eq!(count(m), (before.0, before.1, before.2 + 1), "zero: D32");
        assert_eq!(doubles.to_vec(&s).unwrap(), [0.0; 4]);
        let err = doubles.fill(&s, 0.5).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
        assert_eq!(
            count(m),
            (before.0, before.1, before.2 + 1),
            "refused first"
        );
        let pairs = DeviceBuffer::<[u8; 2]>::alloc(&ctx, 3).unwrap();
        pairs.fill(&s, [1, 2]).unwrap();
        assert_eq!(pairs.to_vec(&s).unwrap(), [[1, 2]; 3]);

        // Lengths must match.
        let err = a.copy_from_host(&s, &[1, 2]).unwrap_err();
        assert!(
            matches!(
                err,
                Error::LengthMismatch {
                    expected: 5,
                    actual: 2
                }
            ),
            "{err:?}"
        );
        assert!(matches!(
            a.copy_to_host(&s, &mut [0; 6]),
            Err(Error::LengthMismatch {
                expected: 5,
                actual: 6
            })
        ));
        let short = DeviceBuffer::<u32>::alloc(&ctx, 4).unwrap();
        assert!(matches!(
            a.copy_from(&s, &short),
            Err(Error::LengthMismatch { .. })
        ));

        // An empty buffer allocates nothing.
        let allocs = m.calls("cuMemAlloc");
        let empty = DeviceBuffer::<u32>::from_host(&ctx, &s, &[]).unwrap();
        assert!(empty.is_empty());
        assert_eq!(empty.device_ptr(), 0);
        assert_eq!(empty.to_vec(&s).unwrap(), Vec::<u32>::new());
        empty.fill(&s, 1).unwrap();
        assert_eq!(m.calls("cuMemAlloc"), allocs);
        drop(empty);

        // Too big: refused here, or by the driver.
        assert!(matches!(
            DeviceBuffer::<u64>::alloc(&ctx, usize::MAX / 2),
            Err(Error::InvalidArgument { .. })
        ));
        let err = DeviceBuffer::<u8>::alloc(&ctx, 2 << 30).unwrap_err();
        assert_eq!(err.call(), Some("cuMemAlloc"));
        assert_eq!(err.driver_code(), Some(CUresult::CUDA_ERROR_OUT_OF_MEMORY));

        drop((a, b, bytes, halves, doubles, pairs, short));
        assert_eq!(m.live_allocations(), allocations);
        assert_clean(m);
    });
}

#[test]
fn the_raw_functions_move_bytes_on_any_stream() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let buf = DeviceBuffer::<u8>::zeroed(&ctx, &ctx.legacy_stream(), 64).unwrap();
        let p = buf.device_ptr();
        for s in [
            ctx.legacy_stream(),
            ctx.per_thread_stream(),
            ctx.null_stream(),
        ] {
            assert!(current_context_raw().unwrap().is_null());
            // SAFETY: every range lies inside `buf`, which outlives the synchronised work; the
            // host slices live until the stream is synchronised.
            unsafe {
                cuda_stream::memset_d8_async(&s, p, 0x11, 64).unwrap();
                cuda_stream::memset_d16_async(&s, p + 8, 0x2233, 4).unwrap();
                cuda_stream::memset_d32_async(&s, p + 16, 0x4455_6677, 2).unwrap();
                cuda_stream::memcpy_dtod_async(&s, p + 32, p, 24).unwrap();
                cuda_stream::memcpy_htod_async(&s, p + 56, &[0xa0u8, 0xa1, 0xa2]).unwrap();
                let mut out = [0u16; 32];
                cuda_stream::memcpy_dtoh_async(&s, &mut out, p).unwrap();
                s.synchronize().unwrap();
                let bytes: Vec<u8> = out.iter().flat_map(|w| w.to_ne_bytes()).collect();
                let mut expected = vec![0x11u8; 8];
                expected.extend([0x33, 0x22].repeat(4));
                expected.extend([0x77, 0x66, 0x55, 0x44].repeat(2));
                expected.extend(vec![0x11; 8]);
                expected.extend(expected[..24].to_vec());
                expected.extend([0xa0, 0xa1, 0xa2, 0x11, 0x11, 0x11, 0x11, 0x11]);
                assert_eq!(bytes, expected);
            }
            assert!(current_context_raw().unwrap().is_null(), "left unbound");
        }
        // A misaligned D32 memset and a range past the end are the driver's refusals.
        // SAFETY: refused by the mock, which checks every range.
        let err = unsafe { cuda_stream::memset_d32_async(&ctx.legacy_stream(), p + 2, 0, 1) }
            .unwrap_err();
        assert_eq!(err.call(), Some("cuMemsetD32Async"));
        // SAFETY: as above.
        let err =
            unsafe { cuda_stream::memset_d8_async(&ctx.legacy_stream(), p, 0, 65) }.unwrap_err();
        assert_eq!(err.call(), Some("cuMemsetD8Async"));
        assert_eq!(m.bad_uses(), 1, "the mock counts a range past the end");
        m.reset();

        // The async buffer copies: the caller waits before touching the host slices.
        let s = ctx.new_stream().unwrap();
        let mut back = [0u8; 64];
        // SAFETY: the slices are untouched until the stream is synchronised.
        unsafe {
            buf.copy_from_host_async(&s, &[5u8; 64]).unwrap();
            buf.copy_to_host_async(&s, &mut back).unwrap();
        }
        s.synchronize().unwrap();
        assert_eq!(back, [5; 64]);
        assert_clean(m);
    });
}

#[test]
fn safe_buffer_operations_refuse_other_contexts_and_captures() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let ctx1 = Context::primary(1).unwrap();
        let s = ctx.new_stream().unwrap();
        let s1 = ctx1.new_stream().unwrap();
        let a = DeviceBuffer::<u32>::zeroed(&ctx, &s, 4).unwrap();
        let b1 = DeviceBuffer::<u32>::zeroed(&ctx1, &s1, 4).unwrap();
        let mismatch = |r: cuda_stream::Result<()>| {
            assert!(matches!(r, Err(Error::ContextMismatch { .. })), "{r:?}");
        };
        mismatch(a.fill(&s1, 1));
        mismatch(a.fill(&ctx1.legacy_stream(), 1));
        mismatch(a.copy_from(&s, &b1));
        mismatch(a.copy_from_host(&s1, &[0; 4]));
        mismatch(a.copy_to_host(&s1, &mut [0; 4]));
        mismatch(a.to_vec(&s1).map(drop));
        // SAFETY: refused before anything is enqueued.
        unsafe {
            mismatch(a.copy_from_host_async(&s1, &[0; 4]));
            mismatch(a.copy_to_host_async(&s1, &mut [0; 4]));
        }
        mismatch(DeviceBuffer::<u32>::zeroed(&ctx, &s1, 4).map(drop));
        mismatch(DeviceBuffer::<u32>::from_host(&ctx, &s1, &[1]).map(drop));

        // A stream that is capturing a graph: the safe operations that allocate or wait for the
        // stream refuse it before enqueueing anything; those that take a plain stream cannot be
        // given the capture view at all, but could get another view of the same stream.
        // (`fill` and `copy_from` work in a capture: see the tests below.)
        let allocations = m.live_allocations();
        let syncs = m.calls("cuCtxSynchronize");
        let memsets = m.calls("cuMemsetD32Async");
        let capturing = |r: cuda_stream::Result<()>, what: &str| match r {
            Err(Error::Capturing { op }) => assert_eq!(op, what),
            other => panic!("{what}: {other:?}"),
        };
        let mut s = s;
        let raw = s.raw();
        let token = ();
        let graph = s
            .capture(CaptureMode::ThreadLocal, |cap| {
                capturing(
                    DeviceBuffer::<u32>::zeroed(&ctx, &cap, 4).map(drop),
                    "DeviceBuffer::zeroed",
                );
                // SAFETY: `s`'s handle, alive during its capture.
                let view = unsafe { Stream::borrow_raw(raw, &token) }.unwrap();
                capturing(
                    a.copy_from_host(view, &[0; 4]),
                    "DeviceBuffer::copy_from_host",
                );
                capturing(a.to_vec(view).map(drop), "DeviceBuffer::copy_to_host");
                capturing(
                    DeviceBuffer::<u32>::from_host(&ctx, view, &[1]).map(drop),
                    "DeviceBuffer::from_host",
                );
                let err = DeviceBuffer::<u32>::zeroed(&ctx, &cap, 4).unwrap_err();
                assert_eq!(
                    err.to_string(),
                    "DeviceBuffer::zeroed cannot be recorded into a graph capture (it allocates \
                     or waits for the stream)"
                );
                assert_eq!(m.live_allocations(), allocations, "nothing was allocated");
                assert_eq!(m.calls("cuCtxSynchronize"), syncs, "nor freed");
                assert_eq!(m.calls("cuMemsetD32Async"), memsets);
                // The raw functions record into a capture: their caller keeps the memory alive.
                // SAFETY: `a` outlives the graph's launches below.
                unsafe { cuda_stream::memset_d32_async(&cap, a.device_ptr(), 9, 4) }
            })
            .unwrap();
        assert_eq!(a.to_vec(&s).unwrap(), [0; 4], "captured, not run");
        let exec = graph.instantiate().unwrap();
        exec.launch(&s).unwrap();
        assert_eq!(a.to_vec(&s).unwrap(), [9; 4], "run by the graph's launch");
        a.fill(&s, 2).unwrap();
        assert_eq!(a.to_vec(&s).unwrap(), [2; 4]);
        assert_clean(m);
    });
}

/// Kernels, memsets and copies on a capture view (and on its forks) become graph nodes: nothing
/// runs during the capture, and every launch of the executable graph runs them again in the
/// captured order, copies to the host included.
#[test]
fn launches_memsets_and_copies_are_captured_and_replayed() {
    let (_lock, m) = mock();
    isolated(|| {
        const N: usize = 1000;
        let ctx = Context::primary(0).unwrap();
        let mut s = ctx.new_stream().unwrap();
        let module = Module::from_ptx(&ctx, PTX).unwrap();
        let saxpy = module.function("saxpy").unwrap();
        let host_x: Vec<f32> = (0..N).map(|i| i as f32).collect();
        let x = DeviceBuffer::from_host(&ctx, &s, &host_x).unwrap();
        let y = DeviceBuffer::<f32>::zeroed(&ctx, &s, N).unwrap();
        let z = DeviceBuffer::<f32>::zeroed(&ctx, &s, N).unwrap();
        let mut out = vec![0f32; N];
        let half = N / 2;
        let run = m.kernels_run();
        // `y[at..at + n] = a * x[at..at + n] + y[at..at + n]` on `stream`.
        let saxpy_on = |stream: &cuda_stream::CaptureStream<'_>, n: usize, a: f32, at: usize| {
            let n32 = n as u32;
            let at = (at * 4) as u64;
            let (px, py) = (x.device_ptr() + at, y.device_ptr() + at);
            let config = LaunchConfig::for_elements(n32, 128);
            // SAFETY: saxpy takes (u32, f32, pointer, pointer); `x` and `y` hold N floats and
            // outlive the graph's launches.
            unsafe { saxpy.launch(stream, config, &kernel_args![n32, a, px, py]) }
        };
        let out_ptr = out.as_mut_ptr();
        let graph = s
            .capture(CaptureMode::ThreadLocal, |cap| {
                // y = 1, then each fork computes y = 2x + y on its half, then z = y and the host
                // gets a copy of z.
                // SAFETY: `y` holds N floats and outlives the graph's launches.
                unsafe { cuda_stream::memset_d32_async(&cap, y.device_ptr(), 1f32.to_bits(), N) }?;
                cap.scope(|sc| {
                    let (a, b) = (sc.fork()?, sc.fork()?);
                    saxpy_on(&a, half, 2.0, 0)?;
                    saxpy_on(&b, N - half, 2.0, half)
                })?;
                // SAFETY: `z`, `y` hold N floats and `out` N floats; all outlive the launches,
                // and `out` is read only after the stream is synchronised.
                unsafe {
                    cuda_stream::memcpy_dtod_async(&cap, z.device_ptr(), y.device_ptr(), 4 * N)?;
                    cuda_stream::memcpy_dtoh_async(
                        &cap,
                        std::slice::from_raw_parts_mut(out_ptr, N),
                        z.device_ptr(),
                    )
                }
            })
            .unwrap();
        assert_eq!(m.kernels_run(), run, "nothing ran during the capture");
        assert_eq!(graph.node_count().unwrap(), 5);
        assert_eq!(z.to_vec(&s).unwrap(), vec![0.0; N]);
        let exec = graph.instantiate().unwrap();
        for replay in 1..=3 {
            z.fill(&s, 0.0).unwrap();
            exec.launch(&s).unwrap();
            s.synchronize().unwrap();
            assert_eq!(m.kernels_run(), run + 2 * replay);
            let expected: Vec<f32> = host_x.iter().map(|v| 2.0 * v + 1.0).collect();
            assert_eq!(z.to_vec(&s).unwrap(), expected, "replay {replay}");
            assert_eq!(out, expected, "replay {replay}: the copy to the host");
        }
        assert_clean(m);
    });
}

#[test]
fn freeing_and_unloading_wait_for_the_work_that_uses_them() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let s = ctx.new_stream().unwrap();
        let (open_tx, open_rx) = mpsc::channel::<()>();

        // Work held back by a host function that waits for the test: a memset into `buf` and a
        // kernel of `module` are queued behind it.
        let buf = DeviceBuffer::<u32>::alloc(&ctx, 16).unwrap();
        let module = Module::from_ptx(&ctx, PTX).unwrap();
        let nothing = module.function("nothing").unwrap();
        s.launch_host_func(move || {
            let _ = open_rx.recv();
        })
        .unwrap();
        buf.fill(&s, 7).unwrap();
        // SAFETY: no parameters.
        unsafe { nothing.launch(&s, LaunchConfig::new(1, 1), &[]) }.unwrap();
        assert!(!s.query().unwrap());

        // Dropping them blocks until the work has run, then frees: no use after free.
        let (dropped_tx, dropped_rx) = mpsc::channel();
        std::thread::scope(|scope| {
            scope.spawn(move || {
                drop(buf);
                drop(module);
                dropped_tx.send(()).unwrap();
            });
            assert!(
                dropped_rx.recv_timeout(Duration::from_millis(200)).is_err(),
                "the drops returned while work using them was queued"
            );
            open_tx.send(()).unwrap();
            dropped_rx.recv().unwrap();
        });
        assert_clean(m);

        // The mock does catch a free that does not wait: a raw `cuMemFree` under queued work.
        let (open_tx, open_rx) = mpsc::channel::<()>();
        let buf = DeviceBuffer::<u32>::alloc(&ctx, 16).unwrap();
        s.launch_host_func(move || {
            let _ = open_rx.recv();
        })
        .unwrap();
        buf.fill(&s, 7).unwrap();
        let (ptr, _) = buf.into_raw().expect("no graph holds it");
        {
            let _bound = ctx.bind().unwrap();
            // SAFETY: the test's deliberate use after free, which the mock detects.
            assert_eq!(unsafe { cuda_sys::cuMemFree(ptr) }, SUCCESS);
        }
        open_tx.send(()).unwrap();
        s.synchronize().unwrap();
        assert_eq!(m.bad_uses(), 1, "the queued memset found its memory freed");
    });
}

/// No CUDA call inside a host function: a module and buffers whose last owners are dropped (or
/// closed) there, together with the last clone of their context, are unloaded and freed later on
/// an ordinary thread, after their context's work and before the context's release.
#[test]
fn modules_and_buffers_dropped_inside_a_host_function_are_freed_later() {
    let (_lock, m) = mock();
    isolated(|| {
        let (failed, frees) = (deferred_failed(), m.calls("cuMemFree"));
        // Retains that outlive tests (the fork pools of `scope`) are not this test's.
        let retains = m.live_primary_retains();
        let ctx = Context::primary(0).unwrap();
        let (module, closed, buf, freed) = {
            let s0 = ctx.new_stream().unwrap();
            let buf = DeviceBuffer::<u32>::zeroed(&ctx, &s0, 16).unwrap();
            s0.synchronize().unwrap();
            (
                Module::from_ptx(&ctx, PTX).unwrap(),
                Module::from_ptx(&ctx, PTX).unwrap(),
                buf,
                DeviceBuffer::<u8>::alloc(&ctx, 8).unwrap(),
            )
        };
        assert_eq!((m.live_modules(), m.live_allocations()), (2, 2));
        // The host function runs on a stream of another context, and holds the last owners of
        // everything of context 0, the context included.
        let other = Context::primary(1).unwrap();
        let s = other.new_stream().unwrap();
        let (gate_tx, gate_rx) = mpsc::channel::<()>();
        s.launch_host_func(move || {
            let _ = gate_rx.recv();
        })
        .unwrap();
        let (answers_tx, answers_rx) = mpsc::channel();
        let last_ctx = ctx.clone();
        s.launch_host_func(move || {
            drop(module);
            drop(buf);
            let answers = (closed.close(), freed.free());
            drop(last_ctx);
            answers_tx.send(answers).unwrap();
        })
        .unwrap();
        drop(ctx);
        drop(gate_tx);
        let (closed, freed) = answers_rx.recv().unwrap();
        assert!(
            matches!(
                closed,
                Err(Error::InHostFunction {
                    call: "cuModuleUnload"
                })
            ),
            "{closed:?}"
        );
        assert!(
            matches!(freed, Err(Error::InHostFunction { call: "cuMemFree" })),
            "{freed:?}"
        );
        assert_eq!(
            m.host_fn_api_calls(),
            0,
            "no driver call from the host function"
        );
        // Two unloads, two frees and the release of context 0; nothing destroyed yet.
        assert_eq!(deferred_pending(), 5);
        assert_eq!((m.live_modules(), m.live_allocations()), (2, 2));
        assert_eq!(m.calls("cuMemFree"), frees);
        assert_eq!(m.live_primary_retains(), retains + 2);

        // Drained in order: the unloads and frees (each after context 0's work) before the
        // release, so nothing is orphaned.
        assert_eq!(drain_deferred(), 5);
        assert_eq!(deferred_pending(), 0);
        assert_eq!(deferred_failed(), failed);
        assert_eq!((m.live_modules(), m.live_allocations()), (0, 0));
        assert_eq!(m.calls("cuMemFree"), frees + 2);
        assert_eq!(m.live_primary_retains(), retains + 1);
        assert_eq!(m.host_fn_api_calls(), 0);
        assert_clean(m);
    });
}

/// A free queued by a host function waits, when drained, for the context's work still using the
/// memory (no use after free), like a drop on an ordinary thread.
#[test]
fn a_deferred_free_waits_for_the_work_still_using_the_buffer() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let s = ctx.new_stream().unwrap();
        let t = ctx.new_stream().unwrap();
        let buf = DeviceBuffer::<u32>::alloc(&ctx, 16).unwrap();
        let ptr = buf.device_ptr();
        // The host function drops the buffer: its free is queued.
        let (dropped_tx, dropped_rx) = mpsc::channel();
        s.launch_host_func(move || {
            drop(buf);
            dropped_tx.send(()).unwrap();
        })
        .unwrap();
        dropped_rx.recv().unwrap();
        assert_eq!(deferred_pending(), 1);
        assert_eq!(m.live_allocations(), 1);
        // Then `t` holds back a memset into the memory, which is still allocated.
        let (open_tx, open_rx) = mpsc::channel::<()>();
        t.launch_host_func(move || {
            let _ = open_rx.recv();
        })
        .unwrap();
        // SAFETY: the allocation lives until the queued free runs, which waits for this memset.
        unsafe { cuda_stream::memset_d32_async(&t, ptr, 7, 16) }.unwrap();
        // The drain waits for the context's work: it returns only after `t` is let go.
        std::thread::scope(|scope| {
            let drained = scope.spawn(drain_deferred);
            std::thread::sleep(Duration::from_millis(100));
            assert!(
                !drained.is_finished(),
                "the free did not wait for the queued memset"
            );
            open_tx.send(()).unwrap();
            assert_eq!(drained.join().unwrap(), 1);
        });
        assert_eq!(m.live_allocations(), 0);
        assert_eq!(m.host_fn_api_calls(), 0);
        assert_clean(m);
    });
}

#[test]
fn buffers_move_between_raw_and_owned() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let s = ctx.new_stream().unwrap();
        let allocations = m.live_allocations();
        let buf = DeviceBuffer::from_host(&ctx, &s, &[1.5f32, 2.5]).unwrap();
        let (ptr, len) = buf.into_raw().expect("no graph holds it");
        assert_eq!(
            m.live_allocations(),
            allocations + 1,
            "handed over, not freed"
        );
        // SAFETY: handed over by `into_raw` just above.
        let back = unsafe { DeviceBuffer::<f32>::from_raw(&ctx, ptr, len) };
        assert_eq!(back.to_vec(&s).unwrap(), [1.5, 2.5]);
        back.free().unwrap();
        assert_eq!(m.live_allocations(), allocations);
        // A failed wait leaves the memory allocated: work might still use it.
        let buf = DeviceBuffer::<f32>::alloc(&ctx, 2).unwrap();
        m.fail("cuCtxSynchronize", 1, CUresult::CUDA_ERROR_LAUNCH_FAILED);
        let err = buf.free().unwrap_err();
        assert_eq!(err.call(), Some("cuCtxSynchronize"));
        assert_eq!(
            m.live_allocations(),
            allocations + 1,
            "leaked, not freed under work"
        );
        assert_eq!(m.calls("cuMemFree"), 1);
        assert_clean(m);
    });
}

#[test]
fn the_types_show_the_driver_handles() {
    let (_lock, _m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let module = Module::from_ptx(&ctx, PTX).unwrap();
        let f = module.function("saxpy").unwrap();
        assert!(format!("{module:?}").starts_with("Module { raw: 0x"));
        assert!(format!("{f:?}").contains("max_threads_per_block: 1024"));
        let buf = DeviceBuffer::<u8>::alloc(&ctx, 1).unwrap();
        assert!(format!("{buf:?}").contains("len: 1"));
    });
}

/// Waits until the mock's worker has run everything queued (host functions, user-object
/// destructors), then makes the frees that a destructor queued (no CUDA call is made on a driver
/// thread) on this, an ordinary, thread.
fn settle_graph_frees(m: &MockDriver) {
    let start = std::time::Instant::now();
    while m.pending_host_fns() != 0 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the worker never went idle"
        );
        std::thread::yield_now();
    }
    drain_deferred();
    assert_eq!(deferred_pending(), 0);
}

/// `fill` and `copy_from` on a capture view become graph nodes, and the graph keeps both buffers'
/// memory: a buffer dropped after the capture stays allocated while the graph or an executable
/// graph made from it exists, every replay finds it (no use of freed memory), and it is freed
/// once the last of them is gone.
#[test]
fn captured_fills_and_copies_keep_their_buffers_until_the_last_graph_goes() {
    let (_lock, m) = mock();
    isolated(|| {
        const N: usize = 1024;
        let ctx = Context::primary(0).unwrap();
        let mut s = ctx.new_stream().unwrap();
        let base = m.live_allocations();
        let out = DeviceBuffer::<f32>::zeroed(&ctx, &s, N).unwrap();
        let tmp = DeviceBuffer::<f32>::alloc(&ctx, N).unwrap();
        let (objects, frees) = (m.live_user_objects(), m.calls("cuMemFree"));
        let graph = s
            .capture(CaptureMode::ThreadLocal, |cap| {
                tmp.fill(&cap, 3.0)?;
                out.copy_from(&cap, &tmp)
            })
            .unwrap();
        assert_eq!(graph.node_count().unwrap(), 2);
        assert_eq!(m.live_user_objects(), objects + 2, "one per operation");
        assert!(tmp.is_held_by_graphs() && out.is_held_by_graphs());
        assert_eq!(out.to_vec(&s).unwrap(), vec![0.0; N], "captured, not run");

        drop(tmp);
        assert_eq!(m.live_allocations(), base + 2, "the graph holds `tmp`");
        let exec = graph.instantiate().unwrap();
        drop(graph);
        settle_graph_frees(m);
        assert_eq!(
            m.live_allocations(),
            base + 2,
            "the executable graph holds `tmp`"
        );
        assert_eq!(m.calls("cuMemFree"), frees);
        for replay in 1..=3 {
            out.fill(&s, 0.0).unwrap();
            exec.launch(&s).unwrap();
            assert_eq!(out.to_vec(&s).unwrap(), vec![3.0; N], "replay {replay}");
        }

        // While a graph holds it, `out` cannot be handed over raw: it comes back unchanged.
        let out = out.into_raw().unwrap_err();
        assert_eq!(out.len(), N);
        drop(exec);
        settle_graph_frees(m);
        assert_eq!(m.live_user_objects(), objects);
        assert_eq!(
            m.live_allocations(),
            base + 1,
            "`tmp` freed with the last graph"
        );
        assert_eq!(m.calls("cuMemFree"), frees + 1);
        assert!(!out.is_held_by_graphs());
        let (ptr, len) = out.into_raw().expect("no graph holds it any more");
        // SAFETY: handed over by `into_raw` just above.
        unsafe { DeviceBuffer::<f32>::from_raw(&ctx, ptr, len) }
            .free()
            .unwrap();
        assert_eq!(m.live_allocations(), base);
        assert_eq!(
            m.host_fn_api_calls(),
            0,
            "no CUDA call on the driver's thread"
        );
        assert_clean(m);
    });
}

/// `free` of a buffer a graph holds gives up the buffer's share and answers `Ok` at once; the
/// memory is freed when the graph goes. A buffer dropped inside the capture that tied it is not
/// freed there (the driver would refuse the wait during the capture): the graph frees it.
#[test]
fn a_buffer_freed_or_dropped_while_a_graph_holds_it_is_freed_by_the_graph() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let mut s = ctx.new_stream().unwrap();
        let base = m.live_allocations();
        let a = DeviceBuffer::<u8>::alloc(&ctx, 64).unwrap();
        let b = DeviceBuffer::<u16>::alloc(&ctx, 32).unwrap();
        let (syncs, frees) = (m.calls("cuCtxSynchronize"), m.calls("cuMemFree"));
        let graph = s
            .capture(CaptureMode::ThreadLocal, |cap| {
                a.fill(&cap, 0x5a)?;
                b.fill(&cap, 0x0102)?;
                drop(b); // tied above: the graph frees it
                Ok(())
            })
            .unwrap();
        assert_eq!(
            m.calls("cuCtxSynchronize"),
            syncs,
            "no wait during the capture"
        );
        a.free().unwrap();
        assert_eq!(m.live_allocations(), base + 2);
        assert_eq!(m.calls("cuMemFree"), frees);
        let exec = graph.instantiate().unwrap();
        exec.launch(&s).unwrap();
        s.synchronize().unwrap();
        drop((graph, exec));
        settle_graph_frees(m);
        assert_eq!(m.live_allocations(), base);
        assert_eq!(m.calls("cuMemFree"), frees + 2);
        assert_clean(m);
    });
}

/// A kernel launched into a capture uses buffers the crate cannot see: `keep_alive_in` ties them
/// to the graph (and does nothing but ask outside a capture); `CaptureStream::keep_alive` keeps
/// any value, such as the module, for as long.
#[test]
fn keep_alive_in_ties_a_kernels_buffers_and_keep_alive_any_value() {
    let (_lock, m) = mock();
    isolated(|| {
        const N: usize = 256;
        let ctx = Context::primary(0).unwrap();
        let mut s = ctx.new_stream().unwrap();
        let base = (m.live_allocations(), m.live_modules());
        let module = std::sync::Arc::new(Module::from_ptx(&ctx, PTX).unwrap());
        let host_x: Vec<f32> = (0..N).map(|i| i as f32).collect();
        let x = DeviceBuffer::from_host(&ctx, &s, &host_x).unwrap();
        let y = DeviceBuffer::<f32>::zeroed(&ctx, &s, N).unwrap();
        let z = DeviceBuffer::<f32>::zeroed(&ctx, &s, N).unwrap();

        // Outside a capture: one `cuStreamIsCapturing`, nothing tied.
        let (asks, infos, objects) = (
            m.calls("cuStreamIsCapturing"),
            m.calls("cuStreamGetCaptureInfo_v3"),
            m.live_user_objects(),
        );
        x.keep_alive_in(&s).unwrap();
        z.fill(&s, 0.0).unwrap();
        assert_eq!(m.calls("cuStreamIsCapturing"), asks + 2);
        assert_eq!(
            m.calls("cuStreamGetCaptureInfo_v3"),
            infos,
            "no more on the hot path"
        );
        assert_eq!(m.live_user_objects(), objects);
        assert!(!x.is_held_by_graphs());
        let s1 = Context::primary(1).unwrap().new_stream().unwrap();
        assert!(matches!(
            x.keep_alive_in(&s1),
            Err(Error::ContextMismatch { .. })
        ));

        let graph = s
            .capture(CaptureMode::ThreadLocal, |cap| {
                let saxpy = module.function("saxpy")?;
                cap.keep_alive(module.clone())?;
                x.keep_alive_in(&cap)?;
                y.keep_alive_in(&cap)?;
                y.fill(&cap, 1.0)?;
                let n = N as u32;
                // SAFETY: saxpy takes (u32, f32, pointer, pointer); `x` and `y` hold N floats
                // and are tied to the graph above, as is the module.
                unsafe {
                    saxpy.launch(
                        &cap,
                        LaunchConfig::for_elements(n, 64),
                        &kernel_args![n, 2.0f32, x.device_ptr(), y.device_ptr()],
                    )
                }?;
                z.copy_from(&cap, &y)
            })
            .unwrap();
        assert_eq!(m.live_user_objects(), objects + 5);
        drop((x, y));
        let module = std::sync::Arc::into_inner(module);
        assert!(module.is_none(), "the graph holds the module");
        let exec = graph.instantiate().unwrap();
        drop(graph);
        let expected: Vec<f32> = host_x.iter().map(|v| 2.0 * v + 1.0).collect();
        for replay in 1..=2 {
            z.fill(&s, 0.0).unwrap();
            exec.launch(&s).unwrap();
            assert_eq!(z.to_vec(&s).unwrap(), expected, "replay {replay}");
        }
        assert_eq!(m.live_allocations(), base.0 + 3);
        drop(exec);
        settle_graph_frees(m);
        assert_eq!(m.live_user_objects(), objects);
        assert_eq!(
            (m.live_allocations(), m.live_modules()),
            (base.0 + 1, base.1),
            "`x`, `y` and the module went with the last graph"
        );
        drop(z);
        assert_eq!(m.live_allocations(), base.0);
        assert_clean(m);
    });
}

/// Begins a capture on `s` with raw calls, as a framework would (thread-local mode).
fn raw_begin(s: cuda_stream::ffi::CUstream) {
    let mode = cuda_stream::ffi::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    // SAFETY: a live stream.
    assert_eq!(unsafe { cuda_sys::cuStreamBeginCapture(s, mode) }, SUCCESS);
}

/// Ends the raw capture of `s`: the driver's answer and the graph (null on failure).
fn raw_end(s: cuda_stream::ffi::CUstream) -> (CUresult, cuda_stream::ffi::CUgraph) {
    let mut graph = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; the capture was begun on this thread.
    let rc = unsafe { cuda_sys::cuStreamEndCapture(s, &mut graph) };
    (rc, graph)
}

/// On a stream borrowed in a capture that other code began (as PyTorch's `torch.cuda.graph`
/// does), `fill` and `copy_from` find the capture's graph themselves and tie the buffers to it;
/// an invalidated capture is an error, and ties nothing.
#[test]
fn fills_on_a_borrowed_stream_in_a_capture_begun_raw_tie_to_its_graph() {
    let (_lock, m) = mock();
    isolated(|| {
        let ctx = Context::primary(0).unwrap();
        let owner = ctx.new_stream().unwrap();
        let raw = owner.raw();
        let base = m.live_allocations();
        let buf = DeviceBuffer::<u32>::alloc(&ctx, 16).unwrap();
        let out = DeviceBuffer::<u32>::zeroed(&ctx, &owner, 16).unwrap();
        owner.synchronize().unwrap();
        let objects = m.live_user_objects();

        raw_begin(raw);
        {
            // SAFETY: `owner` keeps the stream alive while the view is used.
            let view = unsafe { Stream::borrow_raw(raw, &owner) }.unwrap();
            buf.fill(&view, 0xdead_beef).unwrap();
            out.copy_from(&view, &buf).unwrap();
            assert_eq!(m.live_user_objects(), objects + 2);
        }
        let (rc, graph) = raw_end(raw);
        assert_eq!(rc, SUCCESS);
        // SAFETY: the capture handed the graph over; its work is of `ctx`, and the memory its
        // nodes use is held by the graph's user objects.
        let graph = unsafe { cuda_stream::Graph::from_raw(graph, &ctx) }.unwrap();
        drop(buf);
        let exec = graph.instantiate().unwrap();
        drop(graph);
        exec.launch(&owner).unwrap();
        assert_eq!(out.to_vec(&owner).unwrap(), [0xdead_beef; 16]);
        drop(exec);
        settle_graph_frees(m);
        assert_eq!(m.live_allocations(), base + 1);

        // An invalidated capture (a stream callback is unsupported in one) stays an error.
        raw_begin(raw);
        {
            // SAFETY: as above.
            let view = unsafe { Stream::borrow_raw(raw, &owner) }.unwrap();
            assert!(view.add_callback(|_| ()).is_err());
            match out.fill(&view, 1) {
                Err(Error::NotCapturing {
                    status: cuda_stream::CaptureStatus::Invalidated { .. },
                }) => {}
                other => panic!("a fill into an invalidated capture: {other:?}"),
            }
            assert!(matches!(
                out.copy_from(&view, &out),
                Err(Error::NotCapturing { .. })
            ));
            assert!(matches!(
                out.keep_alive_in(&view),
                Err(Error::NotCapturing { .. })
            ));
            assert_eq!(m.live_user_objects(), objects, "nothing tied");
        }
        let (rc, graph) = raw_end(raw);
        assert_eq!(rc, CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        assert!(graph.is_null());
        assert!(!out.is_held_by_graphs());
        drop(out);
        assert_eq!(m.live_allocations(), base);
        assert_clean(m);
    });
}
