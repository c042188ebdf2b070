//! Kernel launches: the argument bytes and shape the driver receives, launches refused before
//! the driver is called, and a launch on a default stream binding its context for the call only.

use cuda_mock_driver::MockLaunch;
use cuda_stream::ffi::CUresult;
use cuda_stream::{
    AsStream, Context, DeviceBuffer, Error, LaunchConfig, Module, Stream, current_context_raw,
    kernel_args,
};

use super::{PTX, assert_clean, isolated, mock};

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
                attributes: vec![],
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
