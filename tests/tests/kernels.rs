//! Modules and kernel launches through `cuda-stream`'s own API, on the GPU: PTX JIT-compiled
//! from a string and a cubin linked by the driver, launches on two streams ordered by an event,
//! on every default stream, without a current context, with dynamic shared memory; and what is
//! refused before the driver sees it. (Device buffers: `buffers.rs`; kernels in graphs:
//! `kernels_in_graphs.rs`.)

use std::error::Error as _;
use std::ffi::{CString, c_void};
use std::ptr;
use std::time::Duration;

use cuda_stream::ffi::CUresult;
use cuda_stream::{
    AsStream, DeviceBuffer, Error, EventOptions, JitOptions, LaunchConfig, Module, Stream,
    StreamOptions, kernel_args,
};
use cuda_stream_tests::{
    Kernels, RawContext, SAXPY_PTX, Window, alongside_others, bind, check, current_context,
    error_chain, gpu, ramp, raw_stream_create, raw_stream_destroy, saxpy, saxpy_module,
    set_current_context, sys,
};

const SPIN: Duration = Duration::from_millis(200);

#[test]
fn a_module_from_ptx_has_its_kernels_and_their_attributes() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    let m = Module::from_ptx_with(&ctx, SAXPY_PTX, JitOptions::new().verbose(true))
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
    let m = saxpy_module(&ctx);
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
fn a_kernel_runs_on_each_default_stream_from_a_thread_without_a_context() {
    let Some(ctx) = gpu() else { return };
    let _turn = alongside_others();
    let m = saxpy_module(&ctx);
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
                    let x = DeviceBuffer::from_host(&ctx, &s, &host_x).unwrap();
                    let y = DeviceBuffer::<f32>::zeroed(&ctx, &s, N).unwrap();
                    // SAFETY: `x` and `y` hold N floats and outlive the work.
                    unsafe { saxpy(s, &f, N, 3.0, x.device_ptr(), y.device_ptr()) };
                    let got = y.to_vec(&s).unwrap();
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
    let m = saxpy_module(&ctx);
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
    let m = saxpy_module(&ctx);
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
    let m = saxpy_module(&ctx);
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
    let m = saxpy_module(&ctx);
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
        let text = CString::new(SAXPY_PTX).unwrap();
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
