//! Modules, kernel launches and device memory through `cuda-stream`'s own API, on the GPU:
//! PTX JIT-compiled from a string and a cubin linked by the driver, launches on two streams
//! ordered by an event, on every default stream, without a current context, with dynamic
//! shared memory; memsets and copies that round-trip; what is refused before the driver sees
//! it; drops that wait for the work still using the memory or the module, also when made
//! inside a host function (queued, then made on an ordinary thread); and kernels, memsets and
//! copies captured into a graph (on two forks) and replayed.

use std::error::Error as _;
use std::ffi::{CString, c_void};
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use cuda_stream::ffi::CUresult;
use cuda_stream::{
    AsStream, CaptureMode, Context, DeviceBuffer, Enqueue, Error, EventOptions, Function,
    JitOptions, LaunchConfig, Module, Stream, StreamOptions, deferred_failed, drain_deferred,
    kernel_args,
};
use cuda_stream_tests::{
    Kernels, RawContext, Window, alone, alongside_others, bind, check, current_context,
    error_chain, gpu, raw_stream_create, raw_stream_destroy, set_current_context, sys,
};

/// `y[i] = a * x[i] + y[i]` for `i < n`, and `reverse`: each block reverses its `blockDim.x`
/// values of `p` through dynamic shared memory.
const PTX: &str = r#"
.version 7.0
.target sm_50
.address_size 64

.extern .shared .align 4 .b8 smem[];

.visible .entry saxpy(
    .param .u32 saxpy_n,
    .param .f32 saxpy_a,
    .param .u64 saxpy_x,
    .param .u64 saxpy_y
)
{
    .reg .pred  %p<2>;
    .reg .b32   %r<6>;
    .reg .f32   %f<5>;
    .reg .b64   %rd<8>;

    ld.param.u32        %r1, [saxpy_n];
    ld.param.f32        %f1, [saxpy_a];
    ld.param.u64        %rd1, [saxpy_x];
    ld.param.u64        %rd2, [saxpy_y];
    mov.u32             %r2, %ctaid.x;
    mov.u32             %r3, %ntid.x;
    mov.u32             %r4, %tid.x;
    mad.lo.s32          %r5, %r2, %r3, %r4;
    setp.ge.u32         %p1, %r5, %r1;
    @%p1 bra            $L_done;
    cvta.to.global.u64  %rd3, %rd1;
    cvta.to.global.u64  %rd4, %rd2;
    mul.wide.u32        %rd5, %r5, 4;
    add.s64             %rd6, %rd3, %rd5;
    add.s64             %rd7, %rd4, %rd5;
    ld.global.f32       %f2, [%rd6];
    ld.global.f32       %f3, [%rd7];
    fma.rn.f32          %f4, %f1, %f2, %f3;
    st.global.f32       [%rd7], %f4;
$L_done:
    ret;
}

.visible .entry reverse(
    .param .u64 reverse_p
)
{
    .reg .b32   %r<8>;
    .reg .b64   %rd<10>;

    ld.param.u64        %rd1, [reverse_p];
    cvta.to.global.u64  %rd2, %rd1;
    mov.u32             %r1, %tid.x;
    mov.u32             %r2, %ntid.x;
    mov.u32             %r3, %ctaid.x;
    mad.lo.s32          %r4, %r3, %r2, %r1;
    mul.wide.u32        %rd3, %r4, 4;
    add.s64             %rd4, %rd2, %rd3;
    ld.global.u32       %r5, [%rd4];
    mov.u64             %rd5, smem;
    mul.wide.u32        %rd6, %r1, 4;
    add.s64             %rd7, %rd5, %rd6;
    st.shared.u32       [%rd7], %r5;
    bar.sync            0;
    sub.s32             %r6, %r2, %r1;
    sub.s32             %r6, %r6, 1;
    mul.wide.u32        %rd8, %r6, 4;
    add.s64             %rd9, %rd5, %rd8;
    ld.shared.u32       %r7, [%rd9];
    st.global.u32       [%rd4], %r7;
    ret;
}
"#;

const SPIN: Duration = Duration::from_millis(200);

/// Loads [`PTX`], printing the JIT log if the driver refuses it.
fn module(ctx: &Context) -> Module {
    Module::from_ptx(ctx, PTX).unwrap_or_else(|e| panic!("{}", error_chain(&e)))
}

/// Enqueues `y = a * x + y` over `n` floats at raw addresses, on a stream or into a capture.
///
/// # Safety
/// `x` and `y` hold `n` floats of `f`'s context and outlive the work.
unsafe fn saxpy(s: impl Enqueue, f: &Function<'_>, n: usize, a: f32, x: u64, y: u64) {
    let n = n as u32;
    // SAFETY: `saxpy` takes (u32, f32, pointer, pointer); the caller vouches for the memory.
    unsafe {
        f.launch(
            &s,
            LaunchConfig::for_elements(n, 256),
            &kernel_args![n, a, x, y],
        )
    }
    .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
}

fn ramp(n: usize) -> Vec<f32> {
    (0..n).map(|i| (i % 1000) as f32).collect()
}

#[test]
fn a_module_from_ptx_has_its_kernels_and_their_attributes() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    let m = Module::from_ptx_with(&ctx, PTX, JitOptions::new().verbose(true))
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    // The driver's JIT cache (~/.nv/ComputeCache) answers a PTX it compiled before without
    // compiling, and then writes no log: the log's plumbing is checked against the test driver.
    println!(
        "JIT info log ({} bytes): {}",
        m.info_log().len(),
        m.info_log()
    );
    let f = m.function("saxpy").unwrap();
    assert_eq!(f.context_raw(), ctx.raw());
    let max = f.max_threads_per_block();
    assert!((1..=1024).contains(&max), "{max}");
    let regs = f.registers().unwrap();
    assert!(regs > 0, "{regs}");
    let ptx = f.ptx_version().unwrap();
    assert!(ptx > 0, "{ptx}");
    let major = ctx
        .device()
        .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
        .unwrap();
    assert_eq!(
        f.binary_version().unwrap() / 10,
        major as u32,
        "JIT for this GPU"
    );
    assert_eq!(f.static_shared_memory().unwrap(), 0);
    assert_eq!(f.max_dynamic_shared_memory().unwrap(), 48 * 1024);
    println!(
        "saxpy: {regs} registers, {max} threads a block, PTX version {ptx}, sm_{}",
        f.binary_version().unwrap()
    );
    let err = m.function("nope").unwrap_err();
    assert!(
        matches!(&err, Error::FunctionNotFound { name } if name == "nope"),
        "{err:?}"
    );
}

#[test]
fn a_bad_module_fails_with_the_jit_log() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    let bad = ".version 7.0\n.target sm_50\n.address_size 64\n\
               .visible .entry broken()\n{\n\tbogus.instruction %r1;\n\tret;\n}\n";
    let err = Module::from_ptx(&ctx, bad).unwrap_err();
    println!("{}", error_chain(&err));
    assert_eq!(err.call(), Some("cuModuleLoadDataEx"), "{err:?}");
    assert_eq!(err.driver_code(), Some(CUresult::CUDA_ERROR_INVALID_PTX));
    let log = err.source().expect("the JIT log").to_string();
    assert!(
        log.to_lowercase().contains("error"),
        "the JIT error log says what is wrong: {log}"
    );
    // Obvious truncation never reaches the driver.
    // SAFETY: refused before the driver reads it.
    let err = unsafe { Module::from_image(&ctx, b"\x7fELF\x02\x01\x01\0") }.unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
}

#[test]
fn two_streams_ordered_by_an_event_compute_saxpy() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    let m = module(&ctx);
    let f = m.function("saxpy").unwrap();
    let k = Kernels::load(&ctx);
    let range = ctx.priority_range().unwrap();
    let high = ctx
        .new_stream_with(StreamOptions::new().priority(range.greatest()))
        .unwrap();
    let low = ctx
        .new_stream_with(StreamOptions::new().priority(range.least()))
        .unwrap();
    const N: usize = 3 << 20;
    let host_x = ramp(N);
    let x = DeviceBuffer::from_host(&ctx, &low, &host_x).unwrap();
    let y = DeviceBuffer::<f32>::alloc(&ctx, N).unwrap();
    y.fill(&low, 1.0).unwrap();
    let ready = low.record_event().unwrap();

    // `high` computes y = 2x + 1 late (after a spin); `low` waits for it, then y = y - x.
    let timed = EventOptions::new().timing(true);
    high.wait_event(&ready).unwrap();
    k.spin(&high, SPIN);
    let start = high.record_event_with(timed).unwrap();
    // SAFETY: `x` and `y` hold N floats and outlive the work (their drops wait for it).
    unsafe { saxpy(high.as_stream(), &f, N, 2.0, x.device_ptr(), y.device_ptr()) };
    let end = high.record_event_with(timed).unwrap();
    low.wait_event(&end).unwrap();
    let w = Window::start(SPIN);
    // SAFETY: as above.
    unsafe { saxpy(low.as_stream(), &f, N, -1.0, x.device_ptr(), y.device_ptr()) };
    let done = low.query().unwrap();
    w.assert_pending(!done, "low waits for high's spin");

    let got = y.to_vec(&low).unwrap();
    let wrong = (0..N).filter(|&i| got[i] != host_x[i] + 1.0).count();
    assert_eq!(wrong, 0, "{wrong} of {N} wrong; y[1] = {}", got[1]);
    let t = end.elapsed_since(&start).unwrap();
    println!("saxpy over {N} floats on the high-priority stream: {t:?}");
}

#[test]
fn buffers_round_trip_through_memsets_and_copies() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    let s = ctx.new_stream().unwrap();
    let a = DeviceBuffer::<u32>::zeroed(&ctx, &s, 1000).unwrap();
    assert_eq!(a.to_vec(&s).unwrap(), vec![0; 1000]);
    a.fill(&s, 0xdead_beef).unwrap();
    assert_eq!(a.to_vec(&s).unwrap(), vec![0xdead_beef; 1000]);
    let host: Vec<u32> = (0..1000).collect();
    let b = DeviceBuffer::from_host(&ctx, &s, &host).unwrap();
    a.copy_from(&s, &b).unwrap();
    let mut back = vec![0u32; 1000];
    a.copy_to_host(&s, &mut back).unwrap();
    assert_eq!(back, host);
    a.copy_from_host(&s, &vec![7; 1000]).unwrap();
    assert_eq!(a.to_vec(&s).unwrap(), vec![7; 1000]);

    let bytes = DeviceBuffer::<u8>::alloc(&ctx, 333).unwrap();
    bytes.fill(&s, 0x5a).unwrap();
    assert_eq!(bytes.to_vec(&s).unwrap(), vec![0x5a; 333]);
    let halves = DeviceBuffer::<u16>::alloc(&ctx, 333).unwrap();
    halves.fill(&s, 0x1234).unwrap();
    assert_eq!(halves.to_vec(&s).unwrap(), vec![0x1234; 333]);
    let doubles = DeviceBuffer::<f64>::alloc(&ctx, 100).unwrap();
    doubles.fill(&s, 0.0).unwrap();
    assert_eq!(doubles.to_vec(&s).unwrap(), vec![0.0; 100]);

    // The raw functions at offsets inside a buffer.
    let raw = DeviceBuffer::<u8>::zeroed(&ctx, &s, 64).unwrap();
    let p = raw.device_ptr();
    let mut out = [0u8; 64];
    // SAFETY: every range lies inside `raw`, which outlives the work; the host slices are
    // untouched until the stream is synchronised.
    unsafe {
        cuda_stream::memset_d8_async(&s, p, 0x11, 16).unwrap();
        cuda_stream::memset_d16_async(&s, p + 16, 0x2233, 8).unwrap();
        cuda_stream::memset_d32_async(&s, p + 32, 0x4455_6677, 4).unwrap();
        cuda_stream::memcpy_dtod_async(&s, p + 48, p, 8).unwrap();
        cuda_stream::memcpy_htod_async(&s, p + 56, &[1u8, 2, 3, 4, 5, 6, 7, 8]).unwrap();
        cuda_stream::memcpy_dtoh_async(&s, &mut out, p).unwrap();
    }
    s.synchronize().unwrap();
    let mut expected = vec![0x11u8; 16];
    expected.extend([0x33, 0x22].repeat(8));
    expected.extend([0x77, 0x66, 0x55, 0x44].repeat(4));
    expected.extend([0x11; 8]);
    expected.extend([1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(out.to_vec(), expected);

    // The async buffer copies, waited for by hand.
    let mut back = vec![0u32; 1000];
    // SAFETY: the host slices are untouched until the stream is synchronised.
    unsafe {
        a.copy_from_host_async(&s, &host).unwrap();
        a.copy_to_host_async(&s, &mut back).unwrap();
    }
    s.synchronize().unwrap();
    assert_eq!(back, host);
}

#[test]
fn a_kernel_runs_on_each_default_stream_from_a_thread_without_a_context() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    let m = module(&ctx);
    let f = m.function("saxpy").unwrap();
    const N: usize = 100_000;
    let host_x = ramp(N);
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                assert!(current_context().is_null());
                for (name, s) in [
                    ("legacy", ctx.legacy_stream()),
                    ("per-thread", ctx.per_thread_stream()),
                    ("null", ctx.null_stream()),
                ] {
                    let x = DeviceBuffer::from_host(&ctx, s, &host_x).unwrap();
                    let y = DeviceBuffer::<f32>::zeroed(&ctx, &s, N).unwrap();
                    // SAFETY: `x` and `y` hold N floats and outlive the work.
                    unsafe { saxpy(s, &f, N, 3.0, x.device_ptr(), y.device_ptr()) };
                    let got = y.to_vec(s).unwrap();
                    assert!(
                        (0..N).all(|i| got[i] == 3.0 * host_x[i]),
                        "{name}: wrong results"
                    );
                    assert!(
                        current_context().is_null(),
                        "{name}: left a context current"
                    );
                }
            })
            .join()
            .unwrap();
    });
}

#[test]
fn a_kernel_runs_on_an_explicit_stream_whatever_context_is_current() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    let m = module(&ctx);
    let f = m.function("saxpy").unwrap();
    let other = RawContext::create(ctx.device());
    const N: usize = 100_000;
    let host_x = ramp(N);
    let s = ctx.new_stream().unwrap();
    let x = DeviceBuffer::from_host(&ctx, &s, &host_x).unwrap();
    let y = DeviceBuffer::<f32>::zeroed(&ctx, &s, N).unwrap();
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                // No context current: the launch goes by the stream's context.
                assert!(current_context().is_null());
                // SAFETY: `x` and `y` hold N floats and outlive the work.
                unsafe { saxpy(s.as_stream(), &f, N, 1.0, x.device_ptr(), y.device_ptr()) };
                assert!(current_context().is_null());
                // Another context current: the memset and the launch still go to `s`.
                set_current_context(Some(&other));
                y.fill(&s, 0.0).unwrap();
                // SAFETY: as above.
                unsafe { saxpy(s.as_stream(), &f, N, 1.0, x.device_ptr(), y.device_ptr()) };
                assert_eq!(current_context(), other.raw());
                set_current_context(None);
            })
            .join()
            .unwrap();
    });
    let got = y.to_vec(&s).unwrap();
    assert!(
        (0..N).all(|i| got[i] == host_x[i]),
        "y = x + 0 after the fill"
    );
}

#[test]
fn a_launch_on_a_stream_of_another_context_is_refused() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    let m = module(&ctx);
    let f = m.function("saxpy").unwrap();
    let other = RawContext::create(ctx.device());
    let raw = raw_stream_create(&other, sys::CUstream_flags::CU_STREAM_NON_BLOCKING.0);
    {
        // SAFETY: `raw` lives until the destroy below, after the view is gone.
        let s = unsafe { Stream::borrow_raw(raw, &other) }.unwrap();
        assert_eq!(s.context_raw(), other.raw());
        let y = DeviceBuffer::<f32>::zeroed(&ctx, &ctx.legacy_stream(), 16).unwrap();
        // SAFETY: refused before the driver is called.
        let err = unsafe {
            f.launch(
                &s,
                LaunchConfig::new(1, 16),
                &kernel_args![16u32, 1.0f32, 0u64, y.device_ptr()],
            )
        }
        .unwrap_err();
        assert!(
            matches!(
                err,
                Error::ContextMismatch {
                    what: "the kernel's module"
                }
            ),
            "{err:?}"
        );
        // Safe buffer operations refuse it too.
        assert!(matches!(
            y.fill(&s, 1.0),
            Err(Error::ContextMismatch { .. })
        ));
        s.synchronize().unwrap();
    }
    // SAFETY: created above; the view is gone.
    unsafe { raw_stream_destroy(raw) };
}

#[test]
fn a_launch_with_dynamic_shared_memory() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    let m = module(&ctx);
    let reverse = m.function("reverse").unwrap();
    let s = ctx.new_stream().unwrap();
    let host: Vec<u32> = (0..512).collect();
    let p = DeviceBuffer::from_host(&ctx, &s, &host).unwrap();
    let launch = |shared: u32| {
        let config = LaunchConfig::new(2, 256).shared_memory(shared);
        // SAFETY: `reverse` takes a pointer to grid * block u32s, which `p` holds, and uses
        // 4 * block bytes of dynamic shared memory.
        unsafe { reverse.launch(&s, config, &kernel_args![p.device_ptr()]) }
    };
    launch(1024).unwrap();
    let got = p.to_vec(&s).unwrap();
    let expected: Vec<u32> = (0..512u32)
        .map(|i| (i / 256) * 256 + 255 - i % 256)
        .collect();
    assert_eq!(got, expected, "each block reversed its 256 values");

    // More than the default 48 KiB needs the kernel's limit raised first.
    let err = launch(64 * 1024).unwrap_err();
    assert_eq!(err.call(), Some("cuLaunchKernel"), "{err:?}");
    s.synchronize().unwrap();
    reverse.set_max_dynamic_shared_memory(64 * 1024).unwrap();
    assert_eq!(reverse.max_dynamic_shared_memory().unwrap(), 64 * 1024);
    launch(64 * 1024).unwrap();
    assert_eq!(p.to_vec(&s).unwrap(), host, "reversed twice");
}

#[test]
fn a_block_larger_than_the_kernel_allows_is_refused_before_the_driver() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    let m = module(&ctx);
    let f = m.function("saxpy").unwrap();
    let s = ctx.new_stream().unwrap();
    let too_many = f.max_threads_per_block() + 1;
    for config in [
        LaunchConfig::new(1, too_many),
        LaunchConfig::new(0, 32),
        LaunchConfig::new(1, (32, 0)),
    ] {
        // SAFETY: refused before the driver is called.
        let err =
            unsafe { f.launch(&s, config, &kernel_args![0u32, 0f32, 0u64, 0u64]) }.unwrap_err();
        assert!(matches!(err, Error::InvalidLaunch { .. }), "{err:?}");
    }
    s.synchronize().unwrap();
}

#[test]
fn dropping_a_buffer_or_a_module_waits_for_the_work_using_it() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    let s = ctx.new_stream().unwrap();
    // A late store into the buffer: the drop must not free the memory under it.
    let k = Kernels::load(&ctx);
    let buf = DeviceBuffer::<u32>::zeroed(&ctx, &s, 1).unwrap();
    let w = Window::start(SPIN);
    k.store_after_spin(&s, buf.device_ptr(), 7, SPIN);
    drop(buf);
    assert!(
        s.query().unwrap(),
        "the drop returned before the kernel finished"
    );
    println!("buffer drop waited {:?}", w.elapsed());

    // A kernel of the module still running: the unload waits for it.
    let m = Module::from_ptx(&ctx, &cuda_stream_tests::ptx_source())
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let spin = m.function("spin").unwrap();
    let ns = SPIN.as_nanos() as u64;
    let w = Window::start(SPIN);
    // SAFETY: `spin` takes one u64 (nanoseconds) and touches no memory.
    unsafe { spin.launch(&s, LaunchConfig::new(1, 1), &kernel_args![ns]) }.unwrap();
    drop(m);
    assert!(
        s.query().unwrap(),
        "the unload returned before the kernel finished"
    );
    println!("module drop waited {:?}", w.elapsed());
}

/// No CUDA call inside a host function, on the real driver: a buffer and a module dropped there,
/// and a buffer freed there, are freed later on an ordinary thread, and still only after their
/// context's work: a kernel on another stream that writes the dropped buffer is still running
/// when the host function drops it, and the drain waits for it.
#[test]
fn a_buffer_and_a_module_dropped_inside_a_host_function_are_freed_later() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    let (s, t) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let k = Kernels::load(&ctx);
    let buf = DeviceBuffer::<u32>::zeroed(&ctx, &s, 1).unwrap();
    let freed = DeviceBuffer::<u8>::alloc(&ctx, 64).unwrap();
    let m = module(&ctx);
    s.synchronize().unwrap();
    let failed = deferred_failed();
    // `t` writes the buffer late; `s`'s host function drops it meanwhile.
    let w = Window::start(SPIN);
    k.store_after_spin(&t, buf.device_ptr(), 7, SPIN);
    let (tx, rx) = mpsc::channel();
    s.launch_host_func(move || {
        drop(m);
        drop(buf);
        let _ = tx.send(freed.free());
    })
    .unwrap();
    let r = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the host function ran");
    assert!(
        matches!(r, Err(Error::InHostFunction { call: "cuMemFree" })),
        "{r:?}"
    );
    // Whoever drains (this call, or a creation in another test of this process), the frees
    // wait for the context's work; a drain returns after any drain in progress.
    drain_deferred();
    assert!(
        t.query().unwrap(),
        "the deferred free returned before the kernel writing the memory finished"
    );
    assert_eq!(
        deferred_failed(),
        failed,
        "a deferred free or unload failed"
    );
    println!("the deferred frees waited {:?}", w.elapsed());
}

#[test]
fn a_cubin_linked_by_the_driver_loads_as_an_image() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    // The driver's own linker turns the PTX into a cubin for this GPU.
    let cubin = {
        let _bound = bind(&ctx);
        let mut state = ptr::null_mut();
        // SAFETY: no options; a valid out-pointer; the context is current.
        check(
            unsafe { sys::cuLinkCreate(0, ptr::null_mut(), ptr::null_mut(), &mut state) },
            "cuLinkCreate",
        );
        let text = CString::new(PTX).unwrap();
        let name = CString::new("kernels.ptx").unwrap();
        // SAFETY: `text` is NUL-terminated and its size includes the NUL; no options.
        check(
            unsafe {
                sys::cuLinkAddData(
                    state,
                    sys::CUjitInputType::CU_JIT_INPUT_PTX,
                    text.as_ptr().cast_mut().cast::<c_void>(),
                    text.as_bytes_with_nul().len(),
                    name.as_ptr(),
                    0,
                    ptr::null_mut(),
                    ptr::null_mut(),
                )
            },
            "cuLinkAddData",
        );
        let (mut image, mut size) = (ptr::null_mut(), 0usize);
        // SAFETY: valid out-pointers; the image lives until `cuLinkDestroy`, after the copy.
        check(
            unsafe { sys::cuLinkComplete(state, &mut image, &mut size) },
            "cuLinkComplete",
        );
        // SAFETY: the driver's image of `size` bytes, copied before the state is destroyed.
        let bytes = unsafe { std::slice::from_raw_parts(image.cast::<u8>(), size) }.to_vec();
        // SAFETY: created above, destroyed once.
        check(unsafe { sys::cuLinkDestroy(state) }, "cuLinkDestroy");
        bytes
    };
    assert!(cubin.starts_with(b"\x7fELF"), "a cubin is an ELF image");
    // SAFETY: a complete cubin from the driver's linker.
    let m = unsafe { Module::from_image(&ctx, &cubin) }
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    let f = m.function("saxpy").unwrap();
    let s = ctx.new_stream().unwrap();
    let x = DeviceBuffer::from_host(&ctx, &s, &[1.0f32, 2.0, 3.0]).unwrap();
    let y = DeviceBuffer::from_host(&ctx, &s, &[10.0f32, 20.0, 30.0]).unwrap();
    // SAFETY: `x` and `y` hold 3 floats and outlive the work.
    unsafe { saxpy(s.as_stream(), &f, 3, 2.0, x.device_ptr(), y.device_ptr()) };
    assert_eq!(y.to_vec(&s).unwrap(), [12.0, 24.0, 36.0]);
    // Cut short, it is refused before the driver reads it.
    // SAFETY: refused by the header checks.
    let err = unsafe { Module::from_image(&ctx, &cubin[..cubin.len() / 2]) }.unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
}

/// Kernels on two forks of a capture, a memset before them and a copy and a host function after,
/// captured into a graph and replayed: each replay computes the same results (checked after each
/// of the first ten, with the output cleared between them), and 1,000 replays run the host
/// function 1,000 times.
///
/// Under compute-sanitizer the vectors are smaller (2^14 floats, not 2^20) and the replays fewer
/// (100): racecheck keeps host memory per thread of every replayed kernel, and at full size it
/// grew past 128 GiB in a minute and was killed (H100, driver 580).
#[test]
fn kernels_on_two_forks_and_a_copy_captured_into_a_graph_and_replayed() {
    let Some(ctx) = gpu() else { return };
    let _turn = alone();
    let tool = cuda_stream_tests::sanitizer();
    let (n, more_replays): (usize, usize) = if tool.is_some() {
        (1 << 14, 90)
    } else {
        (1 << 20, 1000)
    };
    if let Some(tool) = &tool {
        println!(
            "under compute-sanitizer {tool}: {n} floats, {} replays",
            10 + more_replays
        );
    }
    let mut s = ctx.new_stream().unwrap();
    let m = module(&ctx);
    let f = m.function("saxpy").unwrap();
    let host_x = ramp(n);
    let x = DeviceBuffer::from_host(&ctx, &s, &host_x).unwrap();
    let y = DeviceBuffer::<f32>::zeroed(&ctx, &s, n).unwrap();
    let z = DeviceBuffer::<f32>::zeroed(&ctx, &s, n).unwrap();
    let half = n / 2;
    let offset = (half * 4) as u64;
    let replays = Arc::new(AtomicUsize::new(0));
    let counter = replays.clone();
    let graph = s
        .capture(CaptureMode::ThreadLocal, |cap| {
            // SAFETY: `y` holds n floats and outlives every launch of the graph.
            unsafe { cuda_stream::memset_d32_async(&cap, y.device_ptr(), 1f32.to_bits(), n) }?;
            cap.scope(|sc| {
                let (a, b) = (sc.fork()?, sc.fork()?);
                // SAFETY: each fork touches its own half of `x` and `y`, which outlive every
                // launch of the graph.
                unsafe {
                    saxpy(a, &f, half, 2.0, x.device_ptr(), y.device_ptr());
                    saxpy(
                        b,
                        &f,
                        n - half,
                        2.0,
                        x.device_ptr() + offset,
                        y.device_ptr() + offset,
                    );
                }
                Ok(())
            })?;
            // SAFETY: `z` and `y` hold n floats and outlive every launch of the graph.
            unsafe { cuda_stream::memcpy_dtod_async(&cap, z.device_ptr(), y.device_ptr(), 4 * n) }?;
            cap.launch_host_func(move || {
                counter.fetch_add(1, Ordering::Relaxed);
            })
        })
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    // A memset, two kernels, a copy and a host function; the forks' joins add no node.
    assert_eq!(graph.node_count().unwrap(), 5);
    assert_eq!(
        z.to_vec(&s).unwrap(),
        vec![0.0; n],
        "nothing ran during the capture"
    );
    let exec = graph.instantiate().unwrap();
    let expected: Vec<f32> = host_x.iter().map(|v| 2.0 * v + 1.0).collect();
    for replay in 1..=10 {
        z.fill(&s, 0.0).unwrap();
        exec.launch(&s).unwrap();
        let got = z.to_vec(&s).unwrap();
        let wrong = (0..n).filter(|&i| got[i] != expected[i]).count();
        assert_eq!(wrong, 0, "replay {replay}: {wrong} of {n} results wrong");
    }
    let w = std::time::Instant::now();
    for _ in 0..more_replays {
        exec.launch(&s).unwrap();
    }
    s.synchronize().unwrap();
    println!(
        "{more_replays} replays of 2 kernels, a memset and a copy over {n} floats: {:?}",
        w.elapsed()
    );
    assert_eq!(replays.load(Ordering::Relaxed), 10 + more_replays);
    assert_eq!(z.to_vec(&s).unwrap(), expected);
}

/// The allocation that holds `ptr` (`cuMemGetAddressRange`): its base and size, or `None` when no
/// live allocation holds it.
fn allocation_at(ctx: &Context, ptr: u64) -> Option<(u64, usize)> {
    let _bound = bind(ctx);
    let (mut base, mut size) = (0, 0);
    // SAFETY: valid out-pointers; the context is current.
    let rc = unsafe { sys::cuMemGetAddressRange(&mut base, &mut size, ptr) };
    (rc == CUresult::CUDA_SUCCESS).then_some((base, size))
}

/// The allocation of a buffer as the driver reports it: its base is the buffer's address, and
/// it holds at least the buffer's bytes.
fn allocation_of<T: cuda_stream::DeviceCopy>(buf: &DeviceBuffer<T>) -> (u64, usize) {
    let found = allocation_at(buf.context(), buf.device_ptr());
    match found {
        Some((base, size)) if base == buf.device_ptr() && size >= buf.byte_len() => (base, size),
        other => panic!("cuMemGetAddressRange of a live buffer: {other:?}"),
    }
}

/// Drains the frees that graphs' user-object destructors queued (they run on a driver thread,
/// where no CUDA call is made), until the allocation `(base, size)` is gone; panics after 10 s.
fn wait_until_freed(ctx: &Context, (ptr, bytes): (u64, usize)) {
    let start = std::time::Instant::now();
    loop {
        drain_deferred();
        // Another test's allocation could land at the same address, but not with this
        // (deliberately odd) size as well.
        match allocation_at(ctx, ptr) {
            Some((base, size)) if base == ptr && size == bytes => {}
            _ => return,
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the allocation at {ptr:#x} was never freed after its graphs went"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The safe buffer operations inside a capture: `tmp.fill`, a kernel on `x` and `tmp` (both tied
/// with `keep_alive_in`) and `out.copy_from(&tmp)` are captured, `tmp` and `x` dropped before the
/// graph is instantiated, and every replay still computes `out = 2 x + 3` from memory the graph
/// keeps allocated; once the graph and its executable graph are gone, the memory is freed.
#[test]
fn safe_fills_copies_and_a_kernel_captured_keep_their_buffers_alive_across_replays() {
    let Some(ctx) = gpu() else { return };
    let _turn = alone();
    // An odd size, so that `wait_until_freed` recognises the allocation.
    const N: usize = (1 << 20) + 7;
    const REPLAYS: usize = 20;
    let mut s = ctx.new_stream().unwrap();
    let m = module(&ctx);
    let f = m.function("saxpy").unwrap();
    let host_x = ramp(N);
    let x = DeviceBuffer::from_host(&ctx, &s, &host_x).unwrap();
    let tmp = DeviceBuffer::<f32>::alloc(&ctx, N).unwrap();
    let out = DeviceBuffer::<f32>::zeroed(&ctx, &s, N).unwrap();
    let (tmp_alloc, x_alloc) = (allocation_of(&tmp), allocation_of(&x));
    let graph = s
        .capture(CaptureMode::ThreadLocal, |cap| {
            tmp.fill(&cap, 3.0)?;
            x.keep_alive_in(&cap)?;
            tmp.keep_alive_in(&cap)?;
            // SAFETY: `x` and `tmp` hold N floats; their free waits for the stream's work, and
            // the graph keeps them allocated for its launches (tied just above).
            unsafe { saxpy(cap, &f, N, 2.0, x.device_ptr(), tmp.device_ptr()) };
            out.copy_from(&cap, &tmp)
        })
        .unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    assert_eq!(graph.node_count().unwrap(), 3);
    drop((tmp, x));
    drain_deferred();
    assert_eq!(
        allocation_at(&ctx, tmp_alloc.0),
        Some(tmp_alloc),
        "dropped, but the graph holds it"
    );
    let exec = graph.instantiate().unwrap();
    drop(graph);
    drain_deferred();
    assert_eq!(
        allocation_at(&ctx, tmp_alloc.0),
        Some(tmp_alloc),
        "the executable graph holds it"
    );
    assert_eq!(allocation_at(&ctx, x_alloc.0), Some(x_alloc));
    let expected: Vec<f32> = host_x.iter().map(|v| 2.0 * v + 3.0).collect();
    for replay in 1..=REPLAYS {
        out.fill(&s, 0.0).unwrap();
        exec.launch(&s).unwrap();
        let got = out.to_vec(&s).unwrap();
        let wrong = (0..N).filter(|&i| got[i] != expected[i]).count();
        assert_eq!(wrong, 0, "replay {replay}: {wrong} of {N} results wrong");
    }
    assert!(out.is_held_by_graphs());
    drop(exec);
    wait_until_freed(&ctx, tmp_alloc);
    wait_until_freed(&ctx, x_alloc);
    let start = std::time::Instant::now();
    while out.is_held_by_graphs() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "`out` still held"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    println!(
        "{REPLAYS} replays of a captured fill, kernel and copy over {N} floats, from buffers \
         dropped after the capture: all results checked; their memory freed with the graph"
    );
}

/// A capture begun with raw calls on a borrowed stream (as PyTorch's `torch.cuda.graph` begins
/// one): `fill` and `copy_from` on the borrowed view find the capture's graph and tie the
/// buffers to it; the buffer dropped before the replays is still there for them.
#[test]
fn a_captured_fill_on_a_borrowed_stream_whose_capture_began_raw_is_kept_by_the_graph() {
    let Some(ctx) = gpu() else { return };
    let _turn = alone();
    const N: usize = (1 << 16) + 3;
    let s = ctx.new_stream().unwrap();
    let raw = raw_stream_create(&ctx, sys::CUstream_flags::CU_STREAM_NON_BLOCKING.0);
    let src = DeviceBuffer::<u32>::alloc(&ctx, N).unwrap();
    let out = DeviceBuffer::<u32>::zeroed(&ctx, &s, N).unwrap();
    s.synchronize().unwrap();
    let src_alloc = allocation_of(&src);
    let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    // SAFETY: a live stream.
    let rc = unsafe { sys::cuStreamBeginCapture(raw, mode) };
    assert_eq!(rc, CUresult::CUDA_SUCCESS, "cuStreamBeginCapture");
    let captured = {
        let owner = ();
        // SAFETY: `raw` lives until it is destroyed below, after the view is gone.
        let view = unsafe { Stream::borrow_raw(raw, &owner) }.unwrap();
        src.fill(&view, 0xc0ff_ee00)
            .and_then(|()| out.copy_from(&view, &src))
    };
    let mut graph = ptr::null_mut();
    // SAFETY: a valid out-pointer; the capture was begun on this thread.
    let rc = unsafe { sys::cuStreamEndCapture(raw, &mut graph) };
    captured.unwrap_or_else(|e| panic!("{}", error_chain(&e)));
    assert_eq!(rc, CUresult::CUDA_SUCCESS, "cuStreamEndCapture");
    // SAFETY: the capture handed the graph over; its work is of `ctx`, and the memory its nodes
    // use is held by the graph's user objects.
    let graph = unsafe { cuda_stream::Graph::from_raw(graph, &ctx) }.unwrap();
    assert!(src.is_held_by_graphs());
    drop(src);
    let exec = graph.instantiate().unwrap();
    drop(graph);
    drain_deferred();
    assert_eq!(
        allocation_at(&ctx, src_alloc.0),
        Some(src_alloc),
        "the executable graph holds it"
    );
    for replay in 1..=5 {
        out.fill(&s, 0).unwrap();
        exec.launch(&s).unwrap();
        assert_eq!(
            out.to_vec(&s).unwrap(),
            vec![0xc0ff_ee00; N],
            "replay {replay}"
        );
    }
    drop(exec);
    wait_until_freed(&ctx, src_alloc);
    // SAFETY: created above; no view of it is left.
    unsafe { raw_stream_destroy(raw) };
}
